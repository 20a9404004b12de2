"""A folder of images as calibration or validation data, and the ``--preprocess`` string that turns them into tensors.

Images: ``.png/.jpg/.jpeg/.bmp`` files; when they sit in sub-folders named by integers (``data/0/a.png``,
``data/1/b.png``), those integers are the labels. The preprocessing is a string such as ``"resize=224x224
scale=1/255 mean=0.485,0.456,0.406 std=0.229,0.224,0.225 layout=nchw color=rgb"``.
"""

from pathlib import Path
from typing import Any

import numpy as np

from .errors import DataError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")


def parse_preprocess(spec: str | None) -> dict[str, Any]:
    opts: dict[str, Any] = {"resize": None, "scale": 1.0, "mean": [0.0], "std": [1.0], "layout": "nchw", "color": "rgb"}
    for item in (spec or "").split():
        key, sep, value = item.partition("=")
        if not sep or key not in opts:
            raise DataError(
                f"bad --preprocess item {item!r}: use keys {sorted(opts)}, "
                'e.g. "resize=224x224 scale=1/255 mean=0.5 std=0.5"'
            )
        try:
            if key == "resize":
                w, h = value.lower().split("x")
                opts[key] = (int(w), int(h))
                if min(opts[key]) <= 0:
                    raise ValueError
            elif key == "scale":
                num, _, den = value.partition("/")
                opts[key] = float(num) / float(den or 1)
            elif key in ("mean", "std"):
                opts[key] = [float(v) for v in value.split(",")]
            elif key == "layout":
                if value.lower() not in ("nchw", "nhwc"):
                    raise ValueError
                opts[key] = value.lower()
            else:
                if value.lower() not in ("rgb", "bgr", "gray"):
                    raise ValueError
                opts[key] = value.lower()
        except (ValueError, ZeroDivisionError):
            raise DataError(f"bad --preprocess value {item!r}") from None
    return opts


def load_images(folder: Any, specs: list, preprocess: str | None, from_arrays: Any) -> Any:
    """The images under ``folder`` as a Dataset (``from_arrays`` builds it from the stacked array)."""
    try:
        from PIL import Image
    except ImportError:
        raise DataError("reading a folder of images needs Pillow: pip install 'edgekit[images]'") from None
    if len(specs) != 1:
        raise DataError("a folder of images can only feed a single-input model; use an .npz for several inputs")
    spec = specs[0]
    opts = parse_preprocess(preprocess)
    from .tasks.labels import folder_labels, is_label_file

    files = sorted(
        p for p in Path(folder).rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and not is_label_file(p, Path(folder))
    )
    if not files:
        raise DataError(f"no images ({', '.join(IMAGE_SUFFIXES)}) found under {folder}")
    if opts["resize"] is None:
        dims = spec.shape
        if len(dims) == 4 and all(isinstance(d, int) for d in dims):
            h, w = (dims[2], dims[3]) if opts["layout"] == "nchw" else (dims[1], dims[2])
            opts["resize"] = (w, h)
        else:
            raise DataError("give the image size with --preprocess resize=WxH")
    channels = 1 if opts["color"] == "gray" else 3
    for key in ("mean", "std"):
        if len(opts[key]) not in (1, channels):
            raise DataError(f"--preprocess {key} has {len(opts[key])} values; give 1 or {channels} (one per channel)")
    if any(v == 0 for v in opts["std"]):
        raise DataError("--preprocess std must not be 0")
    arrays, labels = [], []
    for p in files:
        try:
            img = (
                Image.open(p).convert("L" if opts["color"] == "gray" else "RGB").resize(opts["resize"], Image.BILINEAR)  # type: ignore[attr-defined]
            )
        except OSError as e:  # PIL.UnidentifiedImageError is an OSError
            raise DataError(f"cannot read image {p}: {e}") from None
        a = np.asarray(img, dtype=np.float32)
        if a.ndim == 2:
            a = a[:, :, None]
        if opts["color"] == "bgr":
            a = a[:, :, ::-1]
        a = (a * opts["scale"] - np.asarray(opts["mean"], np.float32)) / np.asarray(opts["std"], np.float32)
        if opts["layout"] == "nchw":
            a = a.transpose(2, 0, 1)
        arrays.append(a)
        parent = p.parent.name
        labels.append(int(parent) if parent.isdigit() and p.parent != Path(folder) else None)
    label_array: Any = None if any(label is None for label in labels) else np.asarray(labels, np.int64)
    if label_array is None:  # COCO boxes, mask PNGs or transcripts beside the images (edgekit.tasks.labels)
        label_array = folder_labels(Path(folder), files, opts["resize"])
    ds = from_arrays({spec.name: np.stack(arrays)}, specs, f"{folder} ({len(files)} images)")
    ds.labels = label_array
    ds.meta["preprocess"] = preprocess
    return ds

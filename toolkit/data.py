"""Calibration and validation data: ``.npz``, ``.npy`` or a folder of images.

A :class:`Dataset` is a list of feeds (one sample each, batch dimension 1) plus
optional integer labels. Data that does not fit the model is refused with the shapes.

``.npz``: one array per model input, named like the input, samples along the first
axis; an optional ``labels`` array. A single-input model also takes an ``.npz`` with
one array under any name, or an ``.npy``.

Images: a folder of ``.png/.jpg/.jpeg/.bmp`` files; when they sit in sub-folders named
by integers (``data/0/a.png``, ``data/1/b.png``), those integers are the labels. The
preprocessing is a string such as ``"resize=224x224 scale=1/255 mean=0.485,0.456,0.406
std=0.229,0.224,0.225 layout=nchw color=rgb"``.
"""

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import DataError
from .model import random_inputs

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
LABEL_KEYS = ("labels", "label", "y")


@dataclass
class Dataset:
    samples: list
    labels: np.ndarray | None = None
    source: str = ""
    synthetic: bool = False
    meta: dict = field(default_factory=dict)

    def __len__(self):
        return len(self.samples)

    def describe(self):
        kind = "synthetic random inputs" if self.synthetic else self.source
        return {"source": kind, "samples": len(self), "labels": self.labels is not None, "synthetic": self.synthetic}


def _split(name, array, spec):
    shape = [d if isinstance(d, int) else None for d in spec.shape]
    if array.dtype != np.dtype(spec.dtype):
        if np.issubdtype(array.dtype, np.floating) and spec.dtype.startswith("float"):
            array = array.astype(spec.dtype)
        else:
            raise DataError(
                f"data for input {spec.name!r} ({name}) has dtype {array.dtype}, the model wants {spec.dtype}"
            )
    per_sample = shape[1:] if shape and shape[0] == 1 else shape
    if list(array.shape[1:]) == per_sample or (
        len(array.shape) == len(per_sample) + 1
        and all(p is None or p == a for p, a in zip(per_sample, array.shape[1:]))
    ):
        return [array[i : i + 1] if shape and shape[0] == 1 else array[i] for i in range(array.shape[0])]
    if list(array.shape) == shape:
        return [array]
    raise DataError(
        f"data for input {spec.name!r} ({name}) has shape {list(array.shape)}; "
        f"expected [N, {', '.join(str(d) for d in per_sample)}] "
        f"(N samples of the model's input {spec.shape}). Fix the data or pass --input-shape"
    )


def _from_arrays(arrays, specs, source):
    labels = None
    for key in LABEL_KEYS:
        if key in arrays:
            raw = np.asarray(arrays.pop(key))
            if raw.dtype.kind not in "iub" and not (raw.dtype.kind == "f" and np.all(np.mod(raw, 1) == 0)):
                raise DataError(f"{source}: '{key}' must hold integer class indices, it has dtype {raw.dtype}")
            labels = raw.astype(np.int64).reshape(-1)
            break
    names = [s.name for s in specs]
    if len(specs) == 1 and len(arrays) == 1 and names[0] not in arrays:
        arrays = {names[0]: next(iter(arrays.values()))}
    missing = [n for n in names if n not in arrays]
    if missing:
        raise DataError(
            f"{source} has arrays {sorted(arrays)} but the model's inputs are {names}; "
            f"name the arrays after the inputs (missing: {missing})"
        )
    for s in specs:
        a = np.asarray(arrays[s.name])
        if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
            raise DataError(f"{source}: input {s.name!r} contains NaN or Inf values; clean the data first")
    per_input = {s.name: _split(s.name, np.asarray(arrays[s.name]), s) for s in specs}
    counts = {n: len(v) for n, v in per_input.items()}
    if len(set(counts.values())) != 1:
        raise DataError(f"{source}: inputs have different sample counts {counts}")
    n = next(iter(counts.values()))
    if n == 0:
        raise DataError(f"{source} holds no samples")
    if labels is not None and len(labels) != n:
        raise DataError(f"{source}: {len(labels)} labels for {n} samples")
    samples = [{name: per_input[name][i] for name in names} for i in range(n)]
    return Dataset(samples, labels, source)


def parse_preprocess(spec):
    opts = {"resize": None, "scale": 1.0, "mean": [0.0], "std": [1.0], "layout": "nchw", "color": "rgb"}
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


def _load_images(folder, specs, preprocess):
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
                Image.open(p).convert("L" if opts["color"] == "gray" else "RGB").resize(opts["resize"], Image.BILINEAR)
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
    label_array = None if any(label is None for label in labels) else np.asarray(labels, np.int64)
    if label_array is None:  # COCO boxes, mask PNGs or transcripts beside the images (edgekit.tasks.labels)
        label_array = folder_labels(Path(folder), files, opts["resize"])
    ds = _from_arrays({spec.name: np.stack(arrays)}, specs, f"{folder} ({len(files)} images)")
    ds.labels = label_array
    ds.meta["preprocess"] = preprocess
    return ds


def load_dataset(path, specs, preprocess=None, limit=None):
    path = Path(path)
    if not path.exists():
        raise DataError(f"data not found: {path}")
    if path.is_dir():
        ds = _load_images(path, specs, preprocess)
    elif path.suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except (OSError, ValueError) as e:
            raise DataError(f"cannot read {path} as .npz: {e}") from None
        ds = _from_arrays(arrays, specs, str(path))
    elif path.suffix == ".npy":
        try:
            array = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise DataError(f"cannot read {path} as .npy: {e}") from None
        if len(specs) != 1:
            raise DataError(
                f"{path}: an .npy feeds a single-input model; "
                f"this one has inputs {[s.name for s in specs]}; use an .npz"
            )
        ds = _from_arrays({specs[0].name: array}, specs, str(path))
    else:
        raise DataError(f"unsupported data file {path}: use .npz, .npy or a folder of images")
    if limit and len(ds) > limit:
        ds.samples = ds.samples[:limit]
        if ds.labels is not None:
            ds.labels = ds.labels[:limit]
    return ds


def synthetic_dataset(specs, n=8, seed=0):
    return Dataset(random_inputs(specs, n, seed), None, "synthetic", synthetic=True)


def save_samples(dataset, path, count=1):
    """Save the first samples (batch dimension kept) as an .npz the agent can feed."""
    names = list(dataset.samples[0])
    arrays = {
        n: np.concatenate([s[n] for s in dataset.samples[:count]]) if count > 1 else dataset.samples[0][n]
        for n in names
    }
    np.savez(path, **arrays)
    return Path(path)


def int8_needs_calibration(backend: str, precisions: "list[str] | tuple[str, ...]") -> str:
    """The error for an int8 build with no ``--calib``: what int8 needs, how to make some, what else to choose."""
    others = "/".join(p for p in ("fp16", "fp32") if p in precisions) or "fp32"
    return (
        f"--precision int8 ({backend}) needs calibration data from your domain, and no --calib was given. "
        "Make some: for the example model, `python examples/textlines.py -n 200 -o calib.npz` then "
        "--calib calib.npz; for your own model, an .npz with ~100-300 samples in arrays named like its inputs, "
        'or --calib DIR (a folder of images) with --preprocess (e.g. "resize=224x224 scale=1/255"). '
        f"Or choose --precision {others}."
    )

"""Calibration and validation data: ``.npz``, ``.npy``, a folder of images, a folder of ``.npz``, ``.jsonl``.

A :class:`Dataset` is a list of feeds (one sample each: ``{input: ndarray}`` with the model's dtype and rank, a
0-d input a 0-d array) plus optional integer labels. Data that does not fit the model is refused with the shapes.
docs/INPUTS.md describes every format.

``.npz``: one array per model input, named like the input, samples along the first axis (or the axis given with
``sample_axes``/``--sample-axis NAME=AXIS``); an array with exactly the input's own shape (a 0-d ``sr``) is fed
with every sample; an optional ``labels`` array (``label``/``y`` too, unless the model has an input of that name).
A single-input model also takes an ``.npz`` with one array under any name, or an ``.npy``.

A folder of ``.npz`` files or a ``.jsonl`` file: one sample each (:mod:`edgekit.data_formats`). A folder of
images: :mod:`edgekit.data_images`. ``input_values`` (``--input-value NAME=VALUE``) gives an input missing from
the data once, for every sample.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .data_formats import as_feed, cast, fill_constant, read_jsonl, read_npz_dir, records_to_samples
from .data_images import IMAGE_SUFFIXES, load_images, parse_preprocess
from .errors import DataError
from .model import integer_ranges, random_inputs

__all__ = ["IMAGE_SUFFIXES", "LABEL_KEYS", "Dataset", "load_dataset", "parse_preprocess", "synthetic_dataset"]
LABEL_KEYS = ("labels", "label", "y")


@dataclass
class Dataset:
    samples: list
    labels: np.ndarray | None = None
    source: str = ""
    synthetic: bool = False
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.samples)

    def describe(self) -> dict[str, Any]:
        kind = "synthetic random inputs" if self.synthetic else self.source
        out = {"source": kind, "samples": len(self), "labels": self.labels is not None, "synthetic": self.synthetic}
        if self.synthetic and self.meta.get("non_float_inputs"):
            out["non_float_inputs"] = self.meta["non_float_inputs"]  # how the integer and bool inputs were drawn
        return out


def _per_sample(array: np.ndarray, spec: Any, axis: int, source: str) -> tuple[list[np.ndarray] | None, int]:
    """Split ``array`` into the input's samples along ``axis``; ``(None, 1)`` for a value given once (an array of
    exactly the input's own shape with no sample axis, such as a 0-d ``sr``): it is fed with every sample."""
    rank = len(spec.shape)
    where = f"{source}: {spec.name!r}"
    array = cast(spec, array, source)
    if array.ndim == rank + 1 and axis <= rank:
        keep = False
    elif array.ndim == rank and axis < rank and spec.shape[axis] == 1:
        keep = True  # the model's batch axis of 1 holds the samples: [N, C, H, W] for [1, C, H, W]
    elif array.ndim == rank and axis == 0 and _matches(array.shape, spec.shape):
        return None, 1
    else:
        keep = None
    if keep is not None:
        rest = [d for i, d in enumerate(array.shape) if i != axis]
        want = [d for i, d in enumerate(spec.shape) if not (keep and i == axis)]
        if _matches(rest, want):
            n = array.shape[axis]
            lead = (slice(None),) * axis
            if keep:
                return [array[lead + (slice(i, i + 1), Ellipsis)].copy() for i in range(n)], n
            return [array[lead + (i, Ellipsis)].copy() for i in range(n)], n  # 0-d stays an array
    expected = [str(d) for d in spec.shape]
    if axis < len(expected) and spec.shape[axis] == 1:
        expected[axis] = "N"  # the model's batch axis of 1 holds the samples
    else:
        expected.insert(min(axis, len(expected)), "N")
    hint = "" if axis else " or --sample-axis NAME=AXIS if the samples are not along the first axis"
    raise DataError(
        f"data for input {spec.name!r} ({where}) has shape {list(array.shape)}; "
        f"expected [{', '.join(expected)}] (N samples of the model's input {spec.shape}). "
        f"Fix the data{hint}, or pass --input-shape"
    )


def _matches(got: Any, want: Any) -> bool:
    return len(got) == len(want) and all(not isinstance(w, int) or w == g for g, w in zip(got, want))


def _from_arrays(
    arrays: dict[str, Any],
    specs: list,
    source: str,
    sample_axes: dict[str, int] | None = None,
    input_values: dict[str, Any] | None = None,
) -> Dataset:
    """Samples from named arrays (an ``.npz``): one array per input, samples along axis 0 or ``sample_axes``."""
    names = [s.name for s in specs]
    sample_axes = dict(sample_axes or {})
    input_values = dict(input_values or {})
    labels = None
    for key in LABEL_KEYS:
        if key in arrays and key not in names:
            raw = np.asarray(arrays.pop(key))
            if raw.dtype.kind not in "iub" and not (raw.dtype.kind == "f" and np.all(np.mod(raw, 1) == 0)):
                raise DataError(f"{source}: '{key}' must hold integer class indices, it has dtype {raw.dtype}")
            labels = raw.astype(np.int64).reshape(-1)
            break
    if len(specs) == 1 and len(arrays) == 1 and names[0] not in arrays:
        arrays = {names[0]: next(iter(arrays.values()))}
    missing = [n for n in names if n not in arrays and n not in input_values]
    if missing:
        raise DataError(
            f"{source} has arrays {sorted(arrays)} but the model's inputs are {names}; "
            f"name the arrays after the inputs (missing: {missing}; a value the same for every sample, "
            "such as a sample rate: --input-value NAME=VALUE)"
        )
    both = sorted(n for n in input_values if n in arrays and n in names)
    if both:
        raise DataError(f"{source} holds {both} and --input-value gives them too: drop one of the two")
    unknown_axes = sorted(set(sample_axes) - set(names))
    if unknown_axes:
        raise DataError(f"--sample-axis names {unknown_axes} but the model's inputs are {names}")
    per_input, once = {}, {}
    for s in specs:
        if s.name not in arrays:
            once[s.name] = fill_constant(s, input_values[s.name], "--input-value")
            continue
        a = np.asarray(arrays[s.name])
        if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
            raise DataError(f"{source}: input {s.name!r} contains NaN or Inf values; clean the data first")
        split, _ = _per_sample(a, s, sample_axes.get(s.name, 0), source)
        if split is None:
            once[s.name] = as_feed(s, a, source)
        else:
            per_input[s.name] = split
    counts = {n: len(v) for n, v in per_input.items()}
    if len(set(counts.values())) > 1:
        raise DataError(f"{source}: inputs have different sample counts {counts}")
    n = next(iter(counts.values())) if counts else 1
    if n == 0:
        raise DataError(f"{source} holds no samples")
    if labels is not None and len(labels) != n:
        raise DataError(f"{source}: {len(labels)} labels for {n} samples")
    samples = [{name: per_input[name][i] if name in per_input else once[name] for name in names} for i in range(n)]
    return Dataset(samples, labels, source)


def load_dataset(
    path: Any,
    specs: list,
    preprocess: str | None = None,
    limit: int | None = None,
    sample_axes: dict[str, int] | None = None,
    input_values: dict[str, Any] | None = None,
) -> Dataset:
    """Read ``path`` (any format of the module's docstring) into a :class:`Dataset` for the model's ``specs``."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"data not found: {path}")
    if sample_axes and not (path.is_file() and path.suffix in (".npz", ".npy")):
        raise DataError("--sample-axis applies to an .npz or .npy (other formats hold one sample per file or line)")
    if path.is_dir():
        if any(p.suffix.lower() in IMAGE_SUFFIXES for p in path.rglob("*")):
            ds = load_images(path, specs, preprocess, _from_arrays)
        elif any(path.rglob("*.npz")):
            samples, labels = records_to_samples(read_npz_dir(path), specs, LABEL_KEYS, input_values or {}, False)
            ds = Dataset(samples, labels, f"{path} ({len(samples)} .npz files)")
        else:
            raise DataError(f"{path} holds neither images ({', '.join(IMAGE_SUFFIXES)}) nor .npz files")
    elif path.suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except (OSError, ValueError) as e:
            raise DataError(f"cannot read {path} as .npz: {e}") from None
        ds = _from_arrays(arrays, specs, str(path), sample_axes, input_values)
    elif path.suffix == ".npy":
        try:
            array = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise DataError(f"cannot read {path} as .npy: {e}") from None
        free = [s for s in specs if s.name not in (input_values or {})]
        if len(free) != 1:
            raise DataError(
                f"{path}: an .npy feeds a single-input model; "
                f"this one has inputs {[s.name for s in specs]}; use an .npz"
            )
        ds = _from_arrays({free[0].name: array}, specs, str(path), sample_axes, input_values)
    elif path.suffix in (".jsonl", ".ndjson"):
        samples, labels = records_to_samples(read_jsonl(path), specs, LABEL_KEYS, input_values or {}, True)
        ds = Dataset(samples, labels, f"{path} ({len(samples)} lines)")
    else:
        raise DataError(
            f"unsupported data file {path}: use .npz, .npy, .jsonl, a folder of .npz files or a folder of images"
        )
    if limit and len(ds) > limit:
        ds.samples = ds.samples[:limit]
        if ds.labels is not None:
            ds.labels = ds.labels[:limit]
    return ds


def synthetic_dataset(
    specs: list, n: int = 8, seed: int = 0, proto: Any = None, input_values: dict[str, Any] | None = None
) -> Dataset:
    """Random samples for a model given no data; ``proto`` (the model) lets integer inputs be drawn in range;
    ``input_values`` are fed as given (``--input-value``)."""
    samples = random_inputs(specs, n, seed, proto=proto)
    given = input_values or {}
    ranges = integer_ranges(proto, specs)
    drawn = {}
    for s in specs:
        if s.name in given or s.dtype.startswith("float"):
            continue
        r = ranges.get(s.name)
        if s.dtype == "bool":
            drawn[s.name] = "bool mask: a run of True, then False"
        elif isinstance(r, tuple):
            drawn[s.name] = f"{r[0]}..{r[1] - 1} (ids into a table of {r[1]} rows)"
        elif isinstance(r, list):
            drawn[s.name] = f"one of {r} (the values the graph compares it with)"
        else:
            drawn[s.name] = "0..9 (nothing in the graph says its range)"
    for s in specs:
        if s.name in given:
            value = fill_constant(s, given[s.name], "--input-value")
            for feed in samples:
                feed[s.name] = value
    return Dataset(samples, None, "synthetic", synthetic=True, meta={"non_float_inputs": drawn} if drawn else {})


def save_samples(dataset: Dataset, path: str | Path, count: int = 1) -> Path:
    """Save the first samples (batch dimension kept) as an .npz the agent can feed."""
    names = list(dataset.samples[0])
    arrays = {
        n: np.concatenate([s[n] for s in dataset.samples[:count]]) if count > 1 else dataset.samples[0][n]
        for n in names
    }
    np.savez(path, **arrays)  # type: ignore[arg-type]
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

"""Sample formats where one file holds one sample, and the rules every feed obeys.

Every feed handed to a runtime is an ``ndarray`` with the model's dtype and rank (a 0-d input stays a 0-d
array, never a numpy scalar). :func:`as_feed` makes one from what a file holds, or says what is wrong.

- a directory of ``.npz`` files, one sample each, arrays exactly as fed (``sr`` 0-d, ``state`` [2, 1, 128]);
- a JSON-lines file (``.jsonl``), one sample per line: ``{"input": [[...]], "sr": 16000}``; the dtype
  comes from the model, so ``[1, 0, 1]`` feeds a bool mask and ``[5, 7]`` int64 token ids.

In both, a leading batch axis of 1 may be left out, an optional ``label`` (or ``labels``/``y``, unless the model
has an input of that name) is the sample's integer class, and an input missing from every sample may be given
once with ``input_values`` (``--input-value sr=16000``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .errors import DataError

Feed = dict[str, np.ndarray]


def _fits(a: np.ndarray, dtype: np.dtype) -> bool:
    """True when every value of ``a`` is exactly representable in ``dtype``."""
    if a.size == 0:
        return True
    if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
        return False
    if dtype.kind == "b":
        return bool(np.all((a == 0) | (a == 1)))
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return bool(np.all(np.mod(a, 1) == 0) if a.dtype.kind == "f" else True) and bool(
            a.min() >= info.min and a.max() <= info.max
        )
    return True


def cast(spec: Any, a: np.ndarray, where: str, lenient: bool = False) -> np.ndarray:
    """``a`` as the model input's dtype: floats to another float width always; integers, bools and (with
    ``lenient``, for text formats) floats holding whole numbers only when no value changes."""
    want = np.dtype(spec.dtype)
    if a.dtype == want:
        return a
    if a.dtype.kind == "f" and want.kind == "f":
        return a.astype(want)
    exact = a.dtype.kind in "iub" or (lenient and a.dtype.kind == "f")
    if want.kind == "f" and a.dtype.kind in "iub" and lenient:
        return a.astype(want)
    if want.kind in "iub" and exact and _fits(a, want):
        return a.astype(want)
    raise DataError(
        f"{where}: data for input {spec.name!r} has dtype {a.dtype}, the model wants {spec.dtype}"
        + (
            f" (its values do not all fit {spec.dtype}: token ids must be whole numbers in range, masks 0/1)"
            if want.kind in "iub" and exact
            else ""
        )
    )


def as_feed(spec: Any, value: Any, where: str, lenient: bool = False) -> np.ndarray:
    """One input of one sample, as the model takes it: dtype cast as :func:`cast` allows, a missing leading
    batch axis of 1 added, the shape checked against the model's (dynamic dimensions take any size)."""
    try:
        a = np.asarray(value)
    except ValueError as e:  # ragged nested lists
        raise DataError(f"{where}: input {spec.name!r} is not a rectangular array ({e})") from None
    a = cast(spec, a, where, lenient)
    rank = len(spec.shape)
    if a.ndim == rank - 1 and spec.shape[0] == 1:
        a = a[None]
    if a.ndim != rank or any(isinstance(d, int) and d != g for d, g in zip(spec.shape, a.shape)):
        raise DataError(
            f"{where}: input {spec.name!r} has shape {list(a.shape)}; the model takes {list(spec.shape)} "
            "(one sample, exactly as fed)"
        )
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def parse_input_values(items: Any) -> dict[str, Any]:
    """``["sr=16000", "temperature=0.5"]`` (or a dict) -> ``{"sr": 16000, "temperature": 0.5}``."""
    if isinstance(items, dict):
        return dict(items)
    values: dict[str, Any] = {}
    for item in items or ():
        name, sep, text = item.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            values[name] = json.loads(text) if text.strip().startswith("[") else _number(text)
        except ValueError:
            raise DataError(
                f"bad --input-value {item!r}: expected NAME=VALUE with a number or a JSON list, e.g. sr=16000"
            ) from None
    return values


def _number(text: str) -> int | float | bool:
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(low)
    except ValueError:
        return float(low)


def parse_sample_axes(items: Any) -> dict[str, int]:
    """``["state=1"]`` (or a dict) -> ``{"state": 1}``: the axis of an ``.npz`` array that counts samples."""
    if isinstance(items, dict):
        return {str(k): int(v) for k, v in items.items()}
    axes: dict[str, int] = {}
    for item in items or ():
        name, sep, text = item.partition("=")
        try:
            if not sep or not name or int(text) < 0:
                raise ValueError
            axes[name] = int(text)
        except ValueError:
            raise DataError(f"bad --sample-axis {item!r}: expected NAME=AXIS with AXIS >= 0, e.g. state=1") from None
    return axes


def fill_constant(spec: Any, value: Any, where: str) -> np.ndarray:
    """A value given once (``--input-value``) as the input's feed: broadcast to its shape when it is static."""
    a = np.asarray(value)
    a = cast(spec, a, where, lenient=True)
    if a.ndim < len(spec.shape) and all(isinstance(d, int) for d in spec.shape):
        try:
            a = np.broadcast_to(a, [int(d) for d in spec.shape]).copy()
        except ValueError:
            pass  # as_feed names the shape
    return as_feed(spec, a, where, lenient=True)


def split_label(record: dict[str, Any], names: list[str], label_keys: tuple[str, ...], where: str) -> int | None:
    """Pop the sample's label (a key of ``label_keys`` that is not a model input) from ``record``."""
    for key in label_keys:
        if key in record and key not in names:
            raw = np.asarray(record.pop(key))
            if raw.size != 1 or raw.dtype.kind not in "iubf" or float(raw.reshape(-1)[0]) % 1:
                raise DataError(f"{where}: '{key}' must be one integer class index, it is {raw.tolist()!r}")
            return int(raw.reshape(-1)[0])
    return None


def records_to_samples(
    records: list[tuple[str, dict[str, Any]]],
    specs: list,
    label_keys: tuple[str, ...],
    input_values: dict[str, Any],
    lenient: bool,
) -> tuple[list[Feed], np.ndarray | None]:
    """One feed per record (``(where, {name: value})``), and the labels when every record has one."""
    names = [s.name for s in specs]
    constants = {
        s.name: fill_constant(s, input_values[s.name], "--input-value") for s in specs if s.name in input_values
    }
    samples, labels = [], []
    for where, record in records:
        labels.append(split_label(record, names, label_keys, where))
        both = sorted(n for n in constants if n in record)
        if both:
            raise DataError(f"{where} holds {both} and --input-value gives them too: drop one of the two")
        unknown = sorted(set(record) - set(names))
        missing = [n for n in names if n not in record and n not in constants]
        if unknown or missing:
            raise DataError(
                f"{where} has {sorted(record)} but the model's inputs are {names}"
                + (
                    f"; missing {missing} (a value the same for every sample: --input-value NAME=VALUE)"
                    if missing
                    else ""
                )
                + (f"; unknown {unknown}" if unknown else "")
            )
        feed = {}
        for s in specs:
            feed[s.name] = as_feed(s, record[s.name], where, lenient) if s.name in record else constants[s.name]
            if feed[s.name].dtype.kind == "f" and not np.all(np.isfinite(feed[s.name])):
                raise DataError(f"{where}: input {s.name!r} contains NaN or Inf values; clean the data first")
        samples.append(feed)
    if not samples:
        raise DataError("the data holds no samples")
    have = [label is not None for label in labels]
    if any(have) and not all(have):
        raise DataError(f"{sum(have)} of {len(labels)} samples have a label: give every sample one, or none")
    return samples, (np.asarray(labels, np.int64) if all(have) else None)


def read_npz_dir(folder: Path) -> list[tuple[str, dict[str, Any]]]:
    """Every ``*.npz`` under ``folder`` (sorted by path), one sample each."""
    files = sorted(p for p in folder.rglob("*.npz") if p.is_file())
    records = []
    for p in files:
        try:
            with np.load(p, allow_pickle=False) as z:
                records.append((str(p), {k: z[k] for k in z.files}))
        except (OSError, ValueError) as e:
            raise DataError(f"cannot read {p} as .npz: {e}") from None
    return records


def read_jsonl(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """One JSON object per non-empty line of ``path``."""
    records = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"cannot read {path} as UTF-8 JSON lines: {e}") from None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{i}"
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise DataError(f"{where} is not valid JSON: {e}") from None
        if not isinstance(obj, dict):
            raise DataError(f'{where}: each line must be an object {{"input name": nested list, ...}}')
        records.append((where, obj))
    return records

"""Stateful streams: outputs fed back as inputs at the next step (``--stream state=stateN``).

A streaming model (a voice-activity detector, a recurrent decoder) takes its own state from the previous call.
:class:`StreamSpec` says which output feeds which input; :class:`StreamPlan` turns sequences of data into
calibration and fidelity samples (each step's state comes from the reference run of the sequence so far) and runs
a candidate over whole sequences, its own state fed back (:mod:`edgekit.stream_run`).

Data for a stream (docs/STREAMS.md): one ``.npz`` = one sequence, or a directory of them (one sequence each, in
name order). In a sequence file each non-state input is an array ``[T, *input shape]`` (the steps along a leading
time axis), or exactly the input's shape (the same value at every step, e.g. a sample rate); a state input may be
given with the input's shape (the initial state), else it starts at zeros.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .data import Dataset
from .errors import DataError, ModelError
from .model import random_inputs

SYNTHETIC_SEQUENCES = 4
SYNTHETIC_STEPS = 16
FORM = "INPUT=OUTPUT (the output each step feeds back into the input at the next step), e.g. state=stateN"


@dataclass(frozen=True)
class StreamSpec:
    """Which output feeds which input: ``{state input: output}``."""

    pairs: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"state": dict(self.pairs)}

    def __str__(self) -> str:
        return " ".join(f"{i}={o}" for i, o in self.pairs.items())


def parse_stream(spec: StreamSpec | Mapping[str, str] | Iterable[str] | str | None) -> StreamSpec | None:
    """``{"state": "stateN"}``, ``["state=stateN", ...]`` or ``"state=stateN"`` as a :class:`StreamSpec`."""
    if spec is None or isinstance(spec, StreamSpec):
        return spec
    if isinstance(spec, Mapping):
        items = [(str(k), str(v)) for k, v in spec.items()]
    else:
        texts = [spec] if isinstance(spec, str) else list(spec)
        items = []
        for text in texts:
            for part in str(text).split(","):
                name, eq, out = (s.strip() for s in part.partition("="))
                if not eq or not name or not out:
                    raise DataError(f"--stream {text!r}: expected {FORM}")
                items.append((name, out))
    if not items:
        raise DataError(f"--stream is empty: expected {FORM}")
    pairs: dict[str, str] = {}
    for name, out in items:
        if name in pairs and pairs[name] != out:
            raise DataError(f"--stream names input {name!r} twice ({pairs[name]} and {out}); give it one output")
        pairs[name] = out
    return StreamSpec(pairs)


def _dims_match(a: list, b: list) -> bool:
    return len(a) == len(b) and all(not (isinstance(x, int) and isinstance(y, int)) or x == y for x, y in zip(a, b))


def check_stream(spec: StreamSpec, inputs: list, outputs: list) -> None:
    """Refuse a mapping whose names are not the model's or whose output cannot be fed to its input."""
    ins = {s.name: s for s in inputs}
    outs = {s.name: s for s in outputs}
    for name, out in spec.pairs.items():
        if name not in ins:
            raise ModelError(f"--stream {name}={out}: the model has no input {name!r}; its inputs are {list(ins)}")
        if out not in outs:
            raise ModelError(f"--stream {name}={out}: the model has no output {out!r}; its outputs are {list(outs)}")
        i, o = ins[name], outs[out]
        if i.dtype != o.dtype:
            raise ModelError(
                f"--stream {name}={out}: output {out!r} is {o.dtype} but input {name!r} takes {i.dtype}; "
                "a state must be fed back unchanged: map the output that holds the next state"
            )
        if not _dims_match(list(i.shape), list(o.shape)):
            raise ModelError(
                f"--stream {name}={out}: output {out!r} has shape {list(o.shape)} but input {name!r} takes "
                f"{list(i.shape)}; map the output that holds the next state (or fix the shapes with --input-shape)"
            )
    if len(spec.pairs) == len(ins):
        raise ModelError(f"--stream {spec}: every input is a state; a stream needs at least one input of data")


@dataclass
class Sequence:
    """One stream: the data inputs at each step, and the initial state."""

    steps: list[dict[str, np.ndarray]]
    initial: dict[str, np.ndarray]
    held_once: tuple[str, ...] = ()  # data inputs the file gives once, the same at every step


def _cast(array: np.ndarray, spec: Any, where: str) -> np.ndarray:
    want = np.dtype(spec.dtype)
    if array.dtype == want:
        return array
    if (array.dtype.kind == "f" and want.kind == "f") or (array.dtype.kind in "iu" and want.kind in "iu"):
        return array.astype(want)
    raise DataError(f"{where}: input {spec.name!r} has dtype {array.dtype}, the model wants {spec.dtype}")


def _fits(shape: tuple, spec_shape: list) -> bool:
    return len(shape) == len(spec_shape) and all(not isinstance(d, int) or d == s for d, s in zip(spec_shape, shape))


def _sequence(arrays: dict[str, np.ndarray], specs: list, spec: StreamSpec, where: str) -> Sequence:
    data = [s for s in specs if s.name not in spec.pairs]
    missing = [s.name for s in data if s.name not in arrays]
    if missing:
        raise DataError(
            f"{where} has arrays {sorted(arrays)}; a sequence needs one per data input {[s.name for s in data]} "
            f"(missing: {missing}), each [T, *input shape] with the T steps along the first axis"
        )
    per_step, constant, lengths = {}, {}, {}
    for s in data:
        a = _cast(np.asarray(arrays[s.name]), s, where)
        if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
            raise DataError(f"{where}: input {s.name!r} contains NaN or Inf values; clean the data first")
        if _fits(a.shape, list(s.shape)):
            constant[s.name] = a
        elif a.ndim == len(s.shape) + 1 and _fits(a.shape[1:], list(s.shape)):
            per_step[s.name] = a
            lengths[s.name] = a.shape[0]
        else:
            raise DataError(
                f"{where}: input {s.name!r} has shape {list(a.shape)}; expected [T, {', '.join(map(str, s.shape))}] "
                f"(T steps of the model's input {list(s.shape)}) or {list(s.shape)} (the same at every step)"
            )
    if len(set(lengths.values())) > 1:
        raise DataError(f"{where}: the inputs have different numbers of steps {lengths}; give each the same T")
    steps_n = next(iter(lengths.values()), 1)
    if steps_n == 0:
        raise DataError(f"{where} holds a sequence of 0 steps")
    steps = [
        {s.name: per_step[s.name][t] if s.name in per_step else constant[s.name] for s in data} for t in range(steps_n)
    ]
    initial = {}
    for s in specs:
        if s.name not in spec.pairs:
            continue
        if s.name in arrays:
            a = _cast(np.asarray(arrays[s.name]), s, where)
            if not _fits(a.shape, list(s.shape)):
                raise DataError(
                    f"{where}: the initial state {s.name!r} has shape {list(a.shape)}; the model takes {list(s.shape)}"
                )
            initial[s.name] = a
        else:
            initial[s.name] = zeros(s, steps[0])
    return Sequence(steps, initial, tuple(sorted(constant)))


def zeros(spec: Any, like: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
    """A zero state for ``spec``; a dynamic dimension takes 1."""
    shape = [d if isinstance(d, int) else 1 for d in spec.shape]
    return np.zeros(shape, np.dtype(spec.dtype))


def _read(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise DataError(f"cannot read {path} as .npz: {e}") from None


def load_sequences(path: str | Path, specs: list, spec: StreamSpec) -> list[Sequence]:
    """Sequences from one ``.npz`` (one sequence) or a directory of ``.npz`` files (one sequence each)."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"data not found: {path}")
    if path.is_dir():
        files = sorted(path.glob("*.npz"))
        if not files:
            raise DataError(f"{path}: a stream's data is a folder of .npz files, one sequence each; it holds none")
    elif path.suffix == ".npz":
        files = [path]
    else:
        raise DataError(f"unsupported stream data {path}: use an .npz (one sequence) or a folder of .npz files")
    return [_sequence(_read(f), specs, spec, str(f)) for f in files]


def synthetic_sequences(
    specs: list, spec: StreamSpec, n: int = SYNTHETIC_SEQUENCES, steps: int = SYNTHETIC_STEPS
) -> list[Sequence]:
    """Random data inputs, zero initial states."""
    data = [s for s in specs if s.name not in spec.pairs]
    out = []
    for k in range(n):
        feeds = random_inputs(data, steps, seed=k)
        out.append(Sequence(feeds, {s.name: zeros(s) for s in specs if s.name in spec.pairs}))
    return out


class StreamPlan:
    """A build's stream: its mapping and the reference model that fills each step's state."""

    def __init__(self, spec: StreamSpec, source: Any) -> None:
        self.spec = spec
        self.source = source
        check_stream(spec, source.inputs, source.outputs)

    def to_dict(self) -> dict[str, Any]:
        return self.spec.to_dict()

    def _dataset(self, seqs: list[Sequence], source: str, synthetic: bool, limit: int | None) -> Dataset:
        if limit:
            kept: list[Sequence] = []
            total = 0
            for s in seqs:
                if kept and total + len(s.steps) > limit:
                    break
                kept.append(s)
                total += len(s.steps)
            seqs = kept
        samples = self._fill(seqs)
        lengths = [len(s.steps) for s in seqs]
        text = f"{source} ({len(seqs)} sequences, {sum(lengths)} steps)"
        ds = Dataset(samples, None, text if not synthetic else "synthetic", synthetic=synthetic)
        held_once = sorted(set.intersection(*(set(s.held_once) for s in seqs))) if seqs else []
        ds.meta["stream"] = {"lengths": lengths, "held_once": held_once}
        return ds

    def _fill(self, seqs: list[Sequence]) -> list[dict[str, np.ndarray]]:
        """Full feeds: the data inputs of each step and the state the reference model carried to that step."""
        from .execution import reference_session

        try:
            sess = reference_session(self.source.proto.SerializeToString())
        except Exception as e:  # the runtime's own exception types
            raise ModelError(f"onnxruntime cannot load the reference model to run the stream: {e}") from None
        names = [o.name for o in sess.get_outputs()]
        samples = []
        for seq in seqs:
            state = dict(seq.initial)
            for step in seq.steps:
                feed = {**step, **state}
                samples.append(feed)
                try:
                    out = dict(zip(names, sess.run(names, feed)))
                except Exception as e:
                    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                    raise ModelError(f"onnxruntime cannot run the reference model on the stream: {first}") from None
                state = {i: _as_state(out[o], feed[i]) for i, o in self.spec.pairs.items()}
        return samples

    def load(self, path: str | Path, specs: list, preprocess: str | None = None, limit: int | None = None) -> Dataset:
        """Stream data as a :class:`Dataset` of full feeds (``meta["stream"]["lengths"]``: steps per sequence)."""
        if preprocess:
            raise DataError("--preprocess applies to image folders; a stream's data is .npz sequences")
        return self._dataset(load_sequences(path, specs, self.spec), str(path), False, limit)

    def synthetic(self) -> Dataset:
        return self._dataset(synthetic_sequences(self.source.inputs, self.spec), "synthetic", True, None)

    def runner(self, backend: Any, dataset: Dataset) -> Any:
        """``backend`` whose ``predict`` runs ``dataset``'s sequences with the candidate's own state fed back."""
        from .stream_run import StreamBackend

        return StreamBackend(backend, self.spec, dataset.meta["stream"]["lengths"])

    def metrics(self, reference: list, candidate: list, dataset: Dataset, task: Any = None) -> dict[str, Any]:
        from .stream_run import stream_metrics

        return stream_metrics(self.spec, dataset.meta["stream"]["lengths"], reference, candidate)

    def report(self, dataset: Dataset) -> dict[str, Any]:
        lengths = dataset.meta["stream"]["lengths"]
        return {
            **self.to_dict(),
            "sequences": len(lengths),
            "steps": sum(lengths),
            "data": dataset.describe()["source"],
            "how": "each step of a sequence runs with the state the model itself output at the previous step "
            "(the reference with its own, each candidate with its own); the first step takes the sequence's "
            "initial state (zeros unless the data gives it)",
        }


def _as_state(value: Any, like: np.ndarray) -> np.ndarray:
    a = np.asarray(value)
    if a.dtype != like.dtype:
        a = a.astype(like.dtype)
    if a.shape != like.shape and a.size == like.size:
        a = a.reshape(like.shape)
    return a


def plan(stream: Any, source: Any) -> StreamPlan | None:
    """The build's :class:`StreamPlan`, or None without ``--stream``."""
    spec = parse_stream(stream)
    return StreamPlan(spec, source) if spec is not None else None

"""Model intake: read an ONNX file, refuse what is not one, fix dynamic dimensions.

A :class:`SourceModel` is the reference every later step is checked against: the
user's model with its dynamic dimensions fixed (from ``--input-shape``, else batch 1).
"""

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import onnx
import onnx.numpy_helper
from onnx import TensorProto

from . import shape_hints
from . import shapes as shapes_mod
from .errors import ModelError

ONNX_TO_NUMPY = {
    TensorProto.FLOAT: "float32",
    TensorProto.FLOAT16: "float16",
    TensorProto.DOUBLE: "float64",
    TensorProto.INT8: "int8",
    TensorProto.UINT8: "uint8",
    TensorProto.INT16: "int16",
    TensorProto.UINT16: "uint16",
    TensorProto.INT32: "int32",
    TensorProto.INT64: "int64",
    TensorProto.BOOL: "bool",
}


@dataclass
class TensorSpec:
    name: str
    shape: list  # ints, or strings for dimensions that stay dynamic
    dtype: str
    layout: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype, "layout": self.layout}

    @property
    def static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)


def guess_layout(shape: Sequence[int | str | None]) -> str | None:
    """NCHW/NHWC for image-like 4-D tensors, else None (we never guess beyond that)."""
    if len(shape) != 4:
        return None
    c_first, c_last = shape[1], shape[3]
    if (
        isinstance(c_first, int)
        and c_first in (1, 2, 3, 4)
        and not (isinstance(c_last, int) and c_last in (1, 2, 3, 4))
    ):
        return "NCHW"
    if (
        isinstance(c_last, int)
        and c_last in (1, 2, 3, 4)
        and not (isinstance(c_first, int) and c_first in (1, 2, 3, 4))
    ):
        return "NHWC"
    return None


def _specs(values: Iterable[onnx.ValueInfoProto]) -> list[TensorSpec]:
    out = []
    for v in values:
        t = v.type.tensor_type
        dims: list[int | str] = []
        for i, d in enumerate(t.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
            else:
                dims.append(d.dim_param or f"dim{i}")
        dtype = ONNX_TO_NUMPY.get(t.elem_type, onnx.TensorProto.DataType.Name(t.elem_type).lower())  # type: ignore[call-overload]
        out.append(TensorSpec(v.name, dims, dtype, guess_layout(dims)))
    return out


def parse_input_shapes(items: Sequence[str] | None) -> dict[str, list[shapes_mod.Decl]]:
    """``["x=1,3,48,192", "len=[8,16,32]", "y=1,[32:960]"]`` -> ``{"x": [1, 3, 48, 192], ...}`` (see edgekit.shapes)."""
    return shapes_mod.parse_input_shapes(items)


PORTABLE_IR = 10  # ONNX 1.16+: every opset up to 21, the 4-bit and float8 types
PORTABLE_IR_MAX_OPSET = 21


@dataclass
class SourceModel:
    path: Path
    sha256: str
    proto: onnx.ModelProto
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    shapes: shapes_mod.ShapePlan | None = None  # declared shapes, the points checks run at, what stays dynamic

    @property
    def opset(self) -> dict[str, int]:
        return {(o.domain or "ai.onnx"): o.version for o in self.proto.opset_import}

    def save(self, path: str | Path) -> Path:
        """Write the model; its IR version is lowered to the lowest that its opsets allow.

        The IR version only says which file-format features a model may use. Exporters stamp
        the newest their onnx package knows, which older runtimes (those pinned in the
        converters' tool environments) refuse although the graph is the same.
        """
        proto = self.proto
        ai_onnx = self.opset.get("ai.onnx", 0)
        if proto.ir_version > PORTABLE_IR and ai_onnx <= PORTABLE_IR_MAX_OPSET:
            proto = onnx.ModelProto()
            proto.CopyFrom(self.proto)
            proto.ir_version = PORTABLE_IR
        onnx.save(proto, str(path))
        return Path(path)


def file_sha256(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def load_model(
    path: str | Path,
    input_shapes: dict[str, list[shapes_mod.Decl]] | None = None,
    data_shapes: shape_hints.DataShapes | None = None,
    keep_dynamic: bool = False,
    why_static: str | None = None,
) -> SourceModel:
    """Read, check and shape-fix an ONNX model. Raises ModelError with a clear message.

    ``input_shapes``: ``{input: [dims]}``, each dimension a size, a range or a set (:mod:`edgekit.shapes`).
    ``data_shapes``: a function ``input names -> {input: ([N, ...], source)}``, the shapes of the user's data
    (:func:`edgekit.shape_hints.data_reader`), read for the typical sizes of dynamic dimensions and to suggest an
    ``--input-shape`` (:mod:`edgekit.shape_hints`). ``keep_dynamic``: the backend runs dynamic shapes, so ranges,
    sets and undeclared dynamic dimensions stay dynamic; else every dimension is fixed at its typical size
    (``why_static`` says why, for the report). The result's ``shapes`` is the :class:`edgekit.shapes.ShapePlan`.
    """
    proto, raw = _read(Path(path))
    path = Path(path)
    initializers = {i.name for i in proto.graph.initializer}
    graph_inputs = [i for i in proto.graph.input if i.name not in initializers]
    declared = _declare(graph_inputs, input_shapes)
    found = {}
    if data_shapes is not None and any(not isinstance(d, int) for dims in declared.values() for d in dims):
        found = data_shapes([i.name for i in graph_inputs])
    metadata = {p.key: p.value for p in proto.metadata_props}
    typical, free, hints = {}, {}, []
    for inp in graph_inputs:
        dims = declared[inp.name]
        free[inp.name] = [i for i, d in enumerate(dims) if d is None]
        model_shape = [_dim(d) for d in inp.type.tensor_type.shape.dim]
        h = shape_hints.Hint(inp.name, model_shape, [i for i, d in enumerate(dims) if not isinstance(d, int)])
        if inp.name in found:
            shape_hints.from_data(h, *found[inp.name])
        shape_hints.from_metadata(h, metadata)
        shape_hints.batch_guess(h)
        shape = []
        for i, d in enumerate(dims):
            if isinstance(d, int):
                shape.append(d)
            elif d is not None:  # a range or set: the data's size, else the middle one
                if i in h.values and h.sources[i].startswith("from ") and not d.allows(h.values[i]):
                    raise ModelError(
                        f"the data for input {inp.name!r} has size {h.values[i]} at position {i}, outside the "
                        f"declared {d} (--input-shape {inp.name}={shapes_mod.fmt(dims)}): fix the data or the range"
                    )
                shape.append(h.values[i] if i in h.values and d.allows(h.values[i]) else d.values()[1])
            else:
                shape.append(h.values.get(i, 0))
        typical[inp.name] = shape
        legacy = not keep_dynamic and free[inp.name] and free[inp.name] != [0]  # a static build asks for shapes
        if legacy or (keep_dynamic and h.unknown and any(i in free[inp.name] for i in h.unknown)):
            h.dynamic = free[inp.name]
            h.values = {i: v for i, v in h.values.items() if i in h.dynamic}
            hints.append(h)
        elif not keep_dynamic and free[inp.name] == [0]:
            typical[inp.name][0] = 1  # dynamic batch: build for batch 1
        if keep_dynamic and free[inp.name][:1] == [0] and len(dims) >= 2:
            dims[0] = typical[inp.name][0]  # an undeclared batch is fixed at the data's (else 1); declare a range
            free[inp.name].remove(0)
    if hints:
        raise ModelError(shape_hints.message(hints, dynamic=keep_dynamic))
    dynamic = keep_dynamic and any(not isinstance(d, int) for dims in declared.values() for d in dims)
    plan = shapes_mod.ShapePlan(declared, typical, dynamic, free=free)
    if not dynamic and any(not isinstance(d, int) for dims in declared.values() for d in dims) and why_static:
        plan.note = f"{why_static}: fixed at {', '.join(f'{k}={v}' for k, v in typical.items())}"
    for inp in graph_inputs:
        kept = plan.kept(inp.name)
        for i, d in enumerate(inp.type.tensor_type.shape.dim):
            if i not in kept and not (d.HasField("dim_value") and d.dim_value > 0):
                d.Clear()
                d.dim_value = typical[inp.name][i]
    # Clear stale output/value_info shapes and infer them again from the fixed inputs.
    del proto.graph.value_info[:]
    for out in proto.graph.output:
        for d in out.type.tensor_type.shape.dim:
            if not (d.HasField("dim_value") and d.dim_value > 0):
                d.Clear()
    try:
        proto = onnx.shape_inference.infer_shapes(proto, strict_mode=False)
    except Exception as e:
        raise ModelError(f"shape inference failed on {path} with the given input shapes: {e}") from None
    model = SourceModel(path=path, sha256=hashlib.sha256(raw).hexdigest(), proto=proto, shapes=plan)
    model.inputs = _specs([i for i in proto.graph.input if i.name not in initializers])
    model.outputs = _specs(proto.graph.output)
    return model


def _dim(d: Any) -> int | str | None:
    return d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or None)


def _declare(
    graph_inputs: Sequence[onnx.ValueInfoProto], input_shapes: dict[str, list[Any]] | None
) -> dict[str, list[shapes_mod.Decl]]:
    """Per input, per dimension: the model's size, the declared size/range/set, or None (dynamic, undeclared)."""
    shapes = {k: [shapes_mod.as_decl(d) for d in v] for k, v in (input_shapes or {}).items()}
    unknown = set(shapes) - {i.name for i in graph_inputs}
    if unknown:
        raise ModelError(
            f"--input-shape names {sorted(unknown)} but the model's inputs are {[i.name for i in graph_inputs]}"
        )
    declared: dict[str, list[shapes_mod.Decl]] = {}
    for inp in graph_inputs:
        model_shape = [_dim(d) for d in inp.type.tensor_type.shape.dim]
        want = shapes.get(inp.name)
        if want is None:
            declared[inp.name] = [d if isinstance(d, int) else None for d in model_shape]
            continue
        if len(want) != len(model_shape):
            raise ModelError(
                f"--input-shape {inp.name} has {len(want)} dimensions but the model's input has {len(model_shape)}"
            )
        for m, w in zip(model_shape, want):
            if isinstance(m, int) and w is not None and w != m:
                raise ModelError(
                    f"--input-shape {inp.name}={shapes_mod.fmt(want)} conflicts with the model's shape "
                    f"{[d if d is not None else '?' for d in model_shape]}"
                )
        declared[inp.name] = [m if isinstance(m, int) else w for m, w in zip(model_shape, want)]
    return declared


def _read(path: Path) -> tuple[onnx.ModelProto, bytes]:
    if path.is_dir():
        found = sorted(p.name for p in path.glob("*.onnx"))[:3]
        inside = f" (it holds {', '.join(found)})" if found else ""
        raise ModelError(f"{path} is a directory, not a model file{inside}: give the .onnx file itself")
    if not path.is_file():
        raise ModelError(f"model file not found: {path}")
    if path.suffix.lower() not in (".onnx",):
        raise ModelError(
            f"{path} is not an ONNX model (.onnx expected); edgekit build also takes a PyTorch .pt2/.pt, a "
            "TensorFlow SavedModel directory, a Keras .keras/.h5 file and a .tflite (docs/INTAKE.md), not yet "
            "Paddle models: export those to ONNX first (paddle2onnx)"
        )
    raw = path.read_bytes()
    try:
        proto = onnx.load_from_string(raw)
    except Exception as e:  # protobuf raises DecodeError and friends, with no common base
        raise ModelError(
            f"{path} is not a valid ONNX file (cannot parse the protobuf: {e}); "
            "the file may be truncated or corrupt, re-export or re-download it"
        ) from None
    if not proto.graph.node:
        raise ModelError(f"{path} is not a valid ONNX model: it has no graph nodes (is it an ONNX file at all?)")
    _load_external_data(proto, path)
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as e:
        first = str(e).strip().splitlines()[0]
        raise ModelError(f"{path} failed the ONNX checker: {first}") from None
    return proto, raw


def _load_external_data(proto: onnx.ModelProto, path: Path) -> None:
    """Read the weights a model keeps in external-data files (next to ``path``) into ``proto``, so that it is
    checked, shape-fixed and saved as one self-contained reference."""
    from onnx.external_data_helper import ExternalDataInfo, load_external_data_for_model, uses_external_data

    external = [t for t in proto.graph.initializer if uses_external_data(t)]
    if not external:
        return
    files = sorted({ExternalDataInfo(t).location for t in external})
    absent = [f for f in files if not (path.parent / f).is_file()]
    if absent:
        raise ModelError(
            f"{path} keeps its weights in external-data file(s) {absent}, not found next to it; "
            "copy them into the model's folder (as the exporter wrote them)"
        )
    try:
        load_external_data_for_model(proto, str(path.parent))
    except Exception as e:  # a truncated file, a bad offset
        raise ModelError(f"cannot read {path}'s external data {files}: {e}") from None


def all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of ``graph`` and of the subgraphs its nodes hold (``If`` branches, ``Loop`` bodies)."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from all_nodes(g)


QUANTIZED_OPS = frozenset(
    {
        "QuantizeLinear",
        "DequantizeLinear",
        "DynamicQuantizeLinear",
        "QLinearConv",
        "QLinearMatMul",
        "MatMulInteger",
        "ConvInteger",
    }
)


def quantized_nodes(proto: onnx.ModelProto) -> int:
    """How many nodes of ``proto`` (subgraphs included) compute in integers: a model already quantized."""
    return sum(1 for n in all_nodes(proto.graph) if n.op_type in QUANTIZED_OPS)


def operator_set(proto: onnx.ModelProto) -> list[dict[str, Any]]:
    """Operators a model uses: ``[{"domain", "op", "count"}]``, sorted, subgraphs included."""
    counts: dict[tuple[str, str], int] = {}
    for node in all_nodes(proto.graph):
        key = (node.domain or "ai.onnx", node.op_type)
        counts[key] = counts.get(key, 0) + 1
    return [{"domain": d, "op": o, "count": c} for (d, o), c in sorted(counts.items())]


def integer_ranges(proto: onnx.ModelProto | None, specs: list) -> dict[str, Any]:
    """What an integer input of ``proto`` may hold, read from the graph: ``(low, high)`` (high exclusive) for ids
    that index a table (a Gather on an initializer: token ids 0..vocab-1), or the list of values an ``Equal``
    compares it with (a sample rate of 8000 or 16000). Inputs the graph says nothing about are absent."""
    if proto is None:
        return {}
    wanted = {s.name for s in specs if s.dtype != "bool" and not s.dtype.startswith("float")}
    consts: dict[str, np.ndarray] = {}
    found: dict[str, Any] = {}

    def walk(graph: onnx.GraphProto) -> None:
        for init in graph.initializer:
            consts[init.name] = onnx.numpy_helper.to_array(init)
        for node in graph.node:
            if node.op_type == "Constant" and node.output:
                for attr in node.attribute:
                    if attr.name == "value":
                        consts[node.output[0]] = onnx.numpy_helper.to_array(attr.t)
            for attr in node.attribute:
                for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    walk(g)
            if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] in wanted:
                table = consts.get(node.input[0])
                if table is not None and table.ndim:
                    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                    size = int(table.shape[axis])
                    old = found.get(node.input[1])
                    found[node.input[1]] = (0, min(size, old[1]) if isinstance(old, tuple) else size)
            if node.op_type == "Equal" and len(node.input) == 2:
                for mine, other in (node.input, node.input[::-1]):
                    if mine in wanted and other in consts and mine not in found:
                        found[mine] = [int(v) for v in consts[other].reshape(-1)]

    walk(proto.graph)
    return found


def random_inputs(specs: list, n: int, seed: int = 0, proto: onnx.ModelProto | None = None) -> list[dict]:
    """Synthetic samples for when the user gives no data: normal floats; integer inputs in the range the
    graph reads from ``proto`` (:func:`integer_ranges`), else small non-negative ints; bool masks with a run of
    True then False (both present), so a mask never hides a whole sequence."""
    rng = np.random.default_rng(seed)
    ranges = integer_ranges(proto, specs)
    samples = []
    for _ in range(n):
        feed = {}
        for s in specs:
            shape = [d if isinstance(d, int) else 1 for d in s.shape]
            if s.dtype.startswith("float"):
                feed[s.name] = rng.standard_normal(shape).astype(s.dtype)
            elif s.dtype == "bool":
                feed[s.name] = _mask(rng, shape)
            elif isinstance(ranges.get(s.name), list):
                feed[s.name] = np.full(shape, rng.choice(ranges[s.name]), dtype=s.dtype)
            else:
                low, high = ranges.get(s.name, (0, 10))
                feed[s.name] = rng.integers(low, max(high, low + 1), shape).astype(s.dtype)
        samples.append(feed)
    return samples


def _mask(rng: np.random.Generator, shape: list) -> np.ndarray:
    if not shape:
        return np.array(True)
    length = shape[-1]
    keep = rng.integers(1, length, size=shape[:-1] + [1]) if length > 1 else np.ones(shape[:-1] + [1], np.int64)
    return np.arange(length) < keep

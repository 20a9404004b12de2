"""An ONNX graph specialised for inputs that hold one value: the input becomes a constant, what depends only on
constants is folded, and an ``If`` whose condition becomes constant is replaced by the branch it takes.

Silero VAD switches on its 0-d ``sr`` (``If(Equal(sr, 16000))``: 16 kHz and 8 kHz branches); runtimes whose
converters cannot take an ``If`` (or cannot infer shapes inside one) can take the graph with ``sr`` fixed to 16000:
the same function for that value, without the switch. A node all of whose inputs are constant is evaluated (ONNX's
reference evaluator) and replaced by an initializer, as is a ``Shape`` or ``Size`` of a tensor whose shape is static;
an inlined branch is folded in turn (Silero's holds ``If`` nodes on the size of its state). Nodes and initializers
nothing reads any more are dropped; the names of the graph's inputs that stay and of its outputs are kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

RANDOM_OPS = ("RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli")


@dataclass
class Specialised:
    """The specialised model and what changed (``notes``: the fixed values and the ``If`` nodes they removed)."""

    model: Any  # onnx.ModelProto
    fixed: dict[str, np.ndarray]
    folded: list[str] = field(default_factory=list)  # nodes replaced by their constant outputs
    inlined: dict[str, str] = field(default_factory=dict)  # If node -> "then" / "else"
    from_branches: set[str] = field(default_factory=set)  # names of the nodes an inlined branch brought

    @property
    def changed_control_flow(self) -> bool:
        return bool(self.inlined)

    def notes(self) -> list[str]:
        values = ", ".join(f"{k} fixed to {_show(v)}" for k, v in self.fixed.items())
        top = {n: b for n, b in self.inlined.items() if n not in self.from_branches}
        branches = ", ".join(f"{n} folded to its {b}-branch" for n, b in top.items())
        inner = len(self.inlined) - len(top)
        more = f"; {inner} If node{'s' if inner > 1 else ''} inside it folded too" if inner else ""
        return [f"{values}: {branches or 'no If depends on it'}{more}"]


def _show(value: np.ndarray) -> str:
    a = np.asarray(value)
    return str(a.item()) if a.size == 1 else f"{a.dtype}{list(a.shape)}"


def _evaluate(node: Any, values: list[np.ndarray], opsets: list) -> list[np.ndarray] | None:
    """The outputs of one node on constant inputs, or None where the reference evaluator cannot compute them."""
    import onnx
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    inputs = [helper.make_tensor_value_info(f"in{k}", onnx.TensorProto.UNDEFINED, None) for k in range(len(values))]
    one = helper.make_node(
        node.op_type,
        [f"in{k}" if name else "" for k, name in enumerate(node.input)],
        [f"out{k}" if name else "" for k, name in enumerate(node.output)],
        domain=node.domain,
    )
    one.attribute.extend(node.attribute)
    outputs = [helper.make_tensor_value_info(f"out{k}", 0, None) for k, n in enumerate(node.output) if n]
    graph = helper.make_graph([one], "fold", [i for i, n in zip(inputs, node.input) if n], outputs)
    try:
        one_model = helper.make_model(graph, opset_imports=[helper.make_opsetid(o.domain, o.version) for o in opsets])
        got = ReferenceEvaluator(one_model).run(
            None, {f"in{k}": v for k, (v, n) in enumerate(zip(values, node.input)) if n}
        )
    except Exception:  # an operator the evaluator lacks, or one it cannot compute here: the node is kept
        return None
    return [np.asarray(g) for g in got]


def _inline(node: Any, branch: Any, taken: set[str]) -> tuple[list[Any], list[Any]]:
    """``branch``'s nodes and initializers, renamed where a name is already ``taken``, then one ``Identity`` per
    output of ``node`` (the If) from the branch's output."""
    from onnx import helper

    from edgekit.model import all_nodes

    made = {o for n in branch.node for o in n.output if o} | {t.name for t in branch.initializer}
    rename = {n: f"{node.name or node.output[0]}/{n}" for n in made if n in taken}
    inits = []
    for t in branch.initializer:
        copy = type(t)()
        copy.CopyFrom(t)
        copy.name = rename.get(t.name, t.name)
        inits.append(copy)
    nodes = []
    for n in branch.node:
        copy = type(n)()
        copy.CopyFrom(n)
        nodes.append(copy)
    for n in [m for c in nodes for m in _with_subgraphs(c, all_nodes)]:
        n.input[:] = [rename.get(i, i) for i in n.input]
        n.output[:] = [rename.get(o, o) for o in n.output]
    for out, res in zip(node.output, branch.output):
        nodes.append(helper.make_node("Identity", [rename.get(res.name, res.name)], [out], name=f"{out}_from_branch"))
    return nodes, inits


def _with_subgraphs(node: Any, walk: Any) -> list[Any]:
    """``node`` and the nodes of its subgraphs."""
    out = [node]
    for attr in node.attribute:
        for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
            out.extend(walk(g))
    return out


def _used(graph: Any) -> set[str]:
    from edgekit.model import all_nodes

    return {i for n in all_nodes(graph) for i in n.input if i} | {o.name for o in graph.output}


def specialise(model: Any, fixed: dict[str, Any], max_passes: int = 8) -> Specialised:
    """``model`` (an onnx.ModelProto, not changed) with each input named in ``fixed`` replaced by its value.

    Folding repeats until nothing changes: an inlined branch may hold an ``If`` on the shape of a tensor that is
    static once the first switch is gone (``Shape`` and ``Size`` of a tensor of static shape are constants)."""
    import onnx
    from onnx import numpy_helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    names = [i.name for i in g.input]
    unknown = sorted(set(fixed) - set(names))
    if unknown:
        raise ValueError(f"cannot fix {unknown}: not inputs of the model (its inputs: {names})")
    result = Specialised(m, {k: np.asarray(v) for k, v in fixed.items()})
    kept_inputs = [i for i in g.input if i.name not in fixed]
    del g.input[:]
    g.input.extend(kept_inputs)
    g.initializer.extend(numpy_helper.from_array(v, k) for k, v in result.fixed.items())
    for _ in range(max_passes):
        if not _fold_pass(m, result, _static_shapes(m)):
            break
        _drop_unused(g)
    _drop_unused(g)
    return result


def _static_shapes(m: Any) -> dict[str, list[int]]:
    """The shape of every tensor of ``m``'s main graph whose dimensions shape inference knows."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(m, data_prop=True).graph
    except Exception:  # a graph shape inference refuses: nothing is known beyond the constants
        return {}
    out = {}
    for v in list(inferred.value_info) + list(inferred.input) + list(inferred.output):
        t = v.type.tensor_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            out[v.name] = [d.dim_value for d in t.shape.dim]
    return out


def _shape_of(node: Any, static: dict[str, list[int]]) -> np.ndarray | None:
    """The value of a ``Shape`` or ``Size`` node whose input has a static shape."""
    dims = static.get(node.input[0]) if node.input else None
    if dims is None or node.domain or node.op_type not in ("Shape", "Size"):
        return None
    if node.op_type == "Size":
        return np.array(int(np.prod(dims)), np.int64)
    attrs = {a.name: a.i for a in node.attribute}
    return np.array(dims[attrs.get("start", 0) : attrs.get("end", len(dims))], np.int64)


def _fold_pass(m: Any, result: Specialised, static: dict[str, list[int]]) -> bool:
    """One walk over the main graph: fold constant nodes, inline each If on a constant; True if anything changed."""
    from onnx import numpy_helper

    g = m.graph
    known = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    taken = {o for n in g.node for o in n.output} | set(known) | {i.name for i in g.input}
    queue, out_nodes, new_inits, changed = list(g.node), [], [], False
    while queue:
        node = queue.pop(0)
        ins = [i for i in node.input if i]
        if node.op_type == "If" and not node.domain and node.input[0] in known:
            which = "then" if bool(np.asarray(known[node.input[0]]).reshape(-1)[0]) else "else"
            branch = next(a.g for a in node.attribute if a.name == f"{which}_branch")
            nodes, inits = _inline(node, branch, taken)
            taken |= {o for n in nodes for o in n.output} | {t.name for t in inits}
            known.update({t.name: numpy_helper.to_array(t) for t in inits})
            new_inits.extend(inits)
            result.inlined[node.name or node.output[0]] = which
            result.from_branches.update(n.name or n.output[0] for n in nodes)
            queue = nodes + queue  # a branch may hold an If on the same value
            changed = True
            continue
        has_subgraph = any(a.HasField("g") or len(a.graphs) for a in node.attribute)
        shape = _shape_of(node, static)
        if shape is not None:
            got: list[np.ndarray] | None = [shape]
        elif node.op_type in RANDOM_OPS or has_subgraph or not all(i in known for i in ins):
            got = None
        else:
            got = _evaluate(node, [known[i] if i else np.zeros(0) for i in node.input], list(m.opset_import))
        if got is None:
            out_nodes.append(node)
            continue
        for name, value in zip([o for o in node.output if o], got):
            known[name] = value
            new_inits.append(numpy_helper.from_array(np.asarray(value), name))
        result.folded.append(node.name or node.output[0])
        changed = True
    del g.node[:]
    g.node.extend(out_nodes)
    g.initializer.extend(new_inits)
    return changed


def _drop_unused(g: Any) -> None:
    """Remove nodes none of whose outputs is used (repeatedly), then initializers nothing reads."""
    while True:
        used = _used(g)
        dead = [n for n in g.node if not any(o in used for o in n.output if o)]
        if not dead:
            break
        for n in dead:
            g.node.remove(n)
    used = _used(g) | {i.name for i in g.input}  # an input's default stays with it
    keep = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)

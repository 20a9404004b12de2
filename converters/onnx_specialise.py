"""An ONNX graph specialised for inputs that hold one value: the input becomes a constant, what depends only on
constants is folded, and an ``If`` whose condition becomes constant is replaced by the branch it takes.

Silero VAD switches on its 0-d ``sr`` (``If(Equal(sr, 16000))``: 16 kHz and 8 kHz branches); runtimes whose
converters cannot take an ``If`` (or cannot infer shapes inside one) can take the graph with ``sr`` fixed to 16000:
the same function for that value, without the switch. Constants are folded by :func:`edgekit.passes.graph_fold.
fold_constants` (``Constant`` nodes, all-constant sub-graphs, ``Shape`` of a tensor of static shape); each ``If`` on
a folded condition is replaced by its branch, and folding runs again over what the branch brought (Silero's holds
``If`` nodes on the size of its state). The names of the graph's outputs are kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Specialised:
    """The specialised model and what changed (``notes``: the fixed values and the ``If`` nodes they removed)."""

    model: Any  # onnx.ModelProto
    fixed: dict[str, np.ndarray]
    nodes: tuple[int, int] = (0, 0)  # main-graph nodes before and after
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
    """``model`` (an onnx.ModelProto, not changed) with each input named in ``fixed`` replaced by its value."""
    import onnx
    from onnx import numpy_helper

    from edgekit.passes.graph_fold import fold_constants

    names = [i.name for i in model.graph.input]
    unknown = sorted(set(fixed) - set(names))
    if unknown:
        raise ValueError(f"cannot fix {unknown}: not inputs of the model (its inputs: {names})")
    m = onnx.ModelProto()
    m.CopyFrom(model)
    result = Specialised(m, {k: np.asarray(v) for k, v in fixed.items()})
    kept_inputs = [i for i in m.graph.input if i.name not in fixed]
    del m.graph.input[:]
    m.graph.input.extend(kept_inputs)
    m.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in result.fixed.items())
    for _ in range(max_passes):
        m = fold_constants(m)
        if not _inline_constant_ifs(m.graph, result):
            break
    _drop_unused(m.graph)
    result.model, result.nodes = m, (len(model.graph.node), len(m.graph.node))
    return result


def _inline_constant_ifs(g: Any, result: Specialised) -> bool:
    """Replace each main-graph ``If`` whose condition is an initializer by the branch it takes; True if any was."""
    from onnx import numpy_helper

    conds = {t.name: t for t in g.initializer}
    taken = {o for n in g.node for o in n.output} | set(conds) | {i.name for i in g.input}
    out_nodes, new_inits, changed = [], [], False
    for node in g.node:
        if node.op_type != "If" or node.domain or node.input[0] not in conds:
            out_nodes.append(node)
            continue
        which = "then" if bool(numpy_helper.to_array(conds[node.input[0]]).reshape(-1)[0]) else "else"
        branch = next(a.g for a in node.attribute if a.name == f"{which}_branch")
        nodes, inits = _inline(node, branch, taken)
        taken |= {o for n in nodes for o in n.output} | {t.name for t in inits}
        out_nodes.extend(nodes)
        new_inits.extend(inits)
        result.inlined[node.name or node.output[0]] = which
        result.from_branches.update(n.name or n.output[0] for n in nodes)
        changed = True
    if changed:
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


# ops whose presence above an If's condition means the condition is computed from the data, not switched by an input
_COMPUTE = {"Conv", "ConvTranspose", "MatMul", "Gemm", "LSTM", "GRU", "RNN", "Sigmoid", "Softmax", "Relu", "Tanh"}


def control_flow_advice(model: Any, backend_said: str) -> str | None:
    """What a user can do about the first ``If``/``Loop``/``Scan`` node a converter failed on: fix the graph
    input(s) its condition switches on (``--input-value``, folded by :func:`specialise`), or, when the condition
    is computed from the data at run time, choose a backend that runs control flow. None if there is none."""
    g = model.graph
    flow = [n for n in g.node if n.op_type in ("If", "Loop", "Scan")]
    if not flow:
        return None
    node = flow[0]
    name = node.name or node.output[0]
    head = f"{backend_said} cannot convert the {node.op_type} node {name!r} (control flow)"
    others = "choose ort or openvino, which run control flow"
    if node.op_type != "If":
        return f"{head}: {others}"
    producer = {o: n for n in g.node for o in n.output}
    inputs = {i.name for i in g.input}
    seen, stack, found, ops = set(), [node.input[0]], [], set()
    while stack:
        t = stack.pop()
        if t in seen:
            continue
        seen.add(t)
        if t in inputs:
            found.append(t)
        elif t in producer:
            ops.add(producer[t].op_type)
            stack.extend(producer[t].input)
    if not found or ops & _COMPUTE:
        return f"{head}: its condition is computed from the data at run time, so it cannot be folded away; {others}"
    return (
        f"{head}: its condition depends only on the input(s) {', '.join(sorted(found))}; give the value they hold "
        f"(--input-value NAME=VALUE, or once in each .npz) and edgekit folds the If away (docs/INPUTS.md), or {others}"
    )

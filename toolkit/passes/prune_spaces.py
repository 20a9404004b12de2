"""The bookkeeping of channel pruning's graph analysis: channel spaces (united by a union-find), the groups they
form, and helpers to read ONNX nodes."""

from dataclasses import dataclass, field
from typing import Any

import onnx
from onnx import helper


@dataclass
class Group:
    """United channel spaces: these channels are removed together from every producer."""

    root: int
    size: int
    producers: list = field(default_factory=list)  # node names
    reasons: list = field(default_factory=list)  # why it cannot be pruned (empty: prunable)


class Spaces:
    """Channel spaces, united by a union-find; each remembers its producers and why it cannot be pruned."""

    def __init__(self) -> None:
        self.parent: list[int] = []
        self.size: list[int] = []
        self.producers: list[list[str]] = []
        self.reasons: list[list[str]] = []

    def new(self, size: int, producer: str) -> int:
        self.parent.append(len(self.parent))
        self.size.append(size)
        self.producers.append([producer])
        self.reasons.append([])
        return len(self.parent) - 1

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int) -> None:
        a, b = self.find(a), self.find(b)
        if a != b:
            self.parent[b] = a
            self.producers[a] += self.producers[b]
            self.reasons[a] += self.reasons[b]

    def invalidate(self, layout: list | None, reason: str) -> None:
        for space, _ in layout or ():
            if space is not None:
                r = self.reasons[self.find(space)]
                if reason not in r:
                    r.append(reason)


def layout_size(layout: list) -> int:
    """The channels of a layout (its segments' sizes summed)."""
    return sum(s for _, s in layout)


def node_attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    """Attribute ``name`` of ``node``, or ``default``."""
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def implicit_inputs(node: onnx.NodeProto) -> set[str]:
    """Tensors the sub-graphs of ``node`` (If, Loop, Scan) read from the outer graph."""
    names: set[str] = set()
    for a in node.attribute:
        for g in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
            produced = (
                {o for n in g.node for o in n.output} | {i.name for i in g.input} | {i.name for i in g.initializer}
            )
            for n in g.node:
                names |= {i for i in n.input if i and i not in produced}
                names |= implicit_inputs(n)
    return names

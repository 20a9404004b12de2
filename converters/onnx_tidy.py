"""ONNX rewrites that change no value, for converters that refuse a spelling of a graph rather than its meaning.

X2Paddle and MindSpore Lite's converter refuse a pooling node that carries a ``dilations`` attribute, even one of
all ones (the default, which exporters such as Ultralytics' write out on every ``MaxPool``): "only dilations = 0
is supported", "pooling op not support dilations now". Dropping an all-ones ``dilations`` computes the same function;
a pooling node with a real dilation is left as it is, and the converter's own error then names it.
"""

from __future__ import annotations

from pathlib import Path

POOLS = ("MaxPool", "AveragePool", "LpPool")


def drop_default_dilations(onnx_path: str | Path, work: Path) -> tuple[Path, list[str]]:
    """``onnx_path``, or a copy in ``work`` without all-ones pooling dilations; and the nodes changed."""
    import onnx

    from edgekit.model import all_nodes

    model = onnx.load(str(onnx_path))
    changed = []
    for node in all_nodes(model.graph):
        if node.op_type not in POOLS:
            continue
        for attr in list(node.attribute):
            if attr.name == "dilations" and all(d == 1 for d in attr.ints):
                node.attribute.remove(attr)
                changed.append(node.name or node.output[0])
    if not changed:
        return Path(onnx_path), []
    Path(work).mkdir(parents=True, exist_ok=True)
    out = Path(work) / (Path(onnx_path).stem + ".tidy.onnx")
    onnx.save(model, str(out))
    return out, changed

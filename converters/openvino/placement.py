"""Placement for OpenVINO: ``Core.query_model`` for each profile device whose plugin is on this machine,
the documented device limits otherwise; the steps of OpenVINO's conditional compilation."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgekit import support_tables as st
from edgekit.placement_graph import _flops, _node
from edgekit.placement_targets import _accelerator_name, _fix_op, _target

if TYPE_CHECKING:
    from edgekit.profiles import Profile

OV_SKIP = {"Parameter", "Result", "Constant"}


def openvino_graph(model: Any) -> list[dict[str, Any]]:
    """Nodes of an OpenVINO model (Parameter/Constant/Result left out), shapes from the IR, FLOPs."""
    nodes = []
    for op in model.get_ordered_ops():
        kind = op.get_type_name()
        if kind in OV_SKIP:
            continue
        inputs = []
        for port in op.inputs():
            src = port.get_source_output()
            ps = port.get_partial_shape()
            shape = [d.get_length() if d.is_static else -1 for d in ps] if ps.rank.is_static else None
            inputs.append(
                {
                    "name": f"{src.get_node().get_friendly_name()}:{src.get_index()}",
                    "shape": shape,
                    "dtype": port.get_element_type().get_type_name(),
                    "const": src.get_node().get_type_name() == "Constant",
                }
            )
        outputs = [f"{op.get_friendly_name()}:{i}" for i in range(op.get_output_size())]
        attrs = {}
        try:
            attrs = {k: v for k, v in op.get_attributes().items() if isinstance(v, (int, float, str, list))}
        except Exception:  # some ops do not expose attributes to Python
            pass
        node = _node(op.get_friendly_name(), kind, inputs, outputs, attrs, "openvino")
        out_shapes = []
        if op.get_output_size():
            ps = op.get_output_partial_shape(0)
            out_shapes = [[d.get_length() if d.is_static else -1 for d in ps] if ps.is_static else None]
        node["flops"] = _flops(node, out_shapes)
        nodes.append(node)
    return nodes


def openvino_targets(ov_model: Any, profile: Profile) -> list[dict[str, Any]]:
    from edgekit.converters.openvino import BACKEND as ov_backend
    from edgekit.converters.openvino.common import _present, device_list

    core = ov_backend.core()
    available = list(core.available_devices)
    nodes = openvino_graph(ov_model)
    table = st.load("openvino")
    dynamic = any(not ov_model.input(i).get_partial_shape().is_static for i in range(len(ov_model.inputs)))
    targets = []
    for dev in device_list(profile.backend("openvino").get("device", "CPU")):
        kind = "npu" if dev.startswith("NPU") else "gpu" if dev.startswith("GPU") else "cpu"
        device = _accelerator_name(profile, f"openvino-{kind}") or (
            profile.data["cpu"].get("model") if kind == "cpu" else None
        )
        if _present(dev, available):
            supported = core.query_model(ov_model, dev)
            verdicts = [
                (st.YES, "", "")
                if n["name"] in supported
                else (
                    st.NO,
                    f"OpenVINO's {dev} plugin does not support {n['op']} (Core.query_model)",
                    _fix_op(n["op"], f"OpenVINO {dev}"),
                )
                for n in nodes
            ]
            notes = []
            if dev == "CPU":
                notes.append(
                    "the CPU is the fallback device, not an accelerator: listed to show what OpenVINO's "
                    "CPU plugin on this machine accepts"
                )
            targets.append(
                _target(
                    dev,
                    device,
                    f"Core.query_model on this machine's {dev} plugin ({ov_backend._device_name(core, dev)})",
                    nodes,
                    verdicts,
                    notes=notes,
                )
            )
            continue
        why = f"not checked: no {dev} plugin on this machine"
        limits = st.device_limits(table, dev)
        if dynamic and limits.get("dynamic_shapes") == "no":
            verdicts = [
                (
                    st.NO,
                    f'the model has dynamic input shapes; "{limits["quote"]}"',
                    "fix the shapes: rebuild with --input-shape NAME=D1,D2,...",
                )
            ] * len(nodes)
        else:
            verdicts = [(st.UNKNOWN, f"{why}; OpenVINO's documentation has no per-operation {dev} table", "")] * len(
                nodes
            )
        t = _target(dev, device, why, nodes, verdicts, st.cite(table), partition_count=None)
        t["unknown"] = t["unknown"][:1] and [{"node": "*", "op": "*", "reason": verdicts[0][1]}]
        t["notes"].append(ov_backend._plugin_detail(core, dev, available))
        targets.append(t)
    return targets


def _read_openvino(model_path: str | Path, workdir: str | Path) -> tuple[str, Any]:
    from edgekit.converters.openvino import BACKEND as ov_backend

    return "openvino", ov_backend.core().read_model(str(model_path))


def _write_openvino(bundle_dir: Path, manifest: dict[str, Any], out: Path) -> list[Path]:
    from edgekit.converters.openvino import BACKEND as ov_backend

    model = ov_backend.core().read_model(str(bundle_dir / manifest["model"]))
    ops = sorted({op.get_type_name() for op in model.get_ops()})
    (out / "ops.txt").write_text("".join(f"{op}\n" for op in ops))
    (out / "README.txt").write_text(
        "OpenVINO: no operator list applies\n\n"
        "OpenVINO's size reduction is conditional compilation, which reads code-usage statistics collected\n"
        "by running the model on an instrumented OpenVINO build, not a list of operators:\n\n"
        "  cmake -DENABLE_PROFILING_ITT=ON -DSELECTIVE_BUILD=COLLECT .. && cmake --build .\n"
        "  python thirdparty/itt_collector/runtool/sea_runtool.py --bindir $OPENVINO_LIBRARY_DIR -o stats/model \\\n"
        "      ! ./benchmark_app -niter 1 -nireq 1 -m model.xml\n"
        "  cmake -DSELECTIVE_BUILD=ON -DSELECTIVE_BUILD_STAT=$PWD/stats/*.csv .. && cmake --build .\n\n"
        "ops.txt lists the model's OpenVINO operation types for reference only.\n"
        "Source: https://docs.openvino.ai/2024/openvino-workflow/deployment-locally/"
        "optimial-binary-size-conditional-compilation.html\n"
    )
    return [out / "ops.txt", out / "README.txt"]


def nodes(kind: str, graph: Any) -> Any:
    return openvino_graph(graph) if kind == "openvino" else graph


def targets(kind: str, graph: Any, nodes: list[dict[str, Any]], profile: Profile) -> list[dict[str, Any]]:
    return openvino_targets(graph, profile) if kind == "openvino" else []


READERS = {".xml": _read_openvino}
OPS_AS_GRAPH = False
SELECTIVE_BUILD = ("OpenVINO", "openvino", _write_openvino)
PLAN = (
    "none applies: OpenVINO's conditional compilation needs usage statistics from an instrumented run; "
    "README.txt gives the steps"
)

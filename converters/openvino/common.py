"""Shared by the OpenVINO backend's modules: importing the runtime, device lists, quiet NNCF."""

import contextlib
import io
import logging
import warnings as _warnings
from typing import Any, Iterable, Iterator

# Activations NNCF's docs recommend the MIXED preset (asymmetric activation quantization) for.
NON_RELU_ACTIVATIONS = {
    "HardSwish",
    "HardSigmoid",
    "Sigmoid",
    "Elu",
    "Selu",
    "PRelu",
    "LeakyRelu",
    "Gelu",
    "Mish",
    "Tanh",
    "Softplus",
    "Swish",
    "Celu",
}


PRECISION_MARK = ["edgekit", "inference_precision"]  # rt_info key: the precision an IR must execute in


AUTO_DEFAULT = ("GPU", "CPU")  # OpenVINO's AUTO default priority (the NPU is only used when listed)


# One implementation of the telemetry block, shared with the agent's runner (which must stay stdlib-only).
from edgekit_agent.runners.openvino import no_telemetry  # noqa: E402


def _ov() -> Any:
    no_telemetry()
    import openvino

    return openvino


def _short_version(v: object) -> str:
    return str(v).split("-")[0]


def device_list(spec: str) -> list[str]:
    """``CPU`` -> [CPU]; ``AUTO:NPU,GPU,CPU`` -> [NPU, GPU, CPU]; ``AUTO`` -> OpenVINO's default order."""
    spec = (spec or "CPU").strip()
    if spec == "AUTO":
        return list(AUTO_DEFAULT)
    if spec.startswith(("AUTO:", "HETERO:")):
        return [d for d in spec.split(":", 1)[1].split(",") if d]
    return [spec]


def _present(device: str, available: Iterable[str]) -> bool:
    return any(a == device or a.split(".")[0] == device for a in available)


@contextlib.contextmanager
def _quiet() -> Iterator[io.StringIO]:
    """NNCF logs and draws progress bars on stdout; keep edgekit's stdout (and --json) clean."""
    buf = io.StringIO()
    nncf_logger = logging.getLogger("nncf")
    level = nncf_logger.level
    nncf_logger.setLevel(logging.ERROR)
    try:
        with _warnings.catch_warnings(), contextlib.redirect_stdout(buf):
            _warnings.simplefilter("ignore")
            yield buf
    finally:
        nncf_logger.setLevel(level)

"""edgekit: build, shrink, deploy and benchmark ML models on your own edge devices.

The Python API behind the ``edgekit`` command (run from the repository's root)::

    import edgekit

    model = "examples/ppocr_mobile_v2_cls.onnx"
    report = edgekit.build(model, profile="host", output="out/", precision="fp32", input_shapes=["x=1,3,48,192"])
    with edgekit.open_device("local") as device:  # or open_device("ssh", "pi@raspberrypi.local", profile=...)
        result = edgekit.deploy("out/", device)
    print(result["latency_ms"]["p50"])

``open_device(kind, target, ...)`` connects through a transport (``local``, ``ssh``, ``adb``, ``serial``;
``edgekit.transports.parse_url("ssh://pi@host")`` gives the ``(kind, target, options)`` of a URL) and
returns a :class:`edgekit.device.Device`, the agent on that device.
"""

__version__ = "0.1.0"

# Before anything here imports onnxruntime: ONNX Runtime records telemetry from its import on unless
# ORT_DISABLE_TELEMETRY=1 is set first (the processes edgekit starts inherit it).
from edgekit_agent.runners.quiet import no_ort_telemetry  # noqa: E402

no_ort_telemetry()

from typing import Any  # noqa: E402

from . import profiles  # noqa: E402
from .errors import (  # noqa: E402
    AgentError,
    BackendUnavailable,
    BundleError,
    ConversionError,
    DataError,
    EdgekitError,
    FidelityError,
    ModelError,
    ProfileError,
    TransportError,
)

_LAZY = {
    "build": "builder",
    "BuildOptions": "build_options",
    "deploy": "deployer",
    "bench": "deployer",
    "profile": "layer_profile",
    "profile_html": "layer_profile_html",
    "connect": "transports",
    "open_device": "device",
    "device_probe": "probe",
    "setup_device": "device_setup",
    "create_profile": "profile_create",
    "parse_url": "transports",
    "doctor": "diagnostics",
}


def __getattr__(name: str) -> Any:
    # `import edgekit` stays cheap: onnx, onnxruntime and paramiko load on first use.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'edgekit' has no attribute {name!r}")


__all__ = [
    "AgentError",
    "BackendUnavailable",
    "BuildOptions",
    "BundleError",
    "ConversionError",
    "DataError",
    "EdgekitError",
    "FidelityError",
    "ModelError",
    "ProfileError",
    "TransportError",
    "__version__",
    "bench",
    "build",
    "connect",
    "create_profile",
    "deploy",
    "device_probe",
    "doctor",
    "open_device",
    "parse_url",
    "profile",
    "profile_html",
    "profiles",
    "setup_device",
]

"""edgekit: build, shrink, deploy and benchmark ML models on your own edge devices.

The Python API behind the ``edgekit`` command::

    import edgekit
    report = edgekit.build("model.onnx", profile="raspberrypi5", output="out/", precision="int8", calib="data.npz")
    result = edgekit.deploy("out/", edgekit.connect("local"))
    print(result["latency_ms"]["p50"])
"""

__version__ = "0.1.0"

# Before anything here imports onnxruntime: ONNX Runtime records telemetry from its import on unless
# ORT_DISABLE_TELEMETRY=1 is set first (the processes edgekit starts inherit it).
from edgekit_agent.runners.quiet import no_ort_telemetry  # noqa: E402

no_ort_telemetry()

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
    "deploy": "deployer",
    "bench": "deployer",
    "connect": "transports",
    "doctor": "diagnostics",
}


def __getattr__(name):
    # `import edgekit` stays cheap: onnx, onnxruntime and paramiko load on first use.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'edgekit' has no attribute {name!r}")


__all__ = sorted(
    [
        "AgentError",
        "BackendUnavailable",
        "BundleError",
        "ConversionError",
        "DataError",
        "EdgekitError",
        "FidelityError",
        "ModelError",
        "ProfileError",
        "TransportError",
        "bench",
        "build",
        "connect",
        "deploy",
        "doctor",
        "profiles",
        "__version__",
    ]
)

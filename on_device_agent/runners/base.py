"""The runner interface (Python 3.7 syntax, no third-party imports at module level)."""

import os
from typing import Any, Dict, List, Optional


class RunnerError(Exception):
    status = 400


class RuntimeMissing(RunnerError):
    status = 501


class RunnerFault(RunnerError):
    """The runtime failed on the device (not the request's fault): answered as 500."""

    status = 500


class Runner(object):
    backend: Optional[str] = None
    runtime: Optional[str] = None  # the import / pip name of the runtime
    install_hint = ""

    def __init__(
        self,
        bundle_dir: str,
        manifest: Dict[str, Any],
        threads: Optional[int] = None,
        providers: Optional[List[str]] = None,
    ) -> None:
        self.bundle_dir = bundle_dir
        self.manifest = manifest
        self.threads = int(threads) if threads else (os.cpu_count() or 1)
        self.requested = list(providers or manifest.get("runner", {}).get("providers") or [])
        self.load_ms: Optional[float] = None

    @classmethod
    def runtime_version(cls) -> Optional[str]:
        """The runtime's version if importable here, else None."""
        raise NotImplementedError

    def model_path(self) -> str:
        return os.path.join(self.bundle_dir, self.manifest["model"])

    def load(self) -> None:
        raise NotImplementedError

    def run(self, feeds: Dict[str, Any]) -> Dict[str, Any]:
        """``{input: ndarray}`` -> ``{output: ndarray}``."""
        raise NotImplementedError

    def describe(self) -> Dict[str, Any]:
        """What really runs: runtime, version, accelerator, requested vs active providers, threads."""
        raise NotImplementedError

    def placement(self, feeds: Dict[str, Any]) -> Optional[Dict[str, int]]:
        """``{accelerator: nodes}`` measured from one profiled run of ``feeds``, or None where unknown."""
        return None

    def close(self) -> None:
        pass

    # -- input checking shared by every runner --------------------------------
    def check_feeds(self, feeds: Dict[str, Any]) -> None:
        """Raise RunnerError (HTTP 400) for wrong names, dtypes or shapes."""
        specs = dict((s["name"], s) for s in self.manifest["inputs"])
        unknown = sorted(set(feeds) - set(specs))
        missing = sorted(set(specs) - set(feeds))
        if unknown or missing:
            raise RunnerError("inputs do not match the model: expected %s, got %s" % (sorted(specs), sorted(feeds)))
        for name, a in feeds.items():
            s = specs[name]
            if str(a.dtype) != s["dtype"]:
                raise RunnerError("input %r has dtype %s; the model wants %s" % (name, a.dtype, s["dtype"]))
            want = s["shape"]
            if len(a.shape) != len(want) or any(isinstance(w, int) and w != g for w, g in zip(want, a.shape)):
                raise RunnerError("input %r has shape %s; the model wants %s" % (name, list(a.shape), want))


def int8_products_saturate() -> bool:
    """True on an x86-64 CPU without VNNI, where ONNX Runtime's fused u8s8 int8 kernels (vpmaddubsw) saturate
    their 16-bit intermediate sums; ARM dot-product kernels and VNNI do not. Unknown (not Linux): False."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return not ({"avx512_vnni", "avx_vnni"} & flags)
    except OSError:
        pass
    return False

"""The runner interface (Python 3.7 syntax, no third-party imports at module level)."""

import os
from typing import Any, Dict, List, Optional, Sequence


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
    def drop_fixed(self, feeds: Dict[str, Any]) -> Dict[str, Any]:
        """``feeds`` without the inputs the bundle fixed in its graph (manifest ``fixed_inputs``): a request may
        leave such an input out or send the value it was fixed to; another value is a RunnerError (HTTP 400)."""
        fixed = self.manifest.get("fixed_inputs") or []
        if not fixed or not any(f["name"] in feeds for f in fixed):
            return feeds
        out = dict(feeds)
        for f in fixed:
            if f["name"] not in out:
                continue
            a = out.pop(f["name"])
            if list(getattr(a, "shape", ())) != list(f["shape"]) or a.tolist() != f["value"]:
                raise RunnerError(
                    "input %r was fixed to %s when this bundle was built (its graph no longer takes it): send that "
                    "value or leave the input out; for another value build again with --input-value %s=VALUE "
                    "(or that value in the data)" % (f["name"], f["value"], f["name"])
                )
        return out

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
            problem = check_shape(name, a.shape, s.get("allowed"))
            if problem:
                raise RunnerError(problem)
            want = s["shape"]
            if len(a.shape) != len(want) or any(isinstance(w, int) and w != g for w, g in zip(want, a.shape)):
                raise RunnerError("input %r has shape %s; the model wants %s" % (name, list(a.shape), want))


def fit_dtype(name: str, a: Any, dtype: Any, runtime: str) -> Any:
    """``a`` as the ``dtype`` a runtime's converted model takes (a numpy dtype or its name): int64 ids as int32,
    a bool mask as int32/uint8, when no value changes; else RunnerError naming the input and what to do."""
    import numpy as np

    want = np.dtype(dtype)
    if a.dtype == want:
        return a
    if a.dtype.kind in "iub" and want.kind in "iub":
        info = np.iinfo(want) if want.kind != "b" else None
        fits = a.size == 0 or (
            bool(np.all((a == 0) | (a == 1))) if info is None else (a.min() >= info.min and a.max() <= info.max)
        )
        if fits:
            return a.astype(want)
    elif a.dtype.kind == "f" and want.kind == "f":
        return a.astype(want)
    raise RunnerError(
        "input %r is %s, but the %s model takes %s and its values do not all fit: pass values that fit %s, "
        "or choose another backend" % (name, a.dtype, runtime, want, want)
    )


def as_declared(outputs: Dict[str, Any], manifest: Dict[str, Any]) -> Dict[str, Any]:
    """Outputs in the dtypes the bundle declares, where the runtime computed them in another integer width
    (int32 for int64, uint8 for bool): what a client gets does not depend on the backend."""
    import numpy as np

    declared = dict((o["name"], o.get("dtype")) for o in manifest.get("outputs") or [])
    out = {}
    for name, a in outputs.items():
        want = declared.get(name)
        if want and str(a.dtype) != want and a.dtype.kind in "iub" and np.dtype(want).kind in "iub":
            a = a.astype(want) if np.dtype(want).kind != "b" else a != 0
        out[name] = a
    return out


def check_shape(name: str, shape: Sequence[int], allowed: Optional[List[Any]]) -> Optional[str]:
    """None when ``shape`` is one the manifest allows (per dimension: a size, {"min", "max"}, {"values"} or
    None for any; ``allowed`` None: no declaration), else what is wrong: the input, the shape and the allowed ones."""
    if allowed is None:
        return None
    ok = len(shape) == len(allowed) and all(dim_allows(a, size) for size, a in zip(shape, allowed))
    if ok:
        return None
    return "input %r has shape %s, outside the shapes the bundle was built and checked for: %s" % (
        name,
        list(shape),
        describe_allowed(allowed),
    )


def dim_allows(allowed: Any, size: int) -> bool:
    """Whether one dimension's declaration (a size, {"min", "max"}, {"values"} or None for any) allows ``size``."""
    if isinstance(allowed, int):
        return size == allowed
    if isinstance(allowed, dict) and "values" in allowed:
        return size in allowed["values"]
    if isinstance(allowed, dict):
        return bool(allowed["min"] <= size <= allowed["max"])
    return True


def describe_allowed(allowed: List[Any]) -> str:
    """``[1, {"min": 32, "max": 960}, {"values": [8, 16]}, None]`` -> ``[1, 32..960, {8,16}, any]``."""
    out = []
    for a in allowed:
        if isinstance(a, dict) and "values" in a:
            out.append("{" + ",".join(str(v) for v in a["values"]) + "}")
        elif isinstance(a, dict):
            out.append("%s..%s" % (a["min"], a["max"]))
        else:
            out.append("any" if a is None else str(a))
    return "[" + ", ".join(out) + "]"


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

"""ONNX Runtime runner: providers from the profile, filtered by what this build has."""

import json
import os
import tempfile
from typing import Any, Dict, List, Optional

from .base import Runner, RuntimeMissing, int8_products_saturate
from .quiet import no_ort_telemetry

CPU = "CPUExecutionProvider"


SATURATION_WARNING = (
    "this CPU (x86-64 without VNNI) computes ONNX Runtime's fused uint8 x int8 products with saturation: an "
    "int8 model quantized without reduce_range for another device (e.g. an ARM board) gives less accurate "
    "outputs here than on that device; build with --profile host for this machine"
)


class OrtRunner(Runner):
    backend = "ort"
    runtime = "onnxruntime"
    install_hint = "pip install onnxruntime (or onnxruntime-gpu / the vendor's build for this device)"

    @classmethod
    def runtime_version(cls) -> Optional[str]:
        try:
            no_ort_telemetry()
            import onnxruntime
        except ImportError:
            return None
        return onnxruntime.__version__

    def _ort(self) -> Any:
        try:
            no_ort_telemetry()
            import onnxruntime
        except ImportError as e:
            raise RuntimeMissing(
                "onnxruntime is not installed for this device's Python (%s): %s" % (e, self.install_hint)
            ) from e
        return onnxruntime

    def _session_options(self, ort: Any, profile_prefix: Optional[str] = None) -> Any:
        so = ort.SessionOptions()
        so.intra_op_num_threads = self.threads
        so.inter_op_num_threads = 1
        if self.manifest.get("runner", {}).get("graph_optimization") == "basic":
            # QDQ nodes stay unfused: int8 arithmetic computed exactly (no saturating fused kernels), slower
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        if self.manifest.get("runner", {}).get("saved_runtime_optimizations"):
            # an ORT-format file converted in the "Runtime" style: replay its saved optimizations on the nodes the
            # CPU runs (the bundle's files are checked against the manifest's sha256 before they are served)
            so.add_session_config_entry("session.enable_saved_runtime_optimizations", "1")
        so.log_severity_level = 3
        if profile_prefix:
            so.enable_profiling = True
            so.profile_file_prefix = profile_prefix
        return so

    def _providers(self, ort: Any) -> List[str]:
        available = ort.get_available_providers()
        wanted = self.requested or [CPU]
        use = [p for p in wanted if p in available]
        if CPU not in use:
            use.append(CPU)
        self.fallback = [p for p in wanted if p not in available]
        return use

    def load(self) -> None:
        import time

        ort = self._ort()
        self.providers = self._providers(ort)
        t0 = time.perf_counter()
        try:
            self.session = ort.InferenceSession(
                self.model_path(), sess_options=self._session_options(ort), providers=self.providers
            )
        except Exception as e:  # onnxruntime's Fail
            if not constant_folding_failed(e):
                raise
            self.session = ort.InferenceSession(
                self.model_path(),
                sess_options=self._session_options(ort),
                providers=self.providers,
                disabled_optimizers=["ConstantFolding"],
            )
            self.folding_disabled = True
        self.load_ms = (time.perf_counter() - t0) * 1000.0
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.version = ort.__version__

    def run(self, feeds: Dict[str, Any]) -> Dict[str, Any]:
        return dict(zip(self.output_names, self.session.run(self.output_names, feeds)))

    def describe(self) -> Dict[str, Any]:
        active = self.session.get_providers()
        info = {
            "runtime": "onnxruntime",
            "runtime_version": self.version,
            "accelerators_requested": self.requested or [CPU],
            "accelerators_active": active,
            "accelerator": active[0],
            "threads": self.threads,
            "warnings": [],
        }
        for p in self.fallback:
            info["warnings"].append(
                "%s was requested but this onnxruntime build does not have it; it fell back to %s"
                % (p, ", ".join(active))
            )
        opts = self.manifest.get("runner", {})
        if opts.get("graph_optimization") == "basic":
            info["graph_optimization"] = "basic (QDQ unfused: exact int8 arithmetic)"
        if getattr(self, "folding_disabled", False):
            info["graph_optimization"] = "constant folding disabled (it fails to type-check this model's If branches)"
        elif opts.get("int8_u8s8") and active[0] == CPU and int8_products_saturate():
            info["warnings"].append(SATURATION_WARNING)
        return info

    def placement(self, feeds: Dict[str, Any]) -> Dict[str, int]:
        """Run once with ORT's profiler and count which provider executed each node."""
        ort = self._ort()
        tmp = tempfile.mkdtemp(prefix="edgekit-prof-")
        try:
            sess = ort.InferenceSession(
                self.model_path(),
                sess_options=self._session_options(ort, os.path.join(tmp, "p")),
                providers=self.providers,
                **({"disabled_optimizers": ["ConstantFolding"]} if getattr(self, "folding_disabled", False) else {}),
            )
            sess.run(None, feeds)
            path = sess.end_profiling()
            with open(path) as f:
                events = json.load(f)
        finally:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
        nodes = {}
        for e in events:
            args = e.get("args") or {}
            if e.get("cat") == "Node" and "provider" in args:
                nodes[e["name"].rsplit("_kernel_time", 1)[0]] = args["provider"]
        counts: Dict[str, int] = {}
        for provider in nodes.values():
            counts[provider] = counts.get(provider, 0) + 1
        return counts


RUNNER = OrtRunner


def constant_folding_failed(error: BaseException) -> bool:
    """True for ONNX Runtime's failure to type-check an ``If`` branch after constant folding it (a model with
    fixed shapes whose branches give a tensor different ranks, e.g. Silero VAD); the model loads, and runs
    correctly, with that one optimizer disabled. The host's reference session and ORT conversion use it too."""
    text = str(error)
    return "Graph attribute inferencing failed" in text and "If" in text

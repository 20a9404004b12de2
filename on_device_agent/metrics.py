"""Prometheus exposition (text format 0.0.4) of what the agent served since it started."""

import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

LATENCY_BUCKETS_S = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


def _labels(names: Sequence[str], values: Sequence[Any]) -> str:
    return ",".join(
        '%s="%s"' % (n, str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n"))
        for n, v in zip(names, values)
    )


class Metrics(object):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started = time.time()
        self.latency: Dict[
            Tuple[str, ...], List[float]
        ] = {}  # (model, version, backend, accelerator) -> [bucket counts..., sum, count]
        self.queue: Dict[Tuple[str, ...], List[float]] = {}  # same key -> [bucket counts..., sum, count]
        self.requests: Dict[Tuple[str, str], int] = {}  # (model, outcome) -> count
        self.loads: Dict[Tuple[str, str], int] = {}  # (model, version) -> count

    @staticmethod
    def _observe(table: Dict[Tuple[str, ...], List[float]], key: Tuple[str, ...], seconds: float) -> None:
        h = table.get(key)
        if h is None:
            h = table[key] = [0] * len(LATENCY_BUCKETS_S) + [0.0, 0]
        for i, bound in enumerate(LATENCY_BUCKETS_S):
            if seconds <= bound:
                h[i] += 1
        h[-2] += seconds
        h[-1] += 1

    def request(
        self,
        model: str,
        version: Optional[str],
        backend: Optional[str],
        accelerator: Optional[str],
        outcome: str,
        infer_ms: Optional[float] = None,
        queue_ms: Optional[float] = None,
    ) -> None:
        with self.lock:
            self.requests[(model, outcome)] = self.requests.get((model, outcome), 0) + 1
            key = (model, version or "", backend or "", accelerator or "")
            if infer_ms is not None:
                self._observe(self.latency, key, infer_ms / 1000.0)
            if queue_ms is not None:
                self._observe(self.queue, key, queue_ms / 1000.0)

    def load(self, model: str, version: str) -> None:
        with self.lock:
            self.loads[(model, version)] = self.loads.get((model, version), 0) + 1

    def _histogram(self, out: List[str], name: str, help_text: str, table: Dict[Tuple[str, ...], List[float]]) -> None:
        out.append("# HELP %s %s" % (name, help_text))
        out.append("# TYPE %s histogram" % name)
        names = ("model", "version", "backend", "accelerator")
        for key, h in sorted(table.items()):
            base = _labels(names, key)
            for i, bound in enumerate(LATENCY_BUCKETS_S):
                out.append('%s_bucket{%s,le="%s"} %d' % (name, base, repr(bound), h[i]))
            out.append('%s_bucket{%s,le="+Inf"} %d' % (name, base, h[-1]))
            out.append("%s_sum{%s} %r" % (name, base, h[-2]))
            out.append("%s_count{%s} %d" % (name, base, h[-1]))

    def render(self, telemetry_stats: Optional[Dict[str, Any]] = None, loaded: int = 0) -> str:
        out: List[str] = []
        with self.lock:
            self._histogram(
                out,
                "edgekit_inference_duration_seconds",
                "Time the runtime took per request, measured by the agent.",
                self.latency,
            )
            self._histogram(
                out,
                "edgekit_queue_duration_seconds",
                "Time from request arrival to the start of inference (body, decoding, checks, waiting).",
                self.queue,
            )
            out.append("# HELP edgekit_requests_total Inference requests by outcome.")
            out.append("# TYPE edgekit_requests_total counter")
            for (model, outcome), n in sorted(self.requests.items()):
                out.append("edgekit_requests_total{%s} %d" % (_labels(("model", "outcome"), (model, outcome)), n))
            out.append("# HELP edgekit_model_loads_total Model loads (deploys, reloads, first use).")
            out.append("# TYPE edgekit_model_loads_total counter")
            for (model, version), n in sorted(self.loads.items()):
                out.append("edgekit_model_loads_total{%s} %d" % (_labels(("model", "version"), (model, version)), n))
        out.append("# HELP edgekit_models_loaded Models loaded now.")
        out.append("# TYPE edgekit_models_loaded gauge")
        out.append("edgekit_models_loaded %d" % loaded)
        out.append("# HELP edgekit_agent_start_time_seconds When the agent started (Unix time).")
        out.append("# TYPE edgekit_agent_start_time_seconds gauge")
        out.append("edgekit_agent_start_time_seconds %r" % self.started)
        if telemetry_stats is not None:
            out.append("# HELP edgekit_telemetry_ok 1 while requests are being recorded on the device.")
            out.append("# TYPE edgekit_telemetry_ok gauge")
            out.append("edgekit_telemetry_ok %d" % (1 if telemetry_stats["ok"] else 0))
            out.append("# HELP edgekit_telemetry_dropped_total Requests not recorded (store unusable).")
            out.append("# TYPE edgekit_telemetry_dropped_total counter")
            out.append("edgekit_telemetry_dropped_total %d" % telemetry_stats["dropped"])
        return "\n".join(out) + "\n"

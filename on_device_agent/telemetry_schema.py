"""The device's telemetry store: its tables and limits, and the log-scale latency histogram buckets
(standard library only, Python 3.7+)."""

import math
from typing import Any, Optional

SCHEMA_VERSION = 1
COLUMNS = (
    "id",
    "ts",
    "model",
    "version",
    "backend",
    "accelerator",
    "shape",
    "queue_ms",
    "infer_ms",
    "pre_ms",
    "post_ms",
    "outcome",
    "error",
)
CONTEXT_COLUMNS = ("ts", "load1", "mem_available_mb", "temp_c")
EVENT_COLUMNS = ("id", "ts", "kind", "model", "version", "detail")
# Log-scale histogram buckets: 4 per doubling from 10 us (about 19 % wide), HDR-style.
BUCKETS_PER_DOUBLING = 4
BUCKET_BASE_MS = 0.01

DDL = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS requests(id INTEGER PRIMARY KEY, ts REAL NOT NULL, model TEXT, version TEXT,
    backend TEXT, accelerator TEXT, shape TEXT, queue_ms REAL, infer_ms REAL, pre_ms REAL, post_ms REAL,
    outcome TEXT NOT NULL, error TEXT);
CREATE INDEX IF NOT EXISTS requests_ts ON requests(ts);
CREATE TABLE IF NOT EXISTS minutes(minute INTEGER, model TEXT, version TEXT, backend TEXT, accelerator TEXT,
    outcome TEXT, count INTEGER, sum_ms REAL, buckets TEXT,
    PRIMARY KEY(minute, model, version, backend, accelerator, outcome));
CREATE TABLE IF NOT EXISTS context(ts REAL PRIMARY KEY, load1 REAL, mem_available_mb REAL, temp_c REAL);
CREATE TABLE IF NOT EXISTS events(id INTEGER PRIMARY KEY, ts REAL, kind TEXT, model TEXT, version TEXT,
    detail TEXT);
CREATE TABLE IF NOT EXISTS annotations(id INTEGER PRIMARY KEY, request_id INTEGER, pre_ms REAL, post_ms REAL);
"""
ANNOTATION_COLUMNS = ("id", "request_id", "pre_ms", "post_ms")
MAX_QUEUE = 200000  # records waiting for the writer; beyond this they are counted as dropped
MAX_ID = 2**63 - 1
MAX_BYTES = 64 << 20  # the store's size bound: beyond it the oldest raw rows go first
MAX_TEXT = {"model": 128, "version": 128, "backend": 64, "accelerator": 128, "shape": 256, "error": 300}


def _cut(text: Any, kind: str) -> Any:
    return text[: MAX_TEXT[kind]] if isinstance(text, str) else text


class TelemetryError(Exception):
    """The store cannot be used (it is corrupt); answered with 503."""

    status = 503


def bucket_of(ms: Optional[float]) -> int:
    """The histogram bucket of a latency in milliseconds (0: at most ``BUCKET_BASE_MS``, or unknown)."""
    if ms is None or ms <= BUCKET_BASE_MS:
        return 0
    return int(math.log(ms / BUCKET_BASE_MS, 2) * BUCKETS_PER_DOUBLING) + 1


def bucket_upper_ms(index: int) -> float:
    """The upper bound, in milliseconds, of histogram bucket ``index``."""
    return BUCKET_BASE_MS * 2 ** (index / float(BUCKETS_PER_DOUBLING))

"""Dynamic batching: requests to one batch-capable model that arrive within a window run as one batch.

A model is batch-capable when every input's and output's first dimension is dynamic (a name, not a
number, in the manifest) or the manifest says ``"batch": true``. The first request to arrive waits up
to the window (or until ``max_batch`` requests are waiting); the requests whose inputs have the same
dtypes and shapes past the first dimension are concatenated along it, run once, and each gets its
own rows back. Each request still records its own queue time, shape and outcome. A batch never
grows past the batch sizes the bundle declares (its inputs' ``allowed`` first dimension): requests
that would are run in the next batch.
"""

import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from .runners.base import dim_allows


def batch_capable(manifest: Dict[str, Any]) -> bool:
    if manifest.get("batch") is True:
        return True
    specs = list(manifest.get("inputs") or []) + list(manifest.get("outputs") or [])
    return bool(specs) and all(s.get("shape") and not isinstance(s["shape"][0], int) for s in specs)


def batch_fits(manifest: Dict[str, Any]) -> Callable[[int], bool]:
    """Whether a batch of ``n`` rows is one the bundle declares for every input's first dimension."""
    firsts = [s["allowed"][0] for s in manifest.get("inputs") or [] if s.get("allowed")]
    return lambda n: all(dim_allows(a, n) for a in firsts)


class _Item(object):
    __slots__ = ("feeds", "done", "outputs", "error", "t0", "t1", "size")

    def __init__(self, feeds: Dict[str, Any]) -> None:
        self.feeds = feeds
        self.done = False
        self.outputs: Optional[Dict[str, Any]] = None
        self.error: Optional[BaseException] = None
        self.t0 = self.t1 = 0.0
        self.size = 1


class Batcher(object):
    """Collects one model's requests into batches; the first waiting request leads (no extra thread)."""

    def __init__(self, window_ms: float, max_batch: int, fits: Optional[Callable[[int], bool]] = None) -> None:
        self.window_s = window_ms / 1000.0
        self.max_batch = max_batch
        self.fits = fits or (lambda n: True)
        self._cv = threading.Condition()
        self._queue: List[_Item] = []
        self._leader: Optional[_Item] = None

    def run(self, model: Any, feeds: Dict[str, Any]) -> Tuple[Dict[str, Any], float, float, int]:
        """``(outputs, t_start, t_end, batch_size)`` of this request, run in a batch with its neighbours."""
        item = _Item(feeds)
        batch = None
        with self._cv:
            self._queue.append(item)
            self._cv.notify_all()
            while not item.done:
                if self._leader is None and self._queue and self._queue[0] is item:
                    self._leader = item
                    deadline = time.perf_counter() + self.window_s
                    while len(self._queue) < self.max_batch:
                        left = deadline - time.perf_counter()
                        if left <= 0:
                            break
                        self._cv.wait(left)
                    batch = self._queue[: self.max_batch]
                    del self._queue[: self.max_batch]
                    self._leader = None
                    self._cv.notify_all()  # the next request in line may start collecting the next batch
                    break
                self._cv.wait()
        if batch is not None:
            try:
                self._run(model, batch)
            finally:
                with self._cv:
                    for it in batch:
                        it.done = True
                    self._cv.notify_all()
        if item.error is not None:
            raise item.error
        assert item.outputs is not None
        return item.outputs, item.t0, item.t1, item.size

    @staticmethod
    def _key(feeds: Dict[str, Any]) -> Tuple[Any, ...]:
        return tuple(sorted((n, str(a.dtype), a.shape[1:]) for n, a in feeds.items()))

    def _run(self, model: Any, batch: List[_Item]) -> None:
        groups: Dict[Any, List[_Item]] = {}
        for it in batch:
            groups.setdefault(self._key(it.feeds), []).append(it)
        for items in groups.values():
            for chunk in self._chunks(items):
                try:
                    self._run_group(model, chunk)
                except BaseException as e:  # every request of the chunk gets the error
                    for it in chunk:
                        it.error = e

    def _chunks(self, items: List[_Item]) -> List[List[_Item]]:
        """``items`` in order, cut so that each chunk's rows make a batch size the bundle allows (one request alone
        always does: its own shape was checked)."""
        chunks: List[List[_Item]] = []
        rows = 0
        for it in items:
            n = next(iter(it.feeds.values())).shape[0]
            if chunks and self.fits(rows + n):
                chunks[-1].append(it)
                rows += n
            else:
                chunks.append([it])
                rows = n
        return chunks

    @staticmethod
    def _run_group(model: Any, items: List[_Item]) -> None:
        import numpy as np

        sizes = [next(iter(it.feeds.values())).shape[0] for it in items]
        if len(items) == 1:
            feeds = items[0].feeds
        else:
            feeds = dict((n, np.concatenate([it.feeds[n] for it in items])) for n in items[0].feeds)
        with model.lock:
            t0 = time.perf_counter()
            outputs = model.runner.run(feeds)
            t1 = time.perf_counter()
            model.requests += len(items)
        total = sum(sizes)
        if len(items) > 1 and any(getattr(a, "shape", ())[:1] != (total,) for a in outputs.values()):
            raise RuntimeError("the model's outputs do not keep the batch dimension; start the agent without batching")
        start = 0
        for it, n in zip(items, sizes):
            it.outputs = outputs if len(items) == 1 else dict((k, v[start : start + n]) for k, v in outputs.items())
            it.t0, it.t1, it.size = t0, t1, len(items)
            start += n

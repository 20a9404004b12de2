"""What the agent does, without HTTP: install, load, serve, roll back, benchmark.

One :class:`AgentService` holds the agent's state (the store, the loaded models, the
metrics and the telemetry recorder); its locks are private. The HTTP layer
(``server.py``) parses requests and calls only the public methods here.
"""

import json
import os
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from . import API_VERSION, __version__, runners
from . import childproc as children
from .batcher import Batcher, batch_capable, batch_fits
from .bench import device_info
from .breaker import Breakers
from .childproc import one_shot_bench, one_shot_profile, verify_loads
from .errors import AgentError
from .knobs import MAX_WARMUP_S, check_knobs
from .metrics import Metrics
from .serving import OUTCOMES, Serving
from .sessions import MAX_SESSIONS, TTL_S, SessionTable
from .store import Store, StoreError, check_name, uncached
from .telemetry import Recorder
from .traffic import TrafficSplit
from .trust import SignatureRefused
from .variants import VariantRunner, make_runner


class LoadedModel(object):
    def __init__(self, name: str, version: str, runner: Any) -> None:
        self.name, self.version, self.runner = name, version, runner
        self.lock = threading.Lock()
        self.requests = 0
        self.pending = 0  # requests running or waiting for this model (bounded by the service's max_queue)
        self.warmup_ms = 0.0
        self.options: Dict[str, Any] = {}
        self.batcher: Optional[Batcher] = None  # a Batcher when the agent batches and the model takes a dynamic batch
        self.accelerator = runner.describe().get("accelerator")


class AgentService(Serving):
    """State shared by all request threads, and the operations on it (the request path: ``Serving``)."""

    def __init__(
        self,
        root: str,
        token: Optional[str] = None,
        telemetry: bool = True,
        warmup_on_load: int = 3,
        flush_interval: float = 0.2,
        context_interval: float = 30.0,
        max_queue: int = 64,
        breaker: Optional[Dict[str, Any]] = None,
        batch_window_ms: float = 0.0,
        max_batch: int = 8,
        max_sessions: int = MAX_SESSIONS,
        session_ttl_s: float = TTL_S,
        sealer: Any = None,
    ) -> None:
        self.store = Store(root, sealer)  # sealer: model files encrypted at rest (atrest.Sealer)
        self.sessions = SessionTable(max_sessions, session_ttl_s)  # streams' state per session
        self.max_queue = max_queue
        self.batch_window_ms, self.max_batch = batch_window_ms, max_batch
        self.token = token
        self.open_reads = False  # reads and inference need no token (a loopback agent that made its own)
        self.started = time.time()
        self.warmup_on_load = warmup_on_load
        self.metrics = Metrics()
        self.recorder = (
            Recorder(root, flush_interval=flush_interval, context_interval=context_interval) if telemetry else None
        )
        self._loaded: Dict[str, LoadedModel] = {}
        self.traffic = TrafficSplit()
        self.breakers = Breakers(breaker)  # per-version circuit breakers (limits: ``breaker.DEFAULTS``)
        self._lock = threading.Lock()
        self._load_locks: Dict[str, threading.Lock] = {}
        self._loaded_file = os.path.join(self.store.root, "agent", "loaded.json")

    # -- state ----------------------------------------------------------------
    def _load_lock(self, name: str) -> threading.Lock:
        """The lock serialising loads of one model; only for a valid name of an installed model."""
        check_name("model name", name)
        if not self.store.has(name):
            self.store.current(name)  # raises the 404 that lists what is installed
        with self._lock:
            return self._load_locks.setdefault(name, threading.Lock())

    def _remember(self) -> None:
        """Which models are loaded (with their options), so a restarted agent loads them again."""
        data = dict((n, m.options) for n, m in self._loaded.items())
        tmp = self._loaded_file + ".tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(data, f)
            os.replace(tmp, self._loaded_file)
        except OSError:
            pass

    def loaded_count(self) -> int:
        return len(self._loaded)

    def restore(self) -> None:
        """Load again what was loaded before a restart or reboot (in the background)."""
        try:
            with open(self._loaded_file) as f:
                wanted = json.load(f)
        except (OSError, ValueError):
            return
        for name, options in sorted(wanted.items()):
            try:
                self.load(name, **(options or {}))
            except Exception as e:  # a model that no longer loads must not stop the agent
                sys.stderr.write("could not load %s again after restart: %s\n" % (name, e))

    def close(self) -> None:
        """Stop what the agent started: child processes first, then the telemetry writer."""
        children.end_all()
        if self.recorder:
            self.recorder.close()

    # -- queries --------------------------------------------------------------
    def health(self) -> Dict[str, Any]:
        return {
            "status": "ok",
            "agent_version": __version__,
            "api": API_VERSION,
            "pid": os.getpid(),
            "uptime_s": round(time.time() - self.started, 3),
            "root": self.store.root,
            "auth": bool(self.token) and not self.open_reads,
            "write_auth": bool(self.token),
            "device": device_info(),
            "runtimes": runners.runtimes(),
            "models": self.store.names(),
            "telemetry": self.recorder.stats()
            if self.recorder
            else {"ok": False, "error": "disabled (--no-telemetry)"},
        }

    def models(self) -> Tuple[List[Dict[str, Any]], List[Dict[str, str]]]:
        """``(models, unreadable)``: a model whose files cannot be read is reported, not fatal to the list."""
        out, unreadable = [], []
        for name in self.store.names():
            try:
                version, _, manifest = self.store.current(name)
            except (StoreError, OSError) as e:
                unreadable.append({"name": name, "error": str(e)})
                continue
            loaded = self._loaded.get(name)
            out.append(
                {
                    "name": name,
                    "version": version,
                    "versions": self.store.versions(name),
                    "backend": manifest.get("backend"),
                    "precision": manifest.get("precision"),
                    "profile": manifest.get("profile"),
                    "inputs": manifest.get("inputs"),
                    "outputs": manifest.get("outputs"),
                    "loaded": bool(loaded and loaded.version == version),
                    "split": self.traffic.get(name),
                    "breakers": self.breakers.states(name),
                }
            )
        return out, unreadable

    def metrics_text(self) -> str:
        stats = self.recorder.stats() if self.recorder else None
        return self.metrics.render(stats, len(self._loaded)) + self.breakers.render()

    # -- loading --------------------------------------------------------------
    def load(self, name: str, threads: Any = None, providers: Any = None, warmup: Any = None) -> LoadedModel:
        """Load the current version and warm it up, so the first real request pays no cold start."""
        threads, providers, warmup, _, _ = check_knobs(threads, providers, warmup)
        with self._load_lock(name):
            return self._load(name, threads, providers, warmup)

    def _load(
        self,
        name: str,
        threads: Optional[int] = None,
        providers: Optional[List[str]] = None,
        warmup: Optional[int] = None,
        version: Optional[str] = None,
    ) -> LoadedModel:
        """Load ``name`` (its current version, or ``version`` for a traffic split, which is kept apart)."""
        if version is None:
            version, bundle_dir, manifest = self.store.current(name)
        else:
            bundle_dir, manifest = self.store.version(name, version)
        warmup = self.warmup_on_load if warmup is None else warmup
        # Damage since the install is found before it serves; sealed files are decrypted for the load only.
        with self.store.opened(bundle_dir, manifest) as plain_dir:
            runner_cls = runners.get(manifest["backend"])
            runner_manifest = manifest if plain_dir == bundle_dir else uncached(manifest)
            runner = make_runner(runner_cls, plain_dir, runner_manifest, threads=threads, providers=providers)
            runner.load()
            if plain_dir != bundle_dir and isinstance(runner, VariantRunner):
                runner.load_all()  # the decrypted files are gone after this block
            t0 = time.perf_counter()
            if warmup > 0:
                from .bench import load_inputs

                feeds, _ = load_inputs(plain_dir, manifest)
                for _ in range(warmup):
                    runner.run(feeds)
                    if time.perf_counter() - t0 > MAX_WARMUP_S:
                        break
        model = LoadedModel(name, version, runner)
        model.warmup_ms = (time.perf_counter() - t0) * 1000.0
        model.options = {"threads": threads, "providers": providers}
        if self.batch_window_ms > 0 and self.max_batch > 1 and batch_capable(manifest):
            model.batcher = Batcher(self.batch_window_ms, self.max_batch, batch_fits(manifest))
        if version != self.store.current_version(name):
            self.traffic.put(name, version, model)
            self.metrics.load(name, version)
            return model
        with self._lock:
            old = self._loaded.get(name)
            self._loaded[name] = model
            self._remember()
        if old is not None:
            with old.lock:  # a request still running on the old runner finishes first
                old.runner.close()
        self.metrics.load(name, version)
        if self.recorder:
            self.recorder.event("load", name, version, {"load_ms": runner.load_ms, "warmup_runs": warmup})
        return model

    def load_info(self, name: str, threads: Any = None, providers: Any = None, warmup: Any = None) -> Dict[str, Any]:
        model = self.load(name, threads=threads, providers=providers, warmup=warmup)
        info = model.runner.describe()
        info.update(
            {"name": name, "version": model.version, "load_ms": model.runner.load_ms, "warmup_ms": model.warmup_ms}
        )
        return info

    def unload(self, name: str) -> Dict[str, Any]:
        check_name("model name", name)
        with self._lock:
            model = self._loaded.pop(name, None)
        if model is None:
            raise AgentError(404, "model %r is not loaded" % name)
        model.runner.close()
        return {"name": name, "unloaded": True}

    def remove(self, name: str) -> Dict[str, Any]:
        with self._load_lock(name):
            with self._lock:
                model = self._loaded.pop(name, None)
                self._remember()
            if model is not None:
                with model.lock:
                    model.runner.close()
            result = self.store.remove(name)
            self.traffic.clear(name)
            self.breakers.forget(name)
            self.sessions.forget(name)
        with self._lock:
            self._load_locks.pop(name, None)
        if self.recorder:
            self.recorder.event("remove", name, None, {})
        return result

    def _get_loaded(self, name: str) -> LoadedModel:
        """The loaded model, (re)loaded if it is not loaded or a newer version was installed."""
        version = self.store.current_version(check_name("model name", name))
        with self._lock:
            model = self._loaded.get(name)
        if model is None or model.version != version:
            with self._load_lock(name):  # concurrent first requests load it once
                with self._lock:
                    model = self._loaded.get(name)
                if model is None or model.version != self.store.current_version(name):
                    model = self._load(name)
        return model

    # -- serving --------------------------------------------------------------
    def _record(
        self,
        name: str,
        model: Optional[LoadedModel],
        outcome: str,
        queue_ms: Optional[float] = None,
        infer_ms: Optional[float] = None,
        shape: Optional[str] = None,
        error: Optional[str] = None,
        pre_ms: Optional[float] = None,
    ) -> Optional[int]:
        version = model.version if model else None
        backend = model.runner.manifest.get("backend") if model else None
        accelerator = model.accelerator if model else None
        # Names of models that do not exist come from clients: one label for all of them keeps /metrics and
        # telemetry bounded (the name asked for is in the error text, cut to its bound).
        known = model is not None or name in self._loaded or (outcome != "unknown_model" and self._valid(name))
        label = name if known else "(unknown)"
        self.metrics.request(label, version, backend, accelerator, outcome, infer_ms, queue_ms)
        if self.recorder:
            return self.recorder.record(
                label, version, backend, accelerator, shape, queue_ms, infer_ms, outcome, error, pre_ms
            )
        return None

    @staticmethod
    def _valid(name: str) -> bool:
        try:
            check_name("model name", name)
            return True
        except StoreError:
            return False

    def reject(self, name: str, error: Exception) -> None:
        """Count a request refused before it reached a model (bad input); ``error`` carries ``status``."""
        status = getattr(error, "status", 500)
        self._record(name, None, OUTCOMES.get(status, "error"), error=str(error)[:300])

    def bench(
        self,
        name: str,
        runs: Any = 100,
        warmup: Any = 0,
        threads: Any = None,
        providers: Any = None,
        timeout: Any = 600.0,
    ) -> Dict[str, Any]:
        threads, providers, warmup, runs, timeout = check_knobs(threads, providers, warmup, runs, timeout)
        runs, warmup, timeout = 100 if runs is None else runs, warmup or 0, 600.0 if timeout is None else timeout
        version, bundle_dir, manifest = self.store.current(check_name("model name", name))
        try:
            with self.store.opened(bundle_dir, manifest) as plain_dir:
                report = one_shot_bench(plain_dir, runs, warmup, threads, providers, timeout)
        except AgentError as e:
            raise AgentError(e.status, "benchmark of %s failed: %s" % (name, e)) from None
        report["version"] = version
        return report

    def profile(
        self,
        name: str,
        runs: Any = 20,
        warmup: Any = 3,
        threads: Any = None,
        providers: Any = None,
        timeout: Any = 600.0,
    ) -> Dict[str, Any]:
        """Per-layer times of the current version with the runtime's own profiler, in a fresh process."""
        from .profiling import MAX_RUNS

        threads, providers, warmup, runs, timeout = check_knobs(threads, providers, warmup, runs, timeout)
        runs, warmup, timeout = 20 if runs is None else runs, 3 if warmup is None else warmup, timeout or 600.0
        if runs > MAX_RUNS or warmup > MAX_RUNS:
            raise AgentError(400, "a profile takes 1 to %d runs and at most %d warm-up runs" % (MAX_RUNS, MAX_RUNS))
        version, bundle_dir, manifest = self.store.current(check_name("model name", name))
        try:
            with self.store.opened(bundle_dir, manifest) as plain_dir:
                report = one_shot_profile(plain_dir, runs, warmup, threads, providers, timeout)
        except AgentError as e:
            raise AgentError(e.status, "profile of %s failed: %s" % (name, e)) from None
        report["version"] = version
        return report

    # -- installing -----------------------------------------------------------
    def begin_upload(self, name: str, version: str, manifest: Any) -> Dict[str, Any]:
        return self.store.begin(name, version, manifest)

    def receive(
        self, name: str, version: str, filename: str, stream: Any, length: int, offset: int = 0
    ) -> Dict[str, Any]:
        return self.store.receive(name, version, filename, stream, length, offset)

    def commit(self, name: str, version: str, verify: bool = False, signature: Any = None) -> Dict[str, Any]:
        """Install an uploaded (or kept) version; ``signature``: the signed manifest and its signature (see
        :meth:`Store.commit`). A refused signature is an ``install_refused`` event, and the model keeps serving."""
        try:
            result = self.store.commit(name, version, verify=verify_loads if verify else None, signature=signature)
        except SignatureRefused as e:
            if self.recorder:
                self.recorder.event("install_refused", name, version, {"reason": str(e)})
            raise
        if self.recorder:
            self.recorder.event("install", name, version, {"previous": result["previous"]})
        return result

    def rollback(self, name: str, version: Optional[str] = None) -> Dict[str, Any]:
        check_name("model name", name)
        if version is not None:
            check_name("version", version)
        result = self.store.rollback(name, version)
        was = self._loaded.get(name)
        if was is not None and not result.get("unchanged"):
            self.load(name, **was.options)  # serve the version rolled back to, warm, from now on
        if self.recorder:
            self.recorder.event("rollback", name, result["version"], {"from": result["previous"]})
        return result

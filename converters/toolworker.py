"""Run a built model on the host when its runtime lives in a tool environment.

The host Python cannot import such runtimes (paddlelite has wheels up to 3.10, mindspore_lite
for 3.7 only), so :class:`RunnerWorker` starts ``tools/runner_worker.py`` under the environment's
Python with the agent zipapp on its path: the device's own runner loads the model once and runs
each sample sent over a pipe in the agent's tensor encoding (``edgekit_sdk.wire``: the command in
the header's metadata, the arrays after it; no files, ~0.1 ms per call).

:class:`ToolEnvBackend` is what the Paddle Lite and MindSpore Lite backends share: availability
from the environment's state, host inference through a worker, timing runners that own (and
close) their worker, and the fp32 build of a reference model in the same runtime for timing.
"""

from __future__ import annotations

import io
import json
import os
import select
import shutil
import signal
import struct
import subprocess
import tempfile
import threading
import time
import weakref
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, NoReturn, Sequence

from edgekit_sdk import wire

from .base import Backend
from .session import BuildSession

if TYPE_CHECKING:
    from edgekit.execution import Execution, Feed
    from edgekit.toolenvs import ToolEnvSpec

WORKER = Path(__file__).resolve().parent / "tools" / "runner_worker.py"
LOAD_TIMEOUT = 600  # s for the runtime to load a model; a runtime that hangs longer is stopped
RUN_TIMEOUT = 300  # s for one inference


class RunnerWorker:
    """One model loaded by the agent's runner ``backend`` in ``spec``'s tool environment.

    Close it (``close()`` or ``with``): the worker process holds the loaded model until then. A worker
    that does not answer within its deadline, or whose exchange is interrupted, is killed.
    """

    def __init__(
        self,
        spec: ToolEnvSpec,
        backend: str,
        model_path: str | Path,
        manifest: dict,
        threads: int | None = None,
        log: Callable[[str], Any] | None = None,
        load_timeout: float | None = None,
        run_timeout: float | None = None,
    ) -> None:
        from edgekit import agent_package, toolenvs
        from edgekit.cache import cache_root

        py = toolenvs.ensure(spec, log=log)
        pyz, _ = agent_package.build(cache_root() / "agent")
        self.spec, self.model_path = spec, Path(model_path)
        self.run_timeout = run_timeout or RUN_TIMEOUT
        self.stderr: deque[str] = deque(maxlen=40)
        self._buf = bytearray()
        env = dict(os.environ, **dict(spec.env))
        # unbuffered pipes: answers are read here with a deadline (select), which a buffered reader would defeat
        self.proc = subprocess.Popen(
            [py, "-I", str(WORKER), str(pyz)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            bufsize=0,
            start_new_session=True,
        )
        # the reader thread holds the pipe and the deque, never this object: an unreferenced worker is freed
        threading.Thread(target=_pump, args=(self.proc.stderr, self.stderr), daemon=True).start()
        self._finalizer = weakref.finalize(self, _stop, self.proc)
        try:
            manifest = dict(manifest, model=self.model_path.name)
            head, _ = self._call(
                {
                    "cmd": "load",
                    "backend": backend,
                    "bundle_dir": str(self.model_path.parent),
                    "manifest": manifest,
                    "threads": threads,
                },
                timeout=load_timeout or LOAD_TIMEOUT,
            )
        except BaseException:
            self.close()
            raise
        self.describe = head.get("describe", {})

    def __enter__(self) -> RunnerWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _fail(self, what: str) -> NoReturn:
        from edgekit.errors import ConversionError

        code = self.proc.poll()
        died = "" if code is None else f" (the worker exited with {code}{': it crashed' if code < 0 else ''})"
        tail = "\n    ".join(line for line in list(self.stderr)[-8:] if line.strip()) or "(no output)"
        raise ConversionError(
            f"{self.spec.name}: running {self.model_path.name} in the tool environment failed{died}: {what}\n    {tail}"
        )

    def _fill(self, deadline: float, timeout: float) -> None:
        """Read what the worker has sent into the buffer, waiting at most until ``deadline``."""
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        left = deadline - time.monotonic()
        ready = select.select([fd], [], [], max(0.0, left))[0] if left > 0 else []
        if not ready:
            _kill(self.proc)
            self._fail(f"no answer within {timeout:.0f} s (the runtime hung); the worker was stopped")
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            self._fail("no answer (the worker closed its output)")
        self._buf += chunk

    def _read_exact(self, n: int, deadline: float, timeout: float) -> bytes:
        while len(self._buf) < n:
            self._fill(deadline, timeout)
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def _call(
        self, head: dict[str, Any], arrays: Iterable[tuple[str, Any]] = (), timeout: float | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        timeout = timeout or self.run_timeout
        try:
            try:
                self.proc.stdin.write(wire.encode_tensors(dict(arrays), meta=head))  # type: ignore[union-attr]
            except (BrokenPipeError, OSError) as e:
                self._fail(f"{type(e).__name__}: {e}")
            deadline = time.monotonic() + timeout
            prefix = self._read_exact(8, deadline, timeout)
            if prefix[:4] != wire.MAGIC:
                self._fail(f"the worker answered something else than edgekit tensors ({prefix!r})")
            raw = self._read_exact(struct.unpack("<I", prefix[4:])[0], deadline, timeout)
            payload = sum(int(e["nbytes"]) for e in json.loads(raw)["tensors"])
            out, reply = wire.decode_tensors(prefix + raw + self._read_exact(payload, deadline, timeout))
            if not reply.get("ok"):
                self._fail(reply.get("error", "unknown error"))
            return reply, out
        except BaseException:
            # failed or interrupted (Ctrl-C) mid-exchange: the worker is of no more use; stop it now
            _kill(self.proc)
            raise

    def run(self, feed: Feed) -> dict[str, Any]:
        return self._call({"cmd": "run"}, sorted(feed.items()))[1]

    __call__ = run

    @property
    def runtime(self) -> str:
        return self.describe.get("runtime", "")

    def close(self) -> None:
        self._finalizer()


def _pump(stream: io.RawIOBase, tail: deque[str]) -> None:
    try:
        with io.BufferedReader(stream) as lines:
            for line in lines:
                tail.append(line.decode("utf-8", "replace").rstrip())
    except (OSError, ValueError):
        pass


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
        proc.wait()


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            proc.stdin.write(wire.encode_tensors({}, meta={"cmd": "close"}))  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
            proc.wait(timeout=10)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            _kill(proc)
    for f in (proc.stdin, proc.stdout):
        try:
            f.close()  # type: ignore[union-attr]
        except OSError:
            pass


def own_fp32(
    backend: Any,  # a backend with convert_fp32
    model_path: str | Path,
    session: BuildSession | None = None,
) -> tuple[str | Path, list[Callable[[], Any]], BuildSession]:
    """``(path, cleanup, session)``: what to time for ``model_path`` in ``backend``'s runtime.

    A built model is itself; an ONNX reference is the runtime's fp32 build of it: the one this
    build made (``session.fp32_for``), else one converted now into a temporary directory that
    ``cleanup`` (a list of callables) removes, registered in ``session`` (a new one when None).
    """
    session = session if session is not None else BuildSession()
    if not str(model_path).endswith(".onnx"):
        return model_path, [], session
    fp32 = session.fp32_for(model_path)
    if fp32 is not None:
        return fp32, [], session
    tmp = Path(tempfile.mkdtemp(prefix=f"edgekit-{backend.name}-timing-"))
    try:
        path = backend.convert_fp32(model_path, tmp, session=session)
        return path, [lambda: shutil.rmtree(tmp, ignore_errors=True)], session
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


class HostRunner:
    """``run(feed)`` for timing on the host, with ``close()`` for what it holds (a worker, a temporary build)."""

    def __init__(self, run: Callable[[Feed], dict], close: Iterable[Callable[[], Any]] = (), runtime: str = "") -> None:
        self._run, self._close, self.runtime = run, list(close), runtime

    def __call__(self, feed: Feed) -> dict:
        return self._run(feed)

    def close(self) -> None:
        while self._close:
            self._close.pop()()


class ToolEnvBackend(Backend):
    """A backend whose converter and runtime live in a tool environment (:mod:`edgekit.toolenvs`).

    Subclasses set ``toolenv``, ``ready_detail`` (what availability says once the environment exists;
    ``{python}`` and ``{path}`` are filled in), ``noise`` (substrings of tool output lines left off the
    build log) and implement ``build`` and ``convert_fp32`` (the reference .onnx -> this runtime's fp32
    model, registered; used when timing a reference this build did not convert, e.g. the unpruned model).
    """

    ready_detail = ""
    noise: tuple[str, ...] = ()

    def availability(self) -> tuple[bool, str]:
        from edgekit import toolenvs

        st = toolenvs.state(self.toolenv)
        if st["ready"]:
            return True, self.ready_detail.format(python=st["python_version"], path=st["path"])
        if st.get("interpreter_missing"):
            return False, st["detail"]
        return True, st["detail"]

    def explain_unavailable(self, detail: str) -> str:
        # unusable only without an interpreter for the environment: the detail already says how to get one
        return detail

    def local_device_python(self) -> str | None:
        """``deploy --local``: the agent runs under the tool environment's Python (created if missing)."""
        from edgekit import toolenvs

        return toolenvs.ensure(self.toolenv, log=None)

    # -- host-side inference ----------------------------------------------------------
    def reference_threads(self, threads: int | None) -> int:
        return threads or min(4, os.cpu_count() or 1)

    def manifest_for(self, model_path: str | Path, session: BuildSession | None = None) -> dict:
        """Registered by the build (``session``), else the bundle's manifest beside the model: the runners of
        these runtimes need the inputs and the runner options."""
        from edgekit.execution import manifest_beside

        entry = session.manifest_for(model_path) if session is not None else None
        return entry if entry is not None else manifest_beside(model_path)

    def execution(
        self, model_path: str | Path, threads: int | None = None, session: BuildSession | None = None
    ) -> Execution:
        """The agent's runner in the tool environment's Python (a worker process)."""
        from edgekit.execution import in_toolenv

        return in_toolenv(self.toolenv, self.name, model_path, self.manifest_for(model_path, session), threads)

    def worker(
        self, model_path: str | Path, threads: int | None = None, session: BuildSession | None = None
    ) -> Execution:
        return self.execution(model_path, threads, session)

    def predict(
        self,
        model_path: str | Path,
        samples: Sequence[Feed],
        threads: int | None = None,
        session: BuildSession | None = None,
    ) -> list:
        if str(model_path).endswith(".onnx"):
            return self.reference_outputs(model_path, samples, threads, session)
        return super().predict(model_path, samples, threads, session)

    def runner(
        self, model_path: str | Path, threads: int | None = None, session: BuildSession | None = None
    ) -> HostRunner:
        """For timing on the host; close it when done. An ONNX reference is timed as this runtime's own fp32 build
        of it (made by this build, or converted now when this build did not make one, e.g. for the unpruned model
        of a pruned build), so a comparison is runtime against runtime."""
        model_path, cleanup, session = own_fp32(self, model_path, session)
        try:
            worker = self.worker(model_path, threads, session)
        except BaseException:
            for fn in cleanup:
                fn()
            raise
        return HostRunner(worker.run, cleanup + [worker.close], runtime=self.runtime)

    def convert_fp32(self, onnx_path: str | Path, workdir: str | Path, session: BuildSession | None = None) -> Path:
        """Convert ``onnx_path`` to this runtime's fp32 model for this host in ``workdir``; register it in
        ``session``; return it."""
        raise NotImplementedError

    def quiet(self, log: Callable[[str], Any]) -> Callable[[str], None]:
        """Tool output for the log: to a Progress's ``detail`` whole (shown with --verbose), to a plain log
        without the converters' progress chatter."""
        from edgekit.progress import Progress

        if isinstance(log, Progress):
            return lambda line: log.detail(f"    {line}") if line.strip() else None
        noise = self.noise

        def out(line: str) -> None:
            if line.strip() and not any(k in line for k in noise):
                log(f"    {line}")

        return out


def onnx_predict(
    model_path: str | Path, samples: Sequence[Feed], threads: int | None = None
) -> tuple[Any, list[str], list[dict]]:
    """The ONNX reference, run by onnxruntime on the host: ``(session, output names, outputs)``."""
    from edgekit.execution import reference_session, session_outputs

    sess = reference_session(model_path, threads or min(4, os.cpu_count() or 1))
    return sess, [o.name for o in sess.get_outputs()], session_outputs(sess, samples)

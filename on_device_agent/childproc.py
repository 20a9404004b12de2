"""Child processes of the agent: the one-shot benchmark and profile, and the check that a staged version runs.

Every child is bounded: in time (killed, with its whole process group, at its deadline), in
memory (``RLIMIT_AS``), and in life (it leads its own process group, which the agent kills when
it stops; on Linux the kernel also sends it SIGKILL if the agent dies first).
"""

import json
import os
import signal
import subprocess
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from .errors import AgentError
from .store import StoreError


def self_command() -> List[str]:
    """How to start this agent again in a child process (zipapp or installed package)."""
    here = os.path.abspath(__file__)
    marker = ".pyz" + os.sep
    if marker in here:
        return [sys.executable, here.split(marker)[0] + ".pyz"]
    return [sys.executable, "-m", "edgekit_agent"]


MEMORY_LIMIT_FRACTION = 0.75  # of the device's RAM, per child (address space; see _limits)
_children = set()  # type: set
_children_lock = threading.Lock()


def memory_limit_bytes() -> Optional[int]:
    """The address-space bound of a child: ``EDGEKIT_AGENT_CHILD_MEMORY_MB``, else 3/4 of RAM (None: unknown)."""
    env = os.environ.get("EDGEKIT_AGENT_CHILD_MEMORY_MB")
    if env:
        return int(env) << 20
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * MEMORY_LIMIT_FRACTION)
    except (ValueError, OSError, AttributeError):
        return None


def _limits(limit: Optional[int]) -> Callable[[], None]:
    """What the child runs before it starts: everything it needs is imported here, in the agent."""
    try:
        import resource
    except ImportError:
        resource = None  # type: ignore[assignment]
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (ImportError, OSError, AttributeError):
        prctl = None

    def apply() -> None:
        if resource is not None and limit:
            try:
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            except (ValueError, OSError):
                pass
        if prctl is not None:
            prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: the kernel kills it if the agent's thread dies

    return apply


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass


def run_bounded(cmd: List[str], timeout: float) -> Tuple[int, bytes, bytes]:
    """Run ``cmd`` as a bounded child; ``(returncode, stdout, stderr)``; TimeoutExpired after ``timeout``."""
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_limits(memory_limit_bytes()),
    )
    with _children_lock:
        _children.add(proc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        _kill_group(proc)
        proc.communicate()
        raise
    finally:
        with _children_lock:
            _children.discard(proc)
        _kill_group(proc)  # anything the child left behind in its group goes with it
    return proc.returncode, out, err


def end_all() -> None:
    """Kill every child the agent started that is still running (the agent is stopping)."""
    with _children_lock:
        procs = list(_children)
    for proc in procs:
        _kill_group(proc)


def one_shot_bench(
    bundle_dir: str,
    runs: int,
    warmup: int,
    threads: Optional[int] = None,
    providers: Optional[List[str]] = None,
    timeout: float = 600.0,
    placement: bool = True,
) -> Dict[str, Any]:
    """Run ``bench`` in a fresh process on this device (clean peak RSS, real cold start)."""
    cmd = self_command() + ["bench", "--bundle", bundle_dir, "--json", "--runs", str(runs), "--warmup", str(warmup)]
    if not placement:
        cmd.append("--no-placement")
    return _one_shot(cmd, threads, providers, timeout, "benchmark")


def one_shot_profile(
    bundle_dir: str,
    runs: int,
    warmup: int,
    threads: Optional[int] = None,
    providers: Optional[List[str]] = None,
    timeout: float = 600.0,
) -> Dict[str, Any]:
    """Run ``profile`` (per-layer times with the runtime's profiler) in a fresh process on this device."""
    cmd = self_command() + ["profile", "--bundle", bundle_dir, "--runs", str(runs), "--warmup", str(warmup)]
    return _one_shot(cmd, threads, providers, timeout, "profile")


def _one_shot(
    cmd: List[str], threads: Optional[int], providers: Optional[List[str]], timeout: float, what: str
) -> Dict[str, Any]:
    """Run an agent command that prints one JSON report as its last line, bounded; its report or AgentError."""
    if threads:
        cmd += ["--threads", str(threads)]
    for p in providers or []:
        cmd += ["--provider", str(p)]
    try:
        code, out, err = run_bounded(cmd, timeout)
    except subprocess.TimeoutExpired:
        raise AgentError(504, "the %s did not finish within %.0f s and was stopped" % (what, timeout)) from None
    if code != 0:
        lines = err.decode("utf-8", "replace").strip().splitlines()
        if code < 0 and not lines:
            lines = ["killed by signal %d (memory limit %s MB?)" % (-code, (memory_limit_bytes() or 0) >> 20)]
        if any("MemoryError" in line or "std::bad_alloc" in line for line in lines[-5:]):
            lines.append("it ran out of the memory a child may use (%d MB)" % ((memory_limit_bytes() or 0) >> 20))
        raise AgentError(501 if code == 3 else 500, lines[-1] if lines else "exit %d" % code)
    try:
        return json.loads(out.decode("utf-8", "replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise AgentError(500, "the %s printed no report" % what) from None


def verify_loads(staging: str, manifest: Dict[str, Any]) -> None:
    """Load the staged bundle and run its sample once, in a fresh process, before it may serve."""
    try:
        report = one_shot_bench(staging, 1, 0, placement=False, timeout=300)
    except AgentError as e:
        raise StoreError(
            "version %s does not run on this device (%s); it was not installed and the model keeps "
            "serving what it served before" % (manifest.get("id"), e),
            422,
        ) from None
    check = report.get("device_fidelity") or {}
    if check.get("passed") is False:
        raise StoreError(
            "version %s runs on this device but its outputs differ from the reference outputs the "
            "build recorded (%s); it was not installed" % (manifest.get("id"), check.get("detail")),
            422,
        )

"""Which tests are end to end: those that start a process or a server, or put a real model through a runtime.

A test is ``e2e`` when it, one of its fixtures, or a function or class of the test suite that they call names
something that starts a process or a server (the ``edgekit`` CLI in a subprocess, an agent, a device, sshd, adbd,
a serial cable, a tool environment, ``subprocess``...) or a real model (PP-OCR, MobileNetV2, the CNN trained on
digits: building one takes from seconds to minutes), or uses a fixture that does. What is left, ``-m "not e2e"``,
is the fast suite: host logic and builds of the tiny models in ``harness.models``. The check reads the compiled
code (names referenced, nested functions included), so a new test is classified without anyone remembering to mark
it; ``@pytest.mark.e2e`` stays available for what the names cannot show.
"""

import sys
import types
from typing import Any, Iterable, List, Set

import pytest

#: Names whose use means a process or a server is started.
STARTS: Set[str] = {
    # the CLI, agents and devices
    "run_cli",
    "deploy",
    "open_device",
    "connect",
    "stop_agent",
    "AgentRoots",
    "agent_package",
    # servers and emulated devices of the harness
    "ThrowawaySSHD",
    "NetnsLab",
    "Cable",
    "ensure_rootfs",
    "HTTPServer",
    "ThreadingHTTPServer",
    "serve_forever",
    # processes
    "subprocess",
    "Popen",
    "multiprocessing",
    "fork",
    "run_tool",
    "find_python",
    "ensure",
    # real models
    "PPOCR",
    "make_digits_model",
    "make_mobilenetv2",
    "mobilenetv2",
}

#: Fixtures that start something or feed a real model, whatever their code says.
FIXTURES: Set[str] = {"sshd", "local_device", "agent_roots", "textlines"}

_SUITE_MODULE_PREFIXES = ("test_", "conftest", "harness")


def run_wide(func: Any) -> Any:
    """Mark an autouse fixture that guards the whole run (not what one test does): it never makes a test e2e."""
    func._edgekit_run_wide = True
    return func


def _from_suite(obj: Any) -> bool:
    mod = getattr(obj, "__module__", "") or ""
    return mod.split(".")[0].startswith(_SUITE_MODULE_PREFIXES)


def _codes(code: types.CodeType) -> Iterable[types.CodeType]:
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _codes(c)


def starts_something(func: Any, seen: Set[int]) -> bool:
    """Whether ``func`` (a test, fixture, or suite helper) names something in :data:`STARTS`, directly or
    through functions and classes of the suite it calls."""
    func = getattr(func, "__func__", func)
    if id(func) in seen or getattr(func, "_edgekit_run_wide", False):
        return False
    seen.add(id(func))
    if isinstance(func, type):
        return any(starts_something(m, seen) for m in vars(func).values() if isinstance(m, types.FunctionType))
    code = getattr(func, "__code__", None)
    if code is None:
        return False
    scope = getattr(func, "__globals__", {})
    for c in _codes(code):
        names = set(c.co_names)
        if names & STARTS or PROCESS_BACKENDS.intersection(k for k in c.co_consts if isinstance(k, str)):
            return True
        for name in names:
            target = scope.get(name)
            if (isinstance(target, (types.FunctionType, type))) and _from_suite(target):
                if starts_something(target, seen):
                    return True
    return False


def is_e2e(item: pytest.Item) -> bool:
    if item.get_closest_marker("e2e"):
        return True
    names = set(getattr(item, "fixturenames", ()))
    if names & FIXTURES:
        return True
    callspec = getattr(item, "callspec", None)
    if callspec is not None and any(isinstance(v, str) and v in PROCESS_BACKENDS for v in callspec.params.values()):
        return True
    seen: Set[int] = set()
    if starts_something(getattr(item, "function", None), seen):
        return True
    info = getattr(item, "_fixtureinfo", None)
    for name in names:
        for fixturedef in info.name2fixturedefs.get(name, ()) if info else ():
            if _from_suite(fixturedef.func) and starts_something(fixturedef.func, seen):
                return True
    return False


def mark(items: Iterable[pytest.Item]) -> None:
    """Add the ``e2e`` marker to every item that starts a process or a server."""
    for item in items:
        if is_e2e(item):
            item.add_marker(pytest.mark.e2e)


#: Audit events (sys.addaudithook) that start a process.
PROCESS_EVENTS = frozenset(
    {"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system", "os.exec"}
)
#: Backends whose builds run their converter in a child process (MNN's tools, the tool environments' workers).
PROCESS_BACKENDS = frozenset({"mnn", "tflite", "paddlelite", "mindspore-lite"})


class ProcessWatch:
    """Records the processes started while a fast (not e2e) test runs, so a test the names above miss is caught
    and marked instead of slowing the fast suite down."""

    def __init__(self) -> None:
        self.watching = False
        self.started: List[str] = []
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple) -> None:
        if self.watching and event in PROCESS_EVENTS:
            what = args[0] if args else ""
            self.started.append(f"{event}({what!r})"[:200])

    def start(self) -> None:
        self.started = []
        self.watching = True

    def stop(self) -> List[str]:
        self.watching = False
        return self.started

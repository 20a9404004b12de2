"""Which tests are end to end: those that start a process or a server.

A test is ``e2e`` when it, one of its fixtures, or a function or class of the test suite that they call names
something that starts a process or a server (the ``edgekit`` CLI in a subprocess, an agent, a device, sshd, adbd,
a serial cable, a tool environment, ``subprocess``...) or uses a fixture that does. The check reads the compiled
code (names referenced, nested functions included), so a new test is classified without anyone remembering to mark
it; ``@pytest.mark.e2e`` stays available for what the names cannot show.
"""

import types
from typing import Any, Iterable, Set

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
    "ensure",
}

#: Fixtures that start something whatever their code says (they are defined with the names above too).
FIXTURES: Set[str] = {"sshd", "local_device", "agent_roots"}

_SUITE_MODULE_PREFIXES = ("test_", "conftest", "harness")


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
    if id(func) in seen:
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
        if names & STARTS:
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

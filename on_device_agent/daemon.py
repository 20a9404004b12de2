"""Start, stop and inspect a background agent server.

``start`` launches a supervisor in its own session (so it outlives the SSH/ADB
connection that started it); the supervisor runs ``serve`` and starts it again, on the
same port, if it crashes (backing off, and giving up after ``CRASH_LIMIT`` crashes within
``CRASH_WINDOW`` seconds). ``start`` waits until the server answers and prints its state as
JSON: ``{"pid", "host", "port", "version", "root", "auth", "supervisor_pid", "restarts"}``. The state lives in
``ROOT/agent/state.json`` (written by the server once it is listening); the log in
``ROOT/agent/agent.log``.
"""

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

from . import __version__


def state_path(root: str) -> str:
    return os.path.join(os.path.abspath(os.path.expanduser(root)), "agent", "state.json")


def log_path(root: str) -> str:
    return os.path.join(os.path.abspath(os.path.expanduser(root)), "agent", "agent.log")


def write_state(root: str, state: Dict[str, Any]) -> None:
    path = state_path(root)
    d = os.path.dirname(path)
    if not os.path.isdir(d):
        os.makedirs(d)
    tmp = path + ".%d.tmp" % os.getpid()
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, path)


def read_state(root: str) -> Optional[Dict[str, Any]]:
    try:
        with open(state_path(root)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    # A zombie is not alive.
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _healthy(state: Dict[str, Any], timeout: float = 2.0) -> bool:
    import http.client

    conn = None
    try:
        conn = http.client.HTTPConnection(
            "127.0.0.1" if state["host"] in ("0.0.0.0", "") else state["host"], state["port"], timeout=timeout
        )
        headers = {}
        if state.get("auth"):
            token = os.environ.get("EDGEKIT_AGENT_TOKEN")
            if token:
                headers["Authorization"] = "Bearer " + token
        conn.request("GET", "/v1/health", headers=headers)
        return conn.getresponse().status in (200, 401)
    except (OSError, ValueError, KeyError):
        return False
    finally:
        if conn is not None:
            conn.close()  # also when the agent did not answer in time (one that is starting, or busy)


def _is_agent(state: Dict[str, Any]) -> bool:
    """The pid in the state file is this root's agent (not a reused pid after a crash or reboot)."""
    pid = state.get("pid", -1)
    if not alive(pid):
        return False
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            argv = f.read().decode("utf-8", "replace").split("\0")
        return "serve" in argv and any(a in argv for a in (state.get("root"), state.get("root_arg")))
    except OSError:  # no /proc (macOS): ask the server itself
        return _healthy(state)


def own_zip_sha256() -> Optional[str]:
    """sha256 of the zipapp this agent runs from (None when not run from one)."""
    from .childproc import self_command

    cmd = self_command()
    if len(cmd) == 2 and cmd[1].endswith(".pyz"):
        import hashlib

        with open(cmd[1], "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    return None


def with_token(state: Dict[str, Any], root: str) -> Dict[str, Any]:
    """The state as ``start``/``status`` print it: with the agent's token when this user can read it.

    The token is never written to ``state.json``; it lives in ``ROOT/agent/token`` (mode 600).
    """
    try:
        with open(os.path.join(os.path.abspath(os.path.expanduser(root)), "agent", "token")) as f:
            state["token"] = f.read().strip() or None
    except OSError:
        pass
    return state


def status(root: str) -> Dict[str, Any]:
    state = read_state(root)
    if state and _is_agent(state) and _healthy(state):
        state["running"] = True
        return with_token(state, root)
    return {"running": False, "root": os.path.abspath(os.path.expanduser(root))}


CRASH_LIMIT = 5
CRASH_WINDOW = 60.0


def supervise(serve_cmd: Sequence[str], root: str) -> int:
    """Run ``serve_cmd`` until it exits cleanly; start it again after a crash (same port)."""
    import subprocess

    child: List[Any] = [None]  # the server process while one runs
    stopping = [False]

    def on_term(signum: int, frame: Any) -> None:
        stopping[0] = True
        if child[0] is not None and child[0].poll() is None:
            child[0].terminate()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the host hanging up is not a reason to stop
    crashes: List[float] = []
    restarts = 0
    cmd = list(serve_cmd)
    env = dict(os.environ, EDGEKIT_SUPERVISOR_PID=str(os.getpid()))
    while True:
        env["EDGEKIT_RESTARTS"] = str(restarts)
        child[0] = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, env=env)
        if stopping[0]:  # a SIGTERM that came while the server was being started found no server to stop
            child[0].terminate()
        code = child[0].wait()
        if stopping[0] or code == 0:
            return 0
        now = time.time()
        crashes = [t for t in crashes if now - t < CRASH_WINDOW] + [now]
        sys.stderr.write(
            "edgekit-agent: server exited with %s; %s\n"
            % (
                code,
                "giving up after %d crashes in %d s" % (len(crashes), CRASH_WINDOW)
                if len(crashes) >= CRASH_LIMIT
                else "starting it again",
            )
        )
        sys.stderr.flush()
        if len(crashes) >= CRASH_LIMIT:
            return 1
        state = read_state(root)
        if state and state.get("port") and "--port" in cmd:
            cmd[cmd.index("--port") + 1] = str(state["port"])  # apps and forwards keep their port
        restarts += 1
        time.sleep(min(0.5 * 2 ** (len(crashes) - 1), 10.0))
        if stopping[0]:
            return 0


def _is_supervisor(pid: Optional[int]) -> bool:
    if not pid or not alive(pid):
        return False
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return "supervise" in f.read().decode("utf-8", "replace").split("\0")
    except OSError:
        return True


def _wait_gone(pids: Sequence[Optional[int]], timeout: float) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline and any(alive(p) for p in pids if p):
        time.sleep(0.05)
    return not any(alive(p) for p in pids if p)


def stop(root: str, timeout: float = 10.0) -> Dict[str, Any]:
    """Stop the agent serving ``root``: its supervisor (so nothing restarts it), then the server."""
    state = read_state(root)
    if not state:
        return {"stopped": False, "reason": "not running"}
    sup = state.get("supervisor_pid") if _is_supervisor(state.get("supervisor_pid")) else None
    pid = state.get("pid") if _is_agent(state) else None
    if not sup and not pid:
        return {"stopped": False, "reason": "not running"}
    if sup:
        os.kill(sup, signal.SIGTERM)  # it stops its server cleanly and starts nothing more
    elif pid:
        os.kill(pid, signal.SIGTERM)
    forced = not _wait_gone([sup, pid], timeout)
    if forced:
        for p in (pid, sup):
            if p and alive(p):
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
        _wait_gone([sup, pid], 2.0)
    try:
        os.unlink(state_path(root))
    except OSError:
        pass
    return {"stopped": True, "pid": pid, "supervisor_pid": sup, "forced": forced}


def start(
    root: str,
    host: str = "127.0.0.1",
    port: int = 0,
    token_file: Optional[str] = None,
    timeout: float = 30.0,
    extra: Sequence[str] = (),
    encrypt_key: Optional[str] = None,
    pull: Sequence[str] = (),
) -> Dict[str, Any]:
    """``pull``: the ``--pull ...`` flags; a running agent pulling otherwise is restarted with them, and one that
    pulls keeps pulling when started again without them (for a new agent version, say)."""
    current = status(root)
    pull = list(pull)
    if current.get("running"):
        same_code = current.get("zip_sha256") == own_zip_sha256() and current.get("version") == __version__
        same_key = (current.get("encrypt") or {}).get("key") == encrypt_key
        same_pull = not pull or (current.get("pull") or []) == pull
        if (
            same_code
            and same_key
            and same_pull
            and current.get("host") == host
            and (not port or current.get("port") == port)
        ):
            current["started"] = False
            return current
        pull = pull or list(current.get("pull") or [])
        stop(root)
    else:
        lingering = read_state(root)
        if lingering and _is_supervisor(lingering.get("supervisor_pid")):
            stop(root)  # a supervisor waiting to restart a crashed server: one agent per root
    from .childproc import self_command

    serve = ["serve", "--root", root, "--host", host, "--port", str(port)]
    if token_file:
        serve += ["--token-file", token_file]
    serve += list(extra) + pull
    cmd = self_command() + ["supervise"] + serve
    log = log_path(root)
    if not os.path.isdir(os.path.dirname(log)):
        os.makedirs(os.path.dirname(log))
    old = read_state(root)
    with open(log, "ab") as logf:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, close_fds=True, start_new_session=True
        )
    deadline = time.time() + timeout
    while time.time() < deadline:
        state = read_state(root)
        if state and state != old and state.get("supervisor_pid") == proc.pid and _healthy(state):
            state["started"] = True
            state["running"] = True
            return with_token(state, root)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    tail = ""
    try:
        with open(log, "rb") as f:
            tail = f.read()[-2000:].decode("utf-8", "replace")
    except OSError:
        pass
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the supervisor leads its own group: its server goes too
        except OSError:
            proc.kill()
    sys.stderr.write("edgekit-agent did not start (exit %s); log %s:\n%s\n" % (proc.poll(), log, tail))
    raise SystemExit(2)

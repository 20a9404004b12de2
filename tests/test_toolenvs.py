"""Tool environments: interpreter discovery, spec hashing, failed installs, concurrent creation.

The environments here have no (or one local, failing) requirement, so each is a plain venv
made in seconds; they live in a per-test EDGEKIT_TOOLENV_DIR.
"""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from edgekit import toolenvs
from edgekit.errors import BackendUnavailable, ConversionError


def spec(**kw):
    base = dict(
        name="demo",
        pythons=("3.12", "3.13"),
        requirements=(),
        check="import sys",
        purpose="a test environment",
        env=(("EDGEKIT_DEMO", "1"),),
    )
    base.update(kw)
    return toolenvs.ToolEnvSpec(**base)


@pytest.fixture
def envroot(tmp_path, monkeypatch):
    root = tmp_path / "toolenvs"
    monkeypatch.setenv("EDGEKIT_TOOLENV_DIR", str(root))
    return root


def real_python():
    try:
        return toolenvs.find_python(spec())
    except BackendUnavailable:
        pytest.skip("no Python 3.12/3.13 on this machine")


def fake_python(path, version):
    """A script that answers the probe like an interpreter of ``version``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho {path}\necho {version}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_root_follows_the_variable(envroot):
    assert toolenvs.root() == envroot
    assert toolenvs.env_dir(spec()).parent == envroot


def test_find_python_on_path_pyenv_and_uv(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    monkeypatch.delenv("UV_PYTHON_INSTALL_DIR", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    (tmp_path / "bin").mkdir()
    with pytest.raises(BackendUnavailable) as e:
        toolenvs.find_python(spec(pythons=("3.12",)))
    msg = str(e.value)
    assert "pyenv install 3.12" in msg and "uv python install 3.12" in msg and "python3.12" in msg
    uv = fake_python(home / ".local/share/uv/python/cpython-3.12.4-linux-x86_64-gnu/bin/python3.12", "3.12.4")
    assert toolenvs.find_python(spec(pythons=("3.12",))) == str(uv)
    pyenv = fake_python(tmp_path / "pyenv/versions/3.12.1/bin/python3.12", "3.12.1")
    assert toolenvs.find_python(spec(pythons=("3.12",))) == str(pyenv)  # pyenv before uv
    on_path = fake_python(tmp_path / "bin/python3.12", "3.12.7")
    assert toolenvs.find_python(spec(pythons=("3.12",))) == str(on_path)  # PATH first
    # a shim that fails (pyenv's for an unselected version) or reports another version is skipped
    on_path.write_text("#!/bin/sh\nexit 127\n")
    assert toolenvs.find_python(spec(pythons=("3.12",))) == str(pyenv)
    # the best acceptable version wins
    p13 = fake_python(tmp_path / "pyenv/versions/3.13.0/bin/python3.13", "3.13.0")
    assert toolenvs.find_python(spec(pythons=("3.13", "3.12"))) == str(p13)


def test_ensure_creates_once_and_spec_change_makes_a_new_env(envroot, tmp_path):
    real_python()
    s = spec()
    st = toolenvs.state(s)
    assert (
        not st["ready"]
        and "not created yet" in st["detail"]
        and not envroot.joinpath(toolenvs.env_dir(s).name).exists()
    )
    lines = []
    py = toolenvs.ensure(s, log=lines.append)
    assert Path(py).exists() and toolenvs.state(s)["ready"]
    marker = json.loads((toolenvs.env_dir(s) / toolenvs.MARKER).read_text())
    assert marker["digest"] == s.digest() and marker["python_version"].startswith(("3.12", "3.13"))
    assert any("creating the demo tool environment" in line for line in lines)
    lines.clear()
    assert toolenvs.ensure(s, log=lines.append) == py and not lines  # reused, nothing logged
    s2 = spec(check="import json")
    assert s2.digest() != s.digest() and toolenvs.env_dir(s2) != toolenvs.env_dir(s)
    assert not toolenvs.state(s2)["ready"]
    toolenvs.ensure(s2, log=None)  # the same (no) packages: the existing environment is adopted, not remade
    assert toolenvs.state(s2)["ready"] and not toolenvs.state(s)["ready"]
    assert spec(purpose="other words").digest() == s.digest()  # the description does not shape the env
    toolenvs.ensure(s, log=None)
    assert toolenvs.state(s)["ready"] and not toolenvs.state(s2)["ready"]
    s3 = spec(requirements=("pip",))  # not fully pinned: never adopted, always made anew
    toolenvs.ensure(s3, log=None)
    assert toolenvs.state(s3)["ready"] and toolenvs.state(s)["ready"]
    removed = toolenvs.remove(s)
    assert len(removed) == 2 and not toolenvs.state(s)["ready"] and not toolenvs.state(s3)["ready"]


def test_failing_install_leaves_nothing(envroot, tmp_path):
    real_python()
    # a local project whose build fails: pip fails without touching the network
    proj = tmp_path / "broken"
    proj.mkdir()
    (proj / "setup.py").write_text("raise SystemExit('this package cannot be built')\n")
    s = spec(requirements=(str(proj),))
    with pytest.raises(BackendUnavailable) as e:
        toolenvs.ensure(s, log=None)
    msg = str(e.value)
    assert "pip said" in msg and "edgekit backends install demo" in msg
    leftovers = [p.name for p in envroot.iterdir() if not p.name.endswith(".lock")]
    assert leftovers == []
    assert not toolenvs.state(s)["ready"]


def test_failing_check_leaves_nothing(envroot):
    real_python()
    s = spec(check="import module_that_is_not_there")
    with pytest.raises(BackendUnavailable, match="check failed"):
        toolenvs.ensure(s, log=None)
    assert [p.name for p in envroot.iterdir() if not p.name.endswith(".lock")] == []


def test_concurrent_ensure_creates_once(envroot):
    real_python()
    code = (
        "import sys; from edgekit import toolenvs; "
        "s = toolenvs.ToolEnvSpec('race', ('3.12', '3.13'), (), 'import sys', 'race test'); "
        "print(toolenvs.ensure(s, log=lambda m: print('LOG', m)))"
    )
    env = dict(os.environ, EDGEKIT_TOOLENV_DIR=str(envroot))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    pythons = {o.strip().splitlines()[-1] for o, _ in outs}
    assert len(pythons) == 1
    created = sum(o.count("LOG creating the race tool environment") for o, _ in outs)
    assert created == 1
    assert len([p for p in envroot.iterdir() if p.is_dir()]) == 1


def test_run_tool_request_result_env_and_errors(envroot, tmp_path):
    real_python()
    s = spec()
    script = tmp_path / "tool.py"
    script.write_text(
        "import json, os, sys\n"
        "req = json.load(open(sys.argv[1]))\n"
        "sys.stderr.write('working on %s\\n' % req['x'])\n"
        "print('noise on stdout')\n"
        "if req['x'] == 'fail':\n"
        "    sys.exit('it went wrong')\n"
        "if req['x'] == 'trace':\n"
        "    sys.stderr.write('Traceback (most recent call last):\\n  f()\\n  ^^^^\\n')\n"
        "    raise ValueError('the input has shape [-1, 3]')\n"
        "if req['x'] == 'segv':\n"
        "    import signal; sys.stderr.write('converting\\n'); sys.stderr.flush()\n"
        "    os.kill(os.getpid(), signal.SIGSEGV)\n"
        "if req['x'] == 'hang':\n"
        "    import time; time.sleep(60)\n"
        "if req['x'] != 'none':\n"
        "    got = {'got': req['x'], 'env': os.environ.get('EDGEKIT_DEMO'), 'cwd': os.getcwd()}\n"
        "    json.dump(got, open(sys.argv[2], 'w'))\n"
    )
    lines = []
    work = tmp_path / "w"
    res = toolenvs.run_tool(s, script, {"x": "ok"}, work, log=lines.append)
    assert res == {"got": "ok", "env": "1", "cwd": str(work)}
    assert "working on ok" in lines and "noise on stdout" not in lines
    with pytest.raises(ConversionError, match="it went wrong"):
        toolenvs.run_tool(s, script, {"x": "fail"}, work, log=None)
    with pytest.raises(ConversionError, match="no readable result"):
        toolenvs.run_tool(s, script, {"x": "none"}, work, log=None)
    with pytest.raises(ConversionError) as e:  # the line that says why leads, a traceback's carets never do
        toolenvs.run_tool(s, script, {"x": "trace", "step": "s"}, work, log=None)
    assert str(e.value).splitlines()[0] == ("demo: step 's' failed (exit 1): ValueError: the input has shape [-1, 3]")
    with pytest.raises(ConversionError, match=r"step 's' crashed \(SIGSEGV; a fault of the converter.*at: converting"):
        toolenvs.run_tool(s, script, {"x": "segv", "step": "s"}, work, log=None)
    with pytest.raises(ConversionError, match="did not finish within 2 s"):
        toolenvs.run_tool(s, script, {"x": "hang", "step": "hang"}, work, timeout=2, log=None)


def children():
    """Live child processes of this test process (from /proc)."""
    me, out = str(os.getpid()), set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                fields = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me and fields[0] != "Z":
                out.add(int(d))
    return out


# Stands in for tools/runner_worker.py (a unit test of the host side of the protocol: deadlines, cleanup).
FAKE_WORKER = r"""
# speaks the agent's tensor encoding (edgekit_sdk.wire) by hand: this environment has no numpy
import json, struct, sys, time
inp, out = sys.stdin.buffer, sys.stdout.buffer
mode = None

def reply(head, tensors=(), payload=b""):
    raw = json.dumps(dict(head, tensors=list(tensors))).encode()
    out.write(b"EKT1" + struct.pack("<I", len(raw)) + raw + payload)
    out.flush()

while True:
    prefix = inp.read(8)
    if len(prefix) < 8:
        break
    req = json.loads(inp.read(struct.unpack("<I", prefix[4:])[0]).decode())
    inp.read(sum(int(e["nbytes"]) for e in req["tensors"]))
    if req["cmd"] == "load":
        mode = req["manifest"]["mode"]
        if mode == "fail-load":
            reply({"ok": False, "error": "RunnerFault: cannot load the model"})
        else:
            reply({"ok": True, "describe": {"fake": True}})
    elif req["cmd"] == "run":
        if mode == "hang":
            time.sleep(600)
        y = {"name": "y", "dtype": "float32", "shape": [2], "offset": 0, "nbytes": 8}
        reply({"ok": True, "ms": 0.0}, [y], b"\0" * 8)
    elif req["cmd"] == "close":
        reply({"ok": True})
        break
"""


@pytest.fixture
def fake_worker(envroot, tmp_path, monkeypatch):
    real_python()
    from edgekit.converters import toolworker

    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE_WORKER)
    monkeypatch.setattr(toolworker, "WORKER", script)
    s = spec()
    toolenvs.ensure(s, log=None)

    def make(mode, **kw):
        return toolworker.RunnerWorker(s, "fake", tmp_path / "model.bin", {"mode": mode}, **kw)

    return make


def test_worker_is_stopped_by_close_by_collection_and_after_a_failed_load(fake_worker):
    import gc

    import numpy as np

    before = children()
    w = fake_worker("ok")
    assert children() - before == {w.pid} and w.describe == {"fake": True}
    assert w.run({"x": np.ones(3, np.float32)})["y"].tolist() == [0.0, 0.0]
    w.close()
    assert children() == before
    w = fake_worker("ok")
    del w  # an unreferenced worker is freed (no thread holds it) and its process stopped
    gc.collect()
    assert children() == before
    with pytest.raises(ConversionError, match="cannot load the model"):
        fake_worker("fail-load")
    assert children() == before


def test_hung_worker_is_killed_at_the_deadline(fake_worker):
    import numpy as np

    before = children()
    w = fake_worker("hang", run_timeout=1)
    with pytest.raises(ConversionError, match="no answer within 1 s"):
        w.run({"x": np.ones(3, np.float32)})
    assert children() == before
    w.close()


def test_summary_counts_the_pins():
    assert toolenvs._summary(("a==1", "b==2", "c==3")) == "a==1 and 2 other packages, all pinned"
    assert toolenvs._summary(("a==1", "b>=2")) == "a==1 and 1 other packages, 1 of them pinned"
    assert "not pinned by the spec: x==1" in toolenvs._summary(("a==1",), ["x==1"])


def test_an_env_holding_exactly_the_new_pins_is_adopted(envroot):
    real_python()
    old = spec()
    py_old = toolenvs.ensure(old, log=None)
    new = spec(env=(("EDGEKIT_DEMO", "2"),))  # another digest, the same (no) packages
    assert new.digest() != old.digest()
    lines = []
    py = toolenvs.ensure(new, log=lines.append)
    assert any("adopted it as" in line for line in lines) and not any("creating" in line for line in lines)
    assert toolenvs.state(new)["ready"] and not toolenvs.env_dir(old).exists() and py != py_old
    marker = json.loads((toolenvs.env_dir(new) / toolenvs.MARKER).read_text())
    assert marker["digest"] == new.digest() and marker["adopted_from"] == toolenvs.env_dir(old).name
    assert subprocess.run([py, "-c", "import sys"]).returncode == 0
    # an environment that fails the new spec's check is not adopted (and a new one is tried, here failing too)
    with pytest.raises(BackendUnavailable, match="check failed"):
        toolenvs.ensure(spec(check="import module_that_is_not_there"), log=None)
    assert toolenvs.state(new)["ready"]


def test_leftovers_of_killed_creations_are_removed(envroot):
    real_python()
    s = spec()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    envroot.mkdir(parents=True)
    stale = envroot / f".{toolenvs.env_dir(s).name}.tmp-{dead.pid}"
    older = envroot / f".demo-0123456789ab.tmp-{dead.pid}"
    alive = envroot / ".demo-0123456789ab.tmp-1"  # pid 1 runs: a creation in progress elsewhere is left alone
    for d in (stale, older, alive):
        (d / "bin").mkdir(parents=True)
    lines = []
    toolenvs.ensure(s, log=lines.append)
    assert not stale.exists() and any("left by an interrupted creation" in line for line in lines)
    removed = toolenvs.remove(s)
    assert str(older) in removed and not older.exists() and alive.exists()


def test_a_second_process_says_it_waits_for_the_lock(envroot):
    real_python()
    s = spec()
    code = (
        "from edgekit import toolenvs; "
        "s = toolenvs.ToolEnvSpec('demo', ('3.12', '3.13'), (), 'import sys', 'a test environment', "
        "(('EDGEKIT_DEMO', '1'),)); toolenvs.ensure(s, log=None)"
    )
    lock = envroot / f".{toolenvs.env_dir(s).name}.lock"
    with toolenvs._Lock(lock):
        p = subprocess.Popen(
            [sys.executable, "-c", code],
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ, EDGEKIT_TOOLENV_DIR=str(envroot)),
        )
        first = p.stderr.readline()
    rest = p.communicate(timeout=300)[1]
    assert p.returncode == 0, rest
    assert first.startswith("waiting for another edgekit creating the demo tool environment"), first
    assert "creating the demo tool environment" in rest  # creation progress reaches stderr with log=None


def test_interrupted_run_tool_stops_the_tool(envroot, tmp_path):
    import signal
    import time

    real_python()
    s = spec()
    toolenvs.ensure(s, log=None)
    script = tmp_path / "sleeper.py"
    script.write_text(
        "import json, os, sys, time\n"
        "open(json.load(open(sys.argv[1]))['pidfile'], 'w').write(str(os.getpid()))\n"
        "time.sleep(300)\n"
    )
    pidfile = tmp_path / "tool.pid"
    code = (
        "import sys; from edgekit import toolenvs; "
        "s = toolenvs.ToolEnvSpec('demo', ('3.12', '3.13'), (), 'import sys', 'a test environment', "
        "(('EDGEKIT_DEMO', '1'),)); "
        f"toolenvs.run_tool(s, {str(script)!r}, {{'pidfile': {str(pidfile)!r}}}, {str(tmp_path / 'w')!r})"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code],
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, EDGEKIT_TOOLENV_DIR=str(envroot)),
    )
    for _ in range(600):
        if pidfile.exists() and pidfile.read_text():
            break
        time.sleep(0.1)
    tool = int(pidfile.read_text())
    p.send_signal(signal.SIGINT)  # Ctrl-C: the tool runs in its own session, so only edgekit gets it
    err = p.communicate(timeout=60)[1]
    assert p.returncode != 0 and "KeyboardInterrupt" in err
    for _ in range(50):
        if not Path(f"/proc/{tool}").exists():
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{tool}").exists(), "the converter outlived the interrupted edgekit"


def test_without_interpreters_each_fix_is_said_once(tmp_path, tiny_model):
    """No Python for any tool environment: the messages say how to get one, once, and never ask to install a
    runtime that is installed (LiteRT)."""
    from harness import run_cli

    env = {
        "PATH": f"{Path(sys.executable).parent}:/nonexistent-bin",
        "PYENV_ROOT": str(tmp_path / "no-pyenv"),
        "UV_PYTHON_INSTALL_DIR": str(tmp_path / "no-uv"),
        "EDGEKIT_TOOLENV_DIR": str(tmp_path / "envs"),
    }
    p = run_cli("backends", env=env, check=0)
    for name in ("tflite", "paddlelite", "mindspore-lite"):
        rows = [row for row in p.stdout.splitlines() if row.split()[1:2] == [name]]
        assert rows and rows[0].startswith("NO"), p.stdout
    assert p.stdout.count("pyenv install 3.10") == 1 and p.stdout.count("edgekit backends install paddlelite") == 1
    assert p.stdout.count("pyenv install 3.12") == 1
    for backend in ("tflite", "paddlelite"):
        b = run_cli("build", tiny_model, "--profile", "host", "--backend", backend, "-o", tmp_path / backend, env=env)
        assert b.returncode != 0 and "is not usable here" in b.stderr, b.stderr
        assert b.stderr.count(f"edgekit backends install {backend}") == 1, b.stderr
        if backend == "tflite":
            pytest.importorskip("ai_edge_litert")
            assert "pip install" not in b.stderr and "ai-edge-litert" in b.stderr, b.stderr
    d = run_cli("doctor", env=env)
    assert d.stdout.count("pyenv install 3.10") == 1, d.stdout


def test_doctor_survives_a_failing_availability(monkeypatch):
    from edgekit import diagnostics
    from edgekit.converters import get

    def boom():
        raise RuntimeError("the runtime's import crashed")

    monkeypatch.setattr(get("paddlelite"), "availability", boom)
    d = diagnostics.doctor()
    assert (
        not d["backends"]["paddlelite"]["ok"]
        and "the runtime's import crashed" in d["backends"]["paddlelite"]["detail"]
    )
    assert d["backends"]["ort"]["ok"]

"""No runtime edgekit or its agent imports records or sends usage data, and none prints on import.

ONNX Runtime writes a device id and a queue of telemetry events under
``~/.cache/Microsoft/DeveloperTools/.onnxruntime/`` from its import on unless ``ORT_DISABLE_TELEMETRY=1``
is set first; OpenVINO and NNCF report usage to Google Analytics and write ``~/intel``; MNN's tool
wrappers install a logging SDK. Each check runs real commands in fresh processes with a fresh HOME:
every file they leave in HOME must be edgekit's own, and no process (Python or C code) may open a
connection to anything but this machine.
"""

import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

# What the runtimes are known to write when their telemetry is on (relative to HOME).
TELEMETRY_PATHS = (".cache/Microsoft", "intel", ".config/Microsoft", ".local/share/Microsoft")

# The sandbox: every Python process started with it on PYTHONPATH records and refuses network use that leaves
# this machine (the local agent's loopback HTTP stays allowed).
SITE = r"""
import os, sys

_LOG = os.environ["EDGEKIT_NET_LOG"]
_LOCAL = ("127.", "::1", "localhost", "0.0.0.0", "::ffff:127.")


def _local(host):
    return host is None or isinstance(host, (bytes, int)) or str(host).startswith(_LOCAL) or str(host) == ""


def _hook(event, args):
    if event in ("socket.connect", "socket.sendto"):
        addr = args[1] if event == "socket.connect" else args[-1]
        if isinstance(addr, tuple) and addr and not _local(addr[0]):
            with open(_LOG, "a") as f:
                f.write("%d %s %r\n" % (os.getpid(), event, addr))
            raise OSError("network is off in this sandbox")
    elif event == "socket.getaddrinfo" and not _local(args[0]):
        with open(_LOG, "a") as f:
            f.write("%d %s %r\n" % (os.getpid(), event, args[0]))
        raise OSError("network is off in this sandbox")
    elif event == "urllib.Request":
        with open(_LOG, "a") as f:
            f.write("%d %s %r\n" % (os.getpid(), event, args[0]))


sys.addaudithook(_hook)
"""


def _sandbox_env(tmp_path):
    home = tmp_path / "home"
    home.mkdir(parents=True)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "ORT_", "EDGEKIT_"))}
    from edgekit import toolenvs

    env.update(
        HOME=str(home),
        PYTHONPATH=os.pathsep.join([str(site)] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
        EDGEKIT_NET_LOG=str(tmp_path / "network.log"),
        # tool environments are made once per machine (pip needs the network); the sandbox only uses them
        EDGEKIT_TOOLENV_DIR=str(toolenvs.root()),
    )
    env.pop("CI", None)
    return home, env


def _left_in_home(home):
    """Every file under ``home`` that is not edgekit's own (its cache and device root)."""
    own = (home / ".cache" / "edgekit",)
    return sorted(
        str(p.relative_to(home)) for p in home.rglob("*") if p.is_file() and not any(o in p.parents for o in own)
    )


_CONNECT = re.compile(r'(AF_INET6?).*?(?:inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6, "([^"]+)")')


def _remote_connects(strace_log):
    """connect/sendto calls of any process (C code included) to an address that is not this machine's loopback."""
    bad = []
    for line in strace_log.read_text(errors="replace").splitlines():
        m = _CONNECT.search(line)
        if m:
            addr = m.group(2) or m.group(3)
            if not (addr.startswith("127.") or addr in ("::1", "0.0.0.0") or addr.startswith("::ffff:127.")):
                bad.append(line)
    return bad


def _run(argv, env, strace_log=None, timeout=900):
    if strace_log is not None and shutil.which("strace"):
        argv = ["strace", "-f", "-qq", "-e", "trace=connect,sendto,sendmsg", "-o", str(strace_log), *argv]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)


def test_ort_import_and_session_write_nothing(tmp_path):
    """The control shows where ONNX Runtime's telemetry lands; with edgekit imported first nothing lands there."""
    code = textwrap.dedent(
        """
        import sys
        if sys.argv[1] == "edgekit":
            import edgekit  # noqa: F401
        import numpy as np, onnxruntime as ort
        from onnx import TensorProto, helper
        g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        print(s.run(None, {"x": np.ones(1, np.float32)})[0][0])
        """
    )
    for mode in ("bare", "edgekit"):
        home, env = _sandbox_env(tmp_path / mode)
        p = subprocess.run([sys.executable, "-c", code, mode], env=env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0 and p.stdout.strip() == "1.0", p.stderr[-2000:]
        written = (home / ".cache" / "Microsoft" / "DeveloperTools" / ".onnxruntime").exists()
        if mode == "bare":
            assert written, "ONNX Runtime no longer writes its telemetry store here: update TELEMETRY_PATHS"
        else:
            assert not written and _left_in_home(home) == []


def test_agent_ort_runner_keeps_telemetry_off(tmp_path):
    """The agent imports ONNX Runtime on devices itself (no edgekit there): its runner sets the opt-out first."""
    home, env = _sandbox_env(tmp_path)
    code = "from edgekit_agent.runners import get; print(get('ort').runtime_version())"
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip(), p.stderr[-2000:]
    assert _left_in_home(home) == []


def _first_line(argv, env):
    p = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:]
    return p.stdout.splitlines()[0] if p.stdout else "", p.stdout


def test_no_runtime_banner_in_backends_and_doctor(tmp_path):
    """MNN (and LiteRT builds that carry its code) printf a CPU feature line on import; a command's first line
    (stdout and stderr together, as a terminal shows them) is the command's own."""
    _, env = _sandbox_env(tmp_path)
    for command in ("doctor", "backends"):
        first, out = _first_line([sys.executable, "-m", "edgekit", command], env)
        assert "The device supports" not in out and not first.startswith("INFO:"), out[:2000]
        assert first.strip(), out[:2000]


def _tflite_ready():
    try:
        from edgekit import toolenvs
        from edgekit.converters import tflite
        from edgekit.errors import BackendUnavailable

        try:
            toolenvs.find_python(tflite.TOOLENV)
        except BackendUnavailable:
            return toolenvs.state(tflite.TOOLENV)["ready"]
        toolenvs.ensure(tflite.TOOLENV)  # outside the sandbox: pip needs the network once
        return True
    except ImportError:
        return False


@pytest.mark.e2e
@pytest.mark.slow
def test_build_deploy_and_bench_record_and_send_nothing(tmp_path, tiny_model, tiny_calib):
    """Build with ONNX Runtime, MNN, OpenVINO (NNCF int8) and TFLite, deploy each to a local agent and benchmark it
    there, all in a fresh HOME under a sandbox that refuses network use: no file outside edgekit's own cache is
    left in HOME, no process connected anywhere but loopback, and the agent's log holds no runtime banner."""
    pytest.importorskip("MNN")
    pytest.importorskip("openvino")
    home, env = _sandbox_env(tmp_path)
    builds = [("ort", "int8"), ("mnn", "int8"), ("openvino", "int8")]
    if _tflite_ready():
        builds.append(("tflite", "fp32"))
    ek = f"{sys.executable} -m edgekit"
    lines = ["set -e"]
    for backend, precision in builds:
        out = tmp_path / "b" / backend
        lines.append(
            f"{ek} build {tiny_model} --profile host --backend {backend} --precision {precision} --calib {tiny_calib}"
            f" --min-top1 0.5 --no-cache -q -o {out}"
        )
        lines.append(f"{ek} deploy {out} --local --runs 3 --warmup 1 --json > {tmp_path}/deploy-{backend}.json")
    lines.append(f"{ek} agent stop --local")
    script = tmp_path / "run.sh"
    script.write_text("\n".join(lines) + "\n")
    strace_log = tmp_path / "strace.log"
    try:
        p = _run(["bash", str(script)], env, strace_log)
    finally:
        subprocess.run(["bash", "-c", f"{ek} agent stop --local"], env=env, capture_output=True, timeout=60)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-4000:])
    for backend, _ in builds:
        assert (tmp_path / f"deploy-{backend}.json").stat().st_size > 0, backend
    net = tmp_path / "network.log"
    assert not net.exists(), net.read_text()
    if strace_log.exists():
        assert _remote_connects(strace_log) == []
    assert not any((home / t).exists() for t in TELEMETRY_PATHS), _left_in_home(home)
    assert _left_in_home(home) == []
    logs = list((home / ".cache" / "edgekit").rglob("*.log"))
    assert logs, "the local agent's log was expected under the fresh HOME"
    for log in logs:
        assert "The device supports" not in log.read_text(errors="replace"), log


def test_sandbox_catches_a_remote_connection(tmp_path):
    """The sandbox itself works: a Python connection attempt to a remote address is recorded and refused."""
    _, env = _sandbox_env(tmp_path)
    code = textwrap.dedent(
        """
        import socket
        try:
            socket.create_connection(("192.0.2.1", 80), timeout=1)
        except OSError as e:
            print(e)
        """
    )
    strace_log = tmp_path / "strace.log"
    p = _run([sys.executable, "-c", code], env, strace_log, timeout=60)
    assert "network is off" in p.stdout
    assert "192.0.2.1" in (tmp_path / "network.log").read_text()
    if shutil.which("strace"):  # without the Python hook (as for C code), strace still sees the connect
        env2 = {k: v for k, v in env.items() if k != "PYTHONPATH"}
        _run([sys.executable, "-c", code], env2, strace_log, timeout=60)
        assert _remote_connects(strace_log)

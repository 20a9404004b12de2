import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
PPOCR = EXAMPLES / "ppocr_mobile_v2_cls.onnx"

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(EXAMPLES))


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory):
    """Builds and agents of the test run live in a temporary cache, never the user's."""
    d = tmp_path_factory.mktemp("edgekit-cache")
    old = os.environ.get("EDGEKIT_CACHE_DIR")
    os.environ["EDGEKIT_CACHE_DIR"] = str(d)
    yield d
    if old is None:
        os.environ.pop("EDGEKIT_CACHE_DIR", None)
    else:
        os.environ["EDGEKIT_CACHE_DIR"] = old


PPOCR_SHA256 = "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c"  # README: Sources and licences


@pytest.fixture(scope="session", autouse=True)
def shipped_model_is_never_written():
    """Builds read their input; nothing in the suite may write over the model the project ships."""
    from edgekit.model import file_sha256

    assert file_sha256(PPOCR) == PPOCR_SHA256, f"{PPOCR} differs from the shipped file: restore it from git"
    yield
    assert file_sha256(PPOCR) == PPOCR_SHA256, f"a test wrote over {PPOCR}"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    from models import tiny_cnn

    return tiny_cnn(tmp_path_factory.mktemp("models") / "tiny_cnn.onnx")


@pytest.fixture(scope="session")
def tiny_calib(tmp_path_factory):
    from models import tiny_calib

    return tiny_calib(tmp_path_factory.mktemp("data") / "tiny_calib.npz")


@pytest.fixture(scope="session")
def textlines(tmp_path_factory):
    """Rendered, labelled text lines for the PP-OCR orientation classifier."""
    import numpy as np
    from textlines import make_textlines

    x, labels = make_textlines(n=200, seed=0)
    path = tmp_path_factory.mktemp("data") / "textlines.npz"
    np.savez(path, x=x, labels=labels)
    return path


@pytest.fixture(scope="session")
def tiny_bundle(tmp_path_factory, tiny_model, tiny_calib):
    import edgekit

    out = tmp_path_factory.mktemp("bundles") / "tiny"
    edgekit.build(tiny_model, "host", out, precision="fp32", calib=tiny_calib, name="tiny")
    return out


def stop_agent(python, root):
    """Stop the agent serving ``root`` (whichever zipapp started it: the state file names its pid)."""
    pyz = Path(root) / "agent" / "edgekit-agent.pyz"
    if not pyz.exists():
        from edgekit import agent_package

        pyz, _ = agent_package.build(Path(os.environ["EDGEKIT_CACHE_DIR"]) / "agent")
    subprocess.run([python, str(pyz), "stop", "--root", str(root)], capture_output=True, timeout=30)


@pytest.fixture(scope="session", autouse=True)
def no_agent_outlives_the_suite(tmp_path_factory):
    """Safety net: kill any agent whose command line points into this run's temporary directories."""
    base = str(tmp_path_factory.getbasetemp())
    yield
    import signal

    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                parts = f.read().decode(errors="replace").split("\x00")
        except OSError:
            continue
        if (
            ("serve" in parts or "supervise" in parts)
            and any("edgekit-agent" in p for p in parts)
            and any(base in p for p in parts)
        ):
            try:
                os.kill(int(pid), signal.SIGTERM)
            except OSError:
                pass


@pytest.fixture
def local_device(tmp_path):
    from edgekit.deployer import open_device

    root = tmp_path / "device"
    dev = open_device("local", device_root=str(root))
    yield dev
    dev.close()
    stop_agent(sys.executable, root)


@pytest.fixture(scope="session")
def sshd():
    from sshd import ThrowawaySSHD

    with ThrowawaySSHD() as server:
        yield server


def run_cli(*args, check=None, env=None):
    """Run the real `edgekit` command in a subprocess."""
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run(
        [sys.executable, "-m", "edgekit", *map(str, args)], capture_output=True, text=True, env=e, timeout=600
    )
    if check is not None:
        assert p.returncode == check, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


def one_json(stdout):
    return json.loads(stdout)

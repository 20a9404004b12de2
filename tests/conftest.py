import os

import pytest
from harness import PPOCR, PPOCR_SHA256, AgentRoots, e2e
from harness.isolation import RunDirs

_run_dirs = RunDirs()
_process_watch = e2e.ProcessWatch()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """The run gets its own HOME, XDG directories, TMPDIR and base temporary directory (harness.isolation)."""
    if getattr(config, "workerinput", None) is None and not hasattr(config, "_edgekit_run_dirs"):
        _run_dirs.enter()
        config._edgekit_run_dirs = _run_dirs  # type: ignore[attr-defined]
        if config.option.basetemp is None:
            config.option.basetemp = str(_run_dirs.basetemp)


def pytest_unconfigure(config: pytest.Config) -> None:
    dirs = getattr(config, "_edgekit_run_dirs", None)
    if dirs is not None:
        session = getattr(config, "_edgekit_session_status", 1)
        dirs.leave(remove=session == 0)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config._edgekit_session_status = int(exitstatus)  # type: ignore[attr-defined]


def pytest_collection_modifyitems(items: list) -> None:
    e2e.mark(items)


@pytest.fixture(autouse=True)
@e2e.run_wide
def fast_tests_start_no_process(request):
    """A test not marked e2e must not start a process: if one does, it fails here and gets the mark (harness.e2e)."""
    if request.node.get_closest_marker("e2e"):
        yield
        return
    _process_watch.start()
    try:
        yield
    finally:
        started = _process_watch.stop()
    if started:
        pytest.fail(
            f"this test is not marked e2e but started {len(started)} process(es), first {started[0]}: "
            "name what starts them in tests/harness/e2e.py or mark the test @pytest.mark.e2e"
        )


@pytest.fixture(scope="session", autouse=True)
@e2e.run_wide
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


@pytest.fixture(scope="session", autouse=True)
@e2e.run_wide
def host_processor_is_read_once():
    """``platform.processor()`` runs ``uname -p`` once per process and caches it: read it before any test watches
    processes, so the first fast test that detects the host profile is not blamed for it."""
    import platform

    platform.processor()


@pytest.fixture(scope="session", autouse=True)
@e2e.run_wide
def shipped_model_is_never_written():
    """Builds read their input; nothing in the suite may write over the model the project ships."""
    from edgekit.model import file_sha256

    assert file_sha256(PPOCR) == PPOCR_SHA256, f"{PPOCR} differs from the shipped file: restore it from git"
    yield
    assert file_sha256(PPOCR) == PPOCR_SHA256, f"a test wrote over {PPOCR}"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    from harness.models import tiny_cnn

    return tiny_cnn(tmp_path_factory.mktemp("models") / "tiny_cnn.onnx")


@pytest.fixture(scope="session")
def tiny_calib(tmp_path_factory):
    from harness.models import tiny_calib

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


@pytest.fixture
def agent_roots(tmp_path):
    """``agent_roots("dev")`` is a device root under the test's tmp_path (``python=`` names the interpreter that
    will run the agent there); every agent serving one of them is stopped when the test ends."""
    roots = AgentRoots(tmp_path)
    yield roots
    roots.stop_all()


@pytest.fixture(scope="session", autouse=True)
@e2e.run_wide
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
def local_device(agent_roots):
    from edgekit.deployer import open_device

    dev = open_device("local", device_root=str(agent_roots("device")))
    yield dev
    dev.close()


@pytest.fixture(scope="session")
def sshd():
    from harness.sshd import ThrowawaySSHD

    with ThrowawaySSHD() as server:
        yield server

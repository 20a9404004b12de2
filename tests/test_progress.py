"""edgekit.progress: live on a terminal, plain lines in a log, nothing with --json/-q; plugs into log= callers."""

import io
import os
import threading

import pytest

from edgekit import progress
from edgekit.progress import Progress


def test_plain_lines_for_a_log(monkeypatch):
    out = io.StringIO()
    now = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    p = Progress("plain", out)
    with p.step("calibrating", total=3) as s:
        for _ in range(3):
            s.advance()
        p("a line of its own")
        now[0] += 3.5
    p.detail("pip: Collecting x")  # the tool's own output: only with --verbose
    with p.step("checking"):  # quick, without a total: a start line only
        pass
    assert out.getvalue().splitlines() == [
        "calibrating (0/3) ...",
        "a line of its own",
        "calibrating: done (3/3) in 3.5 s",
        "checking ...",
    ]


def test_plain_lines_are_throttled(monkeypatch):
    out = io.StringIO()
    now = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    p = Progress("plain", out)
    s = p.step("searching", total=40)
    for _ in range(40):
        now[0] += 1  # one per second: a line every PLAIN_EVERY seconds, not one per item
        s.advance()
    s.done()
    lines = out.getvalue().splitlines()
    assert lines[1:] == [
        "  searching: 10/40",
        "  searching: 20/40",
        "  searching: 30/40",
        "searching: done (40/40) in 40.0 s",
    ]


def test_verbose_shows_the_tools_output():
    out = io.StringIO()
    p = Progress("plain", out, verbose=True)
    p.detail("Collecting onnx==1.17.0")
    assert out.getvalue() == "Collecting onnx==1.17.0\n"


def test_quiet_prints_nothing():
    out = io.StringIO()
    p = Progress.for_command(json=True, stream=out)
    assert p.mode == "quiet" and not p.shows_steps
    with p.step("x", total=2) as s:
        s.advance(2)
    p("line")
    p.transfer("model.onnx", 10, 10)
    p.close()
    assert out.getvalue() == ""
    assert Progress.for_command(quiet=True, verbose=True, stream=out).mode == "quiet"


def test_for_command_picks_live_on_a_terminal_and_plain_otherwise(monkeypatch):
    monkeypatch.delenv("TERM", raising=False)
    assert Progress.for_command(stream=io.StringIO()).mode == "plain"
    master, slave = os.openpty()
    try:
        with os.fdopen(slave, "w") as tty:
            assert Progress.for_command(stream=tty).mode == "live"
            monkeypatch.setenv("TERM", "dumb")
            assert Progress.for_command(stream=tty).mode == "plain"
    finally:
        os.close(master)


def test_live_display_on_a_terminal(monkeypatch):
    """rich draws on the terminal while a step is open and is gone when it ends; lines stay."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    master, slave = os.openpty()
    chunks = []

    def drain():
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    with os.fdopen(slave, "w") as tty:
        p = Progress.for_command(stream=tty)
        assert p.mode == "live"
        with p.step("building 4 candidates", total=4) as s:
            for _ in range(4):
                s.advance()
            p("  built ort-fp32")
        assert p._live is None  # stopped when the last step ended: the command's own output follows
        p.close()
    reader.join(timeout=5)
    text = b"".join(chunks).decode(errors="replace")
    assert "building 4 candidates" in text and "built ort-fp32" in text


def test_transfers_take_the_upload_callback_signature(monkeypatch):
    out = io.StringIO()
    now = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    p = Progress("plain", out)
    cb = p.transfer  # deployer.deploy(progress=...) calls progress(name, done, total)
    for done in (0, 4096, 8192):
        now[0] += 11
        cb("model.onnx", done, 8192)
    assert out.getvalue().splitlines() == [
        "uploading model.onnx (0 B/8.0 KB) ...",
        "  uploading model.onnx: 4.0 KB/8.0 KB",
        "uploading model.onnx: done (8.0 KB/8.0 KB) in 22.0 s",
    ]
    assert not p._open


def test_of_wraps_a_plain_log_without_changing_its_output():
    lines = []
    p = progress.of(lines.append)
    assert not p.shows_steps
    with p.step("calibrating", total=2) as s:
        s.advance()
        p("kept")
    p.detail("hidden")
    assert lines == ["kept"]
    assert progress.of(None).shows_steps is False
    real = Progress("plain", io.StringIO())
    assert progress.of(real) is real


def test_steps_from_threads():
    out = io.StringIO()
    p = Progress("plain", out)
    with p.step("building", total=40) as s:
        ts = [threading.Thread(target=lambda: [s.advance() for _ in range(10)]) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    assert s.completed == 40 and not p._open


def test_bad_mode():
    with pytest.raises(ValueError, match="use one of live, plain, quiet"):
        Progress("fancy")


@pytest.mark.e2e  # it runs sh
def test_tool_environment_creation_counts_pips_packages():
    """pip's 'Collecting' lines advance the creation step; its whole output is shown only with --verbose; a plain
    log callable still gets pip's progress-like lines, as before."""
    from collections import deque

    from edgekit import toolenvs

    script = "echo 'Collecting onnx==1.17.0'; echo '  Downloading onnx.whl'; echo 'Collecting numpy==2.1.0'; "
    script += "echo 'Installing collected packages: numpy, onnx'; echo 'some other line'"
    out = io.StringIO()
    p = Progress("plain", out, verbose=False)
    with p.step("demo tool environment: downloading", total=2) as step:
        assert toolenvs._run_logged(["sh", "-c", script], p, deque(maxlen=5), step=step) == 0
        assert step.completed == 2 and step.name == "demo tool environment: installing"
    assert "Collecting" not in out.getvalue() and "some other line" not in out.getvalue()
    verbose = io.StringIO()
    toolenvs._run_logged(["sh", "-c", script], Progress("plain", verbose, verbose=True), deque(maxlen=5))
    assert "some other line" in verbose.getvalue()
    lines = []
    toolenvs._run_logged(["sh", "-c", script], lines.append, deque(maxlen=5))
    assert lines == [
        "  Collecting onnx==1.17.0",
        "  Downloading onnx.whl",
        "  Collecting numpy==2.1.0",
        "  Installing collected packages: numpy, onnx",
    ]


def test_a_tool_environment_converters_output_is_a_detail(tmp_path, monkeypatch):
    """run_tool sends the converter's stderr to a Progress's detail (shown with --verbose only) and, as before,
    to a plain log callable; the backends' filter keeps a plain log free of the converters' chatter."""
    import sys

    from edgekit import converters, toolenvs

    monkeypatch.setattr(toolenvs, "ensure", lambda spec, log=None: sys.executable)
    script = tmp_path / "tool.py"
    script.write_text(
        "import json, sys\n"
        "print('Converting node 7', file=sys.stderr)\n"
        "print('converted: 3 ops', file=sys.stderr)\n"
        "open(sys.argv[2], 'w').write(json.dumps({'ok': True}))\n"
    )
    spec = converters.get("paddlelite").toolenv
    shown = {}
    for verbose in (False, True):
        out = io.StringIO()
        assert toolenvs.run_tool(spec, script, {}, tmp_path / str(verbose), log=Progress("plain", out, verbose))
        shown[verbose] = out.getvalue()
    assert shown[False] == "" and "converted: 3 ops" in shown[True] and "Converting node 7" in shown[True]
    json_out = io.StringIO()
    toolenvs.run_tool(
        spec, script, {}, tmp_path / "j", log=Progress.for_command(json=True, verbose=True, stream=json_out)
    )
    assert "converted: 3 ops" in json_out.getvalue()
    backend = converters.get("paddlelite")
    lines = []
    toolenvs.run_tool(spec, script, {}, tmp_path / "plain", log=backend.quiet(lines.append))
    assert lines == ["    converted: 3 ops"]  # a plain log: filtered, as before
    out = io.StringIO()
    toolenvs.run_tool(spec, script, {}, tmp_path / "pv", log=backend.quiet(Progress("plain", out, verbose=True)))
    assert "    Converting node 7" in out.getvalue()  # --verbose: the whole output
    out = io.StringIO()
    toolenvs.run_tool(spec, script, {}, tmp_path / "pq", log=backend.quiet(Progress("plain", out, verbose=False)))
    assert out.getvalue() == ""


def test_verbose_flag_on_the_long_commands(monkeypatch):
    from edgekit.cli import parser
    from edgekit.cli.output import logger

    for argv in (
        ["build", "m.onnx", "-o", "o", "-v"],
        ["deploy", "b", "--local", "--verbose"],
        ["backends", "install", "x", "-v"],
    ):
        args = parser().parse_args(argv)
        assert args.verbose and logger(args).verbose, argv
    assert logger(
        parser().parse_args(["build", "m.onnx", "-o", "o", "-v", "--json"])
    ).verbose  # on stderr; stdout is JSON
    with pytest.raises(SystemExit) as e:
        parser().parse_args(["build", "m.onnx", "-o", "o", "-v", "-q"])
    assert e.value.code == 2


def test_fleet_runs_show_devices_done(monkeypatch, tiny_bundle):
    """deploy_fleet/bench_fleet take a Progress: one step over the devices, advancing as each one finishes."""
    from edgekit import fleet

    def work(job, action, bundle_dir, profile, backend, kwargs):
        job.row = fleet._row(job.fd, "ok", 0.0)
        job.done.set()

    monkeypatch.setattr(fleet, "_work", work)
    monkeypatch.setattr(progress, "PLAIN_EVERY", 0.0)  # every advance gets its line
    devices = [fleet.FleetDevice(f"d{i}", "local://", "local", None, {}) for i in range(3)]
    out = io.StringIO()
    rows = fleet.deploy_fleet(tiny_bundle, devices, jobs=1, log=Progress("plain", out))
    assert [r["status"] for r in rows] == ["ok"] * 3
    text = out.getvalue()
    assert text.startswith("deploying to 3 device(s) (0/3) ...\n"), text
    assert "deploying to 3 device(s): 1/3" in text and "deploying to 3 device(s): 2/3" in text, text
    seen = []
    fleet.bench_fleet(tiny_bundle, devices[:1], log=seen.append)  # a plain log: its output as before (nothing)
    assert seen == []
    live = Progress("plain", io.StringIO())
    steps = []
    monkeypatch.setattr(
        live, "step", lambda name, total=None, unit="": steps.append((name, total)) or progress.Step(live, name, total)
    )
    fleet.bench_fleet(tiny_bundle, devices, log=live)
    assert steps == [("benchmarking on 3 device(s)", 3)]

"""The `edgekit` command: flag handling and rendering in process (``edgekit.cli.main(argv)``), commands that
build, deploy or start agents for real in subprocesses."""

import argparse
import json
import sys
from collections import namedtuple
from pathlib import Path

import pytest
from harness import PPOCR, ROOT, one_json, run_cli, stop_agent

from edgekit.cli import EXIT_CODES, main, parser

Ran = namedtuple("Ran", "returncode stdout stderr")


@pytest.fixture
def cli(capsys, monkeypatch):
    """Run `edgekit ARGS` in this process: ``(returncode, stdout, stderr)``; ``env`` sets variables for the call."""

    def run(*args, env=None):
        for k, v in (env or {}).items():
            monkeypatch.setenv(k, v)
        capsys.readouterr()
        try:
            code = main([str(a) for a in args])
        except SystemExit as e:  # argparse: --help (0) and usage errors (2)
            code = e.code
        out = capsys.readouterr()
        return Ran(code, out.out, out.err)

    return run


def _commands(p):
    """``[(["field", "pull"], parser, help line), ...]``: every command and sub-command."""
    found = []
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {c.dest: c.help for c in action._choices_actions}
            for name, sp in action.choices.items():
                found.append(([name], sp, helps.get(name)))
                found += [([name, *path], spp, h) for path, spp, h in _commands(sp)]
    return found


def test_every_command_has_help(cli):
    """Every command and sub-command has a help line, a help text for each of its arguments, answers --help
    with its usage, and is documented in docs/CLI.md."""
    documented = (ROOT / "docs" / "CLI.md").read_text()
    commands = _commands(parser())
    assert {c[0][0] for c in commands} >= {"build", "deploy", "bench", "agent", "field", "doctor"}
    for path, sp, help_line in commands:
        assert help_line, f"{' '.join(path)} has no help line"
        for action in sp._actions:
            if not isinstance(action, argparse._SubParsersAction) and action.dest != "help":
                assert action.help or action.choices, f"{' '.join(path)}: {action.dest} has no help"
        r = cli(*path, "--help")
        assert r.returncode == 0 and r.stdout.startswith(f"usage: edgekit {' '.join(path)}"), r
        assert f"`{path[0]}`" in documented, f"{path[0]} is not in docs/CLI.md"


def test_exit_codes_are_documented_and_each_error_maps_to_one():
    from edgekit import errors

    help_text = parser().format_help()
    documented = (ROOT / "docs" / "CLI.md").read_text()
    for code, meaning in EXIT_CODES.items():
        assert f"  {code:<4} {meaning}" in help_text
        assert f"| {code} | {meaning} |" in documented
    raised = {
        cls.exit_code for cls in vars(errors).values() if isinstance(cls, type) and issubclass(cls, errors.EdgekitError)
    }
    assert raised <= set(EXIT_CODES) and {0, 2, 130} <= set(EXIT_CODES)


def test_profiles_list_and_show(cli):
    rows = one_json(cli("profiles", "--json").stdout)["profiles"]
    assert "raspberrypi5" in {r["name"] for r in rows}
    pi = one_json(cli("profiles", "show", "raspberrypi5", "--json").stdout)
    assert pi["cpu"]["arch"] == "aarch64" and "dotprod" in pi["cpu"]["isa"]
    listed = cli("profiles").stdout.splitlines()
    assert listed[0].split()[:2] == ["profile", "arch"] and any(line.startswith("raspberrypi5 ") for line in listed)
    text = cli("profiles", "show", "raspberrypi5").stdout
    assert text.startswith("raspberrypi5: Raspberry Pi 5")
    assert "{" not in text and "'" not in text  # text, not a Python dict
    assert any(line.split() == ["isa", "neon,", "fp16,", "dotprod"] for line in text.splitlines()), text


def test_unknown_profile_exit_code_and_message(tiny_model, tmp_path):
    p = run_cli("build", tiny_model, "--profile", "nokia3310", "-o", tmp_path / "o")
    assert p.returncode == 1 and p.stderr.startswith("error: unknown device profile 'nokia3310'")
    assert not (tmp_path / "o").exists()


def test_corrupt_model_exit_code_and_message(tmp_path):
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"\x08\x07garbage" * 50)
    p = run_cli("build", bad, "--profile", "host", "-o", tmp_path / "o")
    assert p.returncode == 1 and "error:" in p.stderr and "broken.onnx" in p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "o").exists()


def test_build_json_is_one_object_and_stdout_is_clean(tmp_path, textlines):
    p = run_cli(
        "build",
        PPOCR,
        "--profile",
        "raspberrypi5",
        "--precision",
        "int8",
        "--calib",
        textlines,
        "--input-shape",
        "x=1,3,48,192",
        "-o",
        tmp_path / "out",
        "--json",
        check=0,
    )
    r = json.loads(p.stdout)  # the whole stdout parses: nothing else printed there
    for key in ("backend", "precision", "profile", "files", "fidelity", "ops"):
        assert key in r
    assert r["precision"] == "int8" and r["format"] == "ort"
    assert {f["name"] for f in r["files"]} >= {"model.ort", "required_operators.config"}


def test_fidelity_failure_exit_code(tmp_path, tiny_model, tiny_calib):
    p = run_cli(
        "build",
        tiny_model,
        "--profile",
        "host",
        "--precision",
        "int8",
        "--calib",
        tiny_calib,
        "--min-cosine",
        "0.99999999",
        "-o",
        tmp_path / "o",
    )
    assert p.returncode == 3 and "fidelity check failed" in p.stderr
    assert not (tmp_path / "o").exists()


def test_deploy_local_json_and_table(agent_roots, tiny_bundle, tmp_path):
    root = agent_roots("dev")
    p = run_cli("deploy", tiny_bundle, "--local", "--device-root", root, "--runs", 10, "--warmup", 2, "--json", check=0)
    r = one_json(p.stdout)
    for key in (
        "backend",
        "precision",
        "accelerator",
        "threads",
        "runtime_version",
        "init_ms",
        "first_inference_ms",
        "latency_ms",
        "runs",
        "peak_rss_mb",
        "device",
        "profile",
    ):
        assert key in r, key
    assert set(r["latency_ms"]) >= {"p50", "p90", "p99", "mean", "min", "max", "stdev"}
    text = run_cli("bench", tiny_bundle, "--local", "--device-root", root, "--runs", 5, check=0).stdout
    assert "latency      p50" in text and "CPUExecutionProvider" in text
    status = one_json(run_cli("agent", "status", "--local", "--device-root", root, "--json", check=0).stdout)
    assert status["running"] and status["host"] == "127.0.0.1"
    text = run_cli("agent", "status", "--local", "--device-root", root, check=0).stdout
    assert text.startswith("agent ") and f"pid {status['pid']}" in text and "{" not in text  # not raw JSON
    p = run_cli("rollback", "tinny", "--local", "--device-root", root)
    assert p.returncode == 5 and "unknown model 'tinny'" in p.stderr and "did you mean 'tiny'?" in p.stderr


def test_bench_of_a_bundle_not_deployed(agent_roots, tiny_bundle, tmp_path):
    root = agent_roots("empty-dev")
    p = run_cli("bench", tiny_bundle, "--local", "--device-root", root)
    assert p.returncode == 5 and "run `edgekit deploy" in p.stderr


def test_doctor():
    d = one_json(run_cli("doctor", "--json", check=0).stdout)
    assert d["backends"]["ort"]["ok"] and d["transports"]["ssh"]["ok"]


def test_python_m_edgekit_version():
    assert run_cli("--version", check=0).stdout.startswith("edgekit ")


def test_reports_match_the_published_schema(agent_roots, tiny_bundle, tmp_path):
    import jsonschema

    from edgekit.report import schema

    s = schema()
    jsonschema.validate(json.loads((tiny_bundle / "report.json").read_text()), s)
    root = agent_roots("dev")
    r = one_json(run_cli("deploy", tiny_bundle, "--device-root", root, "--runs", 5, "--json", check=0).stdout)
    jsonschema.validate(r, s)


def test_output_that_is_a_file(tmp_path, tiny_model):
    f = tmp_path / "taken"
    f.write_text("x")
    p = run_cli("build", tiny_model, "--profile", "host", "-o", f)
    assert p.returncode == 1 and "is a file" in p.stderr and "Traceback" not in p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["taken"]


@pytest.mark.parametrize(
    "args,message",
    [
        (["--preprocess", "scale=1/0"], "bad --preprocess value"),
        (["--preprocess", "resize=0x0"], "bad --preprocess value"),
        (["--preprocess", "mean=0.1,0.2"], "mean has 2 values"),
    ],
)
def test_bad_preprocessing(tmp_path, tiny_model, args, message):
    from PIL import Image

    (tmp_path / "imgs").mkdir()
    Image.new("RGB", (16, 16)).save(tmp_path / "imgs" / "a.png")
    p = run_cli("build", tiny_model, "--profile", "host", "--calib", tmp_path / "imgs", *args, "-o", tmp_path / "o")
    assert p.returncode == 1 and message in p.stderr and "Traceback" not in p.stderr


def test_bad_data_values(tmp_path, tiny_model):
    import numpy as np

    x = np.ones((4, 3, 16, 16), np.float32)
    x[0, 0, 0, 0] = np.nan
    np.savez(tmp_path / "nan.npz", input=x)
    p = run_cli("build", tiny_model, "--profile", "host", "--calib", tmp_path / "nan.npz", "-o", tmp_path / "o")
    assert p.returncode == 1 and "NaN" in p.stderr
    np.savez(tmp_path / "lab.npz", input=np.ones((4, 3, 16, 16), np.float32), labels=np.array([0.5, 1, 2, 3]))
    p = run_cli("build", tiny_model, "--profile", "host", "--calib", tmp_path / "lab.npz", "-o", tmp_path / "o")
    assert p.returncode == 1 and "integer class indices" in p.stderr


def test_bad_ssh_target(cli, tiny_bundle):
    p = cli("deploy", tiny_bundle, "--ssh", "pi@host:abc")
    assert p.returncode == 4 and "bad SSH port" in p.stderr


def test_bundle_from_a_profile_file_deploys(agent_roots, tmp_path, tiny_model):
    from edgekit import profiles

    text = (profiles.resources.files("edgekit.device_profiles") / "raspberrypi5.toml").read_text()
    board = tmp_path / "myboard.toml"
    board.write_text(text.replace('name = "raspberrypi5"', 'name = "myboard"'))
    run_cli("build", tiny_model, "--profile", board, "--precision", "fp32", "-o", tmp_path / "b", "-q", check=0)
    root = agent_roots("dev")
    r = one_json(run_cli("deploy", tmp_path / "b", "--device-root", root, "--runs", 3, "--json", check=0).stdout)
    assert r["profile"] == "myboard" and any("built for myboard (aarch64)" in w for w in r["warnings"])


def test_build_only_profile_is_not_deployed(tmp_path, tiny_model):
    run_cli(
        "build", tiny_model, "--profile", "iphone-15-pro", "--precision", "fp32", "-o", tmp_path / "i", "-q", check=0
    )
    p = run_cli("deploy", tmp_path / "i", "--device-root", tmp_path / "dev")
    assert p.returncode == 4 and "build-only" in p.stderr and "--profile host" in p.stderr


@pytest.mark.parametrize(
    "args, says",
    [
        (["build", "M", "--target", "local://"], "--target works only with --auto"),
        (["build", "M", "--backends", "ort"], "--backends works only with --auto"),
        (["build", "M", "--prune-levels", "0,0.25"], "--prune-levels works only with --auto"),
        (["build", "M", "--auto-runs", "5"], "--auto-runs works only with --auto"),
        (["build", "M", "--auto-rounds", "2"], "--auto-rounds works only with --auto"),
        (["build", "M", "--device-python", "python3"], "--device-python works only with --auto"),
        (["build", "M", "--device-root", "/tmp/r"], "--device-root works only with --auto"),
        (["build", "M", "--auto", "--backend", "ort"], "use --backends B1,B2 instead of --backend"),
        (["build", "M", "--auto", "--prune-mode", "structured"], "drop --prune-mode"),
        (["build", "M", "--auto", "--allow-degraded"], "drop --allow-degraded"),
        (["build", "M", "--auto", "--prune", "0.3"], "use --prune-levels 0,0.25 instead of --prune"),
        (["build", "M", "--auto", "--prune-recipe", "r.toml"], "instead of --prune-recipe"),
        (["deploy", "B", "--tag", "lab"], "--tag picks devices of a --fleet inventory"),
        (
            ["deploy", "B", "--jobs", "2"],
            "--jobs applies to many devices at once: add --fleet INVENTORY.toml (or --adb all)",
        ),
        (["deploy", "B", "--device-timeout", "5"], "--device-timeout applies to many devices at once"),
        (["deploy", "B", "--adb", "all", "--tag", "lab"], "--tag picks devices of a --fleet inventory"),
        (["bench", "B", "--jobs", "2"], "--jobs applies to many devices at once: add --fleet INVENTORY.toml, or drop"),
        (["deploy", "B", "--baud", "9600"], "--baud sets the line speed of --serial PORT"),
        (["deploy", "B", "--ssh", "pi@h", "--baud", "9600"], "--baud sets the line speed of --serial PORT"),
        (["agent", "status", "--baud", "9600"], "--baud sets the line speed of --serial PORT"),
        (["deploy", "B", "--fleet", "F.toml", "--baud", "9600"], "--baud cannot be combined with --fleet"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_flags_that_do_nothing_here_are_refused(cli, tmp_path, args, says):
    """A flag the command would ignore is an error naming what it needs; nothing is built, read or contacted."""
    where = {"M": tmp_path / "model.onnx", "B": tmp_path / "bundle", "F.toml": tmp_path / "fleet.toml"}
    argv = [where.get(a, a) for a in args]
    if argv[0] == "build":
        argv += ["--profile", "host", "-o", tmp_path / "out"]
    p = cli(*argv)
    assert p.returncode == 1 and says in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "out").exists()


def test_many_device_flags_are_accepted_with_adb_all(cli, tmp_path):
    p = cli(
        "deploy",
        tmp_path / "bundle",
        "--adb",
        "all",
        "--jobs",
        2,
        "--device-timeout",
        5,
        env={"ADB_SERVER_SOCKET": "tcp:127.0.0.2:9"},
    )
    assert p.returncode == 4 and "no adb server answers at 127.0.0.2:9" in p.stderr, p.stderr


@pytest.mark.parametrize(
    "args, says",
    [
        (["biuld"], "invalid choice: 'biuld' (did you mean 'build'?)"),
        (["build", "M", "--profile", "host", "-o", "O", "--precison", "int8"], "did you mean '--precision'?"),
        (["build", "M", "--profile", "host", "-o", "O", "--precision", "int9"], "(did you mean 'int8'?)"),
        (["field", "reprot"], "did you mean 'report'?"),
        (["agent", "stauts"], "did you mean 'status'?"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_typos_are_usage_errors_that_suggest(cli, args, says):
    p = cli(*args)
    assert p.returncode == 2 and says in p.stderr and "usage: edgekit" in p.stderr, p.stderr


@pytest.mark.parametrize("args", [["build", "M", "--profile", "host", "-o", "O"], ["agent", "status"]])
def test_unknown_backend_suggests_the_close_one(cli, tmp_path, args):
    argv = [tmp_path / a if a in ("M", "O") else a for a in args]
    p = cli(*argv, "--backend", "openvin")
    assert p.returncode == 1 and "unknown backend 'openvin' (did you mean 'openvino'?)" in p.stderr, p.stderr
    assert not (tmp_path / "O").exists()


def test_unknown_profile_suggests_the_close_one(cli, tiny_model, tmp_path):
    p = cli("build", tiny_model, "--profile", "raspberypi5", "-o", tmp_path / "o")
    assert p.returncode == 1 and "unknown device profile 'raspberypi5' (did you mean 'raspberrypi5'?)" in p.stderr
    p = cli("build", tiny_model, "--profile", "raspberrypi", "-o", tmp_path / "o")
    assert "(did you mean 'raspberrypi4' or 'raspberrypi5'?)" in p.stderr
    assert not (tmp_path / "o").exists()


def test_bundle_paths_that_are_not_bundles(cli, tmp_path):
    """A missing path, a file and a directory that is not a bundle each get their own message; none suggests
    building into a directory that exists (build refuses that)."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("x")
    (tmp_path / "f.txt").write_text("x")
    p = cli("deploy", tmp_path / "nope", "--local")
    assert p.returncode == 1 and "no such directory" in p.stderr and "-o DIR" in p.stderr
    p = cli("deploy", tmp_path / "f.txt", "--local")
    assert p.returncode == 1 and "is a file, not a bundle directory" in p.stderr
    p = cli("deploy", tmp_path / "docs", "--local")
    assert p.returncode == 1 and "is a directory but not an edgekit bundle" in p.stderr
    assert f"-o {tmp_path / 'docs'}" not in p.stderr


def test_build_of_a_directory(cli, tmp_path, tiny_model):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "a.onnx").write_bytes(Path(tiny_model).read_bytes())
    p = cli("build", tmp_path / "models", "--profile", "host", "-o", tmp_path / "o")
    assert p.returncode == 1 and "is a directory, not a model file (it holds a.onnx)" in p.stderr, p.stderr
    assert "not found" not in p.stderr and not (tmp_path / "o").exists()


def test_build_of_a_dynamic_model_suggests_the_shape_of_the_data(cli, tmp_path):
    """The dynamic-dimension refusal of a backend that needs static shapes (Pixel 8: ONNX Runtime with NNAPI) reads
    --calib/--val: a concrete --input-shape, before any work. Where the backend runs dynamic shapes, the same
    command builds, with the dimensions kept dynamic (docs/SHAPES.md)."""
    import numpy as np
    from harness.models import dynamic_model

    m = dynamic_model(tmp_path / "m.onnx", {"x": ["N", 3, "h", "w"]})
    np.savez(tmp_path / "val.npz", x=np.zeros((4, 3, 20, 30), np.float32))
    p = cli("build", m, "--profile", "pixel-8", "-o", tmp_path / "o", "--val", tmp_path / "val.npz")
    assert p.returncode == 1 and "--input-shape x=1,3,20,30 (" in p.stderr, p.stderr
    assert not (tmp_path / "o").exists()
    p = cli("build", m, "--profile", "raspberrypi5", "-o", tmp_path / "o", "--val", tmp_path / "val.npz")
    assert p.returncode == 0, p.stderr
    (x,) = json.loads((tmp_path / "o" / "manifest.json").read_text())["inputs"]
    assert x["shape"] == [1, 3, "h", "w"] and x["allowed"] == [1, 3, None, None]


def test_field_report_without_data_and_a_store_that_does_not_exist(cli, tmp_path):
    new = tmp_path / "new.db"
    p = cli("field", "report", "--store", new)
    assert p.returncode == 1 and "no field store at" in p.stderr and "edgekit field pull" in p.stderr
    assert not new.exists()  # reading a mistyped path does not create a database
    from edgekit.field import FieldStore

    FieldStore(new).close()
    p = cli("field", "report", "--store", new)
    assert p.returncode == 0 and "no field records" in p.stdout and "edgekit field pull" in p.stdout
    assert one_json(cli("field", "report", "--store", new, "--json").stdout)["records"] == 0


def test_colour_only_on_a_terminal_and_never_with_no_color(monkeypatch):
    from edgekit.cli.output import paint, table

    class Tty:
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert paint("ok", "green", Tty()) == "\033[32mok\033[0m"
    assert paint("ok", "green", sys.stderr if not sys.stderr.isatty() else None) in ("ok", "\033[32mok\033[0m")
    monkeypatch.setenv("NO_COLOR", "1")
    assert paint("ok", "green", Tty()) == "ok"
    assert table(("a", "b"), [(1, None)]) == "a  b\n1  -\n"


def test_the_package_docstring_example_runs(tmp_path, monkeypatch):
    """The example in `edgekit`'s docstring, run as written from a directory laid out like the repository."""
    import edgekit

    code = edgekit.__doc__.split("::", 1)[1].split("\n\n``open_device", 1)[0]
    code = "\n".join(line[4:] for line in code.splitlines())
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / PPOCR.name).symlink_to(PPOCR)
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "device"
    monkeypatch.setenv("EDGEKIT_DEVICE_ROOT", str(root))
    try:
        scope = {}
        exec(compile(code, "edgekit docstring", "exec"), scope)
        assert scope["result"]["latency_ms"]["p50"] > 0 and scope["report"]["precision"] == "fp32"
    finally:
        stop_agent(sys.executable, root)


def test_a_transport_is_one_module_and_one_registry_row(cli, monkeypatch, tiny_bundle, tmp_path):
    """The 'Add a transport' recipe: a module with a TRANSPORT class and one row in MODULES give the kind its
    URL scheme, its CLI flag and options, a doctor line, and deploys through the deploy core."""
    import types

    from edgekit import transports
    from edgekit.transports import AddressError, Flag, LocalTransport

    seen = []

    class PipeTransport(LocalTransport):  # this machine, reached "through a pipe named NAME"
        name = "pipe"
        url_form = "pipe://NAME"
        selector = Flag("--pipe", "", "a device at the end of pipe NAME", metavar="NAME")
        flags = (Flag("--pipe-width", "width", "pipe width", type=int, alone="sets the width of --pipe NAME"),)
        is_host = False

        def __init__(self, target, width=1):
            self.description = f"pipe {target} ({width} wide)"
            seen.append((target, width))

        @classmethod
        def open(cls, target=None, **options):
            return cls(target, **options)

        @classmethod
        def parse_address(cls, address, query, url):
            if not address:
                raise AddressError(f"{url!r} names no pipe; use pipe://NAME")
            return address, {"width": int(query["width"])} if "width" in query else {}

        @classmethod
        def availability(cls):
            return {"ok": True, "detail": "pipes are always there"}

    module = types.ModuleType("edgekit.transports.pipe")
    module.TRANSPORT = PipeTransport
    monkeypatch.setitem(sys.modules, "edgekit.transports.pipe", module)
    monkeypatch.setitem(transports.MODULES, "pipe", "pipe")

    assert transports.parse_url("pipe://p1?width=3") == ("pipe", "p1", {"width": 3})
    assert "--pipe NAME" in cli("deploy", "--help").stdout
    assert cli("agent", "status", "--pipe-width", "2").stderr.endswith(
        "--pipe-width sets the width of --pipe NAME: add --pipe, or drop --pipe-width\n"
    )
    doctor = one_json(cli("doctor", "--json").stdout)
    assert doctor["transports"]["pipe"] == {"ok": True, "detail": "pipes are always there"}
    root = tmp_path / "dev"
    try:
        where = ["--pipe", "p1", "--pipe-width", "4", "--device-python", sys.executable, "--device-root", root]
        r = cli("deploy", tiny_bundle, *where, "--runs", 3, "--warmup", 1, "--json")
        assert r.returncode == 0, r.stderr
        assert one_json(r.stdout)["transport"] == "pipe p1 (4 wide)" and seen == [("p1", 4)]
    finally:
        stop_agent(sys.executable, root)


def test_fleet_commands_pass_their_progress(cli, monkeypatch, tmp_path):
    """`deploy --fleet` hands fleet.run_fleet the command's Progress (quiet with --json, verbose with -v)."""
    from edgekit import fleet
    from edgekit.progress import Progress

    seen = []

    def run_fleet(action, bundle, devices, log=None, **kwargs):
        seen.append((action, [d.name for d in devices], log))
        return [fleet._row(d, "ok", 0.0) for d in devices]

    monkeypatch.setattr(fleet, "run_fleet", run_fleet)
    inventory = tmp_path / "fleet.toml"
    inventory.write_text('[[device]]\nname = "a"\nurl = "local://"\n\n[[device]]\nname = "b"\nurl = "local://"\n')
    assert cli("deploy", tmp_path, "--fleet", inventory, "-v").returncode == 0
    assert cli("bench", tmp_path, "--fleet", inventory, "--json").returncode == 0
    (a1, names, log1), (a2, _, log2) = seen
    assert (a1, a2, names) == ("deploy", "bench", ["a", "b"])
    assert isinstance(log1, Progress) and log1.verbose and log1.mode != "quiet" and log2.mode == "quiet"


@pytest.mark.e2e  # the tool-environment backends' availability check starts their Python
def test_backends_lists_only_the_precisions_it_builds(cli):
    rows = {line.split()[1]: line for line in cli("backends").stdout.splitlines() if line[:3] in ("ok ", "NO ")}
    assert "fp32" in rows["paddlelite"] and "int8" not in rows["paddlelite"].split("paddlelite", 2)[1][:45]
    refused = one_json(cli("backends", "--json").stdout)
    paddle = next(b for b in refused["backends"] if b["name"] == "paddlelite")
    assert set(paddle["refused"]) == {"fp16", "int8"} and all(paddle["refused"].values())

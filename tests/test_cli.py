"""The `edgekit` command, run for real in subprocesses."""

import argparse
import json

import pytest
from harness import PPOCR, one_json, run_cli

from edgekit.cli import parser


def _commands(p, path=()):
    """(path, help line, subparser) of every command and subcommand, depth first."""
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            lines = {c.dest: c.help for c in action._choices_actions}
            for name, sp in action.choices.items():
                yield (*path, name), lines.get(name), sp
                yield from _commands(sp, (*path, name))


def test_every_command_has_help(capsys):
    commands = list(_commands(parser()))
    assert {c[0][0] for c in commands} >= {"build", "deploy", "bench", "agent", "profiles", "doctor"}
    for path, line, _ in commands:
        assert line and line != argparse.SUPPRESS and len(line.split()) >= 2, (
            f"`edgekit {' '.join(path)}` has no help line"
        )
        parent = " ".join(path[:-1])
        with pytest.raises(SystemExit) as e:
            parser().parse_args([*path[:-1], "--help"])
        assert e.value.code == 0
        listing = " ".join(capsys.readouterr().out.split())
        assert f"{path[-1]} {' '.join(line.split())}" in listing, f"`edgekit {parent} --help` does not show {path[-1]}"
        with pytest.raises(SystemExit) as e:
            parser().parse_args([*path, "--help"])
        assert e.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: edgekit {' '.join(path)}"), path


def test_profiles_list_and_show():
    rows = one_json(run_cli("profiles", "--json", check=0).stdout)["profiles"]
    assert "raspberrypi5" in {r["name"] for r in rows}
    pi = one_json(run_cli("profiles", "show", "raspberrypi5", "--json", check=0).stdout)
    assert pi["cpu"]["arch"] == "aarch64" and "dotprod" in pi["cpu"]["isa"]
    assert "Raspberry Pi 5" in run_cli("profiles", "show", "raspberrypi5", check=0).stdout


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


def test_bad_ssh_target(tiny_bundle):
    p = run_cli("deploy", tiny_bundle, "--ssh", "pi@host:abc")
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
def test_flags_that_do_nothing_here_are_refused(tmp_path, args, says):
    """A flag the command would ignore is an error naming what it needs; nothing is built, read or contacted."""
    where = {"M": tmp_path / "model.onnx", "B": tmp_path / "bundle", "F.toml": tmp_path / "fleet.toml"}
    argv = [where.get(a, a) for a in args]
    if argv[0] == "build":
        argv += ["--profile", "host", "-o", tmp_path / "out"]
    p = run_cli(*argv)
    assert p.returncode == 1 and says in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "out").exists()


def test_many_device_flags_are_accepted_with_adb_all(tmp_path):
    p = run_cli(
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

"""The user's configuration file and variables (edgekit.config): defaults, device names, paths, clear errors."""

import os
from pathlib import Path

import pytest

from edgekit.config import Config, ConfigError, config_path, load_config


def write(tmp_path, text):
    p = tmp_path / "edgekit" / "config.toml"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return {"XDG_CONFIG_HOME": str(tmp_path), "HOME": str(tmp_path / "home")}


GOOD = """
[defaults]
profile = "raspberrypi5"

[devices]
pi = "ssh://pi@raspberrypi.local"
phone = "adb://R58N12345"
board = "serial:///dev/ttyUSB0?baud=115200"
here = "local://"

[paths]
cache = "~/ek-cache"
toolenvs = "/data/toolenvs"
field_store = "field.db"
profiles = ["~/my-profiles", "/opt/profiles"]
"""


def test_where_the_file_is(tmp_path):
    assert config_path({"XDG_CONFIG_HOME": "/x"}) == Path("/x/edgekit/config.toml")
    assert config_path({"EDGEKIT_CONFIG": "/y/c.toml", "XDG_CONFIG_HOME": "/x"}) == Path("/y/c.toml")
    assert config_path({}) == Path(os.path.expanduser("~")) / ".config" / "edgekit" / "config.toml"


def test_no_file_means_builtin_defaults(tmp_path):
    cfg = load_config({"XDG_CONFIG_HOME": str(tmp_path)})
    assert cfg == Config()
    assert cfg.export({}) == {}


def test_a_full_file(tmp_path, monkeypatch):
    env = write(tmp_path, GOOD)
    monkeypatch.setenv("HOME", env["HOME"])
    cfg = load_config(env)
    assert cfg.path == tmp_path / "edgekit" / "config.toml"
    assert cfg.profile == "raspberrypi5"
    assert cfg.resolve_device("pi") == "ssh://pi@raspberrypi.local"
    assert cfg.resolve_device("board") == "serial:///dev/ttyUSB0?baud=115200"
    assert cfg.resolve_device("ssh://me@elsewhere") == "ssh://me@elsewhere"  # a URL stays a URL
    assert cfg.cache_dir == Path(env["HOME"]) / "ek-cache"
    assert cfg.toolenv_dir == Path("/data/toolenvs")
    assert cfg.field_store == tmp_path / "edgekit" / "field.db"  # relative to the file
    assert cfg.profile_path == (Path(env["HOME"]) / "my-profiles", Path("/opt/profiles"))
    assert cfg.sources["profile"] == str(cfg.path)
    environ = {"EDGEKIT_TOOLENV_DIR": "/mine"}
    done = cfg.export(environ)
    assert environ["EDGEKIT_TOOLENV_DIR"] == "/mine" and "EDGEKIT_TOOLENV_DIR" not in done  # a variable wins
    assert environ["EDGEKIT_CACHE_DIR"] == str(Path(env["HOME"]) / "ek-cache")
    assert environ["EDGEKIT_PROFILE_PATH"] == os.pathsep.join([env["HOME"] + "/my-profiles", "/opt/profiles"])


def test_variables_win_over_the_file(tmp_path):
    env = write(tmp_path, GOOD)
    env.update(EDGEKIT_PROFILE="host", EDGEKIT_CACHE_DIR="/c", EDGEKIT_FIELD_STORE="/f.db", EDGEKIT_PROFILE_PATH="/p")
    cfg = load_config(env)
    assert (cfg.profile, cfg.cache_dir, cfg.field_store, cfg.profile_path) == (
        "host",
        Path("/c"),
        Path("/f.db"),
        (Path("/p"),),
    )
    assert cfg.sources["profile"] == "EDGEKIT_PROFILE" and cfg.sources["cache_dir"] == "EDGEKIT_CACHE_DIR"
    assert cfg.toolenv_dir == Path("/data/toolenvs")  # not overridden: from the file


def test_edgekit_config_points_elsewhere(tmp_path):
    p = tmp_path / "other.toml"
    p.write_text('[defaults]\nprofile = "pixel-8"\n')
    assert load_config({"EDGEKIT_CONFIG": str(p)}).profile == "pixel-8"
    with pytest.raises(ConfigError, match="EDGEKIT_CONFIG names .*missing.toml, which does not exist"):
        load_config({"EDGEKIT_CONFIG": str(tmp_path / "missing.toml")})


@pytest.mark.parametrize(
    "text, message",
    [
        ("[defaults\nprofile = 1", r"config.toml: not valid TOML"),
        ("[device]\npi = 'ssh://pi@h'", r"top level: unknown key 'device' \(did you mean 'devices'\?\)"),
        (
            "[defaults]\nprofil = 'host'",
            r"\[defaults\]: unknown key 'profil' \(did you mean 'profile'\?\); known: profile",
        ),
        ("[defaults]\nprofile = 3", r"\[defaults\] profile: must be a profile name as a string, not 3"),
        ("defaults = 'host'", r"defaults: must be a table \(\[defaults\]\), not str"),
        ("[devices]\npi = 'pi@raspberrypi.local'", r"\[devices\] pi: 'pi@raspberrypi.local' is not a device URL"),
        ("[devices]\npi = 'scp://pi@h'", r"\[devices\] pi: unknown scheme 'scp'"),
        ("[devices]\npi = 22", r"\[devices\] pi: must be a device URL as a string"),
        ("[paths]\ncache = 1", r"\[paths\] cache: must be a path as a string, not 1"),
        ("[paths]\ncaches = '/x'", r"\[paths\]: unknown key 'caches' \(did you mean 'cache'\?\)"),
        ("[paths]\nprofiles = 5", r"\[paths\] profiles: must be a list of directories, not 5"),
    ],
)
def test_a_bad_file_names_the_key_and_the_fix(tmp_path, text, message):
    env = write(tmp_path, text)
    with pytest.raises(ConfigError, match=message) as e:
        load_config(env)
    assert str(tmp_path / "edgekit" / "config.toml") in str(e.value)
    assert e.value.exit_code == 1


def test_an_unknown_device_name(tmp_path):
    cfg = load_config(write(tmp_path, GOOD))
    with pytest.raises(ConfigError, match=r"no device named 'pie' in .*did you mean 'pi'\? Known devices: board, here"):
        cfg.resolve_device("pie")
    with pytest.raises(ConfigError, match=r"no configuration file at"):
        Config().resolve_device("pi")


def _cli(argv, monkeypatch, env):
    from edgekit.cli import main

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    for var in ("EDGEKIT_CONFIG", "EDGEKIT_PROFILE", "EDGEKIT_CACHE_DIR"):
        monkeypatch.delenv(var, raising=False)
    return main([str(a) for a in argv])


@pytest.mark.e2e  # a real build
def test_the_cli_takes_the_default_profile_and_paths_from_the_file(tmp_path, monkeypatch, capsys, tiny_model):
    env = write(tmp_path, f'[defaults]\nprofile = "host"\n\n[paths]\ncache = "{tmp_path / "ek-cache"}"\n')
    out = tmp_path / "out"
    assert _cli(["build", tiny_model, "--precision", "fp32", "-o", out, "--json"], monkeypatch, env) == 0
    assert '"profile": "host"' in capsys.readouterr().out
    assert os.environ["EDGEKIT_CACHE_DIR"] == str(tmp_path / "ek-cache") and (tmp_path / "ek-cache").is_dir()


def test_the_cli_without_a_profile_anywhere_says_how_to_set_one(tmp_path, monkeypatch, capsys, tiny_model):
    env = {"XDG_CONFIG_HOME": str(tmp_path / "none"), "HOME": str(tmp_path / "home")}
    assert _cli(["build", tiny_model, "-o", tmp_path / "out"], monkeypatch, env) == 1
    err = capsys.readouterr().err
    assert "no --profile given" in err and "[defaults]" in err and not (tmp_path / "out").exists()


def test_the_cli_reaches_a_device_by_its_configured_name(tmp_path, monkeypatch, capsys):
    from edgekit.cli import options, parser

    env = write(tmp_path, '[devices]\nlab-pi = "ssh://pi@raspberrypi.local:2222"\nhere = "local://"\n')
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    args = parser().parse_args(["models", "--device", "lab-pi"])
    kind, target, _ = options.device_target(args)
    assert (kind, target) == ("ssh", "pi@raspberrypi.local:2222")
    assert options.device_target(parser().parse_args(["models", "--device", "here"]))[0] == "local"
    assert _cli(["models", "--device", "lab-p"], monkeypatch, env) == 1
    assert "did you mean 'lab-pi'?" in capsys.readouterr().err

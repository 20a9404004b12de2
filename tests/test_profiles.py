import pytest

from edgekit import profiles
from edgekit.errors import ProfileError

REQUIRED = [
    "raspberrypi5",
    "raspberrypi4",
    "jetson-orin-nano",
    "pixel-8",
    "galaxy-s24",
    "iphone-15-pro",
    "rk3588",
    "intel-core-ultra",
    "host",
]


def test_required_profiles_exist_and_validate():
    names = profiles.names()
    for n in REQUIRED:
        assert n in names
        p = profiles.load(n)
        assert p.name == n
        assert p.data["cpu"]["cores"] >= 1
        assert p.data["runtimes"]["ranked"]


def test_builtin_profiles_cite_sources():
    for n in REQUIRED:
        if n != "host":
            assert profiles.load(n).data.get("sources"), f"{n} has no sources"


def test_host_is_detected():
    host = profiles.load("host")
    assert host.source == "detected"
    assert host.arch in ("x86_64", "aarch64", "armv7l")
    assert host.data["runtimes"]["ort"]["format"] == "onnx"
    assert "CPUExecutionProvider" in host.data["runtimes"]["ort"]["providers"]


def test_unknown_profile_names_the_known_ones():
    with pytest.raises(ProfileError) as e:
        profiles.load("raspberrypi9")
    assert "unknown device profile 'raspberrypi9'" in str(e.value)
    assert "raspberrypi5" in str(e.value)


def test_user_profile_dir(tmp_path, monkeypatch):
    text = (profiles.resources.files("edgekit.device_profiles") / "raspberrypi5.toml").read_text()
    (tmp_path / "mypi.toml").write_text(text.replace('name = "raspberrypi5"', 'name = "mypi"'))
    monkeypatch.setenv("EDGEKIT_PROFILE_PATH", str(tmp_path))
    assert "mypi" in profiles.names()
    assert profiles.load("mypi").arch == "aarch64"


def test_bad_profile_is_refused_with_field_and_reason(tmp_path, monkeypatch):
    text = (profiles.resources.files("edgekit.device_profiles") / "raspberrypi5.toml").read_text()
    bad = text.replace('name = "raspberrypi5"', 'name = "badpi"').replace("cores = 4", 'cores = "four"')
    (tmp_path / "badpi.toml").write_text(bad)
    monkeypatch.setenv("EDGEKIT_PROFILE_PATH", str(tmp_path))
    with pytest.raises(ProfileError) as e:
        profiles.load("badpi")
    assert "cpu.cores" in str(e.value) and "'four' is not of type 'integer'" in str(e.value)


def test_profile_that_is_not_toml(tmp_path):
    p = tmp_path / "broken.toml"
    p.write_text("name = [unclosed")
    with pytest.raises(ProfileError, match="not valid TOML"):
        profiles.load(str(p))


def test_schema_backends_are_the_backend_table():
    from edgekit_agent.runners.table import TABLE

    schema = profiles.schema()["properties"]["runtimes"]["properties"]
    assert sorted(schema["ranked"]["items"]["enum"]) == sorted(TABLE.builtin_names())
    assert set(TABLE.builtin_names()) <= set(schema)  # each backend's settings are described
    assert profiles.load("host").data["runtimes"]["ranked"][0] == "ort"

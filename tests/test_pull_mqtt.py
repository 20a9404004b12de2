"""Pull delivery end to end: `edgekit publish` to a store nginx serves, `edgekit fleet desire` on a real Mosquitto,
a real agent (started with --pull) fetching, installing and reporting its state and install results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness.pullbundles import variant
from harness.servers import Mosquitto, Nginx

from edgekit import agent_package
from edgekit.cli import main as edgekit_main
from edgekit.fleet_pull import publish
from edgekit.fleet_pull.broker import Broker

pytestmark = pytest.mark.skipif(
    not (os.path.exists("/usr/sbin/nginx") and os.path.exists("/usr/sbin/mosquitto")),
    reason="scripts/bootstrap.sh --test installs nginx-light and mosquitto",
)


def start_agent(root: Path, broker: str | None, *extra: str) -> dict:
    pyz, _ = agent_package.build(Path(os.environ["EDGEKIT_CACHE_DIR"]) / "agent")
    pull = ["--pull", broker] if broker else []
    argv = [sys.executable, str(pyz), "start", "--root", str(root), *pull, *extra]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def stop_agent(root: Path) -> None:
    pyz, _ = agent_package.build(Path(os.environ["EDGEKIT_CACHE_DIR"]) / "agent")
    subprocess.run([sys.executable, str(pyz), "stop", "--root", str(root)], capture_output=True, timeout=60)


def wait_state(broker: Broker, device: str, check, timeout: float = 90.0) -> dict:
    deadline = time.monotonic() + timeout
    state: dict = {}
    while time.monotonic() < deadline:
        state = broker.states().get(device, {})
        if check(state):
            return state
        time.sleep(0.3)
    raise AssertionError(f"{device} never reached the state asked for; last: {state}")


def version_of(bundle: Path) -> str:
    return json.loads((bundle / "manifest.json").read_text())["id"]


def runs(version: str):
    return lambda st: (st.get("models") or {}).get("tiny", {}).get("version") == version


def next_event(broker: Broker, model: str = "tiny", timeout: float = 90.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        event = broker.next_event(timeout=1.0)
        if event and event.get("model") == model:
            return event
    raise AssertionError("no install event arrived")


def test_publish_desire_agent_installs_reports_and_catches_up(tiny_bundle, tmp_path, agent_roots, capsys):
    v1, v2, v3 = (variant(tiny_bundle, tmp_path / f"v{i}", pad_bytes=50_000, seed=i) for i in (1, 2, 3))
    store = tmp_path / "store"
    assert edgekit_main(["publish", str(v1), "--store", str(store), "--json"]) == 0
    d1 = json.loads(capsys.readouterr().out)["digest"]
    d2, d3 = publish(v2, store)["digest"], publish(v3, store)["digest"]
    root = agent_roots("device")
    with Nginx(store) as nginx, Mosquitto() as mq:
        # desired before the device exists: the group's retained state is there when it connects
        base = ["fleet", "desire", "--broker", mq.url, "--fleet", "lab", "--store-url", nginx.url, "--json"]
        assert edgekit_main([*base, "--group", "cams", "tiny", d1]) == 0
        assert json.loads(capsys.readouterr().out)["topic"] == "edgekit/lab/groups/cams/desired"
        with Broker(mq.url, fleet="lab") as broker:
            broker.watch_events("dev1")
            start_agent(root, mq.url, "--device-id", "dev1", "--group", "cams", "--fleet", "lab")
            state = wait_state(broker, "dev1", runs(version_of(v1)))
            assert state["models"]["tiny"]["digest"] == d1 and state["groups"] == ["cams"]
            ok = next_event(broker)
            assert ok["ok"] and ok["version"] == version_of(v1) and ok["transfer"]["files_fetched"] >= 1

            # the device's own entry overrides its group's
            assert edgekit_main([*base, "--device", "dev1", "tiny", d2]) == 0
            wait_state(broker, "dev1", runs(version_of(v2)))
            assert next_event(broker)["ok"]
            assert os.readlink(root / "models/tiny/current") == f"versions/{version_of(v2)}"

            # a digest no store holds: an install-failure event, the old version keeps serving
            broker.desire("tiny", "sha256:" + "0" * 64, nginx.url, device="dev1")
            bad = next_event(broker)
            assert not bad["ok"] and bad["permanent"] and "has no bundle with digest" in bad["error"]
            state = wait_state(broker, "dev1", lambda st: "tiny" in (st.get("failed") or {}))
            assert state["models"]["tiny"]["version"] == version_of(v2)

            # a blob missing from the store: the same, nothing half-installed replaces what serves
            pad = json.loads((v3 / "manifest.json").read_text())["files"][-1]["sha256"]
            (store / "blobs/sha256" / pad).rename(tmp_path / "pad-aside")
            broker.desire("tiny", d3, nginx.url, device="dev1")
            missing = next_event(broker)
            assert not missing["ok"] and "lacks blobs/sha256/" in missing["error"]
            assert os.readlink(root / "models/tiny/current") == f"versions/{version_of(v2)}"

            # offline while the desired state changes: it catches up when it connects again
            stop_agent(root)
            (tmp_path / "pad-aside").rename(store / "blobs/sha256" / pad)
            broker.desire("tiny", d3, nginx.url, device="dev1")
            start_agent(root, mq.url, "--device-id", "dev1", "--group", "cams", "--fleet", "lab")
            wait_state(broker, "dev1", runs(version_of(v3)))

            assert edgekit_main(["fleet", "state", "--broker", mq.url, "--fleet", "lab"]) == 0
            out = capsys.readouterr().out
            assert "dev1" in out and version_of(v3) in out and d3 in out

            # a removal desired for this device overrides its group's entry: it stops serving and deletes the model
            remove = ["fleet", "undesire", "tiny", "--remove", "--device", "dev1", "--broker", mq.url, "--fleet", "lab"]
            assert edgekit_main(remove) == 0
            assert capsys.readouterr().out.strip() == "edgekit/lab/devices/dev1/desired: tiny removed"
            gone = next_event(broker)
            while not gone.get("remove"):  # the install when it came back, before it
                gone = next_event(broker)
            assert gone["ok"]
            state = wait_state(broker, "dev1", lambda st: "tiny" not in (st.get("models") or {}))
            assert state["desired"] == {"tiny": {"remove": True}} and not (root / "models/tiny").exists()


def test_broker_credentials_and_bad_input(tmp_path, agent_roots):
    with Mosquitto(users={"dev1": "s3cret", "ops": "0ps"}) as mq:
        from edgekit.errors import EdgekitError, TransportError

        with pytest.raises(TransportError, match="refused the connection"):
            Broker(mq.url, username="ops", password="wrong")
        with Broker(mq.url, username="ops", password="0ps") as broker:
            with pytest.raises(EdgekitError, match="exactly one target"):
                broker.desire("tiny", "sha256:" + "1" * 64, "http://x", group="g", device="d")
            with pytest.raises(EdgekitError, match="invalid bundle digest"):
                broker.desire("tiny", "sha256:xyz", "http://x", group="g")
            with pytest.raises(EdgekitError, match="invalid group"):
                broker.desire("tiny", "sha256:" + "1" * 64, "http://x", group="a/#")
            broker.desire("tiny", "1" * 64, "http://store.example", group="g")
            assert broker.desired(group="g") == {
                "tiny": {"digest": "sha256:" + "1" * 64, "store": "http://store.example"}
            }
            broker.watch_events("dev1")
            root = agent_roots("device")
            pw = tmp_path / "pw"
            pw.write_text("s3cret\n")
            plain = start_agent(root, None)  # an agent running without --pull is started again with it
            creds = ["--device-id", "dev1", "--pull-username", "dev1", "--pull-password-file", str(pw)]
            pulling = start_agent(root, mq.url, *creds)
            assert pulling["started"] and pulling["pid"] != plain["pid"] and "--pull" in pulling["pull"]
            state = wait_state(broker, "dev1", lambda st: "models" in st)
            assert state["models"] == {} and state["desired"] == {}
            again = start_agent(root, None)  # started again without it (a push deploy does): it keeps pulling
            assert not again["started"] and again["pid"] == pulling["pid"]
    bad = subprocess.run(
        [sys.executable, "-m", "edgekit_agent", "serve", "--root", str(tmp_path / "r"), "--pull", "mqtt://x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "--pull needs --device-id" in bad.stderr


def test_tls_broker_and_https_store_with_a_device_password(tiny_bundle, tmp_path, agent_roots):
    from harness.servers import make_tls

    from edgekit.errors import TransportError

    tls = make_tls(tmp_path / "tls")
    v1 = variant(tiny_bundle, tmp_path / "v1", pad_bytes=10_000, seed=1)
    store = tmp_path / "store"
    digest = publish(v1, store)["digest"]
    with Nginx(store, tls=tls) as nginx, Mosquitto(users={"dev1": "pw1", "ops": "pw2"}, tls=tls) as mq:
        assert mq.url.startswith("mqtts://") and nginx.url.startswith("https://")
        with pytest.raises(TransportError, match="failed the TLS check"):  # its certificate: not trusted without the CA
            Broker(mq.url, username="ops", password="pw2", timeout=5)
        with Broker(mq.url, username="ops", password="pw2", ca=str(tls["ca"])) as broker:
            broker.desire("tiny", digest, nginx.url, device="dev1")
            pw = tmp_path / "pw"
            pw.write_text("pw1")
            root = agent_roots("device")
            creds = ["--pull-username", "dev1", "--pull-password-file", str(pw), "--pull-ca", str(tls["ca"])]
            start_agent(root, mq.url, "--device-id", "dev1", *creds)
            state = wait_state(broker, "dev1", runs(version_of(v1)))
            assert state["models"]["tiny"]["digest"] == digest


@pytest.mark.slow
def test_device_setup_pull_lets_an_empty_python_run_the_agent_in_pull_mode(tiny_bundle, tmp_path, agent_roots):
    """`device setup --pull` puts paho-mqtt (from the host's wheel cache) beside the runtime in the device's site; the
    agent in pull mode then runs on a Python that had neither."""
    from harness.pythons import find_python, missing

    base = find_python("3.12")
    if base is None:
        pytest.skip(missing("3.12"))
    subprocess.run([base, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=120)
    python = str(tmp_path / "venv" / "bin" / "python")
    root = agent_roots("bare", python=python)
    device = ["--local", "--device-python", python, "--device-root", str(root)]
    assert edgekit_main(["device", "setup", "--backend", "ort", "--pull", *device, "--json"]) == 0
    record = json.loads((root / "site" / "edgekit-setup.json").read_text())
    assert "paho-mqtt" in {p["name"] for p in record["packages"]}
    v1 = variant(tiny_bundle, tmp_path / "v1", pad_bytes=1000, seed=1)
    store = tmp_path / "store"
    digest = publish(v1, store)["digest"]
    with Nginx(store) as nginx, Mosquitto() as mq, Broker(mq.url) as broker:
        broker.desire("tiny", digest, nginx.url, device="bare1")
        pyz, _ = agent_package.build(Path(os.environ["EDGEKIT_CACHE_DIR"]) / "agent")
        argv = [python, str(pyz), "start", "--root", str(root), "--pull", mq.url, "--device-id", "bare1"]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        wait_state(broker, "bare1", runs(version_of(v1)))


def test_edgekit_agent_start_pull_starts_the_device_agent_pulling(agent_roots, capsys):
    root = agent_roots("device")
    with Mosquitto() as mq, Broker(mq.url, fleet="lab") as broker:
        device = ["--local", "--device-root", str(root)]
        pull = ["--pull", mq.url, "--device-id", "dev9", "--group", "g1", "--fleet", "lab"]
        assert edgekit_main(["agent", "start", *device, *pull, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["pull"] == [*pull[:4], "--fleet", "lab", "--group", "g1"]
        state = wait_state(broker, "dev9", lambda st: "models" in st)
        assert state["groups"] == ["g1"] and state["fleet"] == "lab"
        assert edgekit_main(["agent", "status", *device, "--pull", mq.url]) == 1
        assert "given to `edgekit agent start`, not to status" in capsys.readouterr().err
        assert edgekit_main(["agent", "start", *device, "--pull", mq.url]) == 1
        assert "--pull needs --device-id" in capsys.readouterr().err


def test_a_rollout_rollback_removes_a_model_the_device_served_no_version_of(tiny_bundle, tmp_path, agent_roots):
    from edgekit.rollout import MqttDelivery

    store, root = tmp_path / "store", agent_roots("fresh")
    with Nginx(store) as nginx, Mosquitto() as mq, Broker(mq.url, fleet="lab") as broker:
        start_agent(root, mq.url, "--device-id", "new1", "--fleet", "lab")
        wait_state(broker, "new1", lambda st: st.get("models") == {})
        delivery = MqttDelivery(mq.url, str(store), nginx.url, fleet="lab", install_wait_s=60)
        try:
            device = delivery.devices(["new1"])["new1"]
            delivery.install(device, tiny_bundle)  # the model's first version on this device
            assert delivery.current(device, "tiny") == version_of(tiny_bundle)
            delivery.rollback(device, "tiny", None)  # nothing to go back to: the model goes
            assert delivery.current(device, "tiny") is None and not (root / "models/tiny").exists()
            assert broker.desired(device="new1") == {"tiny": {"remove": True}}
            assert broker.state("new1")["models"] == {} and broker.state("nobody") is None  # one device's topic
        finally:
            delivery.close()

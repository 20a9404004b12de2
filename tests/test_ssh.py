"""deploy --ssh end to end against a real OpenSSH server started by the test suite on loopback."""

import sys

import numpy as np
import pytest
from harness import one_json, run_cli

import edgekit
from edgekit.deployer import deploy, open_device
from edgekit.errors import TransportError

pytestmark = pytest.mark.e2e


@pytest.fixture
def device_root(agent_roots):
    return agent_roots("remote-device")


def ssh_device(sshd, root):
    return open_device(
        "ssh",
        f"{sshd.user}@{sshd.host}:{sshd.port}",
        device_python=sys.executable,
        device_root=str(root),
        key_file=sshd.client_key,
        known_hosts=sshd.known_hosts,
    )


def test_cli_deploy_over_ssh_with_ssh_config(sshd, tiny_bundle, device_root):
    from harness.sshd import SSH_CONFIG_HOST

    p = run_cli(
        "deploy",
        tiny_bundle,
        "--ssh",
        SSH_CONFIG_HOST,
        "--ssh-config",
        sshd.ssh_config,
        "--device-python",
        sys.executable,
        "--device-root",
        device_root,
        "--runs",
        20,
        "--warmup",
        2,
        "--json",
        check=0,
    )
    r = one_json(p.stdout)
    assert r["transport"] == f"ssh root@127.0.0.1:{sshd.port}"
    assert r["accelerator"] == "CPUExecutionProvider" and r["runs"] == 20
    assert r["latency_ms"]["p50"] > 0 and r["peak_rss_mb"] > 0
    assert (device_root / "models" / "tiny" / "current").is_symlink()
    # bench of the already deployed bundle, no upload
    p = run_cli(
        "bench",
        tiny_bundle,
        "--ssh",
        SSH_CONFIG_HOST,
        "--ssh-config",
        sshd.ssh_config,
        "--device-python",
        sys.executable,
        "--device-root",
        device_root,
        "--runs",
        5,
        "--json",
        check=0,
    )
    assert one_json(p.stdout)["bundle_id"] == r["bundle_id"]


def test_unknown_host_key_is_refused(sshd, tmp_path, tiny_bundle):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    p = run_cli(
        "deploy",
        tiny_bundle,
        "--ssh",
        f"root@127.0.0.1:{sshd.port}",
        "--ssh-key",
        sshd.client_key,
        "--ssh-config",
        "/dev/null",
        "--known-hosts",
        empty,
        "--device-python",
        sys.executable,
        "--device-root",
        tmp_path / "r",
        env={"HOME": str(tmp_path)},
    )
    assert p.returncode == 4
    assert "not in known_hosts" in p.stderr and "ssh-keyscan" in p.stderr
    assert not (tmp_path / "r").exists()


def test_dropped_connection_mid_upload_keeps_the_previous_version(
    sshd, tiny_bundle, tiny_model, tiny_calib, tmp_path, device_root
):
    with ssh_device(sshd, device_root) as dev:
        v1 = deploy(tiny_bundle, dev, bench=False)["installed"]["version"]

    # A second version, bigger than one upload chunk so the drop happens mid-file.
    big = tmp_path / "big.npz"
    x = np.load(tiny_calib)["input"]
    np.savez(big, input=np.concatenate([x] * 8))
    v2_dir = tmp_path / "v2"
    edgekit.build(tiny_model, "host", v2_dir, precision="fp16", val=big, name="tiny")

    calls = []

    def drop_on_first_chunk(name, done, total):
        calls.append((name, done, total))
        if len(calls) == 1:
            sshd.kill_sessions()

    with ssh_device(sshd, device_root) as dev:
        with pytest.raises(TransportError) as e:
            deploy(v2_dir, dev, bench=False, progress=drop_on_first_chunk)
    assert "keeps serving what it served before" in str(e.value)
    assert calls and calls[0][1] < calls[0][2] or len(calls) == 1

    with ssh_device(sshd, device_root) as dev:
        dev.ensure_agent()
        models = dev.client.models()
        assert models[0]["version"] == v1
        out = dev.client.infer("tiny", {"input": x[:1]})
        assert out["probs"].shape == (1, 10)
        # the same deploy again completes, resuming the staged upload
        v2 = deploy(v2_dir, dev, bench=False)["installed"]
        assert v2["previous"] == v1 and dev.client.models()[0]["version"] == v2["version"]


def test_forward_stops_listening_on_close(sshd):
    """A forwarded port carries bytes to the device's port; closing the transport refuses it and ends its thread."""
    import socket
    import threading

    from edgekit.transports import connect

    server = socket.create_server(("127.0.0.1", 0))
    try:
        t = connect(
            "ssh", f"{sshd.user}@{sshd.host}:{sshd.port}", key_file=sshd.client_key, known_hosts=sshd.known_hosts
        )
        with t:
            host_port = t.forward(server.getsockname()[1])
            assert t.forward(server.getsockname()[1]) == host_port  # one listener per device port
            with socket.create_connection(("127.0.0.1", host_port), timeout=30) as c:
                peer, _ = server.accept()
                with peer:
                    c.sendall(b"ping")
                    assert peer.recv(4) == b"ping"
                    peer.sendall(b"pong")
                    assert c.recv(4) == b"pong"
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", host_port), timeout=5)
        assert not [th.name for th in threading.enumerate() if th.name == f"ssh-forward-{host_port}"]
    finally:
        server.close()


def test_a_command_past_its_timeout_says_so(sshd):
    """paramiko raises a channel timeout without a message: the error still says what happened."""
    from edgekit.transports import connect

    t = connect("ssh", f"{sshd.user}@{sshd.host}:{sshd.port}", key_file=sshd.client_key, known_hosts=sshd.known_hosts)
    with t:
        with pytest.raises(TransportError) as e:
            t.run(["sleep", "30"], timeout=1)
    assert str(e.value).endswith(": sleep timed out: no answer within 1 s"), str(e.value)


def test_timeout_reasons_are_never_empty():
    import socket

    from edgekit.transports.ssh import reason

    assert reason(socket.timeout(), 15) == "timed out: no answer within 15 s"
    assert reason(TimeoutError("timed out")) == "timed out: no answer"
    assert reason(EOFError()) == "the connection was closed by the device"
    assert reason(OSError()) == "OSError"

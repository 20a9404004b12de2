"""Connections cut at random points of a deploy: the device serves the old or the new version,
whole, and the next attempt sends only what is still missing.

The cut is real: a TCP relay between the host and the agent's port drops both sides after a
random number of bytes from the host (anywhere in the manifest, the uploads or the commit).
"""

import json
import random
import socket
import sys
import threading

import numpy as np
import pytest

pytestmark = pytest.mark.e2e

CUTS = 24


class CuttingRelay:
    """127.0.0.1:port -> the agent; after ``budget`` bytes from the host, both sides are closed."""

    def __init__(self, upstream_port):
        self.upstream_port = upstream_port
        self.budget = None
        self.sent = 0
        self.cut = False
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, budget):
        with self.lock:
            self.budget, self.sent, self.cut = budget, 0, False

    def _accept(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            up = socket.create_connection(("127.0.0.1", self.upstream_port))
            self.conns += [client, up]
            threading.Thread(target=self._pump, args=(client, up, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, client, False), daemon=True).start()

    def _pump(self, src, dst, counted):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if counted:
                    with self.lock:
                        if self.budget is not None and self.sent + len(data) >= self.budget:
                            dst.sendall(data[: max(0, self.budget - self.sent)])
                            self.sent, self.cut = self.budget, True
                            raise OSError("cut")
                        self.sent += len(data)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self):
        self.sock.close()
        for s in self.conns:
            try:
                s.close()
            except OSError:
                pass


@pytest.fixture
def cut_device(agent_roots):
    from edgekit.deployer import Device
    from edgekit.transports.local import LocalTransport

    relays = []

    class CuttingTransport(LocalTransport):
        description = "local through a relay that cuts the connection"

        def forward(self, remote_port):
            if not relays or relays[0].upstream_port != remote_port:
                relays.insert(0, CuttingRelay(remote_port))
            return relays[0].port

    root = agent_roots("device")
    dev = Device(CuttingTransport(), python=sys.executable, root=str(root))
    yield dev, relays
    dev.close()
    for r in relays:
        r.close()


def test_random_cuts_never_leave_half_a_version(cut_device, tmp_path, textlines):
    from harness import PPOCR

    import edgekit
    from edgekit.deployer import deploy
    from edgekit.errors import TransportError
    from edgekit_sdk import AgentClient

    dev, relays = cut_device
    old, new = tmp_path / "cls-fp32", tmp_path / "cls-int8"
    edgekit.build(PPOCR, "host", old, precision="fp32", val=textlines, input_shapes=["x=1,3,48,192"], name="cls")
    edgekit.build(PPOCR, "host", new, precision="int8", calib=textlines, input_shapes=["x=1,3,48,192"], name="cls")
    v_old, v_new = (json.loads((b / "manifest.json").read_text())["id"] for b in (old, new))
    expected = {v_old: dict(np.load(old / "expected_outputs.npz")), v_new: dict(np.load(new / "expected_outputs.npz"))}
    sample = dict(np.load(old / "sample_inputs.npz"))
    size = sum(f["size"] for f in json.loads((new / "manifest.json").read_text())["files"])

    rng = random.Random(7)
    cuts = cycles = resumed = 0
    while cuts < CUTS:
        # Each cycle starts from a device that serves the old version and holds nothing of the new one.
        cycles += 1
        if relays:
            relays[0].arm(None)
        dev.ensure_agent()
        if "cls" in {m["name"] for m in dev.models()}:
            dev.remove("cls")
        deploy(old, dev, bench=False)
        relay = relays[0]
        while True:
            relay.arm(rng.randint(1, size + 3000))
            try:
                result = deploy(new, dev, bench=False)["installed"]
            except TransportError as e:
                assert "run the command again to resume" in str(e) or "connection" in str(e), e
                cuts += 1
                result = None
            with AgentClient("127.0.0.1", dev.state["port"]) as c:  # straight to the agent, not through the relay
                now = {m["name"]: m["version"] for m in c.models()}["cls"]
                assert now in (v_old, v_new)
                out = c.infer("cls", sample)
            for name, ref in expected[now].items():  # whole: it computes exactly that version's outputs
                np.testing.assert_allclose(out[name], ref, rtol=1e-4, atol=1e-5)
            if result is not None:
                resumed += result["transfer"]["resumed_bytes"]
                assert result["transfer"]["payload_bytes"] + result["transfer"]["resumed_bytes"] <= size
                assert now == v_new
                break
            if now == v_new:
                break  # cut after the commit reached the agent: installed all the same
    print(f"{cuts} cuts in {cycles} cycles; {resumed} bytes resumed instead of sent again")
    assert cuts >= CUTS and cycles >= 2
    assert resumed > 0  # cut uploads were resumed at the byte they stopped, not sent again

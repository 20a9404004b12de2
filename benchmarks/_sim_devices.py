"""Simulated pull-mode devices for benchmarks/fleet_sim.py (not a benchmark itself).

One process runs many devices on one event loop: each device is a real MQTT session (paho-mqtt, its own client
id ``edgekit-FLEET-ID``) that subscribes at QoS 1 to its device and group desired topics, as the agent's pull mode
does, and publishes a retained state on connecting and an install event plus a new state after each fetch. The
sockets are serviced with paho's ``loop_read``/``loop_write``/``loop_misc`` over one ``selectors`` loop instead of a
thread per client. Fetches are the agent fetcher's requests (GET the manifest, check its sha256 against the desired
digest, GET every blob, check its sha256) from a few threads. No model runs: the devices infer nothing.

The parent drives the phases over a pipe: ``("connect",)``, ``("fanout", marker)``, ``("fetch", store, digest,
threads)``, ``("stop",)``; each phase answers one report when every device of the process has finished it.
"""

from __future__ import annotations

import hashlib
import json
import queue
import selectors
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import paho.mqtt.client as mqtt

from edgekit_agent.pull_layout import blob_path, digest_hex, join_url, manifest_path

INFLIGHT_CONNECTS = (
    100  # connections a process opens before waiting for CONNACKs: a device fleet does not dial in lockstep
)


class Device:
    def __init__(self, loop: DeviceLoop, fleet: str, device_id: str, group: str) -> None:
        self.loop, self.id = loop, device_id
        base = f"edgekit/{fleet}/devices/{device_id}"
        self.topics = [(f"{base}/desired", 1), (f"edgekit/{fleet}/groups/{group}/desired", 1)]
        self.group_topic = self.topics[1][0]
        self.state_topic, self.events_topic = f"{base}/state", f"{base}/events"
        self.fleet, self.group = fleet, group
        self.connected_at = self.ready_at = self.desire_at = 0.0
        self.client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=f"edgekit-{fleet}-{device_id}", protocol=mqtt.MQTTv311
        )
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = self._on_message
        self.client.on_socket_register_write = lambda c, u, s: loop.writers.add(self)
        self.client.on_socket_unregister_write = lambda c, u, s: loop.writers.discard(self)

    def state(self, models: dict[str, Any]) -> str:
        return json.dumps(
            {"device": self.id, "fleet": self.fleet, "groups": [self.group], "models": models, "failed": {}},
            sort_keys=True,
        )

    def _on_connect(self, client: mqtt.Client, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        self.connected_at = time.time()
        client.subscribe(self.topics)

    def _on_subscribe(self, client: mqtt.Client, userdata: Any, mid: int, rcs: Any, props: Any) -> None:
        self.ready_at = time.time()
        client.publish(self.state_topic, self.state({}), qos=1, retain=True)

    def _on_message(self, client: mqtt.Client, userdata: Any, message: Any) -> None:
        if message.topic == self.group_topic and self.loop.marker and self.loop.marker in message.payload:
            if not self.desire_at:
                self.desire_at = time.time()
                self.loop.desired += 1

    def installed(self, digest: str, seconds: float) -> None:
        event = {"device": self.id, "model": "sim", "digest": digest, "ok": True, "version": digest[7:19]}
        self.client.publish(self.events_topic, json.dumps(dict(event, seconds=seconds)), qos=1)
        models = {"sim": {"digest": digest, "version": event["version"]}}
        self.client.publish(self.state_topic, self.state(models), qos=1, retain=True)


def fetch(store: str, digest: str) -> int:
    """The fetcher's requests for one bundle: the manifest, checked against ``digest``, then each blob, checked
    against the manifest's sha256. Returns bytes read."""
    want = digest_hex(digest)
    with urllib.request.urlopen(join_url(store, manifest_path(want)), timeout=60) as r:
        body = r.read()
    if hashlib.sha256(body).hexdigest() != want:
        raise RuntimeError("manifest digest mismatch")
    total = len(body)
    for entry in json.loads(body)["files"]:
        h = hashlib.sha256()
        with urllib.request.urlopen(join_url(store, blob_path(entry["sha256"])), timeout=60) as r:
            while chunk := r.read(1 << 16):
                h.update(chunk)
                total += len(chunk)
        if h.hexdigest() != entry["sha256"]:
            raise RuntimeError(f"blob {entry['name']} digest mismatch")
    return total


class DeviceLoop:
    def __init__(self, conn: Any, host: str, port: int, fleet: str, group: str, ids: list[str]) -> None:
        self.conn, self.host, self.port = conn, host, port
        self.sel = selectors.DefaultSelector()
        self.sel.register(conn.fileno(), selectors.EVENT_READ, None)
        self.writers: set[Device] = set()
        self.devices = [Device(self, fleet, i, group) for i in ids]
        self.marker = b""
        self.desired = 0
        self.done: queue.Queue[tuple[Device, float, float, int]] = queue.Queue()
        self.fetched: list[tuple[float, float, int]] = []
        self.phase: tuple[Any, ...] = ()
        self.to_dial: list[Device] = []

    def _dial(self) -> None:
        inflight = sum(1 for d in self.devices if d.client.socket() is not None and not d.ready_at)
        while self.to_dial and inflight < INFLIGHT_CONNECTS:
            d = self.to_dial.pop()
            d.client.connect(self.host, self.port, keepalive=300)
            sock = d.client.socket()
            if sock is None:
                raise RuntimeError(f"device {d.id} has no socket after connecting")
            self.sel.register(sock, selectors.EVENT_READ, d)
            inflight += 1

    def _command(self, cmd: tuple[Any, ...]) -> None:
        self.phase, self.started = cmd, time.time()
        if cmd[0] == "connect":
            self.to_dial = list(reversed(self.devices))
        elif cmd[0] == "fanout":
            self.marker, self.desired = cmd[1].encode(), 0
        elif cmd[0] == "fetch":
            _, store, digest, threads = cmd
            pool = ThreadPoolExecutor(threads)
            for d in self.devices:
                pool.submit(self._fetch_one, d, store, digest)
            pool.shutdown(wait=False)

    def _fetch_one(self, d: Device, store: str, digest: str) -> None:
        a = time.time()
        try:
            n = fetch(store, digest)
        except Exception:  # counted as a failed fetch (-1 bytes) by the parent
            n = -1
        self.done.put((d, a, time.time(), n))

    def _report(self) -> dict[str, Any] | None:
        kind = self.phase[0]
        if kind == "connect":
            if self.to_dial or not all(d.ready_at for d in self.devices):
                return None
            return {"connected": [d.connected_at for d in self.devices], "ready": [d.ready_at for d in self.devices]}
        if kind == "fanout":
            return {"received": [d.desire_at for d in self.devices]} if self.desired == len(self.devices) else None
        if kind == "fetch":
            return {"fetches": self.fetched} if len(self.fetched) == len(self.devices) else None
        return None

    def run(self) -> None:
        last_misc = time.monotonic()
        while True:
            if self.to_dial:
                self._dial()
            for key, _ in self.sel.select(0.02):
                if key.data is None:
                    cmd = self.conn.recv()
                    if cmd[0] == "stop":
                        for d in self.devices:
                            d.client.disconnect()
                        self.conn.send({"stopped": len(self.devices)})
                        return
                    self._command(cmd)
                else:
                    key.data.client.loop_read(16)
            while not self.done.empty():
                d, a, b, n = self.done.get()
                self.fetched.append((a, b, n))
                d.installed(self.phase[2], b - a)
            for d in list(self.writers):
                d.client.loop_write()
            if time.monotonic() - last_misc > 5:
                last_misc = time.monotonic()
                for d in self.devices:
                    d.client.loop_misc()
            if self.phase:
                report = self._report()
                if report is not None:
                    self.conn.send(report)
                    self.phase = ()


def main(conn: Any, host: str, port: int, fleet: str, group: str, ids: list[str]) -> None:
    """A process's entry point: its devices, driven over ``conn`` until ``("stop",)``."""
    DeviceLoop(conn, host, port, fleet, group, ids).run()

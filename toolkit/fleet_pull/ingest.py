"""The host's side of field data over MQTT: write what pull-mode devices send into the field store.

    with Ingest("mqtt://broker:1883", store="postgresql://...", fleet="plant-a") as ingest:
        ingest.run(until=stop_event)       # or ingest.run(seconds=60)

Agents started with ``--pull`` publish their new field records to ``edgekit/FLEET/devices/ID/field`` (QoS 1, the
``GET /v1/telemetry`` batch shape, :mod:`edgekit_agent.pull_field`). The ingest subscribes with a persistent
session (a fixed client id, ``clean_session`` off): the broker keeps the batches published while it is down and
delivers them when it connects again. A batch is written (:meth:`FieldStore.store_batch`, idempotent on the
device's record ids) before the broker is acknowledged, in the thread that calls :meth:`Ingest.run`.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable

from edgekit_agent.pull_layout import PayloadError, check_segment, parse_topic

from ..errors import EdgekitError, TransportError
from ..field import open_store
from .broker import mqtt_client, release_sockets

BATCH_KEYS = ("store_id", "records", "events", "context")


def check_batch(batch: Any) -> str | None:
    """What is wrong with a field message (None: it can be stored)."""
    if not isinstance(batch, dict):
        return "not a JSON object"
    missing = [k for k in BATCH_KEYS if k not in batch]
    if missing:
        return "lacks " + ", ".join(missing)
    if not isinstance(batch["store_id"], str) or not all(isinstance(batch[k], list) for k in BATCH_KEYS[1:]):
        return "store_id must be a string and records, events, context lists"
    return None


class Ingest:
    """A persistent subscription to a fleet's field topics, writing each batch into a field store."""

    def __init__(
        self,
        url: str,
        store: str | None = None,
        fleet: str = "default",
        client_id: str | None = None,
        username: str | None = None,
        password: str | None = None,
        ca: str | None = None,
        timeout: float = 10.0,
        on_batch: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        try:
            self.fleet = check_segment("fleet", fleet)
            self.client_id = check_segment("client id", client_id or f"edgekit-ingest-{self.fleet}")
        except PayloadError as e:
            raise EdgekitError(str(e)) from None
        self.url, self.timeout, self.store_spec, self.on_batch = url, timeout, store, on_batch
        self.topic = f"edgekit/{self.fleet}/devices/+/field"
        self.stats = {"batches": 0, "added": 0, "rejected": 0}
        self._connected = threading.Event()
        self._refused: Any = None
        self._store: Any = None
        # a persistent session (clean_session off): the broker keeps what devices sent while the ingest was down
        self.client, self.host, self.port = mqtt_client(url, self.client_id, False, username, password, ca, timeout)
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message

    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, *properties: Any) -> None:
        if rc != 0:
            self._refused = rc
            return
        client.subscribe(self.topic, 1)  # again on every connection: the session keeps it, this is harmless
        self._connected.set()

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        parsed = parse_topic(message.topic)
        device = parsed[1] if parsed else None
        try:
            batch = json.loads(message.payload)
        except ValueError:
            batch = None
        problem = check_batch(batch)
        if problem is not None or device is None:
            self.stats["rejected"] += 1
            self._report({"device": device, "topic": message.topic, "error": problem or "not a device topic"})
            return
        added = self._store.store_batch(batch, device, "mqtt", None)  # an error here: not acknowledged, sent again
        self.stats["batches"] += 1
        self.stats["added"] += added
        self._report(
            {"device": device, "store_id": batch["store_id"], "records": len(batch["records"]), "added": added}
        )

    def _report(self, event: dict[str, Any]) -> None:
        if self.on_batch is not None:
            self.on_batch(event)

    def connect(self) -> None:
        """Connect and subscribe (the broker then sends what it kept for this client id)."""
        if self._store is None:
            self._store = open_store(self.store_spec)
        try:
            self.client.connect(self.host, self.port, keepalive=30)
        except OSError as e:
            raise TransportError(f"cannot reach the MQTT broker {self.url}: {e}") from None
        deadline = time.monotonic() + self.timeout
        while not self._connected.is_set() and self._refused is None and time.monotonic() < deadline:
            self.client.loop(0.2)
        if self._refused is not None:
            raise TransportError(
                f"the MQTT broker {self.url} refused the connection: {self._refused} (check the user and password)"
            )
        if not self._connected.is_set():
            raise TransportError(f"the MQTT broker {self.url} did not answer within {self.timeout:g}s")

    def run(self, seconds: float | None = None, until: threading.Event | None = None) -> dict[str, int]:
        """Write batches as they arrive, for ``seconds`` or until ``until`` is set (else until interrupted)."""
        if not self._connected.is_set():
            self.connect()
        end = None if seconds is None else time.monotonic() + seconds
        while not (until is not None and until.is_set()) and (end is None or time.monotonic() < end):
            rc = self.client.loop(0.5)
            if rc != 0:  # connection lost: paho reconnects; the session brings what was published meanwhile
                time.sleep(1.0)
                try:
                    self.client.reconnect()
                except OSError:
                    pass
        return dict(self.stats)

    def close(self) -> None:
        try:
            self.client.disconnect()
            self.client.loop(0.2)
        finally:
            release_sockets(self.client)
            if self._store is not None:
                self._store.close()
                self._store = None

    def __enter__(self) -> Ingest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

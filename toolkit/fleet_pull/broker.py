"""The host's side of pull delivery over MQTT: set what devices and groups run, read what they report.

    with Broker("mqtt://broker:1883", fleet="plant-a") as broker:
        broker.desire(group="cameras", model="det", digest="sha256:...", store="https://store/edgekit")
        broker.states()      # {device id: its retained state}; broker.state(ID): one device's

Desired state is retained on ``edgekit/FLEET/{devices/ID,groups/GROUP}/desired`` (topics and payloads:
:mod:`edgekit_agent.pull_layout`); a device that is offline now picks it up when it connects. Reads of retained
messages end at a barrier: after subscribing, the client publishes to a topic of its own and waits for it to come
back, which the broker delivers after the retained messages it queued for the subscription.
"""

from __future__ import annotations

import json
import queue
import ssl
import uuid
from typing import Any

from edgekit_agent.pull_config import parse_broker
from edgekit_agent.pull_layout import (
    PayloadError,
    check_segment,
    desired_payload,
    device_topic,
    group_topic,
    parse_desired,
    parse_topic,
)

from ..errors import EdgekitError, TransportError

PAHO_MISSING = "the MQTT commands need paho-mqtt: pip install 'edgekit[fleet]'"


def mqtt_client(
    url: str,
    client_id: str,
    clean_session: bool,
    username: str | None,
    password: str | None,
    ca: str | None,
    timeout: float,
) -> tuple[Any, str, int]:
    """A paho client (MQTT 3.1.1) for the broker ``url``, with its credentials and TLS set (the broker's certificate
    checked first, so a TLS problem is named): ``(client, host, port)``; not connected yet."""
    try:
        import paho.mqtt.client as mqtt
    except ImportError:
        raise EdgekitError(PAHO_MISSING) from None
    try:
        host, port, tls = parse_broker(url)
    except PayloadError as e:
        raise EdgekitError(str(e)) from None
    api = getattr(mqtt, "CallbackAPIVersion", None)
    kw: dict[str, Any] = {"client_id": client_id, "clean_session": clean_session, "protocol": mqtt.MQTTv311}
    client = mqtt.Client(api.VERSION2, **kw) if api is not None else mqtt.Client(**kw)  # else paho-mqtt 1.x
    if username:
        client.username_pw_set(username, password)
    if tls or ca:
        context = ssl.create_default_context(cafile=ca)
        _check_tls(host, port, context, url, timeout)
        client.tls_set_context(context)
    return client, host, port


def release_sockets(client: Any) -> None:
    """Close the wake-up socket pair paho opens for its network loop: paho closes it only in ``__del__``, so a
    closed client would otherwise leave two loopback sockets to the garbage collector."""
    reset = getattr(client, "_reset_sockets", None)
    if reset is not None:
        reset()


def _check_tls(host: str, port: int, context: ssl.SSLContext, url: str, timeout: float) -> None:
    """The broker's certificate, checked before the MQTT client connects (a refusal names its reason)."""
    import socket

    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            with context.wrap_socket(raw, server_hostname=host):
                pass
    except ssl.SSLError as e:
        raise TransportError(
            f"the MQTT broker {url} failed the TLS check ({e}): pass --ca with the CA that signed its certificate"
        ) from None
    except OSError as e:
        raise TransportError(f"cannot reach the MQTT broker {url}: {e}") from None


class Broker:
    """One connection to the fleet's MQTT broker (paho-mqtt, from ``edgekit[fleet]``)."""

    def __init__(
        self,
        url: str,
        fleet: str = "default",
        username: str | None = None,
        password: str | None = None,
        ca: str | None = None,
        timeout: float = 10.0,
    ) -> None:
        try:
            self.fleet = check_segment("fleet", fleet)
        except PayloadError as e:
            raise EdgekitError(str(e)) from None
        self.url, self.timeout = url, timeout
        self._inbox: queue.Queue[tuple[str, bytes, bool]] = queue.Queue()
        self._connected: queue.Queue[Any] = queue.Queue()
        client_id = f"edgekit-host-{uuid.uuid4().hex[:12]}"
        self.client, self.host, self.port = mqtt_client(url, client_id, True, username, password, ca, timeout)
        self.client.on_connect = lambda c, u, f, rc, *p: self._connected.put(rc)
        self._events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.client.on_message = self._on_message
        try:
            self.client.connect(self.host, self.port, keepalive=30)
        except OSError as e:
            raise TransportError(f"cannot reach the MQTT broker {url}: {e}") from None
        self.client.loop_start()
        try:
            rc = self._connected.get(timeout=timeout)
        except queue.Empty:
            self.close()
            raise TransportError(f"the MQTT broker {url} did not answer within {timeout:g}s") from None
        if rc != 0:
            self.close()
            raise TransportError(f"the MQTT broker {url} refused the connection: {rc} (check the user and password)")

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        parsed = parse_topic(message.topic)
        if parsed and parsed[2] == "events":
            try:
                self._events.put(dict(json.loads(message.payload), topic=message.topic))
            except (ValueError, TypeError):
                self._events.put({"topic": message.topic, "error": "unreadable event message"})
            return
        self._inbox.put((message.topic, message.payload, bool(message.retain)))

    def close(self) -> None:
        try:
            self.client.disconnect()
            self.client.loop_stop()
        finally:
            release_sockets(self.client)

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- topics -------------------------------------------------------------------
    def desired_topic(self, group: str | None = None, device: str | None = None) -> str:
        if (group is None) == (device is None):
            raise EdgekitError("name exactly one target: a group (--group G) or a device (--device ID)")
        try:
            return group_topic(self.fleet, group) if group else device_topic(self.fleet, str(device), "desired")
        except PayloadError as e:
            raise EdgekitError(str(e)) from None

    def retained(self, *topics: str) -> dict[str, bytes]:
        """The retained message of each topic (wildcards allowed) that has one: ``{topic: payload}``."""
        barrier = f"edgekit/{self.fleet}/_sync/{uuid.uuid4().hex}"
        self.client.subscribe([(t, 1) for t in (*topics, barrier)])
        self.client.publish(barrier, b"", qos=1)
        found: dict[str, bytes] = {}
        while True:
            try:
                topic, payload, retain = self._inbox.get(timeout=self.timeout)
            except queue.Empty:
                raise TransportError(
                    f"the MQTT broker {self.url} did not deliver within {self.timeout:g}s"
                    + (
                        f" (after {len(found)} retained messages: a broker that caps each client's queue drops the "
                        "rest, as Mosquitto's default max_queued_messages 1000 does on a fleet of more devices; "
                        "raise it, docs/SCALE.md)"
                        if len(found) >= 500
                        else ""
                    )
                ) from None
            if topic == barrier:
                break
            if retain and payload:
                found[topic] = payload
        self.client.unsubscribe([*topics, barrier])
        return found

    def _publish(self, topic: str, payload: bytes, retain: bool = True) -> None:
        info = self.client.publish(topic, payload, qos=1, retain=retain)
        info.wait_for_publish(self.timeout)
        if not info.is_published():
            raise TransportError(f"the MQTT broker {self.url} did not take the message for {topic}")

    # -- desired state -----------------------------------------------------------------
    def desired(self, group: str | None = None, device: str | None = None) -> dict[str, dict[str, Any]]:
        """What a group or a device is told to run now: ``{model: {"digest", "store"} or {"remove": True}}``."""
        topic = self.desired_topic(group, device)
        payload = self.retained(topic).get(topic, b"")
        try:
            return parse_desired(payload)
        except PayloadError as e:
            raise EdgekitError(f"{topic} holds a desired state edgekit cannot read ({e}); set it again") from None

    def set_desired(
        self, models: dict[str, dict[str, Any]], group: str | None = None, device: str | None = None
    ) -> dict[str, Any]:
        """Replace the whole desired state of a group or device (an empty ``models`` clears it)."""
        topic = self.desired_topic(group, device)
        try:
            payload = desired_payload(models) if models else b""
        except PayloadError as e:
            raise EdgekitError(str(e)) from None
        self._publish(topic, payload)
        return {"topic": topic, "models": models}

    def desire(
        self, model: str, digest: str, store: str, group: str | None = None, device: str | None = None
    ) -> dict[str, Any]:
        """Tell a group or a device to run bundle ``digest`` (from ``store``) as ``model``; its other models stay."""
        models = self.desired(group, device)
        models[model] = {"digest": digest if digest.startswith("sha256:") else f"sha256:{digest}", "store": store}
        return self.set_desired(models, group, device)

    def undesire(
        self, model: str, group: str | None = None, device: str | None = None, remove: bool = False
    ) -> dict[str, Any]:
        """Take ``model`` out of a group's or a device's desired state (devices keep what they installed); with
        ``remove``, desire its removal instead: the devices stop serving it and delete its versions."""
        models = self.desired(group, device)
        if remove:
            models[model] = {"remove": True}
            return self.set_desired(models, group, device)
        if model not in models:
            raise EdgekitError(
                f"{self.desired_topic(group, device)} desires no model {model!r} (it has: "
                f"{', '.join(sorted(models)) or 'none'})"
            )
        del models[model]
        return self.set_desired(models, group, device)

    # -- what devices report -------------------------------------------------------------
    def states(self) -> dict[str, dict[str, Any]]:
        """``{device id: its retained state}`` for every device of the fleet that reported one."""
        return self._states(f"edgekit/{self.fleet}/devices/+/state")

    def state(self, device: str) -> dict[str, Any] | None:
        """One device's retained state (None: it reported none); reads that device's topic only."""
        try:
            topic = device_topic(self.fleet, device, "state")
        except PayloadError as e:
            raise EdgekitError(str(e)) from None
        return self._states(topic).get(device)

    def _states(self, topic: str) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for found, payload in self.retained(topic).items():
            parsed = parse_topic(found)
            if parsed is None:
                continue
            try:
                out[parsed[1]] = json.loads(payload)
            except ValueError:
                out[parsed[1]] = {"error": "unreadable state message"}
        return dict(sorted(out.items()))

    def watch_events(self, device: str = "+") -> None:
        """Start receiving install events (of one device, or of all): they are not retained, so watch first."""
        if device != "+":
            check_segment("device id", device)
        self.client.subscribe(f"edgekit/{self.fleet}/devices/{device}/events", 1)

    def next_event(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next install event watched (:meth:`watch_events`), or None after ``timeout`` seconds."""
        try:
            return self._events.get(timeout=self.timeout if timeout is None else timeout)
        except queue.Empty:
            return None

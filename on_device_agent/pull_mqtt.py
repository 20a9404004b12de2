"""Pull mode: the agent learns what to run from an MQTT broker and installs it from the bundles' store.

Subscribes (QoS 1) to ``edgekit/FLEET/devices/ID/desired`` and ``edgekit/FLEET/groups/GROUP/desired`` for each
group (retained: a device that was offline when they changed gets them on connecting); the device's entries
override its groups'. Each model whose desired bundle it does not run yet is fetched (:mod:`.pull_fetch`),
checked to load, committed and loaded; every attempt is reported on ``.../devices/ID/events`` and what the agent
runs on ``.../devices/ID/state`` (retained). A model desired ``{"remove": true}`` is unloaded and its versions
deleted. A failed install leaves the old version serving; a transient failure
is tried again with backoff, a permanent one when the desired state changes or the agent reconnects. New field
records go to ``.../devices/ID/field`` every ``--field-interval`` seconds (:mod:`.pull_field`).
"""

import json
import sys
import threading
import time
from typing import Any, Dict, Optional, Tuple

from . import __version__
from .bench import device_info
from .pull_config import PullConfig, describe
from .pull_fetch import Fetcher, FetchError
from .pull_field import FieldPublisher
from .pull_layout import PayloadError, device_topic, group_topic, parse_desired

RETRY_S, RETRY_MAX_S = 30.0, 900.0


class PullAgent(object):
    """Desired state from MQTT, applied to ``service`` (an :class:`edgekit_agent.service.AgentService`)."""

    def __init__(self, config: PullConfig, service: Any, fetcher: Optional[Fetcher] = None, log: Any = None) -> None:
        self.config = config
        self.service = service
        self.ssl = config.ssl_context()
        self.fetcher = fetcher or Fetcher(service.store, ssl_context=self.ssl)
        self.log = log or (lambda m: sys.stderr.write("pull: %s\n" % m))
        self.topics = [device_topic(config.fleet, config.device_id, "desired")]
        self.topics += [group_topic(config.fleet, g) for g in config.groups]
        self.state_topic = device_topic(config.fleet, config.device_id, "state")
        self.events_topic = device_topic(config.fleet, config.device_id, "events")
        self._desired: Dict[str, Dict[str, Dict[str, Any]]] = {}
        self._done: Dict[str, Tuple[str, str, str]] = {}  # model -> (digest, store, version installed)
        # model -> ((digest, store), retry at (None: not before the desired state changes), last wait, error)
        self._failed: Dict[str, Tuple[Tuple[str, str], Optional[float], float, str]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._client = self._make_client()
        self._worker = threading.Thread(target=self._run, name="pull-reconcile")
        self._worker.daemon = True
        self.field = None  # type: Optional[FieldPublisher]
        recorder = getattr(service, "recorder", None)
        if config.field_interval > 0 and recorder is not None:
            topic = device_topic(config.fleet, config.device_id, "field")
            self.field = FieldPublisher(
                recorder, topic, self._publish_acked, config.field_interval, device_info, self.log
            )

    # -- MQTT -------------------------------------------------------------------
    def _make_client(self) -> Any:
        import paho.mqtt.client as mqtt

        client_id = "edgekit-%s-%s" % (self.config.fleet, self.config.device_id)
        api = getattr(mqtt, "CallbackAPIVersion", None)
        if api is not None:  # paho-mqtt 2
            client = mqtt.Client(api.VERSION2, client_id=client_id, protocol=mqtt.MQTTv311)
        else:
            client = mqtt.Client(client_id=client_id, protocol=mqtt.MQTTv311)
        if self.config.username:
            client.username_pw_set(self.config.username, self.config.password)
        if self.ssl is not None:
            client.tls_set_context(self.ssl)
        client.reconnect_delay_set(1, 30)
        client.on_connect = self._on_connect
        client.on_message = self._on_message
        return client

    def start(self) -> None:
        self.log("connecting to %s" % describe(self.config))
        self._worker.start()
        self._client.connect_async(self.config.host, self.config.port, keepalive=30)
        self._client.loop_start()
        if self.field is not None:
            self.field.start()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self.field is not None:
            self.field.stop()
        try:
            self._client.disconnect()
        finally:
            self._client.loop_stop()
        self._worker.join(30)

    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, *properties: Any) -> None:
        if rc != 0:
            self.log("the broker refused the connection: %s" % rc)
            return
        self.log("connected; subscribing to %s" % ", ".join(self.topics))
        with self._lock:
            self._failed.clear()  # the retained desired state arrives again: failed installs are tried again
        client.subscribe([(t, 1) for t in self.topics])
        self._wake.set()  # report the state on every (re)connection

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        try:
            desired = parse_desired(message.payload)
        except PayloadError as e:
            self.log("ignoring %s: %s" % (message.topic, e))
            self._publish(self.events_topic, {"ok": False, "topic": message.topic, "error": str(e)}, retain=False)
            return
        with self._lock:
            self._desired[message.topic] = desired
            for name in desired:
                self._failed.pop(name, None)
        self._wake.set()

    def _publish(self, topic: str, payload: Dict[str, Any], retain: bool) -> None:
        payload = dict(payload, device=self.config.device_id, time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        self._client.publish(topic, json.dumps(payload, sort_keys=True), qos=1, retain=retain)

    def _publish_acked(self, topic: str, payload: bytes) -> bool:
        """Publish (QoS 1, not retained) and wait for the broker's acknowledgement; False: not taken now."""
        if not self._client.is_connected():
            return False  # not queued in memory while the broker is away: the cursor has not moved
        info = self._client.publish(topic, payload, qos=1, retain=False)
        try:
            info.wait_for_publish(30)
        except (RuntimeError, ValueError):
            return False
        return bool(info.is_published())

    # -- reconciling --------------------------------------------------------------
    def desired(self) -> Dict[str, Dict[str, Any]]:
        """The merged desired state: the groups' entries in the order given, then the device's own."""
        merged = {}  # type: Dict[str, Dict[str, Any]]
        with self._lock:
            for topic in self.topics[1:] + self.topics[:1]:
                merged.update(self._desired.get(topic, {}))
        return merged

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(self._next_retry())
            self._wake.clear()
            if self._stopping:
                return
            try:
                self.reconcile()
            except Exception as e:  # the loop must survive anything one round meets
                self.log("reconciling failed: %s: %s" % (type(e).__name__, e))

    def _next_retry(self) -> Optional[float]:
        with self._lock:
            due = [f[1] for f in self._failed.values() if f[1] is not None]
        return max(0.0, min(due) - time.time()) if due else None

    def reconcile(self) -> None:
        """Install what is desired and not run yet, remove what is desired removed; then report the state."""
        store = self.service.store
        for name, want in sorted(self.desired().items()):
            if want.get("remove"):
                with self._lock:
                    refused = name in self._failed and self._failed[name][0][0] == "remove"
                if name in store.names() and not refused:  # a failed removal waits for a new desired state
                    self._remove(name)
                continue
            key = (want["digest"], want["store"])
            done = self._done.get(name)
            if done and done[:2] == key and store.current_version(name) == done[2]:
                continue
            with self._lock:
                failed = self._failed.get(name)
            if failed and failed[0] == key and (failed[1] is None or time.time() < failed[1]):
                continue
            self._install(name, want, failed[2] if failed and failed[0] == key else 0.0)
        self._publish(self.state_topic, self.state(), retain=True)

    def _install(self, name: str, want: Dict[str, str], last_wait: float) -> None:
        event = {"model": name, "digest": want["digest"], "store": want["store"]}  # type: Dict[str, Any]
        try:
            result = self.fetcher.install(name, want["store"], want["digest"], commit=self._commit)
        except Exception as e:
            permanent = getattr(e, "permanent", not isinstance(e, FetchError))
            wait = None if permanent else min(RETRY_MAX_S, max(RETRY_S, last_wait * 2))
            with self._lock:
                self._failed[name] = (
                    (want["digest"], want["store"]),
                    None if wait is None else time.time() + wait,
                    wait or 0.0,
                    str(e),
                )
            self.log("installing %s %s failed: %s" % (name, want["digest"], e))
            event.update(ok=False, error=str(e), permanent=permanent, retry_in_s=wait)
            self._publish(self.events_topic, event, retain=False)
            return
        self._done[name] = (want["digest"], want["store"], result["version"])
        event.update(ok=True, version=result["version"], previous=result.get("previous"))
        event.update(unchanged=bool(result.get("unchanged")), transfer=result.get("transfer"))
        if not result.get("unchanged"):
            try:
                self.service.load(name)  # served warm from now on, as after a push deploy
            except Exception as e:
                event["load_error"] = str(e)
        self.log("installed %s %s" % (name, result["version"]))
        self._publish(self.events_topic, event, retain=False)

    def _remove(self, name: str) -> None:
        """Stop serving ``name`` and delete its versions (a desired ``{"remove": true}``, e.g. a rollback)."""
        event = {"model": name, "remove": True}  # type: Dict[str, Any]
        try:
            self.service.remove(name)
        except Exception as e:
            with self._lock:
                self._failed[name] = (("remove", ""), None, 0.0, str(e))
            self.log("removing %s failed: %s" % (name, e))
            event.update(ok=False, error=str(e), permanent=True)
        else:
            self._done.pop(name, None)
            with self._lock:
                self._failed.pop(name, None)
            self.log("removed %s" % name)
            event.update(ok=True)
        self._publish(self.events_topic, event, retain=False)

    def _commit(self, name: str, version: str, signature: Any = None) -> Dict[str, Any]:
        return dict(self.service.commit(name, version, verify=True, signature=signature))

    def state(self) -> Dict[str, Any]:
        """What the agent runs (every installed model), what it was asked to, and what failed."""
        store = self.service.store
        digests = dict((n, d[0]) for n, d in self._done.items() if store.current_version(n) == d[2])
        models = {}
        for name in store.names():
            models[name] = {"version": store.current_version(name), "digest": digests.get(name)}
        with self._lock:
            failed = dict((n, {"digest": f[0][0], "error": f[3]}) for n, f in self._failed.items())
        return {
            "fleet": self.config.fleet,
            "groups": self.config.groups,
            "agent_version": __version__,
            "models": models,
            "desired": self.desired(),
            "failed": failed,
        }

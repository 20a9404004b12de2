"""Rollouts over pull delivery: devices learn what to run from an MQTT broker (:mod:`edgekit.fleet_pull`).

``install`` publishes the bundle to the store (once) and sets the device's own desired entry
(``edgekit/FLEET/devices/ID/desired``, retained: a device offline now picks it up when it connects), then waits
for the device's retained state to report the bundle's digest; ``rollback`` sets the entry back to the previous
version's digest (the device keeps older versions installed and reuses them), or desires the model's removal
when the device served none before (``{"remove": true}``: the device stops serving it and deletes it).
``reachable``/``current`` read the device's retained state; ``collect`` pulls nothing: the devices send their field
records to the broker and ``edgekit fleet ingest`` writes them into the field store.

A rollout's devices are named by their broker device ids; the group is the devices whose retained state lists it
(:func:`devices_in`), fixed when the rollout starts.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlparse

from ..errors import EdgekitError, TransportError
from ..inventory import FleetDevice
from .delivery import Reachability

if TYPE_CHECKING:
    from ..field import FieldStore
    from ..field_pg import PgFieldStore
    from ..fleet_pull.broker import Broker


def source_url(broker: str, fleet: str, store_url: str, store: str) -> str:
    """What a rollout over MQTT keeps as its ``inventory``: the broker, fleet and stores, one URL."""
    return f"{broker.rstrip('/')}/{fleet}?" + urlencode({"store_url": store_url, "store": store})


def parse_source(url: str) -> dict[str, str] | None:
    """The ``source_url`` parts (broker, fleet, store_url, store); None for an inventory path."""
    from urllib.parse import parse_qs

    parsed = urlparse(url)
    if parsed.scheme not in ("mqtt", "mqtts"):
        return None
    q = {k: v[0] for k, v in parse_qs(parsed.query).items()}
    return {
        "broker": f"{parsed.scheme}://{parsed.netloc}",
        "fleet": parsed.path.strip("/") or "default",
        "store_url": q.get("store_url", ""),
        "store": q.get("store", ""),
    }


def fleet_device(name: str, broker: str, groups: list[str] | None = None) -> FleetDevice:
    return FleetDevice(name, f"{broker}#{name}", "mqtt", name, {}, tags=groups or [])


def devices_in(broker: Broker, group: str | None) -> list[str]:
    """The device ids whose retained state lists ``group`` (every device that reported one if None)."""
    states = broker.states()
    names = [n for n, s in states.items() if group is None or group in (s.get("groups") or [])]
    if not names:
        seen = sorted({g for s in states.values() for g in (s.get("groups") or [])})
        raise EdgekitError(
            f"no device of fleet {broker.fleet} on {broker.url} reported a state"
            + (f" with group {group!r} (groups seen: {', '.join(seen) or 'none'})" if group else "")
            + ": start the agents with --pull first"
        )
    return names


class MqttDelivery(Reachability):
    """The :class:`edgekit.rollout.delivery.Delivery` protocol over a broker and a bundle store."""

    def __init__(
        self,
        broker: str,
        store: str,
        store_url: str,
        fleet: str = "default",
        username: str | None = None,
        password: str | None = None,
        ca: str | None = None,
        install_wait_s: float = 60.0,
    ) -> None:
        self.url, self.store, self.store_url, self.fleet = broker, store, store_url, fleet
        self.username, self.password, self.ca = username, password, ca
        self.install_wait_s = install_wait_s
        self._broker: Broker | None = None
        self._digests: dict[str, str] = {}  # bundle directory -> digest (published once)
        self._versions: dict[str, str] = {}  # version -> digest, from what devices reported
        super().__init__()
        self._lock = threading.RLock()  # one broker connection, used by the rollout's worker threads in turn

    @property
    def broker(self) -> Broker:
        from ..fleet_pull.broker import Broker

        if self._broker is None:
            self._broker = Broker(self.url, self.fleet, self.username, self.password, self.ca)
        return self._broker

    def _state(self, device: FleetDevice) -> dict[str, Any]:
        with self._lock:
            st = self.broker.state(device.name)  # that device's topic only: a wave's checks cost O(devices)
        if st is None:
            raise TransportError(f"device {device.name} has reported no state to {self.url} (fleet {self.fleet})")
        for m in (st.get("models") or {}).values():
            if m.get("version") and m.get("digest"):
                self._versions[m["version"]] = m["digest"]
        return st

    def devices(self, names: list[str]) -> dict[str, FleetDevice]:
        return {n: fleet_device(n, self.url) for n in names}

    def _probe(self, device: FleetDevice) -> None:
        self._state(device)

    def current(self, device: FleetDevice, model: str) -> str | None:
        return ((self._state(device).get("models") or {}).get(model) or {}).get("version")

    def _wait(self, device: FleetDevice, model: str, digest: str | None, what: str) -> None:
        """Until the device's state serves ``digest`` of ``model`` (None: serves no version of it)."""
        end = time.monotonic() + self.install_wait_s
        target = digest or f"{model} removed"
        while True:
            st = self._state(device)
            models = st.get("models") or {}
            if (model not in models) if digest is None else ((models.get(model) or {}).get("digest") == digest):
                return
            failed = (st.get("failed") or {}).get(model) or {}
            if failed.get("digest") == (digest or "remove"):
                raise EdgekitError(f"{device.name} could not {what} {digest or model}: {failed.get('error')}")
            if time.monotonic() >= end:
                raise TransportError(
                    f"{device.name} has not reported {target} within {self.install_wait_s:g}s (its last state: "
                    f"{st.get('time') or 'undated'}; offline? it picks up its desired state when it connects)"
                )
            time.sleep(0.5)

    def install(self, device: FleetDevice, bundle_dir: str | Path) -> None:
        from .. import bundle as bundle_mod
        from ..fleet_pull import publish

        key = str(Path(bundle_dir).resolve())
        with self._lock:
            if key not in self._digests:
                self._digests[key] = publish(bundle_dir, self.store)["digest"]
            digest = self._digests[key]
            model = bundle_mod.load(bundle_dir)["name"]
            self.broker.desire(model, digest, self.store_url, device=device.name)
        self._wait(device, model, digest, "install")

    def _digest_of(self, version: str) -> str:
        if version in self._versions:
            return self._versions[version]
        url = f"{self.store_url.rstrip('/')}/bundles/{version}.json"
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                return str(json.loads(r.read())["digest"])
        except (OSError, ValueError, KeyError) as e:
            raise EdgekitError(f"cannot find the digest of version {version} in the store ({url}: {e})") from None

    def rollback(self, device: FleetDevice, model: str, to_version: str | None) -> None:
        digest = None
        with self._lock:
            if to_version is None:
                self.broker.undesire(model, device=device.name, remove=True)
            else:
                digest = self._digest_of(to_version)
                self.broker.desire(model, digest, self.store_url, device=device.name)
        self._wait(device, model, digest, "roll back to" if digest else "remove")

    def collect(self, device: FleetDevice, store: FieldStore | PgFieldStore) -> None:
        """Nothing to pull: ``edgekit fleet ingest`` writes what the devices send."""

    def close(self) -> None:
        with self._lock:
            if self._broker is not None:
                self._broker.close()
                self._broker = None


__all__ = ["MqttDelivery", "devices_in", "parse_source", "source_url"]

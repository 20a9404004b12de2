"""How a rollout reaches devices: a small protocol, and its first implementation over the direct path
(:mod:`edgekit.deployer` through each inventory entry's transport: local, SSH, ADB, serial).

A delivery that works by desired state (a broker the devices subscribe to) implements the same protocol: ``install``
and ``rollback`` publish what the device should serve and return, ``reachable`` says whether the device is seen,
``current`` what it reports serving, ``collect`` brings its field records into the host's field store.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..errors import EdgekitError

if TYPE_CHECKING:
    from ..device import Device
    from ..field import FieldStore
    from ..field_pg import PgFieldStore
    from ..inventory import FleetDevice


class Delivery(Protocol):
    """What a rollout needs from the way it reaches devices. Errors are :class:`edgekit.errors.EdgekitError`:
    a :class:`edgekit.errors.TransportError` means "try again when the device is back", anything else a failure."""

    def reachable(self, device: FleetDevice) -> bool:
        """Whether ``device`` can be worked on now (``why(device)`` says what failed when not)."""
        ...

    def why(self, device: FleetDevice) -> str | None: ...

    def current(self, device: FleetDevice, model: str) -> str | None:
        """The version of ``model`` the device serves (None: it has none)."""
        ...

    def install(self, device: FleetDevice, bundle_dir: str | Path) -> None:
        """Make the device serve the bundle (a no-op if it already does)."""
        ...

    def rollback(self, device: FleetDevice, model: str, to_version: str | None) -> None:
        """Make the device serve ``to_version`` of ``model`` again (None: serve no version of it)."""
        ...

    def collect(self, device: FleetDevice, store: FieldStore | PgFieldStore) -> None:
        """Bring the device's field records into ``store``, named by the device's inventory name."""
        ...

    def close(self) -> None:
        """Drop connections; the next call opens them again."""
        ...


class Reachability:
    """``reachable``/``why`` for a delivery: ``_probe(device)`` raises EdgekitError saying why it cannot reach it."""

    def __init__(self) -> None:
        self._why: dict[str, str] = {}

    def _probe(self, device: FleetDevice) -> None:
        raise NotImplementedError

    def reachable(self, device: FleetDevice) -> bool:
        try:
            self._probe(device)
        except EdgekitError as e:
            self._why[device.name] = str(e)
            return False
        self._why.pop(device.name, None)
        return True

    def why(self, device: FleetDevice) -> str | None:
        return self._why.get(device.name)


class DirectDelivery(Reachability):
    """Over :func:`edgekit.deployer.open_device` and the agent's API, one connection per device, kept until
    :meth:`close` (a rollout step closes them all at its end)."""

    def __init__(self, bundle_dir: str | Path) -> None:
        from .. import bundle as bundle_mod
        from ..deployer import bundle_profile

        manifest = bundle_mod.load(bundle_dir)
        self.profile = bundle_profile(manifest)
        self.backend = manifest["backend"]
        self._open: dict[str, Device] = {}
        super().__init__()

    def _device(self, fd: FleetDevice) -> Device:
        from ..deployer import open_device

        dev = self._open.get(fd.name)
        if dev is None:
            dev = open_device(
                fd.kind,
                fd.target,
                profile=fd.profile or self.profile,
                device_python=fd.python,
                device_root=fd.root,
                backend=self.backend if fd.kind == "local" else None,
                **fd.options,
            )
            try:
                dev.ensure_agent()
            except BaseException:
                dev.close()
                raise
            self._open[fd.name] = dev
        return dev

    def _probe(self, device: FleetDevice) -> None:
        self._device(device)

    def current(self, device: FleetDevice, model: str) -> str | None:
        served = {m["name"]: m.get("version") for m in self._device(device).models()}
        return served.get(model)

    def install(self, device: FleetDevice, bundle_dir: str | Path) -> None:
        from ..deployer import deploy

        deploy(bundle_dir, self._device(device), bench=False)

    def rollback(self, device: FleetDevice, model: str, to_version: str | None) -> None:
        dev = self._device(device)
        if to_version:
            dev.rollback(model, to_version)
        elif self.current(device, model) is not None:
            dev.remove(model)

    def collect(self, device: FleetDevice, store: FieldStore | PgFieldStore) -> None:
        from ..field import pull

        pull(self._device(device), store, name=device.name)

    def close(self) -> None:
        for dev in self._open.values():
            try:
                dev.close()
            except Exception:  # a connection that is already gone: nothing to close
                pass
        self._open.clear()


__all__ = ["Delivery", "DirectDelivery", "Reachability"]

"""A device and its agent's lifecycle: the one place that knows the paths on a device and how the agent
is installed, started, stopped and asked for its status through a transport.

    open_device(kind, target, profile=...)   the transport, plus the device's Python and agent root
    Device.probe()                           the device's Python, home and machine
    Device.ensure_agent()                    install the zipapp if different (sha256), start, connect
    Device.stop_agent() / agent_status()     the agent's own ``stop`` / ``status`` commands
    Device.install(bundle, manifest)         send what the device lacks of a bundle, then switch to it

Paths: the agent lives in ``<root>/agent/edgekit-agent.pyz``; on this machine a backend whose runtime
lives in a tool environment has its own agent in ``<root>-<backend>`` (:func:`backend_root`).

Steps are observed through hooks passed in (``hooks={"step": [fn]}``): ``fn(step)`` is called before
each step the device takes (probing, starting the agent, each API call, each file copied); a hook may
raise to stop the device there (a fleet does this past a device's deadline).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import agent_package, profiles
from .cache import cache_root
from .errors import AgentError, EdgekitError, TransportError
from .suggest import did_you_mean
from .transports import Transport, connect, transport_class

PROBE = (
    "import json,os,platform,sys;print(json.dumps({'home':os.path.expanduser('~'),'python':platform.python_version(),"
    "'executable':sys.executable,'machine':platform.machine(),'system':platform.system(),'cpu_count':os.cpu_count()}))"
)
HASH = "import hashlib,sys;p=sys.argv[1];print(hashlib.sha256(open(p,'rb').read()).hexdigest())"
AGENT_FILE = "agent/edgekit-agent.pyz"
DEFAULT_REMOTE_ROOT = "~/.cache/edgekit/device"

Hooks = dict[str, list[Callable[[str], Any]]]


def backend_root(root: str | Path, backend: str) -> str:
    """The agent root, on this machine, of a backend whose runtime lives in a tool environment."""
    return f"{root}-{backend}"


def local_root() -> str:
    """The default agent root when this machine is the device."""
    return os.environ.get("EDGEKIT_DEVICE_ROOT") or str(cache_root() / "device")


class Device:
    """An edgekit agent on a device, reached through a transport."""

    def __init__(
        self,
        transport: Transport,
        python: str = "python3",
        root: str = DEFAULT_REMOTE_ROOT,
        hooks: Hooks | None = None,
        encrypt_key: str | None = None,
    ) -> None:
        self.transport = transport
        # On the device: a key file (mode 600) or keyring:NAME; the agent encrypts model files at rest with it
        # and remembers it, so later starts without it keep encrypting.
        self.encrypt_key = encrypt_key
        self.agent_args: list[str] = []  # more flags for the agent's `start` (`edgekit agent start --pull ...`)
        self.python = python
        self.root = root
        self.hooks: Hooks = {"step": list((hooks or {}).get("step", []))}
        self.info: dict[str, Any] | None = None
        self.state: dict[str, Any] | None = None
        self.client: Any = None
        self._forward: tuple[int, int] | None = None  # (device port, host port) of the forward to the agent

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.client:
            self.client.close()
        self.transport.close()

    # -- steps ------------------------------------------------------------------
    def step(self, name: str) -> None:
        """Announce a step to the hooks (a hook may raise to stop the device here)."""
        for hook in self.hooks["step"]:
            hook(name)

    def fail(self, step: str, detail: str) -> None:
        raise TransportError(f"{self.transport.description}: {step} failed: {detail}")

    def put_file(self, local: str | Path, remote: str, progress: Callable | None = None) -> None:
        self.step(f"copying {os.path.basename(str(remote))}")
        self.transport.put_file(local, remote, progress) if progress else self.transport.put_file(local, remote)

    # -- paths ------------------------------------------------------------------
    @property
    def agent_path(self) -> str:
        """The agent zipapp's path on the device."""
        return f"{self.root}/{AGENT_FILE}"

    def _agent(self, action: str, timeout: float, *extra: str) -> Any:
        argv = [self.python, self.agent_path, action, "--root", self.root, *extra]
        return self.transport.run(argv, timeout=timeout)

    # -- lifecycle --------------------------------------------------------------
    def probe(self) -> dict[str, Any]:
        self.step("probing the device's Python")
        r = self.transport.run([self.python, "-c", PROBE], timeout=60)
        if r.returncode == 127 or "not found" in r.stderr:
            self.fail(
                "finding Python",
                f"{self.python!r} is not on the device. Install Python 3.7+ there, or pass "
                "--device-python /path/to/python3",
            )
        if not r.ok:
            self.fail("running Python", (r.stderr or r.stdout).strip()[-500:])
        self.info = json.loads(r.stdout.strip().splitlines()[-1])
        major, minor = (int(x) for x in self.info["python"].split(".")[:2])
        if (major, minor) < (3, 7):
            self.fail("checking Python", f"{self.python} is Python {self.info['python']}; the agent needs 3.7 or newer")
        if self.root.startswith("~"):
            self.root = self.info["home"] + self.root[1:]
        return self.info

    def ensure_agent(self, log: Callable[[str], None] | None = None) -> dict[str, Any]:
        """Install the agent zipapp if missing or different, start it, connect to its API."""
        self.step("starting the agent")
        log = log or (lambda m: None)
        if self.info is None:
            self.probe()
        local, digest = agent_package.build(cache_root() / "agent")
        remote = self.agent_path
        r = self.transport.run([self.python, "-c", HASH, remote], timeout=60)
        if not (r.ok and r.stdout.strip() == digest):
            if r.ok:
                # An older agent may be running from that file: stop it before the file changes under it.
                self._agent("stop", timeout=60)
            log(f"installing agent {digest[:12]} -> {remote}")
            self.transport.run(["mkdir", "-p", f"{self.root}/agent"])
            self.put_file(local, remote)
            r = self.transport.run([self.python, "-c", HASH, remote], timeout=60)
            if r.stdout.strip() != digest:
                self.fail(
                    "installing the agent",
                    f"{remote} has sha256 {r.stdout.strip() or '?'} after upload, expected {digest}",
                )
        key = ["--encrypt-key", self.encrypt_key] if self.encrypt_key else []
        r = self._agent("start", 90, *key, *self.agent_args)
        if not r.ok:
            self.fail("starting the agent", (r.stderr or r.stdout).strip()[-800:])
        self.state = json.loads(r.stdout.strip().splitlines()[-1])
        if self._forward and self._forward[0] == self.state["port"]:
            port = self._forward[1]  # the agent kept its port: the forward we made still leads to it
        else:
            port = self.transport.forward(self.state["port"])
            self._forward = (self.state["port"], port)
        from edgekit_sdk import AgentClient

        if self.client is not None:
            self.client.close()
        self.client = AgentClient("127.0.0.1", port, token=self.state.pop("token", None) or "", timeout=120)
        health = self.call("checking the agent", self.client.health)
        self.state["health"] = health
        return self.state

    def start_agent(self) -> dict[str, Any]:
        """``edgekit agent start``: the agent's state (pid, port, version), without its health answer."""
        state = dict(self.ensure_agent())
        state.pop("health", None)
        return state

    def stop_agent(self) -> dict[str, Any]:
        return self._agent_command("stop")

    def agent_status(self) -> dict[str, Any]:
        return self._agent_command("status")

    def trust(self, action: str, *extra: str) -> dict[str, Any]:
        """``edgekit-agent trust ACTION`` on the device (its trusted signers; see :mod:`edgekit.trust`)."""
        return self._agent_command("trust", action, *extra)

    def _agent_command(self, action: str, *extra: str) -> dict[str, Any]:
        if self.info is None:
            self.probe()
        self.step(f"{action} of the agent")
        r = self._agent(action, 60, *extra)
        said = r.stderr + r.stdout
        if not r.ok and ("No such file" in said or "can't open file" in said):
            raise EdgekitError(
                f"no edgekit agent is installed in {self.root} on {self.transport.description}; "
                "`edgekit deploy BUNDLE` installs it"
            )
        if not r.ok:
            raise EdgekitError(
                f"agent {action} failed on {self.transport.description}: "
                f"{(r.stderr or r.stdout).strip()[-400:] or 'agent not installed'}"
            )
        return json.loads(r.stdout.strip().splitlines()[-1])

    # -- the agent's API ----------------------------------------------------------
    def call(self, step: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from edgekit_sdk import AgentHTTPError

        self.step(step)
        try:
            return fn(*args, **kwargs)
        except AgentHTTPError as e:
            raise AgentError(f"{self.transport.description}: {step}: {e.message}", status=e.status) from None
        except OSError as e:
            raise TransportError(
                f"{self.transport.description}: connection lost while {step} ({type(e).__name__}: {e}). "
                "The device keeps serving what it served before; run the command again to resume."
            ) from None

    def install(
        self,
        bundle_dir: str | Path,
        manifest: dict[str, Any],
        progress: Callable | None = None,
        log: Callable[[str], None] | None = None,
    ) -> dict[str, Any]:
        """Send what the device lacks of the bundle, then switch to it atomically (see :mod:`.upload`)."""
        from .upload import install

        return install(self, bundle_dir, manifest, progress=progress, log=log)

    def rollback(self, name: str, version: str | None = None) -> dict[str, Any]:
        return self._on_model(f"rolling back {name}", self.client.rollback, name, version)

    def models(self) -> list[dict[str, Any]]:
        return self.call("listing models", self.client.models)

    def remove(self, name: str) -> dict[str, Any]:
        return self._on_model(f"removing {name}", self.client.remove, name)

    def _on_model(self, step: str, fn: Callable[..., Any], name: str, *args: Any) -> Any:
        """A call about model ``name``; an unknown name is answered with the close names the device serves."""
        try:
            return self.call(step, fn, name, *args)
        except AgentError as e:
            if e.status != 404 or "unknown model" not in str(e):
                raise
            hint = did_you_mean(name, [m["name"] for m in self.models()])
            if not hint:
                raise
            raise AgentError(f"{e}{hint}", status=e.status) from None

    def bench(
        self,
        name: str,
        runs: int = 100,
        warmup: int = 10,
        threads: int | None = None,
        providers: list[str] | None = None,
    ) -> dict[str, Any]:
        return self.call(
            f"benchmarking {name}",
            self.client.bench,
            name,
            runs=runs,
            warmup=warmup,
            threads=threads,
            providers=providers,
            timeout=900,
        )

    def profile(
        self,
        name: str,
        runs: int = 20,
        warmup: int = 3,
        threads: int | None = None,
        providers: list[str] | None = None,
    ) -> dict[str, Any]:
        return self.call(
            f"profiling {name}",
            self.client.profile,
            name,
            runs=runs,
            warmup=warmup,
            threads=threads,
            providers=providers,
            timeout=900,
        )


def open_device(
    kind: str = "local",
    target: str | None = None,
    profile: profiles.Profile | str | None = None,
    device_python: str | None = None,
    device_root: str | None = None,
    backend: str | None = None,
    hooks: Hooks | None = None,
    encrypt_key: str | None = None,
    **options: Any,
) -> Device:
    """Connect to a device; ``profile`` supplies the defaults for its Python and agent directory.

    ``encrypt_key``: a key file (mode 600) or ``keyring:NAME`` on the device; the agent this device starts
    encrypts model files at rest with it (and keeps doing so on later starts)."""
    prof = profile if isinstance(profile, profiles.Profile) or profile is None else profiles.load(profile)
    if prof is not None and prof.build_only:
        raise TransportError(
            f"profile {prof.name} is build-only: {prof.data['agent'].get('notes', 'no edgekit agent runs on it')}. "
            "To try the model on this machine, build it with --profile host"
        )
    cls = transport_class(kind)
    python, root = device_paths(cls, prof, device_python, device_root, backend)
    if cls.wants_python:
        options.setdefault("python", python)
    device = Device(connect(kind, target, **options), python=python, root=root, hooks=hooks, encrypt_key=encrypt_key)
    return device


def device_paths(
    cls: type[Transport],
    prof: profiles.Profile | None,
    device_python: str | None,
    device_root: str | None,
    backend: str | None,
) -> tuple[str, str]:
    """``(python, root)`` of the agent: the flags', else the profile's, else the transport's defaults."""
    if cls.is_host:
        # A runtime that lives in a tool environment runs under that environment's Python, with its own agent root.
        env_python = None if device_python or not backend else _backend_local_python(backend)
        python = device_python or env_python or sys.executable
        root = device_root or local_root()
        return python, root if device_root or not env_python else backend_root(root, backend or "")
    agent = prof.data["agent"] if prof else {}
    return device_python or agent.get("python") or "python3", device_root or agent.get("root") or DEFAULT_REMOTE_ROOT


def _backend_local_python(backend: str) -> str | None:
    from .converters import all_backends

    be = all_backends().get(backend)  # a backend this edgekit lacks: the agent runs under the host Python
    return be.local_device_python() if be is not None else None


def other_local_agents(root: str) -> list[dict[str, str]]:
    """``[{backend, root}]``: the local agents of tool-environment backends beside ``root`` (``<root>-<backend>``,
    made by ``deploy --local`` of such a bundle), which a command without ``--backend`` does not see."""
    from .converters import all_backends

    base = Path(root).expanduser()
    return [
        {"backend": b, "root": backend_root(base, b)}
        for b in sorted(all_backends())
        if (Path(backend_root(base, b)) / "agent").is_dir()
    ]


__all__ = ["Device", "backend_root", "device_paths", "local_root", "open_device", "other_local_agents"]

"""``edgekit deploy`` and ``edgekit bench``: install the agent and a bundle on a device,
benchmark it there, and bring the report back.

    transport -> probe the device's Python -> install/upgrade the agent zipapp (sha256
    checked) -> start it (or reuse the running one) -> forward its loopback port ->
    upload the bundle file by file (the agent verifies each against the manifest) ->
    commit (atomic switch) -> benchmark in a fresh process on the device
"""

import json
import os
import sys
import time

from . import agent_package, profiles
from . import bundle as bundle_mod
from .cache import cache_root
from .errors import AgentError, TransportError
from .transports import connect

PROBE = (
    "import json,os,platform,sys;print(json.dumps({'home':os.path.expanduser('~'),'python':platform.python_version(),"
    "'executable':sys.executable,'machine':platform.machine(),'system':platform.system(),'cpu_count':os.cpu_count()}))"
)
HASH = "import hashlib,sys;p=sys.argv[1];print(hashlib.sha256(open(p,'rb').read()).hexdigest())"


def _prefix_sha256(path, n):
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        while n > 0:
            block = f.read(min(1 << 20, n))
            if not block:
                break
            h.update(block)
            n -= len(block)
    return h.hexdigest()


class _ProgressReader:
    def __init__(self, f, name, total, progress, start=0):
        self.f, self.name, self.total, self.progress, self.done = f, name, total, progress, start

    def read(self, n=-1):
        data = self.f.read(65536 if n is None or n < 0 else min(n, 65536))
        self.done += len(data)
        if self.progress and data:
            self.progress(self.name, self.done, self.total)
        return data


class Device:
    """An edgekit agent on a device, reached through a transport."""

    def __init__(self, transport, python=None, root=None):
        self.transport = transport
        self.python = python
        self.root = root
        self.info = None
        self.state = None
        self.client = None
        self._forward = None  # (device port, host port) of the forward to the agent

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self.client:
            self.client.close()
        self.transport.close()

    def _fail(self, step, detail):
        raise TransportError(f"{self.transport.description}: {step} failed: {detail}")

    def probe(self):
        r = self.transport.run([self.python, "-c", PROBE], timeout=60)
        if r.returncode == 127 or "not found" in r.stderr:
            self._fail(
                "finding Python",
                f"{self.python!r} is not on the device. Install Python 3.7+ there, or pass "
                "--device-python /path/to/python3",
            )
        if not r.ok:
            self._fail("running Python", (r.stderr or r.stdout).strip()[-500:])
        self.info = json.loads(r.stdout.strip().splitlines()[-1])
        major, minor = (int(x) for x in self.info["python"].split(".")[:2])
        if (major, minor) < (3, 7):
            self._fail(
                "checking Python", f"{self.python} is Python {self.info['python']}; the agent needs 3.7 or newer"
            )
        if self.root.startswith("~"):
            self.root = self.info["home"] + self.root[1:]
        return self.info

    def ensure_agent(self, log=None):
        """Install the agent zipapp if missing or different, start it, connect to its API."""
        log = log or (lambda m: None)
        if self.info is None:
            self.probe()
        local, digest = agent_package.build(cache_root() / "agent")
        remote = f"{self.root}/agent/edgekit-agent.pyz"
        r = self.transport.run([self.python, "-c", HASH, remote], timeout=60)
        if not (r.ok and r.stdout.strip() == digest):
            if r.ok:
                # An older agent may be running from that file: stop it before the file changes under it.
                self.transport.run([self.python, remote, "stop", "--root", self.root], timeout=60)
            log(f"installing agent {digest[:12]} -> {remote}")
            self.transport.run(["mkdir", "-p", f"{self.root}/agent"])
            self.transport.put_file(local, remote)
            r = self.transport.run([self.python, "-c", HASH, remote], timeout=60)
            if r.stdout.strip() != digest:
                self._fail(
                    "installing the agent",
                    f"{remote} has sha256 {r.stdout.strip() or '?'} after upload, expected {digest}",
                )
        r = self.transport.run([self.python, remote, "start", "--root", self.root], timeout=90)
        if not r.ok:
            self._fail("starting the agent", (r.stderr or r.stdout).strip()[-800:])
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

    def call(self, step, fn, *args, **kwargs):
        from edgekit_sdk import AgentHTTPError

        try:
            return fn(*args, **kwargs)
        except AgentHTTPError as e:
            raise AgentError(f"{self.transport.description}: {step}: {e.message}", status=e.status) from None
        except OSError as e:
            raise TransportError(
                f"{self.transport.description}: connection lost while {step} ({type(e).__name__}: {e}). "
                "The device keeps serving what it served before; run the command again to resume."
            ) from None

    def install(self, bundle_dir, manifest, progress=None, log=None):
        """Send what the device lacks of the bundle, then switch to it atomically.

        An unchanged redeploy sends one small request. Files the device already holds (same
        sha256, in any kept version) are not sent; an upload cut off midway resumes at the
        byte where it stopped. Returns the commit result with a ``transfer`` summary.
        """
        log = log or (lambda m: None)
        name, version = manifest["name"], manifest["id"]
        sent0 = self.client.bytes_sent
        served = {m["name"]: m for m in self.call("listing models", self.client.models)}.get(name)
        if served and served.get("version") == version:
            log(f"{name} {version} is already serving on the device: nothing to send")
            return {
                "name": name,
                "version": version,
                "previous": version,
                "unchanged": True,
                "transfer": {
                    "files_sent": 0,
                    "files_reused": 0,
                    "payload_bytes": 0,
                    "resumed_bytes": 0,
                    "request_bytes": self.client.bytes_sent - sent0,
                },
            }
        state = self.call("starting the upload", self.client.begin_upload, name, version, manifest)
        if state.get("installed"):
            log(f"{name} {version} is already on the device (a kept version)")
        if state.get("reused"):
            log(f"  {len(state['reused'])} file(s) already on the device, not sent: {', '.join(state['reused'])}")
        partial = state.get("partial") or {}
        partial_sha = state.get("partial_sha256") or {}
        sizes = {f["name"]: f["size"] for f in manifest["files"]}
        asked = [f for f in state.get("missing", []) if f not in sizes]
        if asked:  # only files of this bundle ever leave this machine, whatever the other end asks for
            self._fail("uploading the bundle", f"the agent asked for files that are not in the bundle: {asked[:3]}")
        payload = resumed = 0
        for fname in state.get("missing", []):
            path = os.path.join(bundle_dir, fname)
            size = sizes[fname]
            offset = partial.get(fname, 0)
            if not (
                isinstance(offset, int) and 0 < offset < size and _prefix_sha256(path, offset) == partial_sha.get(fname)
            ):
                offset = 0  # nothing kept, or what the device kept is not this file's beginning: send it whole
            if offset:
                log(f"  resuming {fname} at byte {offset} of {size}")
            with open(path, "rb") as f:
                f.seek(offset)
                self.call(
                    f"uploading {fname}",
                    self.client.put_file,
                    name,
                    version,
                    fname,
                    _ProgressReader(f, fname, size, progress, start=offset),
                    length=size - offset,
                    offset=offset,
                )
            payload += size - offset
            resumed += offset
        result = self.call("verifying and committing the bundle", self.client.commit, name, version, verify=True)
        log(f"installed {name} {version} (previous: {result.get('previous') or 'none'})")
        result["transfer"] = {
            "files_sent": len(state.get("missing", [])),
            "files_reused": len(state.get("reused", [])),
            "payload_bytes": payload,
            "resumed_bytes": resumed,
            "request_bytes": self.client.bytes_sent - sent0,
        }
        return result

    def rollback(self, name, version=None):
        return self.call(f"rolling back {name}", self.client.rollback, name, version)

    def models(self):
        return self.call("listing models", self.client.models)

    def remove(self, name):
        return self.call(f"removing {name}", self.client.remove, name)

    def bench(self, name, runs=100, warmup=10, threads=None, providers=None):
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


def open_device(kind="local", target=None, profile=None, device_python=None, device_root=None, backend=None, **options):
    """Connect to a device; ``profile`` supplies the defaults for its Python and agent directory."""
    prof = profile if isinstance(profile, profiles.Profile) or profile is None else profiles.load(profile)
    if prof is not None and prof.build_only:
        raise TransportError(
            f"profile {prof.name} is build-only: {prof.data['agent'].get('notes', 'no edgekit agent runs on it')}. "
            "To try the model on this machine, build it with --profile host"
        )
    agent = prof.data["agent"] if prof else {}
    if kind == "local":
        # A runtime that lives in a tool environment runs under that environment's Python, with its own agent root.
        env_python = None if device_python or not backend else _backend_local_python(backend)
        python = device_python or env_python or sys.executable
        root = device_root or os.environ.get("EDGEKIT_DEVICE_ROOT") or str(cache_root() / "device")
        root = root if device_root or not env_python else f"{root}-{backend}"
    else:
        python = device_python or agent.get("python") or "python3"
        root = device_root or agent.get("root") or "~/.cache/edgekit/device"
    if kind == "serial":
        options.setdefault("python", python)  # the line endpoint runs with the same interpreter as the agent
    transport = connect(kind, target, **options)
    return Device(transport, python=python, root=root)


def _backend_local_python(backend):
    from .converters import all_backends

    be = all_backends().get(backend)  # a backend this edgekit lacks: the agent runs under the host Python
    return be.local_device_python() if be is not None else None


def _annotate(report, manifest, device, prof):
    report["profile"] = manifest["profile"]
    report["transport"] = device.transport.description
    report["agent"] = {
        "version": device.state.get("version"),
        "pid": device.state.get("pid"),
        "port": device.state.get("port"),
        "root": device.root,
    }
    warnings = list(report.get("warnings", []))
    machine = report.get("device", {}).get("machine", "")
    norm = profiles._normalise_arch(machine) if machine else ""
    if prof and prof.name != profiles.HOST and norm and norm != prof.arch:
        warnings.append(
            f"built for {prof.name} ({prof.arch}) but measured on a {machine} device: these timings "
            f"describe that device, not a {prof.name}"
        )
    requested = report.get("accelerators_requested") or []
    placement = report.get("placement") or {}
    if requested and placement and requested[0] not in placement:
        warnings.append(f"{requested[0]} was requested first but ran no node: everything ran on {', '.join(placement)}")
    report["warnings"] = warnings
    return report


def _threads(prof, device, threads):
    if threads:
        return threads
    cores = device.info.get("cpu_count") or 1
    return min(prof.threads, cores) if prof else cores


def bundle_profile(manifest):
    """The profile a bundle was built for, as recorded in its manifest (no profile file needed)."""
    if manifest.get("profile_spec"):
        return profiles.Profile(manifest["profile"], manifest["profile_spec"], "bundle manifest")
    return profiles.load(manifest["profile"]) if manifest["profile"] in profiles.names() else None


def deploy(bundle_dir, device, runs=100, warmup=10, threads=None, providers=None, progress=None, log=None, bench=True):
    """Install ``bundle_dir`` on ``device`` (a :class:`Device` or a transport kind) and benchmark it there."""
    manifest = bundle_mod.load(bundle_dir)
    prof = bundle_profile(manifest)
    if isinstance(device, str):
        with open_device(device, profile=prof, backend=manifest["backend"]) as opened:
            return deploy(
                bundle_dir,
                opened,
                runs=runs,
                warmup=warmup,
                threads=threads,
                providers=providers,
                progress=progress,
                log=log,
                bench=bench,
            )
    t0 = time.perf_counter()
    device.ensure_agent(log=log)
    install = device.install(bundle_dir, manifest, progress=progress, log=log)
    deploy_s = time.perf_counter() - t0
    if not bench:
        return {"name": manifest["name"], "bundle_id": manifest["id"], "installed": install}
    t = _threads(prof, device, threads)
    report = device.bench(manifest["name"], runs=runs, warmup=warmup, threads=t, providers=providers)
    report["deploy_seconds"] = round(deploy_s, 3)
    report["installed"] = install
    # Serve it warm: apps' first request must not pay the load.
    device.call(f"loading {manifest['name']}", device.client.load, manifest["name"], threads=t, providers=providers)
    report = _annotate(report, manifest, device, prof)
    _record_lab(device, report)
    return report


def _record_lab(device, report):
    """Keep the lab benchmark beside the field data of the same device, for `edgekit field report`."""
    store_id = (device.state or {}).get("health", {}).get("telemetry", {}).get("store_id")
    if not store_id:
        return
    from .field import FieldStore

    with FieldStore() as store:
        store.record_lab(store_id, report)


def bench(bundle_dir, device, runs=100, warmup=10, threads=None, providers=None, log=None):
    """Benchmark a bundle that is already deployed on ``device`` (no upload)."""
    manifest = bundle_mod.load(bundle_dir)
    prof = bundle_profile(manifest)
    device.ensure_agent(log=log)
    models = {m["name"]: m for m in device.call("listing models", device.client.models)}
    deployed = models.get(manifest["name"])
    if deployed is None or deployed["version"] != manifest["id"]:
        have = deployed["version"] if deployed else "nothing"
        raise AgentError(
            f"{device.transport.description} serves {have} for {manifest['name']}, not this bundle "
            f"({manifest['id']}); run `edgekit deploy {bundle_dir}` first"
        )
    report = device.bench(
        manifest["name"], runs=runs, warmup=warmup, threads=_threads(prof, device, threads), providers=providers
    )
    report = _annotate(report, manifest, device, prof)
    _record_lab(device, report)
    return report

"""``edgekit device setup``: make a device able to run a bundle, with no network on the device.

    setup(device, bundle=None, backend=None, version=None, log=None) -> dict

probe the device (architecture, C library, Python X.Y) -> its pip platform tags (:mod:`.wheels`) -> download
on this machine, into ``<cache>/wheels/<python>-<tag>/``, the runtime's wheel at the bundle's version (numpy
too when the device's Python lacks it) -> push them over the device's transport -> unzip them there with the
device's own Python into ``<root>/site.partial`` -> import the runtime from it (a dependency it names as
missing is fetched and added, then the import is tried again) -> stop the agent, rename ``site.partial`` to
``<root>/site`` -> import again; with a bundle, install it (the agent loads it before switching).

The agent puts ``<root>/site`` first on its ``sys.path`` (and on ``PYTHONPATH`` for the processes it starts).
``<root>/site/edgekit-setup.json`` records what was installed: packages, versions, wheels and their sha256.
No wheel for the device: :class:`BackendUnavailable` naming what was tried and the alternatives; nothing is
installed then.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import bundle as bundle_mod
from .cache import cache_root
from .device import Device
from .errors import BackendUnavailable, EdgekitError
from .runtime_match import INSTALL, parse_version
from .wheels import Target, WheelMissing, normalise, platform_tags, requirements

SITE = "site"
RECORD = "edgekit-setup.json"
MODULES = {  # backend -> the module its runtime is imported as
    "ort": "onnxruntime",
    "openvino": "openvino",
    "mnn": "MNN",
    "tflite": "ai_edge_litert",
    "paddlelite": "paddlelite",
    "mindspore-lite": "mindspore_lite",
}
MAX_DEPENDENCIES = 8
PULL_PACKAGE, PULL_MODULE = "paho-mqtt", "paho.mqtt.client"  # the agent's MQTT client in pull mode
NUMPY_ABI = ("NumPy 1.x", "_ARRAY_API", "numpy.core.multiarray")  # a module built against NumPy 1 under NumPy 2
# argv: SITE|'' MODULE...; prints {module: version} or {module: {"error": ..., "missing": name}}
CHECK = (
    "import importlib,json,sys\n"
    "if sys.argv[1]: sys.path.insert(0,sys.argv[1])\n"
    "out={}\n"
    "for m in sys.argv[2:]:\n"
    "  try: out[m]=str(getattr(importlib.import_module(m),'__version__','') or '?')\n"
    "  except BaseException as e: out[m]={'error':'%s: %s'%(type(e).__name__,e),'missing':getattr(e,'name',None)}\n"
    "print(json.dumps(out))"
)
# argv: DIR WHEEL...: unzip each wheel into DIR (its .data/purelib|platlib into DIR too), then delete it
UNPACK = (
    "import os,shutil,sys,zipfile\n"
    "d=sys.argv[1]\n"
    "for w in sys.argv[2:]:\n"
    "  with zipfile.ZipFile(w) as z: z.extractall(d)\n"
    "  os.remove(w)\n"
    "for e in os.listdir(d):\n"
    "  if e.endswith('.data'):\n"
    "    for k in ('purelib','platlib'):\n"
    "      s=os.path.join(d,e,k)\n"
    "      for f in (os.listdir(s) if os.path.isdir(s) else []): shutil.move(os.path.join(s,f),os.path.join(d,f))\n"
    "    shutil.rmtree(os.path.join(d,e))\n"
)
# argv: NEW FINAL: replace FINAL by NEW (the old one is removed after the rename)
SWAP = (
    "import os,shutil,sys\n"
    "n,f=sys.argv[1:3];o=f+'.old'\n"
    "shutil.rmtree(o,True)\n"
    "if os.path.exists(f): os.rename(f,o)\n"
    "os.rename(n,f);shutil.rmtree(o,True)"
)


def site_dir(device: Device) -> str:
    """Where the runtime set up on ``device`` lives (first on the agent's ``sys.path``)."""
    return f"{device.root}/{SITE}"


def device_imports(device: Device, modules: list[str], site: str | None = "") -> dict[str, Any]:
    """What importing each module on the device's Python gives: its version, or ``{"error", "missing"}``.
    ``site``: a directory put first on ``sys.path`` ("" = the set-up site, None = the Python on its own)."""
    site = site_dir(device) if site == "" else site
    r = device.transport.run([device.python, "-c", CHECK, site or "", *modules], timeout=600)
    try:
        return dict(json.loads(r.stdout.strip().splitlines()[-1]))
    except (IndexError, ValueError):
        # the Python died importing them (a native library crashed): every module counts as not importing
        said = (r.stderr or r.stdout).strip()[-300:] or f"exit status {r.returncode}"
        return {m: {"error": f"the device's Python crashed importing it ({said})", "missing": None} for m in modules}


def runtime_present(device: Device, backend: str, version: str | None) -> str | None:
    """The runtime version the agent on ``device`` would import, if it is ``version`` (any when None)."""
    module = MODULES.get(backend)
    if module is None:
        return None
    have = device_imports(device, [module]).get(module)
    if not isinstance(have, str):
        return None
    return have if version is None or parse_version(have) == parse_version(version) else None


def setup(
    device: Device,
    bundle: str | Path | None = None,
    backend: str | None = None,
    version: str | None = None,
    log: Callable[[str], None] | None = None,
    pull: bool = False,
) -> dict[str, Any]:
    """Install on ``device``, offline, the runtime that ``bundle`` (or ``backend`` at ``version``) needs; ``pull``:
    paho-mqtt too, for the agent's pull mode (``--pull mqtt://...``, docs/FLEET.md). A site set up for pull
    keeps paho-mqtt when it is set up again."""
    from .probe import device_probe

    say = log or (lambda m: None)
    t0 = time.perf_counter()
    manifest = bundle_mod.load(bundle) if bundle else None
    backend = backend or (manifest or {}).get("backend")
    if not backend:
        raise EdgekitError("device setup needs a bundle directory or --backend B (ort, openvino, mnn, ...)")
    if backend not in MODULES:
        raise EdgekitError(f"unknown backend {backend!r}: one of {', '.join(MODULES)}")
    if version is None and manifest and manifest.get("backend") == backend:
        version = (manifest.get("runtime") or {}).get("version")
    package, module = INSTALL[backend], MODULES[backend]
    info = device_probe(device)
    py = ".".join(str((device.info or {}).get("python", "")).split(".")[:2])
    libc = info.get("libc") or {}
    machine = (info.get("cpu") or {}).get("machine") or (device.info or {}).get("machine")
    platform = {"machine": machine, "libc": libc.get("name"), "libc_version": libc.get("version"), "python": py}
    where = f"{device.transport.description} ({machine}, {libc.get('name')} {libc.get('version')}, Python {py})"
    result: dict[str, Any] = {"backend": backend, "package": package, "platform": platform, "site": site_dir(device)}
    pull = pull or PULL_PACKAGE in _recorded_packages(device)
    present = runtime_present(device, backend, version)
    if present and pull and not isinstance(device_imports(device, [PULL_MODULE]).get(PULL_MODULE), str):
        present = None
    if present:
        say(f"{package} {present} already imports on the device: nothing to install")
        return {**result, "version": present, "installed": [], "seconds": round(time.perf_counter() - t0, 2)}
    tags = platform_tags(machine, libc.get("name"), libc.get("version"))
    if not tags:
        raise BackendUnavailable(
            f"no Python wheels are published for {where}: pip's platform tags cover Linux with glibc or musl on "
            f"x86_64, aarch64, armv7l and a few others. Install {package} on the device from its project's "
            "prebuilt libraries, or build it there from source"
        )
    target = Target(tags, py)
    platform["tags"] = tags
    cache = cache_root() / "wheels" / f"cp{py.replace('.', '')}-{tags[0]}"
    requirement = f"{package}=={version}" if version else package
    say(f"downloading {requirement} for {tags[0]}, CPython {py}")
    try:
        wheels = {normalise(package): target.download(requirement, cache)}
    except WheelMissing as e:
        raise _no_wheel(e, package, version, backend, manifest, target, where) from None
    bare = device_imports(device, ["numpy"], site=None)
    if not isinstance(bare.get("numpy"), str):
        wheels["numpy"] = _numpy(target, requirements(wheels[normalise(package)]).get("numpy", "numpy"), cache, say)
    if pull:
        say(f"downloading {PULL_PACKAGE} for the agent's pull mode")
        wheels[PULL_PACKAGE] = _download(target, PULL_PACKAGE, cache, where)
    partial = f"{device.root}/{SITE}.partial"
    try:
        got = _install_until_it_imports(device, target, cache, wheels, module, partial, where, say)
        _write_record(device, partial, backend, package, got, platform, wheels)
        stopped = _stop_agent(device, say)
        r = device.transport.run([device.python, "-c", SWAP, partial, site_dir(device)], timeout=120)
        if not r.ok:
            device.fail("switching to the new runtime", (r.stderr or r.stdout).strip()[-500:])
    finally:
        device.transport.run([device.python, "-c", "import shutil,sys;shutil.rmtree(sys.argv[1],True)", partial])
    have = device_imports(device, [module]).get(module)
    if not isinstance(have, str):
        device.fail(f"importing {module} after setup", str(have))
    say(f"{package} {have} imports on the device")
    if pull:
        mqtt = device_imports(device, [PULL_MODULE]).get(PULL_MODULE)
        if not isinstance(mqtt, str):
            device.fail(f"importing {PULL_MODULE} after setup", str(mqtt))
    result.update(version=have, installed=_record_packages(wheels))
    if stopped and manifest is None:
        say("starting the agent again")
        device.ensure_agent(log=say)
    if manifest is not None:
        say(f"loading {manifest['name']} on the device")
        device.ensure_agent(log=say)
        result["bundle"] = {"name": manifest["name"], "installed": device.install(bundle, manifest, log=say)}  # type: ignore[arg-type]
    result["seconds"] = round(time.perf_counter() - t0, 2)
    return result


setup_device = setup  # edgekit.setup_device(device, bundle, ...)


def ensure_runtime(device: Device, manifest: dict[str, Any], log: Callable[[str], None] | None = None) -> dict | None:
    """``deploy --setup``: set up the bundle's runtime when the device lacks it (or has another version)."""
    version = (manifest.get("runtime") or {}).get("version")
    device.probe()
    if runtime_present(device, manifest["backend"], version):
        return None
    return setup(device, backend=manifest["backend"], version=version, log=log)


def _recorded_packages(device: Device) -> set[str]:
    """The packages the set-up site's record lists (none when there is no site or no record)."""
    read = (
        "import json,sys\n"
        "try: print(json.dumps([p['name'] for p in json.load(open(sys.argv[1]))['packages']]))\n"
        "except Exception: print('[]')"
    )
    r = device.transport.run([device.python, "-c", read, f"{site_dir(device)}/{RECORD}"], timeout=60)
    try:
        return {normalise(n) for n in json.loads(r.stdout.strip().splitlines()[-1])}
    except (IndexError, ValueError, TypeError):
        return set()


def _stop_agent(device: Device, say: Callable[[str], None]) -> bool:
    """Stop the agent serving the device root, if one runs (it imported the old runtime); whether one did."""
    r = device._agent("stop", timeout=60)
    try:
        stopped = bool(r.ok and json.loads(r.stdout.strip().splitlines()[-1]).get("stopped"))
    except (IndexError, ValueError, AttributeError):
        stopped = False
    if stopped:
        say("stopped the agent: it starts again with the new runtime")
    return stopped


def _numpy(target: Target, spec: str, cache: Path, say: Callable[[str], None]) -> Path:
    """numpy for a device Python without one: a 1.x release where the runtime allows it (a runtime built against
    NumPy 1 crashes under NumPy 2, one built against NumPy 2 runs on 1.x), else what the runtime asks for."""
    for requirement in (spec + ("," if spec != "numpy" else "") + "<2", spec):
        say(f"the device's Python has no numpy: downloading {requirement}")
        try:
            return target.download(requirement, cache)
        except WheelMissing:
            continue
    raise BackendUnavailable(f"no numpy wheel for CPython {target.python} on {target.describe()}")


def _download(target: Target, requirement: str, cache: Path, where: str) -> Path:
    try:
        return target.download(requirement, cache)
    except WheelMissing as e:
        raise BackendUnavailable(
            f"no wheel of {requirement} (which the runtime needs) for {where}; pip tried {target.describe()}: {e}"
        ) from None


def _install_until_it_imports(
    device: Device,
    target: Target,
    cache: Path,
    wheels: dict[str, Path],
    module: str,
    partial: str,
    where: str,
    say: Callable[[str], None],
) -> str:
    """Unpack ``wheels`` into ``partial`` on the device and import ``module`` from it; a module it names as
    missing is downloaded (from the wheels' requirements) and everything unpacked again. The version imported."""
    for _ in range(MAX_DEPENDENCIES):
        _unpack(device, wheels, partial, say)
        got = device_imports(device, [module], site=partial)[module]
        if isinstance(got, str):
            return got
        missing = normalise(got.get("missing") or "")
        error = got.get("error", "")
        needs: dict[str, str] = {}
        for w in wheels.values():
            needs.update(requirements(w))
        if missing and missing not in wheels and missing in needs:
            say(f"{module} needs {missing}: downloading {needs[missing]}")
            wheels[missing] = _download(target, needs[missing], cache, where)
        elif any(s in error for s in NUMPY_ABI) and not wheels.get("numpy", Path("numpy-2")).name.startswith("numpy-1"):
            spec = needs.get("numpy", "numpy").replace("numpy", "", 1)
            requirement = "numpy" + (spec + "," if spec else "") + "<2"
            say(f"{module} was built against NumPy 1.x: downloading {requirement}")
            wheels["numpy"] = _download(target, requirement, cache, where)
        else:
            package = next(iter(wheels))
            others = [v for v in target.versions(package) if v != wheels[package].name.split("-")[1]]
            listed = ", ".join(others[:6])
            hint = f": `--version V` installs another release ({listed} have wheels for it)" if others else ""
            raise BackendUnavailable(
                f"{module} does not import on {where} from its wheel {wheels[package].name}: {error}. "
                f"Nothing was installed{hint}"
            )
    raise BackendUnavailable(f"{module} still does not import on {where} after {MAX_DEPENDENCIES} dependencies")


def _unpack(device: Device, wheels: dict[str, Path], partial: str, say: Callable[[str], None]) -> None:
    r = device.transport.run(
        [device.python, "-c", "import os,shutil,sys;shutil.rmtree(sys.argv[1],True);os.makedirs(sys.argv[1])", partial]
    )
    if not r.ok:
        device.fail("creating the install directory", (r.stderr or r.stdout).strip()[-500:])
    remote = []
    for w in wheels.values():
        say(f"pushing {w.name} ({w.stat().st_size >> 20} MiB)")
        device.put_file(w, f"{partial}/{w.name}")
        remote.append(f"{partial}/{w.name}")
    say(f"unpacking {len(remote)} wheel(s) on the device")
    r = device.transport.run([device.python, "-c", UNPACK, partial, *remote], timeout=900)
    if not r.ok:
        device.fail("unpacking the wheels", (r.stderr or r.stdout).strip()[-500:])


def _record_packages(wheels: dict[str, Path]) -> list[dict[str, str]]:
    return [
        {
            "name": name,
            "version": w.name.split("-")[1],
            "wheel": w.name,
            "sha256": hashlib.sha256(w.read_bytes()).hexdigest(),
        }
        for name, w in wheels.items()
    ]


def _write_record(
    device: Device,
    partial: str,
    backend: str,
    package: str,
    version: str,
    platform: dict[str, Any],
    wheels: dict[str, Path],
) -> None:
    record = {
        "backend": backend,
        "runtime": {"name": package, "version": version},
        "platform": platform,
        "packages": _record_packages(wheels),
        "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / RECORD
        local.write_text(json.dumps(record, indent=1) + "\n")
        device.put_file(local, f"{partial}/{RECORD}")


def _no_wheel(
    e: WheelMissing,
    package: str,
    version: str | None,
    backend: str,
    manifest: dict[str, Any] | None,
    target: Target,
    where: str,
) -> BackendUnavailable:
    """What is missing, what pip tried, and what else would run there."""
    msg = f"no {package}{' ' + version if version else ''} wheel for {where}; pip tried {target.describe()}."
    versions = e.versions or ([] if not version else target.versions(package))
    if versions:
        msg += f" {package} has wheels for it at {', '.join(versions[:6])}: `--version {versions[0]}` installs one" + (
            f" (the bundle was built and checked with {version})." if version else "."
        )
    ranked: list[str] = list(MODULES)
    if manifest is not None:
        from .deployer import bundle_profile

        prof = bundle_profile(manifest)
        ranked = list(((prof.data.get("runtimes") or {}).get("ranked") or [])) if prof else ranked
    others = []
    for other in ranked:
        if other != backend and other in MODULES:
            have = target.versions(INSTALL[other])
            if have:
                others.append(f"{other} ({INSTALL[other]} {have[0]})")
    if others:
        scope = f"the profile {manifest['profile']} lists" if manifest else "edgekit has"
        msg += f" Backends {scope} with wheels for it: {', '.join(others)}: build with `--backend B` and set up that."
    msg += f" Or install a prebuilt {package} library into the device's Python yourself (its project's releases)."
    return BackendUnavailable(msg)


__all__ = ["device_imports", "ensure_runtime", "runtime_present", "setup", "setup_device", "site_dir"]

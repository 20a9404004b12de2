"""``edgekit device probe``: what a device is, read from the device (no agent or runtime needed there).
``edgekit device setup [BUNDLE] [--backend B] [--version V]``: install the runtime a bundle needs on a device
that has no network (wheels downloaded here, pushed over the transport).
``edgekit device trust add KEY.pub | list | remove | off``: the keys the device trusts to sign bundles."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..errors import EdgekitError
from .options import device_options, open_device
from .output import emit, logger


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser(
        "device",
        help="read what a device is (OS, CPU features and clusters, memory, accelerators), or set up its runtime",
    )
    s.add_argument("action", choices=["probe", "setup", "trust"])
    s.add_argument(
        "bundle",
        nargs="?",
        help="setup: the bundle whose runtime (backend and version) to install; trust: add | list | remove | off",
    )
    s.add_argument(
        "key", nargs="?", help="trust add: the signer's public key file (KEY.pub); trust remove: it, or its identity"
    )
    s.add_argument("--identity", help="trust add: the name the key signs as (default: its comment); remove: it")
    s.add_argument("--backend", help="setup: the backend whose runtime to install (default: the bundle's)")
    s.add_argument("--version", help="setup: the runtime version (default: the one the bundle was checked with)")
    s.add_argument(
        "--pull", action="store_true", help="setup: also install paho-mqtt, for the agent's pull mode (docs/FLEET.md)"
    )
    device_options(s)
    s.add_argument("--json", action="store_true", help="print the result as one JSON object")
    s.set_defaults(func=run_device)


def probe_device(args: argparse.Namespace) -> dict[str, Any]:
    """Probe the device the flags name (``--local`` when none)."""
    from ..probe import device_probe

    with open_device(args) as dev:
        return device_probe(dev)


def setup_device(args: argparse.Namespace) -> dict[str, Any]:
    """Set up the runtime of ``args.bundle`` (or ``--backend``) on the device the flags name."""
    from ..deployer import bundle_profile
    from ..device_setup import setup

    manifest = None
    if args.bundle:
        from .. import bundle as bundle_mod

        manifest = bundle_mod.load(args.bundle)
    elif not args.backend:
        raise EdgekitError("device setup needs a bundle directory or --backend B (ort, openvino, mnn, ...)")
    prof = bundle_profile(manifest) if manifest else None
    with open_device(args, prof) as dev:
        return setup(
            dev, bundle=args.bundle, backend=args.backend, version=args.version, log=logger(args), pull=args.pull
        )


def setup_text(r: dict[str, Any]) -> str:
    p = r["platform"]
    lines = [
        f"{r['package']} {r['version']} for {r['backend']} on {p['machine']} ({p['libc']} {p['libc_version']}, "
        f"Python {p['python']}) in {r['site']}"
    ]
    lines += [f"  installed {x['name']} {x['version']} ({x['wheel']})" for x in r["installed"]]
    if not r["installed"]:
        lines.append("  already there: nothing installed")
    if r.get("bundle"):
        lines.append(f"  {r['bundle']['name']} installed and loaded")
    lines.append(f"  {r['seconds']} s")
    return "\n".join(lines) + "\n"


def trust_device(args: argparse.Namespace) -> dict[str, Any]:
    """``device trust add KEY.pub | list | remove (IDENTITY|KEY.pub) | off`` on the device the flags name."""
    from ..trust import ACTIONS, trust

    if args.bundle not in ACTIONS:
        raise EdgekitError(f"device trust takes one of {', '.join(ACTIONS)} (got {args.bundle or 'nothing'})")
    if args.backend or args.version:
        raise EdgekitError("device trust takes no --backend or --version")
    key, identity = args.key, args.identity
    if args.bundle == "remove" and key and not identity and not Path(key).expanduser().is_file():
        key, identity = None, key  # `device trust remove NAME`: a signer's identity, not a key file
    with open_device(args) as dev:
        return trust(dev, args.bundle, key, identity)


def trust_text(r: dict[str, Any]) -> str:
    if "signers" in r and isinstance(r["signers"], list):
        if not r["on"]:
            return f"no trusted signers ({r['file']} absent): this device installs unsigned bundles\n"
        rows = [f"  {s['identity']}  {s['key'] or s['line']}" for s in r["signers"]]
        return "\n".join([f"trusted signers ({r['file']}):", *(rows or ["  none: every install is refused"])]) + "\n"
    if r.get("off"):
        return f"signature checks off ({r['file']} removed): this device installs unsigned bundles again\n"
    what = f"added {r['added']}" if "added" in r else f"removed {r['removed']}" if "removed" in r else "replaced"
    return f"{what}: {r['signers']} trusted signer(s) in {r['file']}\n"


def run_device(args: argparse.Namespace) -> int:
    if args.action == "trust":
        emit(args, trust_device(args), trust_text)
        return 0
    if args.key or args.identity:
        raise EdgekitError(f"device {args.action} takes no key or --identity (those are for device trust)")
    if args.action == "setup":
        emit(args, setup_device(args), setup_text)
        return 0
    if args.bundle or args.backend or args.version or args.pull:
        raise EdgekitError("device probe takes no bundle, --backend, --version or --pull (those are for device setup)")
    from ..probe_text import probe_text

    emit(args, probe_device(args), probe_text)
    return 0

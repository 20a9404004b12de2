"""The keys a device trusts to sign bundles (``edgekit device trust``, ``edgekit agent start --trusted-signers``).

They live on the device in ``ROOT/trust/allowed_signers`` (OpenSSH's format), written by the agent's own
``trust`` command run over the provisioning transport (SSH, ADB, serial, this machine); the agent's HTTP API
cannot change them. While the file exists the agent installs only bundles whose manifest a listed key signed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .device import Device
from .errors import EdgekitError
from .signing import public_key

ACTIONS = ("add", "list", "remove", "off")
_IDENTITY = re.compile(r"[A-Za-z0-9._@+-]{1,128}\Z")


def default_identity(key_line: str) -> str:
    """The name a key signs as when none is given: its comment (``user@host``), else ``edgekit``."""
    fields = key_line.split()
    return fields[2] if len(fields) > 2 and _IDENTITY.match(fields[2]) else "edgekit"


def trust(device: Device, action: str, key: str | Path | None = None, identity: str | None = None) -> dict[str, Any]:
    """``list`` the device's trusted signers, ``add`` the public key file ``key`` (as ``identity``), ``remove`` a
    signer (``identity``, or the key ``key``), or turn checking ``off`` (the file is removed: the device installs
    unsigned bundles again). Removing the last signer leaves an empty list: every install is refused."""
    if action not in ACTIONS:
        raise EdgekitError(f"device trust takes {', '.join(ACTIONS)}, not {action!r}")
    extra: list[str] = []
    if action == "add":
        if key is None:
            raise EdgekitError("device trust add needs a public key file: edgekit device trust add KEY.pub")
        line = public_key(key)
        who = identity or default_identity(line)
        if not _IDENTITY.match(who):
            raise EdgekitError(f"invalid --identity {who!r}: use letters, digits and . _ @ + -")
        extra = ["--key", " ".join(line.split()[:2]), "--identity", who]
    elif action == "remove":
        if identity is None and key is None:
            raise EdgekitError("device trust remove needs the signer: an IDENTITY (see `device trust list`) or KEY.pub")
        extra = ["--identity", identity] if identity else ["--key", " ".join(public_key(key or "").split()[:2])]
    elif key is not None or identity is not None:
        raise EdgekitError(f"device trust {action} takes no key or --identity")
    device.ensure_agent()
    return device.trust(action, *extra)


def install_signers(device: Device, signers: str | Path) -> dict[str, Any]:
    """Make the OpenSSH ``allowed_signers`` file ``signers`` (on this machine) the device's trusted signers,
    replacing what it trusted before."""
    signers = Path(signers).expanduser()
    if not signers.is_file():
        raise EdgekitError(
            f'no allowed_signers file {signers}: write one line per key, IDENTITY namespaces="edgekit-bundle" '
            "KEYTYPE KEY (`edgekit sign` prints the line of the key it signs with)"
        )
    device.ensure_agent()
    remote_dir = f"{device.root}/trust"
    device.transport.run(["mkdir", "-p", remote_dir])
    upload = f"{remote_dir}/.allowed_signers.upload"
    device.put_file(signers, upload)
    return device.trust("set", "--file", upload)


__all__ = ["ACTIONS", "default_identity", "install_signers", "trust"]

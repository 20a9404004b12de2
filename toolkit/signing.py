"""Signed bundles: ``edgekit sign`` and ``edgekit verify``, with OpenSSH's own signatures (``ssh-keygen -Y``).

The signature covers ``manifest.json``'s exact bytes; the manifest lists every file's size and sha256, so it
covers the whole bundle. It is written beside the manifest as ``manifest.json.sig`` (the manifest cannot list
its own signature) in the ``edgekit-bundle`` namespace, so a key's signatures for anything else (git commits,
files) are never taken for a bundle's. A device that trusts signers (``edgekit device trust add KEY.pub``)
checks it with the same tool before it installs a version.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from . import bundle as bundle_mod
from .errors import SigningError

NAMESPACE = "edgekit-bundle"
SIGNATURE = "manifest.json.sig"
TIMEOUT_S = 120


def ssh_keygen() -> str:
    """The path of ``ssh-keygen``; SigningError naming the package when it is not installed."""
    tool = shutil.which("ssh-keygen")
    if tool is None:
        raise SigningError(
            "ssh-keygen is not installed here: signing and checking bundles use OpenSSH's ssh-keygen (8.2 or "
            "newer); install the OpenSSH client (Debian/Ubuntu: apt install openssh-client; macOS has it)"
        )
    return tool


def _run(argv: list[str], data: bytes | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            argv, input=data if data is not None else b"", capture_output=True, timeout=TIMEOUT_S, env=env
        )
    except subprocess.TimeoutExpired:
        raise SigningError(f"{' '.join(argv[:3])} did not finish in {TIMEOUT_S} s") from None


def _text(r: subprocess.CompletedProcess) -> str:
    return (r.stderr or r.stdout or b"").decode("utf-8", "replace").strip()


def keygen(path: str | Path, comment: str = "edgekit") -> Path:
    """Make a new ed25519 key pair without a passphrase at ``path`` (and ``path.pub``); returns ``path``."""
    path = Path(path)
    if path.exists():
        raise SigningError(f"{path} exists; choose another path (an existing key is never overwritten)")
    path.parent.mkdir(parents=True, exist_ok=True)
    r = _run([ssh_keygen(), "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
    if r.returncode != 0:
        raise SigningError(f"ssh-keygen could not make a key at {path}: {_text(r)}")
    return path


def public_key(key: str | Path) -> str:
    """The OpenSSH public key line (``ssh-ed25519 AAAA... comment``) of a key file or its ``.pub``."""
    key = Path(key).expanduser()
    pub = key if key.suffix == ".pub" else key.with_name(key.name + ".pub")
    if pub.is_file():
        line = pub.read_text().strip()
    else:
        r = _run([ssh_keygen(), "-y", "-P", "", "-f", str(key)])
        if r.returncode != 0:
            raise SigningError(
                f"cannot read the public key of {key} ({_text(r)}); pass its .pub file (ssh-keygen -y -f {key} > "
                f"{key}.pub makes one)"
            )
        line = r.stdout.decode().strip()
    if len(line.split()) < 2:
        raise SigningError(f"{pub} is not an OpenSSH public key (want 'ssh-ed25519 AAAA... comment')")
    return line


def fingerprint(key: str | Path) -> str:
    """``SHA256:...`` of a key (from its public half)."""
    with tempfile.NamedTemporaryFile("w", suffix=".pub") as f:
        f.write(public_key(key) + "\n")
        f.flush()
        r = _run([ssh_keygen(), "-l", "-f", f.name])
    if r.returncode != 0:
        raise SigningError(f"{key} is not an OpenSSH key: {_text(r)}")
    return r.stdout.decode().split()[1]


def allowed_signers_line(key: str | Path, identity: str | None = None) -> str:
    """The ``allowed_signers`` line that trusts ``key`` as ``identity`` (default: the key's comment) for bundles."""
    fields = public_key(key).split()
    identity = identity or (fields[2] if len(fields) > 2 else "edgekit")
    return f'{identity} namespaces="{NAMESPACE}" {fields[0]} {fields[1]}'


def _signing_key(key: Path, tool: str) -> str:
    """The ``-f`` argument for ``ssh-keygen -Y sign``: the private key, or its ``.pub`` when ssh-agent holds it."""
    agent = bool(os.environ.get("SSH_AUTH_SOCK"))
    pub = key if key.suffix == ".pub" else key.with_name(key.name + ".pub")
    if key.suffix == ".pub":
        if not agent:
            raise SigningError(
                f"{key} is a public key: signing with it needs ssh-agent holding its private key "
                "(SSH_AUTH_SOCK is not set); pass the private key, or start ssh-agent and ssh-add it"
            )
        return str(key)
    if not key.is_file():
        raise SigningError(f"no key file {key}; make one with `ssh-keygen -t ed25519 -f {key}`")
    probe = _run([tool, "-y", "-P", "", "-f", str(key)])
    if probe.returncode == 0:
        return str(key)
    if agent and pub.is_file():
        return str(pub)  # ssh-keygen asks the agent to sign with the private half of this public key
    raise SigningError(
        f"{key} is passphrase-protected (or not a private key: {_text(probe)[:200]}); edgekit never asks for "
        f"the passphrase: add the key to ssh-agent (`ssh-add {key}`) and keep {pub.name} beside it, then sign again"
    )


def sign(bundle_dir: str | Path, key: str | Path, identity: str | None = None) -> dict[str, Any]:
    """Sign bundle ``bundle_dir``'s manifest with ``key`` (an OpenSSH private key, or the ``.pub`` of one that
    ssh-agent holds), writing ``manifest.json.sig`` into the bundle. Returns what was signed, by which key, and
    the ``allowed_signers`` line a device trusts it with (as ``identity``)."""
    bundle_dir = Path(bundle_dir)
    manifest = bundle_mod.load(bundle_dir)  # every file matches the manifest that is signed
    tool = ssh_keygen()
    key = Path(key).expanduser()
    how = _signing_key(key, tool)
    data = (bundle_dir / bundle_mod.MANIFEST).read_bytes()
    r = _run([tool, "-Y", "sign", "-f", how, "-n", NAMESPACE], data)
    if r.returncode != 0 or not r.stdout.startswith(b"-----BEGIN SSH SIGNATURE-----"):
        raise SigningError(f"ssh-keygen could not sign with {key}: {_text(r)[:500]}")
    out = bundle_dir / SIGNATURE
    tmp = out.with_name(f".{SIGNATURE}.tmp-{os.getpid()}")
    tmp.write_bytes(r.stdout)
    os.replace(tmp, out)
    return {
        "bundle": str(bundle_dir),
        "name": manifest["name"],
        "bundle_id": manifest["id"],
        "signature": str(out),
        "key": fingerprint(key),
        "allowed_signers": allowed_signers_line(key, identity),
    }


def signature_of(bundle_dir: str | Path) -> dict[str, str] | None:
    """What a deploy sends with the commit of a signed bundle (the manifest's text as signed, and its signature);
    None when the bundle is not signed."""
    sig = Path(bundle_dir) / SIGNATURE
    if not sig.is_file():
        return None
    return {
        "manifest": (Path(bundle_dir) / bundle_mod.MANIFEST).read_bytes().decode("utf-8"),
        "signature": sig.read_text(),
    }


def verify(bundle_dir: str | Path, signers: str | Path, identity: str | None = None) -> dict[str, Any]:
    """Check bundle ``bundle_dir`` as a device that trusts the ``allowed_signers`` file ``signers`` does: every file
    matches the manifest, and the manifest's signature was made by a trusted key (as ``identity``, if given).
    Returns the signer's identity; SigningError saying what is wrong otherwise."""
    bundle_dir, signers = Path(bundle_dir), Path(signers).expanduser()
    manifest = bundle_mod.load(bundle_dir)
    tool = ssh_keygen()
    if not signers.is_file():
        raise SigningError(f'no allowed_signers file {signers} (lines: IDENTITY namespaces="{NAMESPACE}" KEY)')
    sig = bundle_dir / SIGNATURE
    if not sig.is_file():
        raise SigningError(
            f"{bundle_dir} is not signed (no {SIGNATURE}); sign it with `edgekit sign {bundle_dir} --key KEY`"
        )
    data = (bundle_dir / bundle_mod.MANIFEST).read_bytes()
    if identity:
        identities = [identity]
    else:
        found = _run([tool, "-Y", "find-principals", "-s", str(sig), "-f", str(signers)])
        identities = [x.strip() for x in found.stdout.decode().splitlines() if x.strip()]
        if found.returncode != 0 or not identities:
            raise SigningError(f"{bundle_dir} is signed by a key that {signers} does not trust")
    errors = []
    for who in identities:
        r = _run([tool, "-Y", "verify", "-f", str(signers), "-I", who, "-n", NAMESPACE, "-s", str(sig)], data)
        if r.returncode == 0:
            return {"bundle": str(bundle_dir), "name": manifest["name"], "bundle_id": manifest["id"], "identity": who}
        errors.append(_text(r))
    raise SigningError(
        f"{bundle_dir}: the signature does not verify as {', '.join(identities)} against {signers} (the manifest "
        f"changed after signing, or another key signed it): {'; '.join(errors)[:300]}"
    )


__all__ = ["NAMESPACE", "SIGNATURE", "allowed_signers_line", "keygen", "public_key", "sign", "signature_of", "verify"]

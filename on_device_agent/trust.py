"""Signed bundles: the keys this device trusts, and the check every install passes when it has some.

    ROOT/trust/allowed_signers     OpenSSH allowed_signers: ``IDENTITY namespaces="edgekit-bundle" KEYTYPE KEY``

The file is written only by ``edgekit-agent trust ...`` (run over the provisioning transport: SSH, ADB, a
serial console or this machine), never through the HTTP API. When it exists, a version is installed only if
its ``manifest.json`` carries a signature (``manifest.json.sig``, from ``edgekit sign``) made by one of its
keys in the ``edgekit-bundle`` namespace; ``ssh-keygen -Y`` checks it (no cryptography here). An empty file
trusts no one: every install is refused. No file: nothing is checked (as before signing existed).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import List, Optional

from .storefiles import StoreError, fsync_dir

NAMESPACE = "edgekit-bundle"
SIGNATURE = "manifest.json.sig"
TRUST_DIR = "trust"
SIGNERS = "allowed_signers"
KEY_RE = re.compile(
    r"(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)|sk-ssh-ed25519@openssh\.com|"
    r"sk-ecdsa-sha2-nistp256@openssh\.com) [A-Za-z0-9+/]+=*\Z"
)
IDENTITY_RE = re.compile(r"[A-Za-z0-9._@+-]{1,128}\Z")
TOOL_TIMEOUT_S = 60


class SignatureRefused(StoreError):
    """An install refused because its signature is missing, wrong, untrusted or cannot be checked."""

    def __init__(self, message: str) -> None:
        StoreError.__init__(self, message, 403)


def signers_path(root: str) -> str:
    return os.path.join(os.path.abspath(os.path.expanduser(root)), TRUST_DIR, SIGNERS)


def _ssh_keygen() -> Optional[str]:
    return shutil.which("ssh-keygen")


def _run(argv: List[str], data: Optional[bytes] = None) -> "subprocess.CompletedProcess[bytes]":
    return subprocess.run(
        argv,
        input=data if data is not None else b"",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        timeout=TOOL_TIMEOUT_S,
    )


class Trust(object):
    """The trusted signers of the device root ``root`` (read at every check, so a change needs no restart)."""

    def __init__(self, root: str) -> None:
        self.path = signers_path(root)

    def configured(self) -> bool:
        return os.path.lexists(self.path)

    def check(self, directory: str, what: str) -> Optional[str]:
        """The identity that signed ``directory``'s manifest; SignatureRefused unless a trusted key did.
        None when this device has no trusted signers (nothing is checked)."""
        if not self.configured():
            return None
        try:
            return self._check(directory, what)
        except (OSError, subprocess.SubprocessError) as e:
            raise SignatureRefused(
                "%s was not installed: checking its signature with ssh-keygen failed (%s: %s); the device installs "
                "only bundles whose signature it could check" % (what, type(e).__name__, e)
            ) from None

    def _check(self, directory: str, what: str) -> str:
        tool = _ssh_keygen()
        if tool is None:
            raise SignatureRefused(
                "%s was not installed: this device trusts only signed bundles (%s) but has no ssh-keygen to check "
                "signatures with; install OpenSSH's ssh-keygen on the device (Debian/Ubuntu: apt install "
                "openssh-client) and deploy again" % (what, self.path)
            )
        sig = os.path.join(directory, SIGNATURE)
        manifest = os.path.join(directory, "manifest.json")
        if not os.path.isfile(sig):
            raise SignatureRefused(
                "%s is not signed, and this device installs only bundles signed by a key it trusts (%s): sign it "
                "with `edgekit sign BUNDLE --key KEY` and deploy again" % (what, self.path)
            )
        with open(manifest, "rb") as f:
            data = f.read()
        found = _run([tool, "-Y", "find-principals", "-s", sig, "-f", self.path])
        identities = [line.strip() for line in found.stdout.decode("utf-8", "replace").splitlines() if line.strip()]
        if found.returncode != 0 or not identities:
            raise SignatureRefused(
                "%s is signed by %s, which this device does not trust (%s): sign it with a trusted key, or add "
                "that key's .pub with `edgekit device trust add KEY.pub`" % (what, _signer(tool, sig, data), self.path)
            )
        errors = []
        for identity in identities:
            r = _run([tool, "-Y", "verify", "-f", self.path, "-I", identity, "-n", NAMESPACE, "-s", sig], data)
            if r.returncode == 0:
                return identity
            errors.append((r.stderr or r.stdout).decode("utf-8", "replace").strip())
        raise SignatureRefused(
            "%s: its signature (by %s) does not match its manifest: the bundle was changed after it was signed, "
            "or the signature is another bundle's (ssh-keygen: %s); sign the bundle again and deploy it"
            % (what, ", ".join(identities), "; ".join(e for e in errors if e)[-300:] or "verify failed")
        )

    # -- managing the file (the provisioning side: edgekit-agent trust ...) ---------------------
    def lines(self) -> List[str]:
        if not os.path.isfile(self.path):
            return []
        with open(self.path) as f:
            return [line.rstrip("\n") for line in f if line.strip() and not line.lstrip().startswith("#")]

    def entries(self) -> List[dict]:
        out = []
        for line in self.lines():
            fields = line.split()
            key = next((i for i, x in enumerate(fields) if KEY_RE.match(" ".join(fields[i : i + 2]))), None)
            out.append(
                {
                    "identity": fields[0],
                    "key": " ".join(fields[key : key + 2]) if key is not None else None,
                    "line": line,
                }
            )
        return out

    def add(self, key: str, identity: str) -> dict:
        key = " ".join(key.split()[:2])
        if not KEY_RE.match(key):
            raise ValueError("not an OpenSSH public key (want 'ssh-ed25519 AAAA...', a .pub file's first fields)")
        if not IDENTITY_RE.match(identity):
            raise ValueError("invalid identity %r: use letters, digits and . _ @ + -" % identity)
        kept = [e["line"] for e in self.entries() if e["key"] != key and e["identity"] != identity]
        self._write(kept + ['%s namespaces="%s" %s' % (identity, NAMESPACE, key)])
        return {"added": identity, "key": key, "signers": len(kept) + 1, "file": self.path}

    def remove(self, who: str) -> dict:
        entries = self.entries()
        kept = [e["line"] for e in entries if who not in (e["identity"], e["key"])]
        if len(kept) == len(entries):
            raise ValueError("no trusted signer %r (trusted: %s)" % (who, ", ".join(e["identity"] for e in entries)))
        self._write(kept)
        return {"removed": who, "signers": len(kept), "file": self.path}

    def replace(self, text: str) -> dict:
        lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
        for line in lines:
            fields = line.split()
            if not any(KEY_RE.match(" ".join(fields[i : i + 2])) for i in range(1, len(fields))):
                raise ValueError("not an allowed_signers line (IDENTITY [OPTIONS] KEYTYPE KEY): %r" % line[:200])
        self._write(lines)
        return {"signers": len(lines), "file": self.path}

    def off(self) -> dict:
        had = self.configured()
        if had:
            os.unlink(self.path)
        return {"off": True, "was_on": had, "file": self.path}

    def _write(self, lines: List[str]) -> None:
        d = os.path.dirname(self.path)
        if not os.path.isdir(d):
            os.makedirs(d, 0o700)
        fd, tmp = tempfile.mkstemp(prefix=".allowed_signers.", dir=d)
        with os.fdopen(fd, "w") as f:
            f.write("".join(line + "\n" for line in lines))
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, self.path)
        fsync_dir(d)


def main_trust(root: str, action: str, key: Optional[str], identity: Optional[str], file: Optional[str]) -> int:
    """``edgekit-agent trust ACTION``: one JSON object on stdout; exit 2 with the reason on stderr."""
    trust = Trust(root)
    try:
        if action == "list":
            result = {"on": trust.configured(), "file": trust.path, "signers": trust.entries()}  # type: dict
        elif action == "add":
            if not (key and identity):
                raise ValueError("trust add needs --key 'KEYTYPE KEY' and --identity NAME")
            result = trust.add(key, identity)
        elif action == "remove":
            if not (key or identity):
                raise ValueError("trust remove needs --identity NAME or --key 'KEYTYPE KEY'")
            result = trust.remove(identity or " ".join((key or "").split()[:2]))
        elif action == "set":
            if not file:
                raise ValueError("trust set needs --file ALLOWED_SIGNERS")
            with open(file) as f:
                text = f.read()
            result = trust.replace(text)
            os.unlink(file)
        else:
            result = trust.off()
    except (OSError, ValueError) as e:
        sys.stderr.write("edgekit-agent: error: %s\n" % e)
        return 2
    result["on"] = trust.configured()
    print(json.dumps(result))
    return 0


def _signer(tool: str, sig: str, data: bytes) -> str:
    """The signing key's fingerprint, for the message (``-Y check-novalidate``; "a key" if the tool cannot say)."""
    try:
        r = _run([tool, "-Y", "check-novalidate", "-n", NAMESPACE, "-s", sig], data)
    except (OSError, subprocess.SubprocessError):
        return "a key"
    m = re.search(
        r"(SHA256:[A-Za-z0-9+/=]+)", r.stdout.decode("utf-8", "replace") + r.stderr.decode("utf-8", "replace")
    )
    return "key %s" % m.group(1) if m else "a key"

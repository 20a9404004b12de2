"""Model files encrypted at rest, when the agent is given a key (``--encrypt-key``).

AES-256-GCM from the ``cryptography`` package (imported only when a key is given: the agent itself needs
nothing beyond the standard library). A sealed file is::

    MAGIC (8 bytes) | key id (8 bytes) | nonce (12 bytes) | ciphertext and GCM tag

with ``MAGIC + key id + the file's name in the manifest`` as associated data, so a sealed file cannot be
swapped for another file of the bundle. The key id (a hash of the key, never the key) lets a wrong key be
named as such instead of looking like damage.

Where the key comes from (:func:`load_key`):

- ``FILE``: 32 bytes (raw, 64 hex digits or base64) in a regular file owned by the agent's user and readable
  by nobody else (mode 600 or stricter); anything else is refused with what to change.
- ``keyring:NAME``: a ``user`` key named NAME in the user's Linux kernel keyring (read through the
  ``keyctl`` system call; add it with ``keyctl padd user NAME @u < FILE``). Other keystores (Android
  Keystore, TPM) are not read.
"""

import base64
import binascii
import ctypes
import hashlib
import os
import platform
import stat
import sys
from typing import Any, Dict, Optional

MAGIC = b"EKSEAL01"
HEADER = len(MAGIC) + 8 + 12
KEYRING = "keyring:"
MAKE_KEY = "head -c 32 /dev/urandom > FILE && chmod 600 FILE"


class KeyProblem(ValueError):
    """The key cannot be used (file mode, owner, size, keyring, missing package): the message says what to do."""


def need_cryptography() -> Any:
    """``AESGCM``, or a KeyProblem that names the package and how to install it."""
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        raise KeyProblem(
            "encryption at rest needs the Python package 'cryptography' on the device, and %s (Python %s) cannot "
            "import it: install it there with `%s -m pip install cryptography` (on the host: pip install "
            "'edgekit[encrypt]'), or start the agent without --encrypt-key"
            % (sys.executable, platform.python_version(), sys.executable or "python3")
        ) from None
    return AESGCM


def _decode(raw: bytes, where: str) -> bytes:
    text = raw.strip()
    if len(raw) == 32:
        return raw
    for decode in (binascii.unhexlify, base64.b64decode):
        try:
            key = decode(text)
        except (binascii.Error, ValueError):
            continue
        if len(key) == 32:
            return key
    raise KeyProblem(
        "%s does not hold a 256-bit key (32 raw bytes, 64 hex digits or base64 of 32 bytes; it has %d bytes): "
        "make one with `%s`" % (where, len(raw), MAKE_KEY)
    )


def read_key_file(path: str) -> bytes:
    """The key in ``path``, after checking that only the agent's user can read it."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise KeyProblem(
            "cannot read the key file %s (%s): make one with `%s`" % (path, e.strerror, MAKE_KEY)
        ) from None
    if not stat.S_ISREG(st.st_mode):
        raise KeyProblem("the key file %s is not a regular file" % path)
    uid = os.geteuid() if hasattr(os, "geteuid") else st.st_uid
    if st.st_uid != uid:
        raise KeyProblem(
            "the key file %s is owned by uid %d, not by the agent's user (uid %d): the key must belong to the "
            "user the agent runs as (chown it, or run the agent as its owner)" % (path, st.st_uid, uid)
        )
    if st.st_mode & 0o077:
        raise KeyProblem(
            "the key file %s has mode %04o: other users can read it. The key must be readable only by the agent's "
            "user: chmod 600 %s" % (path, stat.S_IMODE(st.st_mode), path)
        )
    with open(path, "rb") as f:
        return _decode(f.read(4096), "the key file %s" % path)


# keyctl(2) numbers per machine (the C library has no wrapper; libkeyutils may be absent).
_KEYCTL_NR = {"x86_64": 250, "amd64": 250, "aarch64": 219, "arm64": 219, "riscv64": 219, "armv7l": 311, "i686": 288}
_KEYCTL_SEARCH, _KEYCTL_READ, _KEY_SPEC_USER_KEYRING = 10, 11, -4


def read_keyring(name: str) -> bytes:
    """The ``user`` key NAME from the user's kernel keyring (Linux)."""
    where = "the kernel keyring key %r" % name
    nr = _KEYCTL_NR.get(platform.machine().lower())
    if not sys.platform.startswith("linux") or nr is None:
        raise KeyProblem(
            "%s: this agent reads the kernel keyring on Linux only (x86_64, aarch64, armv7l, i686, riscv64), "
            "and this is %s %s; use a key file (--encrypt-key FILE)" % (where, sys.platform, platform.machine())
        )
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    serial = libc.syscall(
        nr, _KEYCTL_SEARCH, ctypes.c_long(_KEY_SPEC_USER_KEYRING), b"user", name.encode("utf-8"), ctypes.c_long(0)
    )
    if serial < 0:
        raise KeyProblem(
            "%s cannot be found (%s): add it with `keyctl padd user %s @u < FILE` as the agent's user"
            % (where, os.strerror(ctypes.get_errno()), name)
        )
    buf = ctypes.create_string_buffer(4096)
    n = libc.syscall(nr, _KEYCTL_READ, ctypes.c_long(serial), buf, ctypes.c_long(len(buf)))
    if n < 0:
        raise KeyProblem("%s cannot be read (%s)" % (where, os.strerror(ctypes.get_errno())))
    return _decode(buf.raw[: min(n, len(buf))], where)


class Sealer(object):
    """Seals and opens model files with one key."""

    def __init__(self, key: bytes, source: str) -> None:
        self._aead = need_cryptography()(key)
        self.source = source
        self.key_id = hashlib.sha256(b"edgekit at rest\0" + key).hexdigest()[:16]

    def describe(self) -> Dict[str, str]:
        return {"key": self.source, "key_id": self.key_id, "cipher": "AES-256-GCM"}

    def _aad(self, name: str) -> bytes:
        return MAGIC + binascii.unhexlify(self.key_id) + name.encode("utf-8")

    def seal_file(self, path: str, name: str) -> None:
        """Replace the plain file at ``path`` by its sealed form (atomically, durably)."""
        with open(path, "rb") as f:
            plain = f.read()
        nonce = os.urandom(12)
        sealed = self._aead.encrypt(nonce, plain, self._aad(name))
        tmp = path + ".seal"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + binascii.unhexlify(self.key_id) + nonce + sealed)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def open_bytes(self, data: bytes, name: str) -> bytes:
        """The plain bytes of sealed ``data``; ValueError says why not (another key, or damage)."""
        key_id = binascii.hexlify(data[len(MAGIC) : len(MAGIC) + 8]).decode()
        if key_id != self.key_id:
            raise WrongKey(key_id)
        from cryptography.exceptions import InvalidTag

        try:
            return self._aead.decrypt(data[len(MAGIC) + 8 : HEADER], data[HEADER:], self._aad(name))
        except InvalidTag:
            raise ValueError("its GCM tag does not verify") from None


class WrongKey(ValueError):
    def __init__(self, key_id: str) -> None:
        ValueError.__init__(self, key_id)
        self.key_id = key_id


def sealed(path: str) -> bool:
    """The file at ``path`` is sealed (starts with the magic)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def load_key(spec: Optional[str]) -> Optional[Sealer]:
    """A Sealer for ``FILE`` or ``keyring:NAME`` (None for no key); KeyProblem says what is wrong."""
    if not spec:
        return None
    need_cryptography()  # the missing package is named before anything about the key
    if spec.startswith(KEYRING):
        return Sealer(read_keyring(spec[len(KEYRING) :]), spec)
    path = os.path.abspath(os.path.expanduser(spec))
    return Sealer(read_key_file(path), path)


def config_path(root: str) -> str:
    return os.path.join(os.path.abspath(os.path.expanduser(root)), "agent", "config.json")


def _config(root: str) -> Dict[str, Any]:
    import json

    try:
        with open(config_path(root)) as f:
            config = json.load(f)
        return config if isinstance(config, dict) else {}
    except (OSError, ValueError):
        return {}


def key_spec(root: str, given: Optional[str]) -> Optional[str]:
    """The key the agent serving ``root`` uses: ``given``, else the one remembered by :func:`remember`."""
    if not given:
        return _config(root).get("encrypt_key") or None
    return given if given.startswith(KEYRING) else os.path.abspath(os.path.expanduser(given))


def remember(root: str, spec: str) -> None:
    """Keep the key's path (never the key) in ``ROOT/agent/config.json``: a restart, a reboot or a deploy that
    starts the agent again keeps encrypting with it."""
    import json

    config = _config(root)
    if config.get("encrypt_key") == spec:
        return
    config["encrypt_key"] = spec
    path = config_path(root)
    if not os.path.isdir(os.path.dirname(path)):
        os.makedirs(os.path.dirname(path))
    tmp = path + ".%d.tmp" % os.getpid()
    with open(tmp, "w") as f:
        json.dump(config, f)
    os.replace(tmp, path)

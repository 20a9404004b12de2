"""The local transport: this machine is the device (the agent runs in a subprocess)."""

import shutil
import subprocess
import sys
from pathlib import Path

from ..errors import TransportError
from .base import AddressError, CommandResult, Flag, Transport


class LocalTransport(Transport):
    name = "local"
    url_form = "local://"
    selector = Flag("--local", "", "this machine is the device (default)")
    is_host = True
    no_connect_timeout = "local:// is this machine, there is nothing to connect to"
    description = "local"

    @classmethod
    def parse_address(cls, address, query, url):
        if address not in ("", "/") or query:
            raise AddressError(f"{url!r}: local:// takes no host, path or options")
        return None, {}

    @classmethod
    def availability(cls):
        return {"ok": True, "detail": f"agent runs with {sys.executable}"}

    @classmethod
    def open(cls, target=None, **options):
        return cls()

    def run(self, argv, timeout=120):
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except FileNotFoundError as e:
            return CommandResult(127, "", f"{argv[0]}: not found ({e})")
        except subprocess.TimeoutExpired:
            raise TransportError(f"local command {argv[0]} did not finish within {timeout} s") from None
        return CommandResult(p.returncode, p.stdout, p.stderr)

    def put_file(self, local, remote, progress=None):
        remote = Path(remote)
        remote.parent.mkdir(parents=True, exist_ok=True)
        part = remote.with_name(remote.name + ".part")
        shutil.copyfile(local, part)
        part.replace(remote)
        if progress:
            size = Path(local).stat().st_size
            progress(remote.name, size, size)

    def forward(self, remote_port):
        return remote_port


TRANSPORT = LocalTransport

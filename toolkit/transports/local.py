"""The local transport: this machine is the device (the agent runs in a subprocess)."""

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..errors import TransportError
from .base import AddressError, CommandResult, Flag, ProgressFn, Transport


class LocalTransport(Transport):
    name = "local"
    url_form = "local://"
    selector = Flag("--local", "", "this machine is the device (default)")
    is_host = True
    no_connect_timeout = "local:// is this machine, there is nothing to connect to"
    description = "local"

    @classmethod
    def parse_address(cls, address: str, query: dict[str, str], url: str) -> tuple[str | None, dict[str, Any]]:
        if address not in ("", "/") or query:
            raise AddressError(f"{url!r}: local:// takes no host, path or options")
        return None, {}

    @classmethod
    def availability(cls) -> dict[str, Any]:
        return {"ok": True, "detail": f"agent runs with {sys.executable}"}

    @classmethod
    def open(cls, target: str | None = None, **options: Any) -> "LocalTransport":
        return cls()

    def run(self, argv: list[str], timeout: float = 120) -> CommandResult:
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except FileNotFoundError as e:
            return CommandResult(127, "", f"{argv[0]}: not found ({e})")
        except subprocess.TimeoutExpired:
            raise TransportError(f"local command {argv[0]} did not finish within {timeout} s") from None
        return CommandResult(p.returncode, p.stdout, p.stderr)

    def put_file(self, local: Any, remote: str, progress: ProgressFn | None = None) -> None:
        dest = Path(remote)
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = dest.with_name(dest.name + ".part")
        shutil.copyfile(local, part)
        part.replace(dest)
        if progress:
            size = Path(local).stat().st_size
            progress(dest.name, size, size)

    def forward(self, remote_port: int) -> int:
        return remote_port


TRANSPORT = LocalTransport

"""SSH transport (paramiko): ~/.ssh/config, known_hosts verification, key auth, SFTP,
and the agent's API reached through an SSH-forwarded port, never through the network.
"""

import os
import select
import shlex
import socket
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from ..errors import BackendUnavailable, TransportError
from .base import AddressError, CommandResult, Flag, Forwarder, ProgressFn, Transport


def _port(text: str, target: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise AddressError(f"bad SSH port {text!r} in {target!r}: use [USER@]HOST[:PORT]") from None
    if not 0 < port < 65536:
        raise AddressError(f"{target!r} has a bad port {port} (1-65535): use [USER@]HOST[:PORT]")
    return port


def parse_target(target: str) -> tuple[str | None, str, int | None]:
    """``[user@]host[:port]`` -> (user, host, port)."""
    whole = target
    user = None
    if "@" in target:
        user, target = target.rsplit("@", 1)
    port = None
    if target.startswith("["):  # [ipv6]:port
        host, _, rest = target[1:].partition("]")
        if rest.startswith(":"):
            port = _port(rest[1:], whole)
    elif target.count(":") == 1:
        host, p = target.split(":")
        port = _port(p, whole)
    else:
        host = target
    if not host:
        raise AddressError(f"{whole!r} has no host: use [USER@]HOST[:PORT]")
    return user, host, port


def reason(e: BaseException, timeout: float | None = None) -> str:
    """What went wrong, never empty: paramiko raises timeouts and closed channels without a message."""
    text = str(e).strip()
    if isinstance(e, (socket.timeout, TimeoutError)):
        within = f" within {timeout:g} s" if timeout else ""
        return f"timed out: no answer{within}" + (f" ({text})" if text and text != "timed out" else "")
    if isinstance(e, EOFError):
        return text or "the connection was closed by the device"
    return text or type(e).__name__


def _pump(client: socket.socket, chan: Any) -> None:
    """Copy bytes both ways between a host socket and an SSH channel until either side ends."""
    try:
        while True:
            r, _, _ = select.select([client, chan], [], [], 1.0)
            if client in r:
                data = client.recv(65536)
                if not data:
                    break
                chan.sendall(data)
            if chan in r:
                data = chan.recv(65536)
                if not data:
                    break
                client.sendall(data)
            if chan.closed or not chan.get_transport().is_active():
                break
    except Exception:  # the SSH link broke (EOFError, SSHException, OSError): end this connection
        pass
    finally:
        try:
            chan.close()
        except Exception:  # closing a channel of a dead transport raises too
            pass
        try:
            client.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        client.close()


def _AppendNewHostKey(path: str) -> Any:  # noqa: N802  (a policy class, built once paramiko is imported)
    """accept-new: trust a host key seen for the first time and append one line for it to ``path``.

    The file is only ever appended to: other hosts' keys, hashed entries and comments stay as they are.
    """
    import paramiko

    class AppendNewHostKey(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            client.get_host_keys().add(hostname, key.get_name(), key)
            line = paramiko.hostkeys.HostKeyEntry([hostname], key).to_line()
            try:
                os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
                with open(path, "a") as f:
                    f.write(line)
            except OSError:
                pass  # the key is trusted for this connection; it is asked about again next time

    return AppendNewHostKey()


class SSHTransport(Transport):
    name = "ssh"
    url_form = "ssh://USER@HOST[:PORT]"
    selector = Flag("--ssh", "", "a device reached over SSH", metavar="[USER@]HOST[:PORT]")
    flags = (
        Flag(
            "--ssh-key",
            "key_file",
            "private key for --ssh (default: ~/.ssh/config, ssh-agent, ~/.ssh/id_*)",
            inventory="key",
        ),
        Flag("--ssh-config", "ssh_config", "ssh client config file (default ~/.ssh/config)", inventory="ssh_config"),
        Flag(
            "--known-hosts",
            "known_hosts",
            "extra known_hosts file to verify the device's host key against",
            inventory="known_hosts",
        ),
    )
    connect_timeout = "timeout"

    @classmethod
    def parse_address(cls, address: str, query: dict[str, str], url: str) -> tuple[str | None, dict[str, Any]]:
        if query or "/" in address.rstrip("/"):
            raise AddressError(f"{url!r}: ssh:// takes only USER@HOST[:PORT]; put keys in the entry's key/known_hosts")
        address = address.rstrip("/")
        if not address:
            raise AddressError(f"{url!r} has no host; use ssh://USER@HOST[:PORT]")
        user, host, port = parse_target(address)
        host = f"[{host}]" if ":" in host else host
        return (f"{unquote(user)}@" if user else "") + host + (f":{port}" if port else ""), {}

    @classmethod
    def availability(cls) -> dict[str, Any]:
        try:
            import paramiko
        except ImportError:
            return {"ok": False, "detail": "paramiko is not installed: pip install 'edgekit[ssh]'"}
        return {"ok": True, "detail": f"paramiko {paramiko.__version__}; host keys verified against known_hosts"}

    def __init__(
        self,
        target: str,
        key_file: str | None = None,
        ssh_config: str | None = None,
        known_hosts: str | None = None,
        timeout: float = 15.0,
    ) -> None:
        if not target:
            raise TransportError("ssh needs a target: [USER@]HOST[:PORT]")
        try:
            import paramiko
        except ImportError:
            raise BackendUnavailable("the SSH transport needs paramiko: pip install 'edgekit[ssh]'") from None
        self._paramiko = paramiko
        user, host, port = parse_target(target)
        cfg = {}
        config_path = Path(ssh_config or os.path.expanduser("~/.ssh/config"))
        if config_path.is_file():
            conf = paramiko.SSHConfig.from_path(str(config_path))
            cfg = conf.lookup(host)
        self.host = cfg.get("hostname", host)
        self.port = port or int(cfg.get("port", 22))
        self.user = user or cfg.get("user") or os.environ.get("USER") or "root"
        self.description = f"ssh {self.user}@{self.host}:{self.port}"
        keys = [key_file] if key_file else [os.path.expanduser(k) for k in cfg.get("identityfile", [])]
        client = paramiko.SSHClient()
        client.load_system_host_keys()
        if known_hosts and not os.path.isfile(known_hosts):
            raise TransportError(f"--known-hosts {known_hosts}: no such file")
        config_known = [os.path.expanduser(p) for p in cfg.get("userknownhostsfile", "").split()]
        for kh in ([known_hosts] if known_hosts else []) + config_known:
            if kh and os.path.isfile(kh):
                client.load_host_keys(kh)
        strict = str(cfg.get("stricthostkeychecking", "yes")).lower()
        # accept-new: trust a host seen for the first time and remember it; a changed key is still refused.
        accept_new = strict in ("no", "off", "accept-new")
        if strict == "accept-new":
            save_to = (config_known or [os.path.expanduser("~/.ssh/known_hosts")])[0]
            client.set_missing_host_key_policy(_AppendNewHostKey(save_to))
        else:
            client.set_missing_host_key_policy(paramiko.AutoAddPolicy() if accept_new else paramiko.RejectPolicy())
        try:
            client.connect(
                self.host,
                self.port,
                username=self.user,
                key_filename=keys or None,
                timeout=timeout,
                banner_timeout=timeout,
                auth_timeout=timeout,
                allow_agent=True,
                look_for_keys=not keys,
            )
        except paramiko.BadHostKeyException as e:
            raise TransportError(
                f"{self.description}: the host key does not match known_hosts "
                f"(expected {e.expected_key.get_base64()[:20]}..., "
                f"got {e.key.get_base64()[:20]}...). The device was reinstalled, or someone is in the middle. "
                "Verify it, then update known_hosts (ssh-keygen -R HOST)."
            ) from None
        except paramiko.AuthenticationException as e:
            raise TransportError(
                f"{self.description}: authentication failed ({e}); install your public key on the device "
                "(ssh-copy-id) or pass --ssh-key"
            ) from None
        except paramiko.SSHException as e:
            if "not found in known_hosts" in str(e):
                raise TransportError(
                    f"{self.description}: the host key is not in known_hosts, so the device cannot be verified. "
                    f"Check its fingerprint, then add it: ssh-keyscan -p {self.port} {self.host} >> ~/.ssh/known_hosts "
                    "(or connect once with ssh)."
                ) from None
            raise TransportError(f"{self.description}: SSH error: {reason(e, timeout)}") from None
        except OSError as e:
            why = reason(e, timeout) if isinstance(e, socket.timeout) else e.strerror or reason(e, timeout)
            raise TransportError(f"cannot connect to {self.description}: {why}") from None
        self.client = client
        self._sftp = None
        self._forwards: list[Forwarder] = []

    def _check(self) -> Any:
        t = self.client.get_transport()
        if t is None or not t.is_active():
            raise TransportError(f"the connection to {self.description} was lost")
        return t

    def run(self, argv: list[str], timeout: float = 120) -> CommandResult:
        self._check()
        cmd = " ".join(shlex.quote(str(a)) for a in argv)
        try:
            _, stdout, stderr = self.client.exec_command(cmd, timeout=timeout)
            out = stdout.read().decode("utf-8", "replace")
            err = stderr.read().decode("utf-8", "replace")
            rc = stdout.channel.recv_exit_status()
        except (self._paramiko.SSHException, EOFError, OSError, socket.timeout) as e:
            if isinstance(e, (socket.timeout, TimeoutError)):
                raise TransportError(f"{self.description}: {argv[0]} {reason(e, timeout)}") from None
            raise TransportError(f"lost {self.description} while running {argv[0]}: {reason(e, timeout)}") from None
        return CommandResult(rc, out, err)

    def sftp(self) -> Any:
        if self._sftp is None:
            self._check()
            self._sftp = self.client.open_sftp()
        return self._sftp

    def put_file(self, local: Any, remote: str, progress: ProgressFn | None = None) -> None:
        part = remote + ".part"
        name = os.path.basename(remote)
        try:
            sftp = self.sftp()
            parent = os.path.dirname(remote)
            self.run(["mkdir", "-p", parent])
            cb = (lambda done, total: progress(name, done, total)) if progress else None
            sftp.put(str(local), part, callback=cb)
            sftp.posix_rename(part, remote)
        except (self._paramiko.SSHException, EOFError, OSError) as e:
            raise TransportError(f"upload of {name} to {self.description} failed: {reason(e)}") from None

    def forward(self, remote_port: int) -> int:
        """A host loopback port; each connection to it is a direct-tcpip channel to the device's ``remote_port``."""
        t = self._check()
        remote_port = int(remote_port)
        for fw in self._forwards:
            if fw.remote_port == remote_port and fw.alive:
                return fw.port

        def open_channel(client: socket.socket, addr: Any) -> None:
            try:
                chan = t.open_channel("direct-tcpip", ("127.0.0.1", remote_port), addr)
            except Exception:  # paramiko raises ChannelException/SSHException/EOFError when the link is gone
                client.close()
                return
            _pump(client, chan)

        fw = Forwarder(remote_port, open_channel, name="ssh-forward")
        self._forwards.append(fw)
        return fw.port

    def close(self) -> None:
        for fw in self._forwards:
            fw.close()
        self._forwards = []
        if self._sftp is not None:
            try:
                self._sftp.close()
            except Exception:  # the link may be gone already
                pass
        self.client.close()


TRANSPORT = SSHTransport

"""A throwaway, real OpenSSH server for tests.

``ThrowawaySSHD`` starts ``/usr/sbin/sshd`` on 127.0.0.1 with a free port and
everything it needs (host key, client key pair, authorized_keys, known_hosts,
ssh client config, log) in its own temporary directory.  Nothing outside that
directory is touched:

* as root, sshd insists that its privilege-separation directory ``/run/sshd``
  exists.  Instead of creating it on the host, sshd runs in its own mount
  namespace (``unshare -m``) with a private tmpfs mounted over ``/run``, so the
  directory only ever exists inside that namespace and vanishes with it;
* no system sshd is started or needed, and nothing listens on port 22.

Usage::

    with ThrowawaySSHD() as sshd:
        client.connect(sshd.host, sshd.port, username=sshd.user,
                       key_filename=sshd.client_key)
        ...
        sshd.kill_sessions()   # simulate a dropped connection

Requires the ``openssh-server`` package (``find_sshd()`` raises a clear
``RuntimeError`` when it is missing) and ``ssh-keygen`` (openssh-client).
"""

from __future__ import annotations

import atexit
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Dict, List, Optional

__all__ = ["ThrowawaySSHD", "find_sshd", "SSH_CONFIG_HOST"]

#: The ``Host`` alias written to :attr:`ThrowawaySSHD.ssh_config`.
SSH_CONFIG_HOST = "edgekit-test-device"

_INSTALL_HINT = "openssh-server is not installed: apt-get install openssh-server"

_unshare_ok: Optional[bool] = None

# Run inside `unshare -m --propagation private` (so no mount here is seen by
# the host).  $1 is the server's temp dir, the rest is the sshd command line.
# A fresh tmpfs on /run gives sshd its /run/sshd; the host's /run entries are
# then bind-mounted back (best effort) so that commands run over SSH still see
# the real /run (sockets in /run/postgresql, /run/lock, ...).
_NAMESPACE_SCRIPT = r"""
d=$1; shift
mkdir -p "$d/hostrun" && mount --rbind /run "$d/hostrun" || exit 1
mount -t tmpfs -o mode=755 tmpfs /run || exit 1
for e in "$d"/hostrun/* "$d"/hostrun/.[!.]* "$d"/hostrun/..?*; do
    [ -e "$e" ] || [ -L "$e" ] || continue
    n=/run/${e##*/}
    if [ -L "$e" ]; then ln -s "$(readlink "$e")" "$n"
    elif [ -d "$e" ]; then mkdir -p "$n" && mount --rbind "$e" "$n"
    else { [ -e "$n" ] || : > "$n"; } && mount --bind "$e" "$n"
    fi || echo "edgekit ThrowawaySSHD: warning: could not expose $n to sessions" >&2
done
mkdir -p /run/sshd || exit 1
exec "$@"
"""


#: Variables a session gets from the environment sshd was started in (``SetEnv``): a session's HOME, caches and
#: temporary files stay where the starting process keeps its own (a test run's own HOME: tests/harness/isolation.py),
#: not in the HOME that /etc/passwd names.
SESSION_ENV = ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "TMPDIR")


def _session_env() -> str:
    pairs = [f'{k}="{os.environ[k]}"' for k in SESSION_ENV if os.environ.get(k) and '"' not in os.environ[k]]
    return f"SetEnv {' '.join(pairs)}\n" if pairs else ""


def find_sshd() -> str:
    """Return the path of the OpenSSH server binary, or raise RuntimeError."""
    candidates = [shutil.which("sshd")]
    candidates += ["/usr/sbin/sshd", "/usr/local/sbin/sshd", "/sbin/sshd"]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            # sshd refuses to re-exec itself unless started by absolute path.
            return os.path.abspath(path)
    raise RuntimeError(_INSTALL_HINT)


def _find_tool(name: str) -> str:
    path = shutil.which(name) or next(
        (p for p in (f"/usr/bin/{name}", f"/bin/{name}") if os.access(p, os.X_OK)),
        None,
    )
    if not path:
        raise RuntimeError(f"{name} not found (it is part of openssh-client / util-linux)")
    return path


def _can_unshare_mounts() -> bool:
    """Whether ``unshare -m`` + mounting a tmpfs works here (cached)."""
    global _unshare_ok
    if _unshare_ok is None:
        unshare = shutil.which("unshare")
        if not unshare:
            _unshare_ok = False
        else:
            try:
                r = subprocess.run(
                    [unshare, "-m", "--propagation", "private", "sh", "-c", "mount -t tmpfs tmpfs /run"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=10,
                )
                _unshare_ok = r.returncode == 0
            except (OSError, subprocess.SubprocessError):
                _unshare_ok = False
    return _unshare_ok


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _children_map() -> Dict[int, List[int]]:
    """ppid -> [pid, ...] for every process visible in /proc."""
    children: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
        except OSError:
            continue
        # "pid (comm) state ppid ..." -- comm may itself contain ") ".
        try:
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    return children


def _descendants(pid: int) -> List[int]:
    """All descendants of ``pid``, parents before their children."""
    children = _children_map()
    out: List[int] = []
    todo = list(children.get(pid, []))
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _kill(pids: List[int], sig: int = signal.SIGKILL) -> List[int]:
    killed = []
    for p in pids:
        try:
            os.kill(p, sig)
            killed.append(p)
        except ProcessLookupError:
            pass
    return killed


class ThrowawaySSHD:
    """A real OpenSSH server on 127.0.0.1:<free port>, for the duration of a test.

    Attributes (valid after :meth:`start`): ``host``, ``port``, ``user``,
    ``client_key`` (private key path; ``client_key + ".pub"`` is the public
    key), ``known_hosts``, ``ssh_config`` (use with ``ssh -F ssh_config
    edgekit-test-device``), ``log`` (sshd's VERBOSE log), ``host_key``,
    ``sshd_config``, ``authorized_keys``, ``tmpdir``, ``pid`` (the listener).
    """

    def __init__(
        self,
        startup_timeout: float = 15.0,
        user: Optional[str] = None,
        netns: Optional[str] = None,
        host: Optional[str] = None,
        port: Optional[int] = None,
    ):
        # netns: run sshd inside that network namespace (``ip netns exec``),
        # listening on ``host``:``port`` there (both required with netns).
        if netns and not (host and port):
            raise ValueError("ThrowawaySSHD(netns=...) needs the host and port to listen on in there")
        self.netns = netns
        self._fixed_port = port
        self.host = host or "127.0.0.1"
        self.port: int = 0
        self.user = user or pwd.getpwuid(os.geteuid()).pw_name
        self.startup_timeout = startup_timeout
        self.tmpdir: Optional[str] = None
        self.client_key = self.known_hosts = self.ssh_config = self.log = ""
        self.host_key = self.sshd_config = self.authorized_keys = ""
        self.proc: Optional[subprocess.Popen] = None
        self.startup_seconds: Optional[float] = None
        self._log_fh = None

    # -- context manager -------------------------------------------------
    def __enter__(self) -> "ThrowawaySSHD":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def pid(self) -> Optional[int]:
        """PID of the listening sshd (the process that must not be killed)."""
        return self.proc.pid if self.proc else None

    # -- lifecycle -------------------------------------------------------
    def start(self) -> "ThrowawaySSHD":
        if self.proc is not None:
            raise RuntimeError("ThrowawaySSHD already started")
        t0 = time.monotonic()
        sshd = find_sshd()
        keygen = _find_tool("ssh-keygen")
        self.tmpdir = tempfile.mkdtemp(prefix="edgekit-sshd-")
        atexit.register(self.stop)
        try:
            d = self.tmpdir
            self.host_key = os.path.join(d, "ssh_host_ed25519_key")
            self.client_key = os.path.join(d, "client_ed25519")
            self.authorized_keys = os.path.join(d, "authorized_keys")
            self.known_hosts = os.path.join(d, "known_hosts")
            self.ssh_config = os.path.join(d, "ssh_config")
            self.sshd_config = os.path.join(d, "sshd_config")
            self.log = os.path.join(d, "sshd.log")
            for path, comment in ((self.host_key, "edgekit-test-hostkey"), (self.client_key, "edgekit-test-client")):
                subprocess.run(
                    [keygen, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path],
                    check=True,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
            shutil.copyfile(self.client_key + ".pub", self.authorized_keys)
            os.chmod(self.authorized_keys, 0o600)

            # The free port is found by bind(0)+close, so another process may
            # grab it before sshd binds: retry with a new port in that case.
            last_error = ""
            for _attempt in range(5):
                self.port = self._fixed_port or _free_port(self.host)
                self._write_port_files()
                err = self._launch(sshd)
                if err is None:
                    self.startup_seconds = time.monotonic() - t0
                    return self
                last_error = err
                if "Address already in use" not in err:
                    break
            raise RuntimeError(last_error)
        except BaseException:
            self.stop()
            raise

    def _write_port_files(self) -> None:
        with open(self.host_key + ".pub") as f:
            keytype, blob = f.read().split()[:2]
        with open(self.known_hosts, "w") as f:
            f.write(f"[{self.host}]:{self.port} {keytype} {blob}\n")
        with open(self.sshd_config, "w") as f:
            f.write(
                f"ListenAddress {self.host}\n"
                f"Port {self.port}\n"
                f"HostKey {self.host_key}\n"
                f"AuthorizedKeysFile {self.authorized_keys}\n"
                f"PidFile {os.path.join(self.tmpdir, 'sshd.pid')}\n"
                "UsePAM no\n"
                "StrictModes no\n"
                "PubkeyAuthentication yes\n"
                "PasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\n"
                "PermitRootLogin prohibit-password\n"
                "AllowTcpForwarding yes\n"
                "UseDNS no\n"
                "PrintMotd no\n"
                "PrintLastLog no\n"
                "Subsystem sftp internal-sftp\n"
                "LogLevel VERBOSE\n" + _session_env()
            )
        with open(self.ssh_config, "w") as f:
            f.write(
                f"Host {SSH_CONFIG_HOST}\n"
                f"    HostName {self.host}\n"
                f"    Port {self.port}\n"
                f"    User {self.user}\n"
                f"    IdentityFile {self.client_key}\n"
                "    IdentitiesOnly yes\n"
                f"    UserKnownHostsFile {self.known_hosts}\n"
                "    GlobalKnownHostsFile /dev/null\n"
                "    StrictHostKeyChecking yes\n"
                "    BatchMode yes\n"
                "    PasswordAuthentication no\n"
                "    LogLevel ERROR\n"
            )

    def _launch(self, sshd: str) -> Optional[str]:
        """Start sshd and wait for it; return None on success, else an error."""
        sshd_cmd = [sshd, "-D", "-e", "-E", self.log, "-f", self.sshd_config]
        if os.geteuid() == 0:
            if _can_unshare_mounts():
                # Private mount namespace + tmpfs on /run: /run/sshd exists
                # only in there; the host's /run is never touched.
                cmd = [
                    "unshare",
                    "-m",
                    "--propagation",
                    "private",
                    "sh",
                    "-c",
                    _NAMESPACE_SCRIPT,
                    "sh",
                    self.tmpdir,
                ] + sshd_cmd
            elif os.path.isdir("/run/sshd"):
                cmd = sshd_cmd
            else:
                raise RuntimeError(
                    "sshd needs /run/sshd when run as root, and `unshare -m` "
                    "(used to provide it privately) is not permitted here; "
                    "create /run/sshd (mode 755, owned by root) to proceed"
                )
        else:
            cmd = sshd_cmd  # unprivileged sshd: no privsep chroot needed
        if self.netns:
            cmd = ["ip", "netns", "exec", self.netns] + cmd
        # Errors from unshare/mount (before sshd's -E takes over) go to the
        # same log; both sides append, so lines don't clobber each other.
        self._log_fh = open(self.log, "ab")
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._log_fh,
            stderr=self._log_fh,
            close_fds=True,
        )
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if self.proc.poll() is not None:
                err = f"sshd exited with status {self.proc.returncode} during start-up; sshd log:\n{self._read_log()}"
                self._reap()
                return err
            if self._banner_ok():
                return None
            if time.monotonic() > deadline:
                err = (
                    f"sshd did not accept connections on {self.host}:{self.port} "
                    f"within {self.startup_timeout}s; sshd log:\n"
                    f"{self._read_log()}"
                )
                self._terminate_all()
                return err
            time.sleep(0.02)

    def _banner_ok(self) -> bool:
        if self.netns:
            # Not reachable from this namespace: sshd's own log says when it listens.
            return f"Server listening on {self.host} port {self.port}" in self._read_log()
        try:
            with socket.create_connection((self.host, self.port), timeout=2) as s:
                return s.recv(64).startswith(b"SSH-")
        except OSError:
            return False

    def _read_log(self) -> str:
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return "<no log>"

    # -- fault injection -------------------------------------------------
    def session_pids(self) -> List[int]:
        """PIDs of the per-connection processes (children of the listener,
        and what they spawned).  Never includes the listener itself."""
        if self.proc is None or self.proc.poll() is not None:
            return []
        return _descendants(self.proc.pid)

    def _kill_tree_of_listener(self) -> List[int]:
        """SIGKILL all descendants of the listener, race-free: the listener
        is paused (SIGSTOP) so it cannot fork new sessions meanwhile, and the
        whole tree is frozen before anything is killed (otherwise a killed
        sshd's children would be re-parented to init and escape)."""
        listener = self.proc.pid
        os.kill(listener, signal.SIGSTOP)
        try:
            frozen: List[int] = []
            for _ in range(100):
                new = [p for p in _descendants(listener) if p not in frozen]
                if not new:
                    break
                frozen += _kill(new, signal.SIGSTOP)
                time.sleep(0.002)
            return _kill(frozen, signal.SIGKILL)
        finally:
            os.kill(listener, signal.SIGCONT)

    def kill_sessions(self) -> List[int]:
        """SIGKILL every per-connection sshd process (and the commands running
        under them), leaving the listener up: clients see their TCP connection
        close without an SSH disconnect message, and new connections work.

        Returns the PIDs killed.  (The kernel closes the sockets, so clients
        get EOF promptly: this simulates a dropped session, not a silent
        network partition.)
        """
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError("sshd is not running")
        return sorted(self._kill_tree_of_listener())

    # -- teardown --------------------------------------------------------
    def _terminate_all(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            # Sessions first: sshd's listener does not take its sessions down
            # when it exits, and they would keep the mount namespace alive.
            try:
                self._kill_tree_of_listener()
                self.proc.kill()
            except ProcessLookupError:
                pass
        self._reap()

    def _reap(self) -> None:
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        if self._log_fh is not None:
            self._log_fh.close()
            self._log_fh = None

    def stop(self) -> None:
        """Stop sshd and its sessions and remove the temporary directory.
        Idempotent."""
        try:
            self._terminate_all()
        finally:
            if self.tmpdir and os.path.isdir(self.tmpdir):
                shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None
            atexit.unregister(self.stop)

    def __repr__(self) -> str:
        state = "running" if self.proc is not None else "stopped"
        where = f" in netns {self.netns}" if self.netns else ""
        return f"<ThrowawaySSHD {self.user}@{self.host}:{self.port}{where} {state}>"

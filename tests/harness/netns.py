"""Emulated devices in Linux network namespaces, each with its own sshd and address.

``NetnsLab`` builds, entirely inside namespaces it creates (the host's own network is
never touched)::

    ekf<pid>c  "controller": a bridge br0 with 10.213.0.1/24; the host-side process
               that deploys runs in here (``lab.exec_prefix``)
    ekf<pid>dN one per device: eth0 = 10.213.0.(10+N)/24, a veth to the bridge, and a
               real OpenSSH server on port 2222 (tests/harness/sshd.py, ``netns=``)

A slow device gets ``tc netem delay`` where the kernel has netem, otherwise a
token-bucket rate limit (``tbf``) on both ends of its link (``device.shaping`` says
which); a dead device has its link down, so nothing ever answers it. ``lab.set_link(device, False)`` takes a
device offline for a while (its processes keep running; ``True`` brings it back), ``device.exec_prefix`` runs a
command in its namespace, and ``add_device(ssh=False)`` leaves out the sshd (a device that pulls instead).

Devices share this machine's filesystem and processes (only the network is
separate): give each its own agent directory. Names carry the creating process's pid;
``cleanup_leftovers()`` removes namespaces whose creator is gone (a crashed run).
"""

import os
import re
import shutil
import signal
import subprocess
import sys

from harness.sshd import ThrowawaySSHD

PREFIX = "ekf"
SUBNET = "10.213.0"
SSH_PORT = 2222
_NAME = re.compile(rf"^{PREFIX}(\d+)[cd]\d*$")


class NetnsUnavailable(RuntimeError):
    """Network namespaces cannot be created here (not root, no ``ip``, or not permitted)."""


def _ip(*args, netns=None, check=True):
    cmd = (["ip", "netns", "exec", netns] if netns else []) + list(args)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    return p


def _namespaces():
    p = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    return [line.split()[0] for line in p.stdout.splitlines() if line.strip()]


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _delete_namespace(ns):
    """Kill what still runs in ``ns`` (only processes of this lab end up there), then delete it."""
    p = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=30)
    for pid in p.stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def cleanup_leftovers():
    """Delete lab namespaces left by runs whose process no longer exists; return their names."""
    removed = []
    for ns in _namespaces():
        m = _NAME.match(ns)
        if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
            _delete_namespace(ns)
            removed.append(ns)
    return removed


def unavailable_reason():
    """Why namespaces cannot be used here, or None if they can."""
    if sys.platform != "linux":
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    if not shutil.which("ip"):
        return "iproute2 (`ip`) is not installed: apt-get install iproute2"
    probe = f"{PREFIX}{os.getpid()}probe"
    p = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        return f"`ip netns add` is not permitted here: {p.stderr.strip()}"
    try:
        r = _ip("ip", "link", "add", "br0", "type", "bridge", netns=probe, check=False)
        if r.returncode != 0:
            return f"cannot create a bridge in a network namespace: {r.stderr.strip()}"
        r = _ip("ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1", netns=probe, check=False)
        if r.returncode != 0:
            return f"cannot create a veth pair in a network namespace: {r.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    return None


def netem_available():
    """Whether this kernel has the netem qdisc (many minimal VM kernels lack it)."""
    probe = f"{PREFIX}{os.getpid()}probe"
    subprocess.run(["ip", "netns", "add", probe], capture_output=True, timeout=30)
    try:
        _ip("ip", "link", "set", "lo", "up", netns=probe, check=False)
        return (
            _ip("tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms", netns=probe, check=False).returncode
            == 0
        )
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)


class EmulatedDevice:
    def __init__(self, index, netns, address, state):
        self.index, self.netns, self.address, self.state = index, netns, address, state
        self.sshd = None
        self.shaping = None

    @property
    def url(self):
        return f"ssh://root@{self.address}:{SSH_PORT}"

    @property
    def exec_prefix(self):
        """Prefix a command with this to run it in the device's namespace (its own loopback and address)."""
        return ["ip", "netns", "exec", self.netns]

    def __repr__(self):
        return f"<EmulatedDevice {self.netns} {self.address} {self.state}>"


class NetnsLab:
    """A controller namespace with a bridge, and devices attached to it (see the module doc)."""

    def __init__(self):
        self.tag = f"{PREFIX}{os.getpid()}"
        self.controller = f"{self.tag}c"
        self.devices = []
        self._namespaces = []
        self._next = 0

    @property
    def exec_prefix(self):
        """Prefix a command with this to run it in the controller namespace (where the devices are reachable)."""
        return ["ip", "netns", "exec", self.controller]

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        reason = unavailable_reason()
        if reason:
            raise NetnsUnavailable(reason)
        cleanup_leftovers()
        try:
            self._add_ns(self.controller)
            c = self.controller
            _ip("ip", "link", "set", "lo", "up", netns=c)
            _ip("ip", "link", "add", "br0", "type", "bridge", netns=c)
            _ip("ip", "addr", "add", f"{SUBNET}.1/24", "dev", "br0", netns=c)
            _ip("ip", "link", "set", "br0", "up", netns=c)
        except BaseException:
            self.stop()
            raise
        return self

    def _add_ns(self, ns):
        if ns in _namespaces():
            _delete_namespace(ns)
        _ip("ip", "netns", "add", ns)
        self._namespaces.append(ns)

    def add_device(self, state="ok", delay_ms=200, rate="256kbit", ssh=True):
        """A device: ``state`` is "ok", "slow" (delayed or rate-limited link) or "dead" (link down, no sshd);
        ``ssh=False``: no sshd on it."""
        if state not in ("ok", "slow", "dead"):
            raise ValueError(state)
        i = self._next
        self._next += 1
        if i > 200:
            raise RuntimeError("a lab holds at most 200 devices")
        ns = f"{self.tag}d{i}"
        address = f"{SUBNET}.{10 + i}"
        dev = EmulatedDevice(i, ns, address, state)
        self._add_ns(ns)
        c = self.controller
        host_end = f"v{i}"
        _ip("ip", "link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", ns, netns=c)
        _ip("ip", "link", "set", host_end, "master", "br0", netns=c)
        _ip("ip", "link", "set", host_end, "up", netns=c)
        _ip("ip", "link", "set", "lo", "up", netns=ns)
        _ip("ip", "addr", "add", f"{address}/24", "dev", "eth0", netns=ns)
        if state == "dead":
            _ip("ip", "link", "set", "eth0", "down", netns=ns)
            self.devices.append(dev)
            return dev
        _ip("ip", "link", "set", "eth0", "up", netns=ns)
        if state == "slow":
            if netem_available():
                for where, link in ((ns, "eth0"), (c, host_end)):
                    _ip("tc", "qdisc", "add", "dev", link, "root", "netem", "delay", f"{delay_ms // 2}ms", netns=where)
                dev.shaping = f"netem delay {delay_ms} ms round trip"
            else:
                for where, link in ((ns, "eth0"), (c, host_end)):
                    _ip(
                        "tc",
                        "qdisc",
                        "add",
                        "dev",
                        link,
                        "root",
                        "tbf",
                        "rate",
                        rate,
                        "burst",
                        "4kb",
                        "latency",
                        "2000ms",
                        netns=where,
                    )
                dev.shaping = f"tbf rate {rate} each way (this kernel has no netem)"
        self.devices.append(dev)
        if ssh:
            dev.sshd = ThrowawaySSHD(netns=ns, host=address, port=SSH_PORT, startup_timeout=30)
            dev.sshd.start()
        return dev

    def set_link(self, device, up):
        """Take ``device`` offline (its link down: nothing reaches it, its connections stall) or back online."""
        _ip("ip", "link", "set", "eth0", "up" if up else "down", netns=device.netns)

    def stop(self):
        """Stop every sshd and delete every namespace of this lab (idempotent)."""
        for dev in self.devices:
            if dev.sshd is not None:
                dev.sshd.stop()
        for ns in reversed(self._namespaces):
            _delete_namespace(ns)
        self._namespaces = []

    def inventory(self, devices, roots, python=None, extra=None):
        """TOML text for ``devices`` (agent directory ``roots[i]`` each; ``extra[i]``: more fields)."""
        python = python or sys.executable
        out = []
        for n, (dev, root) in enumerate(zip(devices, roots)):
            out.append("[[device]]")
            fields = {
                "name": f"dev{dev.index}",
                "url": dev.url,
                "python": python,
                "root": str(root),
                "tags": ["lab", dev.state],
            }
            if dev.sshd is not None:
                fields["key"] = dev.sshd.client_key
                fields["known_hosts"] = dev.sshd.known_hosts
            else:  # a dead device: any live device's files will do, it never gets that far
                live = next(d for d in self.devices if d.sshd is not None)
                fields["key"], fields["known_hosts"] = live.sshd.client_key, live.sshd.known_hosts
            fields["ssh_config"] = "/dev/null"
            fields.update((extra or {}).get(n, {}))
            for k, v in fields.items():
                out.append(f"{k} = {_toml(v)}")
            out.append("")
        return "\n".join(out)


def _toml(v):
    import json

    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return repr(v)
    return json.dumps(str(v))

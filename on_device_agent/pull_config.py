"""The agent's pull options (``serve``/``start`` ``--pull mqtt://BROKER ...``): parsed, checked, passed on.

paho-mqtt is imported only when ``--pull`` is given; without it the agent says what to install.
"""

import argparse
import os
import ssl
from typing import Any, List, Optional, Tuple
from urllib.parse import urlparse

from .pull_layout import PayloadError, check_segment

PAHO_MISSING = (
    "--pull needs the paho-mqtt package on the device: `edgekit device setup ... --pull` installs it from the "
    "host's wheel cache, or pip install paho-mqtt"
)


class PullConfig(object):
    """Where the agent learns what to run: an MQTT broker, its fleet, device id and groups, credentials, TLS."""

    def __init__(
        self,
        broker: str,
        device_id: str,
        groups: Optional[List[str]] = None,
        fleet: str = "default",
        username: Optional[str] = None,
        password: Optional[str] = None,
        ca: Optional[str] = None,
        certfile: Optional[str] = None,
        keyfile: Optional[str] = None,
        field_interval: float = 30.0,
    ) -> None:
        self.host, self.port, self.tls = parse_broker(broker)
        self.broker = broker
        self.device_id = check_segment("device id", device_id)
        self.groups = [check_segment("group", g) for g in (groups or [])]
        self.fleet = check_segment("fleet", fleet)
        self.username, self.password = username, password
        self.ca, self.certfile, self.keyfile = ca, certfile, keyfile
        if ca:
            self.tls = True
        if not field_interval >= 0:
            raise PayloadError("--field-interval %r: give the seconds between batches, or 0 for none" % field_interval)
        self.field_interval = float(field_interval)

    def ssl_context(self) -> Optional[ssl.SSLContext]:
        """The TLS context for the broker and for https stores (the CA given, else the system's)."""
        if not (self.tls or self.ca):
            return None
        ctx = ssl.create_default_context(cafile=self.ca)
        if self.certfile:
            ctx.load_cert_chain(self.certfile, self.keyfile)
        return ctx


def parse_broker(url: str) -> Tuple[str, int, bool]:
    """``mqtt://HOST[:PORT]`` (1883) or ``mqtts://HOST[:PORT]`` (8883, TLS) -> (host, port, tls)."""
    parsed = urlparse(url)
    if parsed.scheme not in ("mqtt", "mqtts") or not parsed.hostname:
        raise PayloadError("--pull %r: expected mqtt://HOST[:PORT] or mqtts://HOST[:PORT]" % url)
    if parsed.username or parsed.password:
        raise PayloadError("--pull %r: pass credentials with --pull-username and --pull-password-file" % url)
    tls = parsed.scheme == "mqtts"
    return parsed.hostname, parsed.port or (8883 if tls else 1883), tls


def add_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument(
        "--pull",
        metavar="mqtt://BROKER[:PORT]",
        help="learn what to run from an MQTT broker (mqtts:// for TLS) and fetch bundles from their store "
        "(docs/FLEET.md); needs --device-id",
    )
    s.add_argument("--device-id", help="this device's id in the fleet (with --pull)")
    s.add_argument("--group", action="append", default=[], help="a group this device follows (repeatable)")
    s.add_argument(
        "--fleet", dest="pull_fleet", default="default", help="the fleet's name: topics are edgekit/FLEET/... (default)"
    )
    s.add_argument("--pull-username", help="the broker's user name for this device")
    s.add_argument("--pull-password-file", help="file holding the broker password (or set EDGEKIT_PULL_PASSWORD)")
    s.add_argument("--pull-ca", help="CA certificate file for the broker's and the stores' TLS")
    s.add_argument("--pull-cert", help="client certificate file (TLS client authentication)")
    s.add_argument("--pull-key", help="the client certificate's key file")
    s.add_argument(
        "--field-interval",
        type=float,
        default=30.0,
        metavar="S",
        help="with --pull: send new field records to the broker every S seconds (default 30; 0: never)",
    )


def from_args(args: argparse.Namespace) -> Optional[PullConfig]:
    """The pull configuration ``args`` ask for (None without ``--pull``); ValueError says what is wrong."""
    if not args.pull:
        if args.device_id or args.group:
            raise ValueError("--device-id and --group go with --pull mqtt://BROKER")
        return None
    if not args.device_id:
        raise ValueError("--pull needs --device-id ID (this device's name in the fleet)")
    try:
        import paho.mqtt.client  # noqa: F401
    except ImportError:
        raise ValueError(PAHO_MISSING) from None
    for path in (args.pull_ca, args.pull_cert, args.pull_key, args.pull_password_file):
        if path and not os.path.isfile(path):
            raise ValueError("%s: no such file" % path)
    password = os.environ.get("EDGEKIT_PULL_PASSWORD") or None
    if args.pull_password_file:
        with open(args.pull_password_file) as f:
            password = f.read().strip()
    return PullConfig(
        args.pull,
        args.device_id,
        args.group,
        args.pull_fleet,
        args.pull_username,
        password,
        args.pull_ca,
        args.pull_cert,
        args.pull_key,
        args.field_interval,
    )


def start_args(args: argparse.Namespace, absolute: bool = True) -> List[str]:
    """The pull flags ``start`` passes on to the ``serve`` it launches (``absolute``: file paths made absolute here;
    the host passes them as given, paths on the device)."""
    if not args.pull:
        return []
    out = ["--pull", args.pull, "--device-id", args.device_id, "--fleet", args.pull_fleet]
    for g in args.group:
        out += ["--group", g]
    if args.field_interval != 30.0:
        out += ["--field-interval", "%g" % args.field_interval]
    for flag in ("pull_username", "pull_password_file", "pull_ca", "pull_cert", "pull_key"):
        value = getattr(args, flag)
        if value:
            path = absolute and flag != "pull_username"
            out += ["--" + flag.replace("_", "-"), os.path.abspath(value) if path else value]
    return out


def describe(config: Any) -> str:
    return "%s:%d%s as %s (fleet %s%s)" % (
        config.host,
        config.port,
        " with TLS" if config.tls else "",
        config.device_id,
        config.fleet,
        ", groups " + ", ".join(config.groups) if config.groups else "",
    )

"""Command line of the agent: serve, start, stop, status, bench, profile, version."""

import argparse
import json
import os
import signal
import sys
from typing import Any, Dict, List, Optional

from . import API_VERSION, __version__, pull_config

DEFAULT_ROOT = "~/.cache/edgekit/device"
SITE = "site"  # ROOT/site: runtime packages `edgekit device setup` installed, imported before the Python's own


def _token(args: argparse.Namespace) -> Optional[str]:
    if getattr(args, "token_file", None):
        with open(args.token_file) as f:
            return f.read().strip()
    return os.environ.get("EDGEKIT_AGENT_TOKEN") or None


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="edgekit-agent", description="edgekit on-device agent %s" % __version__)
    sub = p.add_subparsers(dest="cmd")
    for name in ("serve", "start"):
        s = sub.add_parser(
            name,
            help="run the local API in the foreground"
            if name == "serve"
            else "start the local API in the background and print its state",
        )
        s.add_argument("--root", default=DEFAULT_ROOT)
        s.add_argument("--host", default="127.0.0.1", help="listen address (default loopback; others need a token)")
        s.add_argument("--port", type=int, default=0, help="0 picks a free port")
        s.add_argument("--token-file", help="file holding the bearer token (or set EDGEKIT_AGENT_TOKEN)")
        s.add_argument(
            "--encrypt-key",
            metavar="FILE|keyring:NAME",
            help="encrypt model files at rest (AES-256-GCM; needs the 'cryptography' package) with the 32-byte key "
            "in FILE (mode 600, owned by the agent's user) or the kernel keyring's user key NAME; remembered in "
            "ROOT/agent/config.json",
        )
        s.add_argument("--no-telemetry", action="store_true", help="do not record served requests")
        s.add_argument("--flush-interval", type=float, default=0.2, help="seconds between telemetry writes")
        s.add_argument(
            "--context-interval",
            type=float,
            default=30.0,
            help="seconds between device context samples (load, memory, temperature)",
        )
        s.add_argument("--warmup-on-load", type=int, default=3, help="inferences run when a model is loaded")
        s.add_argument("--max-connections", type=int, default=256, help="open connections at most")
        s.add_argument(
            "--max-queue", type=int, default=64, help="requests a model takes at once; beyond, 503 with Retry-After"
        )
        s.add_argument(
            "--batch-window-ms",
            type=float,
            default=0.0,
            help="run requests to a batch-capable model that arrive within this window as one batch (0: off)",
        )
        s.add_argument(
            "--max-batch", type=int, default=8, help="requests in one batch at most (with --batch-window-ms)"
        )
        s.add_argument(
            "--max-sessions", type=int, default=1024, help="streams' sessions kept at most (least recently used go)"
        )
        s.add_argument("--session-ttl", type=float, default=600.0, help="seconds an idle stream session is kept")
        s.add_argument(
            "--breaker",
            default="",
            metavar="KEY=N,...",
            help="circuit-breaker limits per served version: error_rate (0.5), p99_ms (0: off), window_s (30), "
            "min_requests (20), cooldown_s (30)",
        )
        s.add_argument(
            "--header-timeout", type=float, default=10.0, help="seconds a request line and headers may take to arrive"
        )
        pull_config.add_arguments(s)
    sv = sub.add_parser("supervise", help="run `serve ARGS...` and start it again if it crashes")
    sv.add_argument("serve_args", nargs=argparse.REMAINDER)
    for name in ("stop", "status"):
        s = sub.add_parser(name)
        s.add_argument("--root", default=DEFAULT_ROOT)
    b = sub.add_parser("bench", help="one-shot benchmark of a bundle directory, no server")
    b.add_argument("--bundle", required=True)
    b.add_argument("--runs", type=int, default=100)
    b.add_argument("--warmup", type=int, default=10)
    b.add_argument("--threads", type=int)
    b.add_argument("--provider", action="append", dest="providers", help="accelerator to ask for (repeatable)")
    b.add_argument("--json", action="store_true")
    b.add_argument(
        "--no-placement", action="store_true", help="skip the profiled run that counts nodes per accelerator"
    )
    pr = sub.add_parser("profile", help="one-shot per-layer profile of a bundle directory (JSON), no server")
    pr.add_argument("--bundle", required=True)
    pr.add_argument("--runs", type=int, default=20)
    pr.add_argument("--warmup", type=int, default=3)
    pr.add_argument("--threads", type=int)
    pr.add_argument("--provider", action="append", dest="providers", help="accelerator to ask for (repeatable)")
    t = sub.add_parser("trust", help="the keys this device trusts to sign bundles (ROOT/trust/allowed_signers)")
    t.add_argument("action", choices=["list", "add", "remove", "set", "off"])
    t.add_argument("--root", default=DEFAULT_ROOT)
    t.add_argument("--key", help="add: the public key ('ssh-ed25519 AAAA...'); remove: it, or --identity")
    t.add_argument("--identity", help="add: the name it signs as; remove: the signer to remove")
    t.add_argument("--file", help="set: an allowed_signers file that replaces the list (it is removed afterwards)")
    sub.add_parser("version")
    args = p.parse_args(argv)
    root = getattr(args, "root", None)
    if args.cmd == "supervise" and "--root" in args.serve_args[:-1]:
        root = args.serve_args[args.serve_args.index("--root") + 1]
    if root:
        use_site(root)

    if args.cmd == "version":
        from . import runners
        from .bench import device_info

        print(
            json.dumps(
                {
                    "agent_version": __version__,
                    "api": API_VERSION,
                    "device": device_info(),
                    "runtimes": runners.runtimes(),
                }
            )
        )
        return 0
    if args.cmd == "trust":
        from .trust import main_trust

        return main_trust(args.root, args.action, args.key, args.identity, args.file)
    if args.cmd in ("bench", "profile"):
        from .bench import main_bench
        from .profiling import main_profile
        from .runners import RunnerError, RuntimeMissing

        try:
            if args.cmd == "profile":
                return main_profile(args.bundle, args.runs, args.warmup, args.threads, args.providers)
            return main_bench(
                args.bundle, args.runs, args.warmup, args.threads, args.providers, args.json, not args.no_placement
            )
        except RuntimeMissing as e:
            sys.stderr.write("error: %s\n" % e)
            return 3
        except (RunnerError, OSError, ValueError, KeyError) as e:
            sys.stderr.write("error: %s\n" % e)
            return 2
    if args.cmd == "supervise":
        from .childproc import self_command
        from .daemon import supervise

        serve_args = list(args.serve_args)
        if not serve_args or serve_args[0] != "serve" or "--root" not in serve_args:
            p.error("supervise needs: serve --root ROOT [serve options]")
        return supervise(self_command() + serve_args, serve_args[serve_args.index("--root") + 1])
    if args.cmd in ("serve", "start") and not (0 <= args.batch_window_ms <= 1000 and 1 <= args.max_batch <= 256):
        p.error("--batch-window-ms must be from 0 to 1000 and --max-batch from 1 to 256")
    if args.cmd in ("serve", "start") and not (args.max_sessions >= 1 and args.session_ttl > 0):
        p.error("--max-sessions must be at least 1 and --session-ttl more than 0 seconds")
    sealer = pull = None
    if args.cmd in ("serve", "start"):
        sealer = _sealer(args)
        try:
            pull = pull_config.from_args(args)
        except ValueError as e:
            p.error(str(e))
    if args.cmd == "serve":
        from .daemon import write_state
        from .server import make_server

        server = make_server(
            args.root,
            args.host,
            args.port,
            _token(args),
            telemetry=not args.no_telemetry,
            warmup_on_load=args.warmup_on_load,
            flush_interval=args.flush_interval,
            context_interval=args.context_interval,
            max_connections=args.max_connections,
            header_timeout=args.header_timeout,
            max_queue=args.max_queue,
            breaker=_breaker(p, args.breaker),
            batch_window_ms=args.batch_window_ms,
            max_batch=args.max_batch,
            max_sessions=args.max_sessions,
            session_ttl_s=args.session_ttl,
            sealer=sealer,
        )
        host, port = server.server_address[:2]
        from .daemon import own_zip_sha256

        state: Dict[str, Any] = {
            "pid": os.getpid(),
            "host": host,
            "port": port,
            "version": __version__,
            "zip_sha256": own_zip_sha256(),
            "root": server.service.store.root,
            "root_arg": args.root,
            "auth": not server.service.open_reads,
            "supervisor_pid": int(os.environ.get("EDGEKIT_SUPERVISOR_PID") or 0) or None,
            "restarts": int(os.environ.get("EDGEKIT_RESTARTS") or 0),
            "encrypt": sealer.describe() if sealer else None,
            "pull": pull_config.start_args(args) or None,
        }

        def on_term(signum: int, frame: Any) -> None:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second signal must not break the clean-up
            raise KeyboardInterrupt()

        signal.signal(signal.SIGTERM, on_term)
        write_state(args.root, state)
        sys.stderr.write("edgekit-agent %s listening on %s:%d (root %s)\n" % (__version__, host, port, state["root"]))  # type: ignore[str-bytes-safe]
        sys.stderr.flush()
        import threading

        def restore() -> None:
            sealed = server.service.store.seal_existing()  # versions installed before the key (and their copies)
            if sealed:
                sys.stderr.write("encrypted at rest: %s\n" % ", ".join(sealed))
            server.service.restore()

        restorer = threading.Thread(target=restore, name="restore-models")
        restorer.daemon = True
        restorer.start()
        puller = None
        if pull is not None:
            from .pull_mqtt import PullAgent

            puller = PullAgent(pull, server.service)
            puller.start()
        try:
            server.serve_forever(poll_interval=0.2)
        except KeyboardInterrupt:
            pass
        finally:
            if puller is not None:
                puller.stop()
            server.server_close()
            server.service.close()
        return 0
    if args.cmd in ("start", "stop", "status"):
        from . import daemon

        if args.cmd == "start":
            extra = [
                "--flush-interval",
                str(args.flush_interval),
                "--context-interval",
                str(args.context_interval),
                "--warmup-on-load",
                str(args.warmup_on_load),
                "--max-connections",
                str(args.max_connections),
                "--header-timeout",
                str(args.header_timeout),
                "--max-queue",
                str(args.max_queue),
                "--breaker=" + _breaker(p, args.breaker, spec_out=True),
                "--batch-window-ms",
                str(args.batch_window_ms),
                "--max-batch",
                str(args.max_batch),
                "--max-sessions",
                str(args.max_sessions),
                "--session-ttl",
                str(args.session_ttl),
            ] + (["--no-telemetry"] if args.no_telemetry else [])
            key = sealer.source if sealer else None
            extra += ["--encrypt-key", key] if key else []
            result = daemon.start(
                args.root,
                args.host,
                args.port,
                args.token_file,
                extra=extra,
                encrypt_key=key,
                pull=pull_config.start_args(args),
            )
        else:
            result = getattr(daemon, args.cmd)(args.root)
        print(json.dumps(result))
        return 0
    p.print_help()
    return 2


def use_site(root: str) -> None:
    """Put ``ROOT/site`` (the runtime ``edgekit device setup`` installed there) first on ``sys.path``, and on
    ``PYTHONPATH`` so the processes this agent starts (server, benchmarks, checks) import from it too."""
    site = os.path.join(os.path.abspath(os.path.expanduser(root)), SITE)
    if not os.path.isdir(site):
        return
    if site not in sys.path:
        sys.path.insert(1 if sys.path and sys.path[0].endswith(".pyz") else 0, site)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if site not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([site] + paths)


def _sealer(args: argparse.Namespace) -> Any:
    """The at-rest key (``--encrypt-key``, else the remembered one), checked before anything runs; exit 2 if bad."""
    from . import atrest

    spec = atrest.key_spec(args.root, args.encrypt_key)
    try:
        sealer = atrest.load_key(spec)
    except atrest.KeyProblem as e:
        sys.stderr.write("edgekit-agent: error: %s\n" % e)
        raise SystemExit(2) from None
    if sealer is not None:
        atrest.remember(args.root, sealer.source)
    return sealer


def _breaker(parser: argparse.ArgumentParser, spec: str, spec_out: bool = False) -> Any:
    """``--breaker KEY=N,...`` checked (a bad one stops ``start`` before anything runs)."""
    from .breaker import parse_spec

    try:
        limits = parse_spec(spec)
    except ValueError as e:
        parser.error(str(e))
    return ",".join("%s=%s" % kv for kv in sorted(limits.items())) if spec_out else limits


if __name__ == "__main__":
    sys.exit(main())

"""The ``edgekit`` command: a thin layer over the Python API.

Library errors (:class:`edgekit.errors.EdgekitError`) become one ``error:`` line on
stderr and a non-zero exit here, and nowhere else. ``--json`` prints exactly one JSON
object on stdout; progress goes to stderr.
"""

import argparse
import json
import sys
from pathlib import Path

from edgekit_agent.runners.table import TABLE

from . import __version__
from .errors import EdgekitError, FidelityError


def _err(msg):
    sys.stderr.write(msg.rstrip() + "\n")


def _write_html(path, html):
    """Write a report page whole (temporary file, then rename) and say where."""
    out = Path(path)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(out)
    _err(f"wrote {out}")


def _emit(args, data, text_fn):
    if getattr(args, "json", False):
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        sys.stdout.write(text_fn(data))


# -- profiles -------------------------------------------------------------------
def cmd_profiles(args):
    from . import profiles

    if args.action == "show":
        if not args.name:
            raise EdgekitError("usage: edgekit profiles show NAME")
        p = profiles.load(args.name)
        if args.json:
            _emit(args, p.to_dict(), None)
        else:
            import pprint

            sys.stdout.write(f"# {p.name} ({p.source})\n{pprint.pformat(p.data, sort_dicts=False, width=110)}\n")
        return 0
    items = profiles.load_all()
    rows = [
        {
            "name": p.name,
            "description": p.data["description"],
            "arch": p.arch,
            "os": p.os_family,
            "runtimes": p.data["runtimes"]["ranked"],
            "transport": p.data["agent"]["transport"],
            "accelerators": [a["name"] for a in p.data["accelerators"]],
        }
        for p in items
    ]
    if args.json:
        _emit(args, {"profiles": rows}, None)
    else:
        for r in rows:
            sys.stdout.write(f"{r['name']:<18} {r['arch']:<8} {r['os']:<8} {r['transport']:<6} {r['description']}\n")
    return 0


# -- build ----------------------------------------------------------------------
def cmd_build(args):
    from .builder import build
    from .report import build_text

    log = (lambda m: None) if args.quiet else (lambda m: _err(m))
    if args.auto:
        return _cmd_build_auto(args, log)
    auto_only = [
        flag
        for flag, value in (
            ("--target", args.target),
            ("--backends", args.backends),
            ("--prune-levels", args.prune_levels),
            ("--auto-runs", args.auto_runs),
            ("--auto-rounds", args.auto_rounds),
            ("--device-python", args.device_python),
            ("--device-root", args.device_root),
        )
        if value is not None
    ]
    if auto_only:
        raise EdgekitError(
            f"{auto_only[0]} works only with --auto (it measures candidates on a device); "
            f"add --auto, or drop {auto_only[0]}"
        )
    try:
        report = build(
            args.model,
            args.profile,
            args.output,
            backend=args.backend or "ort",
            precision=args.precision,
            calib=args.calib,
            val=args.val,
            preprocess=args.preprocess,
            input_shapes=args.input_shape,
            name=args.name,
            min_cosine=args.min_cosine,
            min_top1=args.min_top1,
            max_accuracy_drop=args.max_accuracy_drop,
            allow_degraded=args.allow_degraded,
            budget=args.budget,
            prune=args.prune,
            prune_mode=args.prune_mode,
            prune_recipe=args.prune_recipe,
            use_cache=not args.no_cache,
            log=log,
        )
    except FidelityError as e:
        if args.json and e.report:
            _emit(args, {"error": str(e), "fidelity_step": e.report}, None)
        raise
    _emit(args, report, build_text)
    return 0


def _cmd_build_auto(args, log):
    from .auto import DEFAULT_PRUNE_LEVELS, auto_build, auto_text

    def floats(text):
        try:
            return tuple(float(x) for x in text.split(",") if x.strip())
        except ValueError:
            raise EdgekitError(f"--prune-levels {text!r}: give fractions separated by commas, e.g. 0,0.25") from None

    if args.prune is not None or args.prune_recipe:
        raise EdgekitError(
            "--auto tries pruning levels itself: use --prune-levels 0,0.25 instead of "
            + ("--prune" if args.prune is not None else "--prune-recipe")
        )
    if args.prune_mode is not None:
        raise EdgekitError(
            "--auto tries pruning levels itself (structured): drop --prune-mode, or build without --auto"
        )
    if args.backend is not None:
        raise EdgekitError("--auto tries every backend the profile runs: use --backends B1,B2 instead of --backend")
    if args.allow_degraded:
        raise EdgekitError(
            "--auto writes only a candidate that keeps fidelity: drop --allow-degraded, "
            "or build one configuration without --auto"
        )
    report = auto_build(
        args.model,
        args.profile,
        args.output,
        device=args.target or "local://",
        calib=args.calib,
        val=args.val,
        preprocess=args.preprocess,
        input_shapes=args.input_shape,
        name=args.name,
        budget=args.budget,
        backends=[b for b in (args.backends or "").split(",") if b] or None,
        precisions=None if args.precision == "auto" else [args.precision],
        prune_levels=floats(args.prune_levels) if args.prune_levels else DEFAULT_PRUNE_LEVELS,
        runs=50 if args.auto_runs is None else args.auto_runs,
        rounds=3 if args.auto_rounds is None else args.auto_rounds,
        device_python=args.device_python,
        device_root=args.device_root,
        use_cache=not args.no_cache,
        log=log,
        min_cosine=args.min_cosine,
        min_top1=args.min_top1,
        max_accuracy_drop=args.max_accuracy_drop,
    )
    _emit(args, report, auto_text)
    return 0


# -- deploy / bench / agent -----------------------------------------------------
def _check_baud(args):
    if getattr(args, "baud", None) is None:
        return
    if getattr(args, "fleet", None):
        raise EdgekitError(
            "--baud cannot be combined with --fleet: give each serial device its rate in the "
            "inventory's url (serial:///dev/ttyUSB0?baud=115200)"
        )
    if not getattr(args, "serial", None):
        raise EdgekitError("--baud sets the line speed of --serial PORT: add --serial, or drop --baud")


def _device_target(args):
    """``(kind, target, options)`` from the device flags of a command."""
    _check_baud(args)
    if getattr(args, "ssh", None):
        return (
            "ssh",
            args.ssh,
            {"key_file": args.ssh_key, "ssh_config": args.ssh_config, "known_hosts": args.known_hosts},
        )
    if getattr(args, "adb", None) is not None:
        return "adb", args.adb or None, {}
    if getattr(args, "serial", None):
        return "serial", args.serial, {} if args.baud is None else {"baud": args.baud}
    return "local", None, {}


def _device(args, profile=None, backend=None):
    from .deployer import open_device

    kind, target, opts = _device_target(args)
    return open_device(
        kind,
        target,
        profile=profile,
        device_python=args.device_python,
        device_root=args.device_root,
        backend=backend,
        **opts,
    )


def _other_local_agents(args, root):
    """``[{backend, root}]``: the local agents of tool-environment backends beside ``root`` (``<root>-<backend>``,
    made by ``deploy --local`` of such a bundle), which a command without ``--backend`` does not see."""
    if _device_target(args)[0] != "local" or args.backend or args.device_root:
        return []
    from .converters import all_backends

    base = Path(root).expanduser()
    return [
        {"backend": b, "root": str(base.parent / f"{base.name}-{b}")}
        for b in sorted(all_backends())
        if (base.parent / f"{base.name}-{b}" / "agent").is_dir()
    ]


def _progress(args):
    if args.json or args.quiet or not sys.stderr.isatty():
        return None

    def show(name, done, total):
        pct = 100 * done // max(total, 1)
        sys.stderr.write(f"\r  uploading {name}: {pct:3d}% ({done}/{total} bytes)")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show


def _many_devices(args):
    """The devices of ``--fleet INVENTORY`` or ``deploy --adb all``; None for a command on one device."""
    from . import fleet

    _check_baud(args)
    if getattr(args, "fleet", None):
        per_device = [
            f
            for f in ("ssh_key", "ssh_config", "known_hosts", "device_python", "device_root")
            if getattr(args, f, None)
        ]
        if per_device:
            raise EdgekitError(
                f"--{per_device[0].replace('_', '-')} cannot be combined with --fleet: "
                "put it in the inventory's [[device]] entries (or its [defaults])"
            )
        return fleet.load_inventory(args.fleet, tag=args.tag)
    if args.tag is not None:
        raise EdgekitError("--tag picks devices of a --fleet inventory: add --fleet INVENTORY.toml, or drop --tag")
    if not (args.command == "deploy" and getattr(args, "adb", None) == "all"):
        for flag, value in (("--jobs", args.jobs), ("--device-timeout", args.device_timeout)):
            if value is not None:
                also = " (or --adb all)" if args.command == "deploy" else ""
                raise EdgekitError(
                    f"{flag} applies to many devices at once: add --fleet INVENTORY.toml{also}, or drop {flag}"
                )
        return None
    from .transports.adb import ADBTransport

    return [
        fleet.FleetDevice(s, f"adb://{s}", "adb", s, {}, python=args.device_python, root=args.device_root)
        for s in ADBTransport.serials()
    ]


def _run_fleet(args, action, devices):
    """``--fleet`` / ``deploy --adb all``: every device in parallel, one row per device."""
    import time

    from . import fleet

    on_row = (
        None
        if args.json or args.quiet
        else (lambda r: _err(f"  {r['name']}: {r['status']}" + (f" ({r['error']})" if r["error"] else "")))
    )
    t0 = time.perf_counter()
    rows = fleet.run_fleet(
        action,
        args.bundle,
        devices,
        jobs=fleet.DEFAULT_JOBS if args.jobs is None else args.jobs,
        device_timeout=fleet.DEFAULT_DEVICE_TIMEOUT if args.device_timeout is None else args.device_timeout,
        on_row=on_row,
        runs=args.runs,
        warmup=args.warmup,
        threads=args.threads,
        providers=args.provider,
    )
    seconds = time.perf_counter() - t0
    _emit(args, {"devices": rows, "summary": fleet.summary(rows, seconds)}, lambda d: fleet.fleet_text(rows, seconds))
    return fleet.exit_code(rows)


def cmd_deploy(args):
    devices = _many_devices(args)
    if devices is not None:
        return _run_fleet(args, "deploy", devices)
    from . import bundle as bundle_mod
    from .deployer import bundle_profile, deploy
    from .report import bench_text

    manifest = bundle_mod.load(args.bundle)
    log = (lambda m: None) if args.quiet else (lambda m: _err(m))
    with _device(args, bundle_profile(manifest), manifest["backend"]) as dev:
        report = deploy(
            args.bundle,
            dev,
            runs=args.runs,
            warmup=args.warmup,
            threads=args.threads,
            providers=args.provider,
            progress=_progress(args),
            log=log,
        )
    _emit(args, report, bench_text)
    return 0


def cmd_bench(args):
    devices = _many_devices(args)
    if devices is not None:
        return _run_fleet(args, "bench", devices)
    from . import bundle as bundle_mod
    from .deployer import bench, bundle_profile
    from .report import bench_text

    manifest = bundle_mod.load(args.bundle)
    with _device(args, bundle_profile(manifest), manifest["backend"]) as dev:
        report = bench(
            args.bundle, dev, runs=args.runs, warmup=args.warmup, threads=args.threads, providers=args.provider
        )
    _emit(args, report, bench_text)
    return 0


def cmd_agent(args):
    with _device(args, backend=args.backend) as dev:
        dev.probe()
        remote = f"{dev.root}/agent/edgekit-agent.pyz"
        if args.action == "start":
            state = dev.ensure_agent()
            state.pop("health", None)
            result = state
        else:
            r = dev.transport.run([dev.python, remote, args.action, "--root", dev.root])
            said = r.stderr + r.stdout
            if not r.ok and ("No such file" in said or "can't open file" in said):
                raise EdgekitError(
                    f"no edgekit agent is installed in {dev.root} on {dev.transport.description}; "
                    "`edgekit deploy BUNDLE` installs it"
                )
            if not r.ok:
                raise EdgekitError(
                    f"agent {args.action} failed on {dev.transport.description}: "
                    f"{(r.stderr or r.stdout).strip()[-400:] or 'agent not installed'}"
                )
            result = json.loads(r.stdout.strip().splitlines()[-1])
    _emit(args, result, lambda d: json.dumps(d, indent=2) + "\n")
    return 0


def cmd_rollback(args):
    with _device(args, backend=args.backend) as dev:
        dev.ensure_agent()
        result = dev.rollback(args.name, args.to)
    _emit(
        args,
        result,
        lambda d: (
            f"{d['name']}: already serving {d['version']}\n"
            if d.get("unchanged")
            else f"{d['name']}: now serving {d['version']} (was {d['previous']})\n"
        ),
    )
    return 0


def cmd_models(args):
    with _device(args, backend=args.backend) as dev:
        dev.ensure_agent()
        if args.remove:
            result = dev.remove(args.remove)
            _emit(args, result, lambda d: f"removed {d['name']} and every version kept of it\n")
            return 0
        models = dev.models()
        where = dev.transport.description
        others = _other_local_agents(args, dev.root)

    def text(d):
        also = [
            f"also: {a['backend']} agent in {a['root']}: pass --backend {a['backend']}"
            for a in d.get("other_agents", [])
        ]
        if not d["models"]:
            return "\n".join([f"no models deployed on {d['device']}"] + also) + "\n"
        lines = [f"{'model':<24} {'serving':<18} {'backend':<14} {'precision':<12} kept versions"]
        for m in d["models"]:
            kept = ", ".join(v + ("*" if v == m["version"] else "") for v in m.get("versions", []))
            lines.append(
                f"{m['name']:<24} {m['version']:<18} {m.get('backend') or '-':<14} "
                f"{m.get('precision') or '-':<12} {kept}"
            )
        return "\n".join(lines + also) + "\n"

    _emit(
        args,
        {
            "device": where,
            "models": [
                {k: m.get(k) for k in ("name", "version", "versions", "backend", "precision", "profile", "loaded")}
                for m in models
            ],
            **({"other_agents": others} if others else {}),
        },
        text,
    )
    return 0


def cmd_field(args):
    from .field import FieldStore, pull, report, report_text

    with FieldStore(args.store) as store:
        if args.action == "pull":

            def progress(kind, value):
                if kind == "gap":
                    _err(f"warning: {value} records were pruned on the device before they were pulled")
                elif not args.json and not args.quiet:
                    _err(f"  pulled {value} new records")

            with _device(args, backend=args.backend) as dev:
                result = pull(dev, store, name=args.name, on_batch=progress)
            _emit(
                args,
                result,
                lambda d: (
                    f"pulled {d['added']} new records from {d['device']} in {d['seconds']} s "
                    f"({d['stored_total']} stored in {store.path})\n"
                ),
            )
            return 0
        r = report(store, model=args.model, since=args.since)
        if args.html:
            from .field_html import render

            _write_html(args.html, render(r))
        if args.json:
            for e in r["entries"]:
                e.pop("histogram", None)
        _emit(args, r, report_text)
    return 0


def cmd_explain(args):
    from .placement import explain, selective_build, text

    report = explain(args.bundle, profile=args.profile, model=args.model)
    if args.selective_build:
        report["selective_build_written"] = selective_build(args.bundle, args.selective_build)
        _err(f"wrote {', '.join(report['selective_build_written']['files'])}")
    if args.html:
        from .placement_html import render

        _write_html(args.html, render(report))
    _emit(args, report, text)
    return 0


def cmd_backends(args):
    from . import toolenvs

    if args.action in ("install", "remove"):
        if not args.name:
            raise EdgekitError(f"usage: edgekit backends {args.action} NAME")
        if args.action == "install":
            st = toolenvs.install_backend(args.name, log=(lambda m: None) if args.json else _err)
            _emit(args, st, lambda d: f"{args.name}: {d['detail']}\n")
        else:
            removed = toolenvs.remove_backend(args.name)
            _emit(
                args,
                {"name": args.name, "removed": removed},
                lambda d: (
                    "".join(f"removed {r}\n" for r in d["removed"]) or f"{args.name}: no tool environment to remove\n"
                ),
            )
        return 0
    rows = toolenvs.backends()

    def text(d):
        out = []
        for r in d["backends"]:
            env = r["toolenv"]
            out.append(
                f"{'ok ' if r['ok'] else 'NO '} {r['name']:<15} {', '.join(r['precisions']):<45} {r['detail']}\n"
            )
            if env and env["detail"] not in r["detail"]:  # not the same paragraph twice
                out.append(f"    tool environment: {env['detail']}\n")
        return "".join(out)

    _emit(args, {"backends": rows}, text)
    return 0


def cmd_doctor(args):
    from .diagnostics import doctor, doctor_text

    d = doctor()
    _emit(args, d, doctor_text)
    return 0


# -- parser ---------------------------------------------------------------------
def _device_options(p):
    where = p.add_mutually_exclusive_group()
    where.add_argument("--local", action="store_true", help="this machine is the device (default)")
    where.add_argument("--ssh", metavar="[USER@]HOST[:PORT]", help="a device reached over SSH")
    where.add_argument(
        "--adb",
        metavar="SERIAL",
        nargs="?",
        const="",
        help="an Android device through the adb server (the only one attached, or SERIAL; deploy: all)",
    )
    where.add_argument("--serial", metavar="PORT", help="a board on a serial line, e.g. /dev/ttyUSB0")
    p.add_argument("--baud", type=int, help="--serial line speed (default 115200)")
    p.add_argument("--ssh-key", help="private key for --ssh (default: ~/.ssh/config, ssh-agent, ~/.ssh/id_*)")
    p.add_argument("--ssh-config", help="ssh client config file (default ~/.ssh/config)")
    p.add_argument("--known-hosts", help="extra known_hosts file to verify the device's host key against")
    p.add_argument("--device-python", help="Python on the device that runs the agent (default: the profile's)")
    p.add_argument("--device-root", help="agent directory on the device (default: the profile's)")
    return where


def _backend_agent_option(p):
    p.add_argument(
        "--backend",
        metavar="B",
        help="--local: the agent that runs bundles of backend B (paddlelite, "
        "mindspore-lite: under their tool environment's Python, in <device root>-B)",
    )


def _fleet_options(p, where):
    where.add_argument("--fleet", metavar="INVENTORY.toml", help="every device in a fleet inventory, in parallel")
    p.add_argument("--tag", help="with --fleet: only the devices with this tag")
    p.add_argument("--jobs", type=int, help="with --fleet: devices worked on at once (default 8)")
    p.add_argument(
        "--device-timeout",
        type=float,
        help="with --fleet: seconds one device may take before it is given up (default 300)",
    )


def _bench_options(p):
    p.add_argument("--runs", type=int, default=100, help="timed runs (default 100)")
    p.add_argument("--warmup", type=int, default=10, help="warm-up runs, not counted (default 10)")
    p.add_argument("--threads", type=int, help="inference threads (default: the profile's performance cores)")
    p.add_argument("--provider", action="append", help="accelerator to request, best first (default: the profile's)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("-q", "--quiet", action="store_true")


def parser():
    p = argparse.ArgumentParser(
        prog="edgekit", description="Build, shrink, deploy and benchmark models on your own edge devices."
    )
    p.add_argument("--version", action="version", version=f"edgekit {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    s = sub.add_parser("profiles", help="list device profiles, or show one")
    s.add_argument("action", nargs="?", choices=["list", "show"], default="list")
    s.add_argument("name", nargs="?")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_profiles)

    s = sub.add_parser("build", help="convert and shrink a model for a device profile into a bundle")
    s.add_argument("model", help="ONNX model file")
    s.add_argument("--profile", required=True, help="device profile (see `edgekit profiles`), or a .toml file")
    s.add_argument("-o", "--output", required=True, help="bundle directory to write")
    s.add_argument(
        "--backend",
        help="runtime to build for: "
        + ", ".join(n + " (default)" * (n == "ort") for n in TABLE.names())
        + " (see `edgekit backends`)",
    )
    s.add_argument(
        "--precision",
        default="auto",
        choices=["auto", *TABLE.precisions()],
        help="auto: what the profile runs fast (int8 needs --calib); int8-dynamic: ort; "
        "int8-weights: openvino, mnn; int4-weights: mnn",
    )
    s.add_argument("--calib", help="calibration data: .npz/.npy, or a folder of images (with --preprocess)")
    s.add_argument("--val", help="validation data for the fidelity check (default: the calibration data)")
    s.add_argument("--preprocess", help='image preprocessing, e.g. "resize=224x224 scale=1/255 mean=0.5 std=0.5"')
    s.add_argument("--input-shape", action="append", metavar="NAME=D1,D2,...", help="fix an input's shape (repeatable)")
    s.add_argument("--name", help="model name on the device (default: the model file's stem)")
    s.add_argument("--min-cosine", type=float, help="fidelity threshold: minimum cosine similarity")
    s.add_argument("--min-top1", type=float, help="fidelity threshold: minimum top-1 agreement (0-1)")
    s.add_argument("--max-accuracy-drop", type=float, help="fidelity threshold: accuracy points (with labels)")
    s.add_argument("--allow-degraded", action="store_true", help="write the bundle even if fidelity fails (marked)")
    s.add_argument(
        "--budget",
        help="int8 with the most sensitive layers kept float until the loss fits: accuracy "
        "points (1pt, 0.5pt: needs labels), cos=0.999 or top1=0.99",
    )
    s.add_argument(
        "--prune",
        type=float,
        metavar="RATIO",
        help="prune before converting: remove this fraction (0-1) of the prunable channels, e.g. 0.3",
    )
    s.add_argument(
        "--prune-mode",
        choices=["structured", "unstructured"],
        help="structured (default): remove channels, the model gets smaller and faster; "
        "unstructured: zero the smallest weights (smaller compressed)",
    )
    s.add_argument(
        "--prune-recipe", metavar="TOML", help="pruning recipe: mode, ratio, [layers] name = ratio, skip = [...]"
    )
    s.add_argument(
        "--auto",
        action="store_true",
        help="build every backend x precision x pruning level the profile supports, measure the ones that "
        "keep fidelity on the device (--target) and write the winner of the latency/size/accuracy front",
    )
    s.add_argument(
        "--target",
        metavar="URL",
        help="--auto: device to measure on: local:// (default), ssh://USER@HOST[:PORT], adb://SERIAL",
    )
    s.add_argument("--backends", metavar="B1,B2", help="--auto: only these backends (default: all the profile runs)")
    s.add_argument("--prune-levels", metavar="R1,R2", help="--auto: pruning levels to try (default 0,0.25)")
    s.add_argument("--auto-runs", type=int, help="--auto: timed runs per round and candidate (default 50)")
    s.add_argument("--auto-rounds", type=int, help="--auto: interleaved measuring rounds (default 3)")
    s.add_argument("--device-python", help="--auto: Python on the target device")
    s.add_argument("--device-root", help="--auto: agent directory on the target device")
    s.add_argument("--no-cache", action="store_true", help="convert again even if the inputs are unchanged")
    s.add_argument("--json", action="store_true", help="print the build report as one JSON object")
    s.add_argument("-q", "--quiet", action="store_true")
    s.set_defaults(func=cmd_build)

    s = sub.add_parser("deploy", help="install a bundle (and the agent) on a device, benchmark it there")
    s.add_argument("bundle")
    _fleet_options(s, _device_options(s))
    _bench_options(s)
    s.set_defaults(func=cmd_deploy)

    s = sub.add_parser("bench", help="benchmark a bundle already deployed on a device")
    s.add_argument("bundle")
    _fleet_options(s, _device_options(s))
    _bench_options(s)
    s.set_defaults(func=cmd_bench)

    s = sub.add_parser("agent", help="start, stop or show the agent on a device")
    s.add_argument("action", choices=["start", "stop", "status"])
    _device_options(s)
    _backend_agent_option(s)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_agent)

    s = sub.add_parser("rollback", help="serve the previous kept version of a model on a device again")
    s.add_argument("name", help="model name on the device (see `edgekit models`)")
    s.add_argument("--to", metavar="VERSION", help="a specific kept version instead of the previous one")
    _device_options(s)
    _backend_agent_option(s)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_rollback)

    s = sub.add_parser("models", help="list the models a device serves, with the versions it keeps")
    s.add_argument("--remove", metavar="NAME", help="unload NAME and delete every version the device keeps of it")
    _device_options(s)
    _backend_agent_option(s)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_models)

    s = sub.add_parser("field", help="pull what devices recorded of real traffic, and report lab against field")
    fsub = s.add_subparsers(dest="action", metavar="ACTION", required=True)
    fp = fsub.add_parser("pull", help="fetch records since the last pull into the local store (idempotent)")
    _device_options(fp)
    _backend_agent_option(fp)
    fp.add_argument("--name", help="name for this device in reports (default: its hostname)")
    fr = fsub.add_parser("report", help="per device, model version and backend: p50/p90/p99, errors, lab vs field")
    fr.add_argument("--model", help="only this model")
    fr.add_argument("--since", help="only records newer than this, e.g. 7d, 12h, 30m")
    fr.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report with charts")
    for fx in (fp, fr):
        fx.add_argument("--store", help="host-side store (default ~/.cache/edgekit/field.db)")
        fx.add_argument("--json", action="store_true")
        fx.add_argument("-q", "--quiet", action="store_true")
    s.set_defaults(func=cmd_field)

    s = sub.add_parser("explain", help="which accelerator runs each node of a bundle, why not, and what would fix it")
    s.add_argument("bundle")
    s.add_argument("--profile", help="ask about another profile (default: the bundle's)")
    s.add_argument("--model", help="the source ONNX model, for bundles whose model file is not a readable graph (.ort)")
    s.add_argument("--selective-build", metavar="DIR", help="write the runtime's reduced-build inputs into DIR")
    s.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")
    s.add_argument("--json", action="store_true", help="print the report as one JSON object")
    s.set_defaults(func=cmd_explain)

    s = sub.add_parser(
        "backends",
        help="list backends (usable here, precisions, tool environment); install or "
        "remove a backend's tool environment",
    )
    s.add_argument("action", nargs="?", choices=["list", "install", "remove"], default="list")
    s.add_argument("name", nargs="?")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_backends)

    s = sub.add_parser("doctor", help="which backends and transports work here, and why not")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_doctor)
    return p


def main(argv=None):
    p = parser()
    args = p.parse_args(argv)
    if not getattr(args, "func", None):
        p.print_help()
        return 2
    try:
        return args.func(args)
    except EdgekitError as e:
        _err(f"error: {e}")
        return e.exit_code
    except KeyboardInterrupt:
        _err("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())

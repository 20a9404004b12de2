"""Fleet deploy: wall time of `edgekit deploy --fleet` to 1 device vs 10 devices in parallel.

The devices are emulated (tests/harness/netns.py): each in its own network namespace with its own
sshd, reached over a bridge, each with its own agent directory (a cold deploy every
round: agent upload and start, bundle upload, verification, benchmark, warm load).
All of them share this machine's CPU cores, so on a machine with fewer cores than
devices the agents' start-up and benchmarks compete for them: the ratio measures the
fleet code's parallelism *and* that contention, not what 10 real devices would take.

Bundle: PP-OCR cls, profile host, fp32. Rounds alternate 1 device and 10 devices
(default 3 of each); the CLI runs in the controller namespace; wall time includes
interpreter start. Goal: 10 devices <= 1.5x one device (a record, not a gate).
Needs root (network namespaces) and openssh-server.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import _common as C

NAME = "fleet"
GOAL_RATIO = 1.5


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each fleet size (default 3)")
    ap.add_argument("--devices", type=int, default=10, help="devices in the big fleet (default 10)")
    ap.add_argument("--runs", type=int, default=50, help="benchmark runs on each device (default 50)")
    args = ap.parse_args(argv)

    from harness import netns

    reason = netns.unavailable_reason()
    if reason:
        raise SystemExit(f"fleet benchmark needs network namespaces: {reason}")
    import edgekit

    work = C.workspace(NAME)
    env = C.environment()
    bundle = work / "bundle"
    edgekit.build(str(C.PPOCR), "host", str(bundle), precision="fp32", input_shapes=list(C.PPOCR_SHAPE))
    results = {1: [], args.devices: []}
    per_device = {1: [], args.devices: []}
    with netns.NetnsLab() as lab:
        for _ in range(args.devices):
            lab.add_device("ok")
        C.log(f"{args.devices} emulated devices up in namespaces {lab.tag}*")
        for rnd in range(args.rounds):
            for size in (1, args.devices):
                devices = lab.devices[:size]
                roots = [work / f"r{rnd}-n{size}" / f"dev{d.index}" for d in devices]
                inv = work / f"r{rnd}-n{size}.toml"
                inv.write_text(lab.inventory(devices, roots))
                cmd = lab.exec_prefix + [
                    sys.executable,
                    "-m",
                    "edgekit",
                    "deploy",
                    str(bundle),
                    "--fleet",
                    str(inv),
                    "--jobs",
                    str(size),
                    "--runs",
                    str(args.runs),
                    "--json",
                ]
                t0 = time.perf_counter()
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=dict(os.environ))
                wall = time.perf_counter() - t0
                for r in roots:
                    C.stop_agent(_NoDevice(), r)
                if p.returncode != 0:
                    raise SystemExit(f"fleet deploy failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
                out = json.loads(p.stdout)
                results[size].append(wall)
                per_device[size] += [r["seconds"] for r in out["devices"]]
                C.log(
                    f"round {rnd + 1}: {size} device(s) in {wall:.2f} s wall (fleet {out['summary']['seconds']:.2f} s)"
                )
    big = args.devices
    s = {str(k): C.summary(v) for k, v in results.items()}
    d = {str(k): C.summary(v) for k, v in per_device.items()}
    ratios = [b / a for a, b in zip(results[1], results[big])]
    ratio = s[str(big)]["p50"] / s["1"]["p50"]
    C.write_results(
        NAME,
        {
            "benchmark": NAME,
            "environment": env,
            "goal_ratio": GOAL_RATIO,
            "devices": big,
            "rounds": args.rounds,
            "runs_per_device": args.runs,
            "bundle": "PP-OCR cls, host, fp32",
            "shaping": "none (all devices healthy)",
            "wall_seconds": s,
            "per_device_seconds": d,
            "ratio_median": ratio,
            "ratio_per_round": ratios,
            "raw": {str(k): v for k, v in results.items()},
            "meets_goal": ratio <= GOAL_RATIO,
            "note": "devices share this machine's CPU cores; see the module docstring",
        },
    )
    print(
        f"### Fleet deploy, 1 vs {big} emulated devices ({env['cpu_count']}-core {env['machine']}, "
        f"{args.rounds} rounds, cold deploys)\n"
    )
    print(
        C.table(
            ["devices", "wall s median", "p10–p90", "per-device s median", f"vs 1 device (goal ≤ {GOAL_RATIO})"],
            [
                [
                    1,
                    f"**{s['1']['p50']:.2f}**",
                    f"{s['1']['p10']:.2f}–{s['1']['p90']:.2f}",
                    f"{d['1']['p50']:.2f}",
                    "1.00×",
                ],
                [
                    big,
                    f"**{s[str(big)]['p50']:.2f}**",
                    f"{s[str(big)]['p10']:.2f}–{s[str(big)]['p90']:.2f}",
                    f"{d[str(big)]['p50']:.2f}",
                    f"**{ratio:.2f}×** (rounds: {', '.join(f'{x:.2f}' for x in ratios)})",
                ],
            ],
        )
    )
    return 0


class _NoDevice:
    def close(self):
        pass


if __name__ == "__main__":
    sys.exit(main())

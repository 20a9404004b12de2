"""Unchanged rebuild (build-cache hit) vs cold build of the PP-OCR int8 bundle.

The build: examples/ppocr_mobile_v2_cls.onnx, profile host, --precision int8,
x=1,3,48,192, --calib 200 rendered text lines (seed 1), --val 400 lines (seed 0).

* cold: the first build into an empty cache, plus (COLD-1) more with ``use_cache=False``
  (a full conversion each);
* warm, API: ``edgekit.build(...)`` again with unchanged inputs, in this process;
* warm, CLI: ``.venv/bin/edgekit build ... --json -q`` in a subprocess, wall time including
  interpreter start-up; and ``python -c "import edgekit"`` as the start-up floor.

Medians of N (default 5) with p10-p90. Goal: a cache hit <= 1 s (API and CLI).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import _common as C

NAME = "rebuild"
GOAL_S = 1.0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=5, help="repetitions of each warm measurement (default 5)")
    ap.add_argument("--cold", type=int, default=3, help="cold builds (default 3)")
    args = ap.parse_args(argv)

    import edgekit

    work = C.workspace(NAME)  # always a fresh cache: the first build must be cold
    env = C.environment()
    C.log(f"workspace {work}, EDGEKIT_CACHE_DIR={os.environ['EDGEKIT_CACHE_DIR']}")
    cal = C.textlines_npz(work / "calib.npz", 200, seed=1)
    val = C.textlines_npz(work / "val.npz", 400, seed=0)
    out = work / "bundle"
    kwargs = dict(precision="int8", calib=str(cal), val=str(val), input_shapes=list(C.PPOCR_SHAPE))

    cold, cold_reported = [], []
    for i in range(args.cold):
        t0 = time.perf_counter()
        rep = edgekit.build(str(C.PPOCR), "host", str(out), use_cache=(i == 0), **kwargs)
        cold.append(time.perf_counter() - t0)
        cold_reported.append(rep["build_seconds"])
        assert not rep["cache"]["hit"], rep["cache"]
        C.log(f"cold build {i + 1}: {cold[-1]:.2f} s")
    bundle_id = rep["bundle_id"]

    api, api_reported = [], []
    for i in range(args.n):
        t0 = time.perf_counter()
        rep = edgekit.build(str(C.PPOCR), "host", str(out), **kwargs)
        api.append(time.perf_counter() - t0)
        api_reported.append(rep["build_seconds"])
        assert rep["cache"]["hit"] and rep["bundle_id"] == bundle_id, (rep["cache"], rep["bundle_id"])
        C.log(f"cache hit (API) {i + 1}: {api[-1]:.3f} s")

    exe = Path(sys.executable).with_name("edgekit")
    cli_cmd = [
        str(exe),
        "build",
        str(C.PPOCR),
        "--profile",
        "host",
        "-o",
        str(out),
        "--precision",
        "int8",
        "--calib",
        str(cal),
        "--val",
        str(val),
        "--input-shape",
        C.PPOCR_SHAPE[0],
        "--json",
        "-q",
    ]
    cli, cli_reported = [], []
    for i in range(args.n):
        t0 = time.perf_counter()
        p = subprocess.run(cli_cmd, capture_output=True, text=True, timeout=600)
        cli.append(time.perf_counter() - t0)
        if p.returncode != 0:
            raise SystemExit(f"edgekit build failed ({p.returncode}):\n{p.stderr}")
        rep = json.loads(p.stdout)
        cli_reported.append(rep["build_seconds"])
        assert rep["cache"]["hit"] and rep["bundle_id"] == bundle_id, (rep["cache"], rep["bundle_id"])
        C.log(f"cache hit (CLI) {i + 1}: {cli[-1]:.3f} s wall, {rep['build_seconds']:.3f} s in build()")

    floor = []
    for _ in range(args.n):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import edgekit"], check=True)
        floor.append(time.perf_counter() - t0)

    s = {
        k: C.summary(v)
        for k, v in {
            "cold": cold,
            "cold_build_seconds": cold_reported,
            "api": api,
            "api_build_seconds": api_reported,
            "cli_wall": cli,
            "cli_build_seconds": cli_reported,
            "python_import_edgekit": floor,
        }.items()
    }
    C.write_results(
        NAME,
        {
            "benchmark": NAME,
            "environment": env,
            "goal_s": GOAL_S,
            "cli_command": cli_cmd,
            "data_bytes": {"calib": cal.stat().st_size, "val": val.stat().st_size},
            "seconds": s,
            "raw": {"cold": cold, "api": api, "cli_wall": cli, "floor": floor},
            "meets_goal": {"api": s["api"]["p50"] <= GOAL_S, "cli": s["cli_wall"]["p50"] <= GOAL_S},
        },
    )

    def row(label, k, goal=True):
        v = s[k]
        ok = ("yes" if v["p50"] <= GOAL_S else "no") if goal else "–"
        speed = f"{s['cold']['p50'] / v['p50']:.1f}×" if goal else "–"
        return [label, f"**{v['p50']:.3f}**", f"{v['p10']:.3f}–{v['p90']:.3f}", v["n"], speed, ok]

    print(
        f"### Rebuild of the PP-OCR int8 bundle (host profile, {env['cpu_count']}-core {env['machine']}, "
        f"onnxruntime {env['onnxruntime']})\n"
    )
    print(
        C.table(
            ["build", "median s", "p10–p90 s", "n", "faster than cold", "≤ 1 s"],
            [
                row("cold (empty cache / use_cache=False)", "cold", goal=False),
                row("cache hit, `edgekit.build()`", "api"),
                row("cache hit, `edgekit build` CLI (wall, incl. interpreter start)", "cli_wall"),
                row("… of which inside `build()` (report `build_seconds`)", "cli_build_seconds", goal=False),
                row("`python -c 'import edgekit'` (start-up floor)", "python_import_edgekit", goal=False),
            ],
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What a naive `edgekit build MODEL --profile host` does with each zoo model (no shapes, no calibration data).

    python benchmarks/zoo/baseline.py [--cache DIR] [--only NAME ...] [--timeout 300] [--json OUT.json]

Prints one markdown row per model: built or not, the first line of the error, the wall time. Each build writes to
a temporary folder that is removed afterwards; `--no-cache` keeps the run independent of earlier builds.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fetch import REPO, fetch_model, load_catalogue, zoo_dir  # noqa: E402


def first_error_line(text: str) -> str:
    """The first line that reads as an error, else the last non-empty line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if ln.lower().startswith(("error", "refused")) or "Error:" in ln:
            return ln
    return lines[-1] if lines else ""


def build_once(model: Path, timeout: int) -> dict[str, object]:
    """Run the CLI once; returns status ('built', 'failed', 'timeout'), exit code, first error line, seconds."""
    with tempfile.TemporaryDirectory(prefix="zoo-baseline-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "edgekit",
            "build",
            str(model),
            "--profile",
            "host",
            "-o",
            f"{tmp}/b",
            "--no-cache",
            "--json",
        ]
        start = time.monotonic()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
        except subprocess.TimeoutExpired:
            return {"status": "timeout", "rc": None, "message": f"no result after {timeout} s", "seconds": timeout}
        seconds = round(time.monotonic() - start, 1)
        out = proc.stderr + "\n" + proc.stdout
        if proc.returncode != 0:
            return {"status": "failed", "rc": proc.returncode, "message": first_error_line(out), "seconds": seconds}
        return {"status": built_summary(proc.stdout), "rc": 0, "message": step_line(proc.stderr), "seconds": seconds}


def built_summary(report_json: str) -> str:
    """'built ort fp32' from the build report (--json), or plain 'built' if it cannot be read."""
    try:
        report = json.loads(report_json)
    except json.JSONDecodeError:
        return "built"
    return f"built {report.get('backend', '?')} {report.get('precision', '?')}"


def step_line(log: str) -> str:
    """The fidelity line of the kept build step (what the gate measured), from the build log."""
    lines = [ln.strip() for ln in log.splitlines() if " ok - " in ln or ": ok" in ln]
    if not lines:
        return ""
    parts = lines[-1].split("; ")
    return parts[0] + (f" (+{len(parts) - 1} more outputs)" if len(parts) > 1 else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", help="zoo cache folder (see fetch.py)")
    parser.add_argument("--only", nargs="+", metavar="NAME")
    parser.add_argument("--timeout", type=int, default=300)
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    cache = zoo_dir(args.cache)
    results: dict[str, dict[str, object]] = {}
    print("| model | naive `edgekit build --profile host` | first line of the error, or the kept step's fidelity | s |")
    print("| --- | --- | --- | --- |")
    for entry in load_catalogue()[0]:
        if args.only and entry.name not in args.only:
            continue
        res = build_once(fetch_model(entry, cache), args.timeout)
        results[entry.name] = res
        message = str(res["message"]).replace("|", "\\|")
        print(f"| {entry.name} | {res['status']} | {message} | {res['seconds']} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

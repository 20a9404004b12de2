"""Shared helpers of the edgekit benchmarks (not a benchmark itself).

Every benchmark: runs in a throw-away EDGEKIT_CACHE_DIR (unless ``--keep-cache``),
prints one Markdown table on stdout, writes ``benchmarks/results/NAME.json`` and stops
any agent it started.
"""

import atexit
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
EXAMPLES = ROOT / "examples"
TESTS = ROOT / "tests"
RESULTS = BENCH_DIR / "results"
PPOCR = EXAMPLES / "ppocr_mobile_v2_cls.onnx"
PPOCR_SHAPE = ["x=1,3,48,192"]
MNV2_SHAPE = ["input=1,3,224,224"]

for p in (str(EXAMPLES), str(TESTS)):
    if p not in sys.path:
        sys.path.insert(0, p)


def log(msg):
    """Progress goes to stderr; stdout carries only the Markdown table."""
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def workspace(name, keep_cache=False):
    """A temp dir for the run; EDGEKIT_CACHE_DIR points into it unless ``keep_cache``."""
    work = Path(tempfile.mkdtemp(prefix=f"edgekit-bench-{name}-"))
    if not keep_cache:
        os.environ["EDGEKIT_CACHE_DIR"] = str(work / "cache")
    atexit.register(shutil.rmtree, work, True)
    return work


def open_local_device(root):
    """A local Device whose agent lives under ``root``; the agent is stopped at exit."""
    from edgekit.deployer import open_device

    dev = open_device("local", device_root=str(root))
    atexit.register(stop_agent, dev, root)
    return dev


def stop_agent(dev, root):
    try:
        dev.close()
    except Exception:
        pass
    pyz = Path(root) / "agent" / "edgekit-agent.pyz"
    if pyz.exists():
        r = subprocess.run(
            [sys.executable, str(pyz), "stop", "--root", str(root)], capture_output=True, text=True, timeout=60
        )
        log(f"agent stop: {(r.stdout or r.stderr).strip()}")


def pct(values, q):
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def summary(values):
    """Median with spread: p10, p25, p50, p75, p90, IQR, n."""
    v = np.asarray(values, dtype=np.float64)
    return {
        "p10": pct(v, 10),
        "p25": pct(v, 25),
        "p50": pct(v, 50),
        "p75": pct(v, 75),
        "p90": pct(v, 90),
        "iqr": pct(v, 75) - pct(v, 25),
        "min": float(v.min()),
        "max": float(v.max()),
        "n": int(v.size),
    }


def environment():
    import onnxruntime

    try:
        load = os.getloadavg()
    except OSError:
        load = None
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import edgekit

    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "onnxruntime": onnxruntime.__version__,
        "numpy": np.__version__,
        "edgekit": edgekit.__version__,
        "loadavg_at_start": load,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def table(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for r in rows:
        out.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(out)


def write_results(name, data):
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, default=float) + "\n")
    log(f"wrote {path}")
    return path


def textlines_npz(path, n, seed):
    from textlines import make_textlines

    x, labels = make_textlines(n, seed=seed)
    np.savez(path, x=x, labels=labels)
    return Path(path)

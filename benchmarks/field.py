"""Field telemetry costs: recording per request, pull throughput, report time.

1. Recording overhead: what the request path pays to record one request (the
   ``Recorder.record`` append plus the Prometheus counters), timed in-process over
   200,000 calls; and end to end, two agents on the same model in one run, one started
   with ``--no-telemetry``, interleaved blocks of requests (goal: <= 2 % of a 1 ms
   inference, i.e. <= 20 us).
2. Pull throughput: a device store filled with 200,000 records, pulled into a fresh host
   store through the agent's API (local transport), records per second.
3. Report time: ``edgekit field report`` (and its HTML) over 1,000,000 records in the
   host store.
"""

import argparse
import subprocess
import sys
import time

import _common as C
import numpy as np

NAME = "field"


def recording_micro(n=200000):
    import tempfile

    from edgekit_agent.metrics import Metrics
    from edgekit_agent.telemetry import Recorder

    rec = Recorder(tempfile.mkdtemp(prefix="edgekit-rec-"), flush_interval=0.2)
    metrics = Metrics()
    args = ("tiny", "v1", "ort", "CPUExecutionProvider", "1x3x16x16", 0.05, 0.04, "ok")
    per_round = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n // 5):
            metrics.request("tiny", "v1", "ort", "CPUExecutionProvider", "ok", 0.04, 0.05)
            rec.record(*args)
        per_round.append((time.perf_counter() - t0) / (n // 5) * 1e6)
    rec.close()
    return C.summary(per_round)


def recording_e2e(work, rounds=8, block=300):
    from harness.models import tiny_calib, tiny_cnn

    import edgekit
    from edgekit import agent_package
    from edgekit.deployer import deploy
    from edgekit_sdk import AgentClient

    model = tiny_cnn(work / "tiny.onnx")
    out = work / "bundle"
    edgekit.build(model, "host", out, precision="fp32", calib=tiny_calib(work / "c.npz"), name="tiny")
    pyz, _ = agent_package.build(work / "pyz")
    clients = {}
    for label, extra in (("recording", []), ("no-telemetry", ["--no-telemetry"])):
        root = work / label
        subprocess.run(
            [sys.executable, str(pyz), "start", "--root", str(root)] + extra, check=True, capture_output=True
        )
        dev = C.open_local_device(root)
        deploy(out, dev, bench=False)
        dev.client.load("tiny", threads=1)
        clients[label] = AgentClient("127.0.0.1", dev.state["port"])
    x = {"input": np.zeros((1, 3, 16, 16), np.float32)}
    for c in clients.values():
        for _ in range(100):
            c.infer("tiny", x)
    totals = {k: [] for k in clients}
    for r in range(rounds):
        for label in sorted(clients) if r % 2 == 0 else sorted(clients, reverse=True):
            c = clients[label]
            for _ in range(block):
                t0 = time.perf_counter()
                c.infer("tiny", x)
                totals[label].append((time.perf_counter() - t0) * 1000)
    for c in clients.values():
        c.close()
    return {k: C.summary(v) for k, v in totals.items()}


def pull_throughput(work, n=200000):
    from edgekit.field import FieldStore, pull
    from edgekit_agent.telemetry import Recorder

    root = work / "pulldev"
    rec = Recorder(str(root), flush_interval=3600)
    for i in range(n):
        rec.record("m", "v1", "ort", "CPUExecutionProvider", "1x3x16x16", 0.05, 0.4 + (i % 100) * 0.001, "ok")
        if i % 20000 == 0:
            rec.flush()
    rec.close()
    dev = C.open_local_device(root)
    dev.ensure_agent()
    with FieldStore(work / "pull.db") as store:
        t0 = time.perf_counter()
        result = pull(dev, store, batch_size=20000)
        seconds = time.perf_counter() - t0
    return {
        "records": result["added"],
        "seconds": seconds,
        "records_per_s": result["added"] / seconds,
        "batch_size": 20000,
    }


def report_time(work, n=1000000):
    from edgekit.field import FieldStore, report
    from edgekit.field_html import render

    rng = np.random.default_rng(0)
    now = time.time()
    with FieldStore(work / "big.db") as store:
        rows = []
        ts = np.sort(rng.uniform(now - 7 * 86400, now, n))
        ms = rng.lognormal(0.0, 0.3, n)
        for i in range(n):
            dev = f"dev{i % 10}"
            ver = "v1" if ts[i] < now - 3 * 86400 else "v2"
            rows.append(
                (
                    dev,
                    i,
                    float(ts[i]),
                    "ppocr",
                    ver,
                    "ort",
                    "CPUExecutionProvider",
                    "1x3x48x192",
                    0.05,
                    float(ms[i]),
                    None,
                    None,
                    "ok" if i % 500 else "bad_request",
                    None,
                )
            )
        store.db.execute("BEGIN")
        store.db.executemany("INSERT INTO records VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
        store.db.execute("COMMIT")
        times, html_times = [], []
        for _ in range(3):
            t0 = time.perf_counter()
            r = report(store)
            times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            render(r)
            html_times.append(time.perf_counter() - t0)
    return {"records": n, "groups": len(r["entries"]), "report_s": C.summary(times), "html_s": C.summary(html_times)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1000000, help="records for the report benchmark")
    args = ap.parse_args(argv)
    work = C.workspace(NAME)
    env = C.environment()
    C.log("recording, in-process")
    micro = recording_micro()
    C.log("recording, end to end")
    e2e = recording_e2e(work)
    C.log("pull throughput")
    pulled = pull_throughput(work)
    C.log(f"report over {args.records} records")
    rep = report_time(work, args.records)
    rec, off = e2e["recording"], e2e["no-telemetry"]
    results = {
        "benchmark": NAME,
        "environment": env,
        "recording_us_per_request": micro,
        "end_to_end_ms": e2e,
        "pull": pulled,
        "report": rep,
        "goal_recording_us": 20.0,
    }
    C.write_results(NAME, results)
    print(f"### Field telemetry costs ({env['cpu_count']}-core {env['machine']}, Python {env['python']})\n")
    print(
        C.table(
            ["what", "median", "spread", "goal"],
            [
                [
                    "recording per request, in-process (append + counters)",
                    f"**{micro['p50']:.2f} µs**",
                    f"{micro['min']:.2f}–{micro['max']:.2f} µs over 5 rounds",
                    "≤ 20 µs (2 % of 1 ms)",
                ],
                ["end-to-end request, agent recording", f"{rec['p50']:.3f} ms", f"IQR {rec['iqr']:.3f} ms", ""],
                ["end-to-end request, agent --no-telemetry", f"{off['p50']:.3f} ms", f"IQR {off['iqr']:.3f} ms", ""],
                [
                    "difference of medians",
                    f"{1000 * (rec['p50'] - off['p50']):+.1f} µs",
                    "same run, interleaved blocks",
                    "",
                ],
                [
                    "pull throughput (local, batches of 20,000)",
                    f"**{pulled['records_per_s']:,.0f} records/s**",
                    f"{pulled['records']:,} records in {pulled['seconds']:.2f} s",
                    "",
                ],
                [
                    f"field report over {rep['records']:,} records ({rep['groups']} groups)",
                    f"**{rep['report_s']['p50']:.2f} s**",
                    f"{rep['report_s']['min']:.2f}–{rep['report_s']['max']:.2f} s, 3 runs",
                    "",
                ],
                ["HTML rendering of that report", f"{rep['html_s']['p50'] * 1000:.1f} ms", "", ""],
            ],
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Fleet scale by simulation: the broker, the bundle store and the PostgreSQL field store under N simulated devices.

Real servers on this machine: Mosquitto (the broker), nginx serving a bundle store laid out as ``edgekit publish``
writes it, and (unless ``--no-pg``) a throwaway PostgreSQL with the field store. The devices are simulated
(benchmarks/_sim_devices.py): each is a real MQTT session with its own client id, subscribed to its device and group
desired topics as the agent's pull mode is, and fetches with the agent fetcher's requests and sha256 checks; a few
processes each run hundreds or thousands of them on one event loop. No model runs on them: the field records they
report carry inference times drawn from a recorded distribution (the real agent's latency under load,
benchmarks/results/agent_load.json: lognormal through its p50 and p99).

Phases, for each fleet size in ``--devices``:

1. connect: every device connects, subscribes and publishes its retained state. Connect rate; Mosquitto's RSS and
   CPU time per connected device.
2. fan-out: ``Broker.desire`` (what ``edgekit fleet desire`` does) sets one group's desired state; the time until
   every device has received it.
3. fetch: every device fetches the bundle (``--bundle-kb``) from nginx, at most ``--concurrency`` at once across
   the fleet, and reports an install event and its new state; throughput and p50/p99 per fetch; the events and
   retained states are counted on the broker.
4. field ingest: ``--records`` records per device, one pulled batch per device through ``PgFieldStore.store_batch``
   (the real ingest path); rows/s and bytes per stored record.

Results: benchmarks/results/fleet_sim.json (``--results`` to write elsewhere).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import multiprocessing
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as C
import _sim_devices
import numpy as np

NAME = "fleet_sim"
FLEET, GROUP = "sim", "all"
DEVICES_PER_PROCESS = 2500
RECORDED = C.RESULTS / "agent_load.json"


def proc_stat(pid: int) -> tuple[float, float]:
    """(RSS in MiB, user+system CPU seconds) of ``pid``."""
    rss = 0.0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return rss, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def make_store(root: Path, size: int) -> str:
    """A bundle store holding one bundle of two files (``size`` bytes in all), laid out as ``edgekit publish``
    writes it; returns its digest."""
    from edgekit_agent.pull_layout import blob_path, manifest_path

    rng = np.random.default_rng(0)
    files = {"model.onnx": rng.bytes(size - 1024), "config.json": b"{}".ljust(1024)}
    entries = []
    for name, data in files.items():
        sha = hashlib.sha256(data).hexdigest()
        (root / blob_path(sha)).parent.mkdir(parents=True, exist_ok=True)
        (root / blob_path(sha)).write_bytes(data)
        entries.append({"name": name, "size": len(data), "sha256": sha})
    raw = json.dumps({"id": "sim-" + hashlib.sha256(str(size).encode()).hexdigest()[:12], "files": entries}).encode()
    digest = hashlib.sha256(raw).hexdigest()
    (root / manifest_path(digest)).parent.mkdir(parents=True, exist_ok=True)
    (root / manifest_path(digest)).write_bytes(raw)
    return f"sha256:{digest}"


def recorded_latency() -> tuple[float, float]:
    """(mu, sigma) of a lognormal through the recorded p50 and p99 of the agent under load."""
    load = json.loads(RECORDED.read_text())["load"]
    return math.log(load["p50_ms"]), math.log(load["p99_ms"] / load["p50_ms"]) / 2.3263


def field_rows(device: int, count: int, t0: float, rng: np.random.Generator, lat: tuple[float, float]) -> list:
    ts = np.sort(rng.uniform(t0, t0 + 86400, count))
    infer = rng.lognormal(lat[0], lat[1], count)
    queue = rng.uniform(0.0, 0.3, count)
    return [
        (i + 1, float(t), "sim", "v1", "ort", "CPUExecutionProvider", "1x3x48x192", float(q), float(m), None, None,
         "ok", None)
        for i, (t, q, m) in enumerate(zip(ts, queue, infer))
    ]  # fmt: skip


def ingest(url: str, n: int, records: int, per_pull: int, group: int) -> dict[str, Any]:
    """The first ``per_pull`` devices one pulled batch each (``store_batch``: a transaction per device, as ``field
    pull`` writes), the rest ``group`` devices' records per ``ingest_rows`` call (a collector batching devices)."""
    from edgekit.field_pg import PgFieldStore

    rng, lat, t0 = np.random.default_rng(n), recorded_latency(), 1_750_000_000.0
    batches = [field_rows(d, records, t0, rng, lat) for d in range(n)]
    pull_s = grouped_s = 0.0
    per_pull = min(per_pull, n)
    with PgFieldStore(url) as store:
        for d, recs in enumerate(batches[:per_pull]):
            sid = f"dev{d:05d}"
            payload = {"store_id": sid, "records": recs, "events": [], "context": [], "device": {"hostname": sid}}
            a = time.perf_counter()
            added = store.store_batch(payload, sid, "mqtt-sim", None)
            pull_s += time.perf_counter() - a
            assert added == records, (added, records)
        for first in range(per_pull, n, group):
            rows = [(f"dev{d:05d}", *r) for d in range(first, min(n, first + group)) for r in batches[d]]
            a = time.perf_counter()
            added = store.ingest_rows(rows)
            grouped_s += time.perf_counter() - a
            assert added == len(rows), (added, len(rows))
        size = store.db.execute("SELECT pg_database_size(current_database())").fetchone()[0]
        rec_bytes = sum(
            store.db.execute("SELECT pg_total_relation_size(%s)", (part,)).fetchone()[0] for part in store.partitions()
        )
        rollup_rows = store.db.execute(
            "SELECT (SELECT count(*) FROM field_hours) + (SELECT count(*) FROM field_totals)"
        ).fetchone()[0]
    total = n * records
    grouped = (n - per_pull) * records
    return {
        "records_per_device": records,
        "rows": total,
        "per_pull": {"devices": per_pull, "seconds": pull_s, "rows_per_s": per_pull * records / pull_s},
        "grouped": {
            "devices_per_call": group,
            "devices": n - per_pull,
            "seconds": grouped_s,
            "rows_per_s": grouped / grouped_s if grouped else None,
        },
        "rows_per_s": total / (pull_s + grouped_s),
        "database_bytes": size,
        "record_bytes": rec_bytes / total,
        "rollup_rows": rollup_rows,
        "latency_source": f"lognormal through p50/p99 of {RECORDED.name}",
    }


def stats(values: list[float]) -> dict[str, float]:
    return {"p50": C.pct(values, 50), "p99": C.pct(values, 99), "max": float(max(values))}


def run_size(n: int, mq: Any, nginx: Any, digest: str, bundle_bytes: int, args: Any, pg: Any) -> dict[str, Any]:
    from edgekit.fleet_pull.broker import Broker

    procs = max(1, math.ceil(n / DEVICES_PER_PROCESS))
    ids = [f"d{n}-{i:05d}" for i in range(n)]
    ctx = multiprocessing.get_context("fork")
    pipes, workers = [], []
    for p in range(procs):
        parent, child = ctx.Pipe()
        w = ctx.Process(target=_sim_devices.main, args=(child, "127.0.0.1", mq.port, FLEET, GROUP, ids[p::procs]))
        w.start()
        pipes.append(parent)
        workers.append(w)

    def phase(cmd: tuple[Any, ...], timeout: float) -> list[dict[str, Any]]:
        for p in pipes:
            p.send(cmd)
        return [wait(p, w, cmd[0], timeout) for p, w in zip(pipes, workers)]

    def wait(pipe: Any, worker: Any, what: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while not pipe.poll(1.0):
            if not worker.is_alive():
                raise RuntimeError(f"a device process died (exit code {worker.exitcode}) during {what}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} of {n} devices did not finish within {timeout:.0f} s")
        return dict(pipe.recv())

    res: dict[str, Any] = {"devices": n, "processes": procs}
    try:
        rss0, cpu0 = proc_stat(mq.proc.pid)
        t = time.time()
        reports = phase(("connect",), args.timeout)
        ready = [x for r in reports for x in r["ready"]]
        elapsed = max(ready) - t
        rss1, cpu1 = proc_stat(mq.proc.pid)
        time.sleep(args.idle)
        _, cpu2 = proc_stat(mq.proc.pid)
        res["connect"] = {
            "seconds": elapsed,
            "per_s": n / elapsed,
            "broker_rss_mb_before": rss0,
            "broker_rss_mb_after": rss1,
            "broker_kb_per_device": (rss1 - rss0) * 1024 / n,
            "broker_cpu_ms_per_connect": (cpu1 - cpu0) * 1000 / n,
            "broker_idle_cpu_pct": (cpu2 - cpu1) / args.idle * 100,
        }
        C.log(f"{n}: connected in {elapsed:.1f} s, mosquitto {rss0:.1f} -> {rss1:.1f} MiB")
        with Broker(mq.url, fleet=FLEET, timeout=min(args.timeout, 120)) as broker:
            broker.watch_events()
            fanout_at = [0.0]

            def desire() -> None:  # what Broker.desire does, timed from the publish (not the read before it)
                models = broker.desired(group=GROUP)
                models["sim"] = {"digest": digest, "store": nginx.url}
                fanout_at[0] = time.time()
                broker.set_desired(models, group=GROUP)

            for pipe in pipes:
                pipe.send(("fanout", digest.split(":")[1]))
            desire()
            reports = [wait(p, w, "fan-out", args.timeout) for p, w in zip(pipes, workers)]
            got = [x - fanout_at[0] for r in reports for x in r["received"]]
            _, cpu3 = proc_stat(mq.proc.pid)
            payload = len(broker.retained(broker.desired_topic(group=GROUP))[broker.desired_topic(group=GROUP)])
            topic = len(broker.desired_topic(group=GROUP))
            res["fanout"] = {
                "all_received_s": max(got),
                "latency_s": stats(got),
                "payload_bytes": payload,
                "wire_bytes_per_device": payload + topic + 2 + 2 + 4,  # PUBLISH: header, topic length, packet id
                "broker_cpu_ms": (cpu3 - cpu2) * 1000,
            }
            C.log(f"{n}: fan-out to all in {max(got) * 1000:.0f} ms")
            nginx_pid = children(nginx.proc.pid)[0]
            _, ncpu0 = proc_stat(nginx_pid)
            per_proc = max(1, args.concurrency // procs)
            t = time.time()
            reports = phase(("fetch", nginx.url, digest, per_proc), args.timeout)
            fetches = [f for r in reports for f in r["fetches"]]
            end = max(f[1] for f in fetches)
            _, ncpu1 = proc_stat(nginx_pid)
            failed = sum(1 for f in fetches if f[2] < 0)
            events = 0
            deadline = time.monotonic() + args.timeout
            while events < n and time.monotonic() < deadline:
                if broker.next_event(5.0) is None:
                    break  # none for 5 s after every fetch ended: the rest are lost
                events += 1
            try:
                states: int | str = sum(1 for s in broker.states().values() if s.get("models", {}).get("sim"))
            except Exception as e:  # reported, not fatal: the figures above stand
                states = f"{type(e).__name__}: {e}"
            res["fetch"] = {
                "bundle_bytes": bundle_bytes,
                "concurrency": per_proc * procs,
                "seconds": end - t,
                "devices_per_s": n / (end - t),
                "mb_per_s": sum(max(f[2], 0) for f in fetches) / (end - t) / 1e6,
                "fetch_s": stats([f[1] - f[0] for f in fetches]),
                "failed": failed,
                "nginx_cpu_ms_per_fetch": (ncpu1 - ncpu0) * 1000 / n,
                "install_events_seen": events,
                "states_reporting_install": states,
            }
            C.log(f"{n}: fetched by all in {end - t:.1f} s, {failed} failed, {events} events, states: {states}")
        phase(("stop",), 60)
    finally:
        for w in workers:
            w.join(30)
            if w.is_alive():
                w.terminate()
    if pg is not None:
        res["ingest"] = ingest(pg.database(f"field{n}"), n, args.records, args.per_pull, args.group)
        C.log(f"{n}: ingested {res['ingest']['rows']:,} rows, {res['ingest']['rows_per_s']:,.0f} rows/s")
    return res


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", default="1000,5000,10000", help="fleet sizes, comma-separated")
    ap.add_argument("--bundle-kb", type=int, default=256, help="size of the bundle every device fetches")
    ap.add_argument("--concurrency", type=int, default=32, help="fetches in flight across the fleet")
    ap.add_argument("--records", type=int, default=100, help="field records per device, one batch")
    ap.add_argument("--per-pull", type=int, default=200, help="devices ingested one batch per transaction")
    ap.add_argument("--group", type=int, default=100, help="devices per ingest_rows call for the rest")
    ap.add_argument(
        "--max-queued",
        type=int,
        default=0,
        help="Mosquitto's max_queued_messages (0: unlimited; its default 1000 drops the host's events and states "
        "past 1000 devices)",
    )
    ap.add_argument("--idle", type=float, default=5.0, help="seconds of idle broker CPU measured")
    ap.add_argument("--timeout", type=float, default=600.0, help="limit of each phase")
    ap.add_argument("--no-pg", action="store_true", help="skip the PostgreSQL ingest")
    ap.add_argument("--results", default=None, help="write the results here instead of benchmarks/results")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.devices.split(",")]
    from harness.servers import Mosquitto, Nginx

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 2 * max(sizes) + 1024)
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # inherited by mosquitto, nginx and the devices
    if want < max(sizes) + 256:
        raise SystemExit(f"{max(sizes)} devices need {max(sizes) + 256} open files; the hard limit is {hard}")
    results: dict[str, Any] = {"benchmark": NAME, "environment": C.environment(), "args": vars(args), "sizes": []}
    with tempfile.TemporaryDirectory(prefix="fleet-sim-") as store:
        digest = make_store(Path(store), args.bundle_kb * 1024)
        pg = None
        if not args.no_pg:
            from harness.postgres import ThrowawayPostgres

            pg = ThrowawayPostgres(port=55433).start()
        try:
            with Nginx(store, worker_connections=args.concurrency * 4 + 64) as nginx:
                for n in sizes:
                    with Mosquitto(extra=[f"max_queued_messages {args.max_queued}"]) as mq:
                        results["sizes"].append(run_size(n, mq, nginx, digest, args.bundle_kb * 1024, args, pg))
        finally:
            if pg is not None:
                pg.stop()
    if args.results:
        Path(args.results).write_text(json.dumps(results, indent=2) + "\n")
    else:
        C.write_results(NAME, results)
    print(table(results))
    return results


def table(results: dict[str, Any]) -> str:
    rows = [
        "| devices | connect/s | broker KiB/device | fan-out to all | fetch: devices/s, p50/p99 "
        "| ingest rows/s: per pull,"
        " grouped |",
        "|---|---|---|---|---|---|",
    ]
    for r in results["sizes"]:
        c, f, g = r["connect"], r["fanout"], r["fetch"]
        i = r.get("ingest")
        ing = f"{i['per_pull']['rows_per_s']:,.0f}, {i['grouped']['rows_per_s'] or 0:,.0f}" if i else "-"
        rows.append(
            f"| {r['devices']:,} | {c['per_s']:,.0f} | {c['broker_kb_per_device']:.1f} | "
            f"{f['all_received_s'] * 1000:,.0f} ms | {g['devices_per_s']:,.0f}/s, "
            f"{g['fetch_s']['p50'] * 1000:.0f}/{g['fetch_s']['p99'] * 1000:.0f} ms | {ing} |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)

"""The agent under load and fault: concurrent clients, schema-driven fuzzing, kill -9 mid-install.

1. Load: ``--clients`` (50) concurrent clients, each on its own kept-alive connection, send binary
   infer requests to the tiny CNN for ``--seconds`` (60); every error counts (goal: 0).
2. Fuzz: ``--fuzz`` (10,000) requests generated from the agent's ``openapi.json`` (every documented
   route and method; path parameters, query parameters and JSON bodies drawn from the schema's types
   and bounds, then mutated: wrong types, out-of-range and non-finite numbers, deep nesting, huge
   strings, broken JSON, wrong content types, missing or wrong tokens). A *crash* is a 500, a
   connection closed without an answer, or the agent process gone (goal: 0); RSS is sampled after
   the first 10 % and at the end (goal: flat, < 20 MB apart).
3. Kill -9 mid-install: ``--kills`` (5) times, a new version's upload is cut by SIGKILL of the agent
   halfway; after the supervisor restarts it the previous version must still serve and the upload
   must resume where it stopped and install (goal: nothing lost, every time).

No dependency beyond the project's: the fuzzer is a small schema-driven generator (seeded, so a
failing request can be replayed with ``--seed``).
"""

import argparse
import hashlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

NAME = "agent_load"
WEIRD = [None, True, -1, 0, 1, 2, 3, 1.5, 10**9, 10**30, "abc", "nan", "", [], {}, [1, 2], {"a": 1}, "x" * 5000]
NON_FINITE = [b"NaN", b"Infinity", b"-Infinity", b"1e999"]


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


# -- one raw request ----------------------------------------------------------------------------------------------
def exchange(port, method, path, headers, body, timeout=30.0):
    """``(status, body)``; status None when the agent closed the connection without an answer."""
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(head.encode("latin-1", "replace") + body)
        except OSError:
            pass  # the agent may answer and hang up before reading a large body
        data = b""
        try:
            while True:
                block = s.recv(65536)
                if not block:
                    break
                data += block
                if b"\r\n\r\n" in data:
                    top, _, rest = data.partition(b"\r\n\r\n")
                    length = [
                        int(x.split(b":")[1]) for x in top.split(b"\r\n") if x.lower().startswith(b"content-length")
                    ]
                    if length and len(rest) >= length[0]:
                        break
        except OSError:
            pass
    if not data.startswith(b"HTTP/1."):
        return None, data
    return int(data.split()[1]), data.partition(b"\r\n\r\n")[2]


# -- the generator --------------------------------------------------------------------------------------------------
class Fuzzer(object):
    """Requests drawn from an OpenAPI 3.0 document, valid and mutated."""

    def __init__(self, spec, token, model, seed=0):
        self.rng = random.Random(seed)
        self.token, self.model = token, model
        self.ops = [(p, m.upper(), op) for p, ops in spec["paths"].items() for m, op in ops.items()]
        self.spec = spec

    def value(self, schema, depth=0):
        r = self.rng
        if "$ref" in schema:
            schema = self.spec["components"]["schemas"][schema["$ref"].split("/")[-1]]
        if r.random() < 0.15:
            return r.choice(WEIRD)
        t = schema.get("type")
        if t == "integer":
            lo, hi = schema.get("minimum", -5), schema.get("maximum", 1000)
            return r.choice([lo, hi, lo - 1, hi + 1, r.randint(min(lo, 0), min(hi, 5))])
        if t == "number":
            return r.choice([0.0, 0.5, 1.0, -1.0, 1e300, schema.get("maximum", 10.0)])
        if t == "boolean":
            return r.random() < 0.5
        if t == "string":
            return r.choice([self.model, "x", "CPUExecutionProvider", "é" * 3, "a/b", "..", "x" * 300])
        if t == "array":
            return [self.value(schema.get("items", {}), depth + 1) for _ in range(r.randint(0, 3))]
        if t == "object" or "properties" in schema:
            props = schema.get("properties", {})
            out = {k: self.value(v, depth + 1) for k, v in props.items() if r.random() < 0.7}
            if r.random() < 0.1:
                out["extra"] = r.choice(WEIRD)
            return out
        return r.choice(WEIRD)

    def path_param(self):
        return self.rng.choice([self.model, self.model, "nope", "v1", "a" * 200, "%2e%2e", "..%2Fetc", "x%00", "-x"])

    def body(self, op):
        r = self.rng
        content = (op.get("requestBody") or {}).get("content", {})
        if "application/json" in content:
            obj = self.value(content["application/json"].get("schema", {}))
            raw = json.dumps(obj).encode()
            roll = r.random()
            if roll < 0.05:
                raw = b"[" * 50000 + b"]" * 50000
            elif roll < 0.1:
                raw = raw[: r.randint(0, len(raw))]
            elif roll < 0.15 and raw.startswith(b"{") and len(raw) > 2:
                raw = b'{"v": ' + r.choice(NON_FINITE) + b", " + raw[1:]
            return raw, "application/json" if r.random() > 0.05 else "text/plain"
        if content:
            ctype = next(iter(content))
            if ctype == "application/x-edgekit-tensors":
                return self.tensors(), ctype
            return os.urandom(r.randint(0, 4096)), ctype
        return b"", None

    def tensors(self):
        import struct

        r = self.rng
        n = r.choice([1, 1, 2, 50])
        entries = [
            {
                "name": r.choice(["input", "x", "input"]),
                "dtype": r.choice(["float32", "int8", "weird"]),
                "shape": r.choice([[1, 3, 16, 16], [-1], [0], [2**31, 2**31]]),
                "offset": r.choice([0, 8, -1]),
                "nbytes": r.choice([3072, 0, 10**12]),
            }
            for _ in range(n)
        ]
        header = json.dumps({"tensors": entries if r.random() > 0.1 else 5}).encode()
        payload = b"\0" * r.choice([0, 3072, 100])
        hlen = len(header) if r.random() > 0.1 else r.choice([0, 2**32 - 1])
        return b"EKT1" + struct.pack("<I", hlen) + header + payload

    def request(self):
        r = self.rng
        path, method, op = r.choice(self.ops)
        while path.endswith("/bench") and r.random() < 0.95:  # a benchmark runs for real (a second or two)
            path, method, op = r.choice(self.ops)
        for name in ("name", "version", "file"):
            path = path.replace("{%s}" % name, self.path_param())
        if method == "GET" and r.random() < 0.3:
            path += "?" + r.choice(["limit=abc", "after_id=-1", "limit=10", "after_context=nan", "offset=x"])
        body, ctype = self.body(op)
        headers = {"Host": r.choice(["127.0.0.1", "localhost:1", "127.0.0.1"]), "Content-Length": str(len(body))}
        if ctype:
            headers["Content-Type"] = ctype
        roll = r.random()
        if roll < 0.8:
            headers["Authorization"] = "Bearer " + self.token
        elif roll < 0.85:
            headers["Authorization"] = "Bearer wrong"
        if r.random() < 0.03:
            headers["Origin"] = "http://evil.test"
        if r.random() < 0.02:
            headers["Content-Length"] = r.choice(["-5", "abc", str(len(body) + 10**6)])
        return method, path, headers, body


def fuzz(port, pid, token, spec, n, model="tiny", seed=0, log=lambda m: None):
    """Send ``n`` generated requests; returns counts by status, the crashes, and RSS before/after."""
    f = Fuzzer(spec, token, model, seed)
    statuses, crashes, rss = {}, [], {}
    for i in range(n):
        method, path, headers, body = f.request()
        # A Content-Length larger than the body sent: the agent waits for the rest (its per-read timeout),
        # so no answer comes in this client's short wait, and none is owed.
        short = headers["Content-Length"].isdigit() and int(headers["Content-Length"]) > len(body)
        try:
            status, answer = exchange(port, method, path, headers, body, timeout=2 if short else 60)
        except OSError as e:
            status, answer = None, repr(e).encode()
        statuses[status] = statuses.get(status, 0) + 1
        if (status is None and not short) or status == 500:
            crashes.append({"request": [method, path[:200], headers], "answer": answer[:300].decode("latin-1")})
        if i == n // 10:
            rss["after_10pct_mb"] = rss_mb(pid)
        if i and i % 1000 == 0:
            log(f"fuzz {i}/{n}: {statuses}")
    try:
        os.kill(pid, 0)
        alive = True
    except OSError:
        alive = False
    rss["end_mb"] = rss_mb(pid) if alive else None
    return {
        "requests": n,
        "statuses": {str(k): v for k, v in statuses.items()},
        "crashes": crashes,
        "alive": alive,
        "rss": rss,
    }


# -- load -----------------------------------------------------------------------------------------------------------
def load(port, clients, seconds):
    import numpy as np

    from edgekit_sdk import AgentClient

    x = {"input": np.zeros((1, 3, 16, 16), np.float32)}
    lat, errors, stop = [], [], time.monotonic() + seconds
    lock = threading.Lock()

    def one():
        c = AgentClient("127.0.0.1", port, timeout=30)
        mine = []
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            try:
                c.infer("tiny", x)
                mine.append((time.perf_counter() - t0) * 1000.0)
            except Exception as e:
                with lock:
                    errors.append(repr(e)[:200])
        c.close()
        with lock:
            lat.extend(mine)

    workers = [threading.Thread(target=one) for _ in range(clients)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    lat.sort()
    pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] if lat else None  # noqa: E731
    return {
        "clients": clients,
        "seconds": seconds,
        "requests": len(lat),
        "errors": len(errors),
        "error_samples": errors[:5],
        "rps": len(lat) / seconds,
        "p50_ms": pick(0.5),
        "p99_ms": pick(0.99),
    }


# -- kill -9 mid-install --------------------------------------------------------------------------------------------
class _Cut(object):
    """An upload body that SIGKILLs the agent once half of it was read."""

    def __init__(self, data, pid):
        self.data, self.pid, self.sent, self.killed = data, pid, 0, False

    def read(self, n):
        block = self.data[self.sent : self.sent + min(n, 1 << 20)]
        self.sent += len(block)
        if self.sent >= len(self.data) // 2 and not self.killed:
            self.killed = True
            os.kill(self.pid, signal.SIGKILL)
        return block


def kill_mid_install(dev, bundle_dir, rounds, size=8 << 20):
    """``rounds`` times: cut a new version's upload with SIGKILL; check the old one serves and the upload resumes."""
    import numpy as np

    with open(os.path.join(bundle_dir, "manifest.json")) as f:
        base = json.load(f)
    kept, resumed, offsets = 0, 0, []
    for k in range(rounds):
        first = dev.client.models()[0]["version"]
        big = os.urandom(size)
        manifest = dict(base, id="kill%012d" % k)
        manifest["files"] = base["files"] + [
            {"name": "weights.bin", "role": "weights", "size": size, "sha256": hashlib.sha256(big).hexdigest()}
        ]
        c = dev.client
        c.begin_upload("tiny", manifest["id"], manifest)
        pid = dev.state["pid"]

        cut = _Cut(big, pid)
        try:
            c.put_file("tiny", manifest["id"], "weights.bin", cut, length=size)
        except Exception:
            pass
        deadline = time.monotonic() + 30
        while True:
            try:
                dev.ensure_agent()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        c = dev.client
        if c.models()[0]["version"] == first and c.infer("tiny", {"input": np.zeros((1, 3, 16, 16), np.float32)}):
            kept += 1
        again = c.begin_upload("tiny", manifest["id"], manifest)
        offset = again["partial"].get("weights.bin", 0)
        c.put_file("tiny", manifest["id"], "weights.bin", big[offset:], offset=offset)
        offsets.append(offset)
        if c.commit("tiny", manifest["id"])["version"] == manifest["id"]:
            resumed += 1
        c.rollback("tiny", first)
    # resumed_at: bytes already on the device when the upload began again (what was in flight is lost).
    return {"rounds": rounds, "previous_kept": kept, "resumed_and_installed": resumed, "resumed_at": offsets}


def start_agent(work, bundle_dir):
    """An agent from its zipapp under ``work/device`` with the tiny model deployed; returns the Device."""
    import shutil

    from edgekit import agent_package
    from edgekit.deployer import deploy, open_device

    root = os.path.join(str(work), "device")
    built, _ = agent_package.build(os.path.join(root, "agent"))
    shutil.copy(str(built), os.path.join(root, "agent", "edgekit-agent.pyz"))
    subprocess.run(
        [sys.executable, os.path.join(root, "agent", "edgekit-agent.pyz"), "start", "--root", root],
        check=True,
        capture_output=True,
        timeout=60,
    )
    dev = open_device("local", device_root=root)
    deploy(str(bundle_dir), dev, bench=False)
    return dev


def spec_of():
    import edgekit_agent

    with open(os.path.join(os.path.dirname(edgekit_agent.__file__), "openapi.json")) as f:
        return json.load(f)


def main():
    import _common as C
    from harness.models import tiny_calib, tiny_cnn

    import edgekit

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--fuzz", type=int, default=10000)
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep-cache", action="store_true")
    ap.add_argument("--batching", action="store_true", help="only the load, one-by-one vs dynamically batched")
    ap.add_argument("--batch-window-ms", type=float, default=2.0)
    ap.add_argument("--max-batch", type=int, default=16)
    args = ap.parse_args()
    work = C.workspace(NAME, args.keep_cache)
    bundle_dir = work / "bundle"
    edgekit.build(
        tiny_cnn(work / "tiny.onnx"),
        "host",
        bundle_dir,
        precision="fp32",
        calib=tiny_calib(work / "c.npz"),
        name="tiny",
    )
    if args.batching:
        import _batching

        r = _batching.compare(
            work, bundle_dir, load, args.clients, args.seconds, args.batch_window_ms, args.max_batch, C.stop_agent
        )
        os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
        with open(os.path.join(HERE, "results", NAME + "_batching.json"), "w") as f:
            json.dump(r, f, indent=1)
        print(_batching.table(r))
        return 0 if not r["single"]["errors"] and not r["batched"]["errors"] else 1
    dev = start_agent(work, bundle_dir)
    root = dev.root
    try:
        C.log(f"load: {args.clients} clients x {args.seconds:.0f} s")
        result = {"load": load(dev.state["port"], args.clients, args.seconds)}
        C.log(f"load: {result['load']}")
        C.log(f"fuzz: {args.fuzz} requests")
        with open(os.path.join(root, "agent", "token")) as f:
            token = f.read().strip()
        result["fuzz"] = fuzz(
            dev.state["port"], dev.state["pid"], token, spec_of(), args.fuzz, seed=args.seed, log=C.log
        )
        C.log(f"fuzz: statuses {result['fuzz']['statuses']}, crashes {len(result['fuzz']['crashes'])}")
        from edgekit.deployer import deploy

        deploy(str(bundle_dir), dev, bench=False)  # the fuzzer may have removed or rolled back the model
        result["kill9"] = kill_mid_install(dev, str(bundle_dir), args.kills)
    finally:
        C.stop_agent(dev, root)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", NAME + ".json"), "w") as f:
        json.dump(result, f, indent=1)
    ld, fz, k9 = result["load"], result["fuzz"], result["kill9"]
    print("| test | result | goal |")
    print("| --- | --- | --- |")
    print(
        f"| load: {ld['clients']} clients x {ld['seconds']:.0f} s | {ld['requests']} requests, {ld['errors']} errors, "
        f"{ld['rps']:.0f} req/s, p50 {ld['p50_ms']:.2f} ms, p99 {ld['p99_ms']:.2f} ms | 0 errors |"
    )
    print(
        f"| fuzz: {fz['requests']} requests from openapi.json | {len(fz['crashes'])} crashes, agent alive: "
        f"{fz['alive']}, RSS {fz['rss'].get('after_10pct_mb', 0):.1f} -> {fz['rss']['end_mb'] or 0:.1f} MB | "
        "0 crashes, flat RSS |"
    )
    print(
        f"| kill -9 mid-install x {k9['rounds']} | previous kept {k9['previous_kept']}/{k9['rounds']}, resumed and "
        f"installed {k9['resumed_and_installed']}/{k9['rounds']} | nothing lost |"
    )
    return 0 if not ld["errors"] and not fz["crashes"] and fz["alive"] and k9["previous_kept"] == k9["rounds"] else 1


if __name__ == "__main__":
    sys.exit(main())

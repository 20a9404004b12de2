"""Runs an edgekit agent runner inside a tool environment, for the host's fidelity checks and timing.

Standalone (stdlib + the environment's packages; Python 3.7+). ``python -I runner_worker.py AGENT.pyz``
imports the runner from the agent zipapp, so the host checks a model with the code the device runs.
Protocol on stdin/stdout, one request at a time: a JSON line, then the raw bytes of the arrays it
lists (``{"name", "dtype", "shape", "nbytes"}``); the answer has the same form. Anything the runtime
prints goes to stderr (file descriptor 1 is moved there), so it cannot corrupt the protocol.

    {"cmd": "load", "backend": B, "bundle_dir": D, "manifest": M, "threads": N}  -> {"ok", "describe"}
    {"cmd": "run", "arrays": [...]} + bytes                                     -> {"ok", "arrays", "ms"} + bytes
    {"cmd": "close"}
"""

import json
import os
import sys
import time


def main():
    proto = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    sys.path.insert(0, sys.argv[1])
    import numpy as np

    from edgekit_agent import runners

    stdin = sys.stdin.buffer

    def read_exact(n):
        chunks, left = [], n
        while left:
            b = stdin.read(left)
            if not b:
                raise EOFError("the host closed the pipe")
            chunks.append(b)
            left -= len(b)
        return b"".join(chunks)

    def reply(head, arrays=()):
        metas, blobs = [], []
        for name, a in arrays:
            a = np.ascontiguousarray(a)
            metas.append({"name": name, "dtype": str(a.dtype), "shape": list(a.shape), "nbytes": a.nbytes})
            blobs.append(a.tobytes())
        head = dict(head, arrays=metas)
        proto.write((json.dumps(head) + "\n").encode())
        for b in blobs:
            proto.write(b)
        proto.flush()

    runner = None
    while True:
        line = stdin.readline()
        if not line:
            break
        req = json.loads(line.decode())
        feeds = {}
        for m in req.get("arrays") or []:
            feeds[m["name"]] = np.frombuffer(read_exact(m["nbytes"]), dtype=m["dtype"]).reshape(m["shape"])
        try:
            if req["cmd"] == "load":
                cls = runners.get(req["backend"])
                runner = cls(req["bundle_dir"], req["manifest"], threads=req.get("threads"))
                runner.load()
                reply({"ok": True, "describe": runner.describe(), "load_ms": runner.load_ms})
            elif req["cmd"] == "run":
                t0 = time.perf_counter()
                out = runner.run(feeds)
                ms = (time.perf_counter() - t0) * 1000.0
                reply({"ok": True, "ms": ms}, sorted(out.items()))
            elif req["cmd"] == "close":
                reply({"ok": True})
                break
            else:
                reply({"ok": False, "error": "unknown command %r" % req["cmd"]})
        except Exception as e:  # the runtime's own exception types
            reply({"ok": False, "error": "%s: %s" % (type(e).__name__, e)})
    if runner is not None:
        runner.close()


if __name__ == "__main__":
    main()

"""Runs an edgekit agent runner inside a tool environment, for the host's fidelity checks and timing.

Standalone (stdlib + the environment's packages; Python 3.7+). ``python -I runner_worker.py AGENT.pyz``
imports the runner from the agent zipapp, so the host checks a model with the code the device runs.
Protocol on stdin/stdout, one request at a time, each message in the agent's tensor encoding
(``edgekit_sdk.wire``, from the same zipapp): the command's fields are the header's metadata, the
arrays its tensors; the answer has the same form. Anything the runtime prints goes to stderr (file
descriptor 1 is moved there), so it cannot corrupt the protocol.

    {"cmd": "load", "backend": B, "bundle_dir": D, "manifest": M, "threads": N}  -> {"ok", "describe"}
    {"cmd": "run"} + tensors                                                     -> {"ok", "ms"} + tensors
    {"cmd": "close"}
"""

import json
import os
import struct
import sys
import time
from typing import Any, Dict, List


def main() -> None:
    proto = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    sys.path.insert(0, sys.argv[1])
    from edgekit_agent import runners
    from edgekit_sdk import wire

    stdin = sys.stdin.buffer

    def read_exact(n: int) -> bytes:
        chunks: List[bytes]
        chunks, left = [], n
        while left:
            b = stdin.read(left)
            if not b:
                raise EOFError("the host closed the pipe")
            chunks.append(b)
            left -= len(b)
        return b"".join(chunks)

    def reply(head: Dict[str, Any], arrays: Any = ()) -> None:
        proto.write(wire.encode_tensors(dict(arrays), meta=head))
        proto.flush()

    runner: Any = None
    while True:
        prefix = stdin.read(8)
        if not prefix:
            break
        if len(prefix) < 8:
            prefix += read_exact(8 - len(prefix))
        raw = read_exact(struct.unpack("<I", prefix[4:])[0])
        payload = sum(int(e["nbytes"]) for e in json.loads(raw.decode("utf-8"))["tensors"])
        feeds, req = wire.decode_tensors(prefix + raw + read_exact(payload))
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

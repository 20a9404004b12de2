"""Per-request overhead of each SDK (Python, C, Java, TypeScript) against the agent's own inference time.

The multi-input model of the SDK contract suite (`tests/harness/sdk_contract.py`: float32 [1, 4], int64 [1, 6] and
uint8 [1, 8] in, three outputs) is built for ONNX Runtime and deployed to a local agent. Each SDK's contract runner
(`tests/harness/sdk_<lang>.py`) plays one `overhead` step: `--warmup` requests, then `--runs` requests on one
kept-alive connection, each timed around the SDK's infer call. Overhead = the call's wall time minus the agent's
`inference_ms` for that request: the encoding, HTTP, the agent's queueing and decoding and the client's. Rounds
alternate the languages, so a drift in the machine's load hits them alike; the table gives the median over rounds of
each round's p50 and p90. Goal: p50 <= 0.3 ms.
"""

import argparse
import statistics
import sys

import _common as C
import numpy as np

NAME = "sdk_overhead"
GOAL_MS = 0.3


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--langs", nargs="*", help="default: every SDK with a runner")
    ap.add_argument("--keep-cache", action="store_true", help="use the real EDGEKIT_CACHE_DIR")
    args = ap.parse_args(argv)

    from harness.sdk_contract import mix_inputs, mix_model, play, runners, samples, tensors

    import edgekit
    from edgekit.deployer import deploy
    from edgekit_sdk import AgentClient

    work = C.workspace(NAME, args.keep_cache)
    dev = C.open_local_device(work / "device")
    bundle = work / "mix"
    edgekit.build(mix_model(work / "mix.onnx", 3.0), "host", bundle, backend="ort", precision="fp32", name="mix",
                  val=samples(work / "mix.npz", mix_inputs(0)))  # fmt: skip
    deploy(bundle, dev, bench=False)
    client = AgentClient.local(root=str(dev.root))
    langs = args.langs or sorted(runners(), key=lambda k: (k != "python", k))
    argv_of = {}
    for lang in langs:
        C.log(f"building the {lang} runner")
        (work / lang).mkdir()
        argv_of[lang] = runners()[lang](work / lang)
    step = {"op": "overhead", "model": "mix", "inputs": tensors(mix_inputs(1)), "runs": args.runs,
            "warmup": args.warmup}  # fmt: skip
    scenario = {"host": "127.0.0.1", "port": client.port, "token": client.token, "steps": [step]}
    per = {lang: {"p50": [], "p90": [], "inference_p50": []} for lang in langs}
    for r in range(args.rounds):
        for lang in langs if r % 2 == 0 else list(reversed(langs)):
            (got,) = play(argv_of[lang], scenario, work / lang, timeout=1800)
            assert got["ok"], got
            wall, infer = np.array(got["result"]["client_ms"]), np.array(got["result"]["inference_ms"])
            over = wall - infer
            per[lang]["p50"].append(float(np.percentile(over, 50)))
            per[lang]["p90"].append(float(np.percentile(over, 90)))
            per[lang]["inference_p50"].append(float(np.percentile(infer, 50)))
            C.log(f"  round {r + 1} {lang}: overhead p50 {per[lang]['p50'][-1]:.3f} ms")
    client.close()
    results = {"benchmark": NAME, "environment": C.environment(), "runs": args.runs, "rounds": args.rounds}
    results["sdks"] = {}
    rows = []
    for lang in langs:
        p50, p90 = statistics.median(per[lang]["p50"]), statistics.median(per[lang]["p90"])
        inf = statistics.median(per[lang]["inference_p50"])
        results["sdks"][lang] = {"overhead_p50_ms": p50, "overhead_p90_ms": p90, "inference_p50_ms": inf,
                                 "rounds_p50_ms": per[lang]["p50"], "meets_goal": p50 <= GOAL_MS}  # fmt: skip
        rows.append([lang, f"{p50:.3f}", f"{p90:.3f}", f"{inf:.3f}", "yes" if p50 <= GOAL_MS else "no"])
    C.write_results(NAME, results)
    print(C.table(["SDK", "overhead p50 ms", "overhead p90 ms", "agent inference p50 ms", f"p50 <= {GOAL_MS}"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

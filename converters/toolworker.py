"""Run a built model on the host when its runtime lives in a tool environment.

The host Python cannot import such runtimes (paddlelite has wheels up to 3.10, mindspore_lite
for 3.7 only), so :class:`RunnerWorker` starts ``tools/runner_worker.py`` under the environment's
Python with the agent zipapp on its path: the device's own runner loads the model once and runs
each sample sent over a pipe (a JSON header plus raw array bytes: no files, ~0.1 ms per call).
"""

import json
import os
import subprocess
import threading
import weakref
from collections import deque
from pathlib import Path

import numpy as np

WORKER = Path(__file__).resolve().parent / "tools" / "runner_worker.py"


class RunnerWorker:
    """One model loaded by the agent's runner ``backend`` in ``spec``'s tool environment."""

    def __init__(self, spec, backend, model_path, manifest, threads=None, log=None):
        from edgekit import agent_package, toolenvs
        from edgekit.cache import cache_root

        py = toolenvs.ensure(spec, log=log)
        pyz, _ = agent_package.build(cache_root() / "agent")
        self.spec, self.model_path = spec, Path(model_path)
        self.stderr = deque(maxlen=40)
        env = dict(os.environ, **dict(spec.env))
        self.proc = subprocess.Popen([py, "-I", str(WORKER), str(pyz)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env, start_new_session=True)
        threading.Thread(target=self._pump, daemon=True).start()
        self._finalizer = weakref.finalize(self, _stop, self.proc)
        manifest = dict(manifest, model=self.model_path.name)
        head, _ = self._call({"cmd": "load", "backend": backend, "bundle_dir": str(self.model_path.parent),
                              "manifest": manifest, "threads": threads})
        self.describe = head.get("describe", {})

    def _pump(self):
        for line in self.proc.stderr:
            self.stderr.append(line.decode("utf-8", "replace").rstrip())

    def _fail(self, what):
        from edgekit.errors import ConversionError

        code = self.proc.poll()
        died = "" if code is None else f" (the worker exited with {code}{': it crashed' if code < 0 else ''})"
        tail = "\n    ".join(l for l in list(self.stderr)[-8:] if l.strip()) or "(no output)"
        raise ConversionError(f"{self.spec.name}: running {self.model_path.name} in the tool environment failed{died}: "
                              f"{what}\n    {tail}")

    def _call(self, head, arrays=()):
        metas, blobs = [], []
        for name, a in arrays:
            a = np.ascontiguousarray(a)
            metas.append({"name": name, "dtype": str(a.dtype), "shape": list(a.shape), "nbytes": a.nbytes})
            blobs.append(a.tobytes())
        try:
            self.proc.stdin.write((json.dumps(dict(head, arrays=metas)) + "\n").encode())
            for b in blobs:
                self.proc.stdin.write(b)
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError) as e:
            self._fail(f"{type(e).__name__}: {e}")
        if not line:
            self._fail("no answer")
        reply = json.loads(line)
        if not reply.get("ok"):
            self._fail(reply.get("error", "unknown error"))
        out = {}
        for m in reply.get("arrays") or []:
            data = self.proc.stdout.read(m["nbytes"])
            out[m["name"]] = np.frombuffer(data, dtype=m["dtype"]).reshape(m["shape"]).copy()
        return reply, out

    def run(self, feed):
        return self._call({"cmd": "run"}, sorted(feed.items()))[1]

    def close(self):
        self._finalizer()


def _stop(proc):
    if proc.poll() is None:
        try:
            proc.stdin.write(b'{"cmd": "close"}\n')
            proc.stdin.flush()
            proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
    for f in (proc.stdin, proc.stdout):
        try:
            f.close()
        except OSError:
            pass


def model_manifest(model_path, registered):
    """What the runner needs about a model: registered by the build, else the bundle's manifest beside it."""
    key = str(Path(model_path).resolve())
    if key in registered:
        return registered[key]
    manifest = Path(model_path).parent / "manifest.json"
    if manifest.is_file():
        m = json.loads(manifest.read_text())
        return {"inputs": m["inputs"], "outputs": m["outputs"], "runner": m.get("runner", {})}
    from edgekit.errors import ConversionError

    raise ConversionError(f"{model_path}: no manifest.json beside it and not built in this process: cannot tell its "
                          "inputs and runner options")


def onnx_predict(model_path, samples, threads=None):
    """The ONNX reference, run by onnxruntime on the host."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = threads or min(4, os.cpu_count() or 1)
    sess = ort.InferenceSession(str(model_path), sess_options=so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return sess, names, [dict(zip(names, sess.run(names, feed))) for feed in samples]

"""Child processes of the agent: the one-shot benchmark and the check that a staged version runs."""

import json
import os
import subprocess
import sys

from .errors import AgentError
from .store import StoreError


def self_command():
    """How to start this agent again in a child process (zipapp or installed package)."""
    here = os.path.abspath(__file__)
    marker = ".pyz" + os.sep
    if marker in here:
        return [sys.executable, here.split(marker)[0] + ".pyz"]
    return [sys.executable, "-m", "edgekit_agent"]


def one_shot_bench(bundle_dir, runs, warmup, threads=None, providers=None, timeout=600.0, placement=True):
    """Run ``bench`` in a fresh process on this device (clean peak RSS, real cold start)."""
    cmd = self_command() + ["bench", "--bundle", bundle_dir, "--json", "--runs", str(runs), "--warmup", str(warmup)]
    if threads:
        cmd += ["--threads", str(threads)]
    for p in providers or []:
        cmd += ["--provider", str(p)]
    if not placement:
        cmd.append("--no-placement")
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AgentError(504, "the benchmark did not finish within %.0f s" % timeout)
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise AgentError(501 if proc.returncode == 3 else 500, err[-1] if err else "exit %d" % proc.returncode)
    return json.loads(proc.stdout.decode("utf-8", "replace").strip().splitlines()[-1])


def verify_loads(staging, manifest):
    """Load the staged bundle and run its sample once, in a fresh process, before it may serve."""
    try:
        report = one_shot_bench(staging, 1, 0, placement=False, timeout=300)
    except AgentError as e:
        raise StoreError(
            "version %s does not run on this device (%s); it was not installed and the model keeps "
            "serving what it served before" % (manifest.get("id"), e),
            422,
        )
    check = report.get("device_fidelity") or {}
    if check.get("passed") is False:
        raise StoreError(
            "version %s runs on this device but its outputs differ from the reference outputs the "
            "build recorded (%s); it was not installed" % (manifest.get("id"), check.get("detail")),
            422,
        )

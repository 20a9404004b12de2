"""Run the attack tests against the agent before its hardening (commit ffad664) and against this one.

    .venv/bin/python scripts/attacks_vs_old_agent.py [--old COMMIT] [--only NAME] [--markdown FILE]

Exits 0 when every attack has a test that fails on the old agent (host-side ones are not run against it)
and every test passes on this one. The old agent (``on_device_agent/`` and the SDK it carries, from ``git
archive COMMIT``) goes into a temporary directory; ``EDGEKIT_AGENT_TREE`` makes every zipapp the tests build
and deploy come from there (``edgekit.agent_package``), and the tests' harness drops serve options that agent
does not have (``harness.agents.options_it_takes``). Each test runs alone against the old agent, in its own
pytest with its own agent (one attack's damage must not fail the next test), under a 6 GB address-space
limit and a time limit; whatever it leaves running is ended. Against this agent the test files run once, as
the suite does.
Prints one row per attack of the hardening issue: its tests, and old: FAIL/pass, new: pass/FAIL.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OLD = "ffad664"
A, S = "tests/test_agent_attacks.py::", "tests/test_agent_store_faults.py::"
H = "tests/test_agent_host_side.py::"
KNOB = A + "test_request_knobs_are_bounded[/v1/models/tiny/"
# Tests that import the agent's modules in this Python: the old tree is not what they import, and the modules they
# test (childproc, the recorder's byte bound) did not exist in it.
IN_PROCESS = {
    A + "test_child_processes_are_bounded_in_memory_and_time": "in-process test of childproc.py, absent at ffad664",
    A + "test_telemetry_is_bounded_by_bytes": "in-process test of Recorder(max_bytes=), absent at ffad664",
}
ROWS = [
    (
        "1,100 half-open connections, headers never finished",
        [A + "test_half_open_connections_are_capped_and_timed_out"],
    ),
    ("40 connections x 100 headers x 65 KB before auth", [A + "test_header_flood_is_bounded_before_authentication"]),
    ("tensor header: N entries pointing at one 1 MB payload", [A + "test_tensor_entries_cannot_multiply_one_payload"]),
    (
        "2,000 infers to invalid 60 KB model names (telemetry)",
        [A + "test_invalid_names_reach_neither_telemetry_nor_locks", A + "test_telemetry_is_bounded_by_bytes"],
    ),
    ("known_hosts rewritten by StrictHostKeyChecking accept-new", [H + "test_accept_new_only_appends_to_known_hosts"]),
    (
        "cross-origin text/plain POST, foreign Origin/Host (loopback)",
        [A + "test_browser_requests_are_refused", A + "test_token_file_is_private"],
    ),
    ('POST /load {"warmup": 10000000}, then a rollback', [KNOB + "load-body0]"]),
    (
        'POST /bench {"threads": 100000}; bench outliving the agent',
        [
            KNOB + "bench-body3]",
            A + "test_bench_is_bounded_in_time",
            A + "test_bench_children_end_with_the_agent",
            A + "test_child_processes_are_bounded_in_memory_and_time",
        ],
    ),
    ("2,000 DELETE /v1/models/<invalid 60 KB name>", [A + "test_invalid_names_reach_neither_telemetry_nor_locks"]),
    ("one model's manifest.json truncated", [S + "test_unreadable_model_is_skipped_and_a_redeploy_repairs_it"]),
    (
        "bits flipped in a model file; rollback copy a hard link",
        [S + "test_flipped_bits_are_found_on_load_and_rollback_copies_are_not_shared"],
    ),
    ("disk full during upload", [S + "test_disk_full_during_upload_says_so_and_cleans_up"]),
    ("100 simultaneous connections, 3 rounds (backlog)", [A + "test_a_real_listen_backlog"]),
    (
        '{"tensors":5}, deep JSON, threads:"abc", timeout_s:"nan", NaN outputs',
        [
            A + "test_malformed_bodies_are_400",
            KNOB + "load-body1]",
            KNOB + "bench-body4]",
            A + "test_non_finite_outputs_are_standard_json",
        ],
    ),
    (
        "malformed bundles given to the CLI",
        [H + "test_malformed_bundles_are_clear_errors", H + "test_cli_names_a_malformed_bundle_without_a_traceback"],
    ),
    ("(fault suite) kill -9 mid-install", [S + "test_kill_9_mid_install_loses_nothing"]),
    (
        "(bounds) other request knobs",
        [KNOB + "load-body2]", KNOB + "bench-body5]", KNOB + "bench-body6]", KNOB + "infer-body7]"],
    ),
]
HOST = "host code (edgekit's ssh transport, bundle loader), not the agent"


def outcomes(xml: Path) -> dict[str, tuple[str, str]]:
    """``{node id: (outcome, first line of the reason)}`` from a pytest junit file."""
    found = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        node = case.get("classname", "").replace(".", "/") + ".py::" + case.get("name", "")
        outcome, why = "pass", ""
        for tag, name in (("failure", "FAIL"), ("error", "ERROR"), ("skipped", "skipped")):
            el = case.find(tag)
            if el is not None:
                text = (el.get("message") or el.text or "").strip()
                outcome, why = name, (text.splitlines() or [""])[0][:100]
        found[node] = (outcome, why)
    return found


def result(found: dict[str, tuple[str, str]], test: str) -> tuple[str, str]:
    """A test's outcome; a parametrized one (``test`` without ``[...]``) fails if any of its cases does."""
    cases = [v for k, v in found.items() if k == test or k.startswith(test + "[")]
    bad = [v for v in cases if v[0] != "pass"]
    return bad[0] if bad else cases[0] if cases else ("?", "no result")


def end_leftovers(marker: str) -> None:
    """End processes a test left running (their command line names its temporary directory)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    os.kill(int(pid), signal.SIGKILL)
        except OSError:
            continue


def pytest(nodes: list[str], xml: Path, basetemp: Path, env: dict[str, str], limit_s: int) -> str | None:
    """Run pytest on ``nodes``; None, or "TIMEOUT" if it ran past ``limit_s``."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}"]
    cmd.append(f"--basetemp={basetemp}")
    # 6 GB of address space per process: an unbounded old agent must not take the machine with it
    shell = 'ulimit -v 6291456; exec "$@"'
    p = subprocess.Popen(
        ["sh", "-c", shell, "sh", *cmd, *nodes],
        cwd=REPO,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        p.wait(limit_s)
        return None
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        return "TIMEOUT"
    finally:
        end_leftovers(str(basetemp))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", default=OLD, help=f"commit of the old agent (default {OLD})")
    ap.add_argument("--only", help="run only tests whose id contains this")
    ap.add_argument("--limit", type=int, default=300, help="seconds one old test may take (default 300)")
    ap.add_argument("--markdown", help="also write the table as Markdown to this file")
    args = ap.parse_args()
    tests = sorted({t for _, ts in ROWS for t in ts if t != "host"})
    if args.only:
        tests = [t for t in tests if args.only in t]
    with tempfile.TemporaryDirectory(prefix="edgekit-old-agent-") as tmp:
        work = Path(tmp)
        tree = work / "tree"
        tree.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", args.old, "on_device_agent", "sdk_bindings/python/edgekit_sdk"],
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        env = dict(os.environ)
        env.pop("EDGEKIT_AGENT_TREE", None)
        new: dict[str, tuple[str, str]] = {}
        t0 = time.monotonic()
        files = sorted({t.split("::")[0] for t in tests})
        print(f"new agent: {' '.join(files)}", flush=True)
        # the files as the suite runs them (in their order: the last attack test stops its module's agent)
        pytest(files + (["-k", args.only] if args.only else []), work / "new.xml", work / "new", env, 1800)
        if (work / "new.xml").exists():
            new = outcomes(work / "new.xml")
        print(f"  {time.monotonic() - t0:.0f} s", flush=True)
        old: dict[str, tuple[str, str]] = {}
        old_env = dict(env, EDGEKIT_AGENT_TREE=str(tree))
        for i, test in enumerate(tests):
            if test.startswith(H):
                old[test] = ("not run", HOST)
                continue
            if test in IN_PROCESS:
                old[test] = ("n/a", IN_PROCESS[test])
                continue
            t0 = time.monotonic()
            xml = work / f"old-{i}.xml"
            timed_out = pytest([test], xml, work / f"old-{i}", old_env, args.limit)
            old[test] = (
                ("FAIL", f"hung: still running after {args.limit} s")
                if timed_out
                else result(outcomes(xml), test)
                if xml.exists()
                else ("ERROR", "no result")
            )
            took = time.monotonic() - t0
            print(f"old agent: {test.split('::')[1]}: {old[test][0]} ({took:.0f} s) {old[test][1]}", flush=True)
    lines = [f"| attack | test | old agent ({args.old}) | this agent |", "| --- | --- | --- | --- |"]
    for attack, ts in ROWS:
        for t in ts:
            if t not in tests:
                continue
            cells = []
            for outcome, why in (old.get(t, ("?", "")), result(new, t)):
                cells.append((outcome + (f": {why}" if why and outcome != "pass" else "")).replace("|", "/"))
            lines.append(f"| {attack} | `{t.split('::')[1]}` | {cells[0]} | {cells[1]} |")
    table = "\n".join(lines)
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    # Done when every attack has a test that fails on the old agent, and every test passes on this one.
    bad = [t for t in tests if result(new, t)[0] != "pass"]
    for attack, ts in ROWS:
        if attack.startswith("("):
            continue  # not an attack of the table: shown for what it tells
        ran = [t for t in ts if t in tests and old.get(t, ("?", ""))[0] not in ("not run", "n/a")]
        if ran and not any(old[t][0] in ("FAIL", "ERROR") for t in ran):
            bad.append(attack)
    if bad:
        print("not answered: " + ", ".join(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""The TypeScript SDK's own tests (``node --test``: the encoding, the client's errors and timeouts, the types
generated from openapi.json), built and run from pytest; the contract suite runs its runner against a real agent."""

import subprocess
from pathlib import Path

import pytest
from harness import sdk_typescript


@pytest.mark.e2e
def test_node_unit_tests_pass(tmp_path: Path) -> None:
    try:
        argv = sdk_typescript.unit_test_command(tmp_path)
    except RuntimeError as e:  # no node or npm here: say so rather than pass
        pytest.skip(str(e))
    proc = subprocess.run(argv, env=sdk_typescript.unit_test_env(), capture_output=True, text=True, timeout=600)
    summary = [line for line in proc.stdout.splitlines() if line.startswith(("# pass", "# fail", "not ok"))]
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "# fail 0" in summary, summary

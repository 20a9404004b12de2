"""The C SDK's own unit tests (sdk_bindings/c: `make test`), as built and under AddressSanitizer and UBSan."""

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from harness import sdk_c

E2E = pytest.mark.e2e  # make, gcc and the unit tests' stand-in agent are processes


def _passes(build: Path, target: str) -> str:
    proc = sdk_c.make(build, target)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    return out


@E2E
def test_unit_tests_pass(tmp_path: Path) -> None:
    out = _passes(tmp_path / "build", "test")
    assert " 0 failed" in out
    assert "-Werror" in out and "-std=c99" in out and "-pedantic" in out


@E2E
def test_unit_tests_pass_under_sanitizers(tmp_path: Path) -> None:
    out = _passes(tmp_path / "build", "sanitize")
    assert "-fsanitize=address,undefined" in out and " 0 failed" in out


@E2E
def test_example_and_runner_build(tmp_path: Path) -> None:
    _passes(tmp_path / "build", "all")
    for name in ("libedgekit.a", "contract_runner", "hello", "test_edgekit"):
        assert (tmp_path / "build" / name).is_file(), name


def test_readme_app_is_the_example_and_under_20_lines() -> None:
    readme = (sdk_c.SDK / "README.md").read_text()
    block = readme.split("```c\n", 1)[1].split("```", 1)[0]
    example = (sdk_c.SDK / "examples" / "hello.c").read_text()
    assert example.split("\n", 1)[1] == block  # the file less its first (comment) line
    assert len(block.strip().splitlines()) < 20


@E2E
def test_readme_app_calls_a_locally_deployed_model(tmp_path: Path, local_device: Any) -> None:
    from harness.models import dynamic_model

    import edgekit
    from edgekit.deployer import deploy

    bundle = tmp_path / "bundle"
    edgekit.build(dynamic_model(tmp_path / "m.onnx", {"input": [1, 4]}), "host", bundle, precision="fp32", name="m")
    deploy(bundle, local_device, bench=False)
    _passes(tmp_path / "build", "example")
    env = dict(os.environ, EDGEKIT_AGENT_ROOT=str(tmp_path / "device"))  # the local_device fixture's root
    proc = subprocess.run([str(tmp_path / "build" / "hello"), "m"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ": 1 outputs in " in proc.stdout
    proc = subprocess.run([str(tmp_path / "build" / "hello"), "nope"], capture_output=True, text=True, env=env)
    assert proc.returncode == 1 and proc.stderr.startswith("404 unknown model 'nope'"), proc.stderr

"""The C SDK's own unit tests (sdk_bindings/c: `make test`), as built and under AddressSanitizer and UBSan."""

from pathlib import Path

import pytest
from harness import sdk_c

pytestmark = pytest.mark.e2e  # make, gcc and the tests' stand-in agent are processes


def _passes(build: Path, target: str) -> str:
    proc = sdk_c.make(build, target)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    return out


def test_unit_tests_pass(tmp_path: Path) -> None:
    out = _passes(tmp_path / "build", "test")
    assert " 0 failed" in out
    assert "-Werror" in out and "-std=c99" in out and "-pedantic" in out


def test_unit_tests_pass_under_sanitizers(tmp_path: Path) -> None:
    out = _passes(tmp_path / "build", "sanitize")
    assert "-fsanitize=address,undefined" in out and " 0 failed" in out


def test_example_and_runner_build(tmp_path: Path) -> None:
    _passes(tmp_path / "build", "all")
    for name in ("libedgekit.a", "contract_runner", "hello", "test_edgekit"):
        assert (tmp_path / "build" / name).is_file(), name

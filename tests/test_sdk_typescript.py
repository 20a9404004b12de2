"""The TypeScript SDK's own tests (``node --test``: the encoding, the client's errors and timeouts, the types
generated from openapi.json) built and run from pytest, and its README's app against a locally deployed model;
the contract suite (test_sdk_contract.py) runs its runner against a real agent."""

import os
import re
import subprocess
from pathlib import Path

import pytest
from harness import sdk_typescript


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        return sdk_typescript.build(tmp_path_factory.mktemp("sdk-typescript"))
    except RuntimeError as e:  # no node or npm here: say so rather than pass
        pytest.skip(str(e))


@pytest.mark.e2e
def test_node_unit_tests_pass(built: Path) -> None:
    tests = sorted(str(p) for p in (built / "dist" / "test").glob("*.test.js"))
    assert len(tests) >= 3, tests
    argv = [sdk_typescript.tool("node"), "--test", *tests]
    proc = subprocess.run(argv, env=sdk_typescript.unit_test_env(), capture_output=True, text=True, timeout=600)
    summary = [line for line in proc.stdout.splitlines() if line.startswith(("# pass", "# fail", "not ok"))]
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "# fail 0" in summary, summary


def readme_app() -> str:
    text = (sdk_typescript.PACKAGE / "README.md").read_text()
    m = re.search(r"## An app in (\d+) lines\n\n```js\n(.*?)```", text, re.S)
    assert m, "the README's app is a ```js block under '## An app in N lines'"
    code = [line for line in m.group(2).splitlines() if line.strip() and not line.lstrip().startswith("//")]
    assert len(code) == int(m.group(1)) < 20, f"the README says {m.group(1)} lines of code; there are {len(code)}"
    return m.group(2)


@pytest.mark.e2e
def test_readme_app_calls_a_locally_deployed_model(built: Path, local_device, tiny_bundle) -> None:
    from edgekit.deployer import deploy

    deploy(tiny_bundle, local_device, bench=False)
    app = built / "readme_app.mjs"  # inside the package, so that `import "edgekit-sdk"` finds it (self-reference)
    app.write_text(readme_app())
    env = dict(os.environ, EDGEKIT_AGENT_ROOT=str(local_device.root))
    proc = subprocess.run(
        [sdk_typescript.tool("node"), str(app), "tiny"], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("probs float32 [ 1, 10 ] Float32Array(4)"), proc.stdout
    assert re.fullmatch(r"tiny [0-9a-f]+: \d+\.\d{3} ms", lines[-1]), proc.stdout


@pytest.mark.e2e
def test_float16_rounding_matches_numpy(built: Path) -> None:
    import json

    import numpy as np

    rng = np.random.default_rng(0)
    values = np.concatenate(
        [
            rng.standard_normal(20000) * 10.0 ** rng.integers(-9, 6, 20000),  # every binade, subnormals, overflow
            np.arange(-2048, 2048) * 2.0**-11 + 1,  # ties around 1
            np.arange(0, 2048) * 2.0**-25,  # ties among the subnormals
        ]
    )
    script = (
        f"import {{ toFloat16Bits }} from {json.dumps((built / 'dist/src/index.js').as_uri())};"
        "let s = ''; process.stdin.on('data', (d) => (s += d)).on('end', () => "
        "process.stdout.write(JSON.stringify(Array.from(toFloat16Bits(JSON.parse(s))))));"
    )
    proc = subprocess.run(
        [sdk_typescript.tool("node"), "--input-type=module", "-e", script],
        input=json.dumps(values.tolist()),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    with np.errstate(over="ignore"):
        expected = values.astype(np.float16).view(np.uint16)
    got = np.array(json.loads(proc.stdout), np.uint16)
    bad = np.flatnonzero(got != expected)
    assert not bad.size, [(values[i], hex(got[i]), hex(expected[i])) for i in bad[:5]]

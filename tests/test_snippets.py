"""The code the project shows its users runs as written: the Python snippets in the docstrings of the public API
(``edgekit``, ``edgekit_sdk``) and the ```python blocks of README.md.

Each snippet runs in a fresh interpreter, in a temporary directory holding the files it names (built by the
fixtures below). A snippet that names a device (``pi@10.0.0.5``, ``/home/pi/...``) is pointed at this machine;
those replacements are listed with each snippet and each must match, so an edited snippet is noticed here.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import pytest
from harness import PPOCR, ROOT, stop_agent

import edgekit
import edgekit_sdk

README = ROOT / "README.md"


def python_blocks(markdown: str) -> List[str]:
    """The ```python blocks of a Markdown text."""
    return re.findall(r"^```python\n(.*?)^```", markdown, flags=re.S | re.M)


def docstring_blocks(doc: str) -> List[str]:
    """The literal blocks (``::`` then an indented block) of a docstring that hold Python code."""
    blocks = []
    for m in re.finditer(r"::\n\n((?:[ ]{4}.*\n|\n)+)", doc + "\n"):
        code = "\n".join(line[4:] for line in m.group(1).rstrip().split("\n"))
        try:
            compile(code, "<docstring>", "exec")
        except SyntaxError:
            continue  # TOML, shell and the like
        blocks.append(code)
    return blocks


def run_snippet(
    code: str,
    cwd: Path,
    replace: Sequence[Tuple[str, str]] = (),
    prelude: str = "",
    env: Optional[Dict[str, str]] = None,
) -> subprocess.CompletedProcess:
    for old, new in replace:
        assert old in code, f"the snippet no longer says {old!r}: update this test with it\n{code}"
        code = code.replace(old, new)
    script = cwd / "snippet.py"
    script.write_text(prelude + code)
    p = subprocess.run(
        [sys.executable, str(script)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=1800,
        env=dict(os.environ, **(env or {})),
    )
    assert p.returncode == 0, f"the snippet failed (exit {p.returncode}):\n{prelude + code}\n---\n{p.stderr[-4000:]}"
    return p


def test_the_snippets_are_the_ones_tested_here():
    """A new snippet in the README or a public docstring must get a test in this file."""
    assert len(python_blocks(README.read_text())) == 2
    assert len(docstring_blocks(edgekit.__doc__)) == 1
    assert len(docstring_blocks(edgekit_sdk.__doc__)) == 1


# -- files the snippets name ------------------------------------------------------------
@pytest.fixture(scope="module")
def ppocr_on_a_device(tmp_path_factory):
    """The PP-OCR classifier built for this machine and deployed to a local agent: ``(root, port)``."""
    from edgekit.deployer import deploy, open_device

    d = tmp_path_factory.mktemp("ppocr-device")
    edgekit.build(PPOCR, "host", d / "ppocr_mobile_v2_cls", precision="fp32", input_shapes=["x=1,3,48,192"])
    root = d / "device"
    try:
        with open_device("local", device_root=str(root)) as dev:
            deploy(d / "ppocr_mobile_v2_cls", dev, bench=False)
        port = json.loads((root / "agent" / "state.json").read_text())["port"]
        yield root, port
    finally:
        stop_agent(sys.executable, root)


@pytest.fixture(scope="module")
def model_files(tmp_path_factory):
    """model.onnx, calib.npz and val.npz (labelled with the model's own answers) for a small CNN in which half of
    every channel group is dead, so that pruning 30% of its channels keeps its outputs (the model is untrained:
    the samples are those it answers most clearly)."""
    import numpy as np
    import onnxruntime as ort
    from harness.models import prunable_cnn

    d = tmp_path_factory.mktemp("model")
    model, _ = prunable_cnn(d / "model.onnx", zero=0.5)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1000, 1, 3, 12, 12)).astype(np.float32)
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    logits = np.concatenate([sess.run(None, {"x": xi})[0] for xi in x])
    top2 = np.sort(logits, axis=1)[:, -2:]
    x = x[np.argsort(top2[:, 1] - top2[:, 0])[-96:]]  # the clearest answers: int8 noise does not flip them
    labels = np.array([sess.run(None, {"x": xi})[0].argmax() for xi in x])
    np.savez(d / "calib.npz", x=x[:48, 0])
    np.savez(d / "val.npz", x=x[48:, 0], labels=labels[48:])
    return {"model": model, "calib": d / "calib.npz", "val": d / "val.npz"}


# -- docstrings ---------------------------------------------------------------------------
def test_edgekit_docstring(tmp_path, agent_roots):
    (code,) = docstring_blocks(edgekit.__doc__)
    (tmp_path / "examples").mkdir()
    shutil.copy(PPOCR, tmp_path / "examples" / "ppocr_mobile_v2_cls.onnx")  # run from the repository's root
    p = run_snippet(code, tmp_path, env={"EDGEKIT_DEVICE_ROOT": str(agent_roots("device"))})
    assert float(p.stdout.split()[-1]) > 0  # print(result["latency_ms"]["p50"])


def test_edgekit_sdk_docstring(tmp_path, ppocr_on_a_device):
    (code,) = docstring_blocks(edgekit_sdk.__doc__)
    root, _ = ppocr_on_a_device
    prelude = "import numpy as np\nbatch = np.zeros((1, 3, 48, 192), np.float32)\n"
    replace = [("AgentClient.local()", f"AgentClient.local({str(root)!r})")]
    run_snippet(code + "\nassert outputs\n", tmp_path, replace=replace, prelude=prelude)


# -- README ---------------------------------------------------------------------------------
def test_readme_python_api_block(tmp_path, model_files, agent_roots):
    code = python_blocks(README.read_text())[0]
    for name in ("model", "calib", "val"):
        src = Path(model_files[name])
        shutil.copy(src, tmp_path / f"{name}{src.suffix}")
    # The bundles the block explains and sends to a fleet come from the README's tour.
    tour = tmp_path / "tour"
    edgekit.build(tmp_path / "model.onnx", "pixel-8", tour / "p8", backend="ort", precision="fp32", name="cnn")
    edgekit.build(tmp_path / "model.onnx", "raspberrypi5", tour / "pi5", precision="fp32", name="cnn")
    (tmp_path / "devices.toml").write_text(
        "".join(
            f'[[device]]\nname = "bench-{i}"\nurl = "local://"\nroot = "{agent_roots(f"fleet{i}")}"\ntags = ["lab"]\n'
            for i in range(2)
        )
    )
    run_snippet(
        code,
        tmp_path,
        replace=[
            ('open_device("ssh", "pi@10.0.0.5")', f'open_device("local", device_root="{agent_roots("device")}")'),
            ('device="ssh://pi@10.0.0.5"', f'device="local://", device_root="{agent_roots("auto")}"'),
            ('explain("out/p8")', 'explain("tour/p8")'),
            ('deploy_fleet("out/pi5"', 'deploy_fleet("tour/pi5"'),
        ],
    )
    assert (tmp_path / "out" / "manifest.json").is_file() and (tmp_path / "out" / "best" / "manifest.json").is_file()


def test_readme_agent_client_block(tmp_path, ppocr_on_a_device):
    code = python_blocks(README.read_text())[1]
    root, port = ppocr_on_a_device
    pyz = Path(root) / "agent" / "edgekit-agent.pyz"
    assert pyz.is_file()
    prelude = f"import numpy as np\nport = {port}\nbatch = np.zeros((1, 3, 48, 192), np.float32)\n"
    run_snippet(
        code + "\nassert probs.shape == (1, 2), probs.shape\nassert AgentClient.__module__.startswith('edgekit_sdk')\n",
        tmp_path,
        replace=[("/home/pi/.cache/edgekit/device/agent/edgekit-agent.pyz", str(pyz))],
        prelude=prelude,
    )

"""The README's tour runs as written: every command of its "## Tour" section, in order, on a copy of the
examples in a fresh directory with a fresh HOME, this machine as the device."""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from harness import ROOT


def tour_commands(readme=ROOT / "README.md"):
    """The shell commands of the first ```bash block in the README's "## Tour" section (continuations joined,
    comments dropped)."""
    text = readme.read_text()
    m = re.search(r"^## Tour\n(.*?)(?=^## )", text, re.S | re.M)
    assert m, "README.md has no '## Tour' section"
    block = re.search(r"```bash\n(.*?)```", m.group(1), re.S)
    assert block, "the Tour section has no ```bash block"
    commands, current = [], ""
    for line in block.group(1).splitlines():
        if current:
            line = current + " " + line.strip()
            current = ""
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current = stripped[:-1].rstrip()
            continue
        commands.append(_drop_comment(stripped))
    assert not current, "a continued line ends the block"
    return commands


def _drop_comment(line):
    """``cmd args   # comment`` -> ``cmd args`` (a ``#`` inside quotes stays)."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=False)
    lex.whitespace_split = True
    lex.commenters = "#"
    return shlex.join(list(lex))


def test_the_tour_is_parsed():
    commands = tour_commands()
    assert commands[0].startswith("edgekit ")
    assert any(c.startswith("edgekit build ") and "--calib calib.npz" in c for c in commands)
    # the data the build needs is made by an earlier command of the tour itself
    made = next(i for i, c in enumerate(commands) if "textlines.py" in c and "calib.npz" in c)
    used = next(i for i, c in enumerate(commands) if "--calib calib.npz" in c)
    assert made < used
    assert commands[-1] == "edgekit agent stop --local"  # the tour leaves no agent running


@pytest.mark.e2e
@pytest.mark.slow
def test_every_tour_command_runs(tmp_path):
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    shutil.copytree(ROOT / "examples", work / "examples", ignore=shutil.ignore_patterns("out", "__pycache__"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EDGEKIT_", "XDG_"))}
    # the quickstart's environment active: its edgekit and python first on PATH
    env.update(HOME=str(home), PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]))
    env.pop("VIRTUAL_ENV", None)
    try:
        for command in tour_commands():
            p = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True, timeout=1200)
            assert p.returncode == 0, f"$ {command}\nexit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
            assert "Traceback" not in p.stderr, f"$ {command}\n{p.stderr[-3000:]}"
    finally:
        subprocess.run(
            [sys.executable, "-m", "edgekit", "agent", "stop", "--local"], env=env, capture_output=True, timeout=60
        )
    assert (work / "out" / "host" / "manifest.json").is_file() and (work / "out" / "pi5" / "manifest.json").is_file()

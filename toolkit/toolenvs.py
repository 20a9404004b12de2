"""Isolated tool environments for converters that cannot live in the user's Python.

Some converters need another interpreter version or dependencies that would clash with
the user's environment (onnx2tf 2.x needs Python >= 3.12; Paddle Lite's wheels stop at
3.10). A backend declares what it needs as a :class:`ToolEnvSpec`; :func:`ensure`
creates a virtual environment for it on first use, under :func:`root`, in a directory
named by the spec's name and a short hash of the spec (so a changed spec gets a new
environment). Creation happens in a temporary sibling directory that is renamed into
place only after pip and the spec's ``check`` succeeded, under an ``fcntl`` lock, so a
failed or concurrent creation never leaves a half-made environment behind.

Converter scripts run in an environment with :func:`run_tool`: a standalone file that
reads ``request.json`` and writes ``result.json`` in a work directory.
"""

import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import BackendUnavailable, ConversionError

MARKER = "edgekit-toolenv.json"


@dataclass(frozen=True)
class ToolEnvSpec:
    name: str            # "tflite", "paddlelite", "mindspore-lite"
    pythons: tuple       # acceptable interpreter versions, best first, e.g. ("3.12", "3.13")
    requirements: tuple  # pinned pip requirements
    check: str           # Python code run in the env after install; must exit 0
    purpose: str         # one line for doctor and messages
    env: tuple = ()      # extra environment variables for every run in this env: ((KEY, VALUE), ...)

    def digest(self):
        """Short hash of everything that shapes the environment (purpose excluded)."""
        d = asdict(self)
        d.pop("purpose")
        blob = json.dumps(d, sort_keys=True, default=list).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


def root() -> Path:
    """Where tool environments live: ``$EDGEKIT_TOOLENV_DIR`` or ``~/.cache/edgekit/toolenvs``."""
    d = os.environ.get("EDGEKIT_TOOLENV_DIR")
    return Path(d).expanduser() if d else Path.home() / ".cache" / "edgekit" / "toolenvs"


def env_dir(spec) -> Path:
    return root() / f"{spec.name}-{spec.digest()}"


def _env_python(d: Path) -> Path:
    return d / "bin" / "python"


# -- interpreters -----------------------------------------------------------------
def _probe(exe):
    """``(real executable, "3.12.1")`` if ``exe`` runs, else None (pyenv shims of unselected versions fail)."""
    try:
        r = subprocess.run([str(exe), "-I", "-c", "import sys; print(sys.executable); print('%d.%d.%d' % sys.version_info[:3])"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if r.returncode != 0:
        return None
    lines = r.stdout.split()
    if len(lines) < 2 or not lines[0]:
        return None
    return lines[0], lines[1]


def _candidates(version):
    """Places an interpreter of ``version`` ("3.12") may be, in order of preference."""
    found = []
    w = shutil.which(f"python{version}")
    if w:
        found.append(w)
    pyenv = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    found += sorted(glob.glob(os.path.join(pyenv, "versions", f"{version}*", "bin", f"python{version}")), reverse=True)
    uv = os.environ.get("UV_PYTHON_INSTALL_DIR") or str(Path.home() / ".local" / "share" / "uv" / "python")
    found += sorted(glob.glob(os.path.join(uv, f"cpython-{version}*", "bin", f"python{version}")), reverse=True)
    return found


def _version_ok(full, version):
    return full == version or full.startswith(version + ".")


def find_python(spec) -> str:
    """An interpreter of one of ``spec.pythons`` (best first), or BackendUnavailable saying how to get one."""
    for version in spec.pythons:
        for exe in _candidates(version):
            p = _probe(exe)
            if p and _version_ok(p[1], version):
                return p[0]
    want = " or ".join(spec.pythons)
    first = spec.pythons[0]
    raise BackendUnavailable(
        f"the {spec.name} tool environment ({spec.purpose}) needs Python {want}, and none was found on PATH "
        f"(python{first}), under pyenv or uv. Install one: `pyenv install {first}`, `uv python install {first}`, "
        f"or your distribution's python{first} package (with its venv module), then run "
        f"`edgekit backends install {spec.name}`")


# -- state ------------------------------------------------------------------------
def _read_marker(d: Path):
    try:
        return json.loads((d / MARKER).read_text())
    except (OSError, ValueError):
        return None


def _summary(requirements):
    if not requirements:
        return "no packages"
    more = f" and {len(requirements) - 1} pinned dependencies" if len(requirements) > 1 else ""
    return requirements[0] + more


def state(spec) -> dict:
    """What exists for ``spec``, without creating anything."""
    d = env_dir(spec)
    marker = _read_marker(d)
    py = _env_python(d)
    info = {"name": spec.name, "ready": False, "path": str(d), "python": None, "python_version": None,
            "requirements": list(spec.requirements), "detail": ""}
    if marker and marker.get("digest") == spec.digest() and py.exists():
        info.update(ready=True, python=str(py), python_version=marker.get("python_version"),
                    detail=f"ready: Python {marker.get('python_version')}, "
                           f"{_summary(spec.requirements)} in {d}")
        return info
    try:
        base = find_python(spec)
    except BackendUnavailable as e:
        info["detail"] = str(e)
        info["interpreter_missing"] = True
        return info
    p = _probe(base)
    info["python_version"] = p[1] if p else None
    info["base_python"] = base
    others = [Path(x).name for x in glob.glob(str(root() / f"{spec.name}-*")) if Path(x).is_dir() and Path(x) != d]
    stale = f" (an environment for an older spec exists: {', '.join(others)})" if others else ""
    info["detail"] = (f"not created yet: `edgekit backends install {spec.name}` or the first build creates it "
                      f"(Python {info['python_version']} at {base}){stale}")
    return info


# -- creation ---------------------------------------------------------------------
class _Lock:
    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(self.path, "a+")
        fcntl.flock(self.f.fileno(), fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.f.fileno(), fcntl.LOCK_UN)
        self.f.close()


_PROGRESS = re.compile(r"^(Collecting|Downloading|Using cached|Installing collected|Successfully installed|Building wheel)")


def _run_logged(cmd, log, tail, env=None):
    """Run ``cmd``, sending progress-like lines to ``log`` and keeping the last lines in ``tail``."""
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                          stdin=subprocess.DEVNULL) as proc:
        for line in proc.stdout:
            line = line.rstrip()
            tail.append(line)
            if log and _PROGRESS.match(line.strip()):
                log(f"  {line.strip()}")
        return proc.wait()


def ensure(spec, log=print) -> str:
    """The environment's python executable; creates the environment first if missing or its spec changed."""
    log = log or (lambda m: None)
    d = env_dir(spec)
    py = _env_python(d)
    if state(spec)["ready"]:
        return str(py)
    with _Lock(root() / f".{d.name}.lock"):
        if state(spec)["ready"]:  # another process made it while we waited
            return str(py)
        base = find_python(spec)
        version = _probe(base)[1]
        tmp = root() / f".{d.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        log(f"creating the {spec.name} tool environment (Python {version}): {spec.purpose}")
        retry = f"edgekit backends install {spec.name}"
        t0 = time.monotonic()
        try:
            tail = deque(maxlen=25)
            if _run_logged([base, "-m", "venv", str(tmp)], None, tail) != 0:
                raise BackendUnavailable(f"could not create a virtual environment with {base} (is its venv/ensurepip "
                                         f"module installed?):\n  " + "\n  ".join(tail) + f"\nretry: {retry}")
            tpy = str(_env_python(tmp))
            if spec.requirements:
                cmd = [tpy, "-m", "pip", "install", "--no-input", "--disable-pip-version-check", *spec.requirements]
                env = dict(os.environ, PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
                if _run_logged(cmd, log, tail, env=env) != 0:
                    raise BackendUnavailable(
                        f"installing the {spec.name} tool environment failed; pip said:\n  " + "\n  ".join(tail)
                        + f"\nnothing was kept. Retry with `{retry}` (pip command: "
                        + " ".join(["python -m pip install"] + [f"'{r}'" for r in spec.requirements]) + ")")
            tail.clear()
            r = subprocess.run([tpy, "-I", "-c", spec.check], capture_output=True, text=True,
                               env=dict(os.environ, **dict(spec.env)))
            if r.returncode != 0:
                lines = (r.stderr or r.stdout).strip().splitlines()[-15:]
                raise BackendUnavailable(f"the {spec.name} tool environment installed but its check failed "
                                         f"({spec.check!r}):\n  " + "\n  ".join(lines) + f"\nnothing was kept; retry: {retry}")
            marker = {"name": spec.name, "digest": spec.digest(), "spec": asdict(spec), "python_version": version,
                      "base_python": base, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
                      "install_seconds": round(time.monotonic() - t0, 1)}
            (tmp / MARKER).write_text(json.dumps(marker, indent=2, default=list))
            if d.exists():  # a leftover without a valid marker
                shutil.rmtree(d)
            os.rename(tmp, d)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        log(f"{spec.name} tool environment ready in {time.monotonic() - t0:.0f} s: {d}")
    return str(py)


def remove(spec):
    """Delete every environment of ``spec.name`` (this spec's and older ones). Returns the removed paths."""
    removed = []
    for x in sorted(glob.glob(str(root() / f"{spec.name}-*"))):
        p = Path(x)
        if p.is_dir() and re.fullmatch(re.escape(spec.name) + r"-[0-9a-f]{12}", p.name):
            with _Lock(root() / f".{p.name}.lock"):
                shutil.rmtree(p, ignore_errors=True)
            removed.append(str(p))
    return removed


# -- running tools ----------------------------------------------------------------
def run_tool(spec, script, request: dict, workdir, timeout=1800, log=None) -> dict:
    """Run a standalone converter script in the environment: ``ENVPY -I script request.json result.json``.

    stderr lines stream to ``log``; stdout goes to ``<script>.stdout.log`` in ``workdir``.
    Returns the parsed result.json; a failure or timeout raises ConversionError.
    """
    py = ensure(spec, log=log or print)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    req, res = workdir / "request.json", workdir / "result.json"
    req.write_text(json.dumps(request, indent=2, default=str))
    if res.exists():
        res.unlink()
    step = request.get("step") or Path(script).stem
    env = dict(os.environ, **dict(spec.env))
    out_path = workdir / f"{Path(script).stem}.stdout.log"
    tail = deque(maxlen=30)
    with open(out_path, "w") as out:
        proc = subprocess.Popen([py, "-I", str(script), str(req), str(res)], cwd=str(workdir), env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.PIPE, text=True,
                                errors="replace", start_new_session=True)

        def pump():
            for line in proc.stderr:
                line = line.rstrip()
                tail.append(line)
                if log:
                    log(line)

        t = threading.Thread(target=pump, daemon=True)
        t.start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            t.join(5)
            proc.stderr.close()
            raise ConversionError(f"{spec.name}: step {step!r} did not finish within {timeout} s and was stopped; "
                                  f"last output:\n  " + "\n  ".join(list(tail)[-10:])) from None
        t.join(30)
        proc.stderr.close()

    def _last():
        lines = list(tail)
        if not lines:
            try:
                lines = out_path.read_text(errors="replace").splitlines()[-20:]
            except OSError:
                pass
        return "\n  ".join(lines[-20:])

    if rc != 0:
        raise ConversionError(f"{spec.name}: step {step!r} failed (exit {rc}); the tool said:\n  {_last()}\n"
                              f"(full output in {workdir})")
    try:
        return json.loads(res.read_text())
    except (OSError, ValueError) as e:
        raise ConversionError(f"{spec.name}: step {step!r} wrote no readable result ({e}); the tool said:\n  {_last()}") from None


# -- backends and their environments (``edgekit backends``) ------------------------
def backends():
    """Every backend: usable here or not, its precisions and its tool environment's state (if it has one)."""
    from edgekit import converters

    rows = []
    for name, be in sorted(converters.all_backends().items()):
        try:
            ok, detail = be.availability()
        except Exception as e:  # report, don't crash: the listing must always answer
            ok, detail = False, f"availability check failed: {e}"
        spec = getattr(be, "toolenv", None)
        rows.append({"name": name, "ok": ok, "detail": detail if ok else f"{detail}. {be.install_hint}",
                     "precisions": list(be.precisions), "toolenv": state(spec) if spec else None})
    return rows


def _backend_spec(name):
    from edgekit import converters

    be = converters.get(name)
    if getattr(be, "toolenv", None) is None:
        raise BackendUnavailable(f"backend {name!r} has no tool environment: its runtime lives in this Python "
                                 f"({be.install_hint or 'see edgekit doctor'})")
    return be.toolenv


def install_backend(name, log=print):
    """Create (or verify) the tool environment of backend ``name``; returns its state."""
    ensure(_backend_spec(name), log=log)
    return state(_backend_spec(name))


def remove_backend(name):
    """Delete the tool environments of backend ``name``; returns the removed paths."""
    return remove(_backend_spec(name))


__all__ = ["ToolEnvSpec", "root", "find_python", "state", "ensure", "run_tool", "remove", "env_dir", "backends", "install_backend", "remove_backend"]

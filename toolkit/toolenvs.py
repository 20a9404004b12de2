"""Isolated tool environments for converters that cannot live in the user's Python.

Some converters need another interpreter version or dependencies that would clash with
the user's environment (onnx2tf 2.x needs Python >= 3.12; Paddle Lite's wheels stop at
3.10). A backend declares what it needs as a :class:`ToolEnvSpec`; :func:`ensure`
creates a virtual environment for it on first use, under :func:`root`, in a directory
named by the spec's name and a short hash of the spec (so a changed spec gets a new
environment). A spec pins every package the environment holds (its dependencies
included), and pip installs wheels only. Creation happens in a temporary sibling directory
that is renamed into place only after pip and the spec's ``check`` succeeded, under a file
lock, so a failed or concurrent creation never leaves a half-made environment behind (the
temporary directories of killed creations are removed by the next one). When a spec changes
but an existing environment of the same name already holds exactly the new pins, it is
adopted (renamed and re-marked) instead of being installed again.

Converter scripts run in an environment with :func:`run_tool`: a standalone file that
reads ``request.json`` and writes ``result.json`` in a work directory.
"""

import glob
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

from . import progress
from .errors import BackendUnavailable, ConversionError

MARKER = "edgekit-toolenv.json"


@dataclass(frozen=True)
class ToolEnvSpec:
    name: str  # "tflite", "paddlelite", "mindspore-lite"
    pythons: tuple  # acceptable interpreter versions, best first, e.g. ("3.12", "3.13")
    requirements: tuple  # every package of the environment, pinned ("name==version"), dependencies included
    check: str  # Python code run in the env after install; must exit 0
    purpose: str  # one line for doctor and messages
    env: tuple = ()  # extra environment variables for every run in this env: ((KEY, VALUE), ...)

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
        r = subprocess.run(
            [str(exe), "-I", "-c", "import sys; print(sys.executable); print('%d.%d.%d' % sys.version_info[:3])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
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
        f"`edgekit backends install {spec.name}`"
    )


# -- state ------------------------------------------------------------------------
def _read_marker(d: Path):
    try:
        return json.loads((d / MARKER).read_text())
    except (OSError, ValueError):
        return None


def _summary(requirements, unpinned=()):
    if not requirements:
        return "no packages"
    pinned = [r for r in requirements if "==" in r]
    n = len(requirements)
    if len(pinned) == n:
        what = f"{requirements[0]} and {n - 1} other packages, all pinned" if n > 1 else f"{requirements[0]} (pinned)"
    else:
        what = f"{requirements[0]} and {n - 1} other packages, {len(pinned)} of them pinned"
    if unpinned:
        what += f"; also installed, not pinned by the spec: {', '.join(unpinned)}"
    return what


def state(spec) -> dict:
    """What exists for ``spec``, without creating anything."""
    d = env_dir(spec)
    marker = _read_marker(d)
    py = _env_python(d)
    info = {
        "name": spec.name,
        "ready": False,
        "path": str(d),
        "python": None,
        "python_version": None,
        "requirements": list(spec.requirements),
        "detail": "",
    }
    if marker and marker.get("digest") == spec.digest() and py.exists():
        info.update(
            ready=True,
            python=str(py),
            python_version=marker.get("python_version"),
            detail=f"ready: Python {marker.get('python_version')}, "
            f"{_summary(spec.requirements, marker.get('unpinned') or ())} in {d}",
        )
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
    info["detail"] = (
        f"not created yet: `edgekit backends install {spec.name}` or the first build creates it "
        f"(Python {info['python_version']} at {base}){stale}"
    )
    return info


# -- creation ---------------------------------------------------------------------
class _Lock:
    """An exclusive lock on ``path`` (flock; msvcrt where there is no fcntl). ``waiting(msg)`` is told when another
    process holds it."""

    def __init__(self, path: Path, waiting=None, what=""):
        self.path, self.waiting, self.what = path, waiting, what

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(self.path, "a+")
        try:
            import fcntl
        except ImportError:  # Windows
            import msvcrt

            self._unlock = lambda: msvcrt.locking(self.f.fileno(), msvcrt.LK_UNLCK, 1)
            self.f.seek(0)
            while True:
                try:
                    msvcrt.locking(self.f.fileno(), msvcrt.LK_NBLCK, 1)
                    return self
                except OSError:
                    self._tell_waiting()
                    time.sleep(1)
        self._unlock = lambda: fcntl.flock(self.f.fileno(), fcntl.LOCK_UN)
        try:
            fcntl.flock(self.f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._tell_waiting()
            fcntl.flock(self.f.fileno(), fcntl.LOCK_EX)
        return self

    def _tell_waiting(self):
        if self.waiting:
            self.waiting(
                f"waiting for another edgekit creating {self.what or 'this tool environment'} (lock {self.path})"
            )
            self.waiting = None

    def __exit__(self, *exc):
        self._unlock()
        self.f.close()


def _stderr(msg):
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def _remove_stale_tmp(env_name):
    """Delete ``.ENV.tmp-PID`` directories whose creator is gone (killed creations). Call with ENV's lock held."""
    removed = []
    for x in glob.glob(str(root() / f".{env_name}.tmp-*")):
        pid = x.rsplit("-", 1)[-1]
        if pid.isdigit() and (int(pid) == os.getpid() or not _pid_alive(int(pid))):
            shutil.rmtree(x, ignore_errors=True)
            removed.append(x)
    return removed


def _norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def installed(python):
    """``{normalized name: version}`` of what the environment of ``python`` holds (pip itself left out)."""
    r = subprocess.run(
        [str(python), "-I", "-m", "pip", "freeze", "--all", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    if r.returncode != 0:
        return None
    out = {}
    for line in r.stdout.splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            out[_norm(name.strip())] = version.strip()
    out.pop("pip", None)
    return out


def _pins(spec):
    return {_norm(r.split("==", 1)[0]): r.split("==", 1)[1].strip() for r in spec.requirements if "==" in r}


def _unpinned(spec, have):
    """Installed packages the spec does not pin (setuptools/wheel that venv itself put there do not count)."""
    pins = _pins(spec)
    return sorted(f"{n}=={v}" for n, v in have.items() if n not in pins and n not in ("setuptools", "wheel"))


def _relocate(d: Path):
    """Point the console scripts of an environment made or renamed into ``d`` (their ``#!`` names the directory they
    were installed in: the temporary one, or the adopted environment's) at ``d``'s interpreter."""
    where = re.compile(rb"#!" + re.escape(str(root()).encode()) + rb"/[^/\s]+(/bin/python[0-9.]*)")
    for f in (d / "bin").iterdir() if (d / "bin").is_dir() else ():
        try:
            if f.is_symlink() or not f.is_file() or f.stat().st_size > 1 << 20:
                continue
            data = f.read_bytes()
            m = where.match(data)
            if m and not data.startswith(b"#!" + str(d).encode() + b"/"):
                f.write_bytes(b"#!" + str(d).encode() + m.group(1) + data[m.end() :])
        except OSError:
            pass


def _adopt(spec, d: Path, log):
    """Rename an existing environment of ``spec.name`` whose installed packages are exactly ``spec``'s pins (and whose
    interpreter is one the spec accepts, and which passes its check) into ``d``. Returns True if one was adopted."""
    pins = _pins(spec)
    if len(pins) != len(spec.requirements):  # only a fully pinned spec says exactly what an environment must hold
        return False
    for x in sorted(glob.glob(str(root() / f"{spec.name}-*"))):
        other = Path(x)
        if other == d or not re.fullmatch(re.escape(spec.name) + r"-[0-9a-f]{12}", other.name):
            continue
        marker = _read_marker(other)
        py = _env_python(other)
        if (
            not marker
            or not py.exists()
            or not any(_version_ok(marker.get("python_version", ""), v) for v in spec.pythons)
        ):
            continue
        with _Lock(root() / f".{other.name}.lock"):
            have = installed(py)
            if have is None or {n: v for n, v in have.items() if n in pins} != pins or _unpinned(spec, have):
                continue
            r = subprocess.run(
                [str(py), "-I", "-c", spec.check],
                capture_output=True,
                text=True,
                env=dict(os.environ, **dict(spec.env)),
            )
            if r.returncode != 0:
                continue
            marker.update(
                name=spec.name,
                digest=spec.digest(),
                spec=asdict(spec),
                adopted_from=other.name,
                adopted=time.strftime("%Y-%m-%dT%H:%M:%S"),
                unpinned=[],
            )
            (other / MARKER).write_text(json.dumps(marker, indent=2, default=list))
            if d.exists():  # a leftover without a valid marker
                shutil.rmtree(d)
            os.rename(other, d)
            _relocate(d)
        log(
            f"{spec.name} tool environment: {other.name} already holds exactly the new spec's {len(pins)} pinned "
            f"packages; adopted it as {d.name} (nothing installed)"
        )
        return True
    return False


_PROGRESS = re.compile(
    r"^(Collecting|Downloading|Using cached|Installing collected|Successfully installed|Building wheel)"
)


def _run_logged(cmd, log, tail, env=None, step=None):
    """Run ``cmd``, keeping the last lines in ``tail``. Every line is a detail of ``log`` (shown with --verbose);
    pip's progress-like lines advance ``step`` (one per package collected) on a display that shows steps, and are
    logged as lines otherwise."""
    prog = progress.of(log)
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, stdin=subprocess.DEVNULL
    ) as proc:
        for line in proc.stdout:
            line = line.rstrip()
            tail.append(line)
            prog.detail(line)
            what = _PROGRESS.match(line.strip())
            if not what:
                continue
            if step is not None and prog.shows_steps:
                if what.group(1) == "Collecting":
                    step.advance()
                elif what.group(1) == "Installing collected":
                    step.update(name=f"{step.name.split(':')[0]}: installing")
            elif log:
                log(f"  {line.strip()}")
        return proc.wait()


def ensure(spec, log=print) -> str:
    """The environment's python executable; creates the environment first if missing or its spec changed.

    ``log=None`` still reports creation (minutes, once) and waiting for another process's creation on stderr.
    """
    log = log or _stderr
    d = env_dir(spec)
    py = _env_python(d)
    if state(spec)["ready"]:
        return str(py)
    with _Lock(root() / f".{d.name}.lock", waiting=log, what=f"the {spec.name} tool environment"):
        if state(spec)["ready"]:  # another process made it while we waited
            return str(py)
        for x in _remove_stale_tmp(d.name):
            log(f"removed {x}, left by an interrupted creation")
        if _adopt(spec, d, log):
            return str(py)
        base = find_python(spec)
        version = _probe(base)[1]
        tmp = root() / f".{d.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        log(f"creating the {spec.name} tool environment (Python {version}): {spec.purpose}")
        retry = f"edgekit backends install {spec.name}"
        t0 = time.monotonic()
        try:
            tail: deque[str] = deque(maxlen=25)
            if _run_logged([base, "-m", "venv", str(tmp)], None, tail) != 0:
                raise BackendUnavailable(
                    f"could not create a virtual environment with {base} (is its venv/ensurepip "
                    f"module installed?):\n  " + "\n  ".join(tail) + f"\nretry: {retry}"
                )
            tpy = str(_env_python(tmp))
            unpinned = []
            if spec.requirements:
                cmd = [
                    tpy,
                    "-m",
                    "pip",
                    "install",
                    "--no-input",
                    "--disable-pip-version-check",
                    "--only-binary=:all:",
                    *spec.requirements,
                ]
                env = dict(os.environ, PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
                with progress.of(log).step(
                    f"{spec.name} tool environment: downloading", total=len(spec.requirements)
                ) as step:
                    rc = _run_logged(cmd, log, tail, env=env, step=step)
                if rc != 0:
                    raise BackendUnavailable(
                        f"installing the {spec.name} tool environment failed; pip said:\n  "
                        + "\n  ".join(tail)
                        + f"\nnothing was kept. Retry with `{retry}` (pip command: "
                        + " ".join(
                            ["python -m pip install --only-binary=:all:"] + [f"'{r}'" for r in spec.requirements]
                        )
                        + ")"
                    )
                unpinned = _unpinned(spec, installed(tpy) or {})
            tail.clear()
            r = subprocess.run(
                [tpy, "-I", "-c", spec.check], capture_output=True, text=True, env=dict(os.environ, **dict(spec.env))
            )
            if r.returncode != 0:
                lines = (r.stderr or r.stdout).strip().splitlines()[-15:]
                raise BackendUnavailable(
                    f"the {spec.name} tool environment installed but its check failed "
                    f"({spec.check!r}):\n  " + "\n  ".join(lines) + f"\nnothing was kept; retry: {retry}"
                )
            marker = {
                "name": spec.name,
                "digest": spec.digest(),
                "spec": asdict(spec),
                "python_version": version,
                "base_python": base,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "install_seconds": round(time.monotonic() - t0, 1),
                "unpinned": unpinned,
            }
            (tmp / MARKER).write_text(json.dumps(marker, indent=2, default=list))
            if d.exists():  # a leftover without a valid marker
                shutil.rmtree(d)
            os.rename(tmp, d)
            _relocate(d)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if unpinned:
            log(f"note: pip also installed packages the {spec.name} spec does not pin: {', '.join(unpinned)}")
        log(f"{spec.name} tool environment ready in {time.monotonic() - t0:.0f} s: {d}")
    return str(py)


def remove(spec):
    """Delete every environment of ``spec.name`` (this spec's and older ones) and the temporary directories of killed
    creations. Returns the removed paths."""
    removed = []
    for x in sorted(glob.glob(str(root() / f"{spec.name}-*"))):
        p = Path(x)
        if p.is_dir() and re.fullmatch(re.escape(spec.name) + r"-[0-9a-f]{12}", p.name):
            with _Lock(root() / f".{p.name}.lock"):
                shutil.rmtree(p, ignore_errors=True)
            removed.append(str(p))
    names = {
        m.group(1)
        for m in (
            re.fullmatch(r"\.(" + re.escape(spec.name) + r"-[0-9a-f]{12})\.tmp-\d+", Path(x).name)
            for x in glob.glob(str(root() / f".{spec.name}-*.tmp-*"))
        )
        if m
    }
    for name in sorted(names):
        with _Lock(root() / f".{name}.lock"):
            removed += _remove_stale_tmp(name)
    return removed


# -- running tools ----------------------------------------------------------------
def run_tool(spec, script, request: dict, workdir, timeout=1800, log=None) -> dict:
    """Run a standalone converter script in the environment: ``ENVPY -I script request.json result.json``.

    stderr lines stream to ``log`` (to a :class:`edgekit.progress.Progress`'s ``detail``: shown with
    ``--verbose``); stdout goes to ``<script>.stdout.log`` in ``workdir``.
    Returns the parsed result.json; a failure or timeout raises ConversionError.
    """
    # creation progress on the caller's display, or on stderr even when the tool's own chatter is not wanted
    py = ensure(spec, log=log if isinstance(log, progress.Progress) else None)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    req, res = workdir / "request.json", workdir / "result.json"
    req.write_text(json.dumps(request, indent=2, default=str))
    if res.exists():
        res.unlink()
    step = request.get("step") or Path(script).stem
    env = dict(os.environ, **dict(spec.env))
    out_path = workdir / f"{Path(script).stem}.stdout.log"
    tail: deque[str] = deque(maxlen=30)
    sink = log.detail if isinstance(log, progress.Progress) else log
    with open(out_path, "w") as out:
        proc = subprocess.Popen(
            [py, "-I", str(script), str(req), str(res)],
            cwd=str(workdir),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        assert proc.stderr is not None  # stderr=PIPE

        def pump():
            for line in proc.stderr:
                line = line.rstrip()
                tail.append(line)
                if sink:
                    sink(line)

        t = threading.Thread(target=pump, daemon=True)
        t.start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _killpg(proc, t)
            raise ConversionError(
                f"{spec.name}: step {step!r} did not finish within {timeout} s and was stopped; "
                f"last output:\n  " + "\n  ".join(list(tail)[-10:])
            ) from None
        except BaseException:  # Ctrl-C, SIGTERM turned into an exception, ...: the tool (its own session) stops too
            _killpg(proc, t)
            raise
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
        raise ConversionError(
            f"{spec.name}: step {step!r} failed (exit {rc}); the tool said:\n  {_last()}\n(full output in {workdir})"
        )
    try:
        return json.loads(res.read_text())
    except (OSError, ValueError) as e:
        raise ConversionError(
            f"{spec.name}: step {step!r} wrote no readable result ({e}); the tool said:\n  {_last()}"
        ) from None


def _killpg(proc, reader):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    reader.join(5)
    proc.stderr.close()


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
        rows.append(
            {
                "name": name,
                "ok": ok,
                "detail": detail if ok else be.explain_unavailable(detail),
                "precisions": list(be.precisions),
                "refused": dict(be.row.refused),  # listed, but not built by this release (the reason)
                "toolenv": state(spec) if spec else None,
            }
        )
    return rows


def _backend_spec(name):
    from edgekit import converters

    be = converters.get(name)
    if getattr(be, "toolenv", None) is None:
        raise BackendUnavailable(
            f"backend {name!r} has no tool environment: its runtime lives in this Python "
            f"({be.install_hint or 'see edgekit doctor'})"
        )
    return be.toolenv


def install_backend(name, log=print):
    """Create (or verify) the tool environment of backend ``name``; returns its state."""
    ensure(_backend_spec(name), log=log)
    return state(_backend_spec(name))


def remove_backend(name):
    """Delete the tool environments of backend ``name``; returns the removed paths."""
    return remove(_backend_spec(name))


__all__ = [
    "ToolEnvSpec",
    "root",
    "find_python",
    "state",
    "ensure",
    "run_tool",
    "remove",
    "env_dir",
    "backends",
    "install_backend",
    "remove_backend",
]

"""``edgekit doctor``: which backends and transports work here, and why not."""

import shutil
import sys
from typing import Any


def doctor() -> dict[str, Any]:
    from . import __version__, converters, profiles
    from .transports import all_transports

    backends = {}
    for name, be in sorted(converters.all_backends().items()):
        try:
            ok, detail = be.availability()
            detail = detail if ok else be.explain_unavailable(detail)
        except Exception as e:  # report, don't crash: doctor must always answer
            ok, detail = False, f"availability check failed: {type(e).__name__}: {e}"
        backends[name] = {
            "ok": ok,
            "detail": detail,
            "precisions": list(be.precisions),
            "refused": {p: r for p, r in be.row.refused.items()},  # listed, but not built by this release (why)
        }
        if getattr(be, "toolenv", None) is not None:
            from . import toolenvs

            try:
                backends[name]["toolenv"] = toolenvs.state(be.toolenv)
            except Exception as e:
                backends[name]["toolenv"] = {"ready": False, "detail": f"state unknown: {type(e).__name__}: {e}"}
    try:
        import onnxconverter_common  # noqa: F401

        fp16 = {"ok": True, "detail": "onnxconverter-common installed"}
    except ImportError:
        fp16 = {"ok": False, "detail": "fp16 builds need onnxconverter-common: pip install 'edgekit[fp16]'"}
    backends.setdefault("ort", {})["fp16"] = fp16
    transports = {}
    for kind, cls in all_transports().items():
        try:
            transports[kind] = cls.availability()
        except Exception as e:  # report, don't crash: doctor must always answer
            transports[kind] = {"ok": False, "detail": f"availability check failed: {type(e).__name__}: {e}"}
    problems = []
    try:
        host = profiles.detect_host()
        host_info = {
            "arch": host.arch,
            "isa": host.data["cpu"]["isa"],
            "cores": host.data["cpu"]["cores"],
            "ort_providers": host.backend("ort").get("providers"),
        }
    except Exception as e:  # report, don't crash: doctor must always answer
        host_info = {"error": str(e)}
        problems.append(f"host detection failed: {e}")
    bad_profiles = []
    for n in profiles.names():
        try:
            profiles.load(n)
        except Exception as e:
            bad_profiles.append({"name": n, "error": str(e)})
    return {
        "edgekit": __version__,
        "python": sys.version.split()[0],
        "host": host_info,
        "backends": backends,
        "transports": transports,
        "profiles": {"count": len(profiles.names()), "invalid": bad_profiles},
        "tools": {"ssh-keyscan": shutil.which("ssh-keyscan")},
        "ok": all(b["ok"] for b in backends.values()) and not bad_profiles and not problems,
    }


def doctor_text(d: dict[str, Any]) -> str:
    lines = [f"edgekit {d['edgekit']} on Python {d['python']}"]
    h = d["host"]
    if "error" not in h:
        lines.append(
            f"host: {h['arch']}, {h['cores']} cores, ISA {', '.join(h['isa']) or '-'}; "
            f"ORT providers: {', '.join(h['ort_providers'] or [])}"
        )
    lines.append("backends:")
    for name, b in d["backends"].items():
        lines.append(f"  {'ok ' if b['ok'] else 'NO '} {name:<10} {b['detail']}")
        if b.get("toolenv") and b["toolenv"]["detail"] not in b["detail"]:  # not the same paragraph twice
            lines.append(
                f"  {'ok ' if b['toolenv']['ready'] else '-- '} {'':<10} tool environment: {b['toolenv']['detail']}"
            )
        if "fp16" in b:
            lines.append(f"  {'ok ' if b['fp16']['ok'] else 'NO '} {'':<10} {b['fp16']['detail']}")
    lines.append("transports:")
    for name, t in d["transports"].items():
        lines.append(f"  {'ok ' if t['ok'] else 'NO '} {name:<10} {t['detail']}")
    lines.append(
        f"profiles: {d['profiles']['count']}"
        + (f", INVALID: {d['profiles']['invalid']}" if d["profiles"]["invalid"] else "")
    )
    return "\n".join(lines) + "\n"

"""Text forms of what the commands return (``--json`` prints the same data as one JSON object).

Lists are tables (:func:`.output.table`); one object is ``key  value`` lines.
"""

from __future__ import annotations

from typing import Any

from .output import paint, table


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, list | tuple):
        return ", ".join(_value(x) for x in v) if all(not isinstance(x, dict) for x in v) else ""
    return "-" if v is None else str(v)


def fields(data: dict[str, Any], indent: str = "", skip: tuple[str, ...] = ()) -> list[str]:
    """``key  value`` lines of a (nested) object: sub-objects indented under their key, lists of objects as items."""
    keys = [k for k in data if k not in skip]
    width = max((len(k) for k in keys), default=0)
    lines = []
    for k in keys:
        v = data[k]
        if isinstance(v, dict):
            lines.append(f"{indent}{k}")
            lines += fields(v, indent + "  ")
        elif isinstance(v, list) and v and any(isinstance(x, dict) for x in v):
            lines.append(f"{indent}{k}")
            for item in v:
                sub = fields(item, indent + "    ") if isinstance(item, dict) else [f"{indent}    {_value(item)}"]
                lines.append(f"{indent}  - {sub[0].strip()}")
                lines += sub[1:]
        else:
            lines.append(f"{indent}{k:<{width}}  {_value(v)}".rstrip())
    return lines


# -- profiles -----------------------------------------------------------------------
def profiles_list(d: dict[str, Any]) -> str:
    rows = [(r["name"], r["arch"], r["os"], r["transport"], r["description"]) for r in d["profiles"]]
    return table(("profile", "arch", "os", "agent via", "description"), rows)


def profile_show(d: dict[str, Any]) -> str:
    head = f"{d['name']}: {d.get('description', '')}".rstrip(": ")
    return "\n".join([paint(head, "bold"), *fields(d, skip=("name", "description", "schema_version"))]) + "\n"


# -- agent and models -----------------------------------------------------------------
def agent_state(d: dict[str, Any]) -> str:
    """``agent start|stop|status``: what the agent said, as lines."""
    if "stopped" in d:
        head = f"agent stopped (pid {d.get('pid')})" if d.get("stopped") else "no agent was running"
        return head + ("; it had to be killed" if d.get("forced") else "") + "\n"
    if not d.get("running", True):
        return f"agent not running (root {d.get('root')})\n"
    where = f"{d.get('host', '127.0.0.1')}:{d.get('port')}"
    head = f"agent {d.get('version', '')} running, pid {d.get('pid')}, on {where} (device loopback)"
    keep = ("root", "supervisor_pid", "restarts", "started")
    shown = {k: d[k] for k in keep if k in d}
    if d.get("encrypt"):
        shown["encrypted at rest"] = (
            f"{d['encrypt']['cipher']}, key {d['encrypt']['key']} (id {d['encrypt']['key_id']})"
        )
    if d.get("trust"):
        shown["trusted signers"] = f"{d['trust']['signers']} in {d['trust']['file']} (installs must be signed)"
    return "\n".join([head, *fields(shown, "  ")]) + "\n"


def rollback(d: dict[str, Any]) -> str:
    if d.get("unchanged"):
        return f"{d['name']}: already serving {d['version']}\n"
    return f"{d['name']}: now serving {d['version']} (was {d['previous']})\n"


def removed(d: dict[str, Any]) -> str:
    return f"removed {d['name']} and every version kept of it\n"


def models(d: dict[str, Any]) -> str:
    also = [
        f"also: {a['backend']} agent in {a['root']}: pass --backend {a['backend']}" for a in d.get("other_agents", [])
    ]
    if not d["models"]:
        return "\n".join([f"no models deployed on {d['device']}"] + also) + "\n"
    rows = [
        (
            m["name"],
            m["version"],
            m.get("backend") or "-",
            m.get("precision") or "-",
            ", ".join(v + ("*" if v == m["version"] else "") for v in m.get("versions", [])),
        )
        for m in d["models"]
    ]
    text = table(("model", "serving", "backend", "precision", "kept versions"), rows)
    return text + "".join(line + "\n" for line in also)


# -- backends -------------------------------------------------------------------------
def backends(d: dict[str, Any]) -> str:
    out = []
    for r in d["backends"]:
        mark = paint("ok ", "green") if r["ok"] else paint("NO ", "red")
        refused = set(r.get("refused") or ())  # precisions the backend lists but will not build here
        builds = ", ".join(p for p in r["precisions"] if p not in refused)
        out.append(f"{mark} {r['name']:<15} {builds:<45} {r['detail']}\n")
        env = r["toolenv"]
        if env and env["detail"] not in r["detail"]:  # not the same paragraph twice
            out.append(f"    tool environment: {env['detail']}\n")
    return "".join(out)


def field_pull(d: dict[str, Any]) -> str:
    return (
        f"pulled {d['added']} new records from {d['device']} in {d['seconds']} s "
        f"({d['stored_total']} stored in {d['store']})\n"
    )

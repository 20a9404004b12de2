"""Accelerator support tables: data files in ``edgekit.device_profiles/support/*.toml``.

Each table cites its source (``[source]``: title, url, version, date read) and says only what
that source says; anything it does not decide is ``unknown``, never ``yes``. Four kinds:

- ``rules``: node-level checks (``input_rank``, ``const_input``, ``attr_in``) for an accelerator
  whose op list comes from the runtime's own checker (ONNX Runtime's NNAPI / Core ML lists);
- ``op_list``: the ops an accelerator runs, optionally with versions and dtypes (TFLite GPU);
- ``backends``: op types each backend of a runtime registers (MNN OpenCL / Metal / Vulkan);
- ``devices``: device-wide limits (OpenVINO NPU / GPU: dynamic shapes).
"""

import sys
from functools import lru_cache
from importlib import resources

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

from typing import Any

from .errors import EdgekitError

YES, NO, UNKNOWN = "yes", "no", "unknown"


@lru_cache(maxsize=None)
def load(name: str) -> dict[str, Any]:
    """The table ``NAME.toml`` as a dict (cached)."""
    entry = resources.files("edgekit.device_profiles").joinpath("support", f"{name}.toml")
    try:
        data = tomllib.loads(entry.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EdgekitError(
            f"support table {name}.toml is missing from edgekit's device_profiles/support; reinstall edgekit"
        ) from None
    except tomllib.TOMLDecodeError as e:
        raise EdgekitError(f"support table {name}.toml is not valid TOML ({e}); reinstall edgekit") from None
    for key in ("name", "kind", "source"):
        if key not in data:
            raise EdgekitError(f"support table {name}.toml has no {key!r}; reinstall edgekit")
    return data


def cite(table: dict[str, Any]) -> dict[str, Any]:
    """``{title, url, version, read}`` of a table's source."""
    return dict(table["source"])


def _ops_of(rule: dict[str, Any]) -> list[str]:
    op = rule["op"]
    return [op] if isinstance(op, str) else list(op)


def _present(node: dict[str, Any], i: int) -> bool | str:
    return i < len(node["inputs"]) and node["inputs"][i]["name"]


def check_rules(table: dict[str, Any], node: dict[str, Any]) -> list[dict[str, str]]:
    """Rules of a ``rules`` table that ``node`` breaks: ``[{reason, fix, quote}]``."""
    failures = []
    for rule in table.get("rules", []):
        if node["op"] not in _ops_of(rule):
            continue
        kind = rule["kind"]
        if kind == "input_rank":
            i = rule["input"]
            shape = node["inputs"][i]["shape"] if _present(node, i) else None
            if shape is not None and len(shape) not in rule["equals"]:
                failures.append(
                    {
                        "reason": f'input {i} has rank {len(shape)}; {table["name"]}: "{rule["quote"]}"',
                        "fix": rule["fix"],
                        "quote": rule["quote"],
                    }
                )
        elif kind == "const_input":
            bad = [i for i in rule["inputs"] if _present(node, i) and not node["inputs"][i]["const"]]
            if bad:
                names = ", ".join(node["inputs"][i]["name"] for i in bad)
                failures.append(
                    {
                        "reason": f'input(s) {names} are computed, not constant; {table["name"]}: "{rule["quote"]}"',
                        "fix": rule["fix"],
                        "quote": rule["quote"],
                    }
                )
        elif kind == "attr_in":
            value = node["attrs"].get(rule["attr"], rule.get("default"))
            if value not in rule["allowed"]:
                failures.append(
                    {
                        "reason": f'attribute {rule["attr"]}={value!r}; {table["name"]}: "{rule["quote"]}"',
                        "fix": rule["fix"],
                        "quote": rule["quote"],
                    }
                )
    return failures


def check_op_list(table: dict[str, Any], node: dict[str, Any]) -> tuple[str, str, str]:
    """``(status, reason, fix)`` for a node against an ``op_list`` table (e.g. TFLite GPU)."""
    spec = table.get("ops", {}).get(node["op"])
    if spec is None:
        status = table.get("unlisted", UNKNOWN)
        return (
            status,
            f"{node['op']}: {table.get('unlisted_reason', 'not in the table')}",
            f"replace {node['op']} with ops the {table['name']} lists, or keep it at the start or end of the graph "
            "so the rest stays one partition",
        )
    version = node.get("version")
    allowed = spec.get("versions", table.get("default_versions"))
    if version is not None and allowed and int(version) not in allowed:
        return (
            NO,
            (
                f"{node['op']} version {version}; the {table['name']} runs versions "
                f'{", ".join(map(str, allowed))} ("{table.get("versions_quote", "")}")'
            ),
            "build the float model (quantized op versions need the delegate's quantization support)",
        )
    dtypes = table.get("dtypes")
    bad = [
        i["dtype"] for i in node["inputs"] if i.get("dtype") and dtypes and i["dtype"] not in dtypes and not i["const"]
    ]
    if bad:
        return (
            NO,
            (f'{node["op"]} takes {bad[0]} data; "{table.get("dtype_quote", "")}"'),
            "use --precision fp32 or fp16 so activations are floating point",
        )
    return YES, spec.get("note", ""), ""


def check_backend_op(table: dict[str, Any], backend: str, op: str) -> tuple[str, str]:
    """``(status, reason)`` for an op type on one backend of a ``backends`` table (e.g. MNN OpenCL)."""
    info = table["backends"].get(backend.upper())
    if info is None:
        return UNKNOWN, f"the table has no entry for backend {backend}"
    ops = set(info["ops"])
    if op in ops:
        return YES, ""
    if op in set(table.get("geometry", {}).get("ops", [])) and "Raster" in ops:
        return YES, (
            f"MNN's geometry computer rewrites {op} into Raster and other ops at load; {backend} registers Raster"
        )
    if info.get("complete"):
        return NO, f"MNN's {backend} backend registers no execution for {op}; MNN runs it on the CPU"
    return UNKNOWN, f"{op} is not among the {backend} registrations read from MNN's sources (that list is partial)"


def device_limits(table: dict[str, Any], device: str) -> dict[str, Any]:
    """Device-wide documented limits of a ``devices`` table, or ``{}``."""
    return dict(table.get("devices", {}).get(device.upper(), {}))

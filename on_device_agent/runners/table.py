"""The backends edgekit knows: one row each, the single source of truth for host and device.

Data only (Python 3.7 syntax, stdlib only): the agent reads it to find its runners, the host
(``edgekit.converters``, the CLI's choices, ``edgekit backends``, ``doctor``, the profile schema's
backend list, the detected ``host`` profile, placement) reads the same rows. It lives in the agent
package because the agent ships alone (a zipapp of this package) and must stay self-contained;
the host imports it from here.

A row names modules by their full import name, so a backend that is not part of edgekit (a
plugin, or a test's) registers its own row with :meth:`Table.register`.
"""

from collections import OrderedDict
from typing import Dict, Iterable, List, Optional, Sequence


class Row(object):
    """One backend: what the host builds with, what the device runs with, what it can and cannot build."""

    __slots__ = ("name", "host", "runner", "precisions", "refused", "runtime", "extra", "toolenv", "dynamic_shapes")

    def __init__(
        self,
        name: str,
        host: str,
        runner: str,
        precisions: Sequence[str],
        refused: Optional[Dict[str, str]] = None,
        runtime: str = "",
        extra: Optional[str] = None,
        toolenv: Optional[str] = None,
        dynamic_shapes: bool = False,
    ) -> None:
        self.name = name  # the backend's name in profiles, bundles and on the command line
        self.host = host  # import name of the host module (it has ``BACKEND``, an edgekit.converters.Backend)
        self.runner = runner  # import name of the agent's runner module (it has ``RUNNER``, a runners.Runner)
        self.precisions = tuple(precisions)  # every precision the command line accepts for it, best known first
        self.refused = dict(refused or {})  # precision -> why this release refuses to build it
        self.runtime = runtime  # the runtime's Python package (import or pip name), on host and device
        self.extra = extra  # the pip extra that installs the host runtime: pip install 'edgekit[EXTRA]'
        self.toolenv = toolenv  # the tool environment its converter (and maybe runtime) lives in, or None
        # its built models run inputs of dynamic shape (checked with a real model: docs/SHAPES.md); False: edgekit
        # fixes every dimension at the declared typical shape
        self.dynamic_shapes = dynamic_shapes

    @property
    def builds(self) -> tuple:
        """The precisions it really builds (``precisions`` less ``refused``)."""
        return tuple(p for p in self.precisions if p not in self.refused)

    def to_dict(self) -> dict:
        return dict((k, getattr(self, k)) for k in self.__slots__)

    def __repr__(self) -> str:
        return "Row(%r)" % (self.name,)


_PADDLE_REFUSED = {
    "fp16": "Paddle Lite's fp16 .nb runs only on ARM CPUs with fp16 arithmetic (opt enable_fp16): this x86 host "
    "cannot check a single output of it, so edgekit does not ship it; build fp32",
    "int8": "Paddle Lite runs int8 only from a model quantized in Paddle (PaddleSlim); on this host's x86 kernels "
    "quantized .nb files returned NaN or garbage when measured, so no int8 build could be checked; build fp32",
}
_MINDSPORE_REFUSED = {
    "int8-weights": "MindSpore Lite 2.0.0 (the PyPI wheel) converts weight-quantized models, but the .ms does not "
    'load ("Prepare kernels failed"): edgekit does not ship a model that cannot run. Use '
    "--precision fp16 (half the size) or fp32",
    "int8": "full int8 needs MindSpore Lite's post-training quantization with a calibration config, which this "
    "release's Python converter could not produce in a form that loads; use --precision fp16 or fp32",
}

BUILTIN = (
    Row(
        "ort",
        "edgekit.converters.ort",
        "edgekit_agent.runners.ort",
        ("fp32", "fp16", "int8", "int8-dynamic"),
        runtime="onnxruntime",
        extra="ort",
        dynamic_shapes=True,
    ),
    Row(
        "openvino",
        "edgekit.converters.openvino",
        "edgekit_agent.runners.openvino",
        ("fp32", "fp16", "int8", "int8-weights"),
        runtime="openvino",
        extra="openvino",
        dynamic_shapes=True,
    ),
    Row(
        "mnn",
        "edgekit.converters.mnn",
        "edgekit_agent.runners.mnn",
        ("fp32", "fp16", "int8", "int8-weights", "int4-weights"),
        runtime="MNN",
        extra="mnn",
        dynamic_shapes=True,
    ),
    Row(
        "tflite",
        "edgekit.converters.tflite",
        "edgekit_agent.runners.tflite",
        ("fp32", "fp16", "int8-dynamic", "int8"),
        runtime="ai-edge-litert",
        extra="tflite",
        toolenv="tflite",
    ),
    Row(
        "paddlelite",
        "edgekit.converters.paddlelite",
        "edgekit_agent.runners.paddlelite",
        ("fp32", "fp16", "int8"),
        refused=_PADDLE_REFUSED,
        runtime="paddlelite",
        toolenv="paddlelite",
    ),
    Row(
        "mindspore-lite",
        "edgekit.converters.mindspore_lite",
        "edgekit_agent.runners.mindspore_lite",
        ("fp32", "fp16", "int8-weights", "int8"),
        refused=_MINDSPORE_REFUSED,
        runtime="mindspore_lite",
        toolenv="mindspore-lite",
    ),
)


class Table(object):
    """The rows in order: edgekit's own, then any registered by a plugin. Reads never see a half-made change."""

    def __init__(self, rows: Iterable[Row] = BUILTIN) -> None:
        self._rows = OrderedDict((r.name, r) for r in rows)
        self._builtin = tuple(self._rows)

    def rows(self) -> List[Row]:
        return list(self._rows.values())

    def names(self) -> List[str]:
        return list(self._rows)

    def builtin_names(self) -> List[str]:
        return list(self._builtin)

    def get(self, name: str) -> Optional[Row]:
        """The row of backend ``name``, or None."""
        return self._rows.get(name)

    def precisions(self) -> List[str]:
        """Every precision some backend accepts, in the order the rows first name them."""
        seen = []  # type: List[str]
        for r in self._rows.values():
            seen.extend(p for p in r.precisions if p not in seen)
        return seen

    def register(self, row: Row) -> Row:
        """Add a backend (a plugin's, a test's); one of edgekit's own cannot be replaced."""
        if row.name in self._builtin:
            raise ValueError("backend %r is one of edgekit's own; choose another name" % row.name)
        rows = OrderedDict(self._rows)
        rows[row.name] = row
        self._rows = rows  # one assignment: readers see the old table or the new one
        return row

    def unregister(self, name: str) -> None:
        if name in self._builtin:
            raise ValueError("backend %r is one of edgekit's own and cannot be removed" % name)
        rows = OrderedDict(self._rows)
        rows.pop(name, None)
        self._rows = rows


TABLE = Table()

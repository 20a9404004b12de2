"""Task specs: what a model is for, and the decoder parameters its outputs need.

A spec is written ``FAMILY[:HEAD][,KEY=VALUE...]``, e.g. ``classification``, ``detection:yolov8,conf=0.25,iou=0.45``,
``dense,thresh=0.3`` or ``ctc,blank=0``. :func:`parse_task` turns the text into a :class:`TaskSpec` or raises
:class:`TaskError` saying what is wrong and which forms are accepted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import EdgekitError


class TaskError(EdgekitError):
    """A task spec, a task metric or a user metric cannot be used as given."""


# family -> (heads, {parameter: default})
FAMILIES: dict[str, tuple[tuple[str, ...], dict[str, float | str]]] = {
    "classification": ((), {}),
    "detection": (
        ("yolov8", "yolov5", "yolox", "picodet", "ssd", "nms"),
        {"conf": 0.25, "iou": 0.45, "match": 0.5},
    ),
    "segmentation": (("semantic",), {"thresh": 0.5}),
    "dense": ((), {"thresh": 0.3, "box_thresh": 0.5}),
    "keypoints": ((), {"tol": 0.02}),
    "ctc": ((), {"blank": 0}),
    "embedding": ((), {}),
    "vad": ((), {"thresh": 0.5}),
    "generic": ((), {}),
}
# parameters a head needs beyond the family's defaults (filled by inference from the model, or given by hand)
HEAD_PARAMS: dict[str, tuple[str, ...]] = {
    "yolox": ("size", "strides"),
    "picodet": ("size", "strides", "reg_max"),
    "ssd": ("box",),
}
TEXT_PARAMS = {"size", "strides", "box", "layout", "charset", "output"}
FORMS = (
    "classification | detection:HEAD[,conf=0.25,iou=0.45,match=0.5] (HEAD: yolov8, yolov5, yolox, picodet, ssd, nms) "
    "| segmentation[,thresh=0.5] | dense[,thresh=0.3,box_thresh=0.5] | keypoints[,tol=0.02] | ctc[,blank=0] "
    "| embedding | vad[,thresh=0.5] | generic"
)


@dataclass(frozen=True)
class TaskSpec:
    """A task family, its head (how raw outputs become answers) and the decoder's parameters."""

    family: str
    head: str = ""
    params: dict[str, float | str] = field(default_factory=dict)

    def get(self, key: str) -> float | str:
        """A parameter, else the family's default."""
        if key in self.params:
            return self.params[key]
        defaults = FAMILIES[self.family][1]
        if key not in defaults:
            raise TaskError(f"task {self}: parameter {key!r} is needed; give it as {self.family}:{self.head},{key}=...")
        return defaults[key]

    def num(self, key: str) -> float:
        return float(self.get(key))

    def ints(self, key: str) -> tuple[int, ...]:
        """A parameter written like 800x608 or 8x16x32 as a tuple of ints."""
        return tuple(int(v) for v in str(self.get(key)).split("x"))

    def __str__(self) -> str:
        head = f":{self.head}" if self.head else ""
        params = "".join(f",{k}={_fmt(v)}" for k, v in self.params.items())
        return f"{self.family}{head}{params}"

    def to_dict(self) -> dict[str, object]:
        return {"spec": str(self), "family": self.family, "head": self.head, "params": dict(self.params)}


def _fmt(value: float | str) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def parse_task(text: str | TaskSpec) -> TaskSpec:
    """Parse ``FAMILY[:HEAD][,KEY=VALUE...]`` (see the module doc); a TaskSpec is returned as is."""
    if isinstance(text, TaskSpec):
        return text
    raw = (text or "").strip()
    if not raw:
        raise TaskError(f"empty task; accepted forms: {FORMS}")
    first, *pairs = [p.strip() for p in raw.split(",")]
    family, _, head = (s.strip() for s in first.partition(":"))
    family = family.lower()
    if family not in FAMILIES:
        raise TaskError(f"unknown task family {family!r} in {raw!r}; accepted forms: {FORMS}")
    heads, defaults = FAMILIES[family]
    head = head.lower()
    if head and head not in heads:
        accepted = ", ".join(heads) if heads else "none"
        raise TaskError(f"task {raw!r}: {family} has no head {head!r} (heads: {accepted}); accepted forms: {FORMS}")
    if family == "detection" and not head:
        raise TaskError(f"task {raw!r}: detection needs a head, e.g. detection:yolov8; accepted forms: {FORMS}")
    if not head and heads:
        head = heads[0]
    allowed = set(defaults) | set(HEAD_PARAMS.get(head, ())) | TEXT_PARAMS
    params: dict[str, float | str] = {}
    for pair in pairs:
        key, eq, value = (s.strip() for s in pair.partition("="))
        if not eq or not key or not value:
            raise TaskError(f"task {raw!r}: {pair!r} is not KEY=VALUE; accepted forms: {FORMS}")
        if key not in allowed:
            raise TaskError(
                f"task {raw!r}: unknown parameter {key!r} for {family} (known: {', '.join(sorted(allowed))})"
            )
        if key in TEXT_PARAMS:
            params[key] = value
            continue
        try:
            number = float(value)
        except ValueError:
            raise TaskError(f"task {raw!r}: {key}={value!r} must be a number; accepted forms: {FORMS}") from None
        params[key] = number
        if key in ("conf", "iou", "match", "thresh", "box_thresh", "tol") and not 0 <= number <= 1:
            raise TaskError(f"task {raw!r}: {key}={value} must be between 0 and 1; accepted forms: {FORMS}")
    return TaskSpec(family, head, params)

"""What to tell a user whose model has dynamic input dimensions: which dimensions, and a ``--input-shape`` to pass.

A dimension is dynamic when the model leaves it symbolic (``dim_param``) or unset; a dimension with a size (1
included) never is. The suggested sizes come, in this order, from the user's data (the shape of the arrays in
``--calib``/``--val``, or ``--preprocess resize=`` for a folder of images), from the model's metadata (a
``metadata_props`` entry named like the symbolic dimension), else 1 for a batch-like first dimension; every
value that is a guess is said to be one.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

Dim = Union[int, str, None]  # a size, a symbolic name, or unset
DataShapes = Callable[[Sequence[str]], Dict[str, Tuple[List[int], str]]]


@dataclass
class Hint:
    """One input's dynamic dimensions and what to pass for them."""

    name: str
    shape: List[Dim]
    dynamic: List[int]  # positions of the symbolic or unset dimensions
    values: Dict[int, int] = field(default_factory=dict)  # position -> suggested size
    sources: Dict[int, str] = field(default_factory=dict)  # position -> where the size comes from

    def symbol(self, i: int) -> str:
        """What to call a dimension with no size: its symbolic name, H/W/C of an image layout, else D<i>."""
        d = self.shape[i]
        if isinstance(d, str) and d.isidentifier():
            return d
        from .model import guess_layout

        layout = guess_layout(self.shape)
        return layout[i] if layout else f"D{i}"

    def label(self, i: int) -> str:
        return f"{self.symbol(i)} (position {i})"

    def flag(self) -> str:
        """``NAME=D1,D2,...`` with the suggested sizes, and the symbol of each dimension that has none."""
        dims = [
            self.values.get(i, self.symbol(i)) if i in self.dynamic else self.shape[i] for i in range(len(self.shape))
        ]
        return f"{self.name}={','.join(str(d) for d in dims)}"

    @property
    def unknown(self) -> List[int]:
        return [i for i in self.dynamic if i not in self.values]


def dynamic_positions(shape: Sequence[Dim]) -> List[int]:
    """Positions of the dimensions that are symbolic or unset (never one with a size, 1 included)."""
    return [i for i, d in enumerate(shape) if not (isinstance(d, int) and d > 0)]


def from_data(hint: Hint, data_shape: Sequence[int], source: str) -> None:
    """Fill ``hint`` from an array of samples shaped ``[N, *input]`` or, when the batch is the sample axis,
    ``[N, *input[1:]]``; nothing when the data contradict the model's sizes."""
    rank = len(hint.shape)
    if len(data_shape) == rank + 1:
        dims, per_sample = list(data_shape[1:]), False
    elif len(data_shape) == rank and rank >= 2:
        dims, per_sample = [1, *data_shape[1:]], True  # edgekit runs the samples one at a time
    else:
        return
    if any(isinstance(s, int) and s > 0 and s != d for s, d in zip(hint.shape, dims)):
        return
    for i in hint.dynamic:
        hint.values[i] = int(dims[i])
        one = i == 0 and per_sample
        hint.sources[i] = f"as edgekit runs the samples of {source} one at a time" if one else f"from {source}"


def from_metadata(hint: Hint, metadata: Dict[str, str]) -> None:
    """Fill what the data did not from ``metadata_props`` entries named like a symbolic dimension."""
    props = {k.lower(): v for k, v in metadata.items()}
    for i in hint.dynamic:
        d = hint.shape[i]
        value = props.get(d.lower()) if isinstance(d, str) and d else None
        if i not in hint.values and value is not None and value.strip().isdigit() and int(value) > 0:
            hint.values[i] = int(value)
            hint.sources[i] = "from the model's metadata"


def batch_guess(hint: Hint) -> None:
    """1 for a dynamic first dimension of a tensor of rank 2 or more (a batch), said to be a guess."""
    if 0 in hint.dynamic and 0 not in hint.values and len(hint.shape) >= 2:
        hint.values[0] = 1
        hint.sources[0] = "is a guess (batch 1)"


def array_shapes(
    path: Union[str, Path], names: Sequence[str], preprocess: Optional[str] = None
) -> Dict[str, List[int]]:
    """``{input: [N, ...]}`` from a data file or image folder, as far as it can be read without its values."""
    from .data import LABEL_KEYS, parse_preprocess

    path = Path(path)
    shapes: Dict[str, List[int]] = {}
    try:
        if path.suffix == ".npz" and path.is_file():
            with np.load(path, allow_pickle=False) as z:
                keys = [k for k in z.files if k not in LABEL_KEYS]
                for k in keys:
                    shapes[k] = list(z[k].shape)
            if len(names) == 1 and len(keys) == 1 and names[0] not in shapes:
                shapes = {names[0]: shapes[keys[0]]}
        elif path.suffix == ".npy" and path.is_file() and len(names) == 1:
            shapes[names[0]] = list(np.load(path, mmap_mode="r", allow_pickle=False).shape)
        elif path.is_dir() and len(names) == 1 and preprocess:
            opts = parse_preprocess(preprocess)
            if opts["resize"]:
                w, h = opts["resize"]
                c = 1 if opts["color"] == "gray" else 3
                shapes[names[0]] = [1, c, h, w] if opts["layout"] == "nchw" else [1, h, w, c]
    except Exception:  # an unreadable file is reported when it is loaded; here it only gives no hint
        return {}
    return shapes


def data_reader(paths: Sequence[Optional[Union[str, Path]]], preprocess: Optional[str] = None) -> DataShapes:
    """A function ``names -> {input: ([N, ...], source)}`` over the user's data files (the first that has an
    input wins), for :func:`edgekit.model.load_model`; it reads them only when called."""

    def read(names: Sequence[str]) -> Dict[str, Tuple[List[int], str]]:
        found: Dict[str, Tuple[List[int], str]] = {}
        for p in paths:
            if p is not None:
                for name, shape in array_shapes(p, names, preprocess).items():
                    found.setdefault(name, (shape, Path(p).name))
        return found

    return read


def message(hints: List[Hint], dynamic: bool = False) -> str:
    """The error for inputs with dynamic dimensions: each one's dimensions, and the --input-shape to pass.

    ``dynamic``: the backend keeps them dynamic, but edgekit needs a size to check and benchmark the build at."""
    parts, notes, unknown = [], [], []
    for h in hints:
        shown = ",".join(str(d) if isinstance(d, int) and d > 0 else h.symbol(i) for i, d in enumerate(h.shape))
        parts.append(f"input {h.name!r} [{shown}] has dynamic dimensions {', '.join(h.label(i) for i in h.dynamic)}")
        who = f"{h.name}: " if len(hints) > 1 else ""
        notes += [f"{who}{h.symbol(i)}={h.values[i]} {h.sources[i]}" for i in h.dynamic if i in h.values]
        unknown += [f"{who}{h.symbol(i)}" for i in h.unknown]
    flags = " ".join(f"--input-shape {h.flag()}" for h in hints)
    need = (
        "edgekit needs their sizes to check and benchmark the build at (they stay dynamic; a range [MIN:MAX] or a "
        f"set [A,B,C] declares which sizes it takes): pass {flags}"
        if dynamic
        else f"This build needs static shapes: pass {flags}"
    )
    text = "; ".join(parts) + ". " + need
    if notes:
        text += f" ({'; '.join(notes)})"
    if unknown:
        text += (
            f", with {', '.join(unknown)} replaced by the sizes of your data (nothing in the model or the data given "
            "says them; with --calib or --val data edgekit suggests them)"
        )
    return text

"""A bundle whose model takes a dynamic batch (``N``), made from a built batch-1 bundle."""

import hashlib
import json
import shutil
from pathlib import Path
from typing import Union


def dynamic_batch_bundle(bundle: Union[str, Path], out: Union[str, Path]) -> Path:
    """Copy ``bundle`` to ``out`` with its ONNX model's first input and output dimension made ``N``."""
    import onnx

    out = Path(out)
    shutil.copytree(bundle, out)
    manifest = json.loads((out / "manifest.json").read_text())
    path = out / manifest["model"]
    proto = onnx.load(str(path))
    for value in list(proto.graph.input) + list(proto.graph.output):
        dim = value.type.tensor_type.shape.dim[0]
        dim.Clear()
        dim.dim_param = "N"
    del proto.graph.value_info[:]
    onnx.save(proto, str(path))
    for spec in manifest["inputs"] + manifest["outputs"]:
        spec["shape"][0] = "N"
    for entry in manifest["files"]:
        data = (out / entry["name"]).read_bytes()
        entry["size"], entry["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    manifest["id"] = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return out

"""The binary tensor encoding of the agent's API (``application/x-edgekit-tensors``).

    b"EKT1" | uint32 little-endian header length | header (UTF-8 JSON) | payload

The header is ``{"tensors": [{"name", "dtype", "shape", "offset", "nbytes"}], ...}``;
offsets count from the start of the payload; data is C-order, little-endian. Every dtype of ``DTYPES``
travels (int64 token ids, bool masks, uint8 bytes), and a 0-d tensor has the shape ``[]``. Any other
keys in the header (timings, for example) travel as metadata.
"""

import json
import struct
from typing import Any, Dict, Optional, Tuple

CONTENT_TYPE = "application/x-edgekit-tensors"
MAGIC = b"EKT1"
DTYPES = ("float32", "float16", "float64", "int8", "uint8", "int16", "uint16", "int32", "int64", "bool")
ITEMSIZE = {"float32": 4, "float16": 2, "float64": 8, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 4}
ITEMSIZE.update({"int64": 8, "bool": 1})
MAX_HEADER = 1 << 20
MAX_TENSORS = 1024


class WireError(ValueError):
    pass


def encode_tensors(tensors: Dict[str, Any], meta: Optional[Dict[str, Any]] = None) -> bytes:
    """``{name: ndarray}`` -> bytes."""
    import numpy as np

    entries, chunks, offset = [], [], 0
    for name, array in tensors.items():
        a = np.asarray(array)  # np.ascontiguousarray would turn a 0-d tensor into shape [1]
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        data = a.tobytes(order="C")
        entries.append(
            {"name": name, "dtype": str(a.dtype), "shape": list(a.shape), "offset": offset, "nbytes": len(data)}
        )
        chunks.append(data)
        offset += len(data)
    header = dict(meta or {})
    header["tensors"] = entries
    raw = json.dumps(header).encode("utf-8")
    return MAGIC + struct.pack("<I", len(raw)) + raw + b"".join(chunks)


def decode_tensors(body: bytes) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """bytes -> ``({name: ndarray}, header)``; raises WireError on malformed input."""
    import numpy as np

    if len(body) < 8 or body[:4] != MAGIC:
        raise WireError("body is not edgekit tensors (missing EKT1 magic)")
    (hlen,) = struct.unpack("<I", body[4:8])
    if hlen > MAX_HEADER:
        raise WireError("tensor header of %d bytes is larger than %d" % (hlen, MAX_HEADER))
    if 8 + hlen > len(body):
        raise WireError("header length exceeds the body")
    try:
        header = json.loads(body[8 : 8 + hlen].decode("utf-8"))
    except (ValueError, RecursionError):
        raise WireError("tensor header is not valid JSON with a 'tensors' list") from None
    entries = header.get("tensors") if isinstance(header, dict) else None
    if not isinstance(entries, list):
        raise WireError("tensor header is not valid JSON with a 'tensors' list")
    if len(entries) > MAX_TENSORS:
        raise WireError("%d tensors in one message; at most %d" % (len(entries), MAX_TENSORS))
    payload = memoryview(body)[8 + hlen :]
    # Every entry is checked before any byte is copied: names unique, sizes consistent, and the
    # tensors together no larger than the payload (entries cannot share bytes to multiply a copy).
    checked, names, total = [], set(), 0
    for e in entries:
        try:
            name, dtype, shape = e["name"], e["dtype"], [int(d) for d in e["shape"]]
            offset, nbytes = int(e["offset"]), int(e["nbytes"])
        except (KeyError, TypeError, ValueError):
            raise WireError("tensor entry needs name, dtype, shape, offset, nbytes") from None
        if not isinstance(name, str) or not 0 < len(name) <= 256:
            raise WireError("tensor names are strings of 1 to 256 characters")
        if name in names:
            raise WireError("tensor %r is listed twice" % name)
        names.add(name)
        if dtype not in DTYPES:
            raise WireError("tensor %r: unsupported dtype %r" % (name, dtype))
        if len(shape) > 32:
            raise WireError("tensor %r: more than 32 dimensions" % name)
        count = 1
        for d in shape:
            if d < 0:
                raise WireError("tensor %r: negative dimension" % name)
            count *= d
        if count * ITEMSIZE[dtype] != nbytes or offset < 0 or offset + nbytes > len(payload):
            raise WireError("tensor %r: shape %s and dtype %s do not match its %d bytes" % (name, shape, dtype, nbytes))
        total += nbytes
        if total > len(payload):
            raise WireError("the tensors' sizes add up to more than the %d bytes of payload" % len(payload))
        checked.append((name, dtype, shape, offset, nbytes))
    out = {}
    for name, dtype, shape, offset, nbytes in checked:
        out[name] = np.frombuffer(payload[offset : offset + nbytes], dtype=dtype).reshape(shape).copy()
    return out, header


def tensors_from_json(obj: Dict[str, Any]) -> Dict[str, Any]:
    """``{"x": {"dtype", "shape", "data"}}`` (or a bare nested list, taken as float32) -> arrays."""
    import numpy as np

    out = {}
    if not isinstance(obj, dict):
        raise WireError("'inputs' must be an object mapping input names to tensors")
    for name, t in obj.items():
        try:
            if isinstance(t, dict):
                a = np.asarray(t["data"], dtype=t.get("dtype", "float32"))
                if "shape" in t:
                    a = a.reshape([int(d) for d in t["shape"]])
            else:
                a = np.asarray(t, dtype="float32")
        except (KeyError, TypeError, ValueError) as e:
            raise WireError("input %r: cannot build a tensor from the JSON (%s)" % (name, e)) from e
        out[name] = a
    return out


def tensors_to_json(tensors: Dict[str, Any]) -> Dict[str, Any]:
    """Arrays -> standard JSON values; NaN and infinities (which JSON has no numbers for) become null."""
    import numpy as np

    out = {}
    for n, a in tensors.items():
        data = a.tolist()
        if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
            data = a.astype(np.float64).astype(object)
            data[~np.isfinite(a)] = None
            data = data.tolist()
        out[n] = {"dtype": str(a.dtype), "shape": list(a.shape), "data": data}
    return out

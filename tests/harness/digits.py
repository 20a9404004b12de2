"""A small CNN trained in numpy on scikit-learn's ``digits`` (8x8 images), exported with onnx.helper.

    x [N,1,8,8] -> Conv(1->24)+BN+Relu -> Conv(24->24)+BN, Add residual, Relu
      -> Conv(24->48)+BN+Relu -> GlobalAveragePool -> Flatten -> Gemm(48->10) -> Softmax

Training: im2col convolutions with hand-written backprop, Adam, about 3 s of one core,
~95 % accuracy on the held-out images. BatchNormalization carries the real statistics of
each convolution's output on the training images (gamma = std, beta = mean, so the trained
function is unchanged and the graph has the BN nodes an exported network has).
"""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CHANNELS = (24, 24, 48)
EPS = 1e-5


def load_digits_split(seed=0, n_train=1200):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images.astype(np.float32) / 16.0 - 0.3) / 0.4
    x = x[:, None, :, :]
    order = np.random.default_rng(seed).permutation(len(x))
    tr, te = order[:n_train], order[n_train:]
    return x[tr], d.target[tr].astype(np.int64), x[te], d.target[te].astype(np.int64)


def _shift_matrix(h, w):
    """0/1 matrix [H*W, H*W*9]: pixel -> the 3x3 (zero-padded) neighbourhoods it appears in."""
    m = np.zeros((h * w, h * w * 9), np.float32)
    for y in range(h):
        for x in range(w):
            for k, (dy, dx) in enumerate((i - 1, j - 1) for i in range(3) for j in range(3)):
                sy, sx = y + dy, x + dx
                if 0 <= sy < h and 0 <= sx < w:
                    m[sy * w + sx, (y * w + x) * 9 + k] = 1
    return m


_SHIFT = _shift_matrix(8, 8)


def _im2col(x):
    n, c, h, w = x.shape
    cols = (x.reshape(n * c, h * w) @ _SHIFT).reshape(n, c, h * w, 9)
    return cols.transpose(0, 2, 1, 3).reshape(n * h * w, c * 9)


def _conv(x, w, b):
    n, _, h, wd = x.shape
    cols = _im2col(x)
    out = cols @ w.reshape(w.shape[0], -1).T + b
    return out.reshape(n, h, wd, -1).transpose(0, 3, 1, 2), cols


def _conv_back(dout, cols, w, x_shape, need_dx=True):
    n, c, h, wd = x_shape
    d2 = dout.transpose(0, 2, 3, 1).reshape(-1, w.shape[0])
    dw = (d2.T @ cols).reshape(w.shape)
    db = d2.sum(0)
    if not need_dx:
        return dw, db, None
    dcols = (d2 @ w.reshape(w.shape[0], -1)).reshape(n, h * wd, c, 9).transpose(0, 2, 1, 3)
    return dw, db, (dcols.reshape(n * c, h * wd * 9) @ _SHIFT.T).reshape(n, c, h, wd)


def _forward(p, x):
    a1, c1 = _conv(x, p["w1"], p["b1"])
    h1 = np.maximum(a1, 0)
    a2, c2 = _conv(h1, p["w2"], p["b2"])
    s = a2 + h1
    h2 = np.maximum(s, 0)
    a3, c3 = _conv(h2, p["w3"], p["b3"])
    h3 = np.maximum(a3, 0)
    g = h3.mean((2, 3))
    z = g @ p["wf"].T + p["bf"]
    return z, dict(x=x, a1=a1, c1=c1, h1=h1, a2=a2, c2=c2, s=s, h2=h2, a3=a3, c3=c3, h3=h3, g=g)


def train(seed=0, epochs=6, batch=32, lr=0.01):
    """Train on the digits training split; returns (params, test accuracy %)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):  # small matrices: BLAS threads only contend on a shared machine
        return _train(seed, epochs, batch, lr)


def _train(seed, epochs, batch, lr):
    xtr, ytr, xte, yte = load_digits_split(seed)
    rng = np.random.default_rng(seed)
    c1, c2, c3 = CHANNELS
    p = {
        "w1": rng.standard_normal((c1, 1, 3, 3)) * np.sqrt(2 / 9),
        "b1": np.zeros(c1),
        "w2": rng.standard_normal((c2, c1, 3, 3)) * np.sqrt(2 / (9 * c1)) * 0.5,
        "b2": np.zeros(c2),
        "w3": rng.standard_normal((c3, c2, 3, 3)) * np.sqrt(2 / (9 * c2)),
        "b3": np.zeros(c3),
        "wf": rng.standard_normal((10, c3)) * np.sqrt(1 / c3),
        "bf": np.zeros(10),
    }
    p = {k: v.astype(np.float32) for k, v in p.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v2 = {k: np.zeros_like(v) for k, v in p.items()}
    t = 0
    for _ in range(epochs):
        order = rng.permutation(len(xtr))
        for i in range(0, len(order), batch):
            idx = order[i : i + batch]
            z, c = _forward(p, xtr[idx])
            e = np.exp(z - z.max(1, keepdims=True))
            prob = e / e.sum(1, keepdims=True)
            prob[np.arange(len(idx)), ytr[idx]] -= 1
            dz = prob / len(idx)
            g = {"wf": dz.T @ c["g"], "bf": dz.sum(0)}
            dh3 = np.broadcast_to((dz @ p["wf"])[:, :, None, None] / 64.0, c["h3"].shape)
            da3 = dh3 * (c["a3"] > 0)
            g["w3"], g["b3"], dh2 = _conv_back(da3, c["c3"], p["w3"], c["h2"].shape)
            ds = dh2 * (c["s"] > 0)
            g["w2"], g["b2"], dh1 = _conv_back(ds, c["c2"], p["w2"], c["h1"].shape)
            da1 = (dh1 + ds) * (c["a1"] > 0)
            g["w1"], g["b1"], _ = _conv_back(da1, c["c1"], p["w1"], c["x"].shape, need_dx=False)
            t += 1
            for k in p:
                m[k] = 0.9 * m[k] + 0.1 * g[k]
                v2[k] = 0.999 * v2[k] + 0.001 * g[k] ** 2
                p[k] = (p[k] - lr * (m[k] / (1 - 0.9**t)) / (np.sqrt(v2[k] / (1 - 0.999**t)) + 1e-8)).astype(np.float32)
    z, _ = _forward(p, xte)
    return p, float(np.mean(z.argmax(1) == yte) * 100)


def export(p, path, stats_x):
    """Write the trained network as ONNX (opset 17) with BN nodes holding the conv outputs' real statistics."""
    _, c = _forward(p, stats_x)
    inits, nodes = [], []

    def init(name, arr):
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr, dtype=np.float32), name))
        return name

    def conv_bn(x, i, act):
        w, b, a = p[f"w{i}"], p[f"b{i}"], c[f"a{i}"]
        mean, var = a.mean((0, 2, 3)), a.var((0, 2, 3))
        nodes.append(
            helper.make_node(
                "Conv",
                [x, init(f"conv{i}.weight", w), init(f"conv{i}.bias", b)],
                [f"conv{i}"],
                name=f"conv{i}",
                pads=[1, 1, 1, 1],
                kernel_shape=[3, 3],
            )
        )
        nodes.append(
            helper.make_node(
                "BatchNormalization",
                [
                    f"conv{i}",
                    init(f"bn{i}.scale", np.sqrt(var + EPS)),
                    init(f"bn{i}.bias", mean),
                    init(f"bn{i}.mean", mean),
                    init(f"bn{i}.var", var),
                ],
                [f"bn{i}"],
                name=f"bn{i}",
                epsilon=EPS,
            )
        )
        if not act:
            return f"bn{i}"
        nodes.append(helper.make_node("Relu", [f"bn{i}"], [f"relu{i}"], name=f"relu{i}"))
        return f"relu{i}"

    r1 = conv_bn("x", 1, True)
    b2 = conv_bn(r1, 2, False)
    nodes.append(helper.make_node("Add", [b2, r1], ["res"], name="residual"))
    nodes.append(helper.make_node("Relu", ["res"], ["relu2"], name="relu2"))
    r3 = conv_bn("relu2", 3, True)
    nodes += [
        helper.make_node("GlobalAveragePool", [r3], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
        helper.make_node(
            "Gemm", ["flat", init("fc.weight", p["wf"]), init("fc.bias", p["bf"])], ["logits"], name="fc", transB=1
        ),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "digits_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


def make_digits_model(directory, seed=0):
    """Train, export and write data: returns dict(model, calib, val, accuracy).

    calib: 200 training images; val: 400 held-out images (accuracy is on all 597 held-out images).
    """
    from pathlib import Path

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    xtr, ytr, xte, yte = load_digits_split(seed)
    params, acc = train(seed)
    model = export(params, d / "digits_cnn.onnx", xtr)
    np.savez(d / "digits_calib.npz", x=xtr[:200], labels=ytr[:200])
    np.savez(d / "digits_val.npz", x=xte[:400], labels=yte[:400])  # a build checks fidelity on 400 samples
    return {"model": model, "calib": d / "digits_calib.npz", "val": d / "digits_val.npz", "accuracy": acc}

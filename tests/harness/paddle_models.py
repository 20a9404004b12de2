"""Paddle models for the Paddle intake tests, made by Paddle itself: run with the paddlelite tool environment's Python,
``python paddle_models.py OUTDIR``. Standalone (paddlepaddle and numpy only).

- ``mnv3/inference.pdmodel``: paddle.vision's mobilenet_v3_small (10 classes) with fixed random weights (He-normal,
  seed 1: the library's own init leaves the logits near 1e-7), saved by ``paddle.jit.save`` for [-1, 3, 96, 96].
- ``hw/inference.pdmodel``: a conv over [1, 3, -1, -1] (height and width need --input-shape).
- ``histogram/inference.pdmodel``: a Linear then ``paddle.histogram``, an op paddle2onnx 1.2 does not map.
- ``logsumexp/inference.pdmodel``: a Linear then ``paddle.logsumexp``, which paddle2onnx exports and opt 2.13 has
  no kernel for.
- ``training/train.pdmodel``: a static training program (SGD), saved as a .pdmodel with a .pdiparams beside it.
"""

import os
import sys

import numpy as np
import paddle


def he_normal(layer: paddle.nn.Layer, seed: int) -> None:
    rng = np.random.RandomState(seed)
    for _, p in layer.named_parameters():
        if p.ndim > 1:
            p.set_value(rng.normal(0, np.sqrt(2.0 / int(np.prod(p.shape[1:]))), p.shape).astype("float32"))


class Histogram(paddle.nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.lin = paddle.nn.Linear(3, 3)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        y = self.lin(x)
        return paddle.histogram(y, bins=4, min=0, max=1).astype("float32") + y.sum()


class LogSumExp(paddle.nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.lin = paddle.nn.Linear(4, 4)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return paddle.logsumexp(self.lin(x), 1)


def main(out: str) -> None:
    from paddle.static import InputSpec
    from paddle.vision.models import mobilenet_v3_small

    paddle.seed(0)
    mnv3 = mobilenet_v3_small(num_classes=10)
    he_normal(mnv3, 1)
    mnv3.eval()
    paddle.jit.save(
        mnv3, os.path.join(out, "mnv3", "inference"), input_spec=[InputSpec([None, 3, 96, 96], "float32", "image")]
    )
    conv = paddle.nn.Sequential(paddle.nn.Conv2D(3, 4, 3), paddle.nn.ReLU())
    conv.eval()
    paddle.jit.save(
        conv, os.path.join(out, "hw", "inference"), input_spec=[InputSpec([1, 3, None, None], "float32", "x")]
    )
    hist = Histogram()
    hist.eval()
    paddle.jit.save(hist, os.path.join(out, "histogram", "inference"), input_spec=[InputSpec([2, 3], "float32", "x")])

    lse = LogSumExp()
    lse.eval()
    paddle.jit.save(lse, os.path.join(out, "logsumexp", "inference"), input_spec=[InputSpec([2, 4], "float32", "x")])

    paddle.enable_static()
    main_program, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main_program, startup):
        x = paddle.static.data("x", [None, 4], "float32")
        loss = paddle.mean(paddle.static.nn.fc(x, 2))
        paddle.optimizer.SGD(learning_rate=0.1).minimize(loss)
    os.makedirs(os.path.join(out, "training"))
    with open(os.path.join(out, "training", "train.pdmodel"), "wb") as f:
        f.write(main_program.desc.serialize_to_string())
    with open(os.path.join(out, "training", "train.pdiparams"), "wb") as f:
        f.write(b"\0" * 16)


if __name__ == "__main__":
    main(sys.argv[1])

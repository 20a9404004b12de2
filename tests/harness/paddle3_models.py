"""Paddle 3 models in the JSON program format (PIR) for the Paddle intake tests, made by Paddle 3 itself: run with the
paddle3 tool environment's Python, ``python paddle3_models.py OUTDIR``. Standalone (paddlepaddle 3 and numpy only).

- ``mnv3/inference.json``: paddle.vision's mobilenet_v3_small (10 classes) with fixed random weights (He-normal,
  seed 1), saved by ``paddle.jit.save`` (PIR, Paddle 3's default) for [-1, 3, 96, 96].
- ``histogram/inference.json``: a Linear then ``paddle.histogram``, an op paddle2onnx 2.1 does not map.
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


def main(out: str) -> None:
    from paddle.static import InputSpec
    from paddle.vision.models import mobilenet_v3_small

    paddle.seed(0)
    mnv3 = mobilenet_v3_small(num_classes=10)
    he_normal(mnv3, 1)
    mnv3.eval()
    prefix = os.path.join(out, "mnv3", "inference")
    paddle.jit.save(mnv3, prefix, input_spec=[InputSpec([None, 3, 96, 96], "float32", "image")])
    if not os.path.isfile(prefix + ".json"):
        raise SystemExit("paddle %s did not save the JSON program format" % paddle.__version__)
    hist = Histogram()
    hist.eval()
    paddle.jit.save(hist, os.path.join(out, "histogram", "inference"), input_spec=[InputSpec([2, 3], "float32", "x")])


if __name__ == "__main__":
    main(sys.argv[1])

"""Paddle 3 models in the JSON program format (PIR) for the Paddle intake tests, made by Paddle 3 itself: run with the
paddle3 tool environment's Python, ``python paddle3_models.py OUTDIR``. Standalone (paddlepaddle 3 and numpy only).

- ``mnv3/inference.json``: paddle.vision's mobilenet_v3_small (10 classes) with fixed random weights (He-normal,
  seed 1), saved by ``paddle.jit.save`` (PIR, Paddle 3's default) for [-1, 3, 96, 96].
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


if __name__ == "__main__":
    main(sys.argv[1])

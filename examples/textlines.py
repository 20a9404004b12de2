"""Render a labelled data set for the PP-OCR text-line orientation classifier.

The reference model ``/work/shared/models/ppocr_mobile_v2_cls.onnx`` (PP-OCR
mobile v2.0 ``cls``) tells upright text lines (label ``0``) from upside-down
ones (label ``1``, i.e. ``"180"``).  No labelled data ship with it, so this
module draws them:

* a random string of 6-16 ASCII letters and digits,
* in Pillow's default font (``ImageFont.load_default(size=...)``, Aileron
  Regular when FreeType is available) at a random size of 24-36 px,
* black on white, cropped to the ink of the text plus a small margin,
* exactly half of the lines (a random half) rotated by 180 degrees,

and preprocesses each line like PaddleOCR's ``predict_cls.resize_norm_img``:
RGB, resize to height 48 keeping the aspect ratio
(``width = min(192, ceil(48 * w / h))``), scale to [0, 1], ``(v - 0.5) / 0.5``,
pad on the right to width 192 with zeros, NCHW.

The result is deterministic for a given ``seed`` (and Pillow/FreeType
version).

Calibration.  The model README quotes 94.5 % for ONNX Runtime FP32 on 400
such lines but leaves the margin around the text open, and the accuracy
depends almost only on it: with a tight crop the model is ~99-100 % right,
and each extra bit of white border makes the text smaller after the resize
to height 48 and costs accuracy (margin as a fraction of the font size,
seed 0: 0.3 -> 99.3 %, 0.4 -> 96.0 %, 0.45 -> 95.0 %, 0.5 -> 92.3 %).  The
default margin of 0.45 x font size on every side of the ink box reproduces
the reference: 95.0 % on ``make_textlines(400, seed=0)`` and 94.7 % +- 1.1 %
(mean +- std) over seeds 0-9 (Pillow 13, onnxruntime 1.32, CPU).

Example::

    from examples.textlines import make_textlines
    x, labels = make_textlines(400, seed=0)     # x: [400, 3, 48, 192] float32

Command line::

    python examples/textlines.py -n 400 -o data.npz
    python examples/textlines.py -n 400 --evaluate /work/shared/models/ppocr_mobile_v2_cls.onnx
"""

from __future__ import annotations

import argparse
import math
import string
import sys
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFont

__all__ = [
    "ALPHABET",
    "IMG_C",
    "IMG_H",
    "IMG_W",
    "LABELS",
    "render_line",
    "preprocess",
    "make_textlines",
    "evaluate",
    "main",
]

#: Characters the random strings are drawn from.
ALPHABET = string.ascii_letters + string.digits
#: Input shape of the classifier (channels, height, width).
IMG_C, IMG_H, IMG_W = 3, 48, 192
#: Class names, indexed by label.
LABELS = ("0", "180")

#: Inclusive range of string lengths.
MIN_LEN, MAX_LEN = 6, 16
#: Inclusive range of font sizes in pixels.
MIN_SIZE, MAX_SIZE = 24, 36
#: Default white margin around the ink box, as a fraction of the font size.
DEFAULT_MARGIN = 0.45


@lru_cache(maxsize=None)
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def render_line(text: str, size: int, margin: float = DEFAULT_MARGIN) -> Image.Image:
    """Draw ``text`` black on white in Pillow's default font.

    The image is cropped to the ink bounding box of the text, with
    ``round(margin * size)`` white pixels added on every side.

    Args:
        text: the string to draw.
        size: font size in pixels.
        margin: white border around the ink, as a fraction of ``size``.

    Returns:
        An RGB :class:`PIL.Image.Image`.
    """
    font = _font(size)
    left, top, right, bottom = ImageDraw.Draw(Image.new("L", (1, 1))).textbbox((0, 0), text, font=font)
    pad = int(round(margin * size))
    w = right - left + 2 * pad
    h = bottom - top + 2 * pad
    img = Image.new("RGB", (w, h), (255, 255, 255))
    ImageDraw.Draw(img).text((pad - left, pad - top), text, font=font, fill=(0, 0, 0))
    return img


def preprocess(img: Image.Image) -> np.ndarray:
    """Preprocess one text-line image like PaddleOCR's cls ``resize_norm_img``.

    RGB, resize (bilinear) to height 48 keeping the aspect ratio with
    ``width = min(192, ceil(48 * w / h))``, scale to [0, 1], normalise with
    ``(v - 0.5) / 0.5`` and pad on the right with zeros to width 192.

    Args:
        img: any Pillow image; it is converted to RGB.

    Returns:
        float32 array of shape ``[3, 48, 192]``.
    """
    img = img.convert("RGB")
    w, h = img.size
    resized_w = min(IMG_W, int(math.ceil(IMG_H * w / float(h))))
    resized = img.resize((resized_w, IMG_H), Image.Resampling.BILINEAR)
    arr = np.asarray(resized, dtype=np.float32).transpose(2, 0, 1) / 255.0
    arr = (arr - 0.5) / 0.5
    out = np.zeros((IMG_C, IMG_H, IMG_W), dtype=np.float32)
    out[:, :, :resized_w] = arr
    return out


def make_textlines(n: int = 400, seed: int = 0, margin: float = DEFAULT_MARGIN) -> tuple[np.ndarray, np.ndarray]:
    """Render ``n`` labelled text lines for the orientation classifier.

    Args:
        n: number of lines.
        seed: seed of the random generator; the same seed gives the same data.
        margin: white border around the ink, as a fraction of the font size.

    Returns:
        ``(x, labels)``: ``x`` float32 ``[n, 3, 48, 192]``, ready for the
        model input ``x``; ``labels`` int64 ``[n]`` with 0 = upright
        (``"0"``) and 1 = rotated by 180 degrees (``"180"``).  Exactly
        ``n // 2`` lines are rotated.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = np.random.default_rng(seed)
    labels = np.zeros(n, dtype=np.int64)
    labels[rng.permutation(n)[: n // 2]] = 1
    x = np.empty((n, IMG_C, IMG_H, IMG_W), dtype=np.float32)
    alphabet = np.array(list(ALPHABET))
    for i in range(n):
        length = int(rng.integers(MIN_LEN, MAX_LEN + 1))
        text = "".join(rng.choice(alphabet, size=length))
        size = int(rng.integers(MIN_SIZE, MAX_SIZE + 1))
        img = render_line(text, size, margin)
        if labels[i]:
            img = img.transpose(Image.Transpose.ROTATE_180)
        x[i] = preprocess(img)
    return x, labels


def evaluate(model_path: str, x: np.ndarray, labels: np.ndarray, batch: int = 64) -> float:
    """Return the accuracy of an ONNX classifier on ``(x, labels)`` with ONNX Runtime (CPU)."""
    import onnxruntime as ort

    sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    preds = [sess.run(None, {name: x[i : i + batch]})[0].argmax(axis=1) for i in range(0, len(x), batch)]
    pred = np.concatenate(preds) if preds else np.zeros(0, dtype=np.int64)
    return float((pred == labels).mean()) if len(labels) else float("nan")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    p = argparse.ArgumentParser(
        description="Render labelled text lines (0 / 180 degrees) for the PP-OCR "
        "orientation classifier and save them as an npz with keys 'x' and 'labels'."
    )
    p.add_argument("-n", type=int, default=400, help="number of lines (default 400)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument(
        "--margin",
        type=float,
        default=DEFAULT_MARGIN,
        help=f"white border around the text, fraction of font size (default {DEFAULT_MARGIN})",
    )
    p.add_argument("-o", "--output", help="write the data set to this .npz file")
    p.add_argument(
        "--evaluate",
        metavar="MODEL.onnx",
        help="also print the ONNX Runtime accuracy of this model on the data",
    )
    args = p.parse_args(argv)
    if not args.output and not args.evaluate:
        p.error("nothing to do: give -o/--output and/or --evaluate")

    x, labels = make_textlines(args.n, args.seed, args.margin)
    if args.output:
        np.savez(args.output, x=x, labels=labels)
        print(f"wrote {args.output}: x {x.shape} {x.dtype}, labels {labels.shape} ({int(labels.sum())} rotated)")
    if args.evaluate:
        acc = evaluate(args.evaluate, x, labels)
        print(f"accuracy of {args.evaluate}: {acc:.2%} on {len(labels)} lines (seed {args.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

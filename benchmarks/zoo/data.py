"""Realistic inputs for the zoo models, made offline, and the preprocessing each model expects.

Sources (nothing is downloaded at run time beyond what `fetch.py` already cached):
- photos and a scanned page: scikit-image's wheel ships them in `skimage/data/` (astronaut, coffee, chelsea,
  motorcycle_left, rocket, page, text); `fetch.py` extracts them into `<cache>/data/` without installing skimage;
- rendered text lines and pages: Pillow with the DejaVu fonts (Debian package `fonts-dejavu-core`);
- speech: `espeak-ng` (Debian package `espeak-ng`) writes 22.05 kHz WAV, resampled to 16 kHz with `sox` when it is
  installed, else with scipy's polyphase resampler;
- bytes of real files (for Magika) and token ids from the model's own vocabulary file (romanizer);
- a transformer decoder's KV cache: empty past_key_values.* for its first step (`empty_past`); later steps get
  the present.* of the step before (`decode.greedy_kv`).

Images are returned as PIL images; `to_tensor` turns one into the float32 NCHW or NHWC array a model wants.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import tempfile
import wave
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

FONT_DIRS = (Path("/usr/share/fonts/truetype/dejavu"), Path("/usr/share/fonts/dejavu"))
PHOTOS = ("astronaut.png", "coffee.png", "chelsea.png", "motorcycle_left.png", "rocket.jpg")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class DataError(RuntimeError):
    """An input source is missing (run fetch.py, or install the named Debian package)."""


# ------------------------------------------------------------------------------------------------ images
def photo(cache: Path, name: str = "astronaut.png") -> Image.Image:
    """An RGB photo shipped in scikit-image's wheel (fetched by fetch.py into <cache>/data)."""
    path = cache / "data" / name
    if not path.is_file():
        raise DataError(f"{path} is missing: run `python benchmarks/zoo/fetch.py` first")
    return Image.open(path).convert("RGB")


def font(size: int, bold: bool = False) -> ImageFont.FreeTypeFont:
    """DejaVu Sans at `size` px (Debian fonts-dejavu-core)."""
    name = "DejaVuSans-Bold.ttf" if bold else "DejaVuSans.ttf"
    for folder in FONT_DIRS:
        if (folder / name).is_file():
            return ImageFont.truetype(str(folder / name), size)
    raise DataError("DejaVu fonts not found: apt-get install fonts-dejavu-core")


def text_line(text: str, height: int = 48, pad: int = 8) -> Image.Image:
    """One line of black text on white, `height` px high, as a scanner or screenshot would give it."""
    fnt = font(int(height * 0.7))
    left, top, right, bottom = fnt.getbbox(text)
    img = Image.new("RGB", (int(right - left) + 2 * pad, height), "white")
    ImageDraw.Draw(img).text((pad - left, (height - (bottom - top)) // 2 - top), text, font=fnt, fill="black")
    return img


def text_page(lines: list[str], width: int = 960, line_height: int = 44, margin: int = 48) -> Image.Image:
    """A white page with a bold title and body lines, for text detection and layout models."""
    height = margin * 2 + line_height * (len(lines) + 2)
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    draw.text((margin, margin), lines[0], font=font(int(line_height * 0.8), bold=True), fill="black")
    body = font(int(line_height * 0.55))
    for i, line in enumerate(lines[1:], start=2):
        draw.text((margin, margin + i * line_height), line, font=body, fill="black")
    return img


def to_tensor(
    img: Image.Image,
    size: tuple[int, int] | None = None,
    mean: tuple[float, ...] = (0.0, 0.0, 0.0),
    std: tuple[float, ...] = (1.0, 1.0, 1.0),
    scale: float = 1 / 255,
    bgr: bool = False,
    layout: str = "NCHW",
) -> np.ndarray:
    """(pixels * scale - mean) / std as float32 [1,C,H,W] (or NHWC), resized to size=(width, height) first."""
    if size is not None and img.size != size:
        img = img.resize(size, Image.Resampling.BILINEAR)
    arr = np.asarray(img, dtype=np.float32)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if bgr:
        arr = arr[:, :, ::-1]
    arr = (arr * scale - np.asarray(mean, np.float32)[: arr.shape[2]]) / np.asarray(std, np.float32)[: arr.shape[2]]
    arr = arr[None] if layout == "NHWC" else arr.transpose(2, 0, 1)[None]
    return np.ascontiguousarray(arr, dtype=np.float32)


def random_crop(img: Image.Image, rng: np.random.Generator, flip: bool) -> Image.Image:
    """A crop of 60-100 % of each side at a random place (mirrored when ``flip``): more detector inputs from a photo."""
    w, h = img.size
    s = rng.uniform(0.6, 1.0)
    cw, ch = int(w * s), int(h * s)
    x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
    img = img.crop((x0, y0, x0 + cw, y0 + ch))
    return img.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if flip else img


def letterbox(img: Image.Image, size: int, fill: int = 114) -> tuple[Image.Image, float]:
    """Scale to fit a size x size square keeping the aspect, pad right/bottom (YOLOX style); returns the ratio."""
    ratio = min(size / img.width, size / img.height)
    resized = img.resize(
        (max(1, round(img.width * ratio)), max(1, round(img.height * ratio))), Image.Resampling.BILINEAR
    )
    canvas = Image.new("RGB", (size, size), (fill, fill, fill))
    canvas.paste(resized, (0, 0))
    return canvas, ratio


def ppocr_det_input(img: Image.Image, limit_side: int = 736) -> np.ndarray:
    """PP-OCR det: short side up to >= limit_side, sides rounded to multiples of 32, BGR, (x/255 - 0.5) / 0.5."""
    ratio = max(1.0, limit_side / min(img.size))
    w = max(32, int(round(img.width * ratio / 32) * 32))
    h = max(32, int(round(img.height * ratio / 32) * 32))
    return to_tensor(img, (w, h), mean=(0.5,) * 3, std=(0.5,) * 3, bgr=True)


def ppocr_line_input(line: Image.Image, height: int = 48, min_width: int = 320) -> np.ndarray:
    """PP-OCR rec/cls: height 48, width from the aspect (at least min_width, right-padded with 0), BGR, +-1."""
    width = max(1, math.ceil(height * line.width / line.height))
    arr = to_tensor(line, (width, height), mean=(0.5,) * 3, std=(0.5,) * 3, bgr=True)
    out = np.zeros((1, 3, height, max(width, min_width)), np.float32)
    out[..., :width] = arr if width <= out.shape[3] else arr[..., : out.shape[3]]
    return out


def ppocr_cls_input(line: Image.Image) -> np.ndarray:
    """PP-OCR cls: like rec but 48 x 192, lines longer than 4:1 squeezed to 192 wide."""
    width = min(192, max(1, math.ceil(48 * line.width / line.height)))
    arr = to_tensor(line, (width, 48), mean=(0.5,) * 3, std=(0.5,) * 3, bgr=True)
    out = np.zeros((1, 3, 48, 192), np.float32)
    out[..., :width] = arr
    return out


def centre_crop_input(img: Image.Image, short: int = 256, crop: int = 224) -> np.ndarray:
    """Classifier style: short side to `short`, centre crop `crop`, ImageNet mean/std, RGB NCHW."""
    ratio = short / min(img.size)
    img = img.resize((round(img.width * ratio), round(img.height * ratio)), Image.Resampling.BILINEAR)
    left, top = (img.width - crop) // 2, (img.height - crop) // 2
    return to_tensor(img.crop((left, top, left + crop, top + crop)), mean=IMAGENET_MEAN, std=IMAGENET_STD)


def ddddocr_line_input(line: Image.Image) -> np.ndarray:
    """ddddocr: grayscale, height 64, width keeping the aspect, 0..1, [1,1,64,W]."""
    width = max(1, round(line.width * 64 / line.height))
    return to_tensor(line.convert("L"), (width, 64))


def mtcnn_pyramid(img: Image.Image, min_face: int = 20, factor: float = 0.709) -> list[tuple[float, np.ndarray]]:
    """MTCNN P-Net inputs: (scale, [1, W, H, 3] array) per pyramid level, (x - 127.5) / 128, H and W swapped."""
    levels = []
    scale = 12 / min_face
    side = min(img.size) * scale
    while side >= 12:
        w, h = math.ceil(img.width * scale), math.ceil(img.height * scale)
        arr = (np.asarray(img.resize((w, h), Image.Resampling.BILINEAR), np.float32) - 127.5) * 0.0078125
        levels.append((scale, np.ascontiguousarray(arr.transpose(1, 0, 2)[None])))
        scale *= factor
        side *= factor
    return levels


def mtcnn_crop_input(img: Image.Image, box: tuple[float, float, float, float], size: int = 48) -> np.ndarray:
    """MTCNN R/O-Net input: the box's crop resized to size x size, normalised, H and W swapped: [1, W, H, 3]."""
    x0, y0, x1, y1 = (int(round(v)) for v in box)
    crop = img.crop((x0, y0, x1, y1)).resize((size, size), Image.Resampling.BILINEAR)
    arr = (np.asarray(crop, np.float32) - 127.5) * 0.0078125
    return np.ascontiguousarray(arr.transpose(1, 0, 2)[None])


def isnet_input(img: Image.Image, size: int = 1024) -> np.ndarray:
    """IS-Net background removal: RGB resized to 1024 x 1024, x/255 - 0.5."""
    return to_tensor(img, (size, size), mean=(0.5,) * 3, std=(1.0,) * 3)


# ------------------------------------------------------------------------------------------------ audio
def speech(text: str, voice: str = "en-us", rate: int = 16000, lead_s: float = 0.5, tail_s: float = 0.5) -> np.ndarray:
    """`text` spoken by espeak-ng, mono float32 in [-1, 1] at `rate` Hz, with silence before and after."""
    if shutil.which("espeak-ng") is None:
        raise DataError("espeak-ng is not installed: apt-get install espeak-ng (and sox for resampling)")
    with tempfile.TemporaryDirectory(prefix="zoo-speech-") as tmp:
        raw, out = Path(tmp) / "raw.wav", Path(tmp) / "out.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-s", "150", "-w", str(raw), text], check=True, capture_output=True)
        if shutil.which("sox"):  # -D: no dither, so the same text gives the same samples on every run
            subprocess.run(["sox", "-D", str(raw), "-r", str(rate), "-c", "1", "-b", "16", str(out)], check=True)
            samples, _ = read_wav(out)
        else:
            from scipy.signal import resample_poly

            samples, src_rate = read_wav(raw)
            gcd = math.gcd(rate, src_rate)
            samples = resample_poly(samples, rate // gcd, src_rate // gcd).astype(np.float32)
    silence = np.zeros(int(lead_s * rate), np.float32)
    return np.concatenate([silence, samples, np.zeros(int(tail_s * rate), np.float32)])


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """A 16-bit PCM WAV file as mono float32 in [-1, 1] and its sample rate."""
    with wave.open(str(path), "rb") as handle:
        frames = handle.readframes(handle.getnframes())
        data = np.frombuffer(frames, "<i2").astype(np.float32) / 32768.0
        channels = handle.getnchannels()
        return data.reshape(-1, channels).mean(axis=1), handle.getframerate()


def vad_chunks(audio: np.ndarray, chunk: int = 512, context: int = 64) -> np.ndarray:
    """Silero VAD v5/v6 stream inputs: [n, context + chunk], each chunk prefixed by the previous one's tail."""
    n = len(audio) // chunk
    padded = np.concatenate([np.zeros(context, np.float32), audio[: n * chunk]])
    return np.stack([padded[i * chunk : i * chunk + context + chunk] for i in range(n)]).astype(np.float32)


# ------------------------------------------------------------------------------------------------ bytes and text
def magika_features(data: bytes, beg: int = 1024, end: int = 1024, pad: int = 256) -> np.ndarray:
    """Magika v3 input: first `beg` bytes after leading whitespace, last `end` before trailing, padded, int32."""
    stripped = data.strip()
    head = list(stripped[:beg]) + [pad] * max(0, beg - len(stripped))
    tail_bytes = stripped[-end:] if stripped else b""
    tail = [pad] * max(0, end - len(tail_bytes)) + list(tail_bytes)
    return np.asarray([head + tail], np.int32)


def romanizer_source(tokens: list[str], arabic: str, country: str | None, role: str = "unknown") -> np.ndarray:
    """Encoder ids for an Arabic name: <COUNTRY>, <ROLE_...>, one id per character, <EOS> (vocab.json order)."""
    index = {t: i for i, t in enumerate(tokens)}
    prefix = [f"<{country.upper()}>" if country else "<UNK_COUNTRY>", f"<ROLE_{role.upper()}>"]
    ids = [index.get(t, 3) for t in prefix] + [index.get(ch, 3) for ch in arabic] + [2]
    return np.asarray([ids], np.int64)


# ------------------------------------------------------------------------------------------------ KV-cache decoders
def empty_past(inputs: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Zero-length past_key_values.* for a decoder's first step, from the catalogue's `inputs` (batch 1, others 0)."""
    feeds = {}
    for spec in inputs:
        if str(spec["name"]).startswith("past_key_values."):
            dims = [d if isinstance(d, int) else 0 for d in spec["shape"]]
            feeds[str(spec["name"])] = np.zeros([1, *dims[1:]], np.float32)
    return feeds

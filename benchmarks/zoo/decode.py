"""Numpy decoders for the zoo's heads, written from the parameters in catalogue.toml (no cv2, no torch).

The product's decoders (CTC greedy, DB-style text-map regions, YOLOv8/YOLOX/PicoDet box decoding, NMS) live in
`edgekit.tasks` and are re-exported here; this file adds what only the zoo needs: PP-OCR's charset, a CRF's
Viterbi path, MTCNN P-Net proposals, greedy decoding with a transformer's KV cache and SentencePiece-style
detokenisation. They give the smoke test a human-checkable answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from edgekit.tasks.boxes import (  # noqa: F401  (re-exported for smoke.py)
    class_nms,
    nms,
    picodet_decode,
    sigmoid,
    softmax,
    yolov8_decode,
    yolox_decode,
)
from edgekit.tasks.regions import db_regions  # noqa: F401
from edgekit.tasks.sequence import ctc_greedy  # noqa: F401


def ppocr_charset(metadata_character: str) -> list[str]:
    """PP-OCR rec classes: blank, the characters of the model's 'character' metadata, then a space."""
    return ["<blank>"] + metadata_character.splitlines() + [" "]


def viterbi(emissions: np.ndarray, transitions: np.ndarray, start: np.ndarray, end: np.ndarray) -> list[int]:
    """Best tag path through a linear-chain CRF: emissions [T, C], transitions [C, C], start/end [C]."""
    score = start + emissions[0]
    back = []
    for t in range(1, len(emissions)):
        total = score[:, None] + transitions
        back.append(total.argmax(axis=0))
        score = total.max(axis=0) + emissions[t]
    best = [int((score + end).argmax())]
    for pointers in reversed(back):
        best.append(int(pointers[best[-1]]))
    return best[::-1]


def mtcnn_proposals(
    prob: np.ndarray, reg: np.ndarray, scale: float, threshold: float = 0.6, stride: int = 2, cell: int = 12
) -> np.ndarray:
    """P-Net face map [W', H'] (H/W swapped like its input) and box offsets [W', H', 4] -> rows of
    (x0, y0, x1, y1, score) in original-image pixels, offsets applied."""
    xs, ys = np.where(prob >= threshold)
    if xs.size == 0:
        return np.zeros((0, 5), np.float32)
    x0 = np.fix((stride * xs + 1) / scale)
    y0 = np.fix((stride * ys + 1) / scale)
    x1 = np.fix((stride * xs + cell) / scale)
    y1 = np.fix((stride * ys + cell) / scale)
    off = reg[xs, ys]
    w, h = x1 - x0 + 1, y1 - y0 + 1
    boxes = np.stack([x0 + off[:, 0] * w, y0 + off[:, 1] * h, x1 + off[:, 2] * w, y1 + off[:, 3] * h, prob[xs, ys]], 1)
    return boxes.astype(np.float32)


def square(box: tuple[float, ...]) -> tuple[float, float, float, float]:
    """The square around a box's centre with its longer side (MTCNN's rerec)."""
    x0, y0, x1, y1 = box[:4]
    side = max(x1 - x0, y1 - y0)
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    return cx - side / 2, cy - side / 2, cx + side / 2, cy + side / 2


def greedy_kv(
    step: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]],
    past: dict[str, np.ndarray],
    start: int,
    eos: int,
    max_len: int,
) -> tuple[list[int], dict[str, np.ndarray]]:
    """Greedy decoding with a merged transformer decoder and its KV cache (Optimum/transformers.js layout).

    `step(feeds)` runs the decoder on {input_ids, use_cache_branch, past_key_values.*} (plus whatever it closes over,
    e.g. encoder_hidden_states) and returns its outputs by name. Each step feeds one token; present.N.decoder.* come
    back as past_key_values.N.decoder.*, present.N.encoder.* (cross-attention, constant) only after the first step.
    Returns the token ids (`start` first) and the cache for the next step (past length = steps run, at eos one less).
    """
    past = dict(past)
    ids = [start]
    for i in range(max_len):
        out = step({"input_ids": np.array([[ids[-1]]], np.int64), "use_cache_branch": np.array([i > 0]), **past})
        ids.append(int(out["logits"][0, -1].argmax()))
        if ids[-1] == eos:
            break
        for name in past:
            if i == 0 or ".decoder." in name:
                past[name] = out[name.replace("past_key_values.", "present.", 1)]
    return ids, past


def greedy_full(
    step: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]],
    past: dict[str, np.ndarray],
    start: int,
    eos: int,
    max_len: int,
) -> list[int]:
    """The same greedy decoding without the cache: the whole prefix each step, use_cache_branch False, empty past."""
    ids = [start]
    for _ in range(max_len):
        out = step({"input_ids": np.array([ids], np.int64), "use_cache_branch": np.array([False]), **past})
        ids.append(int(out["logits"][0, -1].argmax()))
        if ids[-1] == eos:
            break
    return ids


def bpe_pieces(tokenizer_json: Path) -> dict[int, str]:
    """id -> piece of a Hugging Face tokenizer.json (model vocabulary and added tokens)."""
    doc = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    pieces = {int(i): str(p) for p, i in doc["model"]["vocab"].items()}
    pieces.update({int(t["id"]): str(t["content"]) for t in doc.get("added_tokens", [])})
    return pieces


def bpe_text(ids: list[int], pieces: dict[int, str], special: tuple[str, ...] = ("<s>", "</s>", "<unk>")) -> str:
    """SentencePiece-style detokenisation: '\u2581' is a space, <0xNN> pieces are raw bytes, specials dropped."""
    out = bytearray()
    for i in ids:
        piece = pieces.get(i, "")
        if piece in special:
            continue
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            out.append(int(piece[3:5], 16))
        else:
            out += piece.replace("\u2581", " ").encode("utf-8")
    return out.decode("utf-8", "replace").strip()

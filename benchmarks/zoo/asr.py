"""Smoke checks of the speech-to-text pair: Moonshine tiny's encoder and its transformer decoder with a KV cache.

The encoder turns 16 kHz speech into hidden states; the decoder writes the transcript one token a step, its
present.* fed back as past_key_values.* (decode.greedy_kv). The answers are transcripts of espeak-ng sentences,
and whether decoding without the cache (the whole prefix each step) gives the same tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import data as D
import decode as K
import numpy as np
import onnxruntime as ort
from fetch import Entry, fetch_all

SENTENCES = ("The quick brown fox jumps over the lazy dog.", "Edge devices run small models close to the camera.")
Run = Callable[..., list[np.ndarray]]


def encode(cache: Path, entry: Entry, audio: np.ndarray) -> np.ndarray:
    """encoder_hidden_states [1, T, 288] for `audio` (the catalogue's encoder, fetched if needed)."""
    path = fetch_all(cache, [entry.decoder["encoder"]])[entry.decoder["encoder"]]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"input_values": audio[None].astype(np.float32)})[0])


def stepper(run: Any, hidden: np.ndarray) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """One decoder call on `feeds` plus the encoder's hidden states, its outputs by name."""
    names = [o.name for o in run.session.get_outputs()]

    def step(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(names, run(encoder_hidden_states=hidden, **feeds), strict=True))

    return step


def moonshine_encoder(run: Run, e: Entry, cache: Path) -> str:
    res = []
    for text in SENTENCES:
        audio = D.speech(text)
        hidden = run(input_values=audio[None])[0]
        res.append(f"{len(audio) / 16000:.2f} s of speech -> {list(hidden.shape)} (std {hidden.std():.2f})")
    return "; ".join(res)


def moonshine_decoder(run: Run, e: Entry, cache: Path) -> str:
    d = e.decoder
    pieces = K.bpe_pieces(cache / "models" / f"{e.name}.extras" / "tokenizer.json")
    past = D.empty_past(e.raw["inputs"])
    res = []
    for n, text in enumerate(SENTENCES):
        audio = D.speech(text)
        step = stepper(run, encode(cache, e, audio))
        max_len = int(len(audio) / d["sample_rate"] * d["tokens_per_second"])
        ids, cache_out = K.greedy_kv(step, past, d["decoder_start"], d["eos"], max_len)
        length = cache_out["past_key_values.0.decoder.key"].shape[2]
        res.append(f"{text!r} -> {K.bpe_text(ids, pieces)!r} ({len(ids) - 1} steps, cache {length} long)")
        if n == 0:
            same = K.greedy_full(step, past, d["decoder_start"], d["eos"], max_len) == ids
            res.append(f"without the cache: {'same tokens' if same else 'DIFFERENT tokens'}")
    return "greedy with past_key_values: " + "; ".join(res)

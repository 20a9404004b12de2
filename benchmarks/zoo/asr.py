"""Smoke checks of the speech-to-text pair: Moonshine tiny's encoder and its transformer decoder with a KV cache.

The encoder turns 16 kHz speech into hidden states; the decoder writes the transcript one token a step, its
present.* fed back as past_key_values.* (decode.greedy_kv). The answers are transcripts of espeak-ng sentences,
and whether decoding without the cache (the whole prefix each step) gives the same tokens.

    python benchmarks/zoo/asr.py DIR    # writes the decoder's stream sequences for `edgekit build --stream`
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import data as D
import decode as K
import numpy as np
import onnxruntime as ort
from fetch import Entry, fetch_all, load_catalogue, zoo_dir

SENTENCES = ("The quick brown fox jumps over the lazy dog.", "Edge devices run small models close to the camera.")
STREAM_SENTENCES = (
    "Bundles are pushed over SSH, ADB or a serial line.",
    "Turn on the kitchen lights and open the window.",
)
Run = Callable[..., list[np.ndarray]]
Step = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


def encode(cache: Path, entry: Entry, audio: np.ndarray) -> np.ndarray:
    """encoder_hidden_states [1, T, 288] for `audio` (the catalogue's encoder, fetched if needed)."""
    path = fetch_all(cache, [entry.decoder["encoder"]])[entry.decoder["encoder"]]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"input_values": audio[None].astype(np.float32)})[0])


def stepper(
    call: Run, names: list[str], hidden: np.ndarray
) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """One decoder call (`call(**feeds)` -> outputs in `names` order) with the encoder's hidden states added."""

    def step(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(names, call(encoder_hidden_states=hidden, **feeds), strict=True))

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
    names = [o["name"] for o in e.raw["outputs"]]
    res = []
    for n, text in enumerate(SENTENCES):
        audio = D.speech(text)
        step = stepper(run, names, encode(cache, e, audio))
        max_len = int(len(audio) / d["sample_rate"] * d["tokens_per_second"])
        ids, cache_out = K.greedy_kv(step, past, d["decoder_start"], d["eos"], max_len)
        length = cache_out["past_key_values.0.decoder.key"].shape[2]
        res.append(f"{text!r} -> {K.bpe_text(ids, pieces)!r} ({len(ids) - 1} steps, cache {length} long)")
        if n == 0:
            same = K.greedy_full(step, past, d["decoder_start"], d["eos"], max_len) == ids
            res.append(f"without the cache: {'same tokens' if same else 'DIFFERENT tokens'}")
    return "greedy with past_key_values: " + "; ".join(res)


def write_sequences(cache: Path, out: Path, steps: int = 9, samples: int = 71015) -> list[Path]:
    """One .npz per sentence for `edgekit build --stream past_key_values.N.decoder.*=present.N.decoder.* --val DIR`.

    Each holds the decoder's steps after the first (docs/STREAMS.md): input_ids [steps, 1, 1] (the greedy tokens),
    and, the same at every step, encoder_hidden_states of the speech padded or cut to `samples` (183 frames for
    71015), use_cache_branch [True] and the first step's cross-attention present.N.encoder.*; the initial state
    past_key_values.N.decoder.* is the first step's present.N.decoder.* (length 1), so its length runs 1..steps.
    """
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for k, seq in enumerate(sequences(cache, SENTENCES + STREAM_SENTENCES, steps, samples)):
        written.append(out / f"{k:03d}.npz")
        np.savez(written[-1], **seq)  # type: ignore[arg-type]  # numpy's stub reads ** as allow_pickle
    return written


def sequences(cache: Path, texts: Sequence[str], steps: int = 9, samples: int = 71015) -> list[dict[str, np.ndarray]]:
    """The stream sequences of :func:`write_sequences`, one per text, as dicts of arrays."""
    entry = next(m for m in load_catalogue()[0] if m.name == "moonshine_tiny_decoder")
    path = fetch_all(cache, [entry.name])[entry.name]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    start, empty, out = entry.decoder["decoder_start"], D.empty_past(entry.raw["inputs"]), []
    for text in texts:
        hidden = encode(cache, entry, np.pad(D.speech(text), (0, samples))[:samples])
        step = stepper(lambda **feeds: session.run(None, feeds), names, hidden)
        ids, _ = K.greedy_kv(step, empty, start, -1, steps + 1)
        _, first = K.greedy_kv(step, empty, start, -1, 1)
        seq = {"input_ids": np.array(ids[1 : steps + 1], np.int64).reshape(steps, 1, 1), **first}
        seq |= {"encoder_hidden_states": hidden, "use_cache_branch": np.array([True])}
        out.append(seq)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write the KV-cache decoder's stream sequences for edgekit build")
    parser.add_argument("out", type=Path, help="folder for the .npz sequences")
    parser.add_argument("--cache", help="zoo cache folder (see fetch.py)")
    parser.add_argument("--steps", type=int, default=9)
    args = parser.parse_args(argv)
    for path in write_sequences(zoo_dir(args.cache), args.out, args.steps):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

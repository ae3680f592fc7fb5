"""Deterministic text corpora for the word-count example and the benchmark.

Words are drawn from a fixed vocabulary with Zipf-distributed frequencies (seeded), so every machine
generates the same bytes and results can be compared across runs.
"""
from __future__ import annotations

import itertools
import os
import random
import string

LINE_WORDS = 12


def vocabulary(size: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    words: set[str] = set()
    while len(words) < size:
        length = min(3 + int(rng.expovariate(0.35)), 14)
        words.add("".join(rng.choices(string.ascii_lowercase, k=length)))
    return sorted(words)


def generate(path: str, target_bytes: int, vocabulary_size: int = 50_000, seed: int = 42) -> str:
    """Writes ``path`` (if missing or of another size class) with about ``target_bytes`` of text."""
    if os.path.exists(path) and os.path.getsize(path) >= target_bytes:
        return path
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    words = vocabulary(vocabulary_size)
    rng = random.Random(seed)
    rng.shuffle(words)  # frequency rank independent of alphabetical order
    cum_weights = list(itertools.accumulate(1.0 / rank for rank in range(1, len(words) + 1)))
    tmp = f"{path}.tmp{os.getpid()}"
    written = 0
    with open(tmp, "w", encoding="utf-8") as out:
        while written < target_bytes:
            chunk = rng.choices(words, cum_weights=cum_weights, k=LINE_WORDS * 20_000)
            text = "\n".join(" ".join(chunk[i : i + LINE_WORDS]) for i in range(0, len(chunk), LINE_WORDS)) + "\n"
            out.write(text)
            written += len(text)
    os.replace(tmp, path)
    return path

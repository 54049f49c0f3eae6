"""Generated corpora of near-duplicate families for tests: a random base text and copies of it
with a few words or tokens replaced (each a pure function of the generator's state)."""

from __future__ import annotations

import random

import numpy as np


def word_families(rng: random.Random, words: list[str], families: int, copies: int, n: int, max_edits: int) -> list[str]:
    """``families`` texts of ``n`` words drawn from ``words``, each followed by ``copies`` copies
    with 0..``max_edits`` words replaced."""
    docs = []
    for _ in range(families):
        base = [rng.choice(words) for _ in range(n)]
        docs.append(" ".join(base))
        for _ in range(copies):
            d = list(base)
            for _ in range(rng.randrange(0, max_edits + 1)):
                d[rng.randrange(n)] = rng.choice(words)
            docs.append(" ".join(d))
    return docs


def token_variants(rng: np.random.Generator, count: int, max_edits: int, length: int = 300, vocab: int = 3000) -> list[str]:
    """``count`` variants of one random text of ``length`` tokens ``w0..w{vocab - 1}``, each with
    0..``max_edits`` tokens replaced (the base text itself is not among them)."""
    base = rng.integers(0, vocab, length)
    out = []
    for _ in range(count):
        t = base.copy()
        e = int(rng.integers(0, max_edits + 1))
        t[rng.integers(0, length, e)] = rng.integers(0, vocab, e)
        out.append(" ".join(f"w{x}" for x in t))
    return out


def unrelated_texts(rng: np.random.Generator, count: int, length: int) -> list[str]:
    """``count`` texts of ``length`` tokens from a vocabulary of 10^6: no two alike."""
    return [" ".join(f"u{x}" for x in rng.integers(0, 10**6, length)) for _ in range(count)]

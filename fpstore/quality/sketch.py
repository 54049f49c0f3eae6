"""Detection quality of a verified search: candidates from the 64-bit key, kept by a sketch.

A store finds candidate pairs with its index (fingerprints within ``k_c`` bits, or any of several
words within ``r`` bits) and keeps those whose *verification sketch* says they are similar enough.
A sketch is ``W`` 64-bit words of 1-bit MinHash values (``uint64[n, W]``); two documents whose
sketches differ in ``d`` of their ``64 W`` bits have the estimated Jaccard ``1 - 2 d / (64 W)``
(each bit agrees with probability ``(1 + J) / 2``).

These functions count, for such a search, true and false positives per verification threshold
θ against the exact truth of :func:`fpstore.quality.evaluate.truth_pairs`; the candidate pairs
must be among the truth's pairs (pass them as its ``extra_pairs``), so every candidate carries
its exact Jaccard. ``tools/eval_sketch.py`` is the command that runs them on a corpus.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fpstore.errors import InputError
from fpstore.fingerprint.pipeline import sketch_distance
from fpstore.quality.evaluate import Curve, Truth, close_pairs

__all__ = [
    "THETAS",
    "candidate_union",
    "estimated_jaccard",
    "label_pairs",
    "recall_ceiling",
    "sketch_distances",
    "unique_pairs",
    "verified_curve",
]

#: Verification thresholds reported by default: 0.50, 0.51, ..., 0.95.
THETAS: tuple[float, ...] = tuple(round(0.5 + 0.01 * i, 2) for i in range(46))


def _check_sketches(sketches: np.ndarray) -> np.ndarray:
    s = np.asarray(sketches)
    if s.dtype != np.uint64 or s.ndim != 2 or s.shape[1] < 1:
        raise InputError(f"sketches must be a uint64 array of shape (n, W >= 1), got {s.dtype} {s.shape}")
    return s


def sketch_distances(sketches: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """int64[m]: the Hamming distance of each pair's sketches, summed over the ``W`` words.

    ``sketches`` uint64[n, W]; ``pairs`` int[m, 2] of row indices. Raises :class:`InputError` for
    another dtype or shape.
    """
    s = _check_sketches(sketches)
    pairs = np.asarray(pairs, np.int64).reshape(-1, 2)
    if not len(pairs):
        return np.zeros(0, np.int64)
    return sketch_distance(s[pairs[:, 0]], s[pairs[:, 1]])


def estimated_jaccard(distance: np.ndarray, bits: int) -> np.ndarray:
    """float64: ``1 - 2 d / bits``, the Jaccard estimate of a sketch distance; unlike
    :func:`fpstore.fingerprint.pipeline.sketch_similarity` not clipped at 0 (no threshold reported here is below 0.5)."""
    if bits <= 0:
        raise InputError(f"bits must be positive, got {bits}")
    return 1.0 - 2.0 * np.asarray(distance, np.float64) / bits


def candidate_union(words: Sequence[np.ndarray], radius: int) -> np.ndarray:
    """int64[m, 2], sorted, unique, i < j: the pairs with any of ``words`` within ``radius`` bits.

    ``words`` are uint64[n] columns (the key, then sketch words): the candidates of an index of one
    Hamming table of radius ``radius`` per word. Exact (every pair of documents is compared).
    """
    if not words:
        raise InputError("candidate_union needs at least one word column")
    found = [close_pairs(np.asarray(w, np.uint64), radius)[0] for w in words]
    return unique_pairs(np.concatenate(found))


def unique_pairs(pairs: np.ndarray) -> np.ndarray:
    """Sorted unique rows of an int[m, 2] pair array (each row already i < j)."""
    pairs = np.asarray(pairs, np.int64).reshape(-1, 2)
    return np.unique(pairs, axis=0) if len(pairs) else pairs


def label_pairs(truth: Truth, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(jaccard float64[m], positive bool[m], byte-identical bool[m]) of ``pairs`` (i < j).

    Pairs that are not in ``truth.pairs`` have Jaccard below the threshold (the truth holds every
    pair at or above it): they get Jaccard ``nan``, negative, not identical. Pass every pair you
    label as ``extra_pairs`` to :func:`~fpstore.quality.evaluate.truth_pairs` to have their exact
    Jaccard instead.
    """
    pairs = np.asarray(pairs, np.int64).reshape(-1, 2)
    m = len(pairs)
    jac = np.full(m, np.nan)
    ident = np.zeros(m, bool)
    if m and len(truth.pairs):
        n = int(max(truth.pairs.max(), pairs.max())) + 1
        key = truth.pairs[:, 0] * n + truth.pairs[:, 1]
        order = np.argsort(key)
        skey = key[order]
        want = pairs[:, 0] * n + pairs[:, 1]
        pos = np.minimum(np.searchsorted(skey, want), len(skey) - 1)
        hit = skey[pos] == want
        jac[hit] = truth.jaccard[order][pos[hit]]
        ident[hit] = truth.identical[order][pos[hit]]
    positive = np.nan_to_num(jac, nan=-1.0) >= truth.threshold - 1e-12
    return jac, positive, ident


def verified_curve(
    name: str,
    truth: Truth,
    pairs: np.ndarray,
    estimate: np.ndarray,
    thetas: Sequence[float] = THETAS,
    bytes_per_doc: int = 0,
    skip_identical: bool = True,
) -> Curve:
    """Counts of a verified search per threshold θ: candidates ``pairs`` kept when ``estimate >= θ``.

    ``estimate`` float[m] is the sketch's Jaccard estimate of each candidate pair. Recall is over
    every positive pair of ``truth`` (byte-identical ones left out when ``skip_identical``), so a
    pair the candidate structure never finds counts as missed at every θ. The result is a
    similarity-valued :class:`~fpstore.quality.evaluate.Curve` (``ks`` are the θ).
    """
    pairs = np.asarray(pairs, np.int64).reshape(-1, 2)
    estimate = np.asarray(estimate, np.float64)
    if estimate.shape != (len(pairs),):
        raise InputError(f"estimate must have shape ({len(pairs)},), got {estimate.shape}")
    _, label, ident = label_pairs(truth, pairs)
    positives = truth.positives
    if skip_identical:
        keep = ~ident
        label, estimate = label[keep], estimate[keep]
        positives -= truth.positives_identical
    ths = [float(t) for t in thetas]
    # Rounding: an estimate equal to θ up to float error is kept.
    tp = [int(((estimate >= t - 1e-9) & label).sum()) for t in ths]
    fp = [int(((estimate >= t - 1e-9) & ~label).sum()) for t in ths]
    return Curve(name, ths, tp, fp, positives, bytes_per_doc, note="kept when the sketch's Jaccard estimate >= θ")


def recall_ceiling(truth: Truth, pairs: np.ndarray, skip_identical: bool = True) -> tuple[int, int]:
    """(positives among ``pairs``, all positives): what a verification of these candidates can reach."""
    _, label, ident = label_pairs(truth, pairs)
    if skip_identical:
        return int((label & ~ident).sum()), truth.positives - truth.positives_identical
    return int(label.sum()), truth.positives

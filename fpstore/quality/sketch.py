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
from dataclasses import dataclass
from typing import Any

import numpy as np

from fpstore.errors import InputError
from fpstore.fingerprint.pipeline import sketch_distance
from fpstore.quality.evaluate import Curve, Truth, close_pairs

__all__ = [
    "THETAS",
    "Verified",
    "candidate_union",
    "estimated_jaccard",
    "label_pairs",
    "recall_ceiling",
    "recommend_theta",
    "sketch_distances",
    "unique_pairs",
    "verified_curve",
    "verified_pairs_curve",
    "verified_search",
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


@dataclass
class Verified:
    """A verified search of one design measured on a corpus: candidates within ``candidate_k`` bits
    of the key, kept when the sketch of ``sketch_bits`` estimates at least θ (``curve.ks``).

    ``candidates`` counts the candidate pairs (byte-identical ones included, as a store meets them);
    ``ceiling`` the positive pairs among them (byte-identical ones left out when the curve leaves
    them out): the recall no θ can pass is ``ceiling / curve.positives``.
    """

    curve: Curve
    sketch_bits: int
    candidate_k: int
    candidates: int
    ceiling: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "sketch_bits": self.sketch_bits,
            "candidate_k": self.candidate_k,
            "candidates": self.candidates,
            "recall_ceiling": self.ceiling / self.curve.positives if self.curve.positives else 1.0,
            "curve": self.curve.to_dict(),
        }


def verified_search(
    name: str,
    truth: Truth,
    keys: np.ndarray,
    sketches: np.ndarray,
    candidate_k: int,
    thetas: Sequence[float] = THETAS,
    skip_identical: bool = True,
) -> Verified:
    """What a store of candidate radius ``candidate_k`` verifying with ``sketches`` answers, per θ.

    ``keys`` uint64[n] are the 64-bit fingerprints and ``sketches`` uint64[n, W] the sketches of the
    documents ``truth`` was computed on (same order). Every pair within ``candidate_k`` bits is a
    candidate (exact: all pairs are compared); it is kept at θ when ``1 - 2 d / (64 W) >= θ``, as a
    store keeps it. Candidates need not be among ``truth.pairs``: those that are not are negatives.
    Bytes per document: the key's 8 plus the sketch's ``8 W``. Raises :class:`InputError` for
    mismatched shapes or a ``candidate_k`` outside 0..64.
    """
    keys = np.asarray(keys, np.uint64)
    s = _check_sketches(sketches)
    if keys.ndim != 1 or len(keys) != len(s):
        raise InputError(f"keys must be uint64[{len(s)}] like the sketches' rows, got shape {keys.shape}")
    if not 0 <= candidate_k <= 64:
        raise InputError(f"candidate_k must be in 0..64, got {candidate_k}")
    bits = 64 * s.shape[1]
    pairs = close_pairs(keys, candidate_k)[0]
    est = estimated_jaccard(sketch_distances(s, pairs), bits)
    curve = verified_curve(name, truth, pairs, est, thetas, 8 + bits // 8, skip_identical)
    ceiling = recall_ceiling(truth, pairs, skip_identical)[0]
    return Verified(curve, bits, candidate_k, len(pairs), ceiling)


def verified_pairs_curve(
    name: str,
    key_distance: np.ndarray,
    sketch_distance: np.ndarray,
    bits: int,
    label: np.ndarray,
    candidate_k: int,
    thetas: Sequence[float] = THETAS,
) -> Verified:
    """:func:`verified_search` on labelled pairs: pair ``i`` is found when ``key_distance[i] <=
    candidate_k`` and kept at θ when ``1 - 2 sketch_distance[i] / bits >= θ``; ``label`` bool[m]
    says which pairs are near-duplicates."""
    kd = np.asarray(key_distance, np.int64)
    label = np.asarray(label, bool)
    if kd.shape != label.shape or np.shape(sketch_distance) != label.shape:
        raise InputError("key_distance, sketch_distance and label must have one entry per pair")
    found = kd <= candidate_k
    est = estimated_jaccard(sketch_distance, bits)
    ths = [float(t) for t in thetas]
    tp = [int((found & (est >= t - 1e-9) & label).sum()) for t in ths]
    fp = [int((found & (est >= t - 1e-9) & ~label).sum()) for t in ths]
    curve = Curve(name, ths, tp, fp, int(label.sum()), 8 + bits // 8, note="kept when the sketch's Jaccard estimate >= θ")
    return Verified(curve, bits, candidate_k, int(found.sum()), int((found & label).sum()))


def recommend_theta(curve: Curve, target_precision: float = 0.95) -> float | None:
    """The θ of the best F1 among those whose precision reaches ``target_precision`` and that keep
    at least one true pair (the smallest such θ on ties); None when no θ does."""
    ok = [(f, -t, t) for t, p, f, tp in zip(curve.ks, curve.precision, curve.f1, curve.tp) if p >= target_precision and tp > 0]
    return max(ok)[2] if ok else None

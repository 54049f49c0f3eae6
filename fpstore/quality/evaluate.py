"""Detection quality: precision, recall and F1 of a fingerprint per Hamming distance, on real data.

Two sources of truth:

* **Labelled pairs** (:func:`evaluate_pairs`): ``(text_a, text_b, is_near_duplicate)`` triples.
* **A corpus** (:func:`evaluate_corpus`): the truth is computed, exactly, from the documents
  themselves. Two documents are near-duplicates when the Jaccard similarity of their sets of word
  ``shingle``-grams (default 3, the v1 token rule) is at least ``threshold`` (default 0.8). The
  Jaccard of every pair that could reach the threshold is computed exactly: an inverted index over
  each set's *prefix* (its rarest ``|x| - ceil(t·|x|) + 1`` shingles, the classic prefix filter)
  finds every pair with ``J >= t``, provably, without sampling; the pairs that any fingerprint puts
  within the largest reported distance get their exact Jaccard too. Every other pair has
  ``J < t`` and a distance above the range, so it is a true negative at every reported k.
  Shingles are encoded exactly (token ids packed into 64 bits) when the vocabulary allows it, else
  hashed to 64 bits (then said in the report).

For each k in 0..``max_k`` a fingerprint that calls a pair a near-duplicate when the Hamming
distance ``d <= k`` gets precision ``TP/(TP+FP)``, recall ``TP/P`` and F1, both over all pairs and
with byte-identical pairs left out (identical raw inputs are found by a content hash in a store,
so the fingerprint tier is judged on the others). :func:`recommend_k` picks the largest k whose
precision meets a target. A MinHash reference (``datasketch``, 128 permutations over the same
shingles, judged by its estimated Jaccard at its own threshold) runs side by side when
``datasketch`` is installed. :func:`plot` draws precision and recall against k (needs matplotlib).

The truth text of a document is its ``truth`` field when the corpus gives one (for example the
source of an HTML page), else, for HTML, the visible text (:func:`fpstore.fingerprint.html.visible_text`: all
text outside scripts and styles, no main-content heuristics, so the truth does not depend on the
extractor under test), else the text itself.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import pathlib
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fpstore.errors import InputError
from fpstore.fingerprint import text as _text
from fpstore.mixing import fmix64_array

__all__ = [
    "Corpus",
    "Curve",
    "Report",
    "Truth",
    "evaluate_corpus",
    "evaluate_pairs",
    "format_table",
    "load_corpus",
    "minhash_reference",
    "plot",
    "recommend_k",
    "shingle_sets",
    "truth_pairs",
]

MAX_K = 16
_M64 = (1 << 64) - 1
Fingerprinter = Callable[[Sequence[str]], np.ndarray]


# -- corpus ---------------------------------------------------------------------------------------


@dataclass
class Corpus:
    """Documents to evaluate on: ``texts`` are what a crawler feeds (raw HTML or text)."""

    ids: list[str]
    texts: list[str]
    truth: list[str]
    formats: list[str]  # "html" or "text", as detected or declared

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, keep: Sequence[int]) -> Corpus:
        return Corpus(*([getattr(self, f.name)[i] for i in keep] for f in dataclasses.fields(self)))


_TEXT_SUFFIXES = {".txt", ".rst", ".md", ".text", ".html", ".htm", ".xhtml", ""}


def _truth_of(raw: str, fmt: str) -> str:
    if fmt != "html":
        return raw
    from fpstore.fingerprint import html

    return html.visible_text(raw)


def load_corpus(path: str | os.PathLike, *, limit: int | None = None) -> Corpus:
    """Read a corpus from a directory of text/HTML files or a JSONL file.

    A directory is walked recursively (sorted; hidden files and files over 16 MB skipped); files
    with a text or HTML suffix (``.txt .rst .md .html .htm .xhtml`` or none) are read as UTF-8
    (invalid bytes replaced). JSONL: one object per line with ``text`` and optionally ``id``,
    ``truth`` and ``format``. HTML is detected by :func:`fpstore.fingerprint.html.looks_like_html` unless
    declared. Raises :class:`InputError` for a missing path or an empty corpus.
    """
    from fpstore.fingerprint import html

    p = pathlib.Path(path)
    ids: list[str] = []
    texts: list[str] = []
    truth: list[str | None] = []
    formats: list[str | None] = []
    if p.is_dir():
        for root, dirs, files in os.walk(p):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            if limit is not None and len(texts) >= limit:
                break
            for name in sorted(files):
                f = pathlib.Path(root) / name
                if name.startswith(".") or f.suffix.lower() not in _TEXT_SUFFIXES or f.stat().st_size > 16 << 20:
                    continue
                ids.append(str(f.relative_to(p)))
                texts.append(f.read_bytes().decode("utf-8", errors="replace"))
                truth.append(None)
                formats.append(None)
                if limit is not None and len(texts) >= limit:
                    break
    elif p.is_file():
        with open(p, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                    raw = obj["text"]
                except (ValueError, KeyError, TypeError) as exc:
                    raise InputError(f"{p}:{lineno}: not a JSON object with a 'text' field ({exc})") from exc
                if not isinstance(raw, str):
                    raise InputError(f"{p}:{lineno}: 'text' must be a string")
                ids.append(str(obj.get("id", lineno)))
                texts.append(raw)
                truth.append(obj.get("truth"))
                formats.append(obj.get("format"))
                if limit is not None and len(texts) >= limit:
                    break
    else:
        raise InputError(f"{p}: no such file or directory")
    if not texts:
        raise InputError(f"{p}: no documents found")
    fmts = [f if f in ("html", "text") else ("html" if html.looks_like_html(t) else "text") for f, t in zip(formats, texts)]
    truths = [t if isinstance(t, str) else _truth_of(raw, f) for t, raw, f in zip(truth, texts, fmts)]
    return Corpus(ids, texts, truths, fmts)


# -- exact shingle sets and the truth ---------------------------------------------------------------


def _tokens(t: str) -> list[str]:
    from fpstore.fingerprint.pipeline import _fast_tokens

    return _fast_tokens(_text.normalize(t))


def _mix(x: np.ndarray) -> np.ndarray:
    return fmix64_array(x)


def shingle_sets(texts: Sequence[str], shingle: int = 3) -> tuple[list[np.ndarray], bool]:
    """Sorted unique uint64 shingle codes per text, and whether the codes are exact.

    Tokens are numbered by a vocabulary over all texts; a shingle of ``w`` token ids is packed into
    one uint64 when ``w * bits(vocabulary) <= 64`` (exact: equal codes mean equal shingles), else
    mixed into 64 bits (collisions possible, about n²/2^65). A text with 0 < n < w tokens has one
    shingle of all its tokens (as the kernels do); a text without tokens has an empty set.
    """
    vocab: dict[str, int] = {}
    seqs = []
    for t in texts:
        toks = _tokens(t)
        seqs.append(np.fromiter((vocab.setdefault(x, len(vocab) + 1) for x in toks), dtype=np.uint64, count=len(toks)))
    bits = max(1, (len(vocab) + 1).bit_length())
    exact = shingle * bits <= 64
    out = []
    for ids in seqs:
        n = len(ids)
        if n == 0:
            out.append(np.zeros(0, np.uint64))
            continue
        w = min(shingle, n)
        code = np.zeros(n - w + 1, np.uint64)
        for j in range(w):
            col = ids[j : n - w + 1 + j]
            if exact:
                code = (code << np.uint64(bits)) | col
            else:
                code = _mix(code ^ col) * np.uint64(0x9E3779B97F4A7C15) if j else _mix(col)
        if not exact and w < shingle:
            code ^= np.uint64(w)  # packed codes of w < shingle ids are below every full one already
        out.append(np.unique(code))
    return out, exact


@dataclass
class Truth:
    """Exact Jaccard of candidate pairs. ``pairs`` int64[m, 2] with i < j; ``jaccard`` float64[m]."""

    pairs: np.ndarray
    jaccard: np.ndarray
    threshold: float
    positives: int  # pairs with J >= threshold (all of them are in ``pairs``)
    identical: np.ndarray  # bool[m]: the two raw inputs are byte-identical
    positives_identical: int
    empty_docs: int
    exact_codes: bool
    seconds: float


def _intersections(sets: list[np.ndarray], pairs: np.ndarray) -> np.ndarray:
    out = np.empty(len(pairs), np.int64)
    for n, (i, j) in enumerate(pairs.tolist()):
        out[n] = len(np.intersect1d(sets[i], sets[j], assume_unique=True))
    return out


def truth_pairs(
    sets: list[np.ndarray], threshold: float, extra_pairs: np.ndarray | None = None, raw_digests: Sequence[bytes] | None = None
) -> Truth:
    """All pairs with Jaccard >= ``threshold`` (prefix filter, exact) plus ``extra_pairs``, with exact J.

    Empty sets take part in no pair.
    """
    if not 0 < threshold <= 1:
        raise InputError(f"threshold must be in (0, 1], got {threshold}")
    t0 = time.perf_counter()
    sizes = np.array([len(s) for s in sets], np.int64)
    allcodes = np.concatenate([s for s in sets if len(s)]) if sizes.any() else np.zeros(0, np.uint64)
    uniq, df = np.unique(allcodes, return_counts=True)
    # Global order: rarest first (ties by code), so prefixes hold the most selective shingles.
    order = np.lexsort((uniq, df))
    rank_of = np.empty(len(uniq), np.int64)
    rank_of[order] = np.arange(len(uniq))
    post_rank, post_doc = [], []
    for d, s in enumerate(sets):
        if not len(s):
            continue
        r = np.sort(rank_of[np.searchsorted(uniq, s)])
        p = len(s) - math.ceil(threshold * len(s) - 1e-9) + 1
        post_rank.append(r[:p])
        post_doc.append(np.full(p, d, np.int64))
    cand = [np.zeros((0, 2), np.int64)]
    if post_rank:
        pr, pd = np.concatenate(post_rank), np.concatenate(post_doc)
        o = np.lexsort((pd, pr))
        pr, pd = pr[o], pd[o]
        bounds = np.flatnonzero(np.diff(pr)) + 1
        starts = np.concatenate(([0], bounds))
        ends = np.concatenate((bounds, [len(pr)]))
        for a, b in zip(starts.tolist(), ends.tolist()):
            if b - a < 2:
                continue
            docs = pd[a:b]
            ii, jj = np.triu_indices(b - a, 1)
            cand.append(np.stack([docs[ii], docs[jj]], 1))
    if extra_pairs is not None and len(extra_pairs):
        cand.append(np.sort(np.asarray(extra_pairs, np.int64), axis=1))
    pairs = np.unique(np.concatenate(cand), axis=0)
    pairs = pairs[(pairs[:, 0] != pairs[:, 1]) & (sizes[pairs[:, 0]] > 0) & (sizes[pairs[:, 1]] > 0)]
    inter = _intersections(sets, pairs)
    union = sizes[pairs[:, 0]] + sizes[pairs[:, 1]] - inter
    jac = inter / union
    if raw_digests is not None and len(pairs):
        same = np.array([raw_digests[i] == raw_digests[j] for i, j in pairs.tolist()], bool)
    else:
        same = np.zeros(len(pairs), bool)
    pos = jac >= threshold - 1e-12
    return Truth(
        pairs, jac, threshold, int(pos.sum()), same, int((pos & same).sum()), int((sizes == 0).sum()), True, time.perf_counter() - t0
    )


# -- fingerprints and curves ---------------------------------------------------------------------------


def close_pairs(fps: np.ndarray, max_k: int = MAX_K, block: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """All pairs i < j with Hamming distance <= max_k: (pairs int64[m, 2], distances int64[m])."""
    fps = np.asarray(fps, np.uint64)
    n = len(fps)
    out_p, out_d = [np.zeros((0, 2), np.int64)], [np.zeros(0, np.int64)]
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        d = np.bitwise_count(fps[lo:hi, None] ^ fps[None, :]).astype(np.int64)
        i, j = np.nonzero(d <= max_k)
        keep = j > i + lo
        i, j = i[keep] + lo, j[keep]
        out_p.append(np.stack([i, j], 1))
        out_d.append(d[i - lo, j])
    return np.concatenate(out_p), np.concatenate(out_d)


def distances(fps: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    fps = np.asarray(fps, np.uint64)
    if not len(pairs):
        return np.zeros(0, np.int64)
    return np.bitwise_count(fps[pairs[:, 0]] ^ fps[pairs[:, 1]]).astype(np.int64)


@dataclass
class Curve:
    """Precision, recall and F1 of one method per threshold (``ks``), with counts.

    For Hamming methods a pair is called a near-duplicate when ``d <= k``; for a similarity-valued
    reference (MinHash) when ``estimate >= k`` (``ks`` are then similarity thresholds).
    """

    name: str
    ks: list[float]
    tp: list[int]
    fp: list[int]
    positives: int
    bytes_per_doc: int
    seconds: float = 0.0
    note: str = ""

    @property
    def precision(self) -> list[float]:
        return [t / (t + f) if t + f else 1.0 for t, f in zip(self.tp, self.fp)]

    @property
    def recall(self) -> list[float]:
        return [t / self.positives if self.positives else 1.0 for t in self.tp]

    @property
    def f1(self) -> list[float]:
        return [2 * p * r / (p + r) if p + r else 0.0 for p, r in zip(self.precision, self.recall)]

    def best(self) -> tuple[float, float]:
        """(k, F1) of the best F1 (the smallest such k on ties)."""
        f = self.f1
        i = int(np.argmax(f))
        return self.ks[i], f[i]

    def to_dict(self) -> dict[str, Any]:
        scalars = ("name", "positives", "bytes_per_doc", "seconds", "note")
        return {
            **{field: getattr(self, field) for field in scalars},
            "rows": [
                {"k": k, "tp": t, "fp": f, "precision": p, "recall": r, "f1": f1}
                for k, t, f, p, r, f1 in zip(self.ks, self.tp, self.fp, self.precision, self.recall, self.f1)
            ],
        }


def curve_from_distances(name: str, d: np.ndarray, label: np.ndarray, positives: int, max_k: int = MAX_K, bytes_per_doc: int = 8) -> Curve:
    """Counts per k from the distances of candidate pairs (all pairs with d <= max_k must be among them)."""
    ks: list[float] = list(range(max_k + 1))  # Hamming thresholds: the ints 0..max_k
    tp = [int(((d <= k) & label).sum()) for k in ks]
    fp = [int(((d <= k) & ~label).sum()) for k in ks]
    return Curve(name, ks, tp, fp, positives, bytes_per_doc)


def recommend_k(curve: Curve, target_precision: float = 0.95, max_k: float | None = None) -> float | None:
    """The largest k (at most ``max_k``) whose precision is at least ``target_precision`` (most
    recall at that precision).

    None when no k reaches it. For a similarity-valued curve, the smallest threshold that does.
    """
    ok = [
        k
        for k, p, t in zip(curve.ks, curve.precision, curve.tp)
        if p >= target_precision and t > 0 and (max_k is None or _is_similarity(curve) or k <= max_k)
    ]
    if not ok:
        return None
    return min(ok) if _is_similarity(curve) else max(ok)


def _is_similarity(curve: Curve) -> bool:
    return any(isinstance(k, float) and 0 < k < 1 for k in curve.ks)


# -- evaluation -------------------------------------------------------------------------------------------


@dataclass
class Report:
    """Everything :func:`evaluate_corpus` measured: curves with and without byte-identical pairs."""

    documents: int
    threshold: float
    shingle: int
    truth: Truth
    curves: list[Curve] = field(default_factory=list)  # byte-identical pairs left out
    curves_all: list[Curve] = field(default_factory=list)  # every pair
    reference: list[Curve] = field(default_factory=list)  # MinHash, identical pairs left out
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        t = self.truth
        return {
            "documents": self.documents,
            "threshold": self.threshold,
            "shingle": self.shingle,
            "truth": {
                "candidate_pairs": len(t.pairs),
                "positives": t.positives,
                "positives_byte_identical": t.positives_identical,
                "empty_documents": t.empty_docs,
                "seconds": t.seconds,
            },
            "without_identical": [c.to_dict() for c in self.curves],
            "all_pairs": [c.to_dict() for c in self.curves_all],
            "reference": [c.to_dict() for c in self.reference],
            "notes": self.notes,
        }


def _digest(t: str) -> bytes:
    return hashlib.blake2b(t.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def evaluate_corpus(
    corpus: Corpus,
    methods: dict[str, Fingerprinter],
    *,
    threshold: float = 0.8,
    shingle: int = 3,
    max_k: int = MAX_K,
    reference: bool = True,
    stage: Callable[[str], None] | None = None,
) -> Report:
    """Curves of each fingerprint method on ``corpus`` against the exact shingle-Jaccard truth.

    ``methods`` maps a name to a function ``texts -> uint64[n]`` (``Pipeline.fingerprint_many``
    qualifies); each gets the raw texts (HTML as given). Documents whose truth text has no token
    take part in no pair (counted in ``truth.empty_docs``). ``stage(what)`` is told what the
    evaluation starts on next (it may take minutes on a large corpus).
    """
    if not methods and not reference:
        raise InputError("nothing to evaluate: give at least one method or reference=True")
    say = stage or (lambda what: None)
    say(f"shingling {len(corpus):,} documents")
    sets, exact = shingle_sets(corpus.truth, shingle)
    fps = {}
    timing = {}
    extra = [np.zeros((0, 2), np.int64)]
    for name, fn in methods.items():
        say(f"fingerprinting {len(corpus):,} documents: {name}")
        t0 = time.perf_counter()
        fps[name] = np.asarray(fn(corpus.texts), np.uint64)
        timing[name] = time.perf_counter() - t0
        if fps[name].shape != (len(corpus),):
            raise InputError(f"method {name!r} returned shape {fps[name].shape}, expected ({len(corpus)},)")
        extra.append(close_pairs(fps[name], max_k)[0])
    digests = [_digest(t) for t in corpus.texts]
    say(f"computing the exact truth: Jaccard of every candidate pair at >= {threshold}")
    truth = truth_pairs(sets, threshold, np.concatenate(extra), digests)
    truth.exact_codes = exact
    label = truth.jaccard >= threshold - 1e-12
    rep = Report(len(corpus), threshold, shingle, truth)
    if not exact:
        rep.notes.append("shingle codes are 64-bit hashes (vocabulary too large to pack exactly)")
    keep = ~truth.identical
    for name in methods:
        d = distances(fps[name], truth.pairs)
        c = curve_from_distances(name, d[keep], label[keep], truth.positives - truth.positives_identical, max_k)
        c.seconds = timing[name]
        rep.curves.append(c)
        ca = curve_from_distances(name, d, label, truth.positives, max_k)
        ca.seconds = timing[name]
        rep.curves_all.append(ca)
    if reference:
        say("the 128-permutation MinHash reference (datasketch)")
        try:
            rep.reference.append(minhash_reference(sets, truth, threshold))
        except ImportError:
            rep.notes.append("MinHash reference skipped: pip install datasketch")
    return rep


def evaluate_pairs(pairs: Iterable[tuple[str, str, bool]], methods: dict[str, Fingerprinter], max_k: int = MAX_K) -> list[Curve]:
    """Curves of each method on labelled pairs ``(text_a, text_b, is_near_duplicate)``."""
    a: list[str] = []
    b: list[str] = []
    lab: list[bool] = []
    for i, item in enumerate(pairs):
        try:
            x, y, is_near = item
        except (TypeError, ValueError) as exc:
            raise InputError(f"pair {i} is not (text_a, text_b, label)") from exc
        a.append(x)
        b.append(y)
        lab.append(bool(is_near))
    if not lab:
        raise InputError("no labelled pairs")
    label = np.array(lab)
    curves = []
    for name, fn in methods.items():
        t0 = time.perf_counter()
        fa, fb = np.asarray(fn(a), np.uint64), np.asarray(fn(b), np.uint64)
        d = np.bitwise_count(fa ^ fb).astype(np.int64)
        c = curve_from_distances(name, d, label, int(label.sum()), max_k)
        c.seconds = time.perf_counter() - t0
        curves.append(c)
    return curves


def minhash_reference(
    sets: list[np.ndarray],
    truth: Truth,
    threshold: float,
    num_perm: int = 128,
    thresholds: Sequence[float] | None = None,
    skip_identical: bool = True,
) -> Curve:
    """datasketch MinHash over the same shingles, a pair called near-duplicate when its estimated
    Jaccard is >= a threshold; every pair of documents is compared (exact counts, no sampling).

    Each shingle code enters as a 32-bit value (fmix64 of the code, high half), datasketch's own
    permutations do the rest. 4 bytes per permutation: 512 bytes per document at 128.
    """
    from datasketch import MinHash

    t0 = time.perf_counter()
    n = len(sets)
    H = np.zeros((n, num_perm), np.uint32)
    for i, s in enumerate(sets):
        m = MinHash(num_perm=num_perm, seed=1, hashfunc=int)
        if len(s):
            m.update_batch((_mix(s) >> np.uint64(32)).tolist())
        H[i] = m.hashvalues
    thresholds = list(thresholds) if thresholds is not None else [round(x, 3) for x in np.arange(0.5, 1.0001, 0.025)]
    lo = min(thresholds)
    # Every pair with an estimate >= the lowest threshold, exactly (all pairs are compared).
    found_p, found_e = [], []
    empty = np.array([len(s) == 0 for s in sets])
    for i in range(n - 1):
        if empty[i]:
            continue
        eq = (H[i + 1 :] == H[i]).sum(1) / num_perm
        j = np.flatnonzero((eq >= lo) & ~empty[i + 1 :])
        if len(j):
            found_p.append(np.stack([np.full(len(j), i), j + i + 1], 1))
            found_e.append(eq[j])
    pairs = np.concatenate(found_p) if found_p else np.zeros((0, 2), np.int64)
    est = np.concatenate(found_e) if found_e else np.zeros(0)
    # Labels: pairs in the truth table carry exact J; any other pair has J < threshold (prefix filter).
    key = truth.pairs[:, 0] * n + truth.pairs[:, 1]
    order = np.argsort(key)
    pk = pairs[:, 0] * n + pairs[:, 1]
    pos = np.searchsorted(key[order], pk)
    pos = np.minimum(pos, max(len(key) - 1, 0))
    hit = key[order][pos] == pk if len(key) else np.zeros(len(pk), bool)
    jac = np.where(hit, truth.jaccard[order][pos] if len(key) else 0.0, 0.0)
    ident = np.where(hit, truth.identical[order][pos] if len(key) else False, False)
    label = jac >= threshold - 1e-12
    positives = truth.positives - (truth.positives_identical if skip_identical else 0)
    if skip_identical:
        label, est = label[~ident], est[~ident]
    tp = [int(((est >= t) & label).sum()) for t in thresholds]
    fp = [int(((est >= t) & ~label).sum()) for t in thresholds]
    return Curve(
        f"MinHash {num_perm} (datasketch)",
        thresholds,
        tp,
        fp,
        positives,
        4 * num_perm,
        time.perf_counter() - t0,
        "threshold on estimated Jaccard",
    )


# -- output ---------------------------------------------------------------------------------------------------


def format_table(curves: Sequence[Curve], metric: str = "f1", ks: Sequence[float] | None = None) -> str:
    """A Markdown table: one row per k, one column per curve, cells ``precision / recall / F1``."""
    ks = list(ks) if ks is not None else list(curves[0].ks) if curves else []
    head = "| k | " + " | ".join(c.name for c in curves) + " |"
    sep = "|---:|" + "---|" * len(curves)
    rows = [head, sep]
    for k in ks:
        cells = []
        for c in curves:
            if k in c.ks:
                i = c.ks.index(k)
                cells.append(f"{c.precision[i]:.3f} / {c.recall[i]:.3f} / **{c.f1[i]:.3f}**" if metric == "all" else f"{c.f1[i]:.3f}")
            else:
                cells.append("")
        rows.append(f"| {k} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def format_curve(c: Curve) -> str:
    """Markdown table of one curve: k, TP, FP, precision, recall, F1."""
    rows = [f"| {'k' if not _is_similarity(c) else 'J est >='} | TP | FP | precision | recall | F1 |", "|---:|---:|---:|---:|---:|---:|"]
    for k, t, f, p, r, f1 in zip(c.ks, c.tp, c.fp, c.precision, c.recall, c.f1):
        rows.append(f"| {k} | {t} | {f} | {p:.3f} | {r:.3f} | {f1:.3f} |")
    return "\n".join(rows)


def plot(
    curves: Sequence[Curve], path: str | os.PathLike, title: str = "", target_precision: float | None = None, metric: str = "pr"
) -> None:
    """Write a PNG of precision and recall (``metric="pr"``) or of F1 (``"f1"``) against k for each
    Hamming curve.

    Raises :class:`ImportError` with the install command when matplotlib is missing.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("plotting needs matplotlib: pip install 'fpstore[quality]' (or pip install matplotlib)") from exc
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for n, c in enumerate(x for x in curves if not _is_similarity(x)):
        col = colors[n % len(colors)]
        if metric == "f1":
            ax.plot(c.ks, c.f1, "-o", color=col, ms=3, label=c.name)
            continue
        ax.plot(c.ks, c.precision, "-o", color=col, ms=3, label=f"{c.name}: precision")
        ax.plot(c.ks, c.recall, "--s", color=col, ms=3, label=f"{c.name}: recall")
    if target_precision is not None and metric != "f1":
        ax.axhline(target_precision, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("k (Hamming distance)")
    ax.set_ylabel("F1" if metric == "f1" else "precision / recall")
    ax.set_ylim(0, 1.02)
    ax.set_xticks(range(0, MAX_K + 1, 2))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)

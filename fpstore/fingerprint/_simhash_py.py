"""Pure-Python twin of ``cext/_simhash_c.pyx``: the specification of both fingerprint kinds.

Every function here has a compiled counterpart with the same signature and the same results, bit
for bit; tests compare the two on generated text. The text reaching these functions is type checked
and decoded (:func:`fpstore.fingerprint.text.decode`), and in NFKC form unless ``nfkc`` asks them to
put it there (:func:`nfkc`: here with ``unicodedata``, in the compiled kernel from tables generated
from it). ``kind`` selects the
fingerprint: ``KIND_SIMHASH64`` (0, the default: SimHash scheme 1) or ``KIND_MINHASH1`` (1: 1-bit
one-permutation MinHash scheme 1). Token hashes, shingle hashes and the content digest are the
same for both.

SimHash scheme 1, for a text with token sequence t_0 .. t_{n-1} (the v1 token rule, via ``FOLD``):

* token hash: FNV-1a over the folded code points (each code point one 64-bit step), then the
  splitmix64 finaliser of (h XOR seed). FNV alone mixes its high bits poorly, and every bit votes.
* shingle hash of tokens t_i .. t_{i+w-1}: a = fmix(seed + GOLDEN); a = (a XOR th) * SHINGLE_MUL for
  each token hash in order; then fmix(a). Order-sensitive, and no string is built per shingle.
  A text with 0 < n < w tokens has one shingle made of all its tokens.
* weight of a shingle: 1 (``tf``: repetition counts), or the sum of its tokens' idf weights.
* counters: for each bit b, ones[b] += weight when bit b of the shingle hash is set; total += weight.
  Fingerprint bit b is 1 when 2 * ones[b] > total, i.e. when the signed counter is positive. A tied
  counter (0, common with an even number of shingles) takes bit b of fmix(sum of all shingle
  hashes mod 2^64): without it ties always gave 0 and bits were set only ~38% of the time for
  10-shingle texts. The sum keeps the tie-break independent of shingle order, like the counters.
* content digest: two independent multiplicative chains over the token hashes, finalised with the
  token count: a non-cryptographic 128-bit hash of the normalised token stream (exact-duplicate tier).

MinHash1 scheme 1 (64 one-bit MinHash values, one-permutation hashing with optimal densification;
Li and König's b-bit MinHash with b = 1, Li, Owen and Zhang's one-permutation hashing, Shrivastava's
optimal densification). Each distinct shingle counts once: repetition changes nothing.

* bins: shingle hash ``sh`` falls in bin ``sh >> 58`` (its top 6 bits); each bin keeps the
  smallest ``sh`` it received. Two texts agree on a bin's minimum with probability equal to the
  Jaccard similarity of their shingle sets (conditioned on the bin being non-empty for both).
* densification: an empty bin e copies the minimum of the first non-empty bin among the probes
  ``fmix(DENSIFY ^ seed ^ (e << 8 | a)) & 63`` for a = 0..63; if all 64 probes miss, the first
  non-empty bin after e, cyclically. The probes depend on e and the seed only, so two texts
  probe alike, which keeps the agreement probability near the Jaccard similarity for short texts.
* bit i of the fingerprint: the lowest bit of ``fmix(value_i + (i + 1) * GOLDEN)``. Equal minima
  give equal bits; different minima give equal bits half the time, so the expected Hamming
  distance is ``32 * (1 - J)``. The salt (i + 1) keeps bins that copied the same minimum from
  repeating one bit.
* a text without tokens has fingerprint 0.

The verification sketch of MinHash1 (``sketch`` given, W words, W <= 8): words come in pairs.
Pair p rehashes every shingle hash once, ``v = (sh ^ salt_p) * SKETCH_MUL; v ^= v >> 29`` with
``salt_p = fmix(seed ^ (SKETCH_SALT * (p + 1)))`` (one multiply suffices: sh is already mixed); word 2p takes the high 32 bits of v as the shingle's value, word 2p + 1
the low 32 bits (an odd W drops the last pair's low word). Each word is then built as the
fingerprint is, over 32-bit values: bin = the value's top 6 bits, each bin keeps its smallest
value, densification and bit salting use ``salt_p + (w & 1)`` in place of the seed. So every word is
a 64-bit one-bit MinHash of the same shingle set, independent of the fingerprint, and the total
Hamming distance d over W words estimates the Jaccard similarity as ``1 - 2 d / (64 W)``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from typing import Any

import numpy as np

from fpstore.mixing import M64, fmix64

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
GOLDEN = 0x9E3779B97F4A7C15
SHINGLE_MUL = 0xD6E8FEB86659FD93
DIGEST_A0 = 0x243F6A8885A308D3
DIGEST_B0 = 0x13198A2E03707344
DIGEST_MUL_A = 0xFF51AFD7ED558CCD
DIGEST_MUL_B = 0xC4CEB9FE1A85EC53
IDF_EMPTY = 0xFFFF
MAX_SHINGLE = 16
DENSIFY = 0x5851F42D4C957F2D
SKETCH_SALT = 0xA0761D6478BD642F
SKETCH_MUL = 0xE7037ED1A0B428DB
MAX_SKETCH_WORDS = 8
KIND_SIMHASH64 = 0
KIND_MINHASH1 = 1

_fold: np.ndarray | None = None
_fold_list: list[int] | None = None


def set_fold_table(fold: np.ndarray) -> None:
    """Install the uint32[0x110000] fold table (0 = separator) used by every later call."""
    global _fold, _fold_list
    _fold = fold
    _fold_list = fold.tolist()


_active: np.ndarray | None = None


def set_active_table(bits: np.ndarray) -> None:
    """Install the uint8[0x110000 // 8] bitset of NFKC-active code points (bit cp & 7 of byte cp >> 3)."""
    global _active
    if len(bits) != 0x110000 // 8:
        raise ValueError("active table must have 0x110000 // 8 bytes")
    _active = np.unpackbits(np.asarray(bits, dtype=np.uint8), bitorder="little").astype(bool)


def nfkc_active_runs(text: str) -> list[int]:
    """Flat list ``[start0, end0, start1, end1, ...]`` of the maximal runs of NFKC-active code
    points in ``text`` (see ``fpstore.fingerprint.text.nfkc``); empty for ASCII text."""
    if _active is None:
        raise RuntimeError("set_active_table() first")
    out: list[int] = []
    start = -1
    for i, ch in enumerate(text):
        if _active[ord(ch)]:
            if start < 0:
                start = i
        elif start >= 0:
            out += [start, i]
            start = -1
    if start >= 0:
        out += [start, len(text)]
    return out


def set_nfkc_tables(
    stage1: np.ndarray, stage2: np.ndarray, pool: np.ndarray, comp: np.ndarray, fallback: Callable[[str], str] | None = None
) -> None:
    """Accept the compiled kernel's NFKC tables (``fpstore.fingerprint._nfkc_pack``) and check their
    shapes as it does. This twin normalises with ``unicodedata`` and reads none of them: the tables
    are generated from it, and the tests check that both give the same results."""
    if fallback is not None and not callable(fallback):
        raise TypeError("fallback must be None or a function str -> str")
    if len(stage1) != 0x110000 >> 7:
        raise ValueError("stage1 must have 0x110000 >> 7 entries")
    if not len(stage2) or len(stage2) % 128:
        raise ValueError("stage2 must hold whole blocks of 128 records")
    if int(np.max(stage1)) >= len(stage2) // 128:
        raise ValueError(f"stage1 names block {int(np.max(stage1))} of {len(stage2) // 128}")
    if len(comp) < 2 or len(comp) & (len(comp) - 1):
        raise ValueError("comp must have a power-of-two number of slots")
    if np.all(np.asarray(comp) != 0):
        raise ValueError("comp must have an empty slot (a lookup stops at one)")


def nfkc(text: str) -> str:
    """``unicodedata.normalize("NFKC", text)``, applied to the active runs only (see
    ``fpstore.fingerprint.text.nfkc``); ``text`` itself when no run changes."""
    if text.isascii():
        return text
    runs = nfkc_active_runs(text)
    if not runs or unicodedata.is_normalized("NFKC", text):
        return text
    if len(runs) > len(text) // 32:  # dense: one call beats a call per run
        return unicodedata.normalize("NFKC", text)
    parts: list[str] = []
    last = 0
    for j in range(0, len(runs), 2):
        start = runs[j] - 1 if runs[j] > 0 else 0
        parts.append(text[last:start])
        parts.append(unicodedata.normalize("NFKC", text[start : runs[j + 1]]))
        last = runs[j + 1]
    parts.append(text[last:])
    return "".join(parts)


_nfkc = nfkc  # fingerprint()'s parameter of that name hides the function


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & M64


def idf_lookup(idf: Any, token_hash: int) -> int:
    """Weight of a token in an open-addressing idf table ``(keys, weights, default)``.

    ``keys`` uint64[cap] and ``weights`` uint16[cap], cap a power of two; slot = hash & (cap - 1),
    linear probing; a weight of 0xFFFF marks an empty slot. Unknown tokens weigh ``default``.
    """
    keys, weights, default = idf
    mask = len(keys) - 1
    slot = token_hash & mask
    while True:
        w = int(weights[slot])
        if w == IDF_EMPTY:
            return default
        if int(keys[slot]) == token_hash:
            return w
        slot = (slot + 1) & mask


def _token_hashes(text: str, seed: int) -> list[int]:
    assert _fold_list is not None, "set_fold_table() first"
    fold = _fold_list
    out: list[int] = []
    h = FNV_OFFSET
    in_token = False
    for ch in text:
        cp = fold[ord(ch)]
        if cp:
            h = ((h ^ cp) * FNV_PRIME) & M64
            in_token = True
        elif in_token:
            out.append(fmix64(h ^ seed))
            h = FNV_OFFSET
            in_token = False
    if in_token:
        out.append(fmix64(h ^ seed))
    return out


def minhash1_bits(mins: list[int], filled: int, seed: int) -> int:
    """The 64-bit fingerprint from per-bin minima (``filled`` has bit b set when bin b got a shingle)."""
    if not filled:
        return 0
    fp = 0
    for i in range(64):
        j = i
        if not (filled >> i) & 1:
            j = -1
            for a in range(64):
                p = fmix64(DENSIFY ^ seed ^ ((i << 8) | a)) & 63
                if (filled >> p) & 1:
                    j = p
                    break
            if j < 0:
                j = (i + 1) & 63
                while not (filled >> j) & 1:
                    j = (j + 1) & 63
        fp |= (fmix64((mins[j] + (i + 1) * GOLDEN) & M64) & 1) << i
    return fp


def sketch_salt(seed: int, p: int) -> int:
    """The salt of sketch word pair ``p`` (0-based): every shingle hash is rehashed with it."""
    return fmix64(seed ^ ((SKETCH_SALT * (p + 1)) & M64))


def _sketch_width(out: np.ndarray | None, kind: int) -> int:
    width = 0 if out is None else int(out.shape[-1])
    if width and kind != KIND_MINHASH1:
        raise ValueError("a sketch is made by kind 1 (MinHash1) only")
    if width > MAX_SKETCH_WORDS:
        raise ValueError(f"a sketch has at most {MAX_SKETCH_WORDS} words")
    return width


def _digests(th: list[int], seed: int) -> tuple[int, int]:
    n = len(th)
    da = DIGEST_A0 ^ seed
    db = DIGEST_B0 ^ seed
    for t in th:
        da = ((_rotl(da, 23) ^ t) * DIGEST_MUL_A) & M64
        db = (((db + t) & M64) * DIGEST_MUL_B) & M64
        db ^= db >> 29
    return fmix64(da ^ n), fmix64((db + n * GOLDEN) & M64)


def fingerprint(
    text: str, seed: int, shingle: int, idf: Any, kind: int = KIND_SIMHASH64, nfkc: bool = False, sketch: np.ndarray | None = None
) -> tuple[int, int, int, int]:
    """Return ``(fingerprint, token_count, digest_a, digest_b)`` of a normalised text, or with
    ``nfkc`` of a text normalised here; with ``sketch`` (a uint64 array, kind 1), fill its words
    with the verification sketch.

    ``seed`` is a uint64, ``shingle`` in 1..16, ``idf`` None (tf weighting) or an idf table (SimHash
    only: MinHash1 ignores it), ``kind`` ``KIND_SIMHASH64`` or ``KIND_MINHASH1``.
    """
    words = _sketch_width(sketch, kind)
    if nfkc:
        text = _nfkc(text)
    th = _token_hashes(text, seed)
    n = len(th)
    start = fmix64((seed + GOLDEN) & M64)
    windows = n - shingle + 1 if n >= shingle else (1 if n else 0)
    if kind == KIND_MINHASH1:
        mins = [0] * 64
        filled = 0
        salts = [sketch_salt(seed, p) for p in range((words + 1) // 2)]
        smins = [[1 << 32] * 64 for _ in range(2 * len(salts))]
        sfilled = [0] * (2 * len(salts))
        for i in range(windows):
            a = start
            for t in th[i : i + shingle]:
                a = ((a ^ t) * SHINGLE_MUL) & M64
            sh = fmix64(a)
            b = sh >> 58
            if not (filled >> b) & 1 or sh < mins[b]:
                mins[b] = sh
                filled |= 1 << b
            for p, salt in enumerate(salts):
                v = ((sh ^ salt) * SKETCH_MUL) & M64
                v ^= v >> 29
                for w, value in ((2 * p, v >> 32), (2 * p + 1, v & 0xFFFFFFFF)):
                    b = value >> 26
                    smins[w][b] = min(smins[w][b], value)
                    sfilled[w] |= 1 << b
        for w in range(words):
            assert sketch is not None
            sketch[w] = minhash1_bits(smins[w], sfilled[w], (salts[w // 2] + (w & 1)) & M64)
        return (minhash1_bits(mins, filled, seed), n, *_digests(th, seed))
    if kind != KIND_SIMHASH64:
        raise ValueError(f"unknown fingerprint kind {kind}")
    ones = [0] * 64
    total = 0
    shingle_sum = 0
    for i in range(windows):
        a = start
        weight = 0
        for t in th[i : i + shingle]:
            a = ((a ^ t) * SHINGLE_MUL) & M64
            if idf is not None:
                weight += idf_lookup(idf, t)
        if idf is None:
            weight = 1
        sh = fmix64(a)
        shingle_sum = (shingle_sum + sh) & M64
        total += weight
        for b in range(64):
            if (sh >> b) & 1:
                ones[b] += weight
    tie_break = fmix64(shingle_sum)
    fp = 0
    for b in range(64):
        if 2 * ones[b] > total or (2 * ones[b] == total and (tie_break >> b) & 1):
            fp |= 1 << b
    return (fp, n, *_digests(th, seed))


def fingerprint_batch(
    texts: list[str],
    lo: int,
    hi: int,
    seed: int,
    shingle: int,
    idf: Any,
    out_fp: np.ndarray,
    out_tokens: np.ndarray,
    out_digest: np.ndarray,
    kind: int = KIND_SIMHASH64,
    nfkc: bool = False,
    out_sketch: np.ndarray | None = None,
) -> None:
    """Fill ``out_fp[i]``, ``out_tokens[i]`` and ``out_digest[i, 0:2]`` for ``texts[lo:hi]``, with
    ``nfkc`` normalising each text first, and with ``out_sketch`` (kind 1) its row i with text i's
    verification sketch."""
    words = _sketch_width(out_sketch, kind)
    for i in range(lo, hi):
        fp, n, da, db = fingerprint(texts[i], seed, shingle, idf, kind, nfkc, None if not words or out_sketch is None else out_sketch[i])
        out_fp[i] = fp
        out_tokens[i] = n
        out_digest[i, 0] = da
        out_digest[i, 1] = db

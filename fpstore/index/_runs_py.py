"""Pure-Python/numpy twin of ``cext/_runs_c.pyx``: the specification of the run block codec.

Every function here has a compiled counterpart with the same signature and the same results, bit
for bit, error codes included; tests compare the two on generated and on hostile input. Framing,
the block index and validation live in :mod:`fpstore.index.runs`; these functions only run the loops.

Block format (format version 1). A block holds ``n`` (1..65535) sorted uint64 keys ``x_0 <= .. <=
x_{n-1}``. Its first key ``x_0`` lives in the run index, not in the block. The ``m = n - 1`` gaps
``g_i = x_{i+1} - x_i`` are Rice coded with one parameter ``k`` (0..63) per block::

    byte 0                      k
    bytes 1 .. R                remainders: g_i & (2**k - 1), k bits each, i = 0..m-1,
                                R = ceil(m * k / 8) bytes
    bytes R+1 .. end            quotients, unary: for each i, (g_i >> k) zero bits then a one bit;
                                ceil((m + sum(g_i >> k)) / 8) bytes, padding bits zero

Bit streams are little-endian: bit ``j`` of a section is bit ``j % 8`` of its byte ``j // 8``, and
a k-bit value is stored least significant bit first. A block of one key (``m = 0``) is the single
byte 0. The encoder chooses ``k`` by exact cost: with ``k0 = floor(log2(floor(U / m)))`` (0 when
``U < m``), ``U = x_{n-1} - x_0``, it takes the ``k`` in ``max(0, k0-2) .. min(63, k0+1)`` that
minimises ``m * (k + 1) + sum(g_i >> k)`` bits, the smallest on a tie. Outside that window the
cost only grows, and inside it a block never exceeds ``1 + (66 * m + 14) // 8`` bytes
(:func:`fpstore.index.runs.max_block_bytes`).

A decoder is given the block's byte range ``[start, end)``, ``n``, its first key and an upper
bound ``limit`` (the next block's first key, or the run's last key), and checks, in this order,
returning the first failure:

1. ``1 <= n <= 65535`` and the output has room for ``n`` keys, else ``ERR_COUNT``;
2. ``0 <= start < end <= len(buf)``, else ``ERR_BOUNDS``;
3. ``first <= limit``, else ``ERR_RANGE``;
4. ``k <= 63``, else ``ERR_PARAM``;
5. ``m <= 8 * (end - start - 1)`` (each gap needs at least one unary bit), else ``ERR_SHORT``;
6. the remainder section fits: ``start + 1 + R <= end``, else ``ERR_SHORT``;
7. with ``m = 0``: nothing follows the header, else ``ERR_TRAILING``;
8. gap by gap, in order: a gap that would take a key above ``limit`` gives ``ERR_RANGE``; running
   out of unary terminators before the ``m``-th gives ``ERR_SHORT``;
9. after the ``m``-th terminator no bit is set, and it sits in the section's last byte, else
   ``ERR_TRAILING`` (so every accepted block has exactly one encoding for its ``k``).

Keys therefore come out sorted and within ``[first, limit]`` whatever the bytes were.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "ERR_BOUNDS",
    "ERR_COUNT",
    "ERR_PARAM",
    "ERR_RANGE",
    "ERR_SHORT",
    "ERR_TRAILING",
    "ERR_UNSORTED",
    "MAX_BLOCK_ENTRIES",
    "OK",
    "decode_blocks",
    "encode_chunk",
    "probe_chunk",
    "probe_chunks",
]

OK = 0
ERR_COUNT = 1  # entry count outside 1..65535, or more entries than the output holds
ERR_BOUNDS = 2  # block byte range empty or outside the buffer
ERR_RANGE = 3  # a key above the block's upper bound (or first key above it)
ERR_PARAM = 4  # Rice parameter above 63
ERR_SHORT = 5  # a section runs past the block's end
ERR_TRAILING = 6  # bytes or bits after the last unary terminator
ERR_UNSORTED = 7  # encoder input not sorted ascending

MAX_BLOCK_ENTRIES = 65535

_U64 = np.uint64
_EMPTY_U8 = np.zeros(0, np.uint8)


# ----------------------------------------------------------------------------------------- encode


def _rice_parameter(gaps: np.ndarray, span: int) -> tuple[int, int]:
    """(k, sum(gaps >> k)) for the block's gaps: the cheapest k of the window around log2(mean)."""
    m = len(gaps)
    mean = span // m
    k0 = mean.bit_length() - 1 if mean else 0
    best_k, best_cost, best_sq = -1, 0, 0
    for k in range(max(0, k0 - 2), min(63, k0 + 1) + 1):
        sq = int(np.sum(gaps >> _U64(k), dtype=_U64))
        cost = m * (k + 1) + sq
        if best_k < 0 or cost < best_cost:
            best_k, best_cost, best_sq = k, cost, sq
    return best_k, best_sq


def _encode_block(block: np.ndarray) -> bytes:
    """The bytes of one block of sorted keys (its first key is stored in the index, not here)."""
    m = len(block) - 1
    if m == 0:
        return b"\x00"
    gaps = np.diff(block)
    k, sq = _rice_parameter(gaps, int(block[-1]) - int(block[0]))
    parts = [bytes([k])]
    if k:
        rem = gaps & _U64((1 << k) - 1)
        bits = ((rem[:, None] >> np.arange(k, dtype=_U64)) & _U64(1)).astype(np.uint8).ravel()
        parts.append(np.packbits(bits, bitorder="little").tobytes())
    unary = np.zeros(m + sq, np.uint8)
    unary[np.cumsum((gaps >> _U64(k)) + _U64(1)) - _U64(1)] = 1
    parts.append(np.packbits(unary, bitorder="little").tobytes())
    return b"".join(parts)


def encode_chunk(keys: np.ndarray, block_entries: int, first_block: int, out: np.ndarray, offsets: np.ndarray) -> tuple[int, int, int]:
    """Encode whole blocks ``first_block, first_block + 1, ..`` of ``keys`` into ``out``.

    Block ``b`` holds ``keys[b * block_entries : (b + 1) * block_entries]``. Blocks are written back
    to back from ``out[0]`` for as long as the next one fits in ``len(out)``; block ``b``'s start
    byte goes to ``offsets[b]``. Every adjacent pair of keys touched (including the one across
    ``first_block``'s start) is checked: a descent stops with ``ERR_UNSORTED`` before that block.

    Returns ``(err, blocks_written, bytes_used)``; nothing is written past ``bytes_used``.
    """
    n = len(keys)
    bsz = int(block_entries)
    if not 1 <= bsz <= MAX_BLOCK_ENTRIES:
        raise ValueError("block_entries must be in 1..65535")
    nblocks = -(-n // bsz)
    if first_block < 0 or len(offsets) < nblocks:
        raise ValueError("first_block negative or offsets too short")
    cap = len(out)
    pos = 0
    b = first_block
    while b < nblocks:
        s = b * bsz
        block = keys[s : min(n, s + bsz)]
        if (s > 0 and keys[s - 1] > keys[s]) or bool(np.any(block[1:] < block[:-1])):
            return ERR_UNSORTED, b - first_block, pos
        data = _encode_block(block)
        if len(data) > cap - pos:
            break
        out[pos : pos + len(data)] = np.frombuffer(data, np.uint8)
        offsets[b] = pos
        pos += len(data)
        b += 1
    return OK, b - first_block, pos


# ----------------------------------------------------------------------------------------- decode


def _decode_block(buf: np.ndarray, start: int, end: int, n: int, first: int, limit: int) -> tuple[int, np.ndarray]:
    """(err, keys) for one block; checks 2..9 of the module docstring (the caller did check 1)."""
    if not 0 <= start < end <= len(buf):
        return ERR_BOUNDS, _EMPTY_U8
    if first > limit:
        return ERR_RANGE, _EMPTY_U8
    k = int(buf[start])
    if k > 63:
        return ERR_PARAM, _EMPTY_U8
    m = n - 1
    if m > 8 * (end - start - 1):
        return ERR_SHORT, _EMPTY_U8
    rs = start + 1
    us = rs + (m * k + 7) // 8
    if us > end:
        return ERR_SHORT, _EMPTY_U8
    if m == 0:
        return (OK if us == end else ERR_TRAILING), np.array([first], _U64)
    ones = np.flatnonzero(np.unpackbits(buf[us:end], bitorder="little"))
    c = min(len(ones), m)
    q = np.diff(ones[:c], prepend=-1).astype(_U64) - _U64(1)
    if k:
        rbits = np.unpackbits(buf[rs:us], bitorder="little")[: c * k].reshape(c, k).astype(_U64)
        r = np.sum(rbits << np.arange(k, dtype=_U64), axis=1, dtype=_U64)
    else:
        r = np.zeros(c, _U64)
    span = limit - first
    # First gap that takes the key above limit. cs wraps modulo 2**64; up to the first violation
    # it is exact, and at the violation either the quotient alone is too big, the sum wrapped,
    # or it exceeds span.
    with np.errstate(over="ignore"):
        g = (q << _U64(k)) | r
        cs = np.cumsum(g, dtype=_U64)
    bad = q > _U64(span >> k)
    bad |= cs > _U64(span)
    bad[1:] |= cs[1:] < cs[:-1]
    if bad.any():
        return ERR_RANGE, _EMPTY_U8
    if len(ones) < m:
        return ERR_SHORT, _EMPTY_U8
    if len(ones) > m or ones[m - 1] // 8 != end - us - 1:
        return ERR_TRAILING, _EMPTY_U8
    keys = np.empty(n, _U64)
    keys[0] = first
    keys[1:] = cs + _U64(first)
    return OK, keys


def use_unchecked_loops(on: bool) -> bool:
    """The compiled twin's switch between its decoding loops (for tests: those that check the
    sum of a block's gaps once, or only those that check each gap). This twin has the second kind
    only, so the switch changes nothing; returns False, the setting it always has."""
    return False


def use_wide_decode(on: bool) -> bool:
    """The compiled twin's switch between decoding a block's remainders eight at a time (AVX-512)
    or one at a time (for tests). This twin decodes one gap at a time whatever the setting;
    returns False, the setting it always has."""
    return False


def use_vector_probe(on: bool) -> bool:
    """The compiled twin's switch between scanning a probed block eight entries at a time
    (AVX-512) or one at a time (for tests). This twin decodes a block with numpy whatever the
    setting; returns False, the setting it always has."""
    return False


def use_vector_compare(level: int) -> int:
    """The compiled twin's choice of how a key is compared with a group of queries (0 one at a
    time, 1 AVX2, 2 AVX-512; for tests). This twin compares with numpy whatever the level;
    returns 0, the level it always has."""
    return 0


def decode_blocks(
    buf: bytes | memoryview | np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    counts: np.ndarray,
    bounds: np.ndarray,
    out: np.ndarray,
) -> tuple[int, int]:
    """Decode blocks ``j = 0 .. len(starts) - 1`` of chunk ``buf`` into ``out``, back to back.

    Block ``j`` occupies ``buf[starts[j]:ends[j]]``, holds ``counts[j]`` keys, starts with key
    ``bounds[j]`` and ends at or below ``bounds[j + 1]`` (so ``len(bounds) == len(starts) + 1``).
    Returns ``(OK, -1)``, or ``(err, j)`` for the first block that fails; ``out`` is then partly
    written.
    """
    b8 = np.frombuffer(buf, np.uint8)
    nb = len(starts)
    if len(ends) != nb or len(counts) != nb or len(bounds) != nb + 1:
        raise ValueError("starts, ends, counts and bounds disagree in length")
    pos = 0
    for j in range(nb):
        n = int(counts[j])
        if n < 1 or n > MAX_BLOCK_ENTRIES or n > len(out) - pos:
            return ERR_COUNT, j
        err, keys = _decode_block(b8, int(starts[j]), int(ends[j]), n, int(bounds[j]), int(bounds[j + 1]))
        if err:
            return err, j
        out[pos : pos + n] = keys
        pos += n
    return OK, -1


# ------------------------------------------------------------------------------------ batch probe


def _no_hits() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros(0, np.int64), np.zeros(0, _U64), np.zeros(0, np.uint8)


def _popcount(x: np.ndarray) -> np.ndarray:
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(x).astype(np.uint8)
    x = x - ((x >> _U64(1)) & _U64(0x5555555555555555))  # pragma: no cover - numpy < 2
    x = (x & _U64(0x3333333333333333)) + ((x >> _U64(2)) & _U64(0x3333333333333333))
    x = (x + (x >> _U64(4))) & _U64(0x0F0F0F0F0F0F0F0F)
    return ((x * _U64(0x0101010101010101)) >> _U64(56)).astype(np.uint8)


def probe_chunk(
    buf: bytes | memoryview | np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    counts: np.ndarray,
    bounds: np.ndarray,
    queries: np.ndarray,
    mask_hi: int,
    k: int,
    positions: bool = False,
) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray]:
    """Batch probe of one chunk: sorted ``queries`` against the chunk's keys, by shared prefix.

    Blocks are described as for :func:`decode_blocks`. A query ``q`` and a stored key ``s`` pair
    up when ``(q ^ s) & mask_hi == 0`` (same prefix) and ``popcount(q ^ s) <= k``. ``queries``
    must be sorted ascending; ``mask_hi`` must be a prefix mask (its set bits the top ones).

    Only the blocks that can hold a key of some query's prefix range ``[lo, hi]`` are decoded:
    block ``j`` when ``bounds[j] <= hi`` and ``bounds[j + 1] >= lo`` for some query, in ascending
    order. Every count is first checked to be in 1..65535 (``ERR_COUNT``).

    Returns ``(err, j, qpos, keys, dist)``: ``err`` and the failing block ``j`` as for
    :func:`decode_blocks` (the arrays are then empty); otherwise one row per pair, ``qpos`` the
    query's position in ``queries`` (int64), ``keys`` the stored key (uint64), ``dist`` the
    distance (uint8), ordered by stored key position, then by query position. With
    ``positions``, ``keys`` holds the stored key's position in the chunk (entries counted from
    the chunk's first block) instead of the key.
    """
    b8 = np.frombuffer(buf, np.uint8)
    nb = len(starts)
    if len(ends) != nb or len(counts) != nb or len(bounds) != nb + 1:
        raise ValueError("starts, ends, counts and bounds disagree in length")
    for j in range(nb):
        if not 1 <= int(counts[j]) <= MAX_BLOCK_ENTRIES:
            return ERR_COUNT, j, *_no_hits()
    if nb == 0 or len(queries) == 0:
        return OK, -1, *_no_hits()
    estart = np.concatenate([[0], np.cumsum(counts.astype(np.int64))])
    err, j, keys, where = _decode_needed(b8, starts, ends, counts, bounds, estart, [(queries, _U64(mask_hi))])
    if err:
        return err, j, *_no_hits()
    qidx, kidx, dist = _join(keys, queries, _U64(mask_hi), k)
    return OK, -1, qidx, where[kidx].astype(_U64) if positions else keys[kidx], dist


def _needed(bounds: np.ndarray, queries: np.ndarray, mask: np.uint64) -> np.ndarray:
    """Which blocks can hold a key of some query's prefix range ``[lo, hi]``: block ``j`` when
    the first range whose hi reaches ``bounds[j]`` starts at or below ``bounds[j + 1]``."""
    glo = np.unique(queries & mask)
    ghi = glo | ~mask
    g1 = np.searchsorted(ghi, bounds[:-1], side="left")
    needed = g1 < len(glo)
    needed[needed] = glo[g1[needed]] <= bounds[1:][needed]
    return needed


def _decode_needed(
    b8: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    counts: np.ndarray,
    bounds: np.ndarray,
    estart: np.ndarray,
    streams: list[tuple[np.ndarray, np.uint64]],
) -> tuple[int, int, np.ndarray, np.ndarray]:
    """Decode, in ascending order, the blocks some stream's ranges need; returns ``(err, j, keys,
    positions)``, the keys back to back and each one's position (``estart`` of its block on)."""
    needed = np.zeros(len(starts), dtype=bool)
    for queries, mask in streams:
        if len(queries):
            needed |= _needed(bounds, queries, mask)
    parts, where = [], []
    for j in np.flatnonzero(needed).tolist():
        err, keys = _decode_block(b8, int(starts[j]), int(ends[j]), int(counts[j]), int(bounds[j]), int(bounds[j + 1]))
        if err:
            return err, j, np.zeros(0, _U64), np.zeros(0, np.int64)
        parts.append(keys)
        where.append(np.arange(estart[j], estart[j + 1], dtype=np.int64))
    if not parts:
        return OK, -1, np.zeros(0, _U64), np.zeros(0, np.int64)
    return OK, -1, np.concatenate(parts), np.concatenate(where)


def _join(keys: np.ndarray, queries: np.ndarray, mask: np.uint64, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (query position, key position, distance) with the same prefix and within ``k``,
    ordered by key position, then query position."""
    lo_q = queries & mask
    hi_q = lo_q | ~mask
    a = np.searchsorted(keys, lo_q, side="left")
    c = np.searchsorted(keys, hi_q, side="right") - a
    qidx = np.repeat(np.arange(len(queries), dtype=np.int64), c)
    kidx = np.arange(int(c.sum()), dtype=np.int64) - np.repeat(np.cumsum(c) - c, c) + np.repeat(a, c)
    dist = _popcount(keys[kidx] ^ queries[qidx])
    keep = dist <= k
    qidx, kidx, dist = qidx[keep], kidx[keep], dist[keep]
    order = np.lexsort((qidx, kidx))
    return qidx[order], kidx[order], dist[order]


def probe_chunks(
    bufs: list[Any],
    chunk_len: np.ndarray,
    chunk_start: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    counts: np.ndarray,
    bounds: np.ndarray,
    entry_start: np.ndarray,
    c0: int,
    c1: int,
    queries: np.ndarray,
    qa: np.ndarray,
    qb: np.ndarray,
    mask_hi: int,
    k: int,
    lookups: np.ndarray,
    la: np.ndarray,
    lb: np.ndarray,
) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`probe_chunk` of chunks ``c0 .. c1 - 1`` of a run, and a lookup of exact keys, in
    one pass that decodes each block once.

    ``bufs[c]`` is chunk ``c``'s bytes (None where chunk ``c`` is not needed), ``chunk_len[c]``
    its length and ``chunk_start[c] .. chunk_start[c + 1] - 1`` its blocks, described by
    ``starts`` / ``ends`` (offsets in the chunk), ``counts`` and ``bounds`` as for
    :func:`decode_blocks`, over the whole run (``bounds`` ascending, as a :class:`RunIndex`
    checks: the compiled merge walks them forward only); ``entry_start[b]`` is block ``b``'s
    first position in the run. Chunk ``c`` is probed with the sorted queries ``queries[qa[c]:qb[c]]`` (pairs as
    in :func:`probe_chunk`) and looks up the sorted keys ``lookups[la[c]:lb[c]]``.

    Checks, in order: the lengths of the arrays, the chunk range and each chunk's slices
    (ValueError); the counts of the blocks of every chunk with a query or lookup (``ERR_COUNT``,
    the block); every such chunk is present (``ERR_MISSING``, the chunk) with the length the
    index gives (``ERR_LENGTH``, the chunk); then the blocks are decoded chunk by chunk, in
    ascending order, those that some query's range or lookup may reach (the first failure's
    error and block). Returns ``(err, where, qpos, keys, positions, dist, lookup_pos,
    lookup_positions)``: the query rows ordered by position in the run, then query, each with
    the key and its position; then a row per stored copy of each lookup found, ordered by
    position.
    """
    nc, nb, nq, nl = len(chunk_len), len(starts), len(queries), len(lookups)
    if (
        len(bufs) != nc
        or len(chunk_start) != nc + 1
        or len(ends) != nb
        or len(counts) != nb
        or len(bounds) != nb + 1
        or len(entry_start) != nb + 1
        or not len(qa) == len(qb) == len(la) == len(lb) == nc
    ):
        raise ValueError("probe_chunks: arrays disagree in length")
    if not 0 <= c0 <= c1 <= nc:
        raise ValueError("probe_chunks: chunk range outside the run")
    used = []
    for c in range(c0, c1):
        if not (0 <= chunk_start[c] <= chunk_start[c + 1] <= nb and 0 <= qa[c] <= qb[c] <= nq and 0 <= la[c] <= lb[c] <= nl):
            raise ValueError(f"probe_chunks: chunk {c}'s blocks or slices are outside their arrays")
        if qa[c] < qb[c] or la[c] < lb[c]:
            for b in range(int(chunk_start[c]), int(chunk_start[c + 1])):
                if not 1 <= int(counts[b]) <= MAX_BLOCK_ENTRIES:
                    return ERR_COUNT, b, *_no_rows()
            used.append(c)
    for c in used:
        if bufs[c] is None:
            return ERR_MISSING, c, *_no_rows()
        if len(memoryview(bufs[c]).cast("B")) != chunk_len[c]:
            return ERR_LENGTH, c, *_no_rows()
    mask, full = _U64(mask_hi), _U64(0xFFFFFFFFFFFFFFFF)
    rows: list[_RunRows] = []
    for c in used:
        b0, b1 = int(chunk_start[c]), int(chunk_start[c + 1])
        q, lk = queries[qa[c] : qb[c]], lookups[la[c] : lb[c]]
        err, j, keys, where = _decode_needed(
            np.frombuffer(bufs[c], np.uint8),
            starts[b0:b1],
            ends[b0:b1],
            counts[b0:b1],
            bounds[b0 : b1 + 1],
            entry_start[b0:],
            [(q, mask), (lk, full)],
        )
        if err:
            return err, b0 + j, *_no_rows()
        qidx, kidx, dist = _join(keys, q, mask, k)
        lidx, lkidx, _ = _join(keys, lk, full, 0)
        rows.append((qidx + qa[c], keys[kidx], where[kidx], dist, lidx + la[c], where[lkidx]))
    if not rows:
        return OK, -1, *_no_rows()
    q, key, pos, dist, li, lpos = (np.concatenate(col) for col in zip(*rows))
    return OK, -1, q, key, pos, dist, li, lpos


_RunRows = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _no_rows() -> _RunRows:
    return (
        np.zeros(0, np.int64),
        np.zeros(0, _U64),
        np.zeros(0, np.int64),
        np.zeros(0, np.uint8),
        np.zeros(0, np.int64),
        np.zeros(0, np.int64),
    )


def _locate(bounds: np.ndarray, lo: int, hi: int) -> tuple[int, int]:
    """Blocks ``b0 .. b1 - 1`` whose key range ``[bounds[b], bounds[b + 1]]`` meets ``[lo, hi]``.

    ``bounds`` has one entry per block plus the run's last key; ``b0 >= b1`` means none.
    """
    nb = len(bounds) - 1
    # First block whose upper bound reaches lo; one past the last block whose lower bound is <= hi.
    b0 = int(np.searchsorted(bounds[1:], _U64(lo), side="left")) if nb > 0 else 0
    b1 = int(np.searchsorted(bounds[:nb], _U64(hi), side="right")) if nb > 0 else 0
    return b0, b1


# What index_check finds wrong with a run index (the first, in this order).
IX_ENTRIES = 1  # a block's entry count outside 1..block_entries
IX_SUM = 2  # the entry counts do not sum to the run's count (detail: their sum)
IX_KEYS = 3  # first keys not ascending
IX_LAST = 4  # last key below the last block's first key
IX_CHUNKS = 5  # blocks do not fill chunks 0..nchunks-1 in order
IX_FIRST = 6  # a chunk's first block does not start at byte 0
IX_ORDER = 7  # block offsets within a chunk not increasing
IX_END = 8  # a chunk's last block starts at or beyond the chunk's end
IX_DENSE = 9  # a block claims more entries than its bytes can hold (detail: the block)


def index_check(
    first_keys: np.ndarray,
    chunk: np.ndarray,
    offset: np.ndarray,
    nentries: np.ndarray,
    chunk_len: np.ndarray,
    count: int,
    last_key: int,
    block_entries: int,
) -> tuple[int, int, tuple[np.ndarray, ...] | None]:
    """The checks of a run index with at least one block and one chunk (arrays of one length per
    block, uint64 / uint32 / uint32 / uint16, and uint32 per chunk; the scalars in range), and what
    the kernels derive from it: ``(0, 0, (starts, ends, counts, bounds, entry_start,
    chunk_start))``, int64 but bounds (uint64), or ``(IX_..., detail, None)`` for the first
    check that fails, in the order the constants are listed.

    Block b's bytes are ``[starts[b], ends[b])`` of chunk ``chunk[b]``, its keys lie in
    ``[bounds[b], bounds[b + 1]]``, its entries are ``entry_start[b] ..``; chunk c's blocks are
    ``chunk_start[c] .. chunk_start[c + 1] - 1``. A block of n entries takes at least
    ``1 + ceil((n - 1) / 8)`` bytes (a header byte, a unary bit per gap), so the counts are
    bounded by the bytes the index claims."""
    nb, nc = len(first_keys), len(chunk_len)
    if nentries.min() < 1 or nentries.max() > block_entries:
        return IX_ENTRIES, 0, None
    total = int(nentries.sum(dtype=np.int64))
    if total != count:
        return IX_SUM, total, None
    if np.any(first_keys[1:] < first_keys[:-1]):
        return IX_KEYS, 0, None
    if last_key < int(first_keys[-1]):
        return IX_LAST, 0, None
    step = np.diff(chunk.astype(np.int64))
    if chunk[0] != 0 or int(chunk[-1]) != nc - 1 or np.any((step != 0) & (step != 1)):
        return IX_CHUNKS, 0, None
    new_chunk = np.concatenate(([True], step == 1))
    if np.any(offset[new_chunk] != 0):
        return IX_FIRST, 0, None
    same = ~new_chunk[1:]
    if np.any(offset[1:][same] <= offset[:-1][same]):
        return IX_ORDER, 0, None
    last_of_chunk = np.concatenate((step == 1, [True]))
    if np.any(offset[last_of_chunk] >= chunk_len):
        return IX_END, 0, None
    starts = offset.astype(np.int64)
    chunk_start = np.searchsorted(chunk, np.arange(nc + 1), side="left").astype(np.int64)
    ends = np.empty(nb, np.int64)
    ends[:-1] = starts[1:]
    ends[chunk_start[1:] - 1] = chunk_len.astype(np.int64)  # last block of each chunk
    counts = nentries.astype(np.int64)
    dense = counts - 1 > 8 * (ends - starts - 1)
    if np.any(dense):
        return IX_DENSE, int(np.flatnonzero(dense)[0]), None
    entry_start = np.zeros(nb + 1, np.int64)
    np.cumsum(counts, out=entry_start[1:])
    bounds = np.empty(nb + 1, np.uint64)
    bounds[:nb] = first_keys
    bounds[nb] = last_key
    return 0, 0, (starts, ends, counts, bounds, entry_start, chunk_start)


ERR_MISSING = 8  # a chunk the index names is absent
ERR_LENGTH = 9  # a chunk's length differs from the index's
ERR_UNMATCHED = 10  # a key another table of the run reached is not in its table 0


class ProbeTable:
    """One run table's block index for :func:`probe_tables`: ``bounds`` (uint64, blocks + 1),
    ``starts``/``ends``/``counts`` (int64 per block), ``chunk`` (uint32 per block), ``chunk_start``
    (int64, chunks + 1: each chunk's first block), ``chunk_len`` (uint32 per chunk),
    ``entry_start`` (int64, blocks + 1) and ``names`` (one chunk name per chunk, for ``fetch``).
    Shapes and block descriptors are checked here once; the compiled twin keeps raw pointers."""

    def __init__(self, bounds, starts, ends, counts, chunk, chunk_start, chunk_len, entry_start, names: list) -> None:
        nb, nc = len(starts), len(chunk_len)
        if (
            len(bounds) != nb + 1
            or len(ends) != nb
            or len(counts) != nb
            or len(chunk) != nb
            or len(entry_start) != nb + 1
            or len(chunk_start) != nc + 1
            or len(names) != nc
        ):
            raise ValueError("probe table arrays disagree in length")
        if nb and (int(np.max(chunk)) >= nc or int(np.min(counts)) < 1 or int(np.max(counts)) > MAX_BLOCK_ENTRIES):
            raise ValueError("probe table block descriptors out of range")
        self.bounds, self.starts, self.ends, self.counts = bounds, starts, ends, counts
        self.chunk, self.chunk_start, self.chunk_len, self.entry_start = chunk, chunk_start, chunk_len, entry_start
        self.names = names
        self.nb = nb

    #: The compiled table tests which cells of the key space hold a key before it reads a block
    #: (an optimisation only: the answers are the same); this one always reads the blocks.
    filtered = False

    def build_cells(self, fetch: Any, prefix_bits: int) -> int:
        """The compiled table's cells (see ``filtered``): none here, no bytes added."""
        return 0


def probe_tables(tables: list, fetch: Any, ranges: list, k: int) -> tuple[int, int, int, list]:
    """Single-query probe of several tables of one run, with the chunk reads done by ``fetch``.

    ``ranges`` lists ``(i, lo, hi, query)``: keys of ``tables[i]`` in ``[lo, hi]`` within ``k``
    bits of ``query``. ``fetch(name)`` returns a chunk's bytes (None when absent); each chunk a
    range reaches is fetched once per range and its length checked against the index.

    Returns ``(OK, -1, -1, hits)`` with ``hits`` the list of ``(i, key, position in the run)`` in
    range order, then key order; or ``(ERR_MISSING | ERR_LENGTH, i, chunk, [])``, or a block
    error as for :func:`decode_blocks` with ``(err, i, block, [])``. The compiled twin stops
    decoding a block after the first key above ``hi`` (a probe needs no more), so damage in the
    rest of that block goes unreported by it; every byte it reads is still bounds-checked, and
    on intact runs both return the same.
    """
    hits: list = []
    for i, lo, hi, query in ranges:
        pt = tables[i]
        if pt.nb == 0:
            continue
        b0, b1 = _locate(pt.bounds, lo, hi)
        while b0 < b1:
            c = int(pt.chunk[b0])
            end = min(b1, int(pt.chunk_start[c + 1]))
            buf = fetch(pt.names[c])
            if buf is None:
                return ERR_MISSING, i, c, []
            b8 = np.frombuffer(buf, np.uint8)
            if len(b8) != int(pt.chunk_len[c]):
                return ERR_LENGTH, i, c, []
            for b in range(b0, end):
                n = int(pt.counts[b])
                err, keys = _decode_block(b8, int(pt.starts[b]), int(pt.ends[b]), n, int(pt.bounds[b]), int(pt.bounds[b + 1]))
                if err:
                    return err, i, b, []
                for j, key in enumerate(keys.tolist()):
                    if lo <= key <= hi and (key ^ query).bit_count() <= k:
                        hits.append((i, key, int(pt.entry_start[b]) + j))
            b0 = end
    return OK, -1, -1, hits


def fill_restarts(pt: ProbeTable, fetch: Any) -> tuple[int, int]:
    """Decode every block of ``pt`` once (what ``Store.warm`` asks): ``(OK, -1)``, or
    ``(ERR_MISSING | ERR_LENGTH, chunk)``, or a block error as for :func:`decode_blocks` with
    ``(err, block)``. The compiled twin records each block's restart points on the way, which
    later probes start from; this twin keeps none (its probes decode whole blocks), so it only
    checks."""
    for c in range(len(pt.names)):
        buf = fetch(pt.names[c])
        if buf is None:
            return ERR_MISSING, c
        b8 = np.frombuffer(buf, np.uint8)
        if len(b8) != int(pt.chunk_len[c]):
            return ERR_LENGTH, c
        for b in range(int(pt.chunk_start[c]), int(pt.chunk_start[c + 1])):
            err, _ = _decode_block(b8, int(pt.starts[b]), int(pt.ends[b]), int(pt.counts[b]), int(pt.bounds[b]), int(pt.bounds[b + 1]))
            if err:
                return err, b
    return OK, -1


class ProbeDesign:
    """A table design for :func:`probe_fingerprint`: ``moves[t]`` the (src, mask, dst) moves of
    table t's permutation (``key |= ((fp >> src) & mask) << dst``), ``prefix_bits[t]`` its prefix
    length and ``flip_masks[t]`` the XOR masks applied to its prefix value (``[0]`` without flips)."""

    def __init__(self, moves: list, prefix_bits: list, flip_masks: list) -> None:
        if not moves or len(prefix_bits) != len(moves) or len(flip_masks) != len(moves):
            raise ValueError("moves, prefix_bits and flip_masks must have one entry per table")
        if any(not 0 <= p <= 64 for p in prefix_bits) or any(len(f) == 0 for f in flip_masks):
            raise ValueError("prefix_bits must be in 0..64 and every table has the zero flip mask")
        if any(not (0 <= s <= 63 and 0 <= d <= 63) for ms in moves for s, _, d in ms):
            raise ValueError("move shifts must be in 0..63")
        self.moves, self.prefix_bits, self.flip_masks = moves, prefix_bits, flip_masks
        self.ntab = len(moves)

    def permute(self, t: int, value: int, inverse: bool = False) -> int:
        out = 0
        for src, mask, dst in self.moves[t]:
            if inverse:
                out |= ((value >> dst) & mask) << src
            else:
                out |= ((value >> src) & mask) << dst
        return out & 0xFFFFFFFFFFFFFFFF


def _memo_fetch(fetch: Any, memo: dict) -> Any:
    """``fetch`` through ``memo``: each name read once (a missing chunk is read again, and fails again)."""

    def get(name: bytes) -> Any:
        buf = memo.get(name)
        if buf is None:
            buf = fetch(name)
            if buf is not None:
                memo[name] = buf
        return buf

    return get


def probe_fingerprint(d: ProbeDesign, tables: list, fetch: Any, fp: int, k: int, memo: dict | None = None) -> tuple[int, int, int, list]:
    """Every entry of the runs whose probe tables are ``tables`` (run r's table t at
    ``tables[r * d.ntab + t]``) within ``k`` bits of ``fp``: the single query over runs.

    Per run: every table's prefix ranges (one per flip mask) are probed with :func:`probe_tables`;
    keys found in a table other than 0 are unpermuted, and those not already found in table 0 (the
    identity, whose positions name the entries) are looked up there. Returns ``(OK, -1, -1,
    hits)`` with ``hits`` a list of ``(run, fingerprint, position in table 0)``, one per stored
    entry, by run then position; or an error as :func:`probe_tables` reports it.

    ``fetch`` is called once per chunk: ``memo`` (name -> buffer, filled here) shares the chunks
    read with later calls (one transaction's batch of single probes).
    """
    ntab = d.ntab
    memo = {} if memo is None else memo
    fetch = _memo_fetch(fetch, memo)
    if len(tables) % ntab:
        raise ValueError("tables must hold every table of every run")
    out: list = []
    for r in range(len(tables) // ntab):
        ranges = []
        for t in range(ntab):
            perm = d.permute(t, fp)
            p = d.prefix_bits[t]
            if p == 0:
                ranges.append((r * ntab + t, 0, 0xFFFFFFFFFFFFFFFF, perm))
                continue
            shift = 64 - p
            low = (1 << shift) - 1
            for m in d.flip_masks[t]:
                lo = ((perm >> shift) ^ m) << shift
                ranges.append((r * ntab + t, lo, lo | low, perm))
        err, i, where, hits = probe_tables(tables, fetch, ranges, k)
        if err:
            return err, i, where, []
        found = {pos: key for i, key, pos in hits if i == r * ntab}
        seen = set(found.values())
        missing = []
        for i, key, _ in hits:
            if i != r * ntab:
                f = d.permute(i - r * ntab, key, inverse=True)
                if f not in seen:
                    seen.add(f)
                    missing.append((r * ntab, f, f, f))
        if missing:
            err, i, where, hits = probe_tables(tables, fetch, missing, 0)
            if err:
                return err, i, where, []
            if len({key for _, key, _ in hits}) != len(missing):  # table 0 lacks what another holds
                return ERR_UNMATCHED, r * ntab, -1, []
            found.update((pos, key) for _, key, pos in hits)
        out += [(r, found[pos], pos) for pos in sorted(found)]
    return OK, -1, -1, out


def probe_fingerprints(
    d: ProbeDesign, tables: list, fetch: Any, fps: np.ndarray, k: int, memo: dict | None = None
) -> tuple[int, int, int, Any]:
    """:func:`probe_fingerprint` of every fingerprint of ``fps`` (uint64), one query after
    another with one ``memo``: ``(OK, -1, -1, (query index, run, fingerprint, position))``, four
    arrays (int64, int64, uint64, int64) with each query's rows in :func:`probe_fingerprint`'s
    order, queries in order; or the first error as :func:`probe_fingerprint` reports it (and
    None)."""
    memo = {} if memo is None else memo
    rows: list = []
    for q, fp in enumerate(int(x) for x in fps):
        err, i, where, hits = probe_fingerprint(d, tables, fetch, fp, k, memo)
        if err:
            return err, i, where, None
        rows += [(q, r, f, pos) for r, f, pos in hits]
    cols = list(zip(*rows)) if rows else [(), (), (), ()]
    return (
        OK,
        -1,
        -1,
        (
            np.array(cols[0], np.int64),
            np.array(cols[1], np.int64),
            np.array(cols[2], np.uint64),
            np.array(cols[3], np.int64),
        ),
    )

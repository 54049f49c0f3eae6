"""Pure-Python twin of ``cext/_search_c.pyx``: the specification of the search kernels.

* :func:`self_join` — all pairs within one prefix group of a sorted key array whose Hamming
  distance is at most k (the inner loop of the all-pairs join, Manku §3.3).
* :func:`prefix_join` — pairs of two key arrays whose prefixes differ by one of given XOR masks
  and whose keys are within k (the all-pairs join of tables with multi-probe flips, and of two
  windows of one table).
* :func:`pack_bits` / :func:`unpack_bits` — fixed-width bit packing of uint64 values (the id and
  ordinal columns of runs): value i occupies bits [i*w, (i+1)*w) of a little-endian bit stream.
* :func:`components` — connected components of a graph given as edge lists (union-find); each
  node's label is the smallest node index in its component.
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

MAX_WIDTH = 64
#: The kernel's size from which a full sort splits by the top bits first (the same name here).
MSD_MIN = 1 << 20


def use_vector_compare(level: int) -> int:
    """The compiled twin's choice of how a key is compared with a group of queries (0 one at a
    time, 1 AVX2, 2 AVX-512; for tests). This twin compares with numpy whatever the level;
    returns 0, the level it always has."""
    return 0


def self_join(keys: np.ndarray, prefix_bits: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs (i, j), i < j, of uint64 ``keys`` (grouped by their top ``prefix_bits`` bits) sharing that prefix and
    within ``k`` bits of each other; returns (i int64, j int64, distance uint8) ordered by i, j."""
    return prefix_join(keys, keys, prefix_bits, np.zeros(1, np.uint64), k, True)


def prefix_join(
    a: np.ndarray, b: np.ndarray, prefix_bits: int, masks: np.ndarray, k: int, same: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs (i, j) of ``a`` and ``b`` (both sorted by their top ``prefix_bits`` bits) whose
    prefixes differ by one of ``masks`` (XOR values of the prefix, distinct) and whose keys are
    within ``k`` bits. With ``same`` (``b`` is ``a``), mask 0 pairs i < j inside a group and any
    other mask pairs a group only with the larger group it reaches, so each pair comes once.
    Rows come by group of ``a``, then mask (in the order given), then i, then j."""
    if not 0 <= prefix_bits <= 64:
        raise ValueError("prefix_bits must be in 0..64")
    if same and len(a) != len(b):
        raise ValueError("same=True needs b to be a")
    shift = 64 - prefix_bits

    def prefix(v: int) -> int:
        return v >> shift if shift < 64 else 0

    va = [int(v) for v in a]
    vb = [int(v) for v in b]
    pb = [prefix(v) for v in vb]
    out_i: list[int] = []
    out_j: list[int] = []
    out_d: list[int] = []
    start = 0
    while start < len(va):
        group = prefix(va[start])
        end = start + 1
        while end < len(va) and prefix(va[end]) == group:
            end += 1
        for m in (int(x) for x in masks):
            target = group ^ m
            if same and m == 0:
                pairs = [(x, y) for x in range(start, end) for y in range(x + 1, end)]
            elif same and target < group:
                continue
            else:
                lo = bisect.bisect_left(pb, target)
                hi = bisect.bisect_right(pb, target)
                pairs = [(x, y) for x in range(start, end) for y in range(lo, hi)]
            for x, y in pairs:
                d = (va[x] ^ vb[y]).bit_count()
                if d <= k:
                    out_i.append(x)
                    out_j.append(y)
                    out_d.append(d)
        start = end
    return np.array(out_i, np.int64), np.array(out_j, np.int64), np.array(out_d, np.uint8)


def packed_size(count: int, width: int) -> int:
    """Bytes that :func:`pack_bits` produces for ``count`` values of ``width`` bits (whole uint64 words)."""
    return ((count * width + 63) // 64) * 8


def pack_bits(values: np.ndarray, width: int) -> bytes:
    """Pack uint64 ``values`` (each < 2**width) into ``width``-bit fields, little-endian words."""
    words = [0] * (packed_size(len(values), width) // 8)
    if width == 0:
        return b""
    for i, v in enumerate(int(x) for x in values):
        bit = i * width
        w, off = divmod(bit, 64)
        words[w] |= (v << off) & 0xFFFFFFFFFFFFFFFF
        if off + width > 64:
            words[w + 1] |= v >> (64 - off)
    return np.array(words, dtype="<u8").tobytes()


def unpack_bits(buf: bytes, width: int, count: int, positions: np.ndarray) -> tuple[int, np.ndarray]:
    """Values at ``positions`` (int64) of a packed array of ``count`` values.

    Returns (error, values): error is 0, or 1 when the buffer is too short for ``count`` values or
    a position lies outside 0..count-1 (the caller raises CorruptionError or InputError).
    """
    if len(buf) < packed_size(count, width):
        return 1, np.zeros(0, np.uint64)
    words = np.frombuffer(buf, dtype="<u8", count=packed_size(count, width) // 8)
    mask = (1 << width) - 1 if width < 64 else 0xFFFFFFFFFFFFFFFF
    out = np.zeros(len(positions), np.uint64)
    for n, p in enumerate(int(x) for x in positions):
        if not 0 <= p < count:
            return 1, np.zeros(0, np.uint64)
        if width == 0:
            continue
        w, off = divmod(p * width, 64)
        v = int(words[w]) >> off
        if off + width > 64:
            v |= int(words[w + 1]) << (64 - off)
        out[n] = v & mask
    return 0, out


def unpack_one(buf: bytes, width: int, count: int, position: int) -> int | None:
    """The value at ``position`` of a packed array of ``count`` values, or None when the buffer
    is too short for them or the position lies outside 0..count-1."""
    if not 0 <= width <= 64:
        raise ValueError("width must be in 0..64")
    if count < 0 or not 0 <= position < count or len(buf) < packed_size(count, width):
        return None
    if width == 0:
        return 0
    w, off = divmod(position * width, 64)
    v = int.from_bytes(bytes(buf[w * 8 : w * 8 + 16]), "little") >> off
    return v & ((1 << width) - 1)


def unpack_at(
    memo: dict, fetch: Any, prefix: bytes, count: int, per: int, width: int, low: int, positions: np.ndarray
) -> tuple[int, int, np.ndarray | None]:
    """Values (plus ``low``) at ``positions`` of a packed column of ``count`` values, ``per`` to a
    chunk, chunk c read by ``fetch(prefix + b"P" + c)`` (c as 4 big-endian bytes) and kept in
    ``memo``: ``(status, index, values)``, status 0, or 1 for a position outside 0..count-1, 2
    for a chunk missing or too short, 3 for a value above 2**64 - 1, at positions[index]."""
    if not 0 <= width <= 64:
        raise ValueError("width must be in 0..64")
    if per < 1 or count < 0:
        raise ValueError("bad column shape")
    out = np.zeros(len(positions), np.uint64)
    for x, p in enumerate(int(v) for v in positions):
        if not 0 <= p < count:
            return 1, x, None
        c = p // per
        if c >= 1 << 32:  # past what a chunk name (4 bytes) numbers
            return 2, x, None
        name = prefix + b"P" + c.to_bytes(4, "big")
        buf = memo.get(name)
        if buf is None:
            buf = fetch(name)
            if buf is not None:
                memo[name] = buf
        value = None if buf is None else unpack_one(buf, width, min(per, count - c * per), p - c * per)
        if value is None:
            return 2, x, None
        if value + low >> 64:
            return 3, x, None
        out[x] = value + low
    return 0, -1, out


def components(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Component label (smallest member index) of each node 0..n-1 for edges a[i]–b[i]."""
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for x, y in zip(a.tolist(), b.tolist()):
        rx, ry = find(x), find(y)
        if rx != ry:
            if rx < ry:
                parent[ry] = rx
            else:
                parent[rx] = ry
    return np.array([find(i) for i in range(n)], dtype=np.int64)


def radix_sort(
    keys: np.ndarray, with_order: bool = False, top_bits: int = 64, msd_min: int = MSD_MIN
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Copy of uint64 ``keys`` stably sorted by their top ``top_bits`` bits (64: a full sort) and,
    with ``with_order``, the permutation applied (int64). ``msd_min`` chooses the kernel's
    method only: numpy sorts here."""
    if not 0 <= top_bits <= 64:
        raise ValueError("top_bits must be in 0..64")
    by = keys >> np.uint64(64 - top_bits) if top_bits < 64 else keys
    if top_bits == 0:
        by = np.zeros(len(keys), np.uint64)
    order = np.argsort(by, kind="stable").astype(np.int64)
    out = keys[order].astype(np.uint64)
    return (out, order) if with_order else out

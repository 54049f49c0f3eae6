# cython: language_level=3
"""Compiled search kernels; the specification is ``fpstore/index/_search_py.py``.

Loops only: no I/O, no validation beyond memory safety. Every read of a caller's buffer is checked
against its length, because packed columns come from disk.
"""

from libc.stdint cimport int64_t, uint8_t, uint64_t
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from _common cimport (Triples, fps_next_within_fn, fps_next_within_form, fps_popcount64, fps_prefetch, fps_vector_compare,
                     triples_copy, triples_free, triples_init, triples_push)

import numpy as np

MAX_WIDTH = 64

cdef extern from *:
    """
    /* The most values whose packed size (count * 64 bits, in bytes) fits in 64 bits. */
    #define FPS_MAX_PACKED_COUNT ((uint64_t)0xFFFFFFFFFFFFFFFFULL / 64)
    """
    const uint64_t MAX_PACKED_COUNT "FPS_MAX_PACKED_COUNT"


def use_vector_compare(int level):
    """How the merge compares a key with a group of queries (for tests, which compare them all):
    0 one at a time, 1 four at a time (AVX2), 2 eight at a time (AVX-512 with VPOPCNTDQ), each
    where the CPU has it, else the widest below that it has. Returns the previous level."""
    global fps_vector_compare
    if not 0 <= level <= 2:
        raise ValueError("level must be 0, 1 or 2")
    cdef int was = fps_vector_compare
    fps_vector_compare = level
    return was


def self_join(const uint64_t[::1] keys, int prefix_bits, int k):
    """Pairs (i, j), i < j, of ``keys`` sharing the top ``prefix_bits`` bits, within ``k``. The keys
    must be grouped by that prefix (sorted by it, as ``radix_sort(keys, top_bits=prefix_bits)``
    leaves them); the order inside a group is free. :func:`prefix_join` of the keys with
    themselves at mask 0 (which never searches, so grouping is enough)."""
    return prefix_join(keys, keys, prefix_bits, _MASK_ZERO, k, True)


_MASK_ZERO = np.zeros(1, np.uint64)


cdef inline uint64_t _prefix(uint64_t key, int shift) noexcept nogil:
    return (key >> shift) if shift < 64 else 0


cdef Py_ssize_t _group_start(const uint64_t* keys, Py_ssize_t n, uint64_t target, int shift) noexcept nogil:
    """First position of ``keys[:n]`` (sorted by prefix) whose prefix is >= ``target``."""
    cdef Py_ssize_t lo = 0, hi = n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if _prefix(keys[mid], shift) < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


def prefix_join(const uint64_t[::1] a, const uint64_t[::1] b, int prefix_bits, const uint64_t[::1] masks, int k, bint same):
    """Pairs (i, j) of ``a`` and ``b`` (both sorted by their top ``prefix_bits`` bits) whose
    prefixes differ by one of ``masks`` (XOR values of the prefix, distinct) and whose keys are
    within ``k`` bits. With ``same`` (``b`` is ``a``), mask 0 pairs i < j inside a group and any
    other mask pairs a group only with the larger group it reaches, so each pair comes once.
    Rows come by group of ``a``, then mask (in the order given), then i, then j."""
    if not 0 <= prefix_bits <= 64:
        raise ValueError("prefix_bits must be in 0..64")
    if same and (a.shape[0] != b.shape[0]):
        raise ValueError("same=True needs b to be a")
    cdef Py_ssize_t na = a.shape[0], nb = b.shape[0], nm = masks.shape[0]
    cdef Py_ssize_t start = 0, end, x, y, lo, hi, mi
    cdef int shift = 64 - prefix_bits
    cdef uint64_t group, target, m, va
    cdef int failed = 0
    cdef Triples pb
    cdef fps_next_within_fn next_within = fps_next_within_form()
    triples_init(&pb)
    with nogil:
        while start < na and not failed:
            group = _prefix(a[start], shift)
            end = start + 1
            while end < na and _prefix(a[end], shift) == group:
                end += 1
            for mi in range(nm):
                if failed:
                    break
                m = masks[mi]
                target = group ^ m
                if same and m == 0:
                    for x in range(start, end):
                        va = a[x]
                        y = next_within(va, &b[0], x + 1, end, k)
                        while y < end:
                            if triples_push(&pb, x, <uint64_t>y, <uint8_t>fps_popcount64(va ^ b[y])) != 0:
                                failed = 1
                                break
                            y = next_within(va, &b[0], y + 1, end, k)
                        if failed:
                            break
                    continue
                if same and target < group:
                    continue
                lo = _group_start(&b[0], nb, target, shift) if nb else 0
                hi = lo
                while hi < nb and _prefix(b[hi], shift) == target:
                    hi += 1
                for x in range(start, end):
                    va = a[x]
                    y = next_within(va, &b[0], lo, hi, k)
                    while y < hi:
                        if triples_push(&pb, x, <uint64_t>y, <uint8_t>fps_popcount64(va ^ b[y])) != 0:
                            failed = 1
                            break
                        y = next_within(va, &b[0], y + 1, hi, k)
                    if failed:
                        break
            start = end
    try:
        if failed:
            raise MemoryError("prefix_join: out of memory for pairs")
        out_i = np.empty(pb.n, np.int64)
        out_j = np.empty(pb.n, np.int64)
        out_d = np.empty(pb.n, np.uint8)
        if pb.n:
            _copy_pairs(&pb, out_i, out_j, out_d)
        return out_i, out_j, out_d
    finally:
        triples_free(&pb)


cdef void _copy_pairs(Triples* pb, int64_t[::1] oi, int64_t[::1] oj, uint8_t[::1] od) noexcept:
    # j is stored as the uint64 bits of a non-negative index: the same bytes as the int64.
    triples_copy(pb, &oi[0], &oj[0], &od[0])


def packed_size(Py_ssize_t count, int width):
    """Bytes that :func:`pack_bits` produces for ``count`` values of ``width`` bits."""
    return ((count * width + 63) // 64) * 8


def pack_bits(const uint64_t[::1] values, int width):
    """Pack ``values`` (each < 2**width) into ``width``-bit fields of little-endian uint64 words."""
    if not 0 <= width <= 64:
        raise ValueError("width must be in 0..64")
    cdef Py_ssize_t n = values.shape[0]
    cdef Py_ssize_t nwords = (n * width + 63) // 64
    out = np.zeros(nwords, dtype="<u8")
    cdef uint64_t[::1] words = out
    cdef Py_ssize_t i, w
    cdef uint64_t bit, v
    cdef int off
    if width:
        with nogil:
            for i in range(n):
                v = values[i]
                bit = <uint64_t>i * width
                w = bit >> 6
                off = bit & 63
                words[w] |= v << off
                if off + width > 64:
                    words[w + 1] |= v >> (64 - off)
    return out.tobytes()


cdef inline uint64_t _packed_value(const uint8_t* base, uint64_t index, int width) noexcept nogil:
    """Value ``index`` of a packed array (width 1..64): the caller has checked that the array's
    whole words lie inside ``base``. Little-endian bytes, so the layout is the same on any host."""
    cdef uint64_t bit = index * <uint64_t>width, lo = 0, hi = 0
    cdef Py_ssize_t w = <Py_ssize_t>(bit >> 6)
    cdef int off = <int>(bit & 63), byte
    for byte in range(8):
        lo |= (<uint64_t>base[w * 8 + byte]) << (8 * byte)
    lo >>= off
    if off + width > 64:
        for byte in range(8):
            hi |= (<uint64_t>base[(w + 1) * 8 + byte]) << (8 * byte)
        lo |= hi << (64 - off)
    return lo if width == 64 else lo & ((<uint64_t>1 << width) - 1)


def unpack_bits(const uint8_t[::1] buf, int width, Py_ssize_t count, const int64_t[::1] positions):
    """``(error, values)``: values at ``positions`` of a packed array; error 1 on a short buffer or
    a position outside 0..count-1 (nothing is read out of bounds)."""
    if not 0 <= width <= 64:
        raise ValueError("width must be in 0..64")
    if count < 0 or <uint64_t>count > MAX_PACKED_COUNT // 8:  # no buffer holds them
        return 1, np.zeros(0, np.uint64)
    cdef Py_ssize_t nwords = (count * width + 63) // 64
    cdef Py_ssize_t m = positions.shape[0]
    out = np.zeros(m, np.uint64)
    if buf.shape[0] < nwords * 8:
        return 1, np.zeros(0, np.uint64)
    cdef uint64_t[::1] o = out
    cdef const uint8_t* base = &buf[0] if buf.shape[0] else NULL
    cdef Py_ssize_t x
    cdef int64_t p
    cdef int err = 0
    with nogil:
        for x in range(m):
            p = positions[x]
            if p < 0 or p >= count:
                err = 1
                break
            if width:
                o[x] = _packed_value(base, <uint64_t>p, width)
    if err:
        return 1, np.zeros(0, np.uint64)
    return 0, out


def unpack_one(buf, int width, Py_ssize_t count, Py_ssize_t position):
    """The value at ``position`` of a packed array of ``count`` values, or None when the buffer
    is too short for them or the position lies outside 0..count-1: :func:`unpack_bits` for a
    single query's one lookup, with no array made and the raw buffer protocol (a typed
    memoryview costs more than the lookup)."""
    if not 0 <= width <= 64:
        raise ValueError("width must be in 0..64")
    if count < 0 or position < 0 or position >= count or <uint64_t>count > MAX_PACKED_COUNT:
        return None  # (past MAX_PACKED_COUNT the packed size overflows; no buffer holds it)
    cdef Py_buffer view
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if <uint64_t>view.len < ((<uint64_t>count * <uint64_t>width + 63) // 64) * 8:
            return None
        return _packed_value(<const uint8_t*>view.buf, <uint64_t>position, width) if width else 0
    finally:
        PyBuffer_Release(&view)


cdef inline object _column_chunk(dict memo, fetch, bytes prefix, Py_ssize_t c):
    """Chunk c of a packed column (blob ``prefix + b"P" + c`` as 4 big-endian bytes), from
    ``memo`` or ``fetch`` (kept in memo); None when absent."""
    cdef unsigned char tail[5]
    tail[0] = 80  # "P"
    tail[1] = (c >> 24) & 0xFF
    tail[2] = (c >> 16) & 0xFF
    tail[3] = (c >> 8) & 0xFF
    tail[4] = c & 0xFF
    name = prefix + PyBytes_FromStringAndSize(<char*>tail, 5)
    buf = memo.get(name)
    if buf is None:
        buf = fetch(name)
        if buf is not None:
            memo[name] = buf
    return buf


def unpack_at(dict memo, fetch, bytes prefix, Py_ssize_t count, Py_ssize_t per, int width, uint64_t low,
              const int64_t[::1] positions):
    """Values (plus ``low``) at ``positions`` of a packed column of ``count`` values, ``per`` to a
    chunk (the last holds the rest), chunk c read by ``fetch(prefix + b"P" + c)`` (c as 4
    big-endian bytes) and kept in ``memo``: ``(status, index, values uint64)``, status 0, or 1 for
    a position outside 0..count-1, 2 for a chunk missing or too short, 3 for a value above
    2**64 - 1, at positions[index], the first position with any of them (as the twin checks them,
    position by position). Chunks are looked up when the chunk changes: sorted positions read
    each chunk once.

    Two passes: the first finds each position's chunk and asks for the cache line of its value,
    the second reads the values. A crawler's ids land far apart in a column of millions, each
    value a miss: asked for together, the misses overlap. The first pass keeps each chunk's
    address after releasing its buffer: the chunks are objects whose bytes stay where they are
    while referenced (bytes, LMDB buffers valid in the caller's transaction, numpy arrays), and
    ``memo`` holds them until the call returns."""
    if not 0 <= width <= 64:
        raise ValueError("width must be in 0..64")
    if per < 1 or count < 0:
        raise ValueError("bad column shape")
    cdef Py_ssize_t m = positions.shape[0], x, c, cur = -1, n_in, ready = 0
    out = np.zeros(m, np.uint64)
    cdef uint64_t[::1] o = out
    cdef Py_buffer view
    cdef const uint8_t* base = NULL
    cdef int64_t p
    cdef int status = 0
    cdef const uint8_t** at = <const uint8_t**>malloc((m if m else 1) * sizeof(uint8_t*))
    if at == NULL:
        raise MemoryError()
    try:
        try:
            for x in range(m):
                p = positions[x]
                if p < 0 or p >= count:
                    status = 1
                    break
                c = p // per
                if c > 0xFFFFFFFF:  # past what a chunk name (4 bytes) numbers
                    status = 2
                    break
                if c != cur:
                    buf = _column_chunk(memo, fetch, prefix, c)
                    if buf is None:
                        status = 2
                        break
                    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
                    base = <const uint8_t*>view.buf
                    n_in = count - c * per
                    if n_in > per:
                        n_in = per
                    if <uint64_t>n_in > MAX_PACKED_COUNT or <uint64_t>view.len < ((<uint64_t>n_in * <uint64_t>width + 63) // 64) * 8:
                        PyBuffer_Release(&view)
                        status = 2
                        break
                    PyBuffer_Release(&view)
                    cur = c
                at[x] = base
                fps_prefetch(base + ((<uint64_t>(p - c * per) * <uint64_t>width) >> 6) * 8)
                ready = x + 1
        except BaseException:
            # A chunk's read failed: a value above 2**64 - 1 at an earlier position comes first.
            x = _first_overflow(at, positions, ready, per, width, low)
            if x >= 0:
                return 3, x, None
            raise
        x = _first_overflow(at, positions, ready, per, width, low)
        if x >= 0:
            return 3, x, None
        if status:
            return status, ready, None
        for x in range(m):
            o[x] = (_packed_value(at[x], <uint64_t>(positions[x] % per), width) if width else 0) + low
        return 0, -1, out
    finally:
        free(at)


cdef Py_ssize_t _first_overflow(const uint8_t** at, const int64_t[::1] positions, Py_ssize_t n, Py_ssize_t per,
                                int width, uint64_t low) noexcept:
    # The first of positions[:n] (their chunks at ``at``, checked) whose value plus low passes
    # 2**64 - 1, or -1.
    cdef Py_ssize_t x
    cdef uint64_t v
    if width == 0 or low == 0:
        return -1
    for x in range(n):
        v = _packed_value(at[x], <uint64_t>(positions[x] % per), width)
        if v + low < v:
            return x
    return -1


def components(Py_ssize_t n, const int64_t[::1] a, const int64_t[::1] b):
    """Component label (smallest member index) of each node 0..n-1 for edges a[i]–b[i]."""
    if a.shape[0] != b.shape[0]:
        raise ValueError("edge arrays differ in length")
    labels = np.arange(n, dtype=np.int64)
    cdef int64_t[::1] parent = labels
    cdef Py_ssize_t e, i
    cdef int64_t x, y, rx, ry
    for e in range(a.shape[0]):
        if not (0 <= a[e] < n and 0 <= b[e] < n):
            raise ValueError("edge endpoint outside 0..n-1")
    with nogil:
        for e in range(a.shape[0]):
            x = a[e]
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            rx = x
            y = b[e]
            while parent[y] != y:
                parent[y] = parent[parent[y]]
                y = parent[y]
            ry = y
            if rx != ry:
                if rx < ry:
                    parent[ry] = rx
                else:
                    parent[rx] = ry
        for i in range(n):
            x = i
            while parent[x] != x:
                x = parent[x]
            parent[i] = x
    return labels


cdef enum:
    RADIX_BITS = 11
    RADIX_BINS = 1 << RADIX_BITS
    RADIX_MASK = RADIX_BINS - 1


cdef int _radix_pass_needed(const uint64_t* src, Py_ssize_t n, int shift) noexcept nogil:
    cdef uint64_t first = (src[0] >> shift) & RADIX_MASK
    cdef Py_ssize_t i
    for i in range(1, n):
        if ((src[i] >> shift) & RADIX_MASK) != first:
            return 1
    return 0


cdef void _lsd(uint64_t** psrc, uint64_t** pdst, int64_t** posrc, int64_t** podst, Py_ssize_t n,
               int shift, int last_shift, int64_t* counts, bint with_order) noexcept nogil:
    """LSD passes over the digits at ``shift``, ``shift + RADIX_BITS``, ... up to ``last_shift``
    (stable), ping-ponging between the two buffers; on return ``*psrc`` (``*posrc``) holds the
    result. A pass whose digit is equal everywhere is skipped."""
    cdef uint64_t* src = psrc[0]
    cdef uint64_t* dst = pdst[0]
    cdef int64_t* osrc = posrc[0]
    cdef int64_t* odst = podst[0]
    cdef uint64_t* swap
    cdef int64_t* oswap
    cdef Py_ssize_t i
    cdef int d
    cdef int64_t total, c
    while shift <= last_shift:
        if _radix_pass_needed(src, n, shift):
            for d in range(RADIX_BINS):
                counts[d] = 0
            for i in range(n):
                counts[(src[i] >> shift) & RADIX_MASK] += 1
            total = 0
            for d in range(RADIX_BINS):
                c = counts[d]
                counts[d] = total
                total += c
            for i in range(n):
                d = (src[i] >> shift) & RADIX_MASK
                dst[counts[d]] = src[i]
                if with_order:
                    odst[counts[d]] = osrc[i]
                counts[d] += 1
            swap = src
            src = dst
            dst = swap
            oswap = osrc
            osrc = odst
            odst = oswap
        shift += RADIX_BITS
    psrc[0], pdst[0], posrc[0], podst[0] = src, dst, osrc, odst


cdef void _insertion_sort(uint64_t* a, int64_t* o, Py_ssize_t n, bint with_order) noexcept nogil:
    """Stable insertion sort of a few keys (and their order entries) in place."""
    cdef Py_ssize_t i, j
    cdef uint64_t key
    cdef int64_t pos
    for i in range(1, n):
        key = a[i]
        if with_order:
            pos = o[i]
        j = i - 1
        while j >= 0 and a[j] > key:
            a[j + 1] = a[j]
            if with_order:
                o[j + 1] = o[j]
            j -= 1
        a[j + 1] = key
        if with_order:
            o[j + 1] = pos


cdef void _msd_then_lsd(uint64_t* a, uint64_t* b, int64_t* oa, int64_t* ob, Py_ssize_t n, int64_t* counts,
                        int64_t* starts, bint with_order) noexcept nogil:
    """Full sort of ``a`` (and ``oa``) into ``a``, ``b`` (``ob``) as scratch: one stable pass by the
    top RADIX_BITS bits scatters the keys into buckets of about n / RADIX_BINS, then each bucket,
    small enough for the cache, is sorted by its lower bits where it lies."""
    cdef Py_ssize_t i, s, m
    cdef int d, top = 64 - RADIX_BITS
    cdef int64_t total, c
    cdef uint64_t* bsrc
    cdef uint64_t* bdst
    cdef int64_t* obsrc
    cdef int64_t* obdst
    for d in range(RADIX_BINS):
        counts[d] = 0
    for i in range(n):
        counts[a[i] >> top] += 1
    total = 0
    for d in range(RADIX_BINS):
        c = counts[d]
        counts[d] = total
        starts[d] = total
        total += c
    for i in range(n):
        d = <int>(a[i] >> top)
        b[counts[d]] = a[i]
        if with_order:
            ob[counts[d]] = oa[i]
        counts[d] += 1
    for d in range(RADIX_BINS):
        s = starts[d]
        m = (starts[d + 1] if d + 1 < RADIX_BINS else n) - s
        if m == 0:
            continue
        bsrc, bdst = b + s, a + s
        obsrc = ob + s if with_order else NULL
        obdst = oa + s if with_order else NULL
        if m <= 32:
            _insertion_sort(bsrc, obsrc, m, with_order)
        else:
            # Bits 0 .. top - 1 (the passes' last digit overlaps the bucket's equal top bits).
            _lsd(&bsrc, &bdst, &obsrc, &obdst, m, 0, top - 1, counts, with_order)
        if bsrc != a + s:
            memcpy(a + s, bsrc, m * sizeof(uint64_t))
            if with_order:
                memcpy(oa + s, obsrc, m * sizeof(int64_t))


#: Arrays at least this long are first split by their top bits (:func:`_msd_then_lsd`), when
#: fully sorted: each of the later passes then runs in the cache, over one bucket.
MSD_MIN = 1 << 20


def radix_sort(const uint64_t[::1] keys, bint with_order=False, int top_bits=64, Py_ssize_t msd_min=MSD_MIN):
    """Copy of ``keys`` stably sorted by their top ``top_bits`` bits (0..64; 64: a full sort), and,
    with ``with_order``, the permutation applied (int64).

    LSD radix sort, 11-bit digits (2,048 bins stay in L1; 16-bit digits measured slower than
    numpy's sort), up to six passes, only over the top bits; a pass whose digit is equal
    everywhere is skipped. A batch probe needs its queries grouped by prefix only, so it sorts
    25 bits in three passes instead of 64 in six. A full sort of at least ``msd_min`` keys
    first splits them by their top 11 bits, then sorts each bucket by the rest in the cache.
    """
    if not 0 <= top_bits <= 64:
        raise ValueError("top_bits must be in 0..64")
    cdef Py_ssize_t n = keys.shape[0], i
    out = np.empty(n, np.uint64)
    order = np.empty(n if with_order else 0, np.int64)
    if n == 0:
        return (out, order) if with_order else out
    tmp = np.empty(n, np.uint64)
    tmp_order = np.empty(n if with_order else 0, np.int64)
    cdef uint64_t[::1] a = out
    cdef uint64_t[::1] b = tmp
    cdef int64_t[::1] oa = order
    cdef int64_t[::1] ob = tmp_order
    cdef uint64_t* src
    cdef uint64_t* dst
    cdef int64_t* osrc
    cdef int64_t* odst
    cdef int64_t* counts = <int64_t*>malloc(2 * RADIX_BINS * sizeof(int64_t))
    if counts == NULL:
        raise MemoryError()
    try:
        with nogil:
            for i in range(n):
                a[i] = keys[i]
            if with_order:
                for i in range(n):
                    oa[i] = i
            src, dst = &a[0], &b[0]
            osrc = &oa[0] if with_order else NULL
            odst = &ob[0] if with_order else NULL
            if top_bits == 64 and n >= msd_min and n > 1:
                _msd_then_lsd(src, dst, osrc, odst, n, counts, counts + RADIX_BINS, with_order)
            else:
                # Digits from the lowest of the top bits up: a stable sort by those bits only.
                if top_bits > 0:
                    _lsd(&src, &dst, &osrc, &odst, n, 64 - top_bits, 63, counts, with_order)
    finally:
        free(counts)
    # An odd number of passes left the result in the scratch arrays.
    result = out if src == &a[0] else tmp
    if with_order:
        return result, (order if (n == 0 or osrc == &oa[0]) else tmp_order)
    return result

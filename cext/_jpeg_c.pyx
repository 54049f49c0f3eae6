# cython: language_level=3
"""Compiled entropy decoding of a JPEG scan, for the DC coefficients of one component. The
specification is ``fpstore/fingerprint/_jpeg_py.py`` (:func:`huffman_table`, :func:`decode_scan`):
same results, status included, on every input; ``tests/test_jpeg_dc.py`` compares the two.

The bit reader keeps up to 64 bits, the next one at the top, and refills before any code when
fewer than 32 are left: a code and its extra bits take at most 31. Where the next eight bytes hold
no 0xFF it takes them in one load; otherwise a byte at a time, reading a stuffed 0xFF 0x00 as 0xFF
and stopping at a marker, after which it feeds zeros (counted, so that a scan that needed them is
reported SHORT). A sequential scan's AC codes are read only to find where each block ends: one
look-up of the next RUN_BITS bits skips every whole code, with its extra bits, that they hold; a
code of at most LOOKAHEAD bits that does not fit there takes one look-up of its own, with its
extra bits dropped in the same step; a longer one is decoded bit length by bit length.

No I/O and no validation of the file: the caller (:mod:`fpstore.fingerprint.jpeg`) parses the
markers and gives each scan's bytes, layout and tables; this module checks only what keeps its own
reads and writes inside the buffers it is given.
"""

cimport cython
from libc.stdint cimport int16_t, int32_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memchr

LOOKAHEAD = 9
RUN_BITS = 12
TABLE_WIDTH = 804 + 4096
SEQUENTIAL, DC_FIRST, DC_REFINE = 0, 1, 2
OK, BAD_CODE, SHORT, BAD_RESTART, BAD_TABLE = 0, 1, 2, 3, 4

cdef enum:
    LOOK = 9
    MAXCODE = 512  # 1 << LOOK
    VALOFFSET = 530
    SYMBOLS = 548
    RUNS = 804
    RUN = 12
    WIDTH = 4900
    S_OK = 0
    S_BAD_CODE = 1
    S_SHORT = 2
    S_BAD_RESTART = 3
    S_BAD_TABLE = 4
    M_SEQUENTIAL = 0
    M_DC_FIRST = 1
    M_DC_REFINE = 2

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    /* Eight bytes as a big-endian number. */
    static inline uint64_t fps_load_be64(const uint8_t *p) {
        uint64_t x;
        memcpy(&x, p, 8);
    #if defined(__GNUC__)
        return __builtin_bswap64(x);
    #else
        return ((uint64_t)p[0] << 56) | ((uint64_t)p[1] << 48) | ((uint64_t)p[2] << 40) | ((uint64_t)p[3] << 32)
             | ((uint64_t)p[4] << 24) | ((uint64_t)p[5] << 16) | ((uint64_t)p[6] << 8) | (uint64_t)p[7];
    #endif
    }
    """
    uint64_t fps_load_be64(const uint8_t *p) nogil


cdef struct Bits:
    const uint8_t *data
    Py_ssize_t pos
    Py_ssize_t end
    uint64_t buf  # the next bit is bit 63
    int cnt  # bits held, data and zeros fed past it
    int pad  # of them, the zeros


cdef inline void _fill(Bits *b) noexcept nogil:
    """Bring the bits held to 57 or more (to 32 or more on the eight-byte path)."""
    cdef uint64_t word, flip
    cdef Py_ssize_t pos = b.pos, nxt
    cdef uint64_t byte
    if pos + 8 <= b.end:
        word = fps_load_be64(b.data + pos)
        flip = ~word
        # No byte of the eight is 0xFF (no zero byte in its complement): take the whole bytes that
        # fit. The part of the next byte that fits is ORed in again, unchanged, when it is taken.
        if ((flip - 0x0101010101010101ULL) & ~flip & 0x8080808080808080ULL) == 0:
            b.buf |= word >> b.cnt
            b.pos = pos + ((64 - b.cnt) >> 3)
            b.cnt += ((64 - b.cnt) >> 3) << 3
            return
    while b.cnt <= 56:
        byte = 0
        if pos < b.end:
            byte = b.data[pos]
            if byte != 0xFF:
                pos += 1
            else:
                nxt = pos + 1
                while nxt < b.end and b.data[nxt] == 0xFF:  # fill bytes before a marker
                    nxt += 1
                if nxt < b.end and b.data[nxt] == 0:
                    pos = nxt + 1  # a stuffed 0xFF
                else:
                    byte = 0  # a marker: stay before it, read zeros
                    b.pad += 8
        else:
            b.pad += 8
        b.buf |= byte << (56 - b.cnt)
        b.cnt += 8
    b.pos = pos


cdef inline void _drop(Bits *b, int n) noexcept nogil:
    b.buf <<= n
    b.cnt -= n


cdef inline int _slow_symbol(Bits *b, const int32_t *t) noexcept nogil:
    """A code longer than LOOK bits (the bits held: 32 or more); -1 when none of up to 16 matches."""
    cdef int length
    cdef int32_t code
    for length in range(LOOK + 1, 17):
        code = <int32_t>(b.buf >> (64 - length))
        if code <= t[MAXCODE + length]:
            _drop(b, length)
            return t[SYMBOLS + ((code + t[VALOFFSET + length]) & 0xFF)]
    return -1


cdef inline int _symbol(Bits *b, const int32_t *t) noexcept nogil:
    """The next Huffman symbol (the bits held: 32 or more); -1 when no code matches."""
    cdef int32_t entry = t[b.buf >> (64 - LOOK)]
    if entry != 0:
        _drop(b, entry & 31)
        return entry >> 16
    return _slow_symbol(b, t)


cdef inline uint32_t _dc_difference(Bits *b, int s) noexcept nogil:
    """The s value bits after a DC code (none when s is 0) as a signed number, in uint32 (T.81
    F.12: below half their range, value - 2^s + 1). No branch: the sign is as good as random."""
    cdef uint32_t value = <uint32_t>((b.buf >> 1) >> (63 - s))
    _drop(b, s)
    return value - (((1u << s) - 1u) & (0u - <uint32_t>(value < ((1u << s) >> 1))))


cdef inline int _restart(Bits *b, int number, uint32_t *pred) noexcept nogil:
    """End a restart interval at marker RST(number mod 8); the reader then starts afresh after it,
    and the four DC predictions ``pred`` from 0."""
    cdef int real = b.cnt - b.pad
    cdef Py_ssize_t pos = b.pos
    if real < 0:
        return S_SHORT
    if real >= 8:
        return S_BAD_RESTART
    if pos >= b.end or b.data[pos] != 0xFF:
        return S_BAD_RESTART
    while pos < b.end and b.data[pos] == 0xFF:
        pos += 1
    if pos >= b.end or b.data[pos] != 0xD0 + (number & 7):
        return S_BAD_RESTART
    b.pos = pos + 1
    b.buf = 0
    b.cnt = 0
    b.pad = 0
    pred[0] = pred[1] = pred[2] = pred[3] = 0
    return S_OK


def next_marker(const uint8_t[::1] data, Py_ssize_t start):
    """See the twin."""
    cdef Py_ssize_t n = data.shape[0], pos
    cdef const uint8_t *base
    cdef const uint8_t *hit
    cdef uint8_t after
    if n == 0:
        return 0
    base = &data[0]
    pos = max(start, 0)
    while pos < n - 1:
        hit = <const uint8_t *>memchr(base + pos, 0xFF, n - 1 - pos)
        if hit == NULL:
            break
        pos = hit - base
        after = base[pos + 1]
        if after != 0 and after != 0xFF and not (0xD0 <= after <= 0xD7):
            return pos
        pos += 1
    return n


def huffman_table(const uint8_t[::1] counts, const uint8_t[::1] symbols, bint dc, int32_t[::1] out):
    """See the twin."""
    cdef Py_ssize_t n = symbols.shape[0], total = 0
    cdef int length, i, j, count, s, p = 0, first, entry
    cdef long code = 0
    if counts.shape[0] != 16 or out.shape[0] != WIDTH:
        return S_BAD_TABLE
    for i in range(16):
        total += counts[i]
    if total != n or n > 256:
        return S_BAD_TABLE
    if dc:
        for i in range(n):
            if symbols[i] > 15:
                return S_BAD_TABLE
    for i in range(WIDTH):
        out[i] = 0
    for length in range(1, 17):
        count = counts[length - 1]
        if count:
            out[VALOFFSET + length] = <int32_t>(p - code)
            for i in range(count):
                if length <= LOOK:
                    s = symbols[p]
                    entry = length | ((length + (s & 15)) << 5) | (s << 16)
                    first = <int>(code << (LOOK - length))
                    for j in range(first, first + (1 << (LOOK - length))):
                        out[j] = entry
                code += 1
                p += 1
            out[MAXCODE + length] = <int32_t>(code - 1)
        else:
            out[MAXCODE + length] = -1
        # No code may be all ones (libjpeg: "code is now 1 more than the last code used for
        # codelength si; but it must still fit in si bits").
        if code >= (1 << length):
            return S_BAD_TABLE
        code <<= 1
    out[MAXCODE + 17] = 0x7FFFFFFF
    for i in range(n):
        out[SYMBOLS + i] = symbols[i]
    if not dc:
        _run_entries(&out[0])
    return S_OK


cdef void _run_entries(int32_t *t) noexcept nogil:
    """The run look-up of an AC table (see the twin's huffman_table)."""
    cdef int index, used, advance, eob, entry, sym, step
    for index in range(1 << RUN):
        used = advance = eob = 0
        while True:
            entry = t[((index << used) & ((1 << RUN) - 1)) >> (RUN - LOOK)]
            if entry == 0 or used + ((entry >> 5) & 31) > RUN:
                break
            sym = entry >> 16
            if sym & 15 == 0 and sym >> 4 != 15:
                used += (entry >> 5) & 31
                eob = 1
                break
            step = 16 if sym & 15 == 0 else (sym >> 4) + 1
            if advance + step > 63:
                break
            advance += step
            used += (entry >> 5) & 31
        t[RUNS + index] = (used | advance << 4 | eob << 11) if used else 0


@cython.boundscheck(False)
@cython.wraparound(False)
def decode_scan(
    const uint8_t[::1] data,
    Py_ssize_t start,
    Py_ssize_t end,
    int mode,
    int al,
    Py_ssize_t restart_interval,
    Py_ssize_t mcus_x,
    Py_ssize_t mcus_y,
    const int32_t[:, ::1] blocks,
    const int32_t[:, ::1] tables,
    int16_t[:, ::1] coef,
):
    """See the twin."""
    cdef Py_ssize_t nblocks = blocks.shape[0], total
    cdef int i, ov = 1, oh = 1, status
    cdef int slots[10]
    cdef int rows[10]
    cdef int cols[10]
    cdef int keep[10]
    cdef Py_ssize_t offsets[10]
    cdef const int32_t *dct[10]
    cdef const int32_t *act[10]
    cdef Bits b
    if not (0 <= start <= end <= data.shape[0]) or mode < 0 or mode > 2 or not (0 <= al <= 15):
        raise ValueError("decode_scan: bad scan arguments")
    if nblocks < 1 or nblocks > 10 or blocks.shape[1] != 6 or tables.shape[1] != WIDTH or mcus_x < 0 or mcus_y < 0:
        raise ValueError("decode_scan: bad block layout or tables")
    for i in range(nblocks):
        slots[i], rows[i], cols[i], keep[i] = blocks[i, 0], blocks[i, 1], blocks[i, 2], blocks[i, 5] != 0
        if not (0 <= slots[i] < 4 and 0 <= rows[i] < 4 and 0 <= cols[i] < 4):
            raise ValueError("decode_scan: bad block layout")
        if not (0 <= blocks[i, 3] < tables.shape[0] and 0 <= blocks[i, 4] < tables.shape[0]):
            raise ValueError("decode_scan: a block's table is out of range")
        dct[i] = &tables[blocks[i, 3], 0]
        act[i] = &tables[blocks[i, 4], 0]
        if keep[i]:
            ov = max(ov, rows[i] + 1)
            oh = max(oh, cols[i] + 1)
    if coef.shape[0] < mcus_y * ov or coef.shape[1] < mcus_x * oh:
        raise ValueError("decode_scan: the coefficient array is smaller than the scan")
    total = mcus_x * mcus_y
    if total == 0:
        return S_OK
    b.data = &data[0]
    b.pos = start
    b.end = end
    b.buf = 0
    b.cnt = 0
    b.pad = 0
    for i in range(nblocks):
        offsets[i] = rows[i] * coef.shape[1] + cols[i]
    with nogil:
        if mode == M_SEQUENTIAL:
            status = _decode_sequential(&b, al, restart_interval, mcus_x, total, nblocks, slots, offsets, keep, dct, act,
                                        &coef[0, 0], coef.shape[1], ov, oh)
        else:
            status = _decode_dc(&b, mode, al, restart_interval, mcus_x, total, nblocks, slots, rows, cols, keep, dct,
                             &coef[0, 0], coef.shape[1], ov, oh)
    return status


cdef int _decode_sequential(
    Bits *b, int al, Py_ssize_t restart_interval, Py_ssize_t mcus_x, Py_ssize_t total, Py_ssize_t nblocks,
    const int *slots, const Py_ssize_t *offsets, const int *keep, const int32_t **dct, const int32_t **act,
    int16_t *out, Py_ssize_t stride, int ov, int oh,
) noexcept nogil:
    """decode_scan's loop over the MCUs of a sequential scan, its arguments checked: each block's
    DC value, then its AC codes skipped."""
    cdef Py_ssize_t m, mx = 0, base = 0, i
    cdef int s, sym, k, number = 0, status
    cdef uint32_t pred[4]
    cdef uint32_t value
    cdef int32_t entry, run
    cdef const int32_t *table
    pred[0] = pred[1] = pred[2] = pred[3] = 0
    for m in range(total):
        if restart_interval and m and m % restart_interval == 0:
            status = _restart(b, number, pred)
            if status != S_OK:
                return status
            number += 1
        for i in range(nblocks):
            if b.cnt < 32:
                _fill(b)
            s = _symbol(b, dct[i])
            if s < 0:
                return S_BAD_CODE
            pred[slots[i]] += _dc_difference(b, s)
            if keep[i]:
                out[base + offsets[i]] = <int16_t><uint16_t>(pred[slots[i]] << al)
            table = act[i]
            k = 1
            while True:
                if b.cnt < 32:
                    _fill(b)
                run = table[RUNS + (b.buf >> (64 - RUN))]
                if run != 0 and k + ((run >> 4) & 127) < 64:  # whole codes, and the block goes on after them
                    _drop(b, run & 15)
                    if run >> 11:
                        break
                    k += (run >> 4) & 127
                    continue
                entry = table[b.buf >> (64 - LOOK)]
                if entry != 0:
                    _drop(b, (entry >> 5) & 31)  # the code and its extra bits
                    sym = entry >> 16
                else:
                    sym = _slow_symbol(b, table)
                    if sym < 0:
                        return S_BAD_CODE
                    _drop(b, sym & 15)
                if sym & 15:
                    k += (sym >> 4) + 1
                elif sym >> 4 != 15:
                    break
                else:
                    k += 16
                if k >= 64:
                    break
        if b.cnt - b.pad < 0:
            return S_SHORT  # past the data already (see the twin): no need to read zeros to the end
        mx += 1
        base += oh
        if mx == mcus_x:
            mx = 0
            base += stride * ov - oh * mcus_x
    return S_SHORT if b.cnt - b.pad < 0 else S_OK


cdef int _decode_dc(
    Bits *b, int mode, int al, Py_ssize_t restart_interval, Py_ssize_t mcus_x, Py_ssize_t total, Py_ssize_t nblocks,
    const int *slots, const int *rows, const int *cols, const int *keep, const int32_t **dct,
    int16_t *out, Py_ssize_t stride, int ov, int oh,
) noexcept nogil:
    """decode_scan's loop over the MCUs of a progressive DC scan, its arguments checked."""
    cdef Py_ssize_t m, mx = 0, my = 0, row, col
    cdef int i, s, number = 0, status
    cdef uint32_t pred[4]
    cdef uint32_t value
    pred[0] = pred[1] = pred[2] = pred[3] = 0
    for m in range(total):
        if restart_interval and m and m % restart_interval == 0:
            status = _restart(b, number, pred)
            if status != S_OK:
                return status
            number += 1
        for i in range(nblocks):
            if b.cnt < 32:
                _fill(b)
            if mode == M_DC_REFINE:
                value = <uint32_t>(b.buf >> 63)
                _drop(b, 1)
                if keep[i] and value:
                    row = my * ov + rows[i]
                    col = mx * oh + cols[i]
                    out[row * stride + col] = <int16_t>(<uint16_t>out[row * stride + col] | <uint16_t>(1 << al))
                continue
            s = _symbol(b, dct[i])
            if s < 0:
                return S_BAD_CODE
            pred[slots[i]] += _dc_difference(b, s)
            if keep[i]:
                out[(my * ov + rows[i]) * stride + mx * oh + cols[i]] = <int16_t><uint16_t>(pred[slots[i]] << al)
        if b.cnt - b.pad < 0:
            return S_SHORT
        mx += 1
        if mx == mcus_x:
            mx = 0
            my += 1
    return S_SHORT if b.cnt - b.pad < 0 else S_OK

"""Pure-Python twin of ``cext/_jpeg_c.pyx``: the specification of a JPEG scan's entropy decoding
for the DC coefficients of one component.

:func:`huffman_table` turns a DHT table into the lookup form both kernels read, and
:func:`decode_scan` reads one scan's entropy-coded bytes as libjpeg reads them (ITU T.81 F.2.2 and
G.1.2.1; libjpeg's ``jdhuff.c`` and ``jdphuff.c``) and keeps, of one component, the DC coefficient
of each block. The AC codes of a sequential scan are decoded only to be skipped. The compiled kernel
``fpstore._jpeg_c`` has the same functions with the same results, status included, on every input;
``tests/test_jpeg_dc.py`` compares them. :func:`fpstore.fingerprint.jpeg.eighth_scale_grey` parses
the file's markers, checks them and calls these.

The bits past the scan's data (its end, or a marker inside it) read as zeros, as libjpeg feeds
them; a scan that consumes any of them is reported as :data:`SHORT` at the end of that MCU, for
the caller to give the file to libjpeg, which has its own ways with broken data.
"""

from __future__ import annotations

import re

import numpy as np

__all__ = [
    "BAD_CODE",
    "BAD_RESTART",
    "BAD_TABLE",
    "DC_FIRST",
    "DC_REFINE",
    "LOOKAHEAD",
    "OK",
    "RUN_BITS",
    "SEQUENTIAL",
    "SHORT",
    "TABLE_WIDTH",
    "decode_scan",
    "huffman_table",
    "next_marker",
]

#: Codes of up to this many bits are decoded by one look-up of the next LOOKAHEAD bits.
LOOKAHEAD = 9
#: An AC table also skips, in one look-up of the next RUN_BITS bits, every whole code (with its
#: extra bits) that they hold.
RUN_BITS = 12
_MAXCODE = 1 << LOOKAHEAD  # int32 offsets of the parts of a table row
_VALOFFSET = _MAXCODE + 18
_SYMBOLS = _VALOFFSET + 18
_RUNS = _SYMBOLS + 256
#: int32 values in one table row: the look-up, maxcode[0..17], valoffset[0..17], 256 symbols, and
#: the run look-up (AC tables).
TABLE_WIDTH = _RUNS + (1 << RUN_BITS)

#: decode_scan's modes: a sequential scan (DC and AC codes; the AC skipped), a progressive scan's
#: first DC scan (``Ah`` 0), a progressive DC refinement (one bit a block).
SEQUENTIAL, DC_FIRST, DC_REFINE = 0, 1, 2
#: decode_scan's and huffman_table's results.
OK, BAD_CODE, SHORT, BAD_RESTART, BAD_TABLE = 0, 1, 2, 3, 4


#: A marker after entropy-coded data: 0xFF followed by anything but a stuffed 0x00, a restart
#: marker (0xD0..0xD7, part of the scan) or a fill byte.
_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")


def next_marker(data: bytes, start: int) -> int:
    """Where the entropy-coded data from ``start`` ends: the position of the next marker that is
    not a restart marker (its 0xFF; after any fill bytes), or ``len(data)``."""
    found = _MARKER.search(data, start)
    return found.start() if found else len(data)


def huffman_table(counts: bytes, symbols: bytes, dc: bool, out: np.ndarray) -> int:
    """Fill ``out`` (int32[TABLE_WIDTH]) from a DHT table: ``counts`` the 16 numbers of codes of
    each length, ``symbols`` their symbols in order (``sum(counts)`` of them, at most 256).
    BAD_TABLE (``out`` then undefined) where libjpeg's ``jpeg_make_d_derived_tbl`` refuses the
    table: the lengths overflow their code space, or a DC symbol is above 15.

    Look-up entry of the next LOOKAHEAD bits: 0 when no code of at most LOOKAHEAD bits starts
    them, else ``length | (length + extra bits) << 5 | symbol << 16``, where the extra bits are
    the symbol's low four (the value bits after a DC code, or after an AC code).

    Run entry of the next RUN_BITS bits (AC tables): the codes, each with its extra bits, that
    they hold whole, read up to and including an end of block, as ``bits | advance << 4 | eob <<
    11``: the bits they take, how far they move the coefficient index (r + 1 for a coefficient,
    16 for ZRL; at most 63), and whether the last is an end of block; 0 when no whole code fits."""
    if len(counts) != 16 or len(symbols) != sum(counts) or len(symbols) > 256:
        return BAD_TABLE
    if dc and any(s > 15 for s in symbols):
        return BAD_TABLE
    out[:] = 0
    code = p = 0
    for length in range(1, 17):
        n = counts[length - 1]
        if n:
            out[_VALOFFSET + length] = p - code
            for _ in range(n):
                if length <= LOOKAHEAD:
                    s = symbols[p]
                    entry = length | ((length + (s & 15)) << 5) | (s << 16)
                    first = code << (LOOKAHEAD - length)
                    out[first : first + (1 << (LOOKAHEAD - length))] = entry
                code += 1
                p += 1
            out[_MAXCODE + length] = code - 1
        else:
            out[_MAXCODE + length] = -1
        # No code may be all ones (libjpeg: "code is now 1 more than the last code used for
        # codelength si; but it must still fit in si bits").
        if code >= (1 << length):
            return BAD_TABLE
        code <<= 1
    out[_MAXCODE + 17] = 0x7FFFFFFF  # sentinel: every 17-bit prefix is past the last code
    out[_SYMBOLS : _SYMBOLS + len(symbols)] = np.frombuffer(symbols, dtype=np.uint8)
    if not dc:
        for index in range(1 << RUN_BITS):
            out[_RUNS + index] = _run_entry(out, index)
    return OK


def _run_entry(table: np.ndarray, index: int) -> int:
    """The run entry of the RUN_BITS bits ``index`` (see :func:`huffman_table`)."""
    used = advance = eob = 0
    mask = (1 << RUN_BITS) - 1
    while True:
        entry = int(table[((index << used) & mask) >> (RUN_BITS - LOOKAHEAD)])  # zeros after the run's bits
        if entry == 0 or used + ((entry >> 5) & 31) > RUN_BITS:
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
    return used | advance << 4 | eob << 11 if used else 0


class _Bits:
    """The bit reader: bytes of data[pos:end] with stuffed 0xFF 0x00 read as 0xFF; at a marker (or
    at ``end``) it stops and feeds zeros, counted in ``pad``."""

    def __init__(self, data: bytes, pos: int, end: int) -> None:
        self.data, self.pos, self.end = data, pos, end
        self.buf = self.cnt = self.pad = 0

    def fill(self, need: int) -> None:
        data, end = self.data, self.end
        while self.cnt < need:
            byte = 0
            pos = self.pos
            if pos < end:
                byte = data[pos]
                if byte != 0xFF:
                    self.pos = pos + 1
                else:
                    nxt = pos + 1
                    while nxt < end and data[nxt] == 0xFF:  # fill bytes before a marker, as libjpeg skips them
                        nxt += 1
                    if nxt < end and data[nxt] == 0:
                        self.pos = nxt + 1  # a stuffed 0xFF
                    else:
                        byte = 0  # a marker: stay before it, read zeros
                        self.pad += 8
            else:
                self.pad += 8
            self.buf = (self.buf << 8) | byte
            self.cnt += 8

    def peek(self, n: int) -> int:
        self.fill(n)
        return (self.buf >> (self.cnt - n)) & ((1 << n) - 1)

    def drop(self, n: int) -> None:
        self.cnt -= n
        self.buf &= (1 << self.cnt) - 1

    def take(self, n: int) -> int:
        value = self.peek(n)
        self.drop(n)
        return value

    def real(self) -> int:
        """Bits of data left in the buffer; negative when the reads went past the data."""
        return self.cnt - self.pad


def _symbol(bits: _Bits, table: np.ndarray) -> int:
    """The next Huffman symbol, or -1 (no code of up to 16 bits matches)."""
    entry = int(table[bits.peek(LOOKAHEAD)])
    if entry:
        bits.drop(entry & 31)
        return entry >> 16
    for length in range(LOOKAHEAD + 1, 17):
        code = bits.peek(length)
        if code <= table[_MAXCODE + length]:
            bits.drop(length)
            return int(table[_SYMBOLS + ((code + int(table[_VALOFFSET + length])) & 0xFF)])
    return -1


def _extend(value: int, s: int) -> int:
    """T.81 F.12: an s-bit value read after a code, as a signed number."""
    return value if value >= 1 << (s - 1) else value - (1 << s) + 1


def _int16(value: int) -> int:
    """The low 16 bits, two's complement (libjpeg's JCOEF)."""
    return ((value + 0x8000) & 0xFFFF) - 0x8000


def decode_scan(
    data: bytes,
    start: int,
    end: int,
    mode: int,
    al: int,
    restart_interval: int,
    mcus_x: int,
    mcus_y: int,
    blocks: np.ndarray,
    tables: np.ndarray,
    coef: np.ndarray,
) -> int:
    """Decode the scan whose entropy-coded bytes are ``data[start:end]``; OK or a failure status.

    ``blocks`` (int32[b, 6]) describes the b blocks of one MCU in order: (component slot in the
    scan 0..3, row and column of the block in its MCU, DC table row, AC table row of ``tables``,
    1 if the block's DC is kept). A kept block of MCU (mx, my) is ``coef[my * ov + row, mx * oh +
    col]``, where (ov, oh) are the largest row and column + 1 of the kept blocks. ``mode``:
    SEQUENTIAL (the coefficient is the DC value), DC_FIRST (the DC value shifted left by ``al``),
    DC_REFINE (a bit per block, ORed in at ``al``). ``restart_interval``: MCUs between restart
    markers (0: none); the markers must be RST0..RST7 in turn with nothing before them but the
    last byte's padding (else BAD_RESTART)."""
    _check_arguments(data, start, end, mode, al, mcus_x, mcus_y, blocks, tables, coef)
    kept = blocks[blocks[:, 5] != 0]
    ov = int(kept[:, 1].max()) + 1 if len(kept) else 1
    oh = int(kept[:, 2].max()) + 1 if len(kept) else 1
    bits = _Bits(data, start, end)
    pred = [0, 0, 0, 0]
    rst = 0
    total = mcus_x * mcus_y
    for m in range(total):
        if restart_interval and m and m % restart_interval == 0:
            status = _restart(bits)
            if status != OK:
                return status
            if bits.data[bits.pos] != 0xD0 + (rst & 7):  # _restart left pos at the marker's code
                return BAD_RESTART
            bits.pos += 1
            rst += 1
            pred = [0, 0, 0, 0]
        my, mx = divmod(m, mcus_x)
        for slot, row, col, dc_row, ac_row, keep in blocks.tolist():
            if mode == DC_REFINE:
                value = bits.take(1)
                if keep and value:
                    r, c = my * ov + row, mx * oh + col
                    coef[r, c] = _int16(int(coef[r, c]) | (1 << al))
                continue
            s = _symbol(bits, tables[dc_row])
            if s < 0:
                return BAD_CODE
            diff = _extend(bits.take(s), s) if s else 0
            pred[slot] = (pred[slot] + diff) & 0xFFFFFFFF
            if keep:
                coef[my * ov + row, mx * oh + col] = _int16(pred[slot] << al)
            if mode == SEQUENTIAL:
                k = 1
                while k < 64:
                    run = int(tables[ac_row][_RUNS + bits.peek(RUN_BITS)])
                    if run and k + ((run >> 4) & 127) < 64:  # whole codes, and the block goes on after them
                        bits.drop(run & 15)
                        if run >> 11:
                            break
                        k += (run >> 4) & 127
                        continue
                    sym = _symbol(bits, tables[ac_row])
                    if sym < 0:
                        return BAD_CODE
                    r, s = sym >> 4, sym & 15
                    if s:
                        k += r
                        bits.take(s)
                    elif r != 15:
                        break
                    else:
                        k += 15
                    k += 1
        if bits.real() < 0:
            # Past the data: nothing after (zeros, until a restart or the end) can undo it, so the
            # scan is SHORT now, not after reading zeros for what may be millions of blocks.
            return SHORT
    return OK


def _check_arguments(
    data: bytes,
    start: int,
    end: int,
    mode: int,
    al: int,
    mcus_x: int,
    mcus_y: int,
    blocks: np.ndarray,
    tables: np.ndarray,
    coef: np.ndarray,
) -> None:
    """ValueError unless the scan's reads and writes stay inside the buffers given (the compiled
    kernel's checks, which keep its memory safe)."""
    if not (0 <= start <= end <= len(data)) or not 0 <= mode <= 2 or not 0 <= al <= 15:
        raise ValueError("decode_scan: bad scan arguments")
    if not 1 <= len(blocks) <= 10 or blocks.shape[1] != 6 or tables.shape[1] != TABLE_WIDTH or mcus_x < 0 or mcus_y < 0:
        raise ValueError("decode_scan: bad block layout or tables")
    ov = oh = 1
    for slot, row, col, dc_row, ac_row, keep in blocks.tolist():
        if not (0 <= slot < 4 and 0 <= row < 4 and 0 <= col < 4):
            raise ValueError("decode_scan: bad block layout")
        if not (0 <= dc_row < len(tables) and 0 <= ac_row < len(tables)):
            raise ValueError("decode_scan: a block's table is out of range")
        if keep:
            ov, oh = max(ov, row + 1), max(oh, col + 1)
    if coef.shape[0] < mcus_y * ov or coef.shape[1] < mcus_x * oh:
        raise ValueError("decode_scan: the coefficient array is smaller than the scan")


def _restart(bits: _Bits) -> int:
    """Check the end of a restart interval and move to the marker's code byte (the caller checks
    its number): SHORT if the interval read past its data, BAD_RESTART if whole bytes are left
    before the marker or no marker follows."""
    real = bits.real()
    if real < 0:
        return SHORT
    if real >= 8:
        return BAD_RESTART
    pos, end, data = bits.pos, bits.end, bits.data
    if pos >= end or data[pos] != 0xFF:
        return BAD_RESTART
    while pos < end and data[pos] == 0xFF:
        pos += 1
    if pos >= end:
        return BAD_RESTART
    bits.pos = pos
    bits.buf = bits.cnt = bits.pad = 0
    return OK

"""The part of a progressive JPEG that a decode at 1/8 scale reads.

At 1/8 scale libjpeg computes each output pixel from its 8×8 block's DC coefficient alone (its
1×1 inverse DCT). A baseline JPEG interleaves DC and AC codes in one scan, so the decoder reads
everything anyway; a progressive JPEG sends the DC coefficients in scans of their own, first, and
those hold about an eighth of the file's bytes. :func:`dc_scans` rewrites such a file into one with
the same frame, tables and DC scans, and, for each component, one AC scan that says "every AC
coefficient is 0" in a few bytes (end-of-band runs). Decoded at 1/8, it gives the same pixels as the
whole file (``tests/test_image_pipeline.py`` checks it, pixel for pixel), about five times faster.

The AC scans are there so that the decoder knows every coefficient: with AC coefficients missing,
libjpeg's block smoothing would estimate them from the neighbouring DC values and change the
result.

The input is untrusted: every length is checked against the data before it is used, and anything
this module does not recognise (another frame type, a precision other than 8 bits, a marker
out of place) returns None, for the caller to decode the file as it is. The bytes it returns go to
libjpeg like any other input.
"""

from __future__ import annotations

import re

__all__ = ["dc_scans"]

#: A marker after entropy-coded data: 0xFF followed by anything but a stuffed 0x00, a restart
#: marker (0xD0..0xD7, part of the scan) or a fill byte.
_NEXT_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")
_SOI, _EOI = b"\xff\xd8", b"\xff\xd9"
_SOF_PROGRESSIVE = 0xC2  # progressive DCT, Huffman coding
_SOF_OTHERS = frozenset(range(0xC0, 0xD0)) - {0xC2, 0xC4, 0xC8, 0xCC}  # other frames; DHT, JPG, DAC are not frames
_SOS, _EOI_MARKER = 0xDA, 0xD9
#: The most blocks one end-of-band run covers (EOB14 with 14 extra bits).
_MAX_EOB_RUN = 32767


def _eob_table() -> bytes:
    """A DHT segment: AC table 0 with the 15 symbols EOB0..EOB14 (``r << 4``), symbol r coded as
    the 4-bit number r (canonical Huffman codes of 15 symbols of length 4)."""
    body = bytes([0x10]) + bytes([0, 0, 0, 15] + [0] * 12) + bytes(r << 4 for r in range(15))
    return b"\xff\xc4" + (2 + len(body)).to_bytes(2, "big") + body


_EOB_TABLE = _eob_table()
#: DRI with interval 0: the AC scans below have no restart markers, whatever the file used.
_NO_RESTARTS = b"\xff\xdd\x00\x04\x00\x00"


def _all_zero_ac_scan(component: int, blocks: int) -> bytes:
    """A first AC scan (Ss 1, Se 63, Al 0) of one component whose ``blocks`` blocks all end at
    once: end-of-band runs of up to 32,767 blocks each."""
    acc = nbits = 0
    out = bytearray()
    left = blocks
    while left:
        run = min(left, _MAX_EOB_RUN)
        r = run.bit_length() - 1
        # The symbol EOBr (code r, 4 bits), then the run's r low bits.
        acc, nbits = (acc << (4 + r)) | (r << r) | (run - (1 << r)), nbits + 4 + r
        left -= run
        while nbits >= 8:
            nbits -= 8
            out.append((acc >> nbits) & 0xFF)
            if out[-1] == 0xFF:
                out.append(0)  # byte stuffing
        acc &= (1 << nbits) - 1
    if nbits:
        out.append(((acc << (8 - nbits)) | ((1 << (8 - nbits)) - 1)) & 0xFF)  # padded with 1 bits
        if out[-1] == 0xFF:
            out.append(0)
    return bytes([0xFF, _SOS, 0, 8, 1, component, 0x00, 1, 63, 0x00]) + bytes(out)


def dc_scans(data: bytes) -> bytes | None:
    """``data`` (a progressive JPEG) with its AC scans replaced by scans of zeros, or None when
    ``data`` is not a progressive, 8-bit, Huffman-coded JPEG this function can follow."""
    n = len(data)
    if n < 4 or data[:2] != _SOI:
        return None
    out = [_SOI]
    pos = 2
    frame: tuple[int, int, list[tuple[int, int, int]]] | None = None
    dc = 0
    while True:
        if pos + 2 > n:
            return None  # no EOI
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte before a marker
            pos += 1
            continue
        if marker == _EOI_MARKER:
            break
        if pos + 4 > n:
            return None
        length = int.from_bytes(data[pos + 2 : pos + 4], "big")
        end = pos + 2 + length
        if length < 2 or end > n:
            return None
        if marker in _SOF_OTHERS:
            return None
        if marker == _SOF_PROGRESSIVE:
            nf = data[pos + 9] if length >= 8 else 0
            if frame is not None or nf == 0 or length != 8 + 3 * nf or data[pos + 4] != 8:
                return None
            height, width = int.from_bytes(data[pos + 5 : pos + 7], "big"), int.from_bytes(data[pos + 7 : pos + 9], "big")
            comps = [(data[pos + 10 + 3 * i], data[pos + 11 + 3 * i] >> 4, data[pos + 11 + 3 * i] & 15) for i in range(nf)]
            if width == 0 or height == 0 or any(h == 0 or v == 0 for _, h, v in comps):
                return None
            frame = (width, height, comps)
        if marker == _SOS:
            ns = data[pos + 4] if length >= 3 else 0
            if frame is None or ns == 0 or length != 6 + 2 * ns:
                return None
            first, last = data[end - 3], data[end - 2]
            following = _NEXT_MARKER.search(data, end)
            scan_end = following.start() if following else n
            if first == 0 and last == 0:  # a DC scan (first or refinement): kept whole
                out.append(data[pos:scan_end])
                dc += 1
            pos = scan_end
            continue
        out.append(data[pos:end])  # tables, restart interval, application data: kept
        pos = end
    if frame is None or dc == 0:
        return None
    width, height, comps = frame
    hmax, vmax = max(h for _, h, _ in comps), max(v for _, _, v in comps)
    out += [_NO_RESTARTS, _EOB_TABLE]
    for component, h, v in comps:
        # A non-interleaved scan covers the component's own samples, in whole blocks.
        cols, rows = -(-width * h // hmax), -(-height * v // vmax)
        out.append(_all_zero_ac_scan(component, -(-cols // 8) * -(-rows // 8)))
    out.append(_EOI)
    return b"".join(out)

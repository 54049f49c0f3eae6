"""What a JPEG decode at 1/8 scale reads: a file's DC coefficients.

At 1/8 scale libjpeg computes each output pixel of a full-resolution component from its 8×8
block's DC coefficient alone (its 1×1 inverse DCT). A baseline JPEG interleaves DC and AC codes in
one scan, so the decoder reads everything anyway; a progressive JPEG sends the DC coefficients in
scans of their own, and those hold about an eighth of the file's bytes. :func:`dc_scans` rewrites
such a file into one with the same frame, tables and DC scans, the AC scans of any needed
component that decodes to larger blocks at 1/8 (a subsampled one), and, for every other component,
one AC scan that says "every AC coefficient is 0" in a few bytes (end-of-band runs). Decoded at
1/8, it gives the same pixels as the whole file (``tests/test_jpeg_dc_scans.py`` checks it, pixel
for pixel), about four times faster.

The AC scans are there so that the decoder knows every coefficient: with AC coefficients missing,
libjpeg's block smoothing would estimate them from the neighbouring DC values and change the
result.

:func:`eighth_scale_grey` goes further: it decodes the luma's DC coefficients itself (the entropy
decoding in the compiled kernel ``fpstore._jpeg_c``) and gives the grey image libjpeg gives at 1/8
scale, the same bytes, for baseline and progressive files, without libjpeg. A baseline file's AC
codes must still be read to find each block's end, but only their lengths count: nothing is stored,
dequantised or transformed.

The input is untrusted: every length is checked against the data before it is used, and anything
this module does not recognise (another frame type, a precision other than 8 bits, a marker
out of place, a scan that does not decode cleanly) returns None, for the caller to give the file to
libjpeg as it is. The bytes :func:`dc_scans` returns go to libjpeg like any other input.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from fpstore import _backend

__all__ = ["dc_scans", "eighth_scale_grey"]

_kernel = _backend.load("jpeg")

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


def _scaled_block(h: int, v: int, hmax: int, vmax: int) -> int:
    """The size of the block a component of sampling factors ``h`` × ``v`` decodes to at 1/8
    scale: libjpeg doubles it while the frame's largest factors are multiples of twice it (a
    4:2:0 chroma component gets 2×2, which reads AC coefficients), up to 8."""
    size = 1
    while size < 8 and hmax % (h * size * 2) == 0 and vmax % (v * size * 2) == 0:
        size *= 2
    return size


def _colour_markers(data: bytes, marker: int, body: int, end: int, jfif: bool, adobe_transform: int | None) -> tuple[bool, int | None]:
    """``(jfif, adobe_transform)`` after the segment data[body:end] of ``marker``, by libjpeg's own
    tests: a JFIF APP0 of at least 14 bytes; an Adobe APP14 of at least 12, its transform the 12th."""
    if marker == 0xE0 and end - body >= 14 and data[body : body + 5] == b"JFIF\x00":
        return True, adobe_transform
    if marker == 0xEE and end - body >= 12 and data[body : body + 5] == b"Adobe":
        return jfif, data[body + 11]
    return jfif, adobe_transform


def _ycbcr(comps: list[tuple[int, int, int]], jfif: bool, adobe_transform: int | None) -> bool:
    """Whether libjpeg reads a 3-component frame as YCbCr (``default_decompress_parms``): a JFIF
    marker says so; an Adobe marker says so unless its transform is 0 (RGB); without either,
    component ids R, G, B mean RGB and anything else YCbCr."""
    if len(comps) != 3:
        return False
    if jfif:
        return True
    if adobe_transform is not None:
        return adobe_transform != 0
    return [c for c, _, _ in comps] != [ord("R"), ord("G"), ord("B")]


def dc_scans(data: bytes, grey: bool = False) -> bytes | None:
    """``data`` (a progressive JPEG) with its AC scans replaced by scans of zeros, or None when
    ``data`` is not a progressive, 8-bit, Huffman-coded JPEG this function can follow. ``grey``:
    the decode asks for grey output (then only the luma component of a YCbCr file is decoded).

    Two kinds of file keep more, or are left whole, because their pixels at 1/8 depend on AC
    coefficients: a component the output needs that decodes to blocks larger than 1×1 at 1/8
    (one sampled less than the frame's largest factors in both directions, such as the G and B of
    an RGB file sampled 2×2, 1×1, 1×1) keeps its own AC scans; and a file in which some
    component's AC coefficients do not all reach full precision returns None (libjpeg then
    estimates the missing ones, and smooths the DC, from the neighbouring blocks)."""
    n = len(data)
    if n < 4 or data[:2] != _SOI:
        return None
    out: list[bytes | tuple[int, bytes]] = [_SOI]  # (component, scan) for an AC scan, decided at the end
    pos = 2
    frame: tuple[int, int, list[tuple[int, int, int]]] | None = None
    dc = 0
    #: per component id, the precision (Al) each AC coefficient 1..63 has reached; None: not sent
    precision: dict[int, list[int | None]] = {}
    jfif, adobe_transform = False, None  # what decides a 3-component frame's colour space
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
            precision = {c: [None] * 64 for c, _, _ in comps}
        if marker == _SOS:
            ns = data[pos + 4] if length >= 3 else 0
            if frame is None or ns == 0 or length != 6 + 2 * ns:
                return None
            first, last, al = data[end - 3], data[end - 2], data[end - 1] & 15
            scan_end = _kernel.next_marker(data, end)
            if first == 0 and last == 0:  # a DC scan (first or refinement): kept whole
                out.append(data[pos:scan_end])
                dc += 1
            elif ns == 1 and 1 <= first <= last <= 63 and data[pos + 5] in precision:
                component = data[pos + 5]
                for coefficient in range(first, last + 1):
                    precision[component][coefficient] = al
                out.append((component, data[pos:scan_end]))
            else:
                return None  # an AC scan of several components, or of no known component: not JPEG
            pos = scan_end
            continue
        jfif, adobe_transform = _colour_markers(data, marker, pos + 4, end, jfif, adobe_transform)
        out.append(data[pos:end])  # tables, restart interval, application data: kept
        pos = end
    if frame is None or dc == 0:
        return None
    if any(p != 0 for bands in precision.values() for p in bands[1:]):
        return None  # some AC coefficient never sent, or not to full precision
    width, height, comps = frame
    hmax, vmax = max(h for _, h, _ in comps), max(v for _, _, v in comps)
    # The components the output needs: grey from YCbCr (or from a grey file) reads only the first.
    needed = comps[:1] if grey and (len(comps) == 1 or _ycbcr(comps, jfif, adobe_transform)) else comps
    keep = {c for c, h, v in needed if _scaled_block(h, v, hmax, vmax) > 1}
    kept = [part if isinstance(part, bytes) else part[1] for part in out if isinstance(part, bytes) or part[0] in keep]
    kept += [_NO_RESTARTS, _EOB_TABLE]
    for component, h, v in comps:
        if component in keep:
            continue
        # A non-interleaved scan covers the component's own samples, in whole blocks.
        cols, rows = -(-width * h // hmax), -(-height * v // vmax)
        kept.append(_all_zero_ac_scan(component, -(-cols // 8) * -(-rows // 8)))
    kept.append(_EOI)
    return b"".join(kept)


_DHT, _DQT, _DRI = 0xC4, 0xDB, 0xDD
_SOF_SEQUENTIAL = (0xC0, 0xC1)  # baseline and extended sequential, Huffman coding
#: Markers skipped by their length: APP0..APP15 and COM.
_SKIPPED = frozenset(range(0xE0, 0xF0)) | {0xFE}
#: libjpeg's post-IDCT range limit (``prepare_range_limit_table``) indexed by a descaled DC value
#: masked to 10 bits: 0..127 are +128, up to 511 saturate at 255, up to 895 at 0, the rest wrap.
_RANGE_LIMIT = np.concatenate([np.arange(128, 256), np.full(384, 255), np.zeros(384), np.arange(0, 128)]).astype(np.uint8)


def _huffman_specs(data: bytes, pos: int, end: int, specs: dict[int, tuple[bytes, bytes]]) -> bool:
    """Record the tables of the DHT segment data[pos:end] as (counts, symbols) by ``class * 4 + id``
    (built when a scan first needs them: a progressive file's AC tables never are)."""
    while pos < end:
        if pos + 17 > end:
            return False
        tc, th = data[pos] >> 4, data[pos] & 15
        counts = data[pos + 1 : pos + 17]
        count = sum(counts)
        if tc > 1 or th > 3 or count > 256 or pos + 17 + count > end:
            return False
        specs[tc * 4 + th] = (counts, data[pos + 17 : pos + 17 + count])
        pos += 17 + count
    return True


def _codes_fit(counts: bytes) -> bool:
    """libjpeg's test of a Huffman table's code lengths (``jpeg_make_d_derived_tbl``): the codes
    of each length fit in that many bits, none of them all ones."""
    code = 0
    for length, count in enumerate(counts, 1):
        code += count
        if code >= 1 << length:
            return False
        code <<= 1
    return True


@functools.lru_cache(maxsize=64)
def _huffman_table(counts: bytes, symbols: bytes, dc: bool) -> np.ndarray | None:
    """A table in the kernel's form, or None if libjpeg would refuse it. Cached: the files of one
    encoder mostly share theirs (the standard tables of T.81 K.3, above all)."""
    table = np.zeros(_kernel.TABLE_WIDTH, dtype=np.int32)
    if _kernel.huffman_table(counts, symbols, dc, table) != _kernel.OK:
        return None
    table.flags.writeable = False
    return table


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _quant_dc(data: bytes, pos: int, end: int, dc: dict[int, int]) -> bool:
    """Record each table's DC quantiser (its first value) of the DQT segment data[pos:end]."""
    while pos < end:
        pq, tq = data[pos] >> 4, data[pos] & 15
        size = 64 << pq
        if pq > 1 or tq > 3 or pos + 1 + size > end:
            return False
        dc[tq] = int.from_bytes(data[pos + 1 : pos + 2 + pq], "big")
        pos += 1 + size
    return True


@dataclasses.dataclass
class _Frame:
    """A frame header (SOF): its kind, size and components, each (id, h, v, quantisation table)."""

    progressive: bool
    width: int
    height: int
    components: list[tuple[int, int, int, int]]

    @property
    def hmax(self) -> int:
        return max(c[1] for c in self.components)

    @property
    def vmax(self) -> int:
        return max(c[2] for c in self.components)


def _frame(data: bytes, body: int, length: int, progressive: bool) -> _Frame | None:
    """The SOF segment at ``body`` (after its length), if 8-bit and well formed."""
    nf = data[body + 5] if length >= 8 else 0
    if nf == 0 or length != 8 + 3 * nf or data[body] != 8:
        return None
    height, width = int.from_bytes(data[body + 1 : body + 3], "big"), int.from_bytes(data[body + 3 : body + 5], "big")
    at = range(body + 6, body + 6 + 3 * nf, 3)
    components = [(data[i], data[i + 1] >> 4, data[i + 1] & 15, data[i + 2]) for i in at]
    if width == 0 or height == 0 or len({c[0] for c in components}) != nf:
        return None
    if any(not (1 <= h <= 4 and 1 <= v <= 4) or tq > 3 for _, h, v, tq in components):
        return None
    return _Frame(progressive, width, height, components)


class _LumaDc:
    """What :func:`eighth_scale_grey` has read of a file so far: the tables, the frame, and the
    luma's DC coefficients. Each method returns False (or None) for a file it does not follow."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.tables = np.zeros((8, _kernel.TABLE_WIDTH), dtype=np.int32)
        self.specs: dict[int, tuple[bytes, bytes]] = {}  # the DHT tables defined, by row of ``tables``
        self.built: dict[int, tuple[bytes, bytes]] = {}  # what each row of ``tables`` holds now
        self.quant: dict[int, int] = {}  # DC quantiser by table id
        self.latched: dict[int, int] = {}  # by component id: fixed at its first scan, as libjpeg latches it
        self.restart = 0
        self.jfif = False  # with the Adobe transform, what decides a 3-component frame's colour space
        self.adobe_transform: int | None = None
        self.frame: _Frame | None = None
        self.coef: np.ndarray | None = None  # the luma's DC coefficients, in its blocks
        self.luma = -1
        self.dc_precision: dict[int, int] = {}  # by component id: the Al its DC has reached
        self.ac_precision: dict[int, list[int | None]] = {}  # by component id: each AC coefficient's
        self.sequential_done = False

    def segment(self, marker: int, body: int, end: int) -> bool:
        """A marker segment other than a scan: data[body:end] after its length."""
        data = self.data
        if marker in _SKIPPED:
            self.jfif, self.adobe_transform = _colour_markers(data, marker, body, end, self.jfif, self.adobe_transform)
            return True
        if marker == _DHT:
            return _huffman_specs(data, body, end, self.specs)
        if marker == _DQT:
            return _quant_dc(data, body, end, self.quant)
        if marker == _DRI:
            self.restart = int.from_bytes(data[body : body + 2], "big")
            return end - body == 2
        if marker in _SOF_SEQUENTIAL or marker == _SOF_PROGRESSIVE:
            if self.frame is not None:
                return False
            self.frame = _frame(data, body, end - body + 2, marker == _SOF_PROGRESSIVE)
            if self.frame is None:
                return False
            self.ac_precision = {c[0]: [None] * 64 for c in self.frame.components}
            return True
        return False  # another frame type, DNL, arithmetic coding, a marker out of place

    def scan(self, body: int, end: int) -> int | None:
        """The SOS segment data[body:end] and its entropy-coded data: where the data ends."""
        data, frame = self.data, self.frame
        ns = data[body] if end > body else 0
        if frame is None or not 1 <= ns <= 4 or end - body != 4 + 2 * ns:
            return None
        ss, se, ah, al = data[end - 3], data[end - 2], data[end - 1] >> 4, data[end - 1] & 15
        scan_end: int = _kernel.next_marker(data, end)
        by_id = {c[0]: c for c in frame.components}
        at = range(body + 1, body + 1 + 2 * ns, 2)
        members = [(data[i], data[i + 1] >> 4, data[i + 1] & 15) for i in at]  # (component, DC table, AC table)
        if len({m[0] for m in members}) != ns or any(m[0] not in by_id for m in members):
            return None
        if self.coef is None and not self._start(frame):
            return None
        for cid, _, _ in members:
            if cid not in self.latched:
                if by_id[cid][3] not in self.quant:
                    return None
                self.latched[cid] = self.quant[by_id[cid][3]]
        if ss != 0:  # a progressive AC scan: not read, but its coefficients must all arrive
            if not (frame.progressive and ns == 1 and ss <= se <= 63 and al <= 13) or (ah and al != ah - 1):
                return None
            # libjpeg builds the scan's table before it reads the scan, and stops if it cannot.
            ta = members[0][2]
            spec = self.specs.get(4 + ta) if ta <= 3 else None
            if spec is None or not _codes_fit(spec[0]):
                return None
            bands = self.ac_precision[members[0][0]]
            for coefficient in range(ss, se + 1):
                bands[coefficient] = al
            return scan_end
        if frame.progressive:
            if se != 0 or al > 13:
                return None
            for cid, _, _ in members:
                first = self.dc_precision.get(cid) is None
                if first != (ah == 0) or (not first and (self.dc_precision[cid] != ah or al != ah - 1)):
                    return None
                self.dc_precision[cid] = al
            mode = _kernel.DC_FIRST if ah == 0 else _kernel.DC_REFINE
        else:
            # One scan of every component, as encoders write them (scans of some components are
            # allowed, but no file at hand tests them against libjpeg).
            if se != 63 or ah or al or self.sequential_done or ns != len(frame.components):
                return None
            mode = _kernel.SEQUENTIAL
            self.sequential_done = True
        layout = []
        for slot, (cid, td, ta) in enumerate(members):
            # The tables this scan reads (a DC refinement none, a first DC scan its DC table): the
            # other selectors may hold anything, as libjpeg never looks at them.
            reads_dc, reads_ac = mode != _kernel.DC_REFINE, mode == _kernel.SEQUENTIAL
            if (reads_dc and td > 3) or (reads_ac and ta > 3):
                return None
            dc_row, ac_row = (td if reads_dc else 0), (4 + ta if reads_ac else 0)
            if (reads_dc and not self._table(dc_row)) or (reads_ac and not self._table(ac_row)):
                return None
            h, v = (1, 1) if ns == 1 else by_id[cid][1:3]  # a scan of one component: one block an MCU
            layout += [(slot, row, col, dc_row, ac_row, cid == self.luma) for row in range(v) for col in range(h)]
        if len(layout) > 10:
            return None
        if ns == 1:  # the component's own blocks: its samples (rounded up) in blocks of 8
            _, h, v, _ = by_id[members[0][0]]
            mcus_x, mcus_y = _ceil(_ceil(frame.width * h, frame.hmax), 8), _ceil(_ceil(frame.height * v, frame.vmax), 8)
        else:
            mcus_x, mcus_y = _ceil(frame.width, 8 * frame.hmax), _ceil(frame.height, 8 * frame.vmax)
        blocks = np.array(layout, dtype=np.int32)
        status = _kernel.decode_scan(data, end, scan_end, mode, al, self.restart, mcus_x, mcus_y, blocks, self.tables, self.coef)
        return scan_end if status == _kernel.OK else None

    def _start(self, frame: _Frame) -> bool:
        """At the first scan (libjpeg has fixed the colour space by then): the luma, if followed."""
        components = frame.components
        ycbcr = _ycbcr([c[:3] for c in components], self.jfif, self.adobe_transform)
        if not (len(components) == 1 or ycbcr) or components[0][1:3] != (frame.hmax, frame.vmax):
            return False
        self.luma = components[0][0]
        rows, cols = _ceil(frame.height, 8 * frame.vmax) * frame.vmax, _ceil(frame.width, 8 * frame.hmax) * frame.hmax
        self.coef = np.zeros((rows, cols), dtype=np.int16)
        return True

    def _table(self, row: int) -> bool:
        """Table ``row`` of ``tables`` built from the DHT table in force, if it is defined and valid."""
        spec = self.specs.get(row)
        if spec is None:
            return False
        if self.built.get(row) != spec:
            table = _huffman_table(*spec, row < 4)
            if table is None:
                return False
            self.tables[row] = table
            self.built[row] = spec
        return True

    def grey(self) -> np.ndarray | None:
        """At EOI: the pixels, if the luma's DC (and, progressive, every AC coefficient) arrived."""
        frame, coef = self.frame, self.coef
        if frame is None or coef is None:
            return None
        if frame.progressive:
            if self.dc_precision.get(self.luma) != 0 or any(p != 0 for bands in self.ac_precision.values() for p in bands[1:]):
                return None
        elif not self.sequential_done:
            return None
        q = self.latched[self.luma]
        if q > 0x7FFF:
            return None  # libjpeg keeps the quantiser as a 16-bit signed number; not followed
        blocks = coef[: _ceil(frame.height, 8), : _ceil(frame.width, 8)].astype(np.int32)
        return np.take(_RANGE_LIMIT, ((blocks * q + 4) >> 3) & 1023)


def eighth_scale_grey(data: bytes) -> np.ndarray | None:
    """The grey image (uint8, ceil(height / 8) × ceil(width / 8)) that libjpeg gives for the JPEG
    ``data`` decoded at 1/8 scale to grey (Pillow's ``draft("L")`` at scale 8), or None where this
    function does not follow the file (the caller then decodes it with libjpeg).

    Each pixel is libjpeg's 1×1 inverse DCT of a luma block: its DC coefficient times the DC
    quantiser, descaled by 8, plus 128, through libjpeg's range limit. Followed: 8-bit Huffman
    frames, baseline, extended sequential and progressive, of one component or of three that
    libjpeg reads as YCbCr, whose luma is sampled at the frame's largest factors; restart markers.
    A sequential file must have one scan of all its components; a progressive file's DC must reach
    full precision, and so must every AC coefficient (else libjpeg smooths the DC from the
    neighbouring blocks). A progressive file's AC scans are not read (their parameters and tables
    are checked as libjpeg checks them), so damage in their data goes unseen: libjpeg may refuse a
    file whose pixels at 1/8 this function gives."""
    n = len(data)
    if n < 4 or data[:2] != _SOI:
        return None
    state = _LumaDc(data)
    pos = 2
    while True:
        if pos + 2 > n or data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # a fill byte before a marker
            pos += 1
            continue
        if marker == _EOI_MARKER:
            return state.grey()
        if pos + 4 > n:
            return None
        end = pos + 2 + int.from_bytes(data[pos + 2 : pos + 4], "big")
        if end < pos + 4 or end > n:
            return None
        if marker == _SOS:
            scan_end = state.scan(pos + 4, end)
            if scan_end is None:
                return None
            pos = scan_end
        elif state.segment(marker, pos + 4, end):
            pos = end
        else:
            return None

"""A JPEG's DC coefficients decoded here give libjpeg's own pixels at 1/8 scale, byte for byte, and
the compiled scan decoder is its pure-Python twin's equal, status included, on any bytes."""

from __future__ import annotations

import io
import pathlib

import numpy as np
import pytest

from fpstore._backend import BACKEND
from fpstore.fingerprint import _jpeg_py
from fpstore.fingerprint.image import ImagePipeline
from fpstore.fingerprint.jpeg import eighth_scale_grey
from tests.support.jpegs import encode, picture

Image = pytest.importorskip("PIL.Image", reason="Pillow is in the test extra")
compiled = pytest.importorskip("fpstore._jpeg_c", reason="the compiled kernels are not built here")

DATA = pathlib.Path(__file__).resolve().parent / "data" / "jpeg"


def libjpeg_at_one_eighth(data: bytes) -> np.ndarray:
    img = Image.open(io.BytesIO(data))
    img.draft("L", (img.width // 8, img.height // 8))
    img.load()
    assert img.mode == "L"
    return np.asarray(img)


CASES = [
    # (width, height, picture, mode, save options)
    (1024, 768, "smooth", "RGB", {"quality": 80}),
    (803, 601, "smooth", "RGB", {"quality": 60, "subsampling": 1}),
    (333, 517, "smooth", "RGB", {"quality": 95, "subsampling": 0}),
    (257, 129, "smooth", "RGB", {"quality": 75, "subsampling": "4:1:1"}),
    (100, 37, "smooth", "L", {"quality": 75}),
    (9, 17, "smooth", "RGB", {"quality": 90}),  # smaller than one MCU
    (640, 480, "smooth", "RGB", {"quality": 80, "optimize": True}),
    (512, 384, "smooth", "RGB", {"quality": 80, "restart_marker_blocks": 7}),
    (515, 389, "smooth", "L", {"quality": 70, "restart_marker_rows": 1}),
    (300, 200, "noise", "L", {"quality": 100}),  # DC quantiser 1, the longest codes
    (300, 200, "noise", "RGB", {"quality": 85}),  # (Pillow cannot write progressive RGB noise at 95 and up)
    (300, 200, "noise", "L", {"quality": 1}),
    (96, 64, "black", "RGB", {"quality": 100}),
    (96, 64, "white", "RGB", {"quality": 100}),
    (200, 120, "smooth", "RGB", {"quality": 50, "qtables": [[255] * 64, [1] * 64]}),  # luma DC quantiser 255
]


def _case_id(case: tuple) -> str:
    width, height, kind, mode, save = case
    return f"{width}x{height}-{kind}-{mode}-" + "-".join(f"{k}{v if not isinstance(v, list) else 'custom'}" for k, v in save.items())


@pytest.mark.parametrize("progressive", [False, True], ids=["baseline", "progressive"])
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_the_dc_decoder_gives_libjpegs_pixels_at_one_eighth(case: tuple, progressive: bool) -> None:
    width, height, kind, mode, save = case
    data = encode(picture(width, height, width + height, kind), mode, progressive=progressive, **save)
    grey = eighth_scale_grey(data)
    assert grey is not None
    assert grey.dtype == np.uint8 and grey.shape == (-(-height // 8), -(-width // 8))
    assert np.array_equal(grey, libjpeg_at_one_eighth(data))


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.jpg")))
def test_other_encoders_files_decode_alike_or_are_left_to_libjpeg(name: str) -> None:
    """Files of libjpeg-turbo's cjpeg (tests/data/jpeg): DC with successive approximation,
    non-interleaved DC, restart markers. Those whose luma at 1/8 depends on more than its DC
    coefficients (AC never sent, so libjpeg smooths the DC; a subsampled luma; an RGB frame; a DC
    never refined to full precision) are left to libjpeg."""
    data = (DATA / name).read_bytes()
    left = {
        "progressive-dc-only.jpg",
        "progressive-luma-without-ac.jpg",
        "progressive-luma-subsampled.jpg",
        "progressive-rgb-2x2-1x1-1x1.jpg",
        "progressive-dc-approximation-unrefined.jpg",
    }
    grey = eighth_scale_grey(data)
    assert (grey is None) == (name in left)
    if grey is not None:
        assert np.array_equal(grey, libjpeg_at_one_eighth(data))


def test_files_it_does_not_follow_are_left_to_libjpeg() -> None:
    a = picture(200, 150, 1)
    assert eighth_scale_grey(encode(a, "CMYK")) is None
    png = io.BytesIO()
    Image.fromarray(a).save(png, "PNG")
    assert eighth_scale_grey(png.getvalue()) is None
    for data in (b"", b"\xff\xd8", b"\xff\xd8\xff\xd9", encode(a)[:-2], encode(a)[:600]):
        assert eighth_scale_grey(data) is None
    # An Adobe marker with transform 0: libjpeg reads the three components as RGB, not YCbCr.
    data = encode(a)
    adobe = b"\xff\xee\x00\x0eAdobe\x00\x64\x00\x00\x00\x00\x00"
    assert eighth_scale_grey(data[:2] + adobe + data[2:]) is not None  # the JFIF marker still says YCbCr
    jfif_end = 4 + int.from_bytes(data[4:6], "big")
    assert data[6:11] == b"JFIF\x00"
    assert eighth_scale_grey(data[:2] + adobe + data[jfif_end:]) is None


def test_damaged_files_decode_as_libjpeg_decodes_them_or_are_left_to_it() -> None:
    """Bytes changed and files cut anywhere: whatever this decoder gives is libjpeg's image."""
    rng = np.random.default_rng(5)
    sources = [
        encode(picture(160, 120, 1), quality=80),
        encode(picture(160, 120, 2), quality=80, progressive=True),
        encode(picture(120, 88, 3), "L", quality=70, restart_marker_blocks=3),
    ]
    decoded = left = 0
    for i in range(600):
        bad = bytearray(sources[i % 3])
        for _ in range(int(rng.integers(1, 4))):
            bad[int(rng.integers(2, len(bad)))] = int(rng.integers(0, 256))
        if i % 4 == 0:
            bad = bad[: int(rng.integers(2, len(bad)))]
        grey = eighth_scale_grey(bytes(bad))
        if grey is None:
            left += 1
            continue
        decoded += 1
        try:
            reference = libjpeg_at_one_eighth(bytes(bad))
        except Exception:  # noqa: BLE001 - libjpeg refused a file this decoder read: only in a part it skips
            continue
        assert np.array_equal(grey, reference), i
    assert decoded > 50 and left > 50


def test_the_pipeline_gives_the_same_fingerprints_with_libjpeg_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    import fpstore.fingerprint.image as image_module

    files = [p.read_bytes() for p in sorted(DATA.glob("*.jpg"))]
    files += [encode(picture(640, 480, s), quality=75 + s, progressive=s % 2 == 1) for s in range(4)]
    pipes = [ImagePipeline(kind=kind) for kind in ("phash64", "dhash64")]
    calls = []
    monkeypatch.setattr(image_module, "eighth_scale_grey", lambda data: calls.append(1) or eighth_scale_grey(data))
    native = [[p.fingerprint(f) for f in files] for p in pipes]
    assert bool(calls) == (BACKEND == "cython")  # the pipeline takes this decoder with the compiled kernels
    monkeypatch.setattr(image_module, "eighth_scale_grey", lambda data: None)
    assert native == [[p.fingerprint(f) for f in files] for p in pipes]


# -- the compiled kernel against its twin ---------------------------------------------------------

STANDARD_DC = (bytes([0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0]), bytes(range(12)))


def _tables(kernel, rng: np.random.Generator) -> np.ndarray:
    tables = np.zeros((8, kernel.TABLE_WIDTH), dtype=np.int32)
    assert kernel.huffman_table(*STANDARD_DC, True, tables[0]) == kernel.OK
    ac_counts = bytes([0, 2, 1, 3, 3, 2, 4, 3, 5, 5, 4, 4, 0, 0, 1, 0x7D])
    ac_symbols = bytes(int(s) for s in rng.permutation(256)[:162])
    assert kernel.huffman_table(ac_counts, ac_symbols, False, tables[4]) == kernel.OK
    return tables


@pytest.mark.parametrize("mode", [0, 1, 2], ids=["sequential", "dc-first", "dc-refine"])
def test_the_compiled_scan_decoder_is_its_twins_equal_on_any_bytes(mode: int) -> None:
    rng = np.random.default_rng(mode)
    layouts = [
        [(0, 0, 0, 0, 4, 1)],
        [(0, 0, 0, 0, 4, 1), (0, 0, 1, 0, 4, 1), (0, 1, 0, 0, 4, 1), (0, 1, 1, 0, 4, 1), (1, 0, 0, 0, 4, 0), (2, 0, 0, 0, 4, 0)],
    ]
    statuses = set()
    for trial in range(120):
        tables = _tables(compiled, np.random.default_rng(trial))
        assert np.array_equal(tables, _tables(_jpeg_py, np.random.default_rng(trial)))
        blocks = np.array(layouts[trial % 2], dtype=np.int32)
        body = rng.integers(0, 256, int(rng.integers(0, 300)), dtype=np.uint8)
        if trial % 3 == 0:  # some markers inside: restarts, stuffing, fill bytes
            for _ in range(3):
                at = int(rng.integers(0, max(1, len(body))))
                body = np.insert(body, at, [0xFF, [0x00, 0xD0, 0xD1, 0xFF][int(rng.integers(0, 4))]])
        data = bytes(4) + body.tobytes() + b"\xff\xd9"
        mcus = (int(rng.integers(1, 6)), int(rng.integers(1, 4)))
        restart = int(rng.integers(0, 4))
        al = int(rng.integers(0, 3))
        results = []
        for kernel in (compiled, _jpeg_py):
            coef = np.zeros((mcus[1] * 2, mcus[0] * 2), dtype=np.int16)
            coef[::3] = 5  # refinement ORs into what is there
            status = kernel.decode_scan(data, 4, len(data) - 2, mode, al, restart, mcus[0], mcus[1], blocks, tables, coef)
            results.append((status, coef))
        assert results[0][0] == results[1][0], trial
        if results[0][0] == compiled.OK:
            assert np.array_equal(results[0][1], results[1][1]), trial
        statuses.add(results[0][0])
    assert compiled.OK in statuses and len(statuses) >= 3, statuses


def test_the_compiled_table_builder_is_its_twins_equal_and_refuses_what_libjpeg_refuses() -> None:
    rng = np.random.default_rng(9)
    outcomes = set()
    for trial in range(300):
        counts = bytearray(16)
        for _ in range(int(rng.integers(1, 40))):
            counts[int(rng.integers(0, 16))] += 1
        symbols = bytes(int(s) for s in rng.integers(0, 256 if trial % 2 else 16, sum(counts)))
        dc = bool(trial % 3 == 0)
        outs = [np.zeros(k.TABLE_WIDTH, dtype=np.int32) for k in (compiled, _jpeg_py)]
        got = [k.huffman_table(bytes(counts), symbols, dc, out) for k, out in zip((compiled, _jpeg_py), outs)]
        assert got[0] == got[1], trial
        if got[0] == compiled.OK:
            assert np.array_equal(outs[0], outs[1]), trial
        outcomes.add(got[0])
    assert outcomes == {compiled.OK, compiled.BAD_TABLE}
    out = np.zeros(compiled.TABLE_WIDTH, dtype=np.int32)
    assert compiled.huffman_table(bytes([3] + [0] * 15), bytes([0, 1, 2]), True, out) == compiled.BAD_TABLE  # 3 codes of 1 bit
    assert compiled.huffman_table(bytes([0, 1] + [0] * 14), bytes([16]), True, out) == compiled.BAD_TABLE  # a DC size above 15


@pytest.mark.parametrize("kernel", [compiled, _jpeg_py], ids=["compiled", "twin"])
def test_the_scan_decoder_refuses_a_layout_that_would_write_outside_its_arrays(kernel) -> None:
    tables = _tables(kernel, np.random.default_rng(0))
    data = bytes(64)
    ok = np.array([(0, 0, 0, 0, 4, 1)], dtype=np.int32)
    with pytest.raises(ValueError):
        kernel.decode_scan(data, 0, 64, 0, 0, 0, 4, 4, ok, tables, np.zeros((3, 4), dtype=np.int16))
    with pytest.raises(ValueError):
        kernel.decode_scan(data, 0, 65, 0, 0, 0, 1, 1, ok, tables, np.zeros((1, 1), dtype=np.int16))
    with pytest.raises(ValueError):
        bad = np.array([(0, 0, 0, 9, 4, 1)], dtype=np.int32)
        kernel.decode_scan(data, 0, 64, 0, 0, 0, 1, 1, bad, tables, np.zeros((1, 1), dtype=np.int16))
    with pytest.raises(ValueError):
        bad = np.array([(4, 0, 0, 0, 4, 1)], dtype=np.int32)
        kernel.decode_scan(data, 0, 64, 0, 0, 0, 1, 1, bad, tables, np.zeros((1, 1), dtype=np.int16))


def test_the_compiled_marker_search_is_its_twins_equal() -> None:
    rng = np.random.default_rng(11)
    alphabet = np.array([0x00, 0xFF, 0xD0, 0xD7, 0xD8, 0xD9, 0xDA, 0x12], dtype=np.uint8)
    for trial in range(400):
        data = alphabet[rng.integers(0, len(alphabet), int(rng.integers(0, 40)))].tobytes()
        for start in (-3, 0, 1, len(data) // 2, len(data) - 1, len(data), len(data) + 2):
            assert compiled.next_marker(data, start) == _jpeg_py.next_marker(data, start), (trial, data, start)
    data = b"\x01\xff\x00\xff\xd3\xff\xff\xd9\x02"
    assert compiled.next_marker(data, 0) == 6  # stuffing and a restart are data; fill bytes precede the marker


@pytest.mark.parametrize("kernel", [compiled, _jpeg_py], ids=["compiled", "twin"])
def test_a_scan_that_runs_out_of_data_stops_there(kernel) -> None:
    """A header may declare 65,535 × 65,535 pixels over a few bytes of data: the decoder stops at
    the first MCU that reads past them, and leaves the blocks after it alone."""
    tables = _tables(kernel, np.random.default_rng(0))
    blocks = np.array([(0, 0, 0, 0, 4, 1)], dtype=np.int32)
    coef = np.full((100, 1000), 77, dtype=np.int16)
    data = b"\x00" * 4 + b"\xff\xd9"  # zeros: DC code 00 (no difference), AC code 1010 would be EOB: 00 is not
    status = kernel.decode_scan(data, 0, 4, kernel.SEQUENTIAL, 0, 0, 1000, 100, blocks, tables, coef)
    assert status in (kernel.SHORT, kernel.BAD_CODE)
    assert (coef[1:] == 77).all() and (coef[0, 40:] == 77).all()


def _scans(data: bytes) -> list[int]:
    """Positions of the SOS markers of ``data``."""
    out, pos = [], 0
    while (pos := data.find(b"\xff\xda", pos + 1)) != -1:
        out.append(pos)
    return out


def test_a_dc_scans_unused_table_selectors_are_ignored_as_libjpeg_ignores_them() -> None:
    """A first DC scan reads only its DC table and a refinement none; the other selectors may
    hold anything (found by a review's fuzzing: the decoder raised ValueError on such files)."""
    base = encode(picture(64, 64, 4), "L", quality=75, progressive=True)
    scans = _scans(base)
    first = next(p for p in scans if base[p + 7 : p + 9] == b"\x00\x00" and base[p + 9] >> 4 == 0)
    refine = next(p for p in scans if base[p + 7 : p + 9] == b"\x00\x00" and base[p + 9] >> 4 != 0)
    for at, selectors in ((first, 0x04), (first, 0x0F), (refine, 0x80), (refine, 0xFF)):
        data = bytearray(base)
        data[at + 6] = selectors
        grey = eighth_scale_grey(bytes(data))
        assert grey is not None and np.array_equal(grey, libjpeg_at_one_eighth(bytes(data)))
    # The DC table a first scan reads must be one of the four (libjpeg refuses 4 and up).
    data = bytearray(base)
    data[first + 6] = 0x50
    assert eighth_scale_grey(bytes(data)) is None


@pytest.mark.parametrize("kernel", [compiled, _jpeg_py], ids=["compiled", "twin"])
def test_a_table_whose_codes_fill_their_space_is_refused_as_libjpeg_refuses_it(kernel) -> None:
    """No code may be all ones (libjpeg's jpeg_make_d_derived_tbl): two codes of one bit, or four
    of two, are refused; one of one bit and two of two bits are not."""
    out = np.zeros(kernel.TABLE_WIDTH, dtype=np.int32)
    assert kernel.huffman_table(bytes([2] + [0] * 15), bytes([0, 1]), True, out) == kernel.BAD_TABLE
    assert kernel.huffman_table(bytes([0, 4] + [0] * 14), bytes([0, 1, 2, 3]), False, out) == kernel.BAD_TABLE
    assert kernel.huffman_table(bytes([1, 2] + [0] * 14), bytes([0, 1, 2]), True, out) == kernel.BAD_TABLE
    assert kernel.huffman_table(bytes([1] + [0] * 15), bytes([0]), True, out) == kernel.OK
    assert kernel.huffman_table(bytes([1, 1] + [0] * 14), bytes([0, 1]), True, out) == kernel.OK


def test_an_ac_scan_naming_a_table_libjpeg_cannot_build_is_left_to_libjpeg() -> None:
    """The AC scans of a progressive file are not decoded here, but libjpeg builds each one's table
    first and stops where it cannot: so this decoder leaves such a file to it (found by a review's
    fuzzing: it gave pixels for files libjpeg refused)."""
    base = encode(picture(96, 80, 6), "L", quality=75, progressive=True)
    ac = [p for p in _scans(base) if base[p + 7] != 0]
    assert ac and eighth_scale_grey(base) is not None
    for selector in (0x03, 0x09):  # table 3 is never defined in these files; 9 is no table
        data = bytearray(base)
        data[ac[-1] + 6] = selector
        with pytest.raises(OSError):
            libjpeg_at_one_eighth(bytes(data))
        assert eighth_scale_grey(bytes(data)) is None


def test_an_ac_refinement_scan_libjpeg_refuses_is_left_to_libjpeg() -> None:
    """A refinement scan must lower the precision by one bit (Al = Ah - 1): libjpeg stops at one
    that does not, AC scans included (found by a review's fuzzing)."""
    base = encode(picture(96, 80, 7), "L", quality=75, progressive=True)
    refine = [p for p in _scans(base) if base[p + 7] != 0 and base[p + 9] >> 4 != 0]
    assert refine
    data = bytearray(base)
    end = refine[-1] + 2 + int.from_bytes(base[refine[-1] + 2 : refine[-1] + 4], "big")
    assert base[end - 1] == 0x10  # Ah 1, Al 0: the last refinement
    data[end - 1] = 0x20  # Ah 2, Al 0: still ends at full precision, but skips a bit
    with pytest.raises(OSError):
        libjpeg_at_one_eighth(bytes(data))
    assert eighth_scale_grey(bytes(data)) is None

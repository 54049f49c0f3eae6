"""A progressive JPEG's DC scans give, at 1/8 scale, exactly the pixels of the whole file."""

from __future__ import annotations

import io

import numpy as np
import pytest

from fpstore.fingerprint.image import ImagePipeline
from fpstore.fingerprint.jpeg import dc_scans
from tests.support.jpegs import encode, picture

Image = pytest.importorskip("PIL.Image", reason="Pillow is in the test extra")


def at_one_eighth(data: bytes) -> np.ndarray:
    img = Image.open(io.BytesIO(data))
    img.draft("L" if img.mode in ("L", "RGB") else img.mode, (img.width // 8, img.height // 8))
    img.load()
    return np.asarray(img)


CASES = [
    # (width, height, mode, save options)
    (1024, 768, "RGB", {"quality": 80, "subsampling": 2}),
    (803, 601, "RGB", {"quality": 60, "subsampling": 1}),
    (333, 517, "RGB", {"quality": 95, "subsampling": 0}),
    (100, 37, "L", {"quality": 75}),
    (1650, 1400, "L", {"quality": 50}),  # more than 32,767 blocks: several end-of-band runs
    (640, 480, "CMYK", {"quality": 85}),
    (512, 384, "RGB", {"quality": 80, "restart_marker_blocks": 7}),
    (640, 480, "CMYK", {"quality": 85, "subsampling": 2}),  # C sampled 2x2: M, Y, K decode to 2x2 blocks at 1/8
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}-{c[2]}-{'-'.join(f'{k}{v}' for k, v in c[3].items())}")
def test_the_dc_scans_decode_to_the_same_pixels_at_one_eighth(case: tuple) -> None:
    width, height, mode, save = case
    data = encode(picture(width, height, width), mode, progressive=True, **save)
    # at_one_eighth asks for grey from RGB and L files: then only their luma is decoded.
    for grey in {False, mode in ("RGB", "L")}:
        dc = dc_scans(data, grey=grey)
        assert dc is not None and (len(dc) < len(data) / 2.5 or len(data) < 5000)  # a tiny file is mostly headers
        assert np.array_equal(at_one_eighth(dc), at_one_eighth(data))


def test_only_progressive_huffman_jpegs_are_rewritten() -> None:
    a = picture(200, 150, 1)
    assert dc_scans(encode(a)) is None  # baseline: DC and AC interleaved in one scan
    png = io.BytesIO()
    Image.fromarray(a).save(png, "PNG")
    assert dc_scans(png.getvalue()) is None
    assert dc_scans(b"") is None and dc_scans(b"\xff\xd8") is None and dc_scans(b"\xff\xd8\xff\xd9") is None


def test_the_pipeline_gives_a_progressive_jpeg_its_baseline_twins_fingerprint() -> None:
    """Same pixels and quality: the same DC coefficients, so the same fingerprint either way."""
    for kind in ("phash64", "dhash64"):
        pipe = ImagePipeline(kind=kind)
        for seed in range(4):
            a = picture(800, 600, seed)
            assert pipe.fingerprint(encode(a, quality=80, progressive=True)) == pipe.fingerprint(encode(a, quality=80))


def test_damaged_progressive_files_are_rewritten_safely_or_not_at_all() -> None:
    rng = np.random.default_rng(3)
    data = encode(picture(320, 240, 2), quality=80, progressive=True)
    pipe = ImagePipeline()
    outcomes = set()
    for i in range(400):
        bad = bytearray(data)
        for _ in range(int(rng.integers(1, 6))):
            bad[int(rng.integers(0, len(bad)))] = int(rng.integers(0, 256))
        if i % 3 == 0:
            bad = bad[: int(rng.integers(2, len(bad)))]
        rewritten = dc_scans(bytes(bad))
        outcomes.add(rewritten is None)
        try:
            pipe.signature(bytes(bad))
        except Exception as exc:  # the pipeline's own refusal only
            assert type(exc).__name__ == "InputError", exc
    assert outcomes == {True, False}


DATA = __import__("pathlib").Path(__file__).resolve().parent / "data" / "jpeg"


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("progressive-*.jpg")))
def test_other_encoders_scripts_decode_alike_or_are_decoded_whole(name: str) -> None:
    """Files made by libjpeg-turbo's cjpeg 2.1.5 with scan scripts Pillow does not write: DC with
    successive approximation, non-interleaved DC sent late, a subsampled luma component and an
    RGB frame with subsampled G and B (both decode to blocks larger than 1x1 at 1/8, which read AC
    coefficients: their AC scans are kept), restart markers, and two files whose AC coefficients
    never all arrive (libjpeg then smooths the DC itself: they must be decoded whole)."""
    data = (DATA / name).read_bytes()
    never_all_ac = name in ("progressive-dc-only.jpg", "progressive-luma-without-ac.jpg")
    for grey in (False, True):  # at_one_eighth asks for grey: both must give its pixels
        dc = dc_scans(data, grey=grey)
        assert (dc is None) == never_all_ac
        if dc is not None:
            assert np.array_equal(at_one_eighth(dc), at_one_eighth(data))


def test_the_pipeline_hashes_every_file_as_its_whole_decode(monkeypatch: pytest.MonkeyPatch) -> None:
    import fpstore.fingerprint.image as image_module

    files = sorted(DATA.glob("*.jpg"))
    pipes = [ImagePipeline(kind=kind) for kind in ("phash64", "dhash64")]
    fast = [[p.fingerprint(f.read_bytes()) for f in files] for p in pipes]
    monkeypatch.setattr(image_module, "dc_scans", lambda data, grey=False: None)
    assert fast == [[p.fingerprint(f.read_bytes()) for f in files] for p in pipes]

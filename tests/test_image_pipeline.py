"""The image pipelines: the published algorithms' bits, pinned goldens, inputs and hostile files."""

from __future__ import annotations

import io

import numpy as np
import pytest

from fpstore.errors import FormatError, InputError
from fpstore.fingerprint.image import ImagePipeline, dct_matrix, dhash_bits, phash_bits, resample

Image = pytest.importorskip("PIL.Image", reason="Pillow is in the test extra")


def reference_phash(grey: np.ndarray) -> int:
    """The published pHash written from its definition: the 2-D DCT-II by the sum formula, the top-left
    8x8 block, bits above its median, first coefficient the most significant bit."""
    x = grey.astype(np.float64)
    n = 32
    u = np.arange(n)
    basis = np.cos(np.pi * np.outer(u, 2 * u + 1) / (2 * n))  # basis[k, j]
    coeffs = np.einsum("ki,lj,ij->kl", basis, basis, x)[:8, :8]
    bits = (coeffs > np.median(coeffs)).reshape(64)
    return int("".join("1" if b else "0" for b in bits), 2)


def reference_dhash(grey: np.ndarray) -> int:
    bits = [int(grey[r, c + 1]) > int(grey[r, c]) for r in range(8) for c in range(8)]
    return int("".join("1" if b else "0" for b in bits), 2)


def thumbnails(seed: int, count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        if i % 3 == 0:
            out.append(rng.integers(0, 256, (32, 32), dtype=np.uint8))
        else:  # smooth images, as real thumbnails are, with a little noise
            yy, xx = np.mgrid[0:32, 0:32]
            f = rng.uniform(0.05, 0.4, 2)
            img = 128 + 90 * np.sin(f[0] * xx + rng.uniform(0, 6)) * np.cos(f[1] * yy) + rng.normal(0, 4, (32, 32))
            out.append(np.clip(img, 0, 255).astype(np.uint8))
    return out


def test_phash_and_dhash_give_the_published_algorithms_bits() -> None:
    for grey in thumbnails(7, 300):
        assert phash_bits(grey) == reference_phash(grey)
        assert dhash_bits(grey[:8, :9]) == reference_dhash(grey[:8, :9])


def test_the_bits_equal_imagehash_on_the_same_thumbnail() -> None:
    imagehash = pytest.importorskip("imagehash", reason="imagehash is in the test extra")
    for grey in thumbnails(8, 200):
        # imagehash resizes its input to 32x32 (or 9x8): a copy when it is that size already.
        assert phash_bits(grey) == int(str(imagehash.phash(Image.fromarray(grey, "L"))), 16)
        small = np.ascontiguousarray(grey[:8, :9])
        assert dhash_bits(small) == int(str(imagehash.dhash(Image.fromarray(small, "L"))), 16)


def test_the_dct_matrix_is_scipys_unnormalised_dct_ii() -> None:
    x = np.random.default_rng(0).normal(size=32)
    d = dct_matrix(32, 32)
    direct = np.array([2 * sum(x[j] * np.cos(np.pi * k * (2 * j + 1) / 64) for j in range(32)) for k in range(32)])
    assert np.allclose(d @ x, direct)


def png(array: np.ndarray, mode: str | None = None) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array, mode).save(buf, "PNG")
    return buf.getvalue()


def golden_images() -> dict[str, bytes]:
    """Lossless inputs made here, the same on every machine."""
    yy, xx = np.mgrid[0:240, 0:320]
    rgb = np.stack([(xx * 255 // 319), (yy * 255 // 239), ((xx + yy) * 255 // 558)], axis=-1).astype(np.uint8)
    rings = (127.5 + 127.5 * np.sin(np.hypot(xx - 150, yy - 110) / 9.0)).astype(np.uint8)
    # Checks of uneven cells with a curved ramp across them: plain checks are symmetric about the
    # centre, so half their DCT coefficients are exactly 0 and tie with the median, and rounding,
    # not the image, would decide those bits.
    checks = (((xx // 45) + (yy // 35)) % 2 * 150 + 20 + xx * xx // 2000 + yy // 11).astype(np.uint8)
    rgba = np.dstack([rgb, ((xx * 255) // 319).astype(np.uint8)])
    deep = (xx.astype(np.uint32) * 200 + yy.astype(np.uint32) * 20).astype(np.uint16)
    return {"gradient-rgb": png(rgb), "rings-grey": png(rings), "checks-grey": png(checks), "alpha-rgba": png(rgba), "deep-16bit": png(deep)}


#: Pinned fingerprints of golden_images(): a change of decoder, colour conversion, resampling or
#: transform that moves a bit fails here instead of silently changing every stored fingerprint.
GOLDEN = {
    "phash64": {
        "gradient-rgb": "a23e807bca2fa369",
        "rings-grey": "d330aa20ff30f333",
        "checks-grey": "a07d5475547500ff",
        "alpha-rgba": "ff55b055385d0057",
        "deep-16bit": "852a552d552aff2a",
    },
    "dhash64": {
        "gradient-rgb": "ffffffffffffffff",
        "rings-grey": "95a24a545e2ab549",
        "checks-grey": "946b96ff6b946b94",
        "alpha-rgba": "0000000000010307",
        "deep-16bit": "fffffffffefefefe",
    },
}


@pytest.mark.parametrize("kind", ["phash64", "dhash64"])
def test_golden_fingerprints(kind: str) -> None:
    pipe = ImagePipeline(kind=kind)
    got = {name: f"{pipe.fingerprint(data):016x}" for name, data in golden_images().items()}
    assert got == GOLDEN[kind]


def test_every_golden_bit_is_decided_by_a_margin() -> None:
    """A golden whose coefficient sat within rounding of the median (or two dHash pixels within
    rounding of each other) would pin floating-point noise, and flip on another CPU's BLAS."""
    for name, data in golden_images().items():
        grey = ImagePipeline().thumbnail(data)
        d = dct_matrix(32, 8)
        low = (d @ grey @ d.T).reshape(64)
        # Rounding moves a coefficient (up to ~5e5 here) by ~1e-7 at most: keep 1e4 times that.
        assert np.abs(low - np.median(low)).min() > 1e-3, name
        small = ImagePipeline(kind="dhash64").thumbnail(data)
        steps = np.abs(small[:, 1:] - small[:, :-1])
        assert steps.min() > 1e-6, name


@pytest.mark.parametrize("shape", [(75, 100), (600, 800), (33, 31), (10, 7), (240, 320)])
def test_resample_is_pillows_lanczos_without_its_rounding(shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(shape[0])
    yy, xx = np.mgrid[0 : shape[0], 0 : shape[1]]
    grey = np.clip(128 + 90 * np.sin(xx / 5.0) * np.cos(yy / 3.0) + rng.normal(0, 10, shape), 0, 255).astype(np.uint8)
    for size in ((32, 32), (9, 8)):
        pillow = np.asarray(Image.fromarray(grey).resize(size, Image.Resampling.LANCZOS), dtype=np.float64)
        ours = resample(grey.astype(np.float64), size)
        assert ours.shape == (size[1], size[0])
        # Pillow rounds to 8 bits after each pass: half a level, then half a level amplified by the
        # second pass's negative lobes (the sum of |weights| is ~1.2).
        assert np.abs(ours - pillow).max() <= 1.5


def photo(width: int = 400, height: int = 300, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    base = 120 + 80 * np.sin(xx / 37.0 + rng.uniform(0, 6)) * np.cos(yy / 23.0) + 40 * np.sin((xx + 2 * yy) / 61.0)
    img = np.stack([base, base * 0.8 + 30, 255 - base], axis=-1) + rng.normal(0, 6, (height, width, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def jpeg(array: np.ndarray, quality: int = 85, **save: object) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, "JPEG", quality=quality, **save)
    return buf.getvalue()


def test_inputs_as_bytes_path_and_pil_image_agree(tmp_path) -> None:
    data = png(photo())
    path = tmp_path / "a.png"
    path.write_bytes(data)
    pipe = ImagePipeline()
    from_bytes = pipe.signature(data)
    assert pipe.signature(str(path)) == from_bytes
    assert pipe.signature(path) == from_bytes
    assert pipe.fingerprint(Image.open(io.BytesIO(data))) == from_bytes.fingerprint
    assert from_bytes.tokens == 400 * 300 and not from_bytes.short
    batch = pipe.signatures([data, str(path), jpeg(photo())], threads=2)
    assert batch.values[0] == batch.values[1] == from_bytes.fingerprint
    assert batch.pipeline_id == pipe.id
    assert batch.content_hash(0) == from_bytes.content_hash


def test_near_copies_stay_near_and_other_images_do_not() -> None:
    pipe = ImagePipeline()
    a = photo(seed=3)
    fp = pipe.fingerprint(png(a))
    small = np.asarray(Image.fromarray(a).resize((200, 150), Image.Resampling.BILINEAR))
    for variant in (jpeg(a, 40), png(small), jpeg(np.clip(a.astype(int) + 12, 0, 255).astype(np.uint8))):
        assert bin(fp ^ pipe.fingerprint(variant)).count("1") <= 6
    assert bin(fp ^ pipe.fingerprint(png(photo(seed=11)[::-1]))).count("1") > 12


def test_exif_orientation_is_applied() -> None:
    a = photo(384, 288)  # multiples of 16: the JPEG blocks fall alike both ways round
    pipe = ImagePipeline()
    upright = pipe.fingerprint(jpeg(a, 95))
    turned = np.ascontiguousarray(a[::-1, ::-1])
    exif = Image.Exif()
    exif[0x0112] = 3  # stored rotated by 180 degrees: the viewer turns it back
    assert bin(upright ^ pipe.fingerprint(jpeg(turned, 95, exif=exif.tobytes()))).count("1") <= 4
    assert bin(upright ^ pipe.fingerprint(jpeg(turned, 95))).count("1") >= 16


def test_modes_cmyk_palette_animated_and_tiny() -> None:
    pipe = ImagePipeline()
    a = photo()
    ref = pipe.fingerprint(png(a))
    buf = io.BytesIO()
    Image.fromarray(a).convert("CMYK").save(buf, "JPEG", quality=95)
    assert bin(ref ^ pipe.fingerprint(buf.getvalue())).count("1") <= 6
    frames = [Image.fromarray(a), Image.fromarray(photo(seed=9))]
    gif = io.BytesIO()
    frames[0].save(gif, "GIF", save_all=True, append_images=frames[1:], duration=100)
    first = pipe.fingerprint(gif.getvalue())
    assert bin(ref ^ first).count("1") <= 8  # the first frame, through a 256-colour palette
    tiny = pipe.signature(png(np.zeros((1, 1, 3), np.uint8)))
    assert tiny.short
    blank = pipe.signature(png(np.full((100, 100), 200, np.uint8)))
    assert blank.short  # flat: the hash says nothing
    assert not pipe.signature(png(a)).short


def test_hostile_and_broken_inputs_raise_input_error(tmp_path) -> None:
    pipe = ImagePipeline(max_pixels=10_000_000, max_bytes=1 << 20)
    data = jpeg(photo())
    for bad in (b"", b"not an image", data[: len(data) // 2], png(photo())[:200]):
        with pytest.raises(InputError, match="does not decode"):
            pipe.signature(bad)
    # A decompression bomb: a small file whose header declares 20000 x 20000 pixels.
    bomb = io.BytesIO()
    Image.new("L", (20000, 20000)).save(bomb, "PNG")
    with pytest.raises(InputError, match="max_pixels|does not decode"):
        pipe.signature(bomb.getvalue())
    with pytest.raises(InputError, match="max_bytes"):
        pipe.signature(b"\xff" * ((1 << 20) + 1))
    with pytest.raises(InputError, match="cannot be read"):
        pipe.signature(str(tmp_path / "missing.jpg"))
    with pytest.raises(InputError, match="must be bytes, a path or a PIL image"):
        pipe.signature(12)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="index 1"):
        pipe.signatures([data, b"junk", data])


def test_mutated_files_never_crash() -> None:
    rng = np.random.default_rng(5)
    pipe = ImagePipeline()
    seeds = [jpeg(photo(160, 120)), png(photo(160, 120)), jpeg(photo(160, 120), progressive=True)]
    outcomes = {"ok": 0, "refused": 0}
    for i in range(300):
        data = bytearray(seeds[i % len(seeds)])
        for _ in range(int(rng.integers(1, 12))):
            data[int(rng.integers(0, len(data)))] = int(rng.integers(0, 256))
        if i % 4 == 0:
            data = data[: int(rng.integers(1, len(data)))]
        try:
            pipe.signature(bytes(data))
            outcomes["ok"] += 1
        except InputError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 0 and outcomes["ok"] > 0


def test_config_round_trip_and_refusals() -> None:
    for kind in ("phash64", "dhash64"):
        pipe = ImagePipeline(kind=kind, min_side=8)
        again = ImagePipeline.from_config(pipe.config)
        assert again == pipe and again.id == pipe.id
    pipe = ImagePipeline()
    other_libs = dict(pipe.config, libraries={"jpg": "9.9"})
    assert ImagePipeline.from_config(other_libs).id == pipe.id  # recorded, not part of the id
    for field, value in (("decoder", "pillow-9"), ("resample", "bicubic"), ("scheme", 2), ("kind", "ahash"), ("extra", 1)):
        with pytest.raises(FormatError):
            ImagePipeline.from_config(dict(pipe.config, **{field: value}))
    assert ImagePipeline(kind="dhash64").id != pipe.id
    assert ImagePipeline(min_side=4).id != pipe.id
    assert ImagePipeline(max_pixels=5).id == pipe.id  # a limit refuses inputs, it changes no bit
    with pytest.raises(InputError):
        ImagePipeline(kind="phash")


@pytest.mark.parametrize("kind", ["phash64", "dhash64"])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_each_exif_orientation_hashes_as_the_upright_image(kind: str, orientation: int) -> None:
    """The thumbnail is turned as ImageOps.exif_transpose turns the image; with whole boxes the
    two agree exactly, with a partial box at an edge within a few bits."""
    from PIL import ImageOps

    pipe = ImagePipeline(kind=kind)
    for width, height in ((384, 256), (397, 261)):
        stored = Image.fromarray(photo(width, height, seed=orientation))
        exif = Image.Exif()
        exif[0x0112] = orientation
        buf = io.BytesIO()
        stored.save(buf, "PNG", exif=exif.tobytes())
        upright = ImageOps.exif_transpose(Image.open(io.BytesIO(buf.getvalue())))
        plain = io.BytesIO()
        upright.save(plain, "PNG")
        distance = bin(pipe.fingerprint(buf.getvalue()) ^ pipe.fingerprint(plain.getvalue())).count("1")
        assert distance <= (0 if width % 8 == 0 and height % 8 == 0 else 4), (width, height, distance)


def test_a_jpeg_and_its_lossless_original_start_from_the_same_boxes() -> None:
    """A JPEG decoded at 1/8 gives each 8x8 block's mean; the PNG path reduces to the same means."""
    pipe = ImagePipeline()
    for seed in range(6):
        a = photo(512, 384, seed=seed)
        assert bin(pipe.fingerprint(png(a)) ^ pipe.fingerprint(jpeg(a, 90))).count("1") <= 2
        assert bin(pipe.fingerprint(png(a)) ^ pipe.fingerprint(Image.open(io.BytesIO(jpeg(a, 90))))).count("1") <= 2


JPEG_DATA = __import__("pathlib").Path(__file__).resolve().parent / "data" / "jpeg"

#: Pinned fingerprints of committed JPEG files (made by Pillow 13's encoder, so only decoding is
#: under test): box 8 from the DC coefficients (baseline 4:2:0 and 4:4:4, progressive through
#: its DC scans: the same picture and quality, so the same DC and the same bits) and a box of 2.
JPEG_GOLDEN = {
    "phash64": {
        "golden-baseline-420.jpg": "845b54fbf3a4ab04",
        "golden-baseline-444.jpg": "845b54fbf3a4ab04",
        "golden-box2.jpg": "ead5903e823f902f",
        "golden-progressive-420.jpg": "845b54fbf3a4ab04",
    },
    "dhash64": {
        "golden-baseline-420.jpg": "49b7b68c496bb694",
        "golden-baseline-444.jpg": "49b7b68c496bb694",
        "golden-box2.jpg": "c0c08000070f1f3f",
        "golden-progressive-420.jpg": "49b7b68c496bb694",
    },
}


@pytest.mark.parametrize("kind", ["phash64", "dhash64"])
def test_golden_fingerprints_of_jpeg_files(kind: str) -> None:
    pipe = ImagePipeline(kind=kind)
    got = {f.name: f"{pipe.fingerprint(f.read_bytes()):016x}" for f in sorted(JPEG_DATA.glob("golden-*.jpg"))}
    assert got == JPEG_GOLDEN[kind]


@pytest.mark.parametrize("kind", ["phash64", "dhash64"])
@pytest.mark.parametrize("stored_as", ["rational", "float"])
def test_an_orientation_stored_as_a_fraction_turns_like_exif_transpose(kind: str, stored_as: str) -> None:
    """Pillow reads a RATIONAL or FLOAT orientation tag as 6.0: exif_transpose turns the image by
    it, and so must the thumbnail (a dHash thumbnail left sideways was 9x8 and did not hash)."""
    import struct

    from PIL import ImageOps

    # A little-endian TIFF header and one IFD entry: tag 0x0112, type RATIONAL (5) or DOUBLE (12),
    # its 8-byte value after the IFD.
    kind_code, value = (5, struct.pack("<II", 6, 1)) if stored_as == "rational" else (12, struct.pack("<d", 6.0))
    tiff = b"II*\x00" + struct.pack("<I", 8) + struct.pack("<HHHII", 1, 0x0112, kind_code, 1, 26) + struct.pack("<I", 0) + value
    stored = Image.fromarray(photo(384, 256, seed=4))
    buf = io.BytesIO()
    stored.save(buf, "PNG", exif=tiff)
    assert Image.open(io.BytesIO(buf.getvalue())).getexif().get(0x0112) == 6.0
    upright = io.BytesIO()
    ImageOps.exif_transpose(Image.open(io.BytesIO(buf.getvalue()))).save(upright, "PNG")
    pipe = ImagePipeline(kind=kind)
    assert pipe.fingerprint(buf.getvalue()) == pipe.fingerprint(upright.getvalue())


def test_a_very_long_image_is_resampled_without_a_dense_matrix() -> None:
    """Above 2,048 samples an axis is resampled row by row, with the same weights."""
    from fpstore.fingerprint.image import _lanczos_rows, lanczos_matrix

    rng = np.random.default_rng(1)
    grey = rng.uniform(0, 255, (40, 3000))
    dense = lanczos_matrix(32, 40) @ grey @ lanczos_matrix(32, 3000).T
    assert np.allclose(resample(grey, (32, 32)), dense)
    assert lanczos_matrix.cache_info().maxsize == 64
    rows = _lanczos_rows(32, 200_000, 1, 200_000)
    assert max(len(w) for _, w in rows) < 40_000  # the support of one output sample, not the axis
    long = png(rng.integers(0, 255, (40, 120_000), dtype=np.uint8))
    assert ImagePipeline().signature(long).tokens == 40 * 120_000


def test_formats_outside_the_web_are_refused_unread() -> None:
    eps = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 100 100\nshowpage\n"
    with pytest.raises(InputError, match="does not decode"):
        ImagePipeline().signature(eps)  # Pillow's EPS plugin would start Ghostscript


def test_a_colour_key_is_transparency_too() -> None:
    """A PNG with a tRNS colour key (RGB or L) is composited over white like one with alpha."""
    a = photo(200, 150, seed=5)
    a[40:110, 50:150] = (0, 0, 0)
    keyed = io.BytesIO()
    Image.fromarray(a).save(keyed, "PNG", transparency=(0, 0, 0))
    alpha = np.dstack([a, np.where((a == 0).all(axis=-1), 0, 255).astype(np.uint8)])
    pipe = ImagePipeline()
    assert pipe.fingerprint(keyed.getvalue()) == pipe.fingerprint(png(alpha))
    assert pipe.fingerprint(keyed.getvalue()) != pipe.fingerprint(png(a))


def test_an_mpo_is_decoded_as_the_jpeg_it_starts_with() -> None:
    """Phones write MPO (a JPEG with more pictures after it): its first picture is draft-decoded."""
    a, b = photo(512, 384, seed=6), photo(512, 384, seed=7)
    mpo = io.BytesIO()
    Image.fromarray(a).save(mpo, "MPO", save_all=True, append_images=[Image.fromarray(b)], quality=85)
    assert Image.open(io.BytesIO(mpo.getvalue())).format == "MPO"
    pipe = ImagePipeline()
    assert pipe.fingerprint(mpo.getvalue()) == pipe.fingerprint(jpeg(a, 85))


def test_a_kind_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(InputError):
        ImagePipeline(kind=["phash64"])  # type: ignore[arg-type]
    from fpstore.fingerprint.kinds import pipeline_from_config

    with pytest.raises(FormatError):
        pipeline_from_config(dict(ImagePipeline().config, kind=[1]))


def test_a_file_read_whole_even_when_it_grew_after_its_size_was_taken(tmp_path, monkeypatch) -> None:
    import fpstore.fingerprint.image as image_module

    data = png(photo())
    path = tmp_path / "growing.png"
    path.write_bytes(data)
    expected = ImagePipeline().signature(data)
    monkeypatch.setattr(image_module.os.path, "getsize", lambda p: 100)  # as if it had 100 bytes then
    assert ImagePipeline().signature(path) == expected
    with pytest.raises(InputError, match="max_bytes"):
        ImagePipeline(max_bytes=len(data) - 1).signature(path)

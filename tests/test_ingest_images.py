"""Image ingest, in process: a directory's image files and a WARC file's image/* responses into a
store of image fingerprints; hostile images skipped with one note each; resuming after an
interrupt or a crash stores every image once; a fuzz of truncated and mutated files."""

from __future__ import annotations

import functools
import gzip
import io
import pathlib
import random
import threading

import numpy as np
import pytest

pytest.importorskip("PIL")
from PIL import Image, ImageDraw  # noqa: E402

import fpstore  # noqa: E402
from fpstore.admin.ingest import ImageDirectorySource, Item, Note, WarcSource, image_format, ingest, make_source  # noqa: E402
from fpstore.errors import InputError  # noqa: E402
from tools import make_test_warc as mtw  # noqa: E402

# -- images ----------------------------------------------------------------------------------------


def picture(seed: int, w: int = 160, h: int = 120) -> Image.Image:
    """A deterministic picture of coloured ellipses, different for each seed (pHash distances of
    different seeds are around 30 bits)."""
    img = Image.new("RGB", (w, h), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    r = random.Random(seed)
    for _ in range(12):
        x0, y0 = r.randrange(w), r.randrange(h)
        draw.ellipse(
            [x0, y0, x0 + r.randrange(w // 8, w // 2), y0 + r.randrange(h // 8, h // 2)],
            fill=(r.randrange(256), r.randrange(256), r.randrange(256)),
        )
    return img


def encode(img: Image.Image, fmt: str, **kw: object) -> bytes:
    out = io.BytesIO()
    img.save(out, fmt, **kw)
    return out.getvalue()


@functools.lru_cache(maxsize=1)
def bomb_png() -> bytes:
    """20000 × 20000 grey pixels: a few hundred KiB on disk, 400 MB decoded."""
    return encode(Image.new("L", (20000, 20000)), "PNG")


def distance(a: int, b: int) -> int:
    return bin(a ^ b).count("1")


GOOD = {
    "a.jpg": lambda: encode(picture(1), "JPEG", quality=90),
    "a_small.png": lambda: encode(picture(1).resize((80, 60)), "PNG"),  # a resized copy of a.jpg
    "b.png": lambda: encode(picture(2), "PNG"),
    "sub/anim.gif": lambda: encode(picture(4), "GIF", save_all=True, append_images=[picture(5)], duration=100, loop=0),
    "sub/cmyk.jpg": lambda: encode(picture(3).convert("CMYK"), "JPEG"),
    "deep16.png": lambda: encode(Image.fromarray(np.asarray(picture(6).convert("L"), dtype=np.uint16) * 257), "PNG"),
    "rotated.jpg": lambda: encode(picture(7), "JPEG", quality=95, exif=_exif_orientation(6)),
    "noext": lambda: encode(picture(8), "PNG"),  # an image by its signature alone
}
BAD = {
    "truncated.png": lambda: (lambda data: data[: len(data) // 2])(encode(picture(2), "PNG")),
    "random.jpg": lambda: random.Random(9).randbytes(3000),
    "z/bomb.png": bomb_png,
}


def _exif_orientation(value: int) -> Image.Exif:
    exif = Image.Exif()
    exif[0x0112] = value
    return exif


def image_dir(root: pathlib.Path) -> pathlib.Path:
    """The good and bad images, plus a text file (not an image)."""
    root.mkdir()
    for name, make in {**GOOD, **BAD}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(make())
    (root / "readme.txt").write_text("not an image\n")
    return root


@pytest.fixture
def istore(tmp_path):
    with fpstore.open(tmp_path / "img.fps", pipeline=fpstore.ImagePipeline()) as s:
        yield s


def run(store, sources, **kw):
    evs: list = []
    res = ingest(store, sources, report=evs.append, **kw)
    return res, evs


def notes(evs, kind):
    return sorted(e.where for e in evs if isinstance(e, Note) and e.kind == kind)


# -- directories -----------------------------------------------------------------------------------


def test_directory_of_images_stores_the_good_and_notes_the_bad(tmp_path, istore):
    """Every decodable image is stored under its relative path (CMYK, 16-bit, animated, EXIF-rotated
    included); the truncated file, the random bytes and the decompression bomb are each skipped
    with one bad-image note naming the file and why; the text file with a not-image note."""
    root = image_dir(tmp_path / "d")
    res, evs = run(istore, [make_source(str(root), images=True)], batch_size=4)
    assert sorted(istore) == sorted(GOOD)
    assert res.added == len(GOOD) and res.sources[0].done and res.problems == 0
    assert notes(evs, "bad-image") == sorted(str(root / n) for n in BAD)
    assert notes(evs, "not-image") == [str(root / "readme.txt")]
    by_name = {pathlib.Path(e.where).name: str(e) for e in evs if isinstance(e, Note) and e.kind == "bad-image"}
    assert "truncated" in by_name["truncated.png"]
    assert "cannot identify image file" in by_name["random.jpg"] and "BytesIO" not in by_name["random.jpg"]
    assert "bomb" in by_name["bomb.png"] or "pixels" in by_name["bomb.png"]
    assert all("\n" not in str(e) for e in evs)
    assert res.sources[0].notes == {"bad-image": len(BAD), "not-image": 1}


def test_stored_images_are_fingerprinted_as_the_pipeline_decodes_them(tmp_path, istore):
    """The resized copy is a near duplicate; the animated GIF is its first frame; the EXIF-rotated
    JPEG is the upright picture; 16-bit grey is its 8-bit picture; content hashes are kept (the
    same bytes under another key are an exact duplicate)."""
    root = image_dir(tmp_path / "d")
    (root / "copy_of_b.png").write_bytes((root / "b.png").read_bytes())
    ingest(istore, [make_source(str(root), images=True)], batch_size=3)
    fp = {key: istore[key].fingerprint for key in istore}
    pipe = istore.pipeline
    assert distance(fp["a.jpg"], fp["a_small.png"]) <= 4
    assert {m.key for m in istore.query(image=encode(picture(1).resize((120, 90)), "PNG"))} >= {"a.jpg", "a_small.png"}
    assert distance(fp["sub/anim.gif"], pipe.fingerprint(encode(picture(4), "PNG"))) <= 4
    assert distance(fp["sub/anim.gif"], pipe.fingerprint(encode(picture(5), "PNG"))) > 12
    upright = encode(picture(7).transpose(Image.Transpose.ROTATE_270), "PNG")
    assert distance(fp["rotated.jpg"], pipe.fingerprint(upright)) <= 4
    assert distance(fp["rotated.jpg"], pipe.fingerprint(encode(picture(7), "PNG"))) > 12
    assert distance(fp["deep16.png"], pipe.fingerprint(encode(picture(6).convert("L"), "PNG"))) <= 2
    assert distance(fp["sub/cmyk.jpg"], pipe.fingerprint(encode(picture(3), "PNG"))) <= 6
    exact = istore.query(image=(root / "b.png").read_bytes(), k=0)
    assert {m.key for m in exact} == {"b.png", "copy_of_b.png"}
    assert istore["b.png"].content_hash == istore["copy_of_b.png"].content_hash is not None
    assert not any(istore[key].short for key in istore)
    id_a, id_b, _ = istore.near_duplicate_pairs()
    pairs = {tuple(sorted(istore.keys_of([a, b]))) for a, b in zip(id_a.tolist(), id_b.tolist())}
    assert ("a.jpg", "a_small.png") in pairs and ("b.png", "copy_of_b.png") in pairs


def test_max_pixels_refuses_large_images_with_a_note(tmp_path, istore):
    """A pipeline of the store's kind with a lower max_pixels (--max-pixels) skips larger images."""
    import dataclasses

    root = tmp_path / "d"
    root.mkdir()
    (root / "big.png").write_bytes(encode(picture(1, 400, 300), "PNG"))
    (root / "small.png").write_bytes(encode(picture(2), "PNG"))
    res, evs = run(istore, [make_source(str(root), images=True)], image_pipeline=dataclasses.replace(istore.pipeline, max_pixels=50_000))
    assert list(istore) == ["small.png"]
    [bad] = [e for e in evs if isinstance(e, Note) and e.kind == "bad-image"]
    assert bad.where == str(root / "big.png") and "400×300" in bad.message and "max_pixels=50,000" in bad.message


def test_image_sources_refuse_jsonl_and_record_their_mode(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text("{}\n")
    with pytest.raises(InputError, match="--images"):
        make_source(str(p), images=True)
    d = tmp_path / "d"
    d.mkdir()
    assert isinstance(make_source(str(d), images=True), ImageDirectorySource)
    assert make_source(str(d), images=True).options()["images"] is True
    assert "images" not in make_source(str(d)).options()  # text checkpoints record what they did before


def test_image_format_sniffing():
    assert image_format(encode(picture(1), "JPEG")) == "jpeg"
    assert image_format(encode(picture(1), "PNG")) == "png"
    assert image_format(encode(picture(1), "GIF")) == "gif"
    assert image_format(encode(picture(1), "WEBP")) == "webp"
    assert image_format(encode(picture(1), "TIFF")) == "tiff"
    assert image_format(encode(picture(1), "BMP")) == "bmp"
    assert image_format(b"BMW cars are fast, and this is a text file") is None
    assert image_format(b"plain text") is None


def test_text_ingest_of_an_image_directory_says_images_exist(tmp_path, store):
    """A text ingest still skips images as binary files; the note names --images."""
    root = tmp_path / "d"
    root.mkdir()
    (root / "a.png").write_bytes(encode(picture(1), "PNG"))
    res, evs = run(store, [make_source(str(root))])
    [n] = [e for e in evs if isinstance(e, Note)]
    assert n.kind == "binary" and "--images" in n.message and len(store) == 0


# -- WARC ------------------------------------------------------------------------------------------

PNG_A = encode(picture(1), "PNG")
JPEG_A_SMALL = encode(picture(1).resize((100, 75)), "JPEG", quality=90)
GIF_B = encode(picture(2), "GIF")


def image_warc(compress: bool) -> tuple[bytes, list[str]]:
    """A WARC with image/* responses (plain, gzip-encoded, no content type), a broken image, an
    SVG, a 404 image and an HTML page; and the URIs the image ingest must store, in order."""
    recs = [
        mtw.record("warcinfo", None, b"software: test\r\n", "application/warc-fields"),
        mtw.response("https://img.example/a.png", PNG_A, "image/png"),
        mtw.response("https://news.example/page", mtw.page("A page", mtw.ARTICLE_A, "nav")),
        mtw.response("https://img.example/a-small.jpg", JPEG_A_SMALL, "image/jpeg"),
        mtw.response("https://img.example/broken.jpg", JPEG_A_SMALL[: len(JPEG_A_SMALL) // 3], "image/jpeg"),
        mtw.response("https://img.example/logo.svg", b"<svg xmlns='http://www.w3.org/2000/svg'/>", "image/svg+xml"),
        mtw.response("https://img.example/b.gif", gzip.compress(GIF_B, mtime=0), "image/gif", extra=[("Content-Encoding", "gzip")]),
        mtw.record(
            "response",
            "https://img.example/missing.png",
            mtw.http("404 Not Found", [("Content-Type", "image/png")], PNG_A),
            "application/http; msgtype=response",
        ),
        mtw.record(
            "response",
            "https://img.example/untyped",
            mtw.http("200 OK", [("Content-Length", str(len(GIF_B)))], GIF_B),
            "application/http; msgtype=response",
        ),
    ]
    uris = ["https://img.example/a.png", "https://img.example/a-small.jpg", "https://img.example/b.gif", "https://img.example/untyped"]
    data = b"".join(gzip.compress(r, mtime=0) for r in recs) if compress else b"".join(recs)
    return data, uris


@pytest.mark.parametrize("compress", [False, True])
def test_warc_image_responses(tmp_path, istore, compress):
    data, uris = image_warc(compress)
    path = tmp_path / ("i.warc.gz" if compress else "i.warc")
    path.write_bytes(data)
    res, evs = run(istore, [make_source(str(path), images=True)], batch_size=2)
    assert sorted(istore) == sorted(uris) and res.sources[0].done and res.problems == 0
    [bad] = [e for e in evs if isinstance(e, Note) and e.kind == "bad-image"]
    assert "https://img.example/broken.jpg" in str(bad) and "record 5" in str(bad)
    assert len(notes(evs, "not-image")) == 2  # the HTML page and the SVG
    assert [e.kind for e in evs if isinstance(e, Note) and e.kind == "status"] == ["status"]
    near = {m.key for m in istore.query(image=PNG_A)}
    assert {"https://img.example/a.png", "https://img.example/a-small.jpg"} <= near
    exact = istore.query(image=GIF_B, k=0)
    assert {m.key for m in exact} == {"https://img.example/b.gif", "https://img.example/untyped"}


def test_warc_text_ingest_notes_images_with_a_hint(tmp_path, store):
    data, _ = image_warc(False)
    path = tmp_path / "i.warc"
    path.write_bytes(data)
    res, evs = run(store, [WarcSource(str(path))])
    assert list(store) == ["https://news.example/page"]
    hints = [e for e in evs if isinstance(e, Note) and e.kind == "not-text"]
    assert hints and all("--images" in e.message for e in hints if "image/" in e.message)


def test_warc_image_items_carry_bytes_and_where(tmp_path):
    data, uris = image_warc(True)
    path = tmp_path / "i.warc.gz"
    path.write_bytes(data)
    its = [e for e in WarcSource(str(path), images=True).items(None) if isinstance(e, Item)]
    assert [it.key for it in its] == uris[:2] + ["https://img.example/broken.jpg"] + uris[2:]
    assert its[0].image == PNG_A and its[0].text == "" and "record 2" in its[0].where
    assert its[2 + 1].image == GIF_B  # the gzip content encoding undone


# -- resuming --------------------------------------------------------------------------------------


def many_images(root: pathlib.Path, n: int = 30, bad_every: int = 7) -> tuple[list[str], list[str]]:
    """n small images under root, every bad_every-th one truncated: (good names, bad names)."""
    root.mkdir()
    good, bad = [], []
    for i in range(n):
        name = f"img{i:03d}.png"
        data = encode(picture(100 + i, 48, 40), "PNG")
        if i % bad_every == 3:
            data = data[: len(data) // 2]
            bad.append(name)
        else:
            good.append(name)
        (root / name).write_bytes(data)
    return good, bad


def many_images_warc(path: pathlib.Path, n: int = 30) -> list[str]:
    recs, uris = [], []
    for i in range(n):
        uri = f"https://img.example/{i:03d}.png"
        data = encode(picture(100 + i, 48, 40), "PNG")
        if i % 7 == 3:
            data = data[: len(data) // 2]
        else:
            uris.append(uri)
        recs.append(mtw.response(uri, data, "image/png"))
    path.write_bytes(b"".join(gzip.compress(r, mtime=0) for r in recs))
    return uris


@pytest.mark.parametrize("form", ["dir", "warc"])
def test_interrupted_image_ingest_resumes_without_loss_or_duplicates(tmp_path, istore, form):
    """The stop event ends the ingest after a batch; the rerun stores the rest: every good image
    once, and each bad one noted once over both runs."""
    if form == "dir":
        good, _ = many_images(tmp_path / "d")
        src = str(tmp_path / "d")
    else:
        good = many_images_warc(tmp_path / "m.warc.gz")
        src = str(tmp_path / "m.warc.gz")
    stop = threading.Event()

    def progress(done, total):
        if len(istore) >= 8:
            stop.set()

    res1, evs1 = run(istore, [make_source(src, images=True)], batch_size=4, stop=stop, progress=progress)
    assert res1.interrupted and 8 <= len(istore) < len(good)
    first = len(istore)
    res2, evs2 = run(istore, [make_source(src, images=True)], batch_size=4)
    assert res2.sources[0].done and res2.added == len(good) - first
    assert sorted(istore) == sorted(good) and len(istore) == len(good)
    assert len(notes(evs1, "bad-image")) + len(notes(evs2, "bad-image")) == 30 - len(good)


class _CrashingStore:
    """A store whose add_many fails (as a killed process would stop) on its ``crash_at``-th call."""

    def __init__(self, store, crash_at: int) -> None:
        self._store, self._n, self._crash_at = store, 0, crash_at

    def add_many(self, *args, **kwargs):
        self._n += 1
        if self._n == self._crash_at:
            raise KeyboardInterrupt  # before the transaction: as a kill in the middle of the batch
        return self._store.add_many(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._store, name)


def test_crash_in_a_batch_then_rerun_stores_each_image_once(tmp_path, istore):
    good, bad = many_images(tmp_path / "d")
    with pytest.raises(KeyboardInterrupt):
        ingest(_CrashingStore(istore, 3), [make_source(str(tmp_path / "d"), images=True)], batch_size=5)
    assert 0 < len(istore) < len(good)
    res, evs = run(istore, [make_source(str(tmp_path / "d"), images=True)], batch_size=5)
    assert sorted(istore) == sorted(good) and res.sources[0].done
    # The batch the crash lost is read again: its bad images are noted again, the others are not.
    assert set(notes(evs, "bad-image")) <= {str(tmp_path / "d" / b) for b in bad}
    assert res.sources[0].resumed_from.startswith("file 10")


# -- fuzz ------------------------------------------------------------------------------------------


def _seeds() -> list[bytes]:
    pic = picture(42, 64, 48)
    return [
        encode(pic, "PNG"),
        encode(pic, "JPEG", quality=80),
        encode(pic, "JPEG", quality=80, progressive=True, exif=_exif_orientation(3)),
        encode(pic, "GIF", save_all=True, append_images=[picture(43, 64, 48)]),
        encode(pic, "WEBP"),
        encode(pic, "TIFF", compression="tiff_lzw"),
        encode(pic, "BMP"),
        encode(pic.convert("CMYK"), "JPEG"),
        encode(Image.fromarray(np.asarray(pic.convert("L"), dtype=np.uint16) * 257), "PNG"),
    ]


def mutate(data: bytes, r: random.Random) -> bytes:
    """Truncate, flip bytes, overwrite a run with 0xff, splice in random bytes, or grow a size field."""
    op = r.randrange(5)
    b = bytearray(data)
    if op == 0:
        return bytes(b[: r.randrange(1, len(b))])
    if op == 1:
        for _ in range(r.randrange(1, 12)):
            b[r.randrange(len(b))] ^= 1 << r.randrange(8)
        return bytes(b)
    if op == 2:
        i = r.randrange(len(b))
        b[i : i + r.randrange(1, 16)] = b"\xff" * 8
        return bytes(b)
    if op == 3:
        i = r.randrange(len(b))
        return bytes(b[:i] + r.randbytes(r.randrange(1, 64)) + b[i:])
    i = r.randrange(min(64, len(b)))  # the header: dimensions, lengths
    b[i : i + 2] = b"\x7f\xff"
    return bytes(b)


@pytest.mark.filterwarnings("ignore::UserWarning")  # Pillow's about corrupt EXIF data and the like
def test_fuzz_truncated_and_mutated_images_never_crash_the_ingest(tmp_path, istore):
    """~200 mutated images of nine formats: the ingest completes; each file is either stored or
    skipped with one bad-image note naming it; a rerun adds nothing."""
    r = random.Random(20240501)
    seeds = _seeds()
    root = tmp_path / "fuzz"
    root.mkdir()
    names = []
    for i in range(216):
        name = f"f{i:03d}.img"  # not an image extension: files whose signature broke are not images
        data = mutate(seeds[i % len(seeds)], r)
        if i % 2:
            name = f"f{i:03d}.png"  # the extension makes these images whatever their bytes
        (root / name).write_bytes(data)
        names.append(name)
    res, evs = run(istore, [make_source(str(root), images=True)], batch_size=16)
    assert res.sources[0].done and res.problems == 0
    stored = set(istore)
    bad = {pathlib.Path(w).name for w in notes(evs, "bad-image")}
    not_image = {pathlib.Path(w).name for w in notes(evs, "not-image")}
    assert stored | bad | not_image == set(names)
    assert not (stored & bad) and not (stored & not_image) and not (bad & not_image)
    assert len(bad) == len(notes(evs, "bad-image"))  # one note each
    assert bad and stored  # the mutations both break and spare some
    assert all(n.endswith(".img") for n in not_image)
    assert all("\n" not in str(e) and "Traceback" not in str(e) for e in evs)
    assert ingest(istore, [make_source(str(root), images=True)]).added == 0

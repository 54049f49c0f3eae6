"""A store of image fingerprints: kinds kept apart, verdicts, batches, reopening."""

from __future__ import annotations

import asyncio
import io
import sys

import numpy as np
import pytest

import fpstore
import fpstore.aio
from fpstore.errors import InputError, PipelineMismatchError

Image = pytest.importorskip("PIL.Image", reason="Pillow is in the test extra")


def photo(seed: int, width: int = 320, height: int = 240) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    fx, fy, ph = rng.uniform(15, 60), rng.uniform(15, 60), rng.uniform(0, 6)
    base = 120 + 80 * np.sin(xx / fx + ph) * np.cos(yy / fy) + 40 * np.sin((xx * rng.uniform(-1, 1) + yy) / rng.uniform(20, 80))
    img = np.stack([base, base * 0.7 + 40, 255 - base], axis=-1) + rng.normal(0, 5, (height, width, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def encode(array: np.ndarray, fmt: str = "JPEG", **save: object) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, fmt, **save)
    return buf.getvalue()


@pytest.fixture
def store(tmp_path):
    s = fpstore.open(tmp_path / "img", pipeline=fpstore.ImagePipeline(), merges="inline")
    yield s
    s.close()


def test_an_image_store_gives_verdicts_and_answers_queries(store) -> None:
    assert store.k == fpstore.fingerprint.image.DEFAULT_IMAGE_K["phash64"] == 10
    originals = {f"img{i}": photo(i) for i in range(12)}
    for key, arr in originals.items():
        verdict = store.add(key, image=encode(arr, quality=90))
        assert verdict.exact_duplicate_of is None and not verdict.near_duplicates, key
    smaller = np.asarray(Image.fromarray(originals["img3"]).resize((160, 120), Image.Resampling.BILINEAR))
    verdict = store.add("img3-small", image=encode(smaller, "PNG"))
    assert [m.key for m in verdict.near_duplicates] == ["img3"]
    copy = store.add("img5-again", image=encode(originals["img5"], quality=90))
    assert copy.exact_duplicate_of == "img5"
    matches = store.query(image=encode(originals["img7"], quality=40))
    assert [m.key for m in matches] == ["img7"]
    # The query by fingerprint agrees with the query by image.
    fp = store.pipeline.fingerprint(encode(originals["img7"], quality=40))
    assert store.query(fingerprint=fp, pipeline_id=store.pipeline.id) == matches


def test_kinds_are_kept_apart(tmp_path, store) -> None:
    with pytest.raises(InputError, match="fingerprints images: pass image="):
        store.add("t", text="a page of text " * 10)
    with pytest.raises(InputError, match="fingerprints images"):
        store.query(text="some text")
    with pytest.raises(InputError, match="fingerprints images"):
        store.add_many(["a"], texts=["some text"])
    with pytest.raises(InputError, match="not both"):
        store.add("x", text="t", image=encode(photo(1)))
    with pytest.raises(InputError, match="exactly one of image= and fingerprint="):
        store.add("x")
    with fpstore.open(tmp_path / "text") as text_store:
        with pytest.raises(InputError, match="fingerprints text: pass text="):
            text_store.add("i", image=encode(photo(1)))
        with pytest.raises(InputError, match="fingerprints text"):
            text_store.query(image=encode(photo(1)))
    assert len(store) == 0


def test_a_batch_with_an_undecodable_image_is_refused_whole(store) -> None:
    images = [encode(photo(i)) for i in range(5)]
    images[3] = images[3][:100]
    with pytest.raises(InputError, match="index 3"):
        store.add_many([f"k{i}" for i in range(5)], images=images)
    assert len(store) == 0
    images[3] = encode(photo(3))
    ids = store.add_many([f"k{i}" for i in range(5)], images=images, checkpoint=("images", 5))
    assert len(ids) == 5 and store.checkpoint("images") == 5
    verdicts = store.add_each(["a", "b"], images=[encode(photo(1), quality=50), encode(photo(40))])
    assert [m.key for m in verdicts[0].near_duplicates] == ["k1"] and not verdicts[1].near_duplicates


def test_tiny_and_blank_images_match_only_exactly(store) -> None:
    pixel = encode(np.zeros((1, 1, 3), np.uint8), "GIF")
    other_pixel = encode(np.full((1, 1, 3), 255, np.uint8), "GIF")
    first = store.add("pixel", image=pixel)
    assert first.short
    assert not store.add("other-pixel", image=other_pixel).near_duplicates  # same hash, different bytes
    assert store.add("pixel-again", image=pixel).exact_duplicate_of == "pixel"
    assert store.add("white", image=encode(np.full((300, 300, 3), 255, np.uint8), "PNG")).short


def test_reopening_keeps_the_image_pipeline(tmp_path) -> None:
    path = tmp_path / "d"
    with fpstore.open(path, pipeline=fpstore.ImagePipeline(kind="dhash64"), k=6) as s:
        s.add("a", image=encode(photo(1)))
        assert "image" in s.header["features"]
    with fpstore.open(path) as s:
        assert s.pipeline == fpstore.ImagePipeline(kind="dhash64")
        assert [m.key for m in s.query(image=encode(photo(1), quality=60))] == ["a"]
    with pytest.raises(PipelineMismatchError, match="kind: store has 'dhash64', given 'phash64'"):
        fpstore.open(path, pipeline=fpstore.ImagePipeline())
    with pytest.raises(PipelineMismatchError):
        fpstore.open(path, pipeline=fpstore.Pipeline())
    with fpstore.open(path, readonly=True) as s:
        assert s.explain("a", "a").distance == 0
        with pytest.raises(InputError, match="fingerprints images"):
            s.explain("a", "a", text_a="x", text_b="y")


def test_the_asyncio_facade_takes_images(tmp_path) -> None:
    async def main() -> None:
        async with fpstore.aio.open(tmp_path / "aio", pipeline=fpstore.ImagePipeline()) as s:
            await s.add("a", image=encode(photo(2)))
            verdict = await s.add("b", image=encode(photo(2), quality=45))
            assert [m.key for m in verdict.near_duplicates] == ["a"]
            assert [m.key for m in await s.query(image=encode(photo(2), quality=70))] == ["a", "b"]

    asyncio.run(main())


def test_an_image_store_exports_and_imports(tmp_path) -> None:
    from fpstore.admin.exchange import export_store, import_stream

    with fpstore.open(tmp_path / "a", pipeline=fpstore.ImagePipeline(kind="dhash64")) as s:
        s.add_many([f"k{i}" for i in range(6)], images=[encode(photo(i)) for i in range(6)], checkpoint=("feed", 6))
        s.add("tiny", image=encode(np.zeros((2, 2, 3), np.uint8), "PNG"))
        buf = io.BytesIO()
        export_store(s, buf)
        before = sorted((d.key, d.fingerprint, d.content_hash, d.short) for d in s.documents())
    res = import_stream(io.BytesIO(buf.getvalue()), str(tmp_path / "b"))
    assert res.created
    with fpstore.open(tmp_path / "b", readonly=True) as s:
        assert s.pipeline == fpstore.ImagePipeline(kind="dhash64")
        assert sorted((d.key, d.fingerprint, d.content_hash, d.short) for d in s.documents()) == before
        assert [m.key for m in s.query(image=encode(photo(4), quality=60))] == ["k4"]


def test_a_threshold_is_refused_for_images_with_a_reason(tmp_path) -> None:
    with pytest.raises(InputError, match="image store matches within k bits"):
        fpstore.open(tmp_path / "t", pipeline=fpstore.ImagePipeline(), threshold=0.8)
    assert not (tmp_path / "t").exists()
    fpstore.open(tmp_path / "u", pipeline=fpstore.ImagePipeline()).close()
    with pytest.raises(InputError, match="image store matches within k bits"):
        fpstore.open(tmp_path / "u", threshold=0.8)


def test_an_image_store_opens_and_answers_fingerprints_without_pillow(tmp_path, monkeypatch) -> None:
    path = tmp_path / "p"
    with fpstore.open(path, pipeline=fpstore.ImagePipeline()) as s:
        s.add("a", image=encode(photo(1)))
        fp = s["a"].fingerprint
    for name in [m for m in sys.modules if m == "PIL" or m.startswith("PIL.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "PIL", None)  # import PIL now raises ImportError
    with fpstore.open(path) as s:
        assert [m.key for m in s.query(fingerprint=fp, pipeline_id=s.pipeline.id)] == ["a"]
        with pytest.raises(InputError, match=r"need Pillow: pip install 'fpstore\[image\]'"):
            s.add("b", image=b"\x89PNG")


def test_reopening_keeps_the_callers_limits(tmp_path) -> None:
    """An open with an ImagePipeline of the store's id keeps its limits (they are not in the id)."""
    path = tmp_path / "l"
    fpstore.open(path, pipeline=fpstore.ImagePipeline()).close()
    with fpstore.open(path, pipeline=fpstore.ImagePipeline(max_pixels=10_000)) as s:
        assert s.pipeline.max_pixels == 10_000
        with pytest.raises(InputError, match="max_pixels"):
            s.add("big", image=encode(photo(1)))
    with fpstore.open(path) as s:
        assert s.pipeline.max_pixels == fpstore.ImagePipeline().max_pixels

"""Export and import carry each document's verification sketch (stream version 3); older streams
(version 1, version 2, and streams of stores without a sketch) import exactly as before; a stream
without sketches is refused by a store that needs them before anything is written; the ``sketch``
column of ``dump`` and :func:`fpstore.store.rows.record_batches`."""

from __future__ import annotations

import hashlib
import io
import pathlib

import msgpack
import numpy as np
import pytest
import zstandard

import fpstore
from fpstore.admin.exchange import EXPORT_VERSION, export_store, import_stream, read_stream
from fpstore.errors import FormatError, InputError, PipelineMismatchError
from fpstore.fingerprint.pipeline import Fingerprints
from fpstore.store.documents import documents_with_sketches
from tests.support.corpora import token_variants, unrelated_texts

DATA = pathlib.Path(__file__).resolve().parent / "data"
SKETCH_PIPE = fpstore.Pipeline(sketch_bits=256, html="off")
PLAIN_PIPE = fpstore.Pipeline(html="off", sketch_bits=0)
K = 8
#: Made by fpstore at af4dff6 (stream version 2) from :func:`fill` with PLAIN_PIPE and SKETCH_PIPE.
V2_PLAIN = DATA / "export_v2.fpx"
V2_SKETCH = DATA / "export_v2_sketch_pipeline.fpx"


def corpus(seed: int = 0) -> list[str]:
    """Families of near-duplicate 200-token texts, and unrelated texts."""
    rng = np.random.default_rng(seed)
    texts = [t for _ in range(5) for t in token_variants(rng, 8, 29, length=200)]
    return texts + unrelated_texts(rng, 8, 150)


def fill(store: fpstore.Store) -> list[str]:
    """Every write path, keys of every type, a short text, a canonical key and a checkpoint; the
    texts, for queries."""
    texts = corpus()
    pipe = store.pipeline
    keys = [f"d{i}" for i in range(len(texts))]
    q = len(texts) // 4
    for key, t in zip(keys[:q], texts[:q]):
        store.add(key, text=t)
    store.add_many(keys[q : 2 * q], texts=texts[q : 2 * q], canonicals=[keys[0]] + [None] * (q - 1))
    store.add_each(keys[2 * q : 3 * q], texts=texts[2 * q : 3 * q])
    store.bulk_load(keys[3 * q :], pipe.signatures(texts[3 * q :]))
    store.add_many([b"raw-\xff", 12345, "sur\udc80", "tiny"], texts=[texts[1], texts[9], texts[17], "a short note"], checkpoint=("feed", 7))
    sigs = pipe.signatures([texts[25]])
    store.add_many(["by-fingerprint"], fingerprints=Fingerprints(sigs.values, pipe.id, sketches=sigs.sketches))  # no content hash
    store.delete(keys[3])
    return texts


def make(path: pathlib.Path, pipe: fpstore.Pipeline) -> list[str]:
    with fpstore.open(path, pipeline=pipe, k=K) as s:
        return fill(s)


def export(path: pathlib.Path) -> bytes:
    buf = io.BytesIO()
    with fpstore.open(path, readonly=True) as s:
        export_store(s, buf)
    return buf.getvalue()


def state(path: pathlib.Path, texts: list[str]) -> tuple:
    """Everything an export carries, and the answers: documents (ids aside) with their sketches,
    checkpoints, every text's matches with their similarities, the verified pairs."""
    with fpstore.open(path, readonly=True) as s:
        docs = sorted(
            (repr(d.key), d.fingerprint, d.content_hash, d.short, repr(d.canonical), None if sk is None else sk.tolist())
            for d, sk in documents_with_sketches(s)
        )
        answers = [[(repr(m.key), m.distance, m.fingerprint, m.similarity) for m in s.query(text=t)] for t in texts]
        pairs = None
        if s.pipeline.sketch_bits:
            a, b, dist = s.near_duplicate_pairs(threshold=0.7)
            keys_a, keys_b = s.keys_of(a), s.keys_of(b)
            pairs = sorted((min(repr(x), repr(y)), max(repr(x), repr(y)), int(d)) for x, y, d in zip(keys_a, keys_b, dist))
        return docs, s.checkpoints(), answers, pairs, s.pipeline.id, s.k


def unframe(data: bytes) -> list:
    raw = zstandard.ZstdDecompressor().decompress(data, max_output_size=1 << 26)
    return list(msgpack.Unpacker(io.BytesIO(raw), raw=False, strict_map_key=False))


def reframe(objs: list) -> bytes:
    """Objects as a stream, with the trailer's digest (and counts) recomputed for the records and
    checkpoints between the header and the trailer."""
    header, body, trailer = objs[0], objs[1:-1], dict(objs[-1])
    digest = hashlib.blake2b(digest_size=16)
    for o in body:
        digest.update(msgpack.packb(o, use_bin_type=True))
    trailer["digest"] = digest.digest()
    trailer["count"] = sum(1 for o in body if not isinstance(o, dict))
    if "checkpoints" in trailer:
        trailer["checkpoints"] = sum(1 for o in body if isinstance(o, dict))
    packed = b"".join(msgpack.packb(o, use_bin_type=True) for o in [header, *body, trailer])
    return zstandard.ZstdCompressor(write_checksum=True).compress(packed)


# -- round trips ---------------------------------------------------------------------------------------------


def test_a_sketch_store_round_trips_with_its_sketches(tmp_path):
    """Exported and imported into a new path, a store with a sketch holds every document with its
    sketch and gives the same answers, similarities and verified pairs (import failed before:
    it passed fingerprints without sketches, which the new store refused)."""
    texts = make(tmp_path / "a", SKETCH_PIPE)
    data = export(tmp_path / "a")
    assert unframe(data)[0]["version"] == 3 == EXPORT_VERSION
    res = import_stream(io.BytesIO(data), str(tmp_path / "b"), batch_size=7)
    assert res.created and res.records == len(texts) + 5 - 1
    want = state(tmp_path / "a", texts)
    assert want[0][0][5] is not None and want[3]  # sketches compared; pairs found
    assert state(tmp_path / "b", texts) == want
    with fpstore.open(tmp_path / "b", readonly=True) as s:
        assert s.verify() == []


def test_a_sketch_stream_into_an_existing_store_and_again(tmp_path):
    """Into an existing store of the same pipeline: the same documents and answers; a second
    import changes nothing."""
    texts = make(tmp_path / "a", SKETCH_PIPE)
    data = export(tmp_path / "a")
    with fpstore.open(tmp_path / "b", pipeline=SKETCH_PIPE, k=K):
        pass
    import_stream(io.BytesIO(data), str(tmp_path / "b"), batch_size=5)
    want = state(tmp_path / "a", texts)
    got = state(tmp_path / "b", texts)
    own = {n: p for n, p in got[1].items() if not n.startswith("import:")}  # the import's own resume point
    assert (got[0], own, *got[2:]) == want
    res = import_stream(io.BytesIO(data), str(tmp_path / "b"), batch_size=5)
    assert res.records == 0 and state(tmp_path / "b", texts) == got


def test_the_stores_threshold_travels_with_the_stream(tmp_path):
    """A verifying store (open(threshold=)) is imported into a new store with its threshold, so
    queries, pairs and add verdicts verify alike; an existing store keeps its own."""
    with fpstore.open(tmp_path / "a", pipeline=SKETCH_PIPE, k=K, threshold=0.75) as s:
        texts = fill(s)
    data = export(tmp_path / "a")
    assert unframe(data)[0]["threshold"] == 0.75
    import_stream(io.BytesIO(data), str(tmp_path / "b"))
    with fpstore.open(tmp_path / "b", readonly=True) as s:
        assert s.threshold == 0.75
    want = state(tmp_path / "a", texts)
    assert state(tmp_path / "b", texts) == want
    with fpstore.open(tmp_path / "a") as a, fpstore.open(tmp_path / "b") as b:
        va, vb = (s.add("new", text=texts[5] + " more") for s in (a, b))
        assert va.near_duplicates and [(m.key, m.distance, m.similarity) for m in va.near_duplicates] == [
            (m.key, m.distance, m.similarity) for m in vb.near_duplicates
        ]
        assert va.canonical == vb.canonical
    with fpstore.open(tmp_path / "c", pipeline=SKETCH_PIPE, k=K, threshold=0.5):
        pass
    import_stream(io.BytesIO(data), str(tmp_path / "c"))
    with fpstore.open(tmp_path / "c", readonly=True) as s:
        assert s.threshold == 0.5
    header = unframe(data)[0]
    for bad in (dict(header, threshold=1.5), dict(header, threshold="0.7"), {k: v for k, v in header.items() if k != "threshold"}):
        with pytest.raises(FormatError, match="threshold"):
            read_stream(io.BytesIO(reframe([bad, *unframe(data)[1:]])))


def test_a_store_without_a_sketch_still_exports_version_2(tmp_path):
    """A store without a sketch is exported as before (version 2, records of five fields), which
    older fpstore reads, and imports to the same state."""
    texts = make(tmp_path / "a", PLAIN_PIPE)
    data = export(tmp_path / "a")
    objs = unframe(data)
    assert objs[0]["version"] == 2 and all(len(o) == 5 for o in objs[1:-1] if isinstance(o, list))
    import_stream(io.BytesIO(data), str(tmp_path / "b"))
    assert state(tmp_path / "b", texts) == state(tmp_path / "a", texts)


def test_a_committed_version_2_stream_imports_as_before(tmp_path):
    """The version 2 stream of a store without a sketch, written by an earlier fpstore, imports to
    what that store held."""
    texts = make(tmp_path / "a", PLAIN_PIPE)
    assert unframe(V2_PLAIN.read_bytes())[0]["version"] == 2
    with V2_PLAIN.open("rb") as fh:
        import_stream(fh, str(tmp_path / "b"))
    assert state(tmp_path / "b", texts) == state(tmp_path / "a", texts)


def test_a_version_1_stream_imports(tmp_path):
    """A version 1 stream (no checkpoints, a trailer without their count) imports its records."""
    texts = make(tmp_path / "a", PLAIN_PIPE)
    objs = unframe(V2_PLAIN.read_bytes())
    body = [o for o in objs[1:-1] if not isinstance(o, dict)]
    trailer = {k: v for k, v in objs[-1].items() if k != "checkpoints"}
    v1 = reframe([dict(objs[0], version=1), *body, trailer])
    import_stream(io.BytesIO(v1), str(tmp_path / "b"))
    docs, _, answers, *_ = state(tmp_path / "b", texts)
    want = state(tmp_path / "a", texts)
    assert (docs, answers) == (want[0], want[2])


# -- refusals ------------------------------------------------------------------------------------------------


def test_a_stream_without_sketches_is_refused_by_a_store_that_needs_them(tmp_path):
    """A version 2 stream of a store with a sketch (as an earlier fpstore exported it, without the
    sketches) is refused before anything is written: no new store, an existing one unchanged."""
    header = unframe(V2_SKETCH.read_bytes())[0]
    assert header["version"] == 2 and header["pipeline"]["sketch_bits"] == 256
    with pytest.raises(FormatError, match="sketch"), V2_SKETCH.open("rb") as fh:
        import_stream(fh, str(tmp_path / "new"))
    assert not (tmp_path / "new").exists() and list(tmp_path.iterdir()) == []
    with fpstore.open(tmp_path / "old", pipeline=SKETCH_PIPE, k=K) as s:
        s.add("kept", text=corpus()[0])
    with pytest.raises(FormatError, match="sketch"), V2_SKETCH.open("rb") as fh:
        import_stream(fh, str(tmp_path / "old"))
    with fpstore.open(tmp_path / "old", readonly=True) as s:
        assert list(s) == ["kept"] and s.checkpoints() == {}


def test_a_sketch_length_must_match_the_store(tmp_path):
    """A stream made with 256-bit sketches cannot enter a store that keeps 512-bit sketches
    (another pipeline): refused, nothing written. A store of the same pipeline without a sketch
    takes it, without the sketches: the fingerprints are the same."""
    make(tmp_path / "a", SKETCH_PIPE)
    data = export(tmp_path / "a")
    with fpstore.open(tmp_path / "wide", pipeline=fpstore.Pipeline(sketch_bits=512, html="off"), k=K):
        pass
    with pytest.raises(PipelineMismatchError, match="sketch"):
        import_stream(io.BytesIO(data), str(tmp_path / "wide"))
    with fpstore.open(tmp_path / "wide", readonly=True) as s:
        assert len(s) == 0
    with fpstore.open(tmp_path / "none", pipeline=PLAIN_PIPE, k=K):
        pass
    import_stream(io.BytesIO(data), str(tmp_path / "none"))
    with fpstore.open(tmp_path / "a", readonly=True) as a, fpstore.open(tmp_path / "none", readonly=True) as s:
        assert sorted((repr(d.key), d.fingerprint) for d in s.documents()) == sorted((repr(d.key), d.fingerprint) for d in a.documents())
        assert len(s) == len(a) and s.pipeline == PLAIN_PIPE


def hostile_v3(data: bytes) -> dict[str, bytes]:
    objs = unframe(data)
    header, trailer = objs[0], objs[-1]
    body = objs[1:-1]
    recs = [i for i, o in enumerate(body) if isinstance(o, list)]
    first = recs[0]

    def with_record(rec: list) -> bytes:
        return reframe([header, *body[:first], rec, *body[first + 1 :], trailer])

    r = body[first]
    no_sketch_pipe = dict(header["pipeline"])
    del no_sketch_pipe["sketch_bits"]
    return {
        "sketch short": with_record([*r[:5], r[5][:-8]]),
        "sketch long": with_record([*r[:5], r[5] + bytes(8)]),
        "sketch nil": with_record([*r[:5], None]),
        "sketch not bin": with_record([*r[:5], [1, 2, 3, 4]]),
        "five fields": with_record(r[:5]),
        "seven fields": with_record([*r, None]),
        "v2 holding sketches": reframe([dict(header, version=2), *body, trailer]),
        "sketches for a pipeline without": reframe(
            [dict(header, pipeline=no_sketch_pipe, pipeline_id=fpstore.Pipeline.from_config(no_sketch_pipe).id), *body, trailer]
        ),
        "digest": zstandard.ZstdCompressor().compress(
            b"".join(msgpack.packb(o, use_bin_type=True) for o in [header, *body[:first], [*r[:5], bytes(len(r[5]))], *body[first + 1 :], trailer])
        ),
    }


def test_hostile_version_3_streams_are_refused_and_leave_nothing(tmp_path):
    """Sketches of the wrong length, missing, of the wrong type, or where the pipeline has none;
    records of the wrong size; a tampered sketch: FormatError, no store left, an existing one unchanged."""
    make(tmp_path / "a", SKETCH_PIPE)
    data = export(tmp_path / "a")
    existing = tmp_path / "existing"
    with fpstore.open(existing, pipeline=SKETCH_PIPE, k=K) as s:
        s.add("kept", text=corpus()[0])
    for name, bad in hostile_v3(data).items():
        target = tmp_path / f"new-{name.replace(' ', '-')}"
        with pytest.raises(FormatError):
            import_stream(io.BytesIO(bad), str(target))
        assert not target.exists(), name
        assert not [p for p in tmp_path.iterdir() if "importing" in p.name], name
        if "pipeline without" not in name:  # that one is another pipeline: refused as such
            with pytest.raises(FormatError):
                import_stream(io.BytesIO(bad), str(existing))
        with fpstore.open(existing, readonly=True) as s:
            assert list(s) == ["kept"], name


def test_read_stream_gives_each_records_sketch(tmp_path):
    """read_stream's records carry the sketch as uint64[W] (None in streams without)."""
    make(tmp_path / "a", SKETCH_PIPE)
    header, records = read_stream(io.BytesIO(export(tmp_path / "a")))
    recs = list(records)
    assert header.pipeline.sketch_bits == 256
    assert all(r.sketch is not None and r.sketch.dtype == np.uint64 and r.sketch.shape == (4,) for r in recs)
    with fpstore.open(tmp_path / "a", readonly=True) as s:
        assert recs[0].sketch.tolist() == next(documents_with_sketches(s))[1].tolist()
    with V2_PLAIN.open("rb") as fh:
        _, records = read_stream(fh)
        assert all(r.sketch is None for r in records)


# -- dump and Arrow --------------------------------------------------------------------------------------------


def test_rows_and_arrow_carry_the_sketch_column(tmp_path):
    """Stores with a sketch: rows and record batches gain ``sketch`` (fixed-size binary, W × 8 bytes,
    little-endian words; hex in rows); stores without keep the seven columns."""
    pytest.importorskip("pyarrow")
    from fpstore.store.rows import COLUMNS, record_batches, store_rows

    make(tmp_path / "a", SKETCH_PIPE)
    make(tmp_path / "p", PLAIN_PIPE)
    with fpstore.open(tmp_path / "a", readonly=True) as s:
        pairs = list(documents_with_sketches(s))
        table = pa_table(record_batches(s, batch_size=10))
        got = list(store_rows(s))
    assert table.column_names == [*COLUMNS, "sketch"] and str(table.schema.field("sketch").type) == "fixed_size_binary[32]"
    assert table.num_rows == len(pairs) == len(got)
    for (doc, sk), cell, row in zip(pairs, table.column("sketch").to_pylist(), got):
        assert cell == sk.astype("<u8").tobytes() and row["sketch"] == cell.hex() and row["id"] == doc.id
    with fpstore.open(tmp_path / "p", readonly=True) as s:
        table = pa_table(record_batches(s))
        got = list(store_rows(s))
    assert table.column_names == list(COLUMNS) and all("sketch" not in r for r in got)


def pa_table(batches):
    import pyarrow as pa

    return pa.Table.from_batches(list(batches))


def test_sketches_of_a_store_without_one_is_an_input_error(tmp_path):
    """documents_with_sketches gives None sketches in a store without one; sketches_of refuses."""
    from fpstore.store.documents import sketches_of

    make(tmp_path / "p", PLAIN_PIPE)
    with fpstore.open(tmp_path / "p", readonly=True) as s:
        assert all(sk is None for _, sk in documents_with_sketches(s))
        with pytest.raises(InputError, match="sketch"):
            sketches_of(s, np.array([1, 2]))


def test_spark_sketch_columns_are_checked_before_they_are_read():
    """fpstore.spark.sketches (pyarrow only, no Spark): a sketch column round-trips, slices read
    their own rows, and a null or a value of another length is an InputError."""
    pa = pytest.importorskip("pyarrow")
    from fpstore.spark.sketches import arrow_sketches, sketch_array

    sk = np.random.default_rng(1).integers(0, 2**64, (7, 4), dtype=np.uint64)
    arr = sketch_array(sk)
    assert arrow_sketches(arr, 4, "x").tolist() == sk.tolist()
    assert arrow_sketches(arr.slice(2, 3), None, "x").tolist() == sk[2:5].tolist()
    assert arrow_sketches(pa.chunked_array([arr.slice(0, 2), arr.slice(2)]), 4, "x").tolist() == sk.tolist()
    masked = sketch_array(sk, np.array([False, True] + [False] * 5))
    assert masked.to_pylist()[1] is None and masked.to_pylist()[0] == sk[0].astype("<u8").tobytes()
    for bad, words in ((masked, 4), (arr, 2), (pa.array([b"x" * 32, b"y" * 31]), 4), (pa.array([b"z" * 12]), None), (pa.array([1, 2]), 4)):
        with pytest.raises(InputError):
            arrow_sketches(bad, words, "the sketch column")

"""The store: exact answers against brute force, the header and pipeline checks, bad input."""

from __future__ import annotations

import os
import random

import lmdb
import msgpack
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import fpstore
from fpstore.errors import (
    ClosedError,
    DesignError,
    FormatError,
    FpstoreError,
    InputError,
    NotAStoreError,
    PipelineMismatchError,
    ReadOnlyError,
)

VOCAB = [f"w{i}" for i in range(3000)]


def brute(stored: dict[object, int], fp: int, k: int) -> dict[object, int]:
    """Every stored key within k of fp, with its distance: the oracle."""
    return {key: (f ^ fp).bit_count() for key, f in stored.items() if (f ^ fp).bit_count() <= k}


def as_dict(matches) -> dict[object, int]:
    return {m.key: m.distance for m in matches}


def clustered(rng: np.random.Generator, n: int) -> np.ndarray:
    """n fingerprints in tight clusters: shared long prefixes, a few flipped bits, exact repeats."""
    centres = rng.integers(0, 2**64, size=max(1, n // 50), dtype=np.uint64)
    fps = centres[rng.integers(0, len(centres), size=n)]
    flips = rng.integers(0, 64, size=(n, 3))
    active = rng.random((n, 3)) < 0.6
    for j in range(3):
        fps = fps ^ np.where(active[:, j], np.uint64(1) << flips[:, j].astype(np.uint64), np.uint64(0))
    return fps


# -- exactness at scale ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["random", "clustered"])
@pytest.mark.parametrize("design", ["auto", "r4"])
def test_queries_equal_brute_force_on_1e5(tmp_path, kind, design):
    """10^5 random or clustered fingerprints: every query at every k' <= k equals numpy brute force."""
    rng = np.random.default_rng(11)
    n = 100_000
    fps = rng.integers(0, 2**64, size=n, dtype=np.uint64) if kind == "random" else clustered(rng, n)
    with fpstore.open(tmp_path / "s", k=3, design=design, expected_size=n) as s:
        pid = s.pipeline.id
        for lo in range(0, n, 20_000):
            s.add_many([f"d{i}" for i in range(lo, lo + 20_000)], fingerprints=fps[lo : lo + 20_000], pipeline_id=pid)
        assert len(s) == n
        # Queries near stored fingerprints (so matches exist) and some unrelated ones.
        picks = rng.integers(0, n, size=150)
        flips = np.uint64(1) << rng.integers(0, 64, size=150).astype(np.uint64)
        queries = np.concatenate([fps[picks] ^ flips, rng.integers(0, 2**64, size=50, dtype=np.uint64)])
        for kq in range(0, 4):
            qi, ids, dist = s.query_many(queries, pipeline_id=pid, k=kq)
            d_all = np.bitwise_count(fps[None, :] ^ queries[:, None])
            bq, bi = np.nonzero(d_all <= kq)
            got = set(zip(qi.tolist(), (ids - 1).tolist(), dist.tolist()))
            want = set(zip(bq.tolist(), bi.tolist(), d_all[bq, bi].tolist()))
            assert got == want, f"k'={kq}"
        for q in queries[:40].tolist():
            want = {f"d{i}": int(d) for i, d in enumerate(np.bitwise_count(fps ^ np.uint64(q)).tolist()) if d <= 3}
            assert as_dict(s.query(fingerprint=q, pipeline_id=pid)) == want


# -- the model-based state machine ---------------------------------------------------------------


class StoreModel(RuleBasedStateMachine):
    """add, add_many, bulk_load, delete, compact, query at every k' <= k, all pairs, reopen: against a dict.

    ``FLUSH`` is the store's ``flush_entries``: tiny, so writes keep moving the incremental tables
    into runs and merging runs by tiers; the subclass below runs with flushing off.
    """

    FLUSH = 3

    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self.dir = tempfile.mkdtemp(prefix="fpstore-sm-")
        self.path = os.path.join(self.dir, "s")
        self.store = fpstore.open(self.path, k=3, design="r4", flush_entries=self.FLUSH)
        self.pid = self.store.pipeline.id
        self.model: dict[str | int, int] = {}
        self.base = random.Random(0).getrandbits(64)

    def teardown(self) -> None:
        self.store.close()
        import shutil

        shutil.rmtree(self.dir, ignore_errors=True)

    def _fp(self, flips: list[int], far: bool, raw: int) -> int:
        """A fingerprint near a shared base (so near and exact duplicates are common), or a random one."""
        if far:
            return raw
        fp = self.base
        for b in flips:
            fp ^= 1 << b
        return fp

    @rule(
        key=st.sampled_from([f"k{i}" for i in range(12)]),
        flips=st.lists(st.integers(0, 63), max_size=6),
        far=st.booleans(),
        raw=st.integers(0, 2**64 - 1),
    )
    def add(self, key, flips, far, raw):
        fp = self._fp(flips, far, raw)
        res = self.store.add(key, fingerprint=fp, pipeline_id=self.pid)
        others = {k: f for k, f in self.model.items() if k != key}
        assert as_dict(res.near_duplicates) == brute(others, fp, 3)
        self.model[key] = fp

    @rule(
        items=st.lists(
            st.tuples(
                st.sampled_from([f"k{i}" for i in range(12)]),
                st.lists(st.integers(0, 63), max_size=6),
                st.booleans(),
                st.integers(0, 2**64 - 1),
            ),
            max_size=8,
        )
    )
    def add_many(self, items):
        keys = [k for k, *_ in items]
        fps = [self._fp(fl, far, raw) for _, fl, far, raw in items]
        self.store.add_many(keys, fingerprints=np.array(fps, dtype=np.uint64), pipeline_id=self.pid)
        for k, f in zip(keys, fps):
            self.model[k] = f

    @rule(
        items=st.lists(
            st.tuples(
                st.sampled_from([f"k{i}" for i in range(12)] + list(range(6))),
                st.lists(st.integers(0, 63), max_size=6),
                st.booleans(),
                st.integers(0, 2**64 - 1),
            ),
            min_size=1,
            max_size=10,
        ),
        max_run=st.integers(1, 6),
    )
    def bulk_load(self, items, max_run):
        keys = [k for k, *_ in items]
        fps = np.array([self._fp(fl, far, raw) for _, fl, far, raw in items], dtype=np.uint64)
        assert self.store.bulk_load(keys, fps, pipeline_id=self.pid, max_run=max_run) > 0
        for k, f in zip(keys, fps.tolist()):
            self.model[k] = f

    @rule(full=st.booleans())
    def compact(self, full):
        self.store.compact(full=full)

    @rule(k=st.integers(0, 4))
    def all_pairs(self, k):
        a, b, d = self.store.near_duplicate_pairs(k)
        ka, kb = self.store.keys_of(a), self.store.keys_of(b)
        got = sorted((min(repr(x), repr(y)), max(repr(x), repr(y)), int(z)) for x, y, z in zip(ka, kb, d.tolist()))
        keys = list(self.model)
        want = sorted(
            (min(repr(x), repr(y)), max(repr(x), repr(y)), (self.model[x] ^ self.model[y]).bit_count())
            for i, x in enumerate(keys)
            for y in keys[i + 1 :]
            if (self.model[x] ^ self.model[y]).bit_count() <= k
        )
        assert got == want

    @rule(key=st.sampled_from([f"k{i}" for i in range(12)] + list(range(6))))
    def delete(self, key):
        assert self.store.delete(key) == (key in self.model)
        self.model.pop(key, None)

    @rule(flips=st.lists(st.integers(0, 63), max_size=6), far=st.booleans(), raw=st.integers(0, 2**64 - 1), k=st.integers(0, 3))
    def query(self, flips, far, raw, k):
        fp = self._fp(flips, far, raw)
        assert as_dict(self.store.query(fingerprint=fp, pipeline_id=self.pid, k=k)) == brute(self.model, fp, k)

    @rule()
    def reopen(self):
        self.store.close()
        self.store = fpstore.open(self.path, flush_entries=self.FLUSH)

    @rule(
        queries=st.lists(st.tuples(st.lists(st.integers(0, 63), max_size=6), st.booleans(), st.integers(0, 2**64 - 1)), max_size=6),
        k=st.integers(0, 3),
    )
    def query_many(self, queries, k):
        fps = [self._fp(fl, far, raw) for fl, far, raw in queries]
        qi, ids, dist = self.store.query_many(np.array(fps, dtype=np.uint64), pipeline_id=self.pid, k=k)
        keys = self.store.keys_of(ids)
        for i, fp in enumerate(fps):
            got = {keys[j]: int(dist[j]) for j in np.flatnonzero(qi == i).tolist()}
            assert got == brute(self.model, fp, k)

    @invariant()
    def incremental_tables_stay_small(self):
        if self.FLUSH:
            assert self.store.info()["incremental_entries"] < self.FLUSH

    @invariant()
    def counts_agree(self):
        assert len(self.store) == len(self.model)
        assert sorted(self.store, key=repr) == sorted(self.model, key=repr)
        for key, fp in self.model.items():
            assert self.store[key].fingerprint == fp


TestStoreModel = StoreModel.TestCase
TestStoreModel.pytestmark = [pytest.mark.slow]
TestStoreModel.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


class StoreModelNoFlush(StoreModel):
    FLUSH = 0


TestStoreModelNoFlush = StoreModelNoFlush.TestCase
TestStoreModelNoFlush.pytestmark = [pytest.mark.slow]
TestStoreModelNoFlush.settings = settings(max_examples=30, stateful_step_count=30, deadline=None)


# -- documents, verdicts, keys ---------------------------------------------------------------------


def _text(rng: random.Random, n: int = 300) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(n))


def test_add_reports_exact_and_near_duplicates_and_canonical(store):
    """A copy is an exact duplicate; a lightly edited copy a near duplicate with the original as canonical."""
    rng = random.Random(1)
    words = _text(rng).split()
    original = " ".join(words)
    edited = " ".join(words[:100] + ["changed"] + words[101:])
    assert store.add("a", text=original).duplicate_of is None
    copy = store.add("b", text=original.upper())
    assert copy.exact_duplicate_of == "a" and copy.canonical == "a"
    near = store.add("c", text=edited)
    assert fpstore.hamming(near.fingerprint, store["a"].fingerprint) <= 3
    assert near.exact_duplicate_of is None
    assert {m.key for m in near.near_duplicates} == {"a", "b"} and near.canonical == "a"
    assert store["c"].canonical == "a" and store["a"].canonical is None
    unrelated = store.add("d", text=_text(rng))
    assert unrelated.duplicate_of is None and unrelated.canonical is None


def test_on_duplicate_skip_stores_nothing(store):
    """on_duplicate='skip' leaves a duplicate out of the store but still reports it."""
    t = _text(random.Random(2))
    store.add("a", text=t)
    res = store.add("b", text=t, on_duplicate="skip")
    assert res.id is None and res.exact_duplicate_of == "a"
    assert "b" not in store and len(store) == 1


def test_re_adding_a_key_is_idempotent_or_replaces(store):
    """The same key and text twice is one document; new text under a key replaces the old."""
    rng = random.Random(3)
    t1, t2 = _text(rng), _text(rng)
    first = store.add("a", text=t1)
    again = store.add("a", text=t1)
    assert again.id == first.id and len(store) == 1
    store.add("a", text=t2)
    assert len(store) == 1 and store["a"].fingerprint == fpstore.Pipeline().fingerprint(t2)
    assert store.query(text=t1) == [] or all(m.key != "a" or m.distance > 0 for m in store.query(text=t1))


def test_short_texts_use_only_the_exact_tier(tmp_path):
    """Texts under min_tokens are matched by content hash only, never by fingerprint."""
    with fpstore.open(tmp_path / "s", pipeline=fpstore.Pipeline(min_tokens=10)) as s:
        s.add("a", text="breaking news today")
        assert s.add("b", text="Breaking NEWS, today!").exact_duplicate_of == "a"
        res = s.add("c", text="breaking news tonight")
        assert res.short and res.duplicate_of is None
        assert [m.key for m in s.query(text="breaking news today")] == ["a", "b"]


def test_keys_of_any_length_and_type(store):
    """str, bytes and int keys, of any length past LMDB's 511-byte limit, round-trip and stay distinct."""
    pid = store.pipeline.id
    long_str, long_bytes = "x" * 5000, b"\x00\xff" * 3000
    keys = ["a", b"a", long_str, long_bytes, "\ud800 lone surrogate", "", 0, 2**64 - 1]
    for i, key in enumerate(keys):
        store.add(key, fingerprint=i * 0x0101010101010101, pipeline_id=pid)
    assert len(store) == len(keys)
    for i, key in enumerate(keys):
        doc = store[key]
        assert doc.key == key and type(doc.key) is type(key) and doc.fingerprint == i * 0x0101010101010101
    assert list(store) == keys
    assert store.delete(long_bytes) and long_bytes not in store and long_str in store


@pytest.mark.parametrize("bulk", [False, True])
def test_keys_of_refuses_ids_that_are_not_live_document_ids(tmp_path, bulk):
    """Ids are the caller's input: a float or a string is refused, not truncated to an id; an id
    outside 1..2**63-1, or one whose document was deleted since the query, is an InputError naming
    it, not a report of damage (the store is intact)."""
    with fpstore.open(tmp_path / "s", k=5) as s:
        pid = s.pipeline.id
        if bulk:
            s.bulk_load(["a", "b", "c"], np.array([1, 2, 3], np.uint64), pipeline_id=pid)
        else:
            s.add_many(["a", "b", "c"], fingerprints=[1, 2, 3], pipeline_id=pid)
        _, ids, _ = s.query_many([1, 2, 3], pipeline_id=pid, k=0)
        assert s.keys_of(ids) == ["a", "b", "c"] and s.keys_of(ids.tolist()) == ["a", "b", "c"]
        assert s.keys_of(np.array([], np.int64)) == [] and s.keys_of([]) == []
        for bad in ([1.9], ["3"], [True], [None], None, 5, np.array([[1]]), np.array([1.0]), [0], [-1], [2**63], np.array([0], np.int64)):
            with pytest.raises(InputError):
                s.keys_of(bad)
        s.delete("b")
        for gone in (ids, ids.tolist(), [int(ids[1])], [10**9]):
            with pytest.raises(InputError, match="no live document"):
                s.keys_of(gone)
        with s.reader() as r:
            with pytest.raises(InputError, match="no live document"):
                r.keys_of(ids)
        assert s.verify() == [] and s.keys_of([int(ids[0]), int(ids[2])]) == ["a", "c"]


def test_checkpoint_commits_with_its_batch(store):
    """A checkpoint is readable after its batch commits and absent before any."""
    pid = store.pipeline.id
    assert store.checkpoint("feed") is None
    store.add_many(["a", "b"], fingerprints=np.array([1, 2], np.uint64), pipeline_id=pid, checkpoint=("feed", {"file": "x", "offset": 7}))
    assert store.checkpoint("feed") == {"file": "x", "offset": 7}
    with pytest.raises(InputError):
        store.add_many(["c"], fingerprints=np.array([3], np.uint64), pipeline_id=pid, checkpoint=("feed", object()))
    assert "c" not in store and store.checkpoint("feed") == {"file": "x", "offset": 7}


def test_add_many_keeps_the_last_of_repeated_keys(store):
    """A key repeated within a batch ends as one document with its last fingerprint."""
    ids = store.add_many(["a", "b", "a"], fingerprints=np.array([1, 2, 3], np.uint64), pipeline_id=store.pipeline.id)
    assert ids[0] == ids[2] and len(store) == 2 and store["a"].fingerprint == 3


def test_add_many_with_texts_feeds_the_exact_tier(store):
    """Texts given to add_many get content hashes, so a later add sees the exact duplicate."""
    rng = random.Random(4)
    texts = [_text(rng) for _ in range(5)]
    store.add_many([f"d{i}" for i in range(5)], texts=texts)
    assert store.add("copy", text=texts[3]).exact_duplicate_of == "d3"


def test_exhaustive_mode_beyond_the_design(store):
    """k above the design's k is refused unless exhaustive=True, which equals brute force."""
    pid = store.pipeline.id
    rng = np.random.default_rng(5)
    fps = rng.integers(0, 2**64, size=3000, dtype=np.uint64)
    store.add_many([str(i) for i in range(3000)], fingerprints=fps, pipeline_id=pid)
    q = int(fps[0]) ^ 0b1111111
    with pytest.raises(DesignError, match="exhaustive"):
        store.query(fingerprint=q, pipeline_id=pid, k=12)
    got = as_dict(store.query(fingerprint=q, pipeline_id=pid, k=20, exhaustive=True))
    assert got == brute({str(i): int(f) for i, f in enumerate(fps)}, q, 20) and "0" in got


def test_data_survives_reopen_and_readers_see_it(tmp_path):
    """Close and reopen (and a read-only open) give the same answers."""
    path = tmp_path / "s"
    rng = random.Random(6)
    texts = [_text(rng) for _ in range(20)]
    with fpstore.open(path) as s:
        s.add_many([f"d{i}" for i in range(20)], texts=texts)
        before = [s.query(text=t) for t in texts]
    with fpstore.open(path, readonly=True) as r:
        assert [r.query(text=t) for t in texts] == before
        assert r.design.name and r.pipeline.id == fpstore.Pipeline().id


# -- refusals and bad input ----------------------------------------------------------------------


def test_stale_fingerprints_are_refused(store):
    """Raw fingerprints need this store's pipeline id; a mismatch writes nothing."""
    with pytest.raises(PipelineMismatchError, match="pipeline_id"):
        store.add("a", fingerprint=1)
    with pytest.raises(PipelineMismatchError):
        store.add("a", fingerprint=1, pipeline_id="0123456789abcdef")
    other = fpstore.Pipeline(shingle=2).signatures(["some text here"])
    with pytest.raises(PipelineMismatchError):
        store.add_many(["a"], fingerprints=other)
    with pytest.raises(PipelineMismatchError):
        store.query_many(np.array([1], np.uint64), pipeline_id="nope")
    assert len(store) == 0


def test_opening_with_another_pipeline_names_the_fields(tmp_path):
    """A different pipeline on open is refused, naming each differing field and both values."""
    fpstore.open(tmp_path / "s").close()
    with pytest.raises(PipelineMismatchError, match="shingle: store has 3, given 5"):
        fpstore.open(tmp_path / "s", pipeline=fpstore.Pipeline(shingle=5))


def _rewrite_header(path, **changes):
    env = lmdb.open(str(path), subdir=True, lib_version=0, max_dbs=256)
    meta = env.open_db(b"meta")
    with env.begin(write=True) as txn:
        header = msgpack.unpackb(txn.get(b"header", db=meta), raw=False)
        header.update(changes)
        txn.put(b"header", msgpack.packb(header, use_bin_type=True), db=meta)
    env.close()


@pytest.mark.parametrize(
    "changes, error, match",
    [
        ({"format": 99}, FormatError, "format version 99"),
        ({"features": ["time-travel"]}, FormatError, "time-travel"),
        ({"magic": "sqlite"}, NotAStoreError, "magic"),
        ({"design": {"bogus": 1}}, FormatError, "design"),
    ],
)
def test_newer_or_foreign_headers_are_refused(tmp_path, changes, error, match):
    """A newer format, an unknown required feature, a foreign magic or a bad design is refused on open."""
    fpstore.open(tmp_path / "s").close()
    _rewrite_header(tmp_path / "s", **changes)
    with pytest.raises(error, match=match):
        fpstore.open(tmp_path / "s")


def test_directories_that_are_not_stores(tmp_path):
    """A missing path (create=False), a file, or a foreign LMDB environment is not a store."""
    with pytest.raises(NotAStoreError):
        fpstore.open(tmp_path / "missing", create=False)
    with pytest.raises(NotAStoreError):
        fpstore.open(tmp_path / "missing", readonly=True)
    (tmp_path / "file").write_text("hello")
    with pytest.raises(NotAStoreError):
        fpstore.open(tmp_path / "file")
    env = lmdb.open(str(tmp_path / "foreign"), lib_version=0, max_dbs=4)
    with env.begin(write=True) as txn:
        txn.put(b"hello", b"world")
    env.close()
    with pytest.raises(NotAStoreError):
        fpstore.open(tmp_path / "foreign")
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "data.mdb").write_bytes(os.urandom(20000))
    with pytest.raises(FpstoreError):
        fpstore.open(tmp_path / "garbage")


def test_store_directory_is_private(tmp_path):
    """A new store directory is created with mode 0700."""
    fpstore.open(tmp_path / "s").close()
    assert (os.stat(tmp_path / "s").st_mode & 0o777) == 0o700


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.add("a"),
        lambda s: s.add("a", text="x", fingerprint=1, pipeline_id=s.pipeline.id),
        lambda s: s.add(3.5, text="x"),
        lambda s: s.add(-1, text="x"),
        lambda s: s.add(True, text="x"),
        lambda s: s.add("a", text="x", on_duplicate="maybe"),
        lambda s: s.add("a", fingerprint=-1, pipeline_id=s.pipeline.id),
        lambda s: s.add("a", fingerprint=2**64, pipeline_id=s.pipeline.id),
        lambda s: s.add_many(["a", "b"], fingerprints=np.array([1], np.uint64), pipeline_id=s.pipeline.id),
        lambda s: s.add_many(["a"], fingerprints=np.array([1.5]), pipeline_id=s.pipeline.id),
        lambda s: s.add_many(["a"], fingerprints=np.array([[1]], np.uint64), pipeline_id=s.pipeline.id),
        lambda s: s.add_many(["a"], fingerprints=np.array([-1], np.int64), pipeline_id=s.pipeline.id),
        lambda s: s.add_many(["a"], texts=["x"], fingerprints=np.array([1], np.uint64)),
        lambda s: s.add_many("abc", texts=["x", "y", "z"]),
        lambda s: s.query(),
        lambda s: s.query(fingerprint=1, pipeline_id=s.pipeline.id, k=-1),
        lambda s: s.query(fingerprint=1, pipeline_id=s.pipeline.id, k=4),
        lambda s: s.query_many(np.array([1], np.uint64), pipeline_id=s.pipeline.id, k=9),
    ],
)
def test_bad_input_raises_fpstore_errors_and_writes_nothing(store, call):
    """Wrong types, dtypes, shapes, lengths, argument combinations or k raise FpstoreError; nothing is written."""
    with pytest.raises(FpstoreError):
        call(store)
    assert len(store) == 0


def test_bad_text_in_a_batch_names_its_index(store):
    """A non-text element in add_many's texts raises TypeError naming its index; nothing is written."""
    with pytest.raises(TypeError, match="index 1"):
        store.add_many(["a", "b"], texts=["fine", None])
    assert len(store) == 0


def test_read_only_and_closed_stores(tmp_path):
    """Writes to a read-only store and any use after close raise typed errors."""
    fpstore.open(tmp_path / "s").close()
    with fpstore.open(tmp_path / "s", readonly=True) as r:
        with pytest.raises(ReadOnlyError):
            r.add("a", text="hello")
    s = fpstore.open(tmp_path / "s")
    s.close()
    s.close()
    with pytest.raises(ClosedError):
        len(s)
    with pytest.raises(ClosedError):
        s.add("a", text="x")


@given(st.integers(0, 2**64 - 1), st.integers(0, 3))
@settings(max_examples=30)
def test_every_fingerprint_finds_itself(fp, k):
    """Any stored fingerprint is found at distance 0 by a query for it at any k."""
    import tempfile

    with tempfile.TemporaryDirectory() as d, fpstore.open(os.path.join(d, "s"), k=5) as s:
        s.add("x", fingerprint=fp, pipeline_id=s.pipeline.id)
        assert as_dict(s.query(fingerprint=fp, pipeline_id=s.pipeline.id, k=k)) == {"x": 0}


def test_deleting_a_canonical_leaves_its_variants_consistent(store):
    """After the canonical document is deleted, its variants report no canonical instead of damage."""
    t = _text(random.Random(8))
    store.add("a", text=t)
    assert store.add("b", text=t).canonical == "a"
    assert store.delete("a")
    assert store["b"].canonical is None
    assert store.add("c", text=t).canonical == "b"
    assert store.add("b", text=t).canonical is None  # idempotent re-add of the new canonical


def test_verify_on_open_refuses_a_damaged_file_before_lmdb_maps_it(tmp_path):
    """open(verify=True) finds a zeroed B-tree page with the offline verifier and raises CorruptionError."""
    import shutil

    from fpstore.errors import CorruptionError

    path = tmp_path / "s"
    with fpstore.open(path, k=5) as s:
        s.add_many([f"d{i}" for i in range(3000)], fingerprints=np.arange(3000, dtype=np.uint64) * 7919, pipeline_id=s.pipeline.id)
    with fpstore.open(path, verify=True, k=5) as s:  # a sound file passes
        assert len(s) == 3000
    with fpstore.open(path, readonly=True) as s:
        last = s._storage.env.info()["last_pgno"]  # written by the last commit: a live page
    bad = tmp_path / "bad"
    shutil.copytree(path, bad)
    with open(bad / "data.mdb", "r+b") as f:
        f.seek(last * 4096)
        f.write(bytes(4096))
    with pytest.raises(CorruptionError, match="structural check"):
        fpstore.open(bad, verify=True, k=5)


def test_flush_and_tier_merge_in_one_write_leave_a_verifiable_file(tmp_path):
    """A write that flushes and then merges tiers stores the state record once: rewriting that
    multi-page record twice in one transaction left an overflow page LMDB's verifier rejects, and a
    data file shorter than its last page (found by the state machine; this is its sequence)."""
    from lmdb import verify

    path = str(tmp_path / "s")
    base = random.Random(0).getrandbits(64)
    near, flipped = base, base ^ 1
    s = fpstore.open(path, k=3, design="r4", flush_entries=3)
    pid = s.pipeline.id
    writes = [
        lambda: s.add_many(
            ["k11", "k0", "k0", "k0", "k8", "k0"], fingerprints=np.array([near] * 5 + [flipped], np.uint64), pipeline_id=pid
        ),
        lambda: s.bulk_load(["k0"] * 10, np.array([near] * 10, np.uint64), pipeline_id=pid, max_run=1),
        lambda: s.bulk_load(
            ["k0"] * 10, np.array([near] * 3 + [flipped, near, flipped] + [near] * 4, np.uint64), pipeline_id=pid, max_run=1
        ),
        lambda: s.add_many(["k0"] * 5 + ["k11", "k0", "k10"], fingerprints=np.array([near] * 8, np.uint64), pipeline_id=pid),
    ]
    for write in writes:
        write()
        s.close()
        assert verify.verify(path) == []
        s = fpstore.open(path, flush_entries=3)
    assert sorted(s, key=repr) == ["k0", "k10", "k11", "k8"]
    s.close()


def test_arguments_out_of_their_domain_raise_input_errors(tmp_path):
    """Arguments that reached numpy, py-lmdb or struct unchecked raised their builtin errors."""
    from fpstore.errors import InputError as IE

    with fpstore.open(tmp_path / "s", k=5) as s:
        s.add_many(["a", "b"], fingerprints=[1, 2], pipeline_id=s.pipeline.id)
        for kwargs in ({"sample": -1}, {"sample": 1.5}, {"seed": -1}, {"seed": 1.5}, {"sample": True}):
            with pytest.raises(IE):
                s.stats(**kwargs)
        assert len(s) == 2
    for size in (-1, 1.5, 2**70, True):
        with pytest.raises(IE, match="map_size"):
            fpstore.open(tmp_path / "t", map_size=size, k=5)
    assert not (tmp_path / "t").exists() or not os.listdir(tmp_path / "t")
    for b in (2**64, -1, 1.5, "x"):
        with pytest.raises(IE):
            fpstore.hamming_many(np.array([1], np.uint64), b)


def test_a_store_path_that_is_not_utf8_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="UTF-8"):
        fpstore.open(os.fsdecode(os.fsencode(str(tmp_path)) + b"/s\xff"))
    with pytest.raises(InputError, match="UTF-8"):
        fpstore.open(os.fsencode(str(tmp_path)) + b"/s\xff")
    assert os.listdir(tmp_path) == []


def test_a_text_of_another_type_is_an_fpstore_input_error_and_a_type_error(tmp_path):
    with fpstore.open(tmp_path / "s") as s:
        for call in (
            lambda: s.add("x", text=5),
            lambda: s.add_many(["x", "y"], texts=["ok", 5]),
            lambda: s.query(text=5),
            lambda: fpstore.simhash(None),
        ):
            with pytest.raises(InputError) as info:
                call()
            assert isinstance(info.value, TypeError)
        assert len(s) == 0


def test_hamming_many_takes_any_uint64_values_as_lists_and_scalars():
    """Half of all fingerprints are 2**63 or more, which numpy infers as float64 in a plain list."""
    big = [2**63, 2**64 - 1, 1]
    assert fpstore.hamming_many(big, 0).tolist() == [1, 64, 1]
    assert fpstore.hamming_many(big, [2**63, 0, 0]).tolist() == [0, 64, 1]
    assert fpstore.hamming_many(np.array(big, np.uint64), 2**64 - 1).tolist() == [63, 0, 63]
    assert int(fpstore.hamming_many(2**63, 1)) == 2
    for bad in ([1.0], [True], [-1], [2**64], None):
        with pytest.raises(InputError):
            fpstore.hamming_many(bad, 0)

"""Bulk loads, runs, compaction, batch queries, all pairs and clusters against brute force."""

from __future__ import annotations

import numpy as np
import pytest

import fpstore
from fpstore.errors import CorruptionError, FpstoreError, InputError, PipelineMismatchError
from tests.test_store import clustered


def brute_pairs(fps: np.ndarray, k: int) -> set[tuple[int, int, int]]:
    """Every (i, j, d), i < j, with popcount(fps[i] ^ fps[j]) = d <= k, in row blocks."""
    out: set[tuple[int, int, int]] = set()
    for lo in range(0, len(fps), 1000):
        d = np.bitwise_count(fps[lo : lo + 1000, None] ^ fps[None, :])
        a, b = np.nonzero(d <= k)
        a = a + lo
        sel = a < b
        out.update(zip(a[sel].tolist(), b[sel].tolist(), d[a[sel] - lo, b[sel]].tolist()))
    return out


def data(kind: str, n: int, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "random":
        fps = rng.integers(0, 2**64, size=n, dtype=np.uint64)
        fps[: n // 20] = fps[n // 20 : n // 10] ^ np.uint64(0b101)  # some near pairs
        return fps
    return clustered(rng, n)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["random", "clustered"])
@pytest.mark.parametrize("k", [0, 3, 5])
def test_all_pairs_equal_brute_force(tmp_path, kind, k):
    """near_duplicate_pairs over runs + incremental + tombstones equals brute force, each pair once."""
    n = 12_000
    fps = data(kind, n)
    with fpstore.open(tmp_path / "s", k=3) as s:
        pid = s.pipeline.id
        s.bulk_load(np.arange(8000), fps[:8000], pipeline_id=pid, max_run=3000)
        s.add_many(list(range(8000, n)), fingerprints=fps[8000:], pipeline_id=pid)
        for key in range(0, n, 97):
            s.delete(key)
        live = np.array([i for i in range(n) if i % 97], dtype=np.int64)
        a, b, d = s.near_duplicate_pairs(k)
        ka, kb = np.array(s.keys_of(a)), np.array(s.keys_of(b))
        got = {(min(x, y), max(x, y), z) for x, y, z in zip(ka.tolist(), kb.tolist(), d.tolist())}
        assert len(got) == len(a)  # each pair once
        want = {(int(live[i]), int(live[j]), dd) for i, j, dd in brute_pairs(fps[live], k)}
        assert got == want
        if k == 3:
            s.compact()
            a2, b2, d2 = s.near_duplicate_pairs(k)
            assert {(min(x, y), max(x, y), z) for x, y, z in zip(s.keys_of(a2), s.keys_of(b2), d2.tolist())} == want


@pytest.mark.slow
def test_clusters_are_connected_components(store):
    """clusters() equals the connected components of the brute-force pair graph; canonical is the oldest."""
    fps = data("clustered", 3000, seed=9)
    store.bulk_load(np.arange(3000), fps, pipeline_id=store.pipeline.id)
    parent = list(range(3000))

    def find(x):
        while parent[x] != x:
            x = parent[x]
        return x

    for i, j, _ in brute_pairs(fps, 3):
        ri, rj = find(i), find(j)
        if ri != rj:
            parent[max(ri, rj)] = min(ri, rj)
    comps: dict[int, set[int]] = {}
    for i in range(3000):
        comps.setdefault(find(i), set()).add(i)
    want = {frozenset(c) for c in comps.values() if len(c) > 1}
    got = store.clusters()
    assert {frozenset(c.keys) for c in got} == want and len(got) == len(want)
    assert [len(c.keys) for c in got] == sorted((len(c) for c in want), reverse=True)
    for c in got:
        ids = [store[key].id for key in c.keys]
        assert c.canonical == c.keys[0] and store[c.canonical].id == min(ids)


@pytest.fixture(params=["merge", "each"])
def batch_path(request, monkeypatch):
    """query_many's two ways through the runs: the merge of the sorted batch with every table, and
    one probe per query (small batches); each must equal brute force on its own."""
    from fpstore.store import catalog

    monkeypatch.setattr(catalog, "_small_batch_limit", lambda chunks0: 0 if request.param == "merge" else 10**9)
    return request.param


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["random", "clustered"])
def test_query_many_over_runs_and_increments_equals_brute_force(tmp_path, kind, batch_path):
    """Batch queries over several runs, incremental tables and tombstones equal brute force at every k'."""
    n = 30_000
    fps = data(kind, n, seed=5)
    rng = np.random.default_rng(6)
    with fpstore.open(tmp_path / "s", k=3) as s:
        pid = s.pipeline.id
        s.bulk_load(((np.arange(lo, lo + 5000), fps[lo : lo + 5000]) for lo in range(0, 20_000, 5000)), pipeline_id=pid, max_run=7000)
        s.add_many(list(range(20_000, n)), fingerprints=fps[20_000:], pipeline_id=pid)
        dead = set(range(0, n, 53))
        for key in dead:
            s.delete(key)
        live = np.array([i for i in range(n) if i not in dead])
        q = np.concatenate([fps[rng.integers(0, n, 300)] ^ np.uint64(1 << 7), rng.integers(0, 2**64, 100, dtype=np.uint64)])
        for kq in range(4):
            qi, ids, dist = s.query_many(q, pipeline_id=pid, k=kq)
            keys = s.keys_of(ids)
            got = set(zip(qi.tolist(), keys, dist.tolist()))
            d = np.bitwise_count(fps[live][None, :] ^ q[:, None])
            bq, bi = np.nonzero(d <= kq)
            assert got == set(zip(bq.tolist(), live[bi].tolist(), d[bq, bi].tolist()))
        for x in q[:50].tolist():
            want = {int(live[i]): int(v) for i, v in enumerate(np.bitwise_count(fps[live] ^ np.uint64(x))) if v <= 3}
            assert {m.key: m.distance for m in s.query(fingerprint=x, pipeline_id=pid)} == want


@pytest.mark.parametrize("cores", [1, 2])
def test_large_batch_on_threads_equals_brute_force(tmp_path, monkeypatch, cores):
    """A batch large enough for the merge on threads (20,000 queries and more), most of them near
    a stored fingerprint, several of those stored more than once: the same rows as brute force,
    on one core and on two (the tables, and the ids of the matches, looked up on threads)."""
    monkeypatch.setattr(fpstore.parallel, "available_cores", lambda: cores)
    n = 24_000
    rng = np.random.default_rng(21)
    fps = rng.integers(0, 2**64, size=n, dtype=np.uint64)
    fps[:300] = fps[300:600]  # stored twice
    q = rng.integers(0, 2**64, size=21_000, dtype=np.uint64)
    near = rng.random(len(q)) < 0.8
    q[near] = fps[rng.integers(0, n, int(near.sum()))] ^ (np.uint64(1) << rng.integers(0, 64, int(near.sum())).astype(np.uint64))
    with fpstore.open(tmp_path / "s", k=3) as s:
        pid = s.pipeline.id
        s.bulk_load(np.arange(n), fps, pipeline_id=pid, max_run=9000)
        qi, ids, dist = s.query_many(q, pipeline_id=pid)
        got = list(zip(qi.tolist(), s.keys_of(ids), dist.tolist()))
    want = []
    for lo in range(0, len(q), 2000):
        d = np.bitwise_count(q[lo : lo + 2000, None] ^ fps[None, :])
        a, b = np.nonzero(d <= 3)
        want.extend(zip((a + lo).tolist(), b.tolist(), d[a, b].tolist()))
    assert len(got) == len(set(got)) and set(got) == set(want)
    assert len(want) > 16_000
    assert [(a, d) for a, _, d in got] == sorted((a, d) for a, _, d in got)


@pytest.mark.parametrize("design", ["r2f1", "r3f2"])
def test_flip_designs_are_exact_in_batch_and_single_queries(tmp_path, design, batch_path):
    """Multi-probe designs (flipped prefixes) answer exactly, over runs and increments."""
    k = 3 if design == "r2f1" else 8
    fps = data("clustered", 6000, seed=12)
    rng = np.random.default_rng(13)
    with fpstore.open(tmp_path / "s", k=k, design=design) as s:
        pid = s.pipeline.id
        s.bulk_load(np.arange(4000), fps[:4000], pipeline_id=pid)
        s.add_many(list(range(4000, 6000)), fingerprints=fps[4000:], pipeline_id=pid)
        q = fps[rng.integers(0, 6000, 80)] ^ np.uint64(0b1001)
        qi, ids, dist = s.query_many(q, pipeline_id=pid)
        d = np.bitwise_count(fps[None, :] ^ q[:, None])
        bq, bi = np.nonzero(d <= k)
        assert set(zip(qi.tolist(), s.keys_of(ids), dist.tolist())) == set(zip(bq.tolist(), bi.tolist(), d[bq, bi].tolist()))
        for x in q[:10].tolist():
            want = {i: int(v) for i, v in enumerate(np.bitwise_count(fps ^ np.uint64(x))) if v <= k}
            assert {m.key: m.distance for m in s.query(fingerprint=x, pipeline_id=pid)} == want


def test_bulk_load_replaces_existing_keys_and_last_copy_wins(store):
    """Keys already stored (incremental or bulk) are replaced; a key repeated in one load keeps its last print."""
    pid = store.pipeline.id
    store.add("a", fingerprint=1, pipeline_id=pid)
    store.bulk_load(["b", "c"], np.array([2, 3], np.uint64), pipeline_id=pid)
    store.bulk_load(["a", "b", "d", "d"], np.array([10, 20, 40, 41], np.uint64), pipeline_id=pid)
    assert len(store) == 4
    assert {k: store[k].fingerprint for k in "abcd"} == {"a": 10, "b": 20, "c": 3, "d": 41}
    assert {m.key for m in store.query(fingerprint=2, pipeline_id=pid, k=0)} == set()
    store.add("c", fingerprint=30, pipeline_id=pid)
    assert store["c"].fingerprint == 30 and len(store) == 4
    assert sorted(store, key=str) == ["a", "b", "c", "d"]


def test_bulk_load_replaces_keys_of_earlier_loads_in_a_store_of_loads_only(store):
    """With no incremental key at all (the keys table empty), a later load still finds the keys of
    every earlier load's segment and replaces them."""
    pid = store.pipeline.id
    store.bulk_load(["a", "b"], np.array([1, 2], np.uint64), pipeline_id=pid)
    store.bulk_load(["c"], np.array([3], np.uint64), pipeline_id=pid)
    store.bulk_load(["a", "c", "e"], np.array([10, 30, 50], np.uint64), pipeline_id=pid)
    assert store.counts()["keys"] == 0
    assert len(store) == 4
    assert {k: store[k].fingerprint for k in "abce"} == {"a": 10, "b": 2, "c": 30, "e": 50}
    assert [m.key for m in store.query(fingerprint=1, pipeline_id=pid, k=0)] == []
    assert [m.key for m in store.query(fingerprint=3, pipeline_id=pid, k=0)] == []


def test_bulk_load_refuses_stale_or_bad_input_and_writes_nothing(store):
    """Wrong pipeline, bad dtypes, mismatched lengths and negative int keys raise before any write."""
    pid = store.pipeline.id
    with pytest.raises(PipelineMismatchError):
        store.bulk_load(np.arange(3), np.arange(3, dtype=np.uint64), pipeline_id="0000000000000000")
    with pytest.raises(PipelineMismatchError):
        store.bulk_load(np.arange(3), np.arange(3, dtype=np.uint64))
    with pytest.raises(InputError):
        store.bulk_load(np.arange(3), np.arange(3, dtype=np.int64), pipeline_id=pid)
    with pytest.raises(InputError):
        store.bulk_load(np.arange(3), np.arange(4, dtype=np.uint64), pipeline_id=pid)
    with pytest.raises(InputError):
        store.bulk_load(np.array([-1, 2]), np.arange(2, dtype=np.uint64), pipeline_id=pid)
    with pytest.raises(InputError):
        store.bulk_load([(np.arange(2),)], pipeline_id=pid)
    assert len(store) == 0 and list(store) == []


def test_streamed_chunks_make_runs_of_bounded_size(store):
    """An iterable of chunks is cut into runs of at most max_run documents, with progress reported."""
    fps = data("random", 10_000)
    seen = []
    loaded = store.bulk_load(
        ((np.arange(lo, lo + 1000), fps[lo : lo + 1000]) for lo in range(0, 10_000, 1000)),
        pipeline_id=store.pipeline.id,
        max_run=2500,
        progress=lambda done, total: seen.append(done),
    )
    assert loaded == 10_000 and len(store) == 10_000
    assert seen == [2500, 5000, 7500, 10_000]
    assert store.counts()["runs"] == [2500] * 4


def test_compaction_keeps_the_readers_snapshot(store):
    """A read transaction opened before compaction still answers from its snapshot after it commits."""
    pid = store.pipeline.id
    fps = data("random", 5000)
    store.bulk_load(np.arange(5000), fps, pipeline_id=pid)
    store.add_many(["x"], fingerprints=fps[:1], pipeline_id=pid)
    store.delete(1)
    with store._storage.read() as txn:
        before = store._cat.probe(txn, int(fps[0]), 3)
        store.compact()
        assert store._cat.probe(txn, int(fps[0]), 3) == before
    after = {m.id: (m.distance, m.fingerprint) for m in store.query(fingerprint=int(fps[0]), pipeline_id=pid)}
    assert after == before


def test_damaged_run_blobs_raise_corruption_not_crashes(tmp_path):
    """Flipping bytes in stored run chunks gives CorruptionError (or a correct answer), never a crash."""
    import lmdb

    path = tmp_path / "s"
    fps = data("random", 20_000)
    with fpstore.open(path, k=5) as s:
        s.bulk_load(np.arange(20_000), fps, pipeline_id=s.pipeline.id)
        pid = s.pipeline.id
    env = lmdb.open(str(path), lib_version=0, max_dbs=256)
    blobs = env.open_db(b"blobs")
    rng = np.random.default_rng(0)
    with env.begin(write=True) as txn:
        for key, value in list(txn.cursor(db=blobs)):
            if len(value) > 100:
                raw = bytearray(value)
                for pos in rng.integers(0, len(raw), 20):
                    raw[pos] ^= 0xFF
                txn.put(key, bytes(raw), db=blobs)
    env.close()
    with fpstore.open(path, k=5) as s:
        for x in fps[:30].tolist():
            try:
                got = {m.key for m in s.query(fingerprint=x, pipeline_id=pid, k=0)}
            except FpstoreError as exc:
                assert isinstance(exc, CorruptionError)
            else:
                assert got <= set(range(20_000))
        with pytest.raises(CorruptionError):
            s.query_many(fps[:2000], pipeline_id=pid)


@pytest.mark.slow
def test_file_compaction_shrinks_the_file_and_keeps_answers(tmp_path):
    """compact_file rewrites data.mdb smaller, answers stay equal, and the store reopens."""
    import os

    path = tmp_path / "s"
    fps = data("random", 60_000)
    with fpstore.open(path, k=5) as s:
        pid = s.pipeline.id
        s.bulk_load(np.arange(60_000), fps, pipeline_id=pid)
        s.add_many(list(range(60_000, 70_000)), fingerprints=fps[:10_000] ^ np.uint64(1), pipeline_id=pid)
        for key in range(0, 60_000, 3):
            s.delete(key)
        q = fps[:500] ^ np.uint64(1 << 9)
        before = s.query_many(q, pipeline_id=pid)
        size_before = os.path.getsize(path / "data.mdb")
        result = s.compact_file()
        assert result["file_bytes_after"] == os.path.getsize(path / "data.mdb") < size_before
        after = s.query_many(q, pipeline_id=pid)
        assert all(np.array_equal(x, y) for x, y in zip(before, after))
        s.add("new", fingerprint=1, pipeline_id=pid)
    with fpstore.open(path, readonly=True) as r:
        assert len(r) == 70_000 - 20_000 + 1 and "new" in r
        assert all(np.array_equal(x, y) for x, y in zip(before, r.query_many(q, pipeline_id=pid)))
    assert not [n for n in os.listdir(path) if n.startswith("compact-")]


def test_file_compaction_refuses_while_another_process_has_the_store(tmp_path):
    """With a reader process holding the store open, compact_file raises and changes nothing."""
    import subprocess
    import sys

    from fpstore.errors import StorageError

    path = tmp_path / "s"
    with fpstore.open(path, k=5) as s:
        s.add("a", fingerprint=1, pipeline_id=s.pipeline.id)
        reader = subprocess.Popen(
            [sys.executable, "-c", "import fpstore, sys, time; s = fpstore.open(sys.argv[1], readonly=True); print(len(s), flush=True); time.sleep(30)", str(path)],
            stdout=subprocess.PIPE, text=True,
        )
        try:
            assert reader.stdout.readline().strip() == "1"
            with pytest.raises(StorageError, match="another process"):
                s.compact_file()
            assert "a" in s
        finally:
            reader.kill()
            reader.wait()
        s.compact_file()  # alone again: allowed
        assert "a" in s


def test_key_hashes_of_many_keys_equal_one_by_one():
    """The vectorised key hash (all-integer batches) equals the per-key hash, for every key type."""
    from fpstore.store.keys import typed_key
    from fpstore.index import tiers

    ints = [typed_key(k) for k in (0, 1, 2**64 - 1, 12345)]
    mixed = ints + [typed_key(k) for k in ("a", b"\x00" * 8, "x" * 600)]
    for typed in (ints, mixed, []):
        assert tiers.key_hashes(typed).tolist() == [tiers.key_hash(t) for t in typed]


def test_packed_column_reads_agree(tmp_path):
    """The plain-int reader of a packed id column equals the numpy one, at every width."""
    import lmdb

    from fpstore.index import tiers

    env = lmdb.open(str(tmp_path / "e"), max_dbs=1)
    rng = np.random.default_rng(5)
    for width in (0, 1, 7, 13, 33, 63, 64):
        hi = (1 << width) - 1
        values = rng.integers(0, hi, 3 * tiers.PACK_CHUNK // 2, dtype=np.uint64, endpoint=True) + np.uint64(5 if width < 64 else 0)
        prefix = b"p%d" % width
        blobs, rec = tiers.packed_blobs(prefix, values)
        with env.begin(write=True) as txn:
            for name, value in blobs:
                txn.put(name, value)
        pos = sorted(rng.integers(0, len(values), 40).tolist()) + [0, len(values) - 1]
        with env.begin() as txn:
            assert tiers.read_packed_list(txn, None, prefix, rec, pos) == tiers.read_packed(txn, None, prefix, rec, np.array(pos)).tolist()
            assert tiers.read_packed_list(txn, None, prefix, rec, pos) == values[pos].tolist()
            # Positions in any order, repeated, over both chunks: read chunk by chunk, put back in place.
            mixed = rng.permutation(np.array(pos + pos[::3], np.int64))
            assert tiers.read_packed(txn, None, prefix, rec, mixed).tolist() == values[mixed].tolist()


@pytest.mark.parametrize("batch", [3, 40, 2000])
def test_replacing_bulk_keys_in_batches_of_any_size(tmp_path, batch):
    """Key lookups against a multi-chunk key index (one kernel probe per key for small batches,
    the chunk merge for large ones) find every stored key: replacing keys keeps the count."""
    n = 120_000
    rng = np.random.default_rng(batch)
    fps = rng.integers(0, 2**64, n, dtype=np.uint64)
    with fpstore.open(tmp_path / "s", k=3) as s:
        pid = s.pipeline.id
        s.bulk_load(np.arange(n), fps, pipeline_id=pid)
        keys = sorted(set(rng.integers(0, n, batch).tolist()))
        new = rng.integers(0, 2**64, len(keys), dtype=np.uint64)
        s.add_many(keys + [n + 1], fingerprints=np.append(new, np.uint64(7)), pipeline_id=pid)
        assert len(s) == n + 1
        assert all(s[k].fingerprint == int(f) for k, f in zip(keys, new.tolist()))
        untouched = int(rng.integers(0, n))
        if untouched not in keys:
            assert s[untouched].fingerprint == int(fps[untouched])


def test_warm_reads_the_index_and_changes_nothing(tmp_path):
    """warm() reads every run and table page (its byte count covers the runs) on a read-only
    handle too, and the answers are the same before and after; info() reports the tiers."""
    rng = np.random.default_rng(9)
    fps = rng.integers(0, 2**64, 20_000, dtype=np.uint64)
    with fpstore.open(tmp_path / "s", k=3, flush_entries=1000) as s:
        pid = s.pipeline.id
        s.bulk_load(np.arange(15_000), fps[:15_000], pipeline_id=pid)
        s.add_many(list(range(15_000, 20_000)), fingerprints=fps[15_000:], pipeline_id=pid)
        info = s.info()
        assert info["incremental_entries"] < 1000 and sum(info["runs"]) + info["incremental_entries"] == 20_000
        before = [s.query(fingerprint=int(f), pipeline_id=pid) for f in fps[::997]]
    with fpstore.open(tmp_path / "s", readonly=True) as r:
        assert r.warm() > 20_000 * 8 * len(r.design.tables) * 0.5
        assert [r.query(fingerprint=int(f), pipeline_id=pid) for f in fps[::997]] == before


def test_warm_builds_the_cells_of_tables_too_large_to_build_them_at_a_probe(tmp_path):
    """A run table of more than 2**18 keys gets no occupied cells at its probes; warm() builds
    them where the design's prefixes leave ranges of less than a key (r5 here: 25-26 bits), and the
    answers are the same."""
    from fpstore import _backend

    rng = np.random.default_rng(12)
    n = 300_000
    fps = rng.integers(0, 2**64, n, dtype=np.uint64)
    queries = np.concatenate([fps[::3001] ^ np.uint64(6), rng.integers(0, 2**64, 100, dtype=np.uint64)])
    with fpstore.open(tmp_path / "s", k=3, design="r5") as s:
        s.bulk_load(np.arange(n), fps, pipeline_id=s.pipeline.id)
        before = [a.tolist() for a in s.query_many(queries, pipeline_id=s.pipeline.id)]
        assert len(before[0]) >= len(fps[::3001])  # each near query finds its document
        with s._storage.read() as txn:
            assert not any(pt.filtered for pt in s._cat.plan(txn).tables)
        s.warm()
        with s._storage.read() as txn:
            filtered = [pt.filtered for pt in s._cat.plan(txn).tables]
        assert filtered == [not _backend.PURE_PYTHON] * len(s.design.tables)
        assert [a.tolist() for a in s.query_many(queries, pipeline_id=s.pipeline.id)] == before


def test_warm_leaves_every_chunk_in_the_snapshots_memo_so_queries_add_nothing(tmp_path):
    """Single queries keep the run chunks and key-column chunks they read in their snapshot's memo;
    warm() puts every such chunk there, so that the queries after it grow no dict and allocate nothing (at 10^8 the memo
    filled during timed queries, and the first touches of its fresh pages made the p99 2.5x the
    p50 on a VM). The answers are the same."""
    rng = np.random.default_rng(13)
    fps = rng.integers(0, 2**64, 60_000, dtype=np.uint64)
    queries = [int(f) for f in fps[::1999] ^ np.uint64(5)] + rng.integers(0, 2**64, 50, dtype=np.uint64).tolist()
    with fpstore.open(tmp_path / "s", k=3) as s:
        pid = s.pipeline.id
        s.bulk_load(np.arange(30_000), fps[:30_000], pipeline_id=pid)
        s.bulk_load(np.arange(30_000, 60_000), fps[30_000:], pipeline_id=pid)
        before = [s.query(fingerprint=q, pipeline_id=pid) for q in queries]
    with fpstore.open(tmp_path / "s", readonly=True) as r:
        r.warm()
        storage, cat = r._storage, r._cat
        with storage.read() as txn:
            memo = cat.snapshot_chunks(txn, storage.mapping)
            chunks = sum(run.table(t).index.nchunks for run in cat.runs(txn) for t in range(len(r.design.tables)))
        held = dict(memo)
        run_chunks = [name for name in held if name[-5:-4] == b"C"]
        assert chunks >= 2 * len(r.design.tables) and len(run_chunks) == chunks
        assert [r.query(fingerprint=q, pipeline_id=pid) for q in queries] == before
        assert sorted(set(memo) - set(held)) == []


def test_warm_reads_the_records_that_answers_read_keys_from(tmp_path):
    """Documents added by add_many keep their keys in their records, which a query that finds one
    reads: warm() reads them too (it read the runs and tables only, and a crawler's first answers
    after a restart each faulted in a record page, ~100 µs on a VM)."""
    rng = np.random.default_rng(10)
    fps = rng.integers(0, 2**64, 20_000, dtype=np.uint64)
    with fpstore.open(tmp_path / "s", k=3) as s:
        s.add_many([f"u{i}" for i in range(20_000)], fingerprints=fps, pipeline_id=s.pipeline.id)
        s.delete("u7")
        s.compact()  # every fingerprint in one run; the records stay
        with s._storage.read() as txn:
            read_next = {
                name: sum(len(key) + len(value) for key, value in txn.cursor(db=db))
                for name, db in (("records", s._cat.docs), ("tombstones", s._cat.dead), ("blobs", s._cat.blobs))
            }
        assert read_next["records"] > 20_000 * 10 and read_next["tombstones"] > 0
        assert s.warm() >= sum(read_next.values()), read_next


def test_keys_of_over_segments_of_both_key_kinds_records_and_tombstones(tmp_path):
    """keys_of maps ids to keys wherever the key lives: bulk segments of integer keys and of
    string keys (read from decoded key blocks), incremental records; in any order, repeated; a
    tombstoned id, or one outside the ids a store gives, is the caller's error; read twice (the second time from the cache of decoded blocks)."""
    rng = np.random.default_rng(21)
    with fpstore.open(tmp_path / "s", k=3) as s:
        pid = s.pipeline.id
        s.bulk_load(np.arange(1000, 1700), rng.integers(0, 2**64, 700, dtype=np.uint64), pipeline_id=pid)
        s.bulk_load([f"u{i}" for i in range(600)], rng.integers(0, 2**64, 600, dtype=np.uint64), pipeline_id=pid)
        s.add_many([b"raw", "txt", 7], fingerprints=rng.integers(0, 2**64, 3, dtype=np.uint64), pipeline_id=pid)
        keys = list(range(1000, 1700)) + [f"u{i}" for i in range(600)] + [b"raw", "txt", 7]
        ids = {key: s[key].id for key in keys}
        order = rng.permutation(len(keys)).tolist()
        picked = [keys[i] for i in order] + keys[:5]
        for _ in range(2):
            assert s.keys_of([ids[key] for key in picked]) == picked
        assert s.keys_of(np.array([ids[key] for key in picked], dtype=np.int64)) == picked
        assert s.keys_of(np.array([ids[key] for key in picked], dtype=np.uint64)) == picked
        for bad in (np.array([0], np.int64), np.array([ids[7], 2**63], np.uint64), np.array([ids[7]] * 70 + [-1], np.int64)):
            with pytest.raises(InputError):
                s.keys_of(bad)
        s.delete(1003)
        s.delete("u5")
        for gone in (1003, "u5"):
            with pytest.raises(InputError):
                s.keys_of([ids[1004], ids[gone]])
        assert s.keys_of([ids[1004], ids["u6"], ids[7]]) == [1004, "u6", 7]
        with pytest.raises(InputError):
            s.keys_of([0])
        with pytest.raises(InputError):
            s.keys_of([2**63])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_loads_over_many_segments_replace_exactly_the_keys_loaded_again(tmp_path, seed):
    """Integer and string keys loaded again, in runs over many earlier key segments (each search
    of a segment takes the run's keys in hash order), replace exactly their earlier documents:
    the store equals a dict of the last load of each key."""
    rng = np.random.default_rng(seed)
    oracle: dict[object, int] = {}
    with fpstore.open(tmp_path / "s", k=3) as store:
        pid = store.pipeline.id
        for load in range(6):
            m = int(rng.integers(50, 400))
            if load % 2:
                keys: object = rng.choice(2000, m, replace=False).astype(np.uint64)
                key_list = [int(k) for k in keys]  # type: ignore[union-attr]
            else:
                key_list = [f"k{int(k)}" for k in rng.choice(800, m, replace=False)]
                keys = key_list
            fps = rng.integers(0, 2**63, m, dtype=np.uint64)
            store.bulk_load(keys, fps, pipeline_id=pid, max_run=int(rng.integers(20, 120)))
            oracle.update(zip(key_list, fps.tolist()))
        assert len(store) == len(oracle)
        assert {d.key: d.fingerprint for d in store.documents()} == oracle


@pytest.mark.parametrize("few", [0, 10**6])
def test_keys_are_found_in_the_newest_segment_holding_them(tmp_path, monkeypatch, few):
    """Catalog.ids_of_many, by the batch search (few = 0) and one kernel probe per key (a group
    commit's few keys), over three bulk loads that load some keys again, deletes, incremental
    keys and keys stored nowhere: each key's id is its newest live copy's, as id_of finds it."""
    from fpstore.store import catalog
    from fpstore.store.keys import typed_key

    monkeypatch.setattr(catalog, "FEW_KEYS", few)
    rng = np.random.default_rng(9)
    with fpstore.open(tmp_path / "s", k=3) as s:
        pid = s.pipeline.id
        s.bulk_load(np.arange(0, 3000), rng.integers(0, 2**64, 3000, dtype=np.uint64), pipeline_id=pid)
        s.bulk_load([f"p{i}" for i in range(500)], rng.integers(0, 2**64, 500, dtype=np.uint64), pipeline_id=pid)
        s.bulk_load(np.arange(2000, 2600), rng.integers(0, 2**64, 600, dtype=np.uint64), pipeline_id=pid)  # loaded again
        for key in (5, 2100, "p7", 2999):
            s.delete(key)
        s.add_many(["new-a", 17, "p9"], fingerprints=[1, 2, 3], pipeline_id=pid)
        keys = [0, 5, 17, 1999, 2000, 2100, 2599, 2600, 2999, 3000, "p0", "p7", "p9", "p499", "p500", "new-a", "nowhere", b"\x00"]
        keys += rng.integers(0, 3100, 60).tolist()
        typed = [typed_key(key) for key in keys]
        with s._storage.read() as txn:
            got = s._cat.ids_of_many(txn, typed)
            want = [s._cat.id_of(txn, t) for t in typed]
        assert got == want
        assert [i is None for i in got[:18]] == [False, True, False, False, False, True, False, False, True, True, False, True, False, False, True, False, True, True]
        assert got[4] == s[2000].id > 3500  # the third load's copy (ids from 3501), not the first's

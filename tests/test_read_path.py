"""The single query's path keeps what one snapshot's queries read (state, read plan, whether the
incremental tables and tombstones hold anything) by the read transaction's id: queries of
different snapshots, interleaved, each see their own."""

from __future__ import annotations

import numpy as np
import pytest

import fpstore


def _keys(matches):
    return sorted(str(m.key) for m in matches)


def test_queries_of_an_older_and_a_newer_snapshot_interleave(tmp_path):
    """A reader opened before an add and a delete, and store.query after them, alternate: the
    reader keeps seeing its snapshot (no incremental entry, no tombstone), store.query the new one."""
    rng = np.random.default_rng(3)
    fps = rng.integers(0, 2**63, 2000, dtype=np.uint64)
    with fpstore.open(tmp_path / "s", k=3) as store:
        pid = store.pipeline.id
        store.bulk_load(np.arange(1, 2001), fps, pipeline_id=pid)
        q = int(fps[0]) ^ 1
        gone = int(fps[1]) ^ 1
        with store.reader() as old:
            assert _keys(old.query(fingerprint=q, pipeline_id=pid)) == ["1"]
            store.add("new", fingerprint=q ^ 2, pipeline_id=pid)
            store.delete(2)
            for _ in range(3):
                assert _keys(old.query(fingerprint=q, pipeline_id=pid)) == ["1"]
                assert _keys(store.query(fingerprint=q, pipeline_id=pid)) == ["1", "new"]
                assert _keys(old.query(fingerprint=gone, pipeline_id=pid)) == ["2"]
                assert _keys(store.query(fingerprint=gone, pipeline_id=pid)) == []
        assert _keys(store.query(fingerprint=gone, pipeline_id=pid)) == []


def test_query_sees_runs_made_by_a_later_flush(tmp_path):
    """Adds that flush into a new run change the state: the next query reads the new run (its plan
    is rebuilt) and answers as brute force does."""
    rng = np.random.default_rng(4)
    with fpstore.open(tmp_path / "s", k=3, flush_entries=64) as store:
        pid = store.pipeline.id
        stored: dict[str, int] = {}
        for round_ in range(4):
            batch = rng.integers(0, 2**63, 50, dtype=np.uint64)
            batch[::5] = batch[::5] ^ np.uint64(7)  # some near pairs within and across rounds
            for i, fp in enumerate(batch.tolist()):
                key = f"r{round_}-{i}"
                store.add(key, fingerprint=fp, pipeline_id=pid)
                stored[key] = fp
            for q in batch[:10].tolist():
                want = sorted(k for k, f in stored.items() if (f ^ q).bit_count() <= 3)
                assert _keys(store.query(fingerprint=q, pipeline_id=pid)) == want


_REMAP_SCRIPT = r"""
import sys
import numpy as np
import fpstore

path = sys.argv[1]
rng = np.random.default_rng(5)
fps = rng.integers(0, 2**63, 20_000, dtype=np.uint64)
stored = dict(zip(range(1, 20_001), fps.tolist()))
queries = (fps[:200] ^ np.uint64(3)).tolist()


def check(store):
    for q in queries:
        want = sorted(k for k, f in stored.items() if (f ^ q).bit_count() <= 3)
        got = sorted(m.key for m in store.query(fingerprint=q, pipeline_id=store.pipeline.id))
        assert got == want, (q, got, want)


with fpstore.open(path, k=3) as store:
    store.bulk_load(np.arange(1, 20_001), fps, pipeline_id=store.pipeline.id)
    check(store)  # fills the snapshot's chunk memo
    size = store.info()["map_size"]
    for grow in (4, 16):  # the map moves with no commit in between: the memo's views are stale
        store._storage._set_mapsize(size * grow, "a test remap")
        check(store)
    store.add(10**6, fingerprint=queries[0], pipeline_id=store.pipeline.id)  # a new snapshot
    stored[10**6] = queries[0]
    check(store)
    store.compact_file()  # the file is replaced and mapped again
    check(store)
print("ok")
"""


def test_single_queries_reuse_chunks_only_within_one_snapshot_and_one_mapping(tmp_path):
    """store.query keeps the run chunks of its snapshot for the next query of the same snapshot:
    after a remap with no commit, a commit, and a file compaction, queries still answer as brute
    force (a chunk read before the map moved would point into memory no longer mapped: a crash,
    hence the child process)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _REMAP_SCRIPT, str(tmp_path / "s")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.returncode, done.stderr[-2000:])


def test_a_query_waiting_out_a_redesign_reads_the_new_design(tmp_path):
    """A store.query that arrives while redesign holds the store alone waits, then answers with
    the new design's tables (it once took the old catalog before waiting and read the new runs
    through the old design: CorruptionError)."""
    import threading
    import time

    rng = np.random.default_rng(0)
    fps = rng.integers(0, 2**64 - 1, 20_000, dtype=np.uint64)
    probe = fps[:100].tolist()
    with fpstore.open(tmp_path / "s", k=3, design="r4") as store:
        pid = store.pipeline.id
        store.bulk_load(np.arange(1, 20_001), fps, pipeline_id=pid)
        want = [_keys(store.query(fingerprint=f, pipeline_id=pid)) for f in probe]
        got: dict[str, object] = {}
        threads: list[threading.Thread] = []

        def querier() -> None:
            try:
                got["keys"] = [_keys(store.query(fingerprint=f, pipeline_id=pid)) for f in probe]
            except Exception as exc:  # reported below
                got["error"] = exc

        def progress(done: int, total: int | None) -> None:
            if not threads:  # inside the redesign: the query must wait for it
                threads.append(threading.Thread(target=querier))
                threads[0].start()
                time.sleep(0.2)

        store.redesign(3, design="r5", progress=progress)
        threads[0].join()
        assert store.design.name == "r5"
        assert "error" not in got, got.get("error")
        assert got["keys"] == want


def test_a_reader_whose_snapshot_cannot_be_read_releases_its_share(tmp_path):
    """Entering a reader reads the snapshot's plan; when that raises (a damaged run index), the
    read it began is ended: the thread holds no share of the map afterwards (a leaked share made
    every later map growth of the thread refuse, and other threads wait)."""
    import lmdb

    from fpstore.errors import CorruptionError
    from fpstore.store.storage import MAX_DBS

    path = tmp_path / "s"
    with fpstore.open(path, k=3) as store:
        store.bulk_load(np.arange(1, 1001), np.random.default_rng(1).integers(0, 2**63, 1000, dtype=np.uint64), pipeline_id=store.pipeline.id)
    env = lmdb.open(str(path), subdir=True, max_dbs=MAX_DBS, map_size=0)
    blobs = env.open_db(b"blobs")
    with env.begin(write=True) as txn:
        for name in [bytes(k) for k, _ in txn.cursor(db=blobs) if bytes(k).endswith(b"I")]:
            txn.delete(name, db=blobs)
    env.close()
    with fpstore.open(path) as store:
        with pytest.raises(CorruptionError):
            with store.reader():
                pass
        assert not store._storage._map.held()


def test_a_query_without_text_or_fingerprint_names_what_is_missing(tmp_path):
    """store.query() with neither text= nor fingerprint= says so (not a complaint about a raw
    fingerprint's pipeline id or its value)."""
    from fpstore.errors import InputError

    with fpstore.open(tmp_path / "s", k=3) as store:
        for call in (lambda: store.query(), lambda: store.query(pipeline_id=store.pipeline.id)):
            with pytest.raises(InputError, match="exactly one of text= and fingerprint="):
                call()


def test_verified_queries_keep_the_chunks_they_read_for_the_snapshot(tmp_path):
    """A query verified by a sketch reads the runs as a plain one does, through the snapshot's
    chunk memo: a burst of verified queries reads each chunk once (the verified path once passed no
    memo, and every query read its chunks from LMDB again: twice a plain query's time at 10^7)."""
    rng = np.random.default_rng(6)
    pipe = fpstore.Pipeline(sketch_bits=128)
    fps = rng.integers(0, 2**63, 5000, dtype=np.uint64)
    sketches = rng.integers(0, 2**63, (5000, 2), dtype=np.uint64)
    with fpstore.open(tmp_path / "s", k=3, pipeline=pipe) as store:
        store.bulk_load(np.arange(1, 5001), fpstore.Fingerprints(fps, pipe.id, sketches=sketches))
    with fpstore.open(tmp_path / "s", readonly=True) as store, store.reader() as r:
        got = r.query(fingerprint=int(fps[7]) ^ 1, pipeline_id=pipe.id, sketch=sketches[7], threshold=0.8)
        assert [m.key for m in got] == [8]
        assert r._chunks, "the verified query read its chunks past the snapshot's memo"


def test_the_threaded_batch_limit_follows_its_fit():
    """The batch size from which query_many merges on threads is the measured crossover at each
    measured store size (THREADED_BATCH_FIT), moves monotonically between them on log chunks,
    and is held beyond them; the limit a batch meets is never above the one-thread limit."""
    from fpstore.store import catalog

    (c0, q0), (c1, q1) = catalog.THREADED_BATCH_FIT
    assert catalog._threaded_batch_limit(c0) == q0 and catalog._threaded_batch_limit(c1) == q1
    assert catalog._threaded_batch_limit(1) == q0 and catalog._threaded_batch_limit(10 * c1) == q1
    between = [catalog._threaded_batch_limit(c) for c in range(c0, c1 + 1)]
    assert between == sorted(between, reverse=q1 < q0) and min(q0, q1) <= min(between) <= max(between) <= max(q0, q1)
    for chunks in (1, 3, c0, (c0 + c1) // 2, c1, 5 * c1):
        one = catalog.SMALL_BATCH_BASE + min(catalog.SMALL_BATCH_PER_CHUNK * chunks, catalog.SMALL_BATCH_MAX_EXTRA)
        assert catalog._small_batch_limit(chunks) <= one


def test_a_readers_threaded_batch_keeps_the_run_chunks_it_read_in_the_snapshots_memo(tmp_path, monkeypatch):
    """A batch large enough to share each table's chunks among threads fetches every chunk on the
    calling thread first: through a reader, from the snapshot's memo (``Store.warm`` fills it; at
    10^8 the 7,940 LMDB lookups it saves took 19-29 ms a batch) and into it. The answers are the
    same as a writer's path, which keeps no memo."""
    from fpstore.index import search

    monkeypatch.setattr(search, "thread_count", lambda threads=None: 2)  # threaded on any machine
    monkeypatch.setattr(search, "THREADED_MERGE_QUERIES_SMALL", 1000)
    rng = np.random.default_rng(31)
    fps = rng.integers(0, 2**64, 40_000, dtype=np.uint64)
    queries = np.concatenate([fps[::20] ^ np.uint64(3), rng.integers(0, 2**64, 1000, dtype=np.uint64)])
    with fpstore.open(tmp_path / "s", k=3) as s:
        pid = s.pipeline.id
        s.bulk_load(np.arange(len(fps)), fps, pipeline_id=pid)
        with s._storage.read() as txn:
            expected = [a.tolist() for a in s._cat.probe_many(txn, queries, 3)]
        with s.reader() as r:
            got = r.query_many(queries, pipeline_id=pid)
            run_chunks = [name for name in r._chunks if name[-5:-4] == b"C"]
            with s._storage.read() as txn:
                chunks = sum(run.table(t).index.nchunks for run in s._cat.runs(txn) for t in range(len(s.design.tables)))
        assert len(got[0]) >= 2000
        assert [a.tolist() for a in got] == expected[:3]
        assert len(run_chunks) == chunks

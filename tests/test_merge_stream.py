"""Merges and compaction streamed table by table (fpstore/index/kway.py, fpstore/store/merge_stream.py):
the k-way merge and the removal of deleted entries against numpy, a compacted store's tables and
answers against brute force with pieces and chunks made tiny, and compaction's memory against n."""

from __future__ import annotations

import tracemalloc
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fpstore
from fpstore.errors import CorruptionError
from fpstore.index import runs, tiers
from fpstore.index.kway import Removal, merge_sorted
from fpstore.index.tiers import Run
from fpstore.store import merge_stream


def pieces_of(keys: np.ndarray, cuts: list[int], values: np.ndarray | None = None):
    bounds = [0, *sorted(min(c, len(keys)) for c in cuts), len(keys)]
    return [(keys[a:b], None if values is None else values[a:b]) for a, b in zip(bounds, bounds[1:])]


sorted_sources = st.lists(
    st.tuples(st.lists(st.integers(0, 40), max_size=60), st.lists(st.integers(0, 60), max_size=5)), min_size=0, max_size=5
)


@settings(max_examples=300, deadline=None)
@given(sources=sorted_sources, with_values=st.booleans())
def test_merge_sorted_gives_the_sorted_union_in_ascending_pieces(sources, with_values):
    arrays, streams, next_value = [], [], 0
    for keys, cuts in sources:
        k = np.array(sorted(keys), np.uint64)
        v = np.arange(next_value, next_value + len(k), dtype=np.uint64) if with_values else None
        next_value += len(k)
        arrays.append((k, v))
        streams.append(iter(pieces_of(k, cuts, v)))
    out = list(merge_sorted(streams, "test"))
    keys = np.concatenate([p[0] for p in out]) if out else np.zeros(0, np.uint64)
    want = np.sort(np.concatenate([a[0] for a in arrays])) if arrays else np.zeros(0, np.uint64)
    assert keys.tolist() == want.tolist()
    if with_values:
        got_pairs = Counter(zip(keys.tolist(), np.concatenate([p[1] for p in out]).tolist() if out else []))
        want_pairs = Counter((int(a), int(b)) for k, v in arrays for a, b in zip(k, v))
        assert got_pairs == want_pairs
    else:
        assert all(p[1] is None for p in out)


def test_merge_sorted_refuses_a_source_that_descends():
    bad = iter([(np.array([5, 9], np.uint64), None), (np.array([7], np.uint64), None)])
    good = iter([(np.array([6, 100], np.uint64), None)])
    with pytest.raises(CorruptionError, match="table 3 of runs 1"):
        list(merge_sorted([bad, good], "table 3 of runs 1"))


@settings(max_examples=300, deadline=None)
@given(
    stream=st.lists(st.integers(0, 30), max_size=80),
    cuts=st.lists(st.integers(0, 80), max_size=8),
    remove=st.lists(st.integers(0, 35), max_size=30),
)
def test_removal_takes_one_copy_per_key_given(stream, cuts, remove):
    keys = np.array(sorted(stream), np.uint64)
    removal = Removal(np.array(remove, np.uint64))
    out = [removal.apply(piece) for piece, _ in pieces_of(keys, cuts)]
    got = Counter(np.concatenate(out).tolist() if out else [])
    want = Counter(stream) - Counter(remove)
    assert got == want
    assert removal.missing == sum((Counter(remove) - Counter(stream)).values())


def _grown_store(path, rng: np.random.Generator) -> tuple[fpstore.Store, dict[int, int]]:
    """Runs of both kinds (bulk loads: implicit ids; flushes: an ids column), repeated
    fingerprints, deletes in every run, incremental documents left over."""
    s = fpstore.open(path, k=3, flush_entries=300, merges="manual")
    pid = s.pipeline.id
    model: dict[int, int] = {}
    base = rng.integers(0, 2**64, 400, dtype=np.uint64)
    for load in range(3):
        fps = rng.integers(0, 2**64, 900, dtype=np.uint64)
        fps[::9] = base[rng.integers(0, len(base), len(fps[::9]))]  # the same fingerprint in many runs
        keys = list(range(load * 10_000, load * 10_000 + len(fps)))
        s.bulk_load([(keys, fps)], pipeline_id=pid)
        model.update(zip(keys, fps.tolist()))
    for b in range(5):
        fps = rng.integers(0, 2**64, 250, dtype=np.uint64)
        fps[::5] = base[rng.integers(0, len(base), len(fps[::5]))] ^ np.uint64(1 << int(rng.integers(0, 64)))
        keys = list(range(100_000 + b * 1000, 100_000 + b * 1000 + len(fps)))
        s.add_many(keys, fingerprints=fps, pipeline_id=pid)
        model.update(zip(keys, fps.tolist()))
    for key in rng.choice(np.array(list(model)), 300, replace=False).tolist():
        s.delete(key)
        del model[key]
    return s, model


def test_compaction_in_tiny_pieces_gives_every_table_and_answer_exactly(tmp_path, monkeypatch):
    # Pieces, batches, id steps and chunks far smaller than the runs: every boundary is crossed
    # many times (equal keys across pieces and chunks among them).
    monkeypatch.setattr(merge_stream, "PIECE_KEYS", 7)
    monkeypatch.setattr(merge_stream, "ENCODE_BATCH", 50)
    monkeypatch.setattr(merge_stream, "ID_STEP", 13)
    monkeypatch.setattr(tiers, "RUN_CHUNK_BYTES", runs.max_block_bytes(runs.DEFAULT_BLOCK_ENTRIES) + 100)
    rng = np.random.default_rng(7)
    s, model = _grown_store(tmp_path / "s", rng)
    with s:
        assert len(s.counts()["runs"]) > 4 and s.counts()["tombstones"] and s.counts()["incremental_entries"]
        result = s.compact()
        assert result["entries"] == len(model)
        counts = s.counts()
        assert len(counts["runs"]) == 1 and counts["incremental_entries"] == 0
        live = np.array(list(model.values()), np.uint64)
        with s._storage.read() as txn:
            (rec,) = s._cat.state(txn).runs
            run = Run(txn, s._cat.blobs, s._cat.cache, rec)
            assert run.table(0).index.nchunks > 10
            for t in range(len(s.design.tables)):
                want = np.sort(s.design.permute(live, t))
                assert run.table(t).all().tolist() == want.tolist(), t
            fps0, ids0 = run.table(0).all(), run.all_ids()
            keys = s.keys_of(ids0.tolist())
        assert sorted(zip(keys, fps0.tolist())) == sorted(model.items())
        queries = np.concatenate([live[:200] ^ np.uint64(0b101), rng.integers(0, 2**64, 100, dtype=np.uint64)])
        q, ids, dist = s.query_many(queries, pipeline_id=s.pipeline.id, k=3)
        got = {(int(a), key, int(d)) for a, key, d in zip(q.tolist(), s.keys_of(ids), dist.tolist())}
        mk = np.array(list(model), np.int64)
        mf = np.array([model[key] for key in mk.tolist()], np.uint64)
        dd = np.bitwise_count(queries[:, None] ^ mf[None, :])
        i, j = np.nonzero(dd <= 3)
        assert got == {(int(a), int(mk[b]), int(dd[a, b])) for a, b in zip(i.tolist(), j.tolist())}


def test_a_table_that_disagrees_with_table_0_is_refused(tmp_path, monkeypatch):
    """A merged run whose table 1 lacks entries table 0 has (a damaged run) raises
    CorruptionError, and the compaction changes nothing."""
    rng = np.random.default_rng(3)
    path = tmp_path / "s"
    with fpstore.open(path, k=3, merges="manual") as s:
        for load in range(2):
            s.bulk_load([(list(range(load * 1000, load * 1000 + 500)), rng.integers(0, 2**64, 500, dtype=np.uint64))], pipeline_id=s.pipeline.id)
        before = s.counts()
        real = merge_stream._table_source

        def short(txn_of, db, cache, rec, t):
            pieces = list(real(txn_of, db, cache, rec, t))
            if t == 1:
                pieces[-1] = (pieces[-1][0][:-1], None)
            return iter(pieces)

        monkeypatch.setattr(merge_stream, "_table_source", short)
        with pytest.raises(CorruptionError, match="table 1 of runs"):
            s.compact()
        assert s.counts() == before


def test_compaction_memory_does_not_grow_with_the_store(tmp_path, monkeypatch):
    """Peak Python-tracked memory (numpy arrays and blobs) of compacting 4 runs of 2.5 * 10^4
    documents and 4 runs of 2.5 * 10^5: the second may not grow by even 8 bytes per extra
    document (holding one table of the store whole would take 8, the old merge ~60)."""
    monkeypatch.setattr(merge_stream, "PIECE_KEYS", 4096)
    monkeypatch.setattr(merge_stream, "ENCODE_BATCH", 1 << 14)
    monkeypatch.setattr(merge_stream, "ID_STEP", 1 << 14)
    peaks = {}
    for n in (100_000, 1_000_000):
        rng = np.random.default_rng(n)
        with fpstore.open(tmp_path / str(n), k=3, design="r4", merges="manual") as s:
            for r in range(4):
                keys = np.arange(r * n, r * n + n // 4, dtype=np.uint64)
                s.bulk_load([(keys, rng.integers(0, 2**64, n // 4, dtype=np.uint64))], pipeline_id=s.pipeline.id)
            s.delete(3)
            tracemalloc.start()
            try:
                s.compact()
                _, peaks[n] = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert s.counts()["runs"] == [n - 1]
    assert peaks[1_000_000] - peaks[100_000] < 8 * 900_000, peaks


@pytest.mark.parametrize("seed", range(6))
def test_damage_in_a_later_table_is_refused_not_copied(tmp_path, seed):
    """A bit flipped in a chunk of table 1 (which the merge reads as it is, not rebuilt from
    table 0): compaction raises CorruptionError and changes nothing; it never writes the
    damaged keys under a fresh checksum."""
    rng = np.random.default_rng(seed)
    with fpstore.open(tmp_path / "s", k=3, flush_entries=300, merges="manual") as s:
        for b in range(4):
            s.add_many(list(range(b * 1000, b * 1000 + 400)), fingerprints=rng.integers(0, 2**64, 400, dtype=np.uint64), pipeline_id=s.pipeline.id)

        def flip(txn):
            rec = s._cat.state(txn).runs[0]
            name = rec.tables[1] + b"C" + (0).to_bytes(4, "big")
            value = bytearray(txn.get(name, db=s._cat.blobs))
            value[int(rng.integers(1, len(value)))] ^= 1 << int(rng.integers(0, 8))
            txn.put(name, bytes(value), db=s._cat.blobs)

        s._storage.write(flip)
        s._cat.cache.clear()
        before = s.counts()
        with pytest.raises(CorruptionError):
            s.compact()
        assert s.counts() == before


def test_compaction_clears_a_merging_marker_left_behind(tmp_path):
    """A merging marker a merge failed to clear (its give-up's write failed) makes merges stand
    aside until the writer's next open; compaction, with merges paused, clears it and merges."""
    from fpstore.store.header import U64
    from fpstore.store.merging import MERGING_KEY
    from tests.support.scenario import leftovers

    rng = np.random.default_rng(5)
    with fpstore.open(tmp_path / "s", k=3, flush_entries=300, merges="manual") as s:
        for b in range(3):
            s.add_many(list(range(b * 1000, b * 1000 + 400)), fingerprints=rng.integers(0, 2**64, 400, dtype=np.uint64), pipeline_id=s.pipeline.id)

        def mark(txn):
            state = s._cat.state(txn)
            txn.put(MERGING_KEY, U64.pack(state.next_run + 7), db=s._cat.meta)

        s._storage.write(mark)
        assert len(s.counts()["runs"]) > 1
        result = s.compact()
        assert result["runs_merged"] > 1 and len(s.counts()["runs"]) == 1 and not leftovers(s)


def test_a_step_reads_for_a_bounded_time_however_little_it_writes(tmp_path, monkeypatch):
    """Most entries deleted: the merge writes little, and yet reads its runs in many short
    snapshots (here one stretch each), not all in one; the answers stay exact."""
    from fpstore.store import merging

    monkeypatch.setattr(merging, "MERGE_STEP_SECONDS", 0.0)
    monkeypatch.setattr(merge_stream, "PIECE_KEYS", 64)
    rng = np.random.default_rng(9)
    with fpstore.open(tmp_path / "s", k=3, merges="manual") as s:
        model = {}
        for r in range(3):
            keys = list(range(r * 10_000, r * 10_000 + 2_000))
            fps = rng.integers(0, 2**64, len(keys), dtype=np.uint64)
            s.bulk_load([(keys, fps)], pipeline_id=s.pipeline.id)
            model.update(zip(keys, fps.tolist()))
        for key in list(model)[::2] + list(model)[1::4]:
            s.delete(key)
            del model[key]
        reads = []
        real = s._storage.read
        monkeypatch.setattr(s._storage, "read", lambda *a, **k: reads.append(1) or real(*a, **k))
        s.compact()
        assert len(reads) > 50
        assert s.counts()["runs"] == [len(model)]
        queries = np.array(list(model.values())[:100], np.uint64) ^ np.uint64(4)
        q, ids, _ = s.query_many(queries, pipeline_id=s.pipeline.id, k=3)
        got = set(zip(q.tolist(), s.keys_of(ids)))
        mk = np.array(list(model), np.int64)
        mf = np.array([model[k] for k in mk.tolist()], np.uint64)
        i, j = np.nonzero(np.bitwise_count(queries[:, None] ^ mf[None, :]) <= 3)
        assert got == {(int(a), int(mk[b])) for a, b in zip(i.tolist(), j.tolist())}

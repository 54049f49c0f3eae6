"""The writer's copy of the incremental tables in memory (``IncrementalTables``): every answer it
gives must be the tables' own, whatever the transactions around it did (commits, aborts, flushes,
older snapshots still open, a copy too large to keep)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fpstore
from fpstore.store import incremental
from fpstore.store.inputs import prepare_add
from fpstore.store.writes import add_one

K = 3
BASE = 0x0123_4567_89AB_CDEF


def _add(store, key, fp):
    return store.add(key, fingerprint=fp, pipeline_id=store.pipeline.id)


def _query(store, fp, reader=None):
    return [m.key for m in (reader or store).query(fingerprint=fp, pipeline_id=store.pipeline.id, k=K)]


def _near_keys(result):
    return sorted(m.key for m in result.near_duplicates)


class _Boom(Exception):
    pass


def _aborted_add(store, key, fp):
    """Add ``key`` inside a write transaction that then fails: nothing of it may stay."""
    add = prepare_add(store.pipeline, key, None, fp, store.pipeline.id, "insert", None)

    def write(txn):
        add_one(store._cat, txn, add, K)
        raise _Boom

    with pytest.raises(_Boom):
        store._storage.write(write)


def test_an_aborted_add_is_forgotten(tmp_path):
    with fpstore.open(tmp_path / "s", k=K, flush_entries=0) as store:
        _add(store, "a", BASE)
        _aborted_add(store, "ghost", BASE ^ 0b11)
        assert _near_keys(_add(store, "b", BASE ^ 0b1)) == ["a"]
        assert _query(store, BASE ^ 0b11) == ["b", "a"]  # by distance: 1, then 2


def test_an_older_snapshot_does_not_see_later_adds(tmp_path):
    with fpstore.open(tmp_path / "s", k=K, flush_entries=0) as store:
        _add(store, "a", BASE)
        with store.reader() as old:
            _add(store, "b", BASE ^ 0b1)
            assert _query(store, BASE, old) == ["a"]
        assert _query(store, BASE) == ["a", "b"]


def test_too_many_documents_to_keep_are_read_from_the_tables(tmp_path, monkeypatch):
    monkeypatch.setattr(incremental, "MEMORY_MAX", 3)
    with fpstore.open(tmp_path / "s", k=K, flush_entries=0) as store:
        for i in range(6):  # past the limit while adding: the copy is dropped, not truncated
            _add(store, f"d{i}", BASE ^ (1 << (8 * i)) ^ (1 << (8 * i + 1)))
        assert store._cat.incremental._committed is None
        got = _add(store, "q", BASE)
        assert _near_keys(got) == [f"d{i}" for i in range(6)]


def test_the_copy_follows_the_tables(tmp_path):
    """The copy is in use (else the tests above would not test it) and equals table 0."""
    with fpstore.open(tmp_path / "s", k=K, flush_entries=0) as store:
        for i in range(5):
            _add(store, f"d{i}", BASE ^ i)
        store.delete("d2")
        with store._storage.read() as txn:
            docs = store._cat.incremental._docs(txn)
            assert docs is not None  # the latest commit's reader gets the copy
            fps, ids = docs
            pairs = incremental.table_entries(txn, store._cat.incremental.dbs[0], 0)  # the B-tree itself
            # What a flush reads: the copy, in the table's order.
            assert store._cat.incremental.table0(txn).tolist() == pairs.tolist()
        assert sorted(zip(fps.tolist(), ids.tolist())) == sorted(zip(pairs[:, 0].tolist(), pairs[:, 1].tolist()))


_OP = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 5), st.integers(0, 63), st.integers(0, 63)),
    st.tuples(st.just("abort"), st.integers(0, 5), st.integers(0, 63), st.integers(0, 63)),
    st.tuples(st.just("delete"), st.integers(0, 5)),
    st.tuples(st.just("batch"), st.lists(st.tuples(st.integers(0, 5), st.integers(0, 63)), min_size=1, max_size=40)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_OP, min_size=1, max_size=25), flush_entries=st.sampled_from([0, 3, 8]))
def test_queries_equal_brute_force_through_commits_aborts_and_flushes(tmp_path_factory, ops, flush_entries):
    """After every operation, a query near each live document equals numpy brute force over the
    live documents (the model), and so does an add's verdict."""
    live: dict[str, int] = {}
    with fpstore.open(tmp_path_factory.mktemp("m") / "s", k=K, flush_entries=flush_entries) as store:
        for op in ops:
            if op[0] in ("add", "abort"):
                _, key, b1, b2 = op
                fp = BASE ^ (1 << b1) ^ (1 << b2)
                if op[0] == "abort":
                    _aborted_add(store, f"k{key}", fp)
                    continue
                got = _add(store, f"k{key}", fp)
                live.pop(f"k{key}", None)
                assert _near_keys(got) == sorted(k for k, f in live.items() if (f ^ fp).bit_count() <= K)
                live[f"k{key}"] = fp
            elif op[0] == "delete":
                store.delete(f"k{op[1]}")
                live.pop(f"k{op[1]}", None)
            else:
                batch = {f"k{key}": BASE ^ (1 << b) ^ (1 << (b + 7) % 64) for key, b in op[1]}
                keys = list(batch)
                store.add_each(keys, fingerprints=np.array([batch[k] for k in keys], np.uint64), pipeline_id=store.pipeline.id)
                live.update(batch)
            keys = sorted(live)
            fps = np.array([live[k] for k in keys], np.uint64)
            for q in {BASE, *live.values()}:
                want = sorted(k for k, d in zip(keys, np.bitwise_count(fps ^ np.uint64(q)).tolist()) if d <= K)
                assert sorted(_query(store, q)) == want

"""Adds answered together (fpstore.store.ordered): a group's verdicts, ids, canonicals and final
store equal what the same adds give one at a time, over every kind of document the store holds
(bulk-loaded, incremental, flushed into runs, tombstoned), texts with content hashes, short texts,
replacements, unchanged re-adds and on_duplicate="skip"."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fpstore
from fpstore.store import catalog, incremental
from fpstore.store.inputs import prepare_add
from fpstore.store.ordered import segments
from fpstore.store.writes import add_group
from tests.test_group_commit import _verdict

K = 3
LONG = [" ".join(f"w{(i * 7 + j) % 50}" for j in range(40)) for i in range(3)]
SHORT = ["tiny page", "another tiny page"]


@st.composite
def _op(draw, bases):
    key = draw(st.one_of(st.sampled_from([f"k{i}" for i in range(8)]), st.integers(0, 5)))
    if draw(st.integers(0, 3)) == 0:
        return key, draw(st.sampled_from(LONG + SHORT)), None, draw(st.booleans())
    fp = bases[draw(st.integers(0, len(bases) - 1))]
    for _ in range(draw(st.integers(0, 3))):
        fp ^= 1 << draw(st.integers(0, 63))
    return key, None, fp, draw(st.integers(0, 4)) == 0


@st.composite
def _plan(draw):
    bases = draw(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=3))
    bulk = draw(st.lists(st.integers(0, 2), max_size=6))
    before = draw(st.lists(_op(bases), max_size=12))
    group = draw(st.lists(_op(bases), min_size=2, max_size=30))
    return [bases[b % len(bases)] ^ i for i, b in enumerate(bulk)], before, group


def _serial(store, op):
    key, text, fp, skip = op
    pid = None if text is not None else store.pipeline.id
    return store.add(key, text=text, fingerprint=fp, pipeline_id=pid, on_duplicate="skip" if skip else "insert")


def _state(store):
    return sorted((repr(d.key), d.id, d.fingerprint, d.content_hash, repr(d.canonical), d.short) for d in store.documents())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plan=_plan(),
    flush_entries=st.sampled_from([0, 2, 5]),
    batch_probe=st.sampled_from([0, 10**6]),
    incremental_way=st.sampled_from(["compare all", "scan", "probe each"]),
    few=st.sampled_from([0, 10**6]),
)
def test_a_group_equals_its_adds_one_at_a_time(tmp_path_factory, plan, flush_entries, batch_probe, incremental_way, few):
    """Both ways of finding the stored neighbours (the merge of the batch with every table, a
    probe per add), the three ways of reading the incremental tables (every add against every
    document of the writer's copy, one scan, a probe per add), and both ways of looking keys up
    in the key segments and of writing the tables (numpy's batch calls, or an int at a time for
    a few: ``few``), give it."""
    bulk, before, group = plan
    root = tmp_path_factory.mktemp("ordered")
    stores = [fpstore.open(root / name, k=K, flush_entries=flush_entries) for name in ("group", "serial")]
    try:
        for store in stores:
            if bulk:
                store.bulk_load(np.arange(len(bulk)), np.array(bulk, np.uint64), pipeline_id=store.pipeline.id)
            for op in before:
                _serial(store, op)
        together, serial = stores
        adds = [
            prepare_add(together.pipeline, key, text, fp, None if text else together.pipeline.id, "skip" if skip else "insert", None)
            for key, text, fp, skip in group
        ]
        saved = (catalog.SMALL_BATCH_BASE, catalog.SMALL_BATCH_PER_CHUNK, incremental.SCAN_US, incremental.SCAN_US_PER_ENTRY)
        saved_docs, saved_few = incremental._COMPARE_ALL_DOCS, (catalog.FEW_KEYS, incremental.PUT_FEW)
        catalog.SMALL_BATCH_BASE, catalog.SMALL_BATCH_PER_CHUNK = batch_probe, 0
        catalog.FEW_KEYS, incremental.PUT_FEW = few, few
        if incremental_way != "compare all":
            incremental._COMPARE_ALL_DOCS = -1
            incremental.SCAN_US, incremental.SCAN_US_PER_ENTRY = (0.0 if incremental_way == "scan" else 1e12), 0.0
        try:
            got = together._storage.write(lambda txn: add_group(together._cat, txn, adds, K, flush_entries))
        finally:
            catalog.SMALL_BATCH_BASE, catalog.SMALL_BATCH_PER_CHUNK, incremental.SCAN_US, incremental.SCAN_US_PER_ENTRY = saved
            incremental._COMPARE_ALL_DOCS = saved_docs
            catalog.FEW_KEYS, incremental.PUT_FEW = saved_few
        want = [_serial(serial, op) for op in group]
        assert [_verdict(r) for r in got] == [_verdict(r) for r in want]
        assert _state(together) == _state(serial)
    finally:
        for store in stores:
            store.close()


def test_segments_split_where_a_key_repeats_and_at_the_limit():
    pipe = fpstore.Pipeline(sketch_bits=0)
    adds = [prepare_add(pipe, key, None, 1, pipe.id, "insert", None) for key in "abcadbbe"]
    assert segments(adds) == [(0, 3), (3, 6), (6, 8)]
    assert segments(adds, limit=2) == [(0, 2), (2, 4), (4, 6), (6, 8)]
    assert segments([]) == []


def test_a_group_that_fails_after_a_flush_is_retried_against_the_committed_runs(tmp_path):
    """A group's transaction flushes the incremental tables into run N and reads it, then fails;
    each add is retried alone and a later flush makes run N again, from other documents. The run
    index cached from the failed transaction must not serve the new run N (run ids come from the
    committed state, so a failed transaction's ids come again)."""
    from fpstore.store import faults
    from fpstore.store.group import run_group

    class FailFirstCommit(faults.Faults):
        def __init__(self):
            self.commits = 0

        def before_commit(self):
            self.commits += 1
            if self.commits == 1:
                raise OSError("injected: the first commit fails")

    rng = np.random.default_rng(5)
    base = int(rng.integers(0, 2**63))
    docs = [(f"d{i}", base ^ (1 << (i % 64)) ^ (int(rng.integers(0, 2**63)) if i % 3 else 0)) for i in range(12)]
    docs.insert(6, ("d0", base ^ 3))  # a repeated key: the group is two segments, with a flush between
    with fpstore.open(tmp_path / "a", k=K, flush_entries=4) as store, fpstore.open(tmp_path / "b", k=K, flush_entries=4) as serial:
        pid = store.pipeline.id
        adds = [prepare_add(store.pipeline, key, None, fp, pid, "insert", None) for key, fp in docs]
        previous = faults.install(FailFirstCommit())
        try:
            outcomes = run_group(store._commit_adds, adds)
        finally:
            faults.install(previous)
        assert all(error is None for _, error in outcomes), [e for _, e in outcomes if e]
        want = [serial.add(key, fingerprint=fp, pipeline_id=pid) for key, fp in docs]
        assert [_verdict(r) for r, _ in outcomes] == [_verdict(r) for r in want]
        probe = [int(fp) for _, fp in docs]
        assert [[(m.key, m.distance) for m in store.query(fingerprint=f, pipeline_id=pid)] for f in probe] == [
            [(m.key, m.distance) for m in serial.query(fingerprint=f, pipeline_id=pid)] for f in probe
        ]


def test_no_chunk_views_of_runs_the_open_transaction_wrote_are_kept(tmp_path, monkeypatch):
    """A write transaction keeps the run chunks its probes read, for its next probe to read again
    without a lookup (a batch's segments, the stager's staged groups). A run the transaction wrote
    itself (a flush between two segments) lies in its own dirty pages, which a later write of it
    may free (LMDB spills dirty pages past 512 MiB of them): views of those kept across writes
    would read freed memory. Once the transaction has written a run, no probe in it gets the memo
    until it commits; the verdicts stay exact."""
    from fpstore.store.catalog import Catalog

    store = fpstore.open(tmp_path / "s", k=K, flush_entries=32)
    pid = store.pipeline.id
    rng = np.random.default_rng(5)
    base = rng.integers(0, 2**64, 200, dtype=np.uint64)
    store.add_many([f"b{i}" for i in range(200)], fingerprints=base, pipeline_id=pid)
    with store._storage.read() as txn:
        committed = {run.id for run in store._cat.plan(txn).runs}
    assert committed, "the first batch made no run"
    calls: list[tuple[bool, bool]] = []  # (the plan holds a run of the open transaction, a memo given)
    real = Catalog._chunks_written_txn

    def spy(self, txn, plan):
        memo = real(self, txn, plan)
        calls.append((any(run.id not in committed for run in plan.runs), memo is not None))
        return memo

    monkeypatch.setattr(Catalog, "_chunks_written_txn", spy)
    # Keys repeat every 40 adds: each repeat starts a segment, probed after the flush before it.
    keys = [f"a{i % 40}" for i in range(160)]
    fps = [int(base[i % 200]) ^ (1 << (i % 64)) if i % 3 == 0 else int(rng.integers(0, 2**64, dtype=np.uint64)) for i in range(160)]
    results = store.add_each(keys, fingerprints=fps, pipeline_id=pid)
    stored = {f"b{i}": int(f) for i, f in enumerate(base)}
    for key, fp, result in zip(keys, fps, results):
        want = {k for k, f in stored.items() if k != key and bin(f ^ fp).count("1") <= K}
        assert {m.key for m in result.near_duplicates} == want
        stored[key] = fp
    assert any(own for own, _ in calls), "no probe met a run of the open transaction"
    assert not any(own and memo for own, memo in calls), "chunk views of the open transaction's own runs were kept"
    assert any(memo for own, memo in calls if not own)  # the memo still serves the runs committed before
    store.close()

"""Tier merges in transactions of their own (fpstore/store/merging.py): every mode keeps answers
exact and leaves no full tier behind; a merge that gives up or loses its runs to a compaction
leaves nothing behind once collected; what a dead merge wrote is cleared by the writer's next
open; a damaged garbage list is refused before anything is deleted. Kills at every step of a
merge are in the named-point harness (tests/test_reliability.py: the scenario opens its stores
with merges="inline"), and kill -9 at random instants of background merges in tests/test_crash.py;
a process dying inside a merge nested between a long merge's steps is here."""

from __future__ import annotations

import time
from collections.abc import Callable

import msgpack
import numpy as np
import pytest

import fpstore
from fpstore.errors import CorruptionError, InputError
from fpstore.store import merging
from fpstore.store.lsm import MERGE_FANOUT, merge_group
from tests.support.scenario import leftovers


def brute(model: dict[int, int], queries: np.ndarray, k: int) -> set[tuple[int, int, int]]:
    keys = np.array(list(model), dtype=np.int64)
    fps = np.array([model[key] for key in keys.tolist()], dtype=np.uint64)
    dist = np.bitwise_count(queries[:, None] ^ fps[None, :])
    i, j = np.nonzero(dist <= k)
    return {(int(a), int(keys[b]), int(dist[a, b])) for a, b in zip(i.tolist(), j.tolist())}


def answers(store: fpstore.Store, queries: np.ndarray, k: int = 3) -> set[tuple[int, int, int]]:
    q, ids, dist = store.query_many(queries, pipeline_id=store.pipeline.id, k=k)
    return {(int(a), int(key), int(d)) for a, key, d in zip(q.tolist(), store.keys_of(ids), dist.tolist())}


def full_tier(store: fpstore.Store) -> list:
    with store._storage.read() as txn:
        return merge_group(store._cat.state(txn).runs, store.flush_entries)


def grow(store: fpstore.Store, rng: np.random.Generator, batches: int, size: int = 100, start: int = 0) -> dict[int, int]:
    """``batches`` add_many calls of ``size`` documents, a tenth near earlier ones, and a few deletes."""
    model: dict[int, int] = {}
    fps = rng.integers(0, 2**64, size=batches * size, dtype=np.uint64)
    fps[size::10] = fps[: len(fps[size::10])] ^ np.uint64(0b1001)
    for b in range(batches):
        keys = list(range(start + b * size, start + (b + 1) * size))
        store.add_many(keys, fingerprints=fps[b * size : (b + 1) * size], pipeline_id=store.pipeline.id)
        model.update(zip(keys, fps[b * size : (b + 1) * size].tolist()))
        if b % 7 == 3:
            store.delete(keys[0] - 50)
            model.pop(keys[0] - 50, None)
    return model


def add_run(store: fpstore.Store, rng: np.random.Generator) -> None:
    """One add_many of 200 random documents: a run of its own at flush_entries=200."""
    store.add_many(
        rng.integers(0, 2**40, 200).tolist(), fingerprints=rng.integers(0, 2**64, 200, dtype=np.uint64), pipeline_id=store.pipeline.id
    )


def full_tier_of(store: fpstore.Store, rng: np.random.Generator, per_run: int) -> None:
    """MERGE_FANOUT runs of 200 * ``per_run`` documents (each merged from runs of 200): a full tier."""
    for _ in range(MERGE_FANOUT):
        for _ in range(per_run):
            add_run(store, rng)
        if per_run > 1:
            assert merging.merge_runs(store._storage, store._cat, full_tier(store)) is not None


def flushing(store: fpstore.Store, rng: np.random.Generator, then: Callable[[], bool] = lambda: False) -> Callable[[], bool]:
    """A merge's ``stopping`` hook (called between its steps) that adds a run at each of its first
    MERGE_FANOUT calls, a smaller tier's worth, and answers ``then()`` after."""
    calls = [0]

    def stopping() -> bool:
        calls[0] += 1
        if calls[0] <= MERGE_FANOUT:
            add_run(store, rng)
            return False
        return then()

    return stopping


@pytest.mark.parametrize("mode", ["inline", "background", "manual"])
def test_every_mode_keeps_answers_exact_and_merges_every_full_tier(tmp_path, mode):
    rng = np.random.default_rng(["inline", "background", "manual"].index(mode))
    with fpstore.open(tmp_path / "s", k=3, flush_entries=200, merges=mode) as s:
        model = grow(s, rng, 60)
        queries = np.array(list(model.values())[::9], dtype=np.uint64) ^ np.uint64(1)
        assert answers(s, queries) == brute(model, queries, 3)  # whatever merges are in flight
        if mode == "inline":
            assert full_tier(s) == []  # merged before the write that made it due returned
        if mode == "manual":
            assert full_tier(s) != [] and s.info()["merges"]["done"] == 0
        counts = s.merge_runs()
        assert full_tier(s) == [] and not leftovers(s)
        assert mode != "manual" or counts["merges"] >= 1
        assert s.info()["merges"]["done"] >= 1 and s.info()["merges"]["last_error"] is None
        assert answers(s, queries) == brute(model, queries, 3)
        assert len(s.counts()["runs"]) <= 3 * MERGE_FANOUT  # at most FANOUT - 1 per tier, three tiers here
        assert s.verify() == []


def test_background_merges_run_without_being_asked(tmp_path):
    rng = np.random.default_rng(5)
    with fpstore.open(tmp_path / "s", k=3, flush_entries=200) as s:
        grow(s, rng, 40)
        deadline = time.monotonic() + 60
        while s.info()["merges"]["done"] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.info()["merges"]["done"] >= 1, "no background merge ran within a minute"


def test_close_during_background_merges_returns(tmp_path):
    """close() stops the merge thread even when the thread's own commits come after it (a second
    thread started then took the wake-up that ends the first: close() hung in join)."""
    import threading

    rng = np.random.default_rng(8)
    for i in range(12):
        s = fpstore.open(tmp_path / f"s{i}", k=3, flush_entries=50)
        fps = rng.integers(0, 2**64, size=2000, dtype=np.uint64)
        for lo in range(0, 2000, 100):
            s.add_many(list(range(lo, lo + 100)), fingerprints=fps[lo : lo + 100], pipeline_id=s.pipeline.id)
        closer = threading.Thread(target=s.close)
        closer.start()
        closer.join(timeout=60)
        assert not closer.is_alive(), f"close() hung (store {i})"
        assert not [t for t in threading.enumerate() if t.name.startswith(f"fpstore-merge {s.path}")]


def test_inline_merges_with_two_writer_threads_do_not_hang(tmp_path, monkeypatch):
    """With merges="inline", a thread running a merge committed its steps while another thread's
    flush had made a merge due: the commit hook started a merge in that same thread, which waited
    for the merge lock it held (a hang, before and after merges nested)."""
    import threading

    monkeypatch.setattr(merging, "MERGE_STEP_BYTES", 1)  # many commits inside each merge
    rng = np.random.default_rng(41)
    lock, keys = threading.Lock(), iter(range(10**9))
    with fpstore.open(tmp_path / "s", k=3, flush_entries=200, merges="inline") as s:

        def worker() -> None:
            for _ in range(30):
                with lock:
                    batch = [next(keys) for _ in range(200)]
                    fps = rng.integers(0, 2**64, 200, dtype=np.uint64)
                s.add_many(batch, fingerprints=fps, pipeline_id=s.pipeline.id)

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads), "a writer hung in an inline merge"
        assert len(s) == 2 * 30 * 200 and full_tier(s) == [] and s.verify() == []


def test_unknown_merge_mode_is_refused(tmp_path):
    with pytest.raises(InputError, match="merges must be one of background, inline, manual"):
        fpstore.open(tmp_path / "s", merges="sometimes")
    assert not (tmp_path / "s").exists()


def test_a_merge_that_gives_up_leaves_nothing_once_the_writer_reopens(tmp_path, monkeypatch):
    """Stopped after its reservation and part of its blobs (as close() stops a background merge):
    the store answers as before; the next writer's open deletes what it wrote."""
    monkeypatch.setattr(merging, "MERGE_STEP_BYTES", 1)  # a step per blob: many steps
    rng = np.random.default_rng(9)
    path = tmp_path / "s"
    with fpstore.open(path, k=3, flush_entries=200, merges="manual") as s:
        model = grow(s, rng, 20)
        runs_before = s.counts()["runs"]
        calls = []

        def stop_after_two_steps() -> bool:
            calls.append(1)
            return len(calls) > 2

        assert merging.merge_once(s._storage, s._cat, s.flush_entries, stop_after_two_steps) is None
        assert len(calls) == 3 and s.counts()["runs"] == runs_before
        assert leftovers(s)  # its blobs, on the garbage list
        queries = np.array(list(model.values())[::5], dtype=np.uint64)
        assert answers(s, queries) == brute(model, queries, 3)
    with fpstore.open(path, readonly=True) as r:
        assert leftovers(r)  # a reader deletes nothing
    with fpstore.open(path, merges="manual") as s:
        assert not leftovers(s)
        assert answers(s, queries) == brute(model, queries, 3)
        s.merge_runs()
        assert answers(s, queries) == brute(model, queries, 3) and s.verify() == []


def test_a_merge_whose_runs_were_replaced_meanwhile_discards_its_run(tmp_path):
    rng = np.random.default_rng(13)
    with fpstore.open(tmp_path / "s", k=3, flush_entries=200, merges="manual") as s:
        model = grow(s, rng, 20)
        compacted = []

        def replace_runs(txn) -> None:
            # What a redesign does to the runs, in one transaction (compact() itself now merges
            # as this merge does, and pauses merges first).
            state = s._cat.state(txn)
            new_state, _ = s._cat.lsm.merge(txn, state, list(state.runs), incremental=True, rewrite=True)
            s._cat.lsm.save_state(txn, new_state)

        def compact_first() -> bool:
            if not compacted:
                compacted.append(s._storage.write(replace_runs))  # between the reservation and the blobs
            return False

        assert merging.merge_once(s._storage, s._cat, s.flush_entries, compact_first) is None
        assert compacted and len(s.counts()["runs"]) == 1 and not leftovers(s)
        queries = np.array(list(model.values())[::5], dtype=np.uint64) ^ np.uint64(2)
        assert answers(s, queries) == brute(model, queries, 3) and s.verify() == []


def test_smaller_tiers_filled_during_a_long_merge_are_merged_between_its_steps(tmp_path, monkeypatch):
    """Flushes go on while a merge of a big tier writes its steps: the runs they make must not
    wait for it (before, every such run stayed until the long merge ended, then all merged at
    once; at 2e7 documents, 80 runs probed by every query meanwhile)."""
    monkeypatch.setattr(merging, "MERGE_STEP_BYTES", 1)  # a step per blob: many steps
    rng = np.random.default_rng(19)
    model: dict[int, int] = {}

    def add(s: fpstore.Store, n: int) -> None:  # n // 200 runs: a flush per write of 200
        for _ in range(n // 200):
            fps = rng.integers(0, 2**64, size=200, dtype=np.uint64)
            keys = list(range(len(model), len(model) + 200))
            s.add_many(keys, fingerprints=fps, pipeline_id=s.pipeline.id)
            model.update(zip(keys, fps.tolist()))

    with fpstore.open(tmp_path / "s", k=3, flush_entries=200, merges="manual") as s:
        for _ in range(MERGE_FANOUT):  # a full tier of runs of 800, each merged from four of 200
            add(s, 800)
            assert merging.merge_runs(s._storage, s._cat, full_tier(s)) is not None
        big = full_tier(s)
        assert [rec.count for rec in big] == [800] * MERGE_FANOUT
        added = [0]

        def flush_while_merging() -> bool:  # called between the long merge's steps
            if added[0] < 6:
                add(s, 200)
                added[0] += 1
            return False

        done = merging.merge_once(s._storage, s._cat, s.flush_entries, flush_while_merging)
        assert done is not None and done["merges"] >= 2 and added[0] == 6
        runs = s.counts()["runs"]
        assert max(runs) == 3200 and sum(1 for count in runs if count < 800) < MERGE_FANOUT, runs
        assert full_tier(s) == [] and not leftovers(s)
        queries = np.array(list(model.values())[::7], dtype=np.uint64) ^ np.uint64(4)
        assert answers(s, queries) == brute(model, queries, 3) and s.verify() == []


def test_a_merge_drops_the_runs_it_replaced_from_the_tier_cache(tmp_path):
    """Their indexes and probe tables stayed until evicted by bytes: tens of thousands of objects
    after millions of adds, walked by every full pass of the cycle collector."""
    rng = np.random.default_rng(23)

    def cached_runs(s: fpstore.Store) -> set[int]:
        keys = list(s._cat.cache._entries._entries)
        prefixes = [key if isinstance(key, bytes) else key[1] for key in keys if not (isinstance(key, tuple) and key[0] == "run")]
        by_id = {key[1] for key in keys if isinstance(key, tuple) and key[0] == "run"}
        return by_id | {int.from_bytes(p[1:5], "big") for p in prefixes if isinstance(p, bytes) and p[:1] == b"r"}

    with fpstore.open(tmp_path / "s", k=3, flush_entries=200, merges="manual") as s:
        model = grow(s, rng, 20)
        queries = np.array(list(model.values())[::5], dtype=np.uint64) ^ np.uint64(1)
        before = answers(s, queries)  # every run read, so cached
        replaced = {rec.id for rec in full_tier(s)}
        assert replaced and replaced <= cached_runs(s)
        s.merge_runs()
        assert not cached_runs(s) & replaced
        assert answers(s, queries) == before == brute(model, queries, 3)


@pytest.mark.parametrize("design", ["r4", "r5"])
def test_a_merge_builds_the_cells_of_the_run_it_makes(tmp_path, design):
    """The thread that merged a run builds its tables' occupied cells, where the ranges of the
    design's prefixes hold less than a key on average (all of r5's 25-26-bit ones at this size;
    none of r4's 16-bit ones beyond 2**16 keys); answers stay exact."""
    from fpstore import _backend

    rng = np.random.default_rng(29)
    with fpstore.open(tmp_path / "s", k=3, design=design, flush_entries=200, merges="manual") as s:
        model = grow(s, rng, 16)
        queries = np.array(list(model.values())[::3], dtype=np.uint64) ^ np.uint64(4)
        s.merge_runs()
        with s._storage.read() as txn:
            (merged,) = s._cat.runs(txn)  # the eight runs of 200, merged
            filtered = [pt.filtered for pt in merged.probe_tables()]
        compiled = not _backend.PURE_PYTHON
        assert filtered == [compiled] * len(s.design.tables)
        assert answers(s, queries) == brute(model, queries, 3)


@pytest.mark.parametrize("limit", ["quarter", "entries"])
def test_a_tier_too_big_to_nest_waits_for_the_long_merge(tmp_path, monkeypatch, limit):
    """Between a long merge's steps only a tier of at most a quarter of its entries and of
    NESTED_MAX_ENTRIES is merged: a bigger one would hold the smallest tiers back in turn."""
    monkeypatch.setattr(merging, "MERGE_STEP_BYTES", 1)
    if limit == "entries":
        monkeypatch.setattr(merging, "NESTED_MAX_ENTRIES", 799)
    rng = np.random.default_rng(37)
    with fpstore.open(tmp_path / "s", k=3, flush_entries=200, merges="manual") as s:
        # Each run of the long merge: 200 ("quarter": the runs flushed meanwhile are of its own
        # tier) or 800 (their tier is below it, but of more entries than the limit set here).
        full_tier_of(s, rng, 4 if limit == "entries" else 1)
        done = merging.merge_once(s._storage, s._cat, s.flush_entries, flushing(s, rng))
        assert done is not None and done["merges"] == 1, done
        assert sorted(s.counts()["runs"])[:MERGE_FANOUT] == [200] * MERGE_FANOUT


def test_a_long_merge_given_up_still_counts_the_merges_made_between_its_steps(tmp_path, monkeypatch):
    """The merges between the long merge's steps are committed whatever becomes of it: a merge
    that gave up returned None, and the merger's counters (``info()["merges"]["done"]``) missed
    them."""
    monkeypatch.setattr(merging, "MERGE_STEP_BYTES", 1)
    rng = np.random.default_rng(29)
    with fpstore.open(tmp_path / "s", k=3, flush_entries=200, merges="manual") as s:
        full_tier_of(s, rng, MERGE_FANOUT)
        big = {rec.id for rec in full_tier(s)}

        def a_smaller_tier_merged() -> bool:
            with s._storage.read() as txn:
                return any(rec.id not in big and rec.count == 800 for rec in s._cat.state(txn).runs)

        done = merging.merge_once(s._storage, s._cat, s.flush_entries, flushing(s, rng, then=a_smaller_tier_merged))
        assert done == {"merges": 1, "runs_merged": MERGE_FANOUT, "entries": 800}
        assert sorted(s.counts()["runs"]) == [800] * (MERGE_FANOUT + 1)
        assert not [x for x in leftovers(s) if x.startswith("meta/merging")]  # the rest: garbage, collected later


def test_a_merge_keeps_the_cache_entries_of_key_segments_still_live(tmp_path):
    """A bulk load's table 0 is its key segment's fingerprints, which outlive the run: the merge
    of bulk-loaded runs dropped their cache entries too (rebuilt at the next read)."""
    rng = np.random.default_rng(31)
    with fpstore.open(tmp_path / "s", k=3, flush_entries=200, merges="manual") as s:
        for i in range(MERGE_FANOUT):
            s.bulk_load(np.arange(i * 1000, (i + 1) * 1000), rng.integers(0, 2**64, 1000, dtype=np.uint64), pipeline_id=s.pipeline.id)
        s.query_many(rng.integers(0, 2**64, 50, dtype=np.uint64), pipeline_id=s.pipeline.id)
        segments = [rec.tables[0] for rec in full_tier(s)]
        assert len(segments) == MERGE_FANOUT and all(p[:1] == b"s" and p in s._cat.cache._entries._entries for p in segments)
        s.merge_runs()
        assert len(s.counts()["runs"]) == 1 and len(s.counts()["segments"]) == MERGE_FANOUT
        assert all(key in s._cat.cache._entries._entries for key in segments)


_DIE_IN_A_NESTED_MERGE = """
import os, sys
import numpy as np
import fpstore
from fpstore.store import merging

merging.MERGE_STEP_BYTES = 1
rng = np.random.default_rng(99)
with fpstore.open(sys.argv[1], flush_entries=200, merges="manual") as s:
    calls, inside = [0], []

    def flush_then_die() -> bool:
        calls[0] += 1
        if calls[0] <= 4:  # four runs of 200: a smaller tier, merged between the long merge's steps
            s.add_many(list(range(10_000 + 200 * calls[0], 10_200 + 200 * calls[0])),
                       fingerprints=rng.integers(0, 2**64, 200, dtype=np.uint64), pipeline_id=s.pipeline.id)
            return False
        with s._storage.read() as txn:
            nested = txn.get(merging.SMALL_MERGING_KEY, db=s._cat.meta) is not None
        inside.append(nested)
        if inside.count(True) == 2:  # inside the nested merge, after its first step's write
            os._exit(9)
        return False

    merging.merge_once(s._storage, s._cat, s.flush_entries, flush_then_die)
os._exit(3)  # the nested merge ended before the kill: the test's premise failed
"""


def test_a_process_killed_inside_a_nested_merge_leaves_a_store_that_answers_as_before(tmp_path):
    """os._exit in the middle of a merge made between the steps of a long one: both markers are
    set, blobs of two unfinished runs are in the file. The next writer's open clears them; every
    acknowledged add is there, and answers equal brute force."""
    import subprocess
    import sys

    path = tmp_path / "s"
    rng = np.random.default_rng(43)
    model: dict[int, int] = {}
    with fpstore.open(path, k=3, flush_entries=200, merges="manual") as s:
        for round_ in range(MERGE_FANOUT):  # a full tier of runs of 800
            for b in range(4):
                keys = list(range(1000 * round_ + 200 * b, 1000 * round_ + 200 * (b + 1)))
                fps = rng.integers(0, 2**64, 200, dtype=np.uint64)
                s.add_many(keys, fingerprints=fps, pipeline_id=s.pipeline.id)
                model.update(zip(keys, fps.tolist()))
            assert merging.merge_runs(s._storage, s._cat, full_tier(s)) is not None
    child = subprocess.run([sys.executable, "-c", _DIE_IN_A_NESTED_MERGE, str(path)], capture_output=True, text=True, timeout=120)
    assert child.returncode == 9, child.stderr
    rng_child = np.random.default_rng(99)
    for call in range(1, 5):
        keys = list(range(10_000 + 200 * call, 10_200 + 200 * call))
        model.update(zip(keys, rng_child.integers(0, 2**64, 200, dtype=np.uint64).tolist()))
    with fpstore.open(path, readonly=True) as r:
        assert {"meta/merging", "meta/merging.small"} <= set(leftovers(r))
    with fpstore.open(path, merges="manual") as s:
        assert not leftovers(s) and len(s) == len(model)
        queries = np.array(list(model.values())[::7], dtype=np.uint64) ^ np.uint64(8)
        assert answers(s, queries) == brute(model, queries, 3) and s.verify() == []
        s.merge_runs()
        assert full_tier(s) == [] and not leftovers(s)
        assert answers(s, queries) == brute(model, queries, 3) and s.verify() == []


@pytest.mark.parametrize("marker", merging.MERGING_KEYS)
def test_what_a_dead_merge_reserved_is_cleared_at_the_writers_open(tmp_path, marker):
    """A merging marker naming a run no state holds (the process died before the switch), with
    blobs under it: the writer's open deletes them; a marker naming a live run deletes nothing."""
    from fpstore.index import tiers

    path = tmp_path / "s"
    rng = np.random.default_rng(17)
    with fpstore.open(path, k=3, flush_entries=200, merges="manual") as s:
        model = grow(s, rng, 10)
        live = s.counts()["runs"]
        with s._storage.read() as txn:
            next_run = s._cat.state(txn).next_run

        def died(txn):
            txn.put(marker, next_run.to_bytes(8, "big"), db=s._cat.meta)
            txn.put(tiers.run_prefix(next_run, 0) + b"X\x00\x00\x00\x00", b"half a run", db=s._cat.blobs)

        s._storage.write(died)
        assert leftovers(s)
    with fpstore.open(path, merges="manual") as s:
        assert not leftovers(s) and s.counts()["runs"] == live
        queries = np.array(list(model.values())[::3], dtype=np.uint64)
        assert answers(s, queries) == brute(model, queries, 3)


@pytest.mark.parametrize(
    "listed",
    [
        [b"s\x00\x00\x00\x01f"],  # a key segment's blobs: never garbage
        [b"r"],  # every run's blobs
        [b"r\x00\x00\x00\x01"],  # the live bulk-loaded run's
        [b"\x00"],
        "not a list",
        [1, 2],
    ],
)
def test_a_damaged_garbage_list_is_refused_before_anything_is_deleted(tmp_path, listed):
    path = tmp_path / "s"
    with fpstore.open(path, k=3, merges="manual") as s:
        pid = s.pipeline.id
        s.bulk_load(np.arange(500), np.arange(500, dtype=np.uint64) * np.uint64(2**50), pipeline_id=pid)
        s._storage.write(lambda txn: txn.put(merging.GARBAGE_KEY, msgpack.packb(listed), db=s._cat.meta))
    with pytest.raises(CorruptionError, match="garbage list"):
        fpstore.open(path)
    with fpstore.open(path, readonly=True) as r:
        assert len(r) == 500 and r.verify() == []


@pytest.mark.slow
def test_a_child_forked_during_background_merges_does_not_hang(tmp_path):
    """A fork while the merge thread is inside LMDB gave the child locks no thread of it would
    release: closing the inherited environment hung (1 child in 150 here). Forks wait for the
    merge in progress to give up."""
    import os
    import signal

    rng = np.random.default_rng(21)
    hung = 0
    with fpstore.open(tmp_path / "s", k=3, flush_entries=100) as s:
        for i in range(150):
            s.add_many(
                list(range(i * 100, (i + 1) * 100)), fingerprints=rng.integers(0, 2**64, 100, dtype=np.uint64), pipeline_id=s.pipeline.id
            )
            child = os.fork()
            if child == 0:  # the child's store raises ClosedError; it only has to get out
                os._exit(0)
            deadline = time.monotonic() + 10
            while os.waitpid(child, os.WNOHANG) == (0, 0):
                if time.monotonic() > deadline:
                    os.kill(child, signal.SIGKILL)
                    os.waitpid(child, 0)
                    hung += 1
                    break
                time.sleep(0.005)
        assert s.info()["merges"]["done"] > 0, "no merge ran: the test did not test forks during merges"
    assert hung == 0, f"{hung} forked children hung"


def test_a_write_step_holds_at_most_the_step_bytes_when_a_table_comes_at_once(tmp_path, monkeypatch):
    """A merge's blobs come a table at a time; a step took whole tables, so a step of a large merge
    committed megabytes (30-90 ms on a slow disk, which every add waited for). Each step now holds
    at most the pace's bytes, or a single blob larger than that."""
    limit = 64 << 10
    monkeypatch.setattr(merging, "MERGE_STEP_BYTES", limit)
    monkeypatch.setattr(merging, "MERGE_STEP_MIN_BYTES", limit)
    steps: list[list[int]] = []
    put = merging._put_blobs

    def recording(db, blobs, began, txn):
        steps.append([len(value) for _, value in blobs])
        return put(db, blobs, began, txn)

    monkeypatch.setattr(merging, "_put_blobs", recording)
    rng = np.random.default_rng(5)
    n = 60_000
    fps = rng.integers(0, 2**64, n, dtype=np.uint64)
    with fpstore.open(tmp_path / "s", k=3, merges="manual") as s:
        for part in range(2):
            half = slice(part * n // 2, (part + 1) * n // 2)
            s.bulk_load(np.arange(n)[half], fpstore.Fingerprints(fps[half], s.pipeline.id))
        s.compact()
        assert len(steps) > 4
        assert all(sum(sizes) <= limit or len(sizes) == 1 for sizes in steps), [sum(x) for x in steps if sum(x) > limit]
        queries = fps[:300] ^ np.uint64(0b101)
        model = dict(zip(range(n), fps.tolist()))
        assert answers(s, queries) == brute(model, queries, 3)


def test_the_step_pace_shrinks_on_a_slow_commit_and_ignores_a_merges_last_small_step():
    pace = merging._Pace()
    assert pace.step_bytes() == merging.MERGE_STEP_BYTES
    pace.observe(merging.MERGE_STEP_BYTES, 4 * merging.MERGE_STEP_COMMIT_SECONDS)  # four times the target
    assert pace.step_bytes() == merging.MERGE_STEP_BYTES // 2  # the geometric mean of 1 and 1/4
    slower = pace.step_bytes()
    pace.observe(1000, 10.0)  # a small last step, however slow: not a measure of the disk
    assert pace.step_bytes() == slower
    for _ in range(20):  # a disk so slow that even the smallest step takes ten times the target
        pace.observe(pace.step_bytes(), 10 * merging.MERGE_STEP_COMMIT_SECONDS)
    assert pace.step_bytes() == merging.MERGE_STEP_MIN_BYTES
    for _ in range(20):  # fast again: back to the largest step, never above it
        pace.observe(pace.step_bytes(), merging.MERGE_STEP_COMMIT_SECONDS / 100)
    assert pace.step_bytes() == merging.MERGE_STEP_BYTES

"""Crash tests: a writer SIGKILLed at random points, and a reader SIGKILLed inside a transaction.

The oracle (tests/support/oracle.py): batch i is a pure function of i, committed with checkpoint
("feed", i), so after any kill the store must hold exactly batches 0..checkpoint. Writers are forked
from a server that has imported fpstore (a cycle costs a fork, not an interpreter start). The long
version is ``python tools/torture.py kill --cycles 2000``; kills at named points, power loss and
full disks are in tests/test_reliability.py.
"""

from __future__ import annotations

import os
import random
import signal
import time

import numpy as np

import pytest

import fpstore
from tests.support.oracle import FEED, CheckFailed, batch, batch_size, check_keys, check_snapshot, snapshot, total
from tests.support.processes import Child, ForkServer

#: Minutes of kills, crash points and damaged files: the slow tier (docs/development.md).
pytestmark = pytest.mark.slow

KILL_CYCLES = int(os.environ.get("FPSTORE_KILL_CYCLES", "240"))
VERIFY_EVERY = 60  # cycles between runs of LMDB's structural verifier (0.1 to 1 s each)
KILL_SEED = int(os.environ.get("FPSTORE_KILL_SEED", "1"))
#: Kill delays, counted from the worker's "ready" line (store open, checkpoint read): a commit of
#: 200..1000 fingerprints takes ~5 to ~30 ms here, so these land before, inside and between commits.
MIN_DELAY, MAX_DELAY = 0.002, 0.080


def verify_oracle(path: str, rng: random.Random, sample: int = 48) -> int | None:
    """Open ``path`` read-only and check it holds exactly batches 0..checkpoint; return the checkpoint."""
    store = fpstore.open(path, readonly=True)
    try:
        snap = snapshot(store)
        check_snapshot(snap)  # count == batches 0..ckpt, and every table/docs/keys agrees with it
        ckpt = snap["ckpt"]
        if len(store) != snap["count"] or store.checkpoint(FEED) != ckpt:
            raise CheckFailed("the public API disagrees with the snapshot read just before")
        if ckpt is not None:
            picks = [(ckpt, j) for j in rng.sample(range(batch_size(ckpt)), min(sample, batch_size(ckpt)))]
            picks += [(i, rng.randrange(batch_size(i))) for i in (rng.randint(0, ckpt) for _ in range(sample // 2))]
            check_keys(store, store.pipeline.id, picks)
        nxt = 0 if ckpt is None else ckpt + 1
        keys = batch(nxt)[0]
        for j in rng.sample(range(len(keys)), sample):
            if keys[j] in store or store.get(keys[j]) is not None:
                raise CheckFailed(f"key {keys[j]} of uncommitted batch {nxt} is stored (checkpoint {ckpt})")
        return ckpt
    finally:
        store.close()


def verify_exact(path: str, last: int) -> None:
    """The store holds exactly batches 0..last: every key with its fingerprint, table 0 the same fingerprints."""
    store = fpstore.open(path, readonly=True)
    try:
        snap = snapshot(store)
        check_snapshot(snap)
        assert snap["ckpt"] == last
        want_keys = [k for i in range(last + 1) for k in batch(i)[0]]
        want_fps = np.concatenate([batch(i)[1] for i in range(last + 1)])
        stored = {doc.key: doc.fingerprint for doc in store.documents()}
        # Table 0: the incremental entries and the runs they were flushed into.
        table0, _ids = store.fingerprints()
        assert stored == dict(zip(want_keys, want_fps.tolist())), "documents differ from batches 0..last"
        assert np.array_equal(np.sort(table0), np.sort(want_fps)), "table t00 differs from the stored fingerprints"
        assert sorted(store) == sorted(want_keys)
    finally:
        store.close()


def lmdb_verify(path: str) -> list[str]:
    """LMDB's own offline structural verifier (``python -m lmdb verify``) on a closed store's file."""
    from lmdb import verify as lmdb_verify_mod

    return lmdb_verify_mod.verify(path, subdir=True)


def run_kill_cycles(
    path: str,
    cycles: int,
    seed: int,
    log=print,
    min_delay: float = MIN_DELAY,
    max_delay: float = MAX_DELAY,
    verify_every: int = VERIFY_EVERY,
    durability: str = "full",
) -> dict:
    """``cycles`` times: fork a feed writer (opening the store with ``durability``), SIGKILL it
    after a random delay, check the oracle.

    Writers are forked from one long-lived server process (tests/support/processes.py ``ForkServer``), so a
    cycle costs a fork, not an interpreter start; every writer still opens the store from scratch.
    LMDB's structural verifier runs every ``verify_every`` cycles.
    """
    rng = random.Random(seed)
    ckpt: int | None = None
    stats = {"cycles": 0, "kills": 0, "acked": 0, "lmdb_verified": 0, "spawn_to_ready": 0.0, "verify": 0.0, "recovery_max_ms": 0.0}
    stats.update(dict.fromkeys(["before_first_batch", "inside_add_many", "after_commit_before_ack", "between_batches"], 0))
    started = time.perf_counter()
    server = ForkServer(path)
    try:
        for cycle in range(cycles):
            t0 = time.perf_counter()
            pid, resumed = server.start_feed(timeout=120, durability=durability)
            ready_s = time.perf_counter() - t0
            stats["spawn_to_ready"] += ready_s
            # Time from fork to "ready" is the recovery time: open after a kill, read the checkpoint.
            stats["recovery_max_ms"] = max(stats["recovery_max_ms"], round(1000 * ready_s, 1))
            # The writer resumes from the stored checkpoint, which is the one this parent verified.
            assert resumed == ckpt, f"cycle {cycle}: worker resumes from {resumed}, store checkpoint is {ckpt}"
            time.sleep(rng.uniform(min_delay, max_delay))
            os.kill(pid, signal.SIGKILL)
            rc, lines = server.reap()
            if rc != -9:
                raise CheckFailed(f"cycle {cycle}: writer exited with {rc} before the kill: {lines[-3:]}")
            stats["kills"] += 1
            acks = [int(line.split()[1]) for line in lines if line.startswith("ack ")]
            start = 0 if ckpt is None else ckpt + 1
            assert acks == list(range(start, start + len(acks))), f"cycle {cycle}: acks out of order {acks}"
            acked = acks[-1] if acks else ckpt
            t1 = time.perf_counter()
            new = verify_oracle(path, rng)
            if verify_every and (cycle + 1) % verify_every == 0:
                problems = lmdb_verify(path)
                assert not problems, f"cycle {cycle}: LMDB verifier: {problems[:5]}"
                stats["lmdb_verified"] += 1
            stats["verify"] += time.perf_counter() - t1
            # No acknowledged batch lost; at most the one batch in flight committed without its ack.
            assert (new if new is not None else -1) >= (acked if acked is not None else -1), (
                f"cycle {cycle}: batch {acked} was acknowledged but the checkpoint is {new}"
            )
            assert (new if new is not None else -1) <= (acked if acked is not None else -1) + 1, (
                f"cycle {cycle}: checkpoint {new} is beyond the batch in flight after ack {acked}"
            )
            stats["acked"] += len(acks)
            begun = [int(line.split()[1]) for line in lines if line.startswith("begin ")]
            if new != acked:
                where = "after_commit_before_ack"  # the batch in flight committed; its ack never came
            elif begun and begun[-1] != acked:
                where = "inside_add_many"  # killed while preparing or writing a batch: it is absent
            elif not begun:
                where = "before_first_batch"
            else:
                where = "between_batches"
            stats[where] += 1
            ckpt = new
            stats["cycles"] += 1
    finally:
        server.close()
    problems = lmdb_verify(path)
    assert not problems, f"LMDB verifier after {cycles} kills: {problems[:5]}"
    stats["lmdb_verified"] += 1
    elapsed = time.perf_counter() - started
    stats["checkpoint"] = ckpt
    stats["seconds"] = round(elapsed, 2)
    stats["per_cycle_ms"] = round(1000 * elapsed / max(cycles, 1), 1)
    stats["spawn_to_ready_ms"] = round(1000 * stats.pop("spawn_to_ready") / max(cycles, 1), 1)
    stats["verify_ms"] = round(1000 * stats.pop("verify") / max(cycles, 1), 1)
    log(f"kill cycles: {stats}")
    return stats


def finish_feed(path: str, ckpt: int | None, extra: int) -> int:
    """Resume once, without a kill, to ``extra`` batches past ``ckpt``; return the last batch."""
    stop = (0 if ckpt is None else ckpt + 1) + extra
    child = Child("feed-writer", path, "--stop", str(stop))
    try:
        rc = child.finish(timeout=120)
        assert rc == 0, f"resume failed ({rc}): {child.stderr()}"
    finally:
        child.close()
    start = 0 if ckpt is None else ckpt + 1
    assert child.lines[0] == f"ready {ckpt}"
    assert [int(x.split()[1]) for x in child.lines if x.startswith("ack ")] == list(range(start, stop))
    assert child.lines[-1] == "done"
    return stop - 1


@pytest.mark.parametrize("durability", ["full", "process", "interval"])
def test_writer_kill9_loses_no_acknowledged_batch(tmp_path, durability):
    """A writer SIGKILLed at random points never loses an acknowledged batch and leaves exactly
    batches 0..checkpoint, in every durability mode (a process crash leaves the system's page
    cache, which holds every commit, synced or not; with "interval", add_many commits what is
    staged and then itself, durably)."""
    path = str(tmp_path / "store")
    fpstore.open(path, k=3).close()
    stats = run_kill_cycles(path, KILL_CYCLES, KILL_SEED, durability=durability)
    assert stats["kills"] == KILL_CYCLES
    # The kills must have interrupted a feed that was making progress, or the test proved nothing
    # (lenient: on a loaded machine commits slow down and more kills land before the first one).
    assert stats["checkpoint"] is not None and stats["checkpoint"] >= min(10, KILL_CYCLES // 4), stats
    assert stats["inside_add_many"] >= min(10, KILL_CYCLES // 4), stats
    last = finish_feed(path, stats["checkpoint"], extra=5)
    verify_exact(path, last)
    assert total(last) == sum(batch_size(i) for i in range(last + 1))


def test_writer_kill9_keeps_every_acknowledged_sketch(tmp_path):
    """The same kills on a store that keeps a verification sketch per document: every checked key
    of an acknowledged batch is found by its own fingerprint and sketch at similarity 1 (the
    sketch column commits with its documents), and the store ends exactly as fed."""
    path = str(tmp_path / "store")
    fpstore.open(path, k=3, pipeline=fpstore.Pipeline(sketch_bits=128)).close()
    cycles = max(8, KILL_CYCLES // 4)
    stats = run_kill_cycles(path, cycles, KILL_SEED + 1)
    assert stats["kills"] == cycles
    assert stats["checkpoint"] is not None and stats["inside_add_many"] >= min(5, cycles // 4), stats
    verify_exact(path, finish_feed(path, stats["checkpoint"], extra=3))


def _rewrite_round(store, keys: list[str], round_no: int) -> tuple[int, int]:
    """Rewrite the same keys (replace all, delete a few, add them back); return (file bytes, last page)."""
    rng = np.random.default_rng([7, round_no])
    fps = rng.integers(0, np.iinfo(np.uint64).max, size=len(keys), dtype=np.uint64, endpoint=True)
    store.add_many(keys, fingerprints=fps, pipeline_id=store.pipeline.id)
    for key in keys[:3]:
        assert store.delete(key)
    store.add_many(keys[:3], fingerprints=fps[:3], pipeline_id=store.pipeline.id)
    info = store.info()
    return info["file_size"], info["lmdb"]["pages_used"] - 1


def test_stale_reader_slot_is_cleared_and_file_growth_stops(tmp_path):
    """A reader killed inside a transaction pins the file's growth until the writer's reader_check() clears its slot."""
    path = str(tmp_path / "store")
    store = fpstore.open(path, k=3)
    try:
        for i in range(3):
            keys, fps = batch(i)
            store.add_many(keys, fingerprints=fps, pipeline_id=store.pipeline.id, checkpoint=(FEED, i))
        child = Child("hold-reader", path)
        try:
            assert child.line(timeout=60) == f"holding {total(2)}"
            dead = child.pid
            assert str(dead) in store._storage.env.readers().split()  # its slot is in the lock table
            assert child.kill() == -9
        finally:
            child.close()
        keys = [f"r-{j}" for j in range(600)]
        # Control: while the dead reader's slot pins its snapshot, every rewrite grows the file.
        pinned = [_rewrite_round(store, keys, r) for r in range(4)]
        assert all(b[1] > a[1] for a, b in zip(pinned, pinned[1:])), f"no growth under a stale reader: {pinned}"
        cleared = store._storage.reader_check()
        assert cleared >= 1
        assert str(dead) not in store._storage.env.readers().split()
        after = [_rewrite_round(store, keys, 10 + r) for r in range(6)]
        # Once cleared, freed pages are reused: after the first round the file and page count stay flat.
        print(f"stale reader: (file bytes, last page) per rewrite round, pinned {pinned}, after reader_check {after}")
        assert after[-1][0] <= after[1][0] and after[-1][1] <= after[1][1], f"still growing: {pinned} then {after}"
        snap = snapshot(store)
        assert snap["count"] == total(2) + len(keys) and snap["ckpt"] == 2
        assert set(snap["entries"][f"t{t:02d}"] for t in range(len(store.design.tables))) == {snap["count"]}
    finally:
        store.close()

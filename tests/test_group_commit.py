"""Group commit: concurrent add() calls share transactions, yet every caller gets exactly the
verdict a serial run in commit order gives; a failed group falls back to one add at a time; a
kill during group commits loses no acknowledged add. Also add_each, a batch with verdicts."""

from __future__ import annotations

import contextlib
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fpstore
from fpstore.errors import InputError, StorageError
from fpstore.store import faults
from tests.support.processes import Child

K = 3


def _verdict(res: fpstore.AddResult) -> tuple:
    return (res.id, res.key, res.fingerprint, res.short, res.exact_duplicate_of,
            [(m.key, m.distance, m.fingerprint, m.id) for m in res.near_duplicates], res.canonical)


def _threaded_adds(store, per_thread: list[list[tuple[str, int]]]) -> list[tuple[tuple[str, int], fpstore.AddResult]]:
    pid = store.pipeline.id
    out: list = []
    lock = threading.Lock()
    errors: list = []

    def run(docs):
        try:
            for key, fp in docs:
                res = store.add(key, fingerprint=fp, pipeline_id=pid)
                with lock:
                    out.append(((key, fp), res))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(docs,)) for docs in per_thread]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return out


class _SlowCommits(faults.Faults):
    """Commits that take a few milliseconds, as a disk's fsync does: adds pile up into groups."""

    def before_commit(self) -> None:
        time.sleep(0.003)


@contextlib.contextmanager
def _installed(fault: faults.Faults):
    previous = faults.install(fault)
    try:
        yield fault
    finally:
        faults.install(previous)


@pytest.fixture
def slow_commits():
    with _installed(_SlowCommits()):
        yield


@st.composite
def _workload(draw):
    bases = draw(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=4))
    n = draw(st.integers(1, 40))
    docs, seen = [], set()
    for j in range(n):
        fp = bases[draw(st.integers(0, len(bases) - 1))]
        for _ in range(draw(st.integers(0, 4))):
            fp ^= 1 << draw(st.integers(0, 63))
        if fp in seen:  # distinct fingerprints: every add inserts, so ids give the commit order
            continue
        seen.add(fp)
        key = f"k{draw(st.integers(0, 12))}"  # repeated keys: replacements across threads
        docs.append((key, fp))
    threads = draw(st.integers(2, 6))
    return [docs[t::threads] for t in range(threads)]


@settings(max_examples=25, deadline=None)
@given(work=_workload())
def test_concurrent_adds_equal_serial_adds_in_commit_order(tmp_path_factory, work):
    """Threads add documents at once; replaying the same adds one by one on a fresh store, in the
    order of the ids they got (the commit order), gives every caller's verdict exactly."""
    root = tmp_path_factory.mktemp("gc")
    with _installed(_SlowCommits()), fpstore.open(root / "a", k=K) as store:
        got = _threaded_adds(store, work)
        final = sorted((d.key, d.fingerprint) for d in store.documents())
    got.sort(key=lambda item: item[1].id)
    with fpstore.open(root / "b", k=K) as serial:
        pid = serial.pipeline.id
        for (key, fp), res in got:
            assert _verdict(serial.add(key, fingerprint=fp, pipeline_id=pid)) == _verdict(res)
        assert sorted((d.key, d.fingerprint) for d in serial.documents()) == final


def test_adds_are_grouped_and_every_caller_gets_its_own_verdict(tmp_path, slow_commits):
    """16 threads of 30 adds: fewer transactions than adds, and each result is the caller's own."""
    rng = np.random.default_rng(3)
    work = [[(f"t{t}-{j}", int(rng.integers(0, 2**64, dtype=np.uint64))) for j in range(30)] for t in range(16)]
    with fpstore.open(tmp_path / "s", k=K) as store:
        before = (store._adds.groups, store._adds.requests)
        got = _threaded_adds(store, work)
        groups, requests = store._adds.groups - before[0], store._adds.requests - before[1]
        assert requests == 16 * 30 and groups < requests / 2, (groups, requests)
        assert all(res.key == key and res.fingerprint == fp for (key, fp), res in got)
        assert len({res.id for _, res in got}) == len(got) == len(store)


class _FailSecondCommit(faults.Faults):
    def __init__(self) -> None:
        self.commits = 0

    def before_commit(self) -> None:
        self.commits += 1
        if self.commits == 2:
            raise StorageError("injected: the disk refused this commit")


def test_a_failed_group_is_retried_one_add_at_a_time(tmp_path):
    """The first add holds the writer; seven more queue into one group, whose commit fails once:
    each of the seven is then committed alone, and every caller gets its result."""
    fault = _FailSecondCommit()
    with fpstore.open(tmp_path / "s", k=K) as store:
        pid = store.pipeline.id
        store._storage._write_lock.acquire()
        previous = faults.install(fault)
        results: dict[str, object] = {}


        def add(key: str, fp: int) -> None:
            try:
                results[key] = store.add(key, fingerprint=fp, pipeline_id=pid)
            except Exception as exc:  # noqa: BLE001 - recorded for the assertion
                results[key] = exc

        try:
            first = threading.Thread(target=add, args=("first", 1))
            first.start()
            while not store._adds._queue:
                time.sleep(0.001)
            rest = [threading.Thread(target=add, args=(f"k{i}", 1 << (i + 8))) for i in range(7)]
            for t in rest:
                t.start()
            while len(store._adds._queue) < 8:
                time.sleep(0.001)
            store._storage._write_lock.release()
            for t in [first, *rest]:
                t.join(30)
        finally:
            faults.install(previous)
        assert all(isinstance(r, fpstore.AddResult) for r in results.values()), results
        assert len(store) == 8
        assert fault.commits == 1 + 1 + 7  # the first alone, the failed group, then each alone


@pytest.mark.slow
def test_kill_during_group_commits_loses_no_acknowledged_add(tmp_path):
    """Eight threads adding through group commit are SIGKILLed at random moments; after each kill
    every add that returned (acknowledged) is stored with its fingerprint, and the store verifies."""
    path = str(tmp_path / "s")
    fpstore.open(path, k=K).close()
    rng = np.random.default_rng(11)
    acked: dict[str, int] = {}
    for cycle in range(6):
        child = Child("thread-adder", path, "--threads", "8")
        try:
            assert child.line(timeout=120) == "ready"
            time.sleep(float(rng.uniform(0.05, 0.6)))
            child.kill()
        finally:
            child.close()
        for line in child.lines:
            parts = line.split()
            if parts[:1] == ["ack"]:
                acked[parts[1] + f"@{cycle}"] = int(parts[2])
        with fpstore.open(path, readonly=True) as store:
            for name, fp in acked.items():
                key = name.rsplit("@", 1)[0]
                doc = store.get(key)
                # A later cycle may re-add the same key with another fingerprint (same thread
                # seed): the newest acknowledged fingerprint of the key must be there.
                newest = [f for n, f in acked.items() if n.rsplit("@", 1)[0] == key][-1]
                assert doc is not None and doc.fingerprint == newest, (key, doc, fp)
            assert store.verify() == []
    assert len(acked) > 50, "the workers acknowledged too little for the test to mean anything"


def test_add_each_equals_successive_adds(tmp_path):
    """add_each: the verdicts successive add() calls give, in one transaction with its checkpoint."""
    rng = np.random.default_rng(8)
    base = rng.integers(0, 2**64, size=60, dtype=np.uint64)
    base[1::2] = base[::2] ^ np.uint64(3)  # near-duplicates within the batch
    keys = [f"d{i % 45}" for i in range(60)]  # and repeated keys
    with fpstore.open(tmp_path / "a", k=K) as a, fpstore.open(tmp_path / "b", k=K) as b:
        pid = a.pipeline.id
        a.add_many(["old"], fingerprints=base[:1] ^ np.uint64(1), pipeline_id=pid)
        b.add_many(["old"], fingerprints=base[:1] ^ np.uint64(1), pipeline_id=pid)
        got = a.add_each(keys, fingerprints=base, pipeline_id=pid, checkpoint=("feed", 60))
        want = [b.add(key, fingerprint=int(fp), pipeline_id=pid) for key, fp in zip(keys, base)]
        assert [_verdict(r) for r in got] == [_verdict(r) for r in want]
        assert a.checkpoint("feed") == 60 and len(a) == len(b)
        with pytest.raises(InputError):
            a.add_each(["x", "y"], fingerprints=[5], pipeline_id=pid)  # one fingerprint for two keys


def test_add_each_of_an_empty_batch_still_records_its_checkpoint(tmp_path):
    """An empty batch moves the feed on like add_many's: the checkpoint is recorded."""
    with fpstore.open(tmp_path / "s", k=K) as store:
        pid = store.pipeline.id
        assert store.add_each([], fingerprints=[], pipeline_id=pid, checkpoint=("feed", 7)) == []
        assert store.checkpoint("feed") == 7
        store.add_many([], fingerprints=[], pipeline_id=pid, checkpoint=("feed", 8))
        assert store.checkpoint("feed") == 8


def test_callers_that_come_back_together_are_committed_together(monkeypatch):
    """Four threads add in a loop through commits of 5 ms. Once a group is done its callers come
    back at once; the first of them must not lead a group of its own and leave the other three to
    the next commit (groups of 1 and 3 in turn, half the throughput): the leader waits a bounded
    while for as many callers as its last group held."""
    from fpstore.store import group

    monkeypatch.setattr(group, "GATHER_FRACTION", 100.0)  # generous bounds: scheduling never decides
    monkeypatch.setattr(group, "GATHER_MAX_S", 0.5)
    sizes: list[int] = []

    def commit(requests):
        time.sleep(0.005)
        sizes.append(len(requests))
        return list(requests)

    gc = group.GroupCommit(commit)
    start = threading.Barrier(4)

    def caller(t: int) -> None:
        start.wait()
        for j in range(12):
            assert gc.submit((t, j)) == (t, j)

    threads = [threading.Thread(target=caller, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert sum(sizes) == 48
    steady = sizes[2:-2]  # the first groups form as the threads start, the last as they stop
    assert steady and sum(size == 4 for size in steady) >= 0.8 * len(steady), sizes

"""``durability="interval"``: adds answered once staged, committed within an interval.

Verdicts equal those of durable adds in the same order; a staged add is invisible to reads until
it commits (at the interval, on ``sync()``, before a durable write, on close, at exit); one add's
failure is its own; a full map mid-interval loses nothing; a commit that fails is said to every
later caller; a kill -9 leaves exactly the adds up to some point at or after the last ``sync()``.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fpstore
import fpstore.aio
from fpstore.errors import ClosedError, InputError, StorageError
from fpstore.store import faults
from tests.support.oracle import check_interval_adds, interval_fp
from tests.support.processes import ROOT, Child
from tests.support.threads import run_threads

K = 3


def _verdict(res: fpstore.AddResult) -> tuple:
    return (res.id, res.key, res.fingerprint, res.short, res.exact_duplicate_of,
            [(m.key, m.distance, m.fingerprint, m.id) for m in res.near_duplicates], res.canonical)


@contextlib.contextmanager
def _installed(fault: faults.Faults):
    previous = faults.install(fault)
    try:
        yield fault
    finally:
        faults.install(previous)


def _stored(path) -> dict[str, int]:
    with fpstore.open(path, readonly=True) as store:
        return {d.key: d.fingerprint for d in store.documents()}


@st.composite
def _adds(draw):
    """Adds of texts and fingerprints: near and exact duplicates, replaced keys, skips, checkpoints."""
    bases = draw(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=3))
    out = []
    for i in range(draw(st.integers(1, 60))):
        key = f"k{draw(st.integers(0, 15))}"
        skip = draw(st.booleans()) and draw(st.booleans())
        if draw(st.integers(0, 4)) == 0:
            words = " ".join(f"w{draw(st.integers(0, 6))}" for _ in range(12))
            out.append((key, {"text": words}, skip, i))
        else:
            fp = bases[draw(st.integers(0, len(bases) - 1))] ^ (1 << draw(st.integers(0, 63))) * draw(st.integers(0, 1))
            out.append((key, {"fingerprint": fp}, skip, i))
    return out


@settings(max_examples=20, deadline=None)
@given(adds=_adds(), interval=st.sampled_from([0.0005, 0.05, 30.0]))
def test_verdicts_and_store_equal_durable_adds(tmp_path_factory, adds, interval):
    """The same adds one by one, with durability "full" and "interval": the same verdict for
    each, and the same documents and checkpoint once the interval store is closed. Flushes into
    runs every 8 documents, so that staged writes probe runs made earlier in the same transaction."""
    root = tmp_path_factory.mktemp("iv")
    results = {}
    for mode in ("full", "interval"):
        options = {"commit_interval": interval} if mode == "interval" else {}
        with fpstore.open(root / mode, k=K, durability=mode, flush_entries=8, merges="manual", **options) as store:
            pid = store.pipeline.id
            got = []
            for key, content, skip, i in adds:
                extra = {"pipeline_id": pid} if "fingerprint" in content else {}
                res = store.add(key, **content, **extra, on_duplicate="skip" if skip else "insert", checkpoint=("c", i))
                got.append(_verdict(res))
            results[mode] = got
    assert results["interval"] == results["full"]
    assert _stored(root / "interval") == _stored(root / "full")
    with fpstore.open(root / "interval", readonly=True) as store:
        assert store.checkpoint("c") == len(adds) - 1
        assert store.verify() == []


def test_a_staged_add_is_read_once_committed(tmp_path):
    """With a long interval an add is staged, not committed: reads of another opener and of the
    store itself do not see it, its verdict is given at once, and ``sync()`` commits it."""
    path = tmp_path / "s"
    with fpstore.open(path, k=K, durability="interval", commit_interval=30) as store:
        pid = store.pipeline.id
        store.add("a", fingerprint=0b1111, pipeline_id=pid)
        res = store.add("b", fingerprint=0b0111, pipeline_id=pid)
        assert [m.key for m in res.near_duplicates] == ["a"]  # sees the staged add
        assert len(store) == 0 and store.get("a") is None
        out = subprocess.run(
            [sys.executable, "-c", f"import fpstore; s = fpstore.open({str(path)!r}, readonly=True); print(len(s))"],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )
        assert out.stdout.split() == ["0"], out
        store.sync()
        assert len(store) == 2
        assert store.get("a").fingerprint == 0b1111


def test_staged_adds_kept_for_their_commit_are_not_tracked_by_the_cycle_collector(tmp_path):
    """Until its commit the stager keeps each staged add (to stage it again should the map grow).
    Kept as AddResults, lists and closures, thousands of container objects an interval reached
    the collector's oldest generation and set off its full passes (10-18 ms, every thread of the
    process stopped: an event loop beside a writer thread stalled for as long); kept as plain
    tuples they leave it once the youngest generation is collected. Counted: the objects the
    collector tracks, after a collection, per add staged and not yet committed."""
    import gc

    n = 400
    with fpstore.open(tmp_path / "s", k=K, durability="interval", commit_interval=60) as store:
        pid = store.pipeline.id
        for i in range(50):  # caches, the stager's thread and the incremental copy, made first
            store.add(f"warm-{i}", fingerprint=interval_fp(i), pipeline_id=pid)
        store.sync()
        gc.collect()
        before = len(gc.get_objects())
        for i in range(n):
            res = store.add(f"key-{i}", fingerprint=interval_fp(10_000 + i) ^ (i % 7), pipeline_id=pid)
        del res
        stager = store._storage.stager
        assert stager.commits == 1 and len(stager._pending) == n  # all staged, none committed
        gc.collect()
        kept = len(gc.get_objects()) - before
        assert kept <= 1.5 * n, f"{kept} objects tracked for {n} staged adds"
        store.sync()


def test_adds_staged_by_the_asyncio_writer_are_not_tracked_by_the_cycle_collector(tmp_path):
    """The same for the groups fpstore.aio's writer thread stages (Store._commit_adds)."""
    import asyncio
    import gc

    n = 400

    async def main() -> int:
        async with fpstore.aio.open(tmp_path / "s", k=K, durability="interval", commit_interval=60) as store:
            pid = store.store.pipeline.id
            for i in range(50):
                await store.add(f"warm-{i}", fingerprint=interval_fp(i), pipeline_id=pid)
            await store.sync()
            gc.collect()
            before = len(gc.get_objects())
            for i in range(n):  # one at a time: a group, and a kept write, each
                await store.add(f"key-{i}", fingerprint=interval_fp(10_000 + i) ^ (i % 7), pipeline_id=pid)
            stager = store.store._storage.stager
            assert stager.commits == 1 and len(stager._pending) == n
            gc.collect()
            kept = len(gc.get_objects()) - before
            await store.sync()
            return kept

    kept = asyncio.run(main())
    assert kept <= 1.5 * n, f"{kept} objects tracked for {n} staged adds"


def test_kept_adds_and_results_come_back_equal():
    """What the stager keeps of a staged group (pack_adds, plain_results) makes the same adds
    again, checkpoints and sketches included, and tells results apart exactly when they differ."""
    from fpstore.store.inputs import OneAdd, pack_adds, unpack_adds
    from fpstore.store.results import AddResult, Match, plain_results

    sketch = np.arange(4, dtype=np.uint64)
    adds = [
        OneAdd("a", b"sa", 5, None, False, 0, "insert", None, None),
        OneAdd(7, b"i" + (7).to_bytes(8, "big"), 2**64 - 1, b"h" * 16, True, 3, "skip", (b"ck", b"pos"), sketch),
    ]
    again = unpack_adds(pack_adds(adds))
    assert [a[:8] for a in again] == [a[:8] for a in adds] and again[1].sketch is sketch and again[0].sketch is None

    base = AddResult(9, "a", 5, False, None, [Match("b", 1, 4, 2), Match("c", 2, 7, 3, 0.8)], "b")
    same = AddResult(9, "a", 5, False, None, [Match("b", 1, 4, 2), Match("c", 2, 7, 3, 0.8)], "b")
    assert plain_results([base, same]) == plain_results([same, base])
    others = [
        AddResult(10, "a", 5, False, None, base.near_duplicates, "b"),
        AddResult(9, "a", 5, False, "b", base.near_duplicates, "b"),
        AddResult(9, "a", 5, False, None, base.near_duplicates[:1], "b"),
        AddResult(9, "a", 5, False, None, [Match("b", 1, 4, 2), Match("c", 2, 7, 3, 0.7)], "b"),
        AddResult(9, "a", 5, False, None, base.near_duplicates, None),
    ]
    assert all(plain_results([base]) != plain_results([other]) for other in others)
    # Two results whose matches split differently between them are told apart too.
    one, two = Match("b", 1, 4, 2), Match("c", 2, 7, 3)
    assert plain_results([AddResult(1, "x", 0, False, None, [one, two], None), AddResult(2, "y", 0, False, None, [], None)]) != plain_results(
        [AddResult(1, "x", 0, False, None, [one], None), AddResult(2, "y", 0, False, None, [two], None)]
    )


def test_the_interval_commits_without_sync(tmp_path):
    """A staged add commits by itself once the interval has passed."""
    with fpstore.open(tmp_path / "s", k=K, durability="interval", commit_interval=0.02) as store:
        store.add("a", fingerprint=5, pipeline_id=store.pipeline.id)
        deadline = time.monotonic() + 30
        # The stager counts a commit once it is done, after readers can see it: wait for both.
        while len(store) == 0 or store._storage.stager.commits == 0:
            assert time.monotonic() < deadline, "the staged add never committed"
            time.sleep(0.01)


def test_a_durable_write_commits_the_staged_adds_before_it(tmp_path):
    """add() (staged), then add_many() replacing the same key, from one thread: the batch is
    durable when it returns, the staged add committed before it, and the batch's document wins."""
    path = tmp_path / "s"
    with fpstore.open(path, k=K, durability="interval", commit_interval=30) as store:
        pid = store.pipeline.id
        store.add("a", fingerprint=1, pipeline_id=pid)
        store.add("b", fingerprint=2, pipeline_id=pid)
        store.add_many(["a"], fingerprints=[3], pipeline_id=pid)
        assert len(store) == 2  # committed without sync()
        store.set_checkpoint("c", 7)
        assert _stored_live(store) == {"a": 3, "b": 2}
        store.add("d", fingerprint=4, pipeline_id=pid)
    assert _stored(path) == {"a": 3, "b": 2, "d": 4}


def _stored_live(store) -> dict[str, int]:
    return {d.key: d.fingerprint for d in store.documents()}


def test_many_threads_of_adds_lose_nothing_and_the_index_stays_exact(tmp_path):
    """16 threads add through "interval" while queries run; after close every add is stored with
    its own id, and queries equal a brute-force scan of the stored fingerprints."""
    rng = np.random.default_rng(7)
    base = rng.integers(0, 2**64, size=200, dtype=np.uint64)
    work = [[(f"t{t}-{j}", int(base[(t * 40 + j) % 200] ^ np.uint64(1 << int(rng.integers(64))))) for j in range(40)] for t in range(16)]
    path = tmp_path / "s"
    results: list = []
    with fpstore.open(path, k=K, durability="interval", commit_interval=0.01, flush_entries=100) as store:
        pid = store.pipeline.id

        def run(docs):
            for key, fp in docs:
                res = store.add(key, fingerprint=fp, pipeline_id=pid)
                results.append((key, fp, res))
                store.query(fingerprint=fp, pipeline_id=pid)

        run_threads([lambda docs=docs: run(docs) for docs in work])
        assert store._adds.requests == 16 * 40 and store._adds.groups < store._adds.requests
    assert all(res.key == key and res.fingerprint == fp for key, fp, res in results)
    assert len({res.id for _, _, res in results}) == 16 * 40
    stored = _stored(path)
    assert len(stored) == 16 * 40
    keys, fps = list(stored), np.array(list(stored.values()), dtype=np.uint64)
    with fpstore.open(path, readonly=True) as store:
        pid = store.pipeline.id
        for q in rng.choice(fps, 50).tolist() + rng.integers(0, 2**64, size=10, dtype=np.uint64).tolist():
            d = np.bitwise_count(fps ^ np.uint64(q))
            want = sorted(keys[i] for i in np.flatnonzero(d <= K))
            assert sorted(m.key for m in store.query(fingerprint=q, pipeline_id=pid)) == want


class _FailOnePut(faults.Faults):
    """A write that puts the poisoned key's record fails (its document's record is refused)."""

    def __init__(self, poison: bytes) -> None:
        self.poison = poison

    def write_txn(self, txn):
        poison = self.poison

        class Txn:
            def __getattr__(self, name):
                return getattr(txn, name)

            def put(self, key, value, *a, **kw):
                if poison in bytes(value):
                    raise StorageError("injected: this document's record is refused")
                return txn.put(key, value, *a, **kw)

            def cursor(self, *a, **kw):
                cur = txn.cursor(*a, **kw)

                class Cur:
                    def __getattr__(self, name):
                        return getattr(cur, name)

                    def putmulti(self, items, *pa, **pkw):
                        items = list(items)
                        if any(poison in bytes(v) or poison in bytes(k) for k, v in items):
                            raise StorageError("injected: this document's record is refused")
                        return cur.putmulti(items, *pa, **pkw)

                return Cur()

        return Txn()


def test_one_failing_add_fails_alone_and_the_staged_adds_survive(tmp_path):
    """Adds staged earlier, then a group holding one add whose write fails: that caller gets the
    error, every other caller its result, and all but the failed add are stored after close."""
    path = tmp_path / "s"
    with fpstore.open(path, k=K, durability="interval", commit_interval=30) as store:
        pid = store.pipeline.id
        for i in range(5):
            store.add(f"early{i}", fingerprint=1000 + i, pipeline_id=pid)
        outcome: dict[str, object] = {}

        def add(key: str, fp: int) -> None:
            try:
                outcome[key] = store.add(key, fingerprint=fp, pipeline_id=pid)
            except Exception as exc:  # noqa: BLE001 - recorded for the assertion
                outcome[key] = exc

        with _installed(_FailOnePut(b"POISONED")):
            threads = [threading.Thread(target=add, args=(k, 1 << (i + 20))) for i, k in enumerate(["x1", "POISONED", "x2", "x3"])]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
        assert isinstance(outcome["POISONED"], StorageError), outcome
        assert all(isinstance(outcome[k], fpstore.AddResult) for k in ("x1", "x2", "x3")), outcome
    assert set(_stored(path)) == {f"early{i}" for i in range(5)} | {"x1", "x2", "x3"}


def test_a_full_map_mid_interval_loses_no_staged_add(tmp_path, monkeypatch):
    """From a 1 MiB map, staged adds fill it many times over within one interval: each time the
    staged transaction is aborted, the map grown and the staged adds run again, and every add is
    stored, with the verdict it was given."""
    import fpstore.store.staging as staging
    import fpstore.store.storage as storage

    monkeypatch.setattr(storage, "INITIAL_MAP_SIZE", 1 << 20)
    monkeypatch.setattr(staging, "STAGE_ROOM", 0)  # no room made up front: growth mid-interval
    path = tmp_path / "s"
    n = 3000
    with fpstore.open(path, k=K, durability="interval", commit_interval=60, map_size=1 << 20, flush_entries=0) as store:
        pid = store.pipeline.id
        sizes = {store.info()["map_size"]}
        given = [_verdict(store.add(f"key-{i:06d}-" + "x" * 200, fingerprint=interval_fp(i), pipeline_id=pid)) for i in range(n)]
        assert store._storage.stager.commits == 0 and store._storage.stager.rebuilds >= 2
        store.sync()
        sizes.add(store.info()["map_size"])
        assert len(sizes) > 1, "the map never grew: the test proves nothing"
    assert len(_stored(path)) == n
    with fpstore.open(tmp_path / "full", k=K) as serial:  # the verdicts durable adds give
        pid = serial.pipeline.id
        assert [_verdict(serial.add(f"key-{i:06d}-" + "x" * 200, fingerprint=interval_fp(i), pipeline_id=pid)) for i in range(n)] == given


class _CommitFails(faults.Faults):
    def __init__(self) -> None:
        self.armed = False

    def before_commit(self) -> None:
        if self.armed:
            self.armed = False
            raise StorageError("injected: the disk refused this commit")


def test_a_failed_growth_mid_group_answers_no_add_of_the_group_as_stored(tmp_path, monkeypatch):
    """A map growth that fails while a group of several adds is staged loses the adds staged
    since the last commit, and says so to every later caller. The group's adds, which the group
    commit then tried one at a time, were staged in a new transaction and answered as stored:
    newer adds kept while older acknowledged ones were lost (a crawler resuming from its
    checkpoint would skip the lost pages). None may be stored; each caller hears the failure."""
    import fpstore.store.staging as staging
    import fpstore.store.storage as storage

    monkeypatch.setattr(storage, "INITIAL_MAP_SIZE", 1 << 20)
    monkeypatch.setattr(staging, "STAGE_ROOM", 0)
    path = tmp_path / "s"
    store = fpstore.open(path, k=K, durability="interval", commit_interval=60, map_size=1 << 20, flush_entries=0)
    pid = store.pipeline.id
    real_grow, failed = store._storage.grow, []

    def grow() -> None:
        if not failed:
            failed.append(True)
            raise OSError("injected: the map could not grow")
        real_grow()

    monkeypatch.setattr(store._storage, "grow", grow)
    keys = iter(range(6000))
    lock = threading.Lock()
    answered: list[int] = []
    refused: list[str] = []

    def adds() -> None:
        while True:
            with lock:
                i = next(keys, None)
            if i is None:
                return
            try:
                store.add(f"key-{i:06d}-" + "x" * 200, fingerprint=interval_fp(i), pipeline_id=pid)
                answered.append(i)
            except StorageError as exc:
                refused.append(str(exc))

    run_threads([adds] * 8)
    assert failed and refused, "the growth never failed: the test proves nothing"
    assert store._storage.stager.commits == 0  # nothing committed before the failure
    with pytest.raises(StorageError):
        store.close()
    assert _stored(path) == {}, "adds answered after the failure were stored while older ones were lost"


def _after_readers_last_sync(stager, reader_name: str, nth: int, action) -> None:
    """Run ``action`` in another thread right after the ``nth`` sync of the thread named
    ``reader_name`` (a thread holding a read syncs the stager, then commits its write itself):
    places another thread's staged add in the window between that sync and the write lock."""
    real_sync, calls = stager.sync, []

    def sync(*args: object, **kwargs: object) -> bool:
        done = real_sync(*args, **kwargs)
        if threading.current_thread().name == reader_name:
            calls.append(1)
            if len(calls) == nth:
                other = threading.Thread(target=action)
                other.start()
                other.join()
        return done

    stager.sync = sync


@pytest.mark.parametrize("write", ["add", "set_checkpoint"])
def test_a_write_from_a_reading_thread_after_a_failed_commit_hears_the_failure(tmp_path, write):
    """A thread holding a read commits its write itself, once the stager has synced. An add
    staged by another thread in between, then lost by a failed commit, made no difference to it:
    it committed as soon as the stager let go of the write lock, a newer write (or checkpoint)
    kept where an older acknowledged add was lost. It now raises the failure."""
    path = tmp_path / "s"
    store = fpstore.open(path, k=K, durability="interval", commit_interval=30)
    pid = store.pipeline.id
    store.add("base", fingerprint=1, pipeline_id=pid)
    store.sync()
    stager = store._storage.stager
    acked: list[str] = []

    def other_add() -> None:
        store.add("a", fingerprint=0xF0F0F0F0, pipeline_id=pid, checkpoint=("feed", 1))
        acked.append("a")

    _after_readers_last_sync(stager, "reader", 1, other_add)
    out: dict[str, object] = {}

    def reader() -> None:
        with store.reader():
            try:
                if write == "add":
                    store.add("b", fingerprint=0x0F0F0F0F00, pipeline_id=pid, checkpoint=("feed", 2))
                else:
                    store.set_checkpoint("feed", 2)
                out["b"] = "acknowledged"
            except StorageError as exc:
                out["b"] = exc

    fault = _CommitFails()
    with _installed(fault):
        thread = threading.Thread(target=reader, name="reader")
        thread.start()
        deadline = time.monotonic() + 30
        while acked != ["a"] or stager._txn is None:  # "a" staged; the reader waits for the lock
            assert time.monotonic() < deadline and thread.is_alive()
            time.sleep(0.01)
        fault.armed = True
        with pytest.raises(StorageError, match="injected"):
            store.sync()
        thread.join(30)
    assert isinstance(out["b"], StorageError) and "injected" in str(out["b"]), out
    with pytest.raises(StorageError):
        store.close()
    assert set(_stored(path)) == {"base"}
    with fpstore.open(path, readonly=True) as again:
        assert again.checkpoint("feed") is None


def test_a_write_from_a_reading_thread_while_the_map_grows_is_refused(tmp_path, monkeypatch):
    """A full map mid-interval: the stager aborts its transaction, lets go of the write lock and
    grows the map, then stages its kept adds again. A thread holding a read that writes took the
    lock in between and committed first: the kept adds then met another state (all of them lost
    when a result differed; an older add of a key written over the newer one when none did). That
    thread cannot wait (the growth waits for its read): its write is refused, and every
    acknowledged add is stored."""
    import fpstore.store.staging as staging
    import fpstore.store.storage as storage

    monkeypatch.setattr(storage, "INITIAL_MAP_SIZE", 1 << 20)
    monkeypatch.setattr(staging, "STAGE_ROOM", 0)
    path = tmp_path / "s"
    store = fpstore.open(path, k=K, durability="interval", commit_interval=60, map_size=1 << 20, flush_entries=0)
    pid = store.pipeline.id
    store.add("base", fingerprint=1, pipeline_id=pid)
    store.sync()
    stager = store._storage.stager
    older, newer = 0xAAAA0000AAAA0000, 0x5555FFFF5555FFFF
    _after_readers_last_sync(stager, "reader", 1, lambda: store.add("k", fingerprint=older, pipeline_id=pid))
    out: dict[str, object] = {}

    def reader() -> None:
        with store.reader():
            try:
                store.add("k", fingerprint=newer, pipeline_id=pid)
                out["k"] = "acknowledged"
            except StorageError as exc:
                out["k"] = exc

    thread = threading.Thread(target=reader, name="reader")
    thread.start()
    deadline = time.monotonic() + 30
    while stager._txn is None or not stager._pending:  # "k" staged; the reader waits for the lock
        assert time.monotonic() < deadline and thread.is_alive()
        time.sleep(0.01)
    fills = []
    while stager.rebuilds == 0:
        assert len(fills) < 20_000, "the map never filled"
        key = f"fill-{len(fills):06d}-" + "x" * 200
        store.add(key, fingerprint=interval_fp(len(fills)), pipeline_id=pid)
        fills.append(key)
    thread.join(30)
    store.close()
    stored = _stored(path)
    assert all(key in stored for key in fills)
    if out["k"] == "acknowledged":  # the reader's write came after the kept adds
        assert stored["k"] == newer
    else:
        assert isinstance(out["k"], StorageError) and "grown map" in str(out["k"])
        assert stored["k"] == older


def _wait_for_the_stager_to_grow_the_map(store, seconds: float) -> None:
    """Return once the stager grows the map, a growth that waits for the process's reads."""
    deadline = time.monotonic() + seconds
    while not (store._storage.stager.growing and store._storage.map_growth_waits()):
        assert time.monotonic() < deadline, "the stager never grew the map"
        time.sleep(0.002)


@pytest.mark.parametrize("call", ["add", "sync"])
def test_a_reading_thread_that_writes_while_the_stager_grows_the_map_is_refused_not_stuck(tmp_path, monkeypatch, call):
    """A thread holding a read syncs the stager before it writes. While the stager grows the map
    (a full map mid-interval), the growth waits for that thread's read, and the thread waited
    for the stager: both stuck for good. It is now refused, and every add goes on once its read
    has ended."""
    import fpstore.store.staging as staging
    import fpstore.store.storage as storage

    monkeypatch.setattr(storage, "INITIAL_MAP_SIZE", 1 << 20)
    monkeypatch.setattr(staging, "STAGE_ROOM", 0)
    store = fpstore.open(tmp_path / "s", k=K, durability="interval", commit_interval=60, map_size=1 << 20, flush_entries=0)
    pid = store.pipeline.id
    store.add("base", fingerprint=1, pipeline_id=pid)
    store.sync()
    stager = store._storage.stager
    holding, go = threading.Event(), threading.Event()
    out: dict[str, object] = {}

    def reader() -> None:
        with store.reader():
            holding.set()
            assert go.wait(60)
            try:
                if call == "add":
                    store.add("r", fingerprint=5, pipeline_id=pid)
                else:
                    store.sync()
                out["r"] = "done"
            except StorageError as exc:
                out["r"] = exc

    def filler() -> None:
        assert holding.wait(60)
        i = 0
        while stager.rebuilds == 0:
            assert i < 20_000, "the map never filled"
            store.add(f"fill-{i:06d}-" + "x" * 200, fingerprint=interval_fp(i), pipeline_id=pid)
            i += 1

    def watcher() -> None:
        _wait_for_the_stager_to_grow_the_map(store, 60)
        go.set()

    run_threads([reader, filler, watcher], seconds_limit=60)
    assert isinstance(out["r"], StorageError) and "growing" in str(out["r"]), out
    store.close()


def test_a_reading_thread_that_writes_as_the_stager_begins_by_growing_the_map_is_refused_not_stuck(tmp_path, monkeypatch):
    """A thread holding a read syncs the stager, then writes in its own thread. If the stager
    meanwhile begins a transaction for another thread's add and first grows the map (its room for
    the staged writes, :data:`~fpstore.store.staging.STAGE_ROOM`), it holds the write lock while
    the growth waits for that read, and the thread waited for the write lock: both stuck for good.
    The write is now refused, and the other thread's add goes on once the read has ended."""
    import fpstore.store.staging as staging
    from fpstore.store.storage import Storage

    store = fpstore.open(tmp_path / "s", k=K, durability="interval", commit_interval=60)
    pid = store.pipeline.id
    store.add("base", fingerprint=1, pipeline_id=pid)
    store.sync()
    stager = store._storage.stager
    at_write, growing = threading.Event(), threading.Event()
    real_write_now = Storage.write_now
    reading_thread: list[int] = []

    def write_now(self, fn, action):
        if threading.get_ident() in reading_thread:
            at_write.set()  # synced, about to take the write lock: the stager begins meanwhile
            assert growing.wait(30)
        return real_write_now(self, fn, action)

    monkeypatch.setattr(Storage, "write_now", write_now)
    out: dict[str, object] = {}

    def reader() -> None:
        reading_thread.append(threading.get_ident())
        with store.reader():
            try:
                store.add("r", fingerprint=5, pipeline_id=pid)
                out["r"] = "done"
            except StorageError as exc:
                out["r"] = exc

    def adder() -> None:
        assert at_write.wait(30)
        monkeypatch.setattr(staging, "STAGE_ROOM", 1 << 30)  # the stager's next transaction grows the map first
        store.add("other", fingerprint=9, pipeline_id=pid)

    def watcher() -> None:
        _wait_for_the_stager_to_grow_the_map(store, 30)
        growing.set()

    run_threads([reader, adder, watcher], seconds_limit=30)
    assert isinstance(out["r"], StorageError) and "read this thread holds" in str(out["r"]), out
    store.sync()
    assert store.get("other") is not None and store.get("r") is None
    store.close()


_FORK_FROM_A_READING_THREAD = """
import os, sys, threading, time, fpstore
import fpstore.store.staging as staging
s = fpstore.open(sys.argv[1], k=3, durability="interval", commit_interval=60)
pid = s.pipeline.id
s.add("base", fingerprint=1, pipeline_id=pid)
s.sync()
stager = s._storage.stager
staging.STAGE_ROOM = 1 << 30  # the stager's next transaction grows the map first
with s.reader():
    threading.Thread(target=lambda: s.add("other", fingerprint=9, pipeline_id=pid), daemon=True).start()
    deadline = time.monotonic() + 30
    while not (stager.growing and s._storage.map_growth_waits()):
        if time.monotonic() > deadline:
            sys.exit("the stager never grew the map")
        time.sleep(0.002)
    child = os.fork()  # the growth waits for this thread's read
    if child == 0:
        os._exit(0)
    os.waitpid(child, 0)
s.sync()
print("ok", s.get("other") is not None)
s.close()
"""


def test_a_fork_from_a_thread_holding_a_read_while_the_stager_grows_the_map(tmp_path):
    """A thread holding a read forks while the stager grows the map (which waits for that read):
    the fork handler waited for the stager's write lock for good. It now forks without holding
    it, and the add the stager was beginning goes on once the read has ended."""
    out = subprocess.run([sys.executable, "-c", _FORK_FROM_A_READING_THREAD, str(tmp_path / "s")], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["ok", "True"]


def test_a_failed_commit_is_said_to_every_later_caller(tmp_path):
    """The commit of staged adds fails: sync, add and close raise StorageError naming the lost
    adds; the store opened again holds what was committed before, and takes writes again."""
    path = tmp_path / "s"
    fault = _CommitFails()
    store = fpstore.open(path, k=K, durability="interval", commit_interval=30)
    pid = store.pipeline.id
    store.add("kept", fingerprint=1, pipeline_id=pid)
    store.sync()
    store.add("lost1", fingerprint=2, pipeline_id=pid)
    store.add("lost2", fingerprint=3, pipeline_id=pid)
    with _installed(fault):
        fault.armed = True
        with pytest.raises(StorageError, match="2 writes acknowledged since the previous commit are lost"):
            store.sync()
    with pytest.raises(StorageError, match="are lost"):
        store.add("later", fingerprint=4, pipeline_id=pid)
    with pytest.raises(StorageError, match="are lost"):
        store.add_many(["later"], fingerprints=[4], pipeline_id=pid)
    with pytest.raises(StorageError, match="are lost"):
        store.close()
    with pytest.raises(ClosedError):
        store.add("after close", fingerprint=5, pipeline_id=pid)
    assert _stored(path) == {"kept": 1}
    with fpstore.open(path, durability="interval") as again:
        again.add("again", fingerprint=6, pipeline_id=pid)
    assert _stored(path) == {"kept": 1, "again": 6}


def test_a_program_that_exits_without_close_commits_its_staged_adds(tmp_path):
    path = tmp_path / "s"
    fpstore.open(path, k=K).close()
    code = (
        "import fpstore\n"
        f"s = fpstore.open({str(path)!r}, durability='interval', commit_interval=60)\n"
        "s.add('a', fingerprint=9, pipeline_id=s.pipeline.id)\n"
        "KEEP = s\n"  # never closed
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert _stored(path) == {"a": 9}


@pytest.mark.parametrize(
    "options, message",
    [
        ({"durability": "interval", "commit_interval": 0}, "commit_interval must be"),
        ({"durability": "interval", "commit_interval": -1.0}, "commit_interval must be"),
        ({"durability": "interval", "commit_interval": 61}, "commit_interval must be"),
        ({"durability": "interval", "commit_interval": "0.1"}, "commit_interval must be"),
        ({"durability": "interval", "commit_interval": True}, "commit_interval must be"),
        ({"durability": "full", "commit_interval": 0.1}, "applies to durability='interval' only"),
        ({"durability": "later"}, "durability must be one of"),
    ],
)
def test_bad_interval_options_are_refused(tmp_path, options, message):
    with pytest.raises(InputError, match=message):
        fpstore.open(tmp_path / "s", k=K, **options)
    assert not (tmp_path / "s").exists()


def test_aio_adds_with_interval_durability_and_sync(tmp_path):
    """fpstore.aio with either writer: adds are answered staged, ``await store.sync()`` commits them."""
    import asyncio

    async def main(path, writer):
        async with fpstore.aio.open(path, k=K, durability="interval", commit_interval=30, writer=writer) as store:
            pid = store.store.pipeline.id
            results = await asyncio.gather(*(store.add(f"k{i}", fingerprint=interval_fp(i), pipeline_id=pid) for i in range(40)))
            assert [r.key for r in results] == [f"k{i}" for i in range(40)]
            assert any(r.near_duplicates for r in results)
            assert await store.run(len, store.store) == 0  # staged, not committed
            await store.sync()
            assert await store.run(len, store.store) == 40

    for writer in ("thread", "process"):
        asyncio.run(main(tmp_path / writer, writer))
        assert len(_stored(tmp_path / writer)) == 40


@pytest.mark.slow
def test_kill9_leaves_the_adds_up_to_a_point_at_or_after_the_last_sync(tmp_path):
    """An adder in "interval" mode (syncing every 50 adds) is SIGKILLed at random moments, six
    times, resuming from its checkpoint each time: the store then holds exactly d0..dj with the
    checkpoint at j, for a j between the last ``synced`` and the last ``ack``, every fingerprint
    as added, and verifies clean."""
    path = str(tmp_path / "s")
    fpstore.open(path, k=K).close()
    rng = np.random.default_rng(5)
    acked_total = lost_total = 0
    for cycle in range(6):
        child = Child("interval-adder", path, "--interval", "0.05", "--sync-every", "50")
        try:
            first = child.line(timeout=120)
            assert first.startswith("ready"), first
            time.sleep(float(rng.uniform(0.2, 1.0)))
            child.kill()
        finally:
            child.close()
        acks = [int(line.split()[1]) for line in child.lines if line.startswith("ack ")]
        syncs = [int(line.split()[1]) for line in child.lines if line.startswith("synced ")]
        j = check_interval_adds(path, acks, syncs, f"cycle {cycle}")
        with fpstore.open(path, readonly=True) as store:
            assert store.verify() == []
        if acks:
            acked_total += len(acks)
            lost_total += acks[-1] - j
    assert acked_total > 300, f"too few adds were acknowledged to prove anything ({acked_total})"
    print(f"FIGURES interval kill: acked {acked_total}, acknowledged but undone by the kills {lost_total}")


@pytest.mark.parametrize("operation", ["redesign", "compact_file"])
def test_a_switch_of_the_store_while_staged_adds_made_a_merge_due(tmp_path, operation):
    """Staged adds flushed four runs (a merge due, merges "inline"); redesign() or compact_file()
    commits them first (from the stager thread, whose commit must not run the merge the switch
    holds) and completes; every add is stored."""
    path = tmp_path / "s"
    with fpstore.open(path, k=K, durability="interval", commit_interval=30, merges="inline", flush_entries=4) as store:
        pid = store.pipeline.id
        for i in range(16):
            store.add(f"k{i}", fingerprint=interval_fp(i * 10), pipeline_id=pid)
        assert store._cat.lsm.merge_due
        done: list = []
        worker = threading.Thread(target=lambda: done.append(store.redesign(4) if operation == "redesign" else store.compact_file()))
        worker.start()
        worker.join(60)
        assert not worker.is_alive(), f"{operation} hangs behind the staged adds' commit"
        assert done
        store.add("after", fingerprint=1, pipeline_id=pid)
    assert set(_stored(path)) == {f"k{i}" for i in range(16)} | {"after"}


_FORK_WHILE_STAGED = """
import os, sys, time, fpstore
s = fpstore.open(sys.argv[1], k=3, durability="interval", commit_interval=30)
for i in range(50):
    s.add(f"a{i}", fingerprint=i * 7919, pipeline_id=s.pipeline.id)
pid = os.fork()  # adds staged: the stager's transaction is open
if pid == 0:
    sys.exit(0)  # the child's exit handlers run too
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    if os.waitpid(pid, os.WNOHANG)[0]:
        break
    time.sleep(0.01)
else:
    os.kill(pid, 9)
    sys.exit("the forked child hung")
s.add("after", fingerprint=1, pipeline_id=s.pipeline.id)
s.close()
print("ok", len(fpstore.open(sys.argv[1], readonly=True)))
"""


def test_a_fork_while_adds_are_staged(tmp_path):
    """A process forks while the stager holds its transaction open: the staged adds commit first,
    the child neither hangs in fork() nor at exit, and the parent goes on adding."""
    out = subprocess.run([sys.executable, "-c", _FORK_WHILE_STAGED, str(tmp_path / "s")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["ok", "51"]


def test_an_add_from_a_thread_holding_a_read(tmp_path):
    """A thread inside ``store.reader()`` adds while another thread grows the map: the add runs in
    the calling thread, durably, after the staged adds (the stager, growing the map for it, would
    wait for that thread's read, which waits for the add)."""
    with fpstore.open(tmp_path / "s", k=K, durability="interval", commit_interval=30) as store:
        pid = store.pipeline.id
        store.add("staged", fingerprint=7, pipeline_id=pid)
        done: list = []

        def reader_adds():
            with store.reader():
                grower = threading.Thread(target=lambda: store._storage.reserve(512 << 20), daemon=True)
                grower.start()
                time.sleep(0.2)  # the growth now waits for this thread's read
                done.append(store.add("a", fingerprint=12345, pipeline_id=pid))
                done.append(store.add("b", fingerprint=12344, pipeline_id=pid))
            grower.join(60)

        worker = threading.Thread(target=reader_adds, daemon=True)
        worker.start()
        worker.join(60)
        assert not worker.is_alive(), "an add from a thread holding a read hangs"
        assert [m.key for m in done[1].near_duplicates] == ["a"]
        assert len(store) == 3  # durable on return, the staged add committed before them


def test_a_store_dropped_without_close_is_closed_and_keeps_its_adds(tmp_path):
    """A program drops an "interval" store without close(): once its interval has passed and it
    is collected, it is closed (its staged add committed, its lock released), as with "full"."""
    import gc
    import warnings

    path = tmp_path / "s"

    def use_and_drop():
        store = fpstore.open(path, k=K, durability="interval", commit_interval=0.05)
        store.add("a", fingerprint=1, pipeline_id=store.pipeline.id)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        use_and_drop()
        deadline = time.monotonic() + 30
        while True:
            gc.collect()
            try:
                again = fpstore.open(path, durability="interval")
                break
            except StorageError:  # still open: its staged add not yet committed
                assert time.monotonic() < deadline, "the dropped store is never closed"
                time.sleep(0.05)
    with again:
        assert {d.key for d in again.documents()} == {"a"}


def test_a_growth_of_the_map_does_not_wait_for_the_interval(tmp_path):
    """With adds staged under a 30 s interval, another thread's growth of the map (a bulk load's
    or a merge's reservation) makes the stager commit at once, not at the interval's end."""
    with fpstore.open(tmp_path / "s", k=K, durability="interval", commit_interval=30) as store:
        store.add("a", fingerprint=1, pipeline_id=store.pipeline.id)
        before = store.info()["map_size"]
        t0 = time.monotonic()
        store._storage.reserve(before * 4)
        waited = time.monotonic() - t0
        assert store.info()["map_size"] > before
        assert waited < 10, f"the growth waited {waited:.1f} s for the staged transaction"
        assert len(store) == 1  # committed for the growth


class _TxnFullOnce(faults.Faults):
    """The next write's first put meets LMDB's dirty-page limit (MDB_TXN_FULL), once."""

    def __init__(self) -> None:
        self.armed = False

    def write_txn(self, txn):
        owner = self

        class Txn:
            def __getattr__(self, name):
                return getattr(txn, name)

            def put(self, *a, **kw):
                if owner.armed:
                    owner.armed = False
                    import lmdb

                    raise lmdb.TxnFullError("injected: MDB_TXN_FULL")
                return txn.put(*a, **kw)

        return Txn()


def test_a_transaction_too_full_for_one_more_add_commits_and_goes_on(tmp_path):
    """Adds staged, then one whose write finds the open transaction too full (TXN_FULL, not a full
    map): the open transaction commits and the add runs in a new one; the map does not grow and
    no staged add runs again."""
    path = tmp_path / "s"
    with fpstore.open(path, k=K, durability="interval", commit_interval=30) as store:
        pid = store.pipeline.id
        for i in range(5):
            store.add(f"early{i}", fingerprint=interval_fp(i), pipeline_id=pid)
        stager, size = store._storage.stager, store.info()["map_size"]
        with _installed(_TxnFullOnce()) as fault:
            fault.armed = True
            res = store.add("late", fingerprint=interval_fp(50), pipeline_id=pid)
        assert res.key == "late" and not fault.armed
        assert stager.commits == 1 and stager.rebuilds == 0
        assert store.info()["map_size"] == size
    assert set(_stored(path)) == {f"early{i}" for i in range(5)} | {"late"}


def test_callers_answered_together_are_staged_together(tmp_path, monkeypatch):
    """Four threads add in a loop; staging a group takes 5 ms. Each caller is answered as soon as
    its add is staged and comes back with the next; the stager staged what had queued meanwhile,
    so the callers split into groups that alternated (1 and 3, 2 and 2), each paying a group's
    fixed costs. It now waits a bounded while for the callers its last group answered."""
    from fpstore.store import staging

    monkeypatch.setattr(staging, "GATHER_FRACTION", 100.0)  # generous bounds: scheduling never decides
    monkeypatch.setattr(staging, "GATHER_MAX_S", 0.5)
    sizes: list[int] = []
    with fpstore.open(tmp_path / "s", k=K, durability="interval", commit_interval=0.05) as store:
        pid = store.pipeline.id
        stage = store._adds.commit_in

        def slow_stage(txn, group):
            time.sleep(0.005)
            sizes.append(len(group))
            return stage(txn, group)

        monkeypatch.setattr(store._adds, "commit_in", slow_stage)
        start = threading.Barrier(4)

        def caller(t: int) -> None:
            start.wait()
            for j in range(12):
                fp = interval_fp(t * 100 + j)
                assert store.add(f"t{t}-{j}", fingerprint=fp, pipeline_id=pid).fingerprint == fp

        run_threads([lambda t=t: caller(t) for t in range(4)])
        store.sync()
        assert len(store) == 48
    steady = sizes[2:-2]  # the first groups form as the threads start, the last as they stop
    assert steady and sum(size == 4 for size in steady) >= 0.8 * len(steady), sizes


def test_a_lone_caller_is_staged_without_waiting_for_others(tmp_path, monkeypatch):
    """The stager waits for the callers its last group answered; a lone caller is the one it
    answered, back already, and must not wait for itself (it did, each add, for the whole bound)."""
    from fpstore.store import staging

    monkeypatch.setattr(staging, "GATHER_FRACTION", 10.0**6)  # a wait would take the whole bound
    monkeypatch.setattr(staging, "GATHER_MAX_S", 60.0)
    with fpstore.open(tmp_path / "s", k=K, durability="interval", commit_interval=0.05) as store:
        pid = store.pipeline.id
        stage = store._adds.commit_in

        def slow_stage(txn, group):
            time.sleep(0.005)
            return stage(txn, group)

        monkeypatch.setattr(store._adds, "commit_in", slow_stage)
        done: list[int] = []

        def caller() -> None:
            for j in range(10):
                store.add(f"k{j}", fingerprint=interval_fp(j), pipeline_id=pid)
                done.append(j)

        thread = threading.Thread(target=caller, daemon=True)
        thread.start()
        thread.join(30)
        assert done == list(range(10)), f"the lone caller waited for callers that were not there: {len(done)} of 10 adds in 30 s"



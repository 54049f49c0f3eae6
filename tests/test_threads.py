"""One Store object shared by many threads of one process: adds, queries and reads through map
growth and flushes, every answer exact; the read cache under concurrent eviction."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import fpstore
from fpstore.errors import ClosedError, StorageError
from fpstore.index.tiers import TierCache
from tests.support.threads import run_threads

K = 3


def _brute(stored: dict[str, int], fp: int, k: int) -> set[str]:
    return {key for key, f in stored.items() if bin(f ^ fp).count("1") <= k}


def test_sixteen_threads_add_and_query_through_map_growth_and_flushes(tmp_path, monkeypatch):
    """8 threads add (one document per call, some near-duplicates of others), 8 query, look up and
    count, on one store whose map starts at 256 KiB (it grows several times) and whose incremental
    tables flush every 100 documents; afterwards every document is stored and every query equals
    brute force, and every verdict named other documents at their true distance."""
    monkeypatch.setattr(fpstore.store.storage, "INITIAL_MAP_SIZE", 1 << 18)
    store = fpstore.open(tmp_path / "s", k=K, flush_entries=100, map_size=1 << 18)
    pid = store.pipeline.id
    rng = np.random.default_rng(5)
    per_thread = 60
    base = rng.integers(0, 2**64, size=8 * per_thread, dtype=np.uint64)
    for i in range(1, len(base), 3):  # every third a near-duplicate of the one before
        base[i] = base[i - 1] ^ np.uint64(1 << int(rng.integers(0, 64)))
    pad = "-" + "x" * 400  # long keys fill the 256 KiB map within a few hundred documents
    fps = {f"t{t}-{j}{pad}": int(base[t * per_thread + j]) for t in range(8) for j in range(per_thread)}
    added: dict[str, int] = {}
    added_lock = threading.Lock()
    stop = threading.Event()

    def adder(t: int):
        def run():
            for j in range(per_thread):
                key = f"t{t}-{j}{pad}"
                res = store.add(key, fingerprint=fps[key], pipeline_id=pid)
                assert res.key == key and res.fingerprint == fps[key]
                with added_lock:
                    added[key] = fps[key]
                # A verdict names other stored documents within k, at their true distance.
                for m in res.near_duplicates:
                    assert m.key != key and m.key in fps and m.distance == bin(fps[m.key] ^ fps[key]).count("1") <= K

        return run

    def querier(q: int):
        def run():
            local = np.random.default_rng(q)
            keys = list(fps)
            rounds = 0
            while not stop.is_set():
                rounds += 1
                time.sleep(0.002)  # readers that also wait on the network, as a crawler's do
                key = keys[int(local.integers(0, len(keys)))]
                hits = store.query(fingerprint=fps[key], pipeline_id=pid)
                assert all(m.distance <= K for m in hits)
                doc = store.get(key)
                assert doc is None or doc.fingerprint == fps[key]
                if rounds % 10 == 0:
                    qi, ids, d = store.query_many(np.array([fps[key]], np.uint64), pipeline_id=pid)
                    assert len(qi) == len(ids) == len(d)
                assert 0 <= len(store) <= len(fps)

        return run

    adders = [adder(t) for t in range(8)]
    queriers = [querier(q) for q in range(8)]
    done = threading.Event()

    def adders_then_stop():
        try:
            run_threads(adders)
        finally:
            stop.set()
            done.set()

    run_threads([adders_then_stop, *queriers])
    try:
        assert len(store) == len(fps) == len(added)
        info = store.info()
        assert info["map_size"] > 1 << 18, "the map never grew: the test did not test growth"
        assert store.counts()["runs"], "no flush happened: the test did not test flushes"
        for key, fp in list(fps.items())[::7]:
            got = {m.key for m in store.query(fingerprint=fp, pipeline_id=pid)}
            assert got == _brute(fps, fp, K), key
        assert store.verify() == []
    finally:
        store.close()


def test_read_cache_survives_concurrent_eviction():
    """Threads hitting a tiny cache with overlapping keys: every lookup returns its own entry."""
    cache = TierCache(max_bytes=4 * 200)  # an entry here is ~180 bytes: room for about four

    def worker(seed: int):
        def run():
            rng = np.random.default_rng(seed)
            for _ in range(20_000):
                key = int(rng.integers(0, 12))
                assert cache._cached(key, lambda key=key: ("entry", key)) == ("entry", key)

        return run

    run_threads([worker(s) for s in range(8)])


@pytest.mark.parametrize("readers", [4])
def test_map_growth_waits_for_other_threads_reads(tmp_path, monkeypatch, readers):
    """Bulk loads that must grow the map while other threads hold read transactions: the growth
    waits for them (LMDB may resize only with no transaction of the process active); every read
    answers from a consistent snapshot."""
    monkeypatch.setattr(fpstore.store.storage, "INITIAL_MAP_SIZE", 1 << 20)
    store = fpstore.open(tmp_path / "g", k=K)
    pid = store.pipeline.id
    rng = np.random.default_rng(2)
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            n = len(store)
            counts = store.counts()
            assert counts["documents"] >= n
            assert set(counts["table_entries"]) == {counts["documents"]}

    def loader():
        try:
            for i in range(6):
                keys = np.arange(i * 20_000, (i + 1) * 20_000)
                store.bulk_load(keys, rng.integers(0, 2**64, size=20_000, dtype=np.uint64), pipeline_id=pid)
        finally:
            stop.set()

    try:
        run_threads([loader] + [reader] * readers)
        assert len(store) == 120_000
        assert store.info()["map_size"] > 1 << 20
    finally:
        store.close()


def test_map_lock_growth_waits_for_other_threads_and_blocks_new_shares():
    """alone() waits while another thread holds a share, new shares wait while it runs, and a
    thread's own share never blocks its own growth."""
    from fpstore.store.maplock import MapLock

    lock = MapLock()
    events: list[str] = []
    holding, release = threading.Event(), threading.Event()

    def reader():
        lock.share()
        holding.set()
        release.wait(10)
        events.append("reader done")
        lock.unshare()

    def grower():
        with lock.alone():
            events.append("grown")

    r = threading.Thread(target=reader)
    r.start()
    holding.wait(10)
    g = threading.Thread(target=grower)
    g.start()
    time.sleep(0.2)
    assert events == [], "the growth ran while another thread held a share"
    release.set()
    r.join(10)
    g.join(10)
    assert events == ["reader done", "grown"]
    lock.share()  # a thread's own share does not block its growth
    with lock.alone():
        events.append("own")
    lock.unshare()
    assert events[-1] == "own" and lock._shares == {}


@pytest.mark.parametrize("merges", ["inline", "background"])
def test_bulk_load_beside_a_concurrent_write_takes_fresh_ids(tmp_path, monkeypatch, merges):
    """A bulk load encodes its run outside the write lock; a write committed meanwhile by another
    thread (an add that flushes, and the tier merge that flush makes due) takes the run id and
    document ids the load read. The load must number its run and documents from what its own
    write transaction reads, or two runs share blobs and two documents share an id."""
    from fpstore.store.storage import Storage

    s = fpstore.open(tmp_path / "s", k=K, flush_entries=1, merges=merges)
    pid = s.pipeline.id
    rng = np.random.default_rng(5)
    stored: dict[str, int] = {}
    for i in range(3):  # three runs of one entry: the next flush makes a merge due
        fp = int(rng.integers(0, 2**63))
        s.add(f"a{i}", fingerprint=fp, pipeline_id=pid)
        stored[f"a{i}"] = fp
    if merges == "background":
        s.merge_runs()
    real_reserve = Storage.reserve
    meddled = []

    def reserve_after_a_concurrent_add(self, nbytes):
        if not meddled:
            meddled.append(1)
            fp = int(rng.integers(0, 2**63))
            t = threading.Thread(target=lambda: s.add("late", fingerprint=fp, pipeline_id=pid))
            t.start()
            t.join()
            stored["late"] = fp
            s.merge_runs()
        return real_reserve(self, nbytes)

    monkeypatch.setattr(Storage, "reserve", reserve_after_a_concurrent_add)
    fps = rng.integers(0, 2**63, size=50).astype(np.uint64)
    s.bulk_load([f"b{i}" for i in range(50)], fps, pipeline_id=pid)
    monkeypatch.setattr(Storage, "reserve", real_reserve)
    assert meddled
    stored.update({f"b{i}": int(f) for i, f in enumerate(fps.tolist())})
    s.merge_runs()
    try:
        assert len(s) == len(stored)
        assert {key: s[key].fingerprint for key in stored} == stored
        assert len({s[key].id for key in stored}) == len(stored)
        for key, fp in stored.items():
            assert key in {m.key for m in s.query(fingerprint=fp, pipeline_id=pid, k=0)}
        assert s.verify() == []
    finally:
        s.close()


def test_a_store_of_many_runs_reads_each_run_index_once(tmp_path, monkeypatch):
    """The read cache holds what a probe of every run needs: a store of 80 bulk loads (80 runs of
    4 tables, 80 key segments) must not rebuild run indexes on every add, as a cache bounded at a
    few hundred entries did (an add took 135 ms at 64 runs of 10^6 documents in all)."""
    from fpstore.index import runs as runs_codec

    rng = np.random.default_rng(8)
    with fpstore.open(tmp_path / "s", k=K, design="r4") as s:
        pid = s.pipeline.id
        for b in range(80):
            s.bulk_load([f"b{b}-{i}" for i in range(40)], rng.integers(0, 2**64, 40, dtype=np.uint64), pipeline_id=pid)
        s.add("warm", fingerprint=1, pipeline_id=pid)
        built = []
        real = runs_codec.RunIndex.from_bytes

        def counting(raw):
            built.append(1)
            return real(raw)

        monkeypatch.setattr(runs_codec.RunIndex, "from_bytes", staticmethod(counting))
        s.add("second", fingerprint=2, pipeline_id=pid)
        s.query(fingerprint=3, pipeline_id=pid)
        assert built == [], f"{len(built)} run indexes read again"


def test_map_figures_read_beside_a_growing_map(tmp_path):
    """One thread grows the map again and again (reserve) while another reads the environment's
    figures (reserve's own, store.info()): LMDB reads them through the map, so without a share of
    it they fail with EINVAL (or read an unmapped page) while a growth moves it."""
    with fpstore.open(tmp_path / "s", k=K) as store:
        storage = store._storage
        # Until the reader has seen enough growths (not for a fixed time: a loaded machine reads
        # fewer figures in two seconds than an idle one), within a generous bound.
        deadline = time.monotonic() + 60.0
        done = threading.Event()
        sizes = []

        def grower():
            size = 64 << 20
            while not done.is_set() and time.monotonic() < deadline:
                size += 1 << 20
                storage.reserve(size)

        def reader():
            try:
                while time.monotonic() < deadline and (len(sizes) <= 200 or len(set(sizes)) <= 20):
                    storage.reserve(0)
                    sizes.append(store.info()["map_size"])
            finally:
                done.set()

        run_threads([grower, reader])
        assert len(sizes) > 100 and len(set(sizes)) > 10, "the map did not grow under the reader: the test proves nothing"


@pytest.mark.parametrize("durability", ["full", "interval"])
def test_writes_and_reads_beside_redesigns_and_file_compactions(tmp_path, durability):
    """Threads add (one at a time, in batches, with verdicts), query and compact while another
    thread redesigns the store and compacts its file, again and again: each call either succeeds
    or never started; none meets the catalog or the environment the switch replaced ("Database
    handle belongs to another environment", a false CorruptionError, a closed store)."""
    options = {"commit_interval": 0.05} if durability == "interval" else {}
    with fpstore.open(tmp_path / "s", k=K, durability=durability, flush_entries=8, merges="background", **options) as store:
        pid = store.pipeline.id
        stop = threading.Event()
        rng = np.random.default_rng(5)
        fps = rng.integers(0, 2**64, size=6000, dtype=np.uint64).tolist()

        def writer(w: int):
            i = 0
            while not stop.is_set() and i < 250:
                key = f"w{w}-{i}"
                kind = i % 5
                if kind == 0:
                    store.add_many([key, key + "b"], fingerprints=fps[i * 4 + w : i * 4 + w + 2], pipeline_id=pid)
                elif kind == 1:
                    store.add_each([key], fingerprints=[fps[i * 4 + w]], pipeline_id=pid)
                elif kind == 2:
                    store.query(fingerprint=fps[i], pipeline_id=pid)
                elif kind == 3 and w == 0:
                    store.compact()
                else:
                    store.add(key, fingerprint=fps[i * 4 + w], pipeline_id=pid)
                i += 1

        def switcher():
            for j in range(6):
                store.redesign([2, 3, 4][j % 3])
                store.compact_file()
            stop.set()

        run_threads([lambda w=w: writer(w) for w in range(3)] + [switcher])
        assert store.verify() == []


@pytest.mark.parametrize("call", ["add", "set_checkpoint", "add_many"])
def test_a_write_from_a_thread_holding_a_read_while_another_grows_the_map_is_refused_not_stuck(tmp_path, monkeypatch, call):
    """A thread holding a read open (``store.reader()``) writes while another thread's group of
    adds must grow the map, which waits for that read. The reading thread's add queued behind
    that group, and its other writes waited for the write lock the growing thread holds: each
    thread waited for the other for good. A write from a thread holding a read now runs alone in
    that thread and is refused (``StorageError``, nothing written) while a growth waits for its
    read; the other thread's add goes on once the read has ended."""
    import lmdb

    from fpstore.errors import StorageError
    from fpstore.store.store import Store

    store = fpstore.open(tmp_path / "s", k=K)
    pid = store.pipeline.id
    store.add("base", fingerprint=1, pipeline_id=pid)
    real = Store._add_group
    inside, calling = threading.Event(), threading.Event()
    full = [True]

    def add_group(self, txn, adds):
        if adds[0].key == "grower" and full[0]:
            inside.set()
            assert calling.wait(30)
            time.sleep(0.2)  # the reading thread is now in its write
            full[0] = False
            raise lmdb.MapFullError("injected: the map is full")
        return real(self, txn, adds)

    monkeypatch.setattr(Store, "_add_group", add_group)
    out: dict[str, object] = {}

    def grower() -> None:
        out["grower"] = store.add("grower", fingerprint=2, pipeline_id=pid)

    def reader() -> None:
        with store.reader():
            assert inside.wait(30)
            calling.set()
            try:
                if call == "add":
                    store.add("r", fingerprint=3, pipeline_id=pid)
                elif call == "set_checkpoint":
                    store.set_checkpoint("feed", 7)
                else:
                    store.add_many(["r"], fingerprints=[3], pipeline_id=pid)
                out["reader"] = "done"
            except StorageError as exc:
                out["reader"] = exc

    run_threads([grower, reader], seconds_limit=30)
    assert isinstance(out["reader"], StorageError) and "read this thread holds" in str(out["reader"]), out
    assert store.get("grower") is not None and store.get("r") is None and store.checkpoints() == {}
    store.add("r", fingerprint=3, pipeline_id=pid)  # once its read has ended
    assert store.get("r") is not None
    store.close()


def test_a_fork_from_a_thread_holding_a_read_does_not_wait_for_a_merge_held_up_by_that_read(tmp_path):
    """Before a fork, the merges are held (a child must not inherit a merge inside LMDB): the fork
    waits for the merge in progress to give up. A merge step that waits for a growth of the map
    (directly, or through the stager's next transaction) waits for every read of the process,
    the forking thread's too, and the fork waited for that merge for good. From a thread that
    holds a read, the fork handler now gives up holding the merges while a growth waits."""
    from fpstore.store import merging

    store = fpstore.open(tmp_path / "s", k=K, merges="background")
    pid = store.pipeline.id
    store.add("a", fingerprint=1, pipeline_id=pid)
    merger = store._merges
    assert merger._job.acquire(timeout=10)  # a merge in progress, which does not give up
    store._cat.lsm.merge_due = True
    merger.after_commit()  # the merge thread starts (and waits for that merge)
    assert merger._thread is not None
    grown = threading.Event()
    out: dict[str, object] = {}

    def grower() -> None:  # the merge's growth of the map, waiting for the forking thread's read
        with store._storage._map.alone():
            grown.set()

    def forking() -> None:
        with store.reader():
            g = threading.Thread(target=grower, daemon=True)
            g.start()
            deadline = time.monotonic() + 10
            while not store._storage.map_growth_waits():
                assert time.monotonic() < deadline
                time.sleep(0.001)
            merging._before_fork()  # what os.fork() runs first
            merging._after_fork()
            out["forked"] = True
        g.join(10)

    try:
        run_threads([forking], seconds_limit=20)
        assert out == {"forked": True} and grown.is_set()
    finally:
        merger._job.release()
    store.close()


def _run_script(script: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``script`` (a template with ``{root}``, this checkout) run by a new interpreter with ``args``:
    a crash or a hang there fails the calling test only."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return subprocess.run([sys.executable, "-c", script.format(root=root), *args], capture_output=True, text=True, timeout=timeout)


_CLOSE_RACE = """
import os, random, sys, threading, time
import numpy as np
sys.path.insert(0, {root!r})
import fpstore
from fpstore.errors import ClosedError
path, durability = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(0)
fps = rng.integers(0, 2**63, 20000, dtype=np.uint64)
with fpstore.open(path, k=3) as store:
    store.bulk_load(list(range(20000)), fps, pipeline_id=store.pipeline.id)
other = []
for trial in range(8):
    store = fpstore.open(path, k=3, durability=durability)
    pid = store.pipeline.id
    def work(kind):
        try:
            while True:
                if kind == "get":
                    for i in range(100):
                        store.get(i)
                elif kind == "query_many":
                    store.query_many(fps[:3000], pipeline_id=pid)
                elif kind == "reader":
                    with store.reader() as r:
                        for i in range(50):
                            r.query(fingerprint=int(fps[i]), pipeline_id=pid)
                elif kind == "pairs":
                    for _ in store.near_duplicate_pairs(3):
                        pass
                elif kind == "add":
                    store.add(f"a{{threading.get_ident()}}-{{random.random()}}", fingerprint=int(fps[7]), pipeline_id=pid)
                else:
                    store.add_many([f"m{{random.random()}}" for _ in range(200)], fingerprints=fps[:200], pipeline_id=pid)
        except ClosedError:
            pass
        except BaseException as exc:
            other.append(f"{{kind}}: {{type(exc).__name__}}: {{exc}}")
    threads = [threading.Thread(target=work, args=(kind,)) for kind in ("get", "query_many", "reader", "pairs", "add", "add", "add_many")]
    for t in threads:
        t.start()
    time.sleep(0.02 + random.random() * 0.05)
    store.close()
    for t in threads:
        t.join()
print("other errors:", other)
"""


@pytest.mark.parametrize("durability", ["full", "interval"])
def test_closing_the_store_while_other_threads_read_and_write_raises_closed_error_in_them(tmp_path, durability):
    """Threads reading (gets, query_many, reader blocks, all pairs) and writing (add, add_many)
    while another thread closes the store: each of them ends with ClosedError, and the process
    does not crash (closing unmapped the map under reads still decoding views of it). In a
    process of its own, 8 closes, so that a crash fails this test only."""
    out = _run_script(_CLOSE_RACE, str(tmp_path / "s"), durability, timeout=600)
    assert out.returncode == 0, f"exit {out.returncode}: {out.stderr[-2000:]}"
    assert out.stdout.strip() == "other errors: []", out.stdout


def test_close_from_a_thread_that_holds_a_read_is_refused_and_the_store_stays_usable(tmp_path):
    """close() inside this thread's own reader block would unmap what that reader reads: refused
    with StorageError; the reader goes on, and the close after the block closes."""
    store = fpstore.open(tmp_path / "s", k=K)
    pid = store.pipeline.id
    store.add("a", fingerprint=5, pipeline_id=pid)
    with store.reader() as reader:
        with pytest.raises(StorageError, match="this thread still holds a read"):
            store.close()
        assert [m.key for m in reader.query(fingerprint=5, pipeline_id=pid)] == ["a"]
    store.close()
    with pytest.raises(ClosedError):
        store.get("a")


def test_close_waits_for_another_threads_reader_block_then_gives_up_leaving_the_store_open(tmp_path, monkeypatch):
    """A reader block another thread holds open: close() waits for it (a block that ends within
    the wait lets the close through), and past the wait raises StorageError with the store still
    open and usable."""
    monkeypatch.setattr(fpstore.store.storage, "CLOSE_WAIT_S", 0.3)
    store = fpstore.open(tmp_path / "s", k=K)
    pid = store.pipeline.id
    store.add("a", fingerprint=5, pipeline_id=pid)
    entered, leave = threading.Event(), threading.Event()
    answers: list[list[str]] = []

    def hold(seconds: float | None) -> None:
        with store.reader() as reader:
            entered.set()
            if seconds is None:
                leave.wait()
            else:
                time.sleep(seconds)
            answers.append([m.key for m in reader.query(fingerprint=5, pipeline_id=pid)])

    holder = threading.Thread(target=hold, args=(None,), daemon=True)
    holder.start()
    entered.wait()
    try:
        with pytest.raises(StorageError, match="waited"):
            store.close()
        assert store.get("a") is not None  # still open
    finally:
        leave.set()
        holder.join()
    entered.clear()
    holder = threading.Thread(target=hold, args=(0.1,))
    holder.start()
    entered.wait()
    store.close()  # waits the 0.1 s for the block
    holder.join()
    assert answers == [["a"], ["a"]]
    with pytest.raises(ClosedError):
        store.get("a")


_CLOSE_BESIDE_A_MERGE = """
import os, sys, threading, time
sys.path.insert(0, {root!r})
import fpstore
from fpstore.errors import StorageError
fpstore.store.storage.CLOSE_WAIT_S = 0.5
where = sys.argv[2]
# A small map and small flushes: the fourth flush makes a merge due, whose room in the map needs
# a growth, which waits for the read held below.
store = fpstore.open(sys.argv[1], k=3, flush_entries=16, map_size=1 << 20)
pid = store.pipeline.id
def add(first, count):
    for n in range(first, first + count):
        store.add(f"k{{n}}", fingerprint=(n * 0x9E3779B97F4A7C15) & (2**64 - 1), pipeline_id=pid)
add(0, 48)
held, leave = threading.Event(), threading.Event()
def hold():
    with store.reader():
        held.set()
        leave.wait()
holder = threading.Thread(target=hold, daemon=True)
if where == "own":
    reading = store.reader()
    reading.__enter__()
else:
    holder.start()
    held.wait()
add(48, 16)
time.sleep(0.5)
try:
    store.close()
    print("closed")
except StorageError as exc:
    print("refused" if "holds a read" in str(exc) or "waited" in str(exc) else f"other: {{exc}}")
if where == "own":
    reading.__exit__(None, None, None)
else:
    leave.set()
    holder.join()
add(64, 16 * 8)  # merges still run after the refused close
time.sleep(1.0)
print("runs", len(store.info()["runs"]))
store.close()
print("closed")
"""


@pytest.mark.parametrize("where", ["own", "other"])
def test_close_beside_a_merge_that_waits_for_a_read_is_refused_not_stuck_and_merges_go_on(tmp_path, where):
    """close() while the background merge waits to grow the map for a read, held by the closing
    thread itself or by another thread: refused with StorageError (it waited for the merge for
    ever before), and the store's merges go on afterwards; once the read ends, close closes. In a
    process of its own, with a timeout, so that a hang fails this test only."""
    out = _run_script(_CLOSE_BESIDE_A_MERGE, str(tmp_path / "s"), where, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.split()
    assert lines[0] == "refused" and lines[-1] == "closed", out.stdout
    assert int(lines[lines.index("runs") + 1]) <= 4, f"runs piled up: merges stopped after the refused close: {out.stdout}"


def test_a_timed_out_close_in_interval_mode_leaves_adds_working(tmp_path, monkeypatch):
    """With durability="interval", a close that times out on another thread's reader block leaves
    the store open for writes too (its stager ended with the close attempt, and starts again)."""
    monkeypatch.setattr(fpstore.store.storage, "CLOSE_WAIT_S", 0.2)
    store = fpstore.open(tmp_path / "s", k=K, durability="interval")
    pid = store.pipeline.id
    store.add("a", fingerprint=1, pipeline_id=pid)
    entered, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with store.reader():
            entered.set()
            leave.wait()

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    entered.wait()
    try:
        with pytest.raises(StorageError, match="waited"):
            store.close()
        result = store.add("b", fingerprint=3, pipeline_id=pid)
        assert [m.key for m in result.near_duplicates] == ["a"]
        store.sync()
    finally:
        leave.set()
        holder.join()
    store.close()
    with fpstore.open(tmp_path / "s", readonly=True) as again:
        assert len(again) == 2


def test_a_pairs_iterator_collected_in_another_thread_gives_its_read_back(tmp_path):
    """A pairs iterator advanced in one thread and dropped in another (handed over, or collected
    there by the cyclic collector) ends its read: the store closes at once (its share stayed taken
    for ever before, and close waited and refused)."""
    import gc

    store = fpstore.open(tmp_path / "s", k=K)
    rng = np.random.default_rng(0)
    fps = rng.integers(0, 2**63, 2000, dtype=np.uint64)
    fps[1::2] = fps[0::2] ^ np.uint64(3)
    store.add_many([f"k{i}" for i in range(2000)], fingerprints=fps, pipeline_id=store.pipeline.id)
    box = []

    def advance() -> None:
        pairs = store.iter_near_duplicate_pairs(batch_size=10)
        next(pairs)
        box.append(pairs)

    worker = threading.Thread(target=advance)
    worker.start()
    worker.join()
    box.clear()
    gc.collect()
    started = time.monotonic()
    store.close()
    assert time.monotonic() - started < 5

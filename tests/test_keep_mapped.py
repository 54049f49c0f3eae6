"""``keep_mapped``: the store's resident pages mapped into the process (fpstore/store/residency.py)."""

from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np
import pytest

import fpstore
from fpstore.errors import InputError
from fpstore.store import residency

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore and MADV_POPULATE_READ are Linux's")


def _mapped_kib(path: str) -> int:
    """Rss of this process's mappings of ``path``, from /proc/self/smaps."""
    current, total = None, 0
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if fields and "-" in fields[0] and not fields[0].endswith(":"):
                current = fields[5] if len(fields) > 5 else None
            elif fields and fields[0] == "Rss:" and current == path:
                total += int(fields[1])
    return total


def _fill(store: fpstore.Store, batches: int = 12) -> None:
    rng = np.random.default_rng(4)
    for i in range(batches):
        keys = range(i * 4000, (i + 1) * 4000)
        store.add_many(keys, fingerprints=rng.integers(0, 2**64, 4000, dtype=np.uint64), pipeline_id=store.pipeline.id)


@linux
def test_a_pass_maps_the_pages_a_write_left_unmapped(tmp_path):
    """LMDB writes pages without mapping them: after adds, part of the file is resident in the
    page cache but not mapped here (the pages a kernel's reclaim of unmapped file pages takes). A
    pass maps every resident page: the mapping's Rss reaches what mincore found resident."""
    with fpstore.open(tmp_path / "s", k=3, keep_mapped=3600) as s:  # the thread sleeps: passes by hand
        data = os.path.join(s.path, "data.mdb")
        _fill(s)
        before = _mapped_kib(data)
        size_kib = os.path.getsize(data) // 1024
        assert before < size_kib, "the test needs pages the writes left unmapped"
        keeper = s._keeper
        assert keeper is not None
        keeper.run_once(s._storage)
        resident_kib = keeper.resident_pages * residency.PAGE // 1024
        assert keeper.passes == 1 and keeper.pages * residency.PAGE // 1024 == size_kib
        assert resident_kib > before
        assert _mapped_kib(data) >= resident_kib
        assert s.info()["keep_mapped"]["resident_pages"] == keeper.resident_pages


@linux
def test_the_thread_passes_while_the_store_is_written_and_ends_with_close(tmp_path):
    """With a short interval the thread passes on its own, between and during writes and queries
    (through forced growths of the map, which move it: a pass finds the map inside a read and
    ends when it moves); close() ends it, and the answers are those of a store without it."""
    with fpstore.open(tmp_path / "plain", k=3) as plain:
        _fill(plain, 3)
        answers = plain.query_many(np.arange(0, 2**64 - 1, 2**54, dtype=np.uint64), pipeline_id=plain.pipeline.id)
    s = fpstore.open(tmp_path / "s", k=3, keep_mapped=0.01, map_size=1 << 20)
    try:
        _fill(s, 3)
        deadline = time.monotonic() + 10
        while s.info()["keep_mapped"]["passes"] < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert s.info()["keep_mapped"]["passes"] >= 3 and s.info()["keep_mapped"]["error"] is None
        got = s.query_many(np.arange(0, 2**64 - 1, 2**54, dtype=np.uint64), pipeline_id=s.pipeline.id)
        assert [a.tolist() for a in got] == [a.tolist() for a in answers]
        keeper = s._keeper
    finally:
        s.close()
    assert keeper is not None and keeper.join(10)
    assert not any(t.name == "fpstore-keep-mapped" for t in threading.enumerate())


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), True, "5"])
def test_keep_mapped_takes_none_or_positive_seconds(tmp_path, bad):
    with pytest.raises(InputError, match="keep_mapped"):
        fpstore.open(tmp_path / "s", k=3, keep_mapped=bad)
    assert not os.path.exists(tmp_path / "s" / "data.mdb")


def test_off_by_default(tmp_path):
    with fpstore.open(tmp_path / "s", k=3) as s:
        assert s.info()["keep_mapped"] is None
        assert not any(t.name == "fpstore-keep-mapped" for t in threading.enumerate())


def test_where_the_platform_cannot_it_says_so_and_runs_no_thread(tmp_path, monkeypatch):
    monkeypatch.setattr(residency, "_libc", lambda: None)
    with fpstore.open(tmp_path / "s", k=3, keep_mapped=0.01) as s:
        info = s.info()["keep_mapped"]
        assert info["passes"] == 0 and "not supported" in info["error"]
        assert not any(t.name == "fpstore-keep-mapped" for t in threading.enumerate())


@linux
def test_a_kernel_that_refuses_stops_the_thread_with_its_reason(tmp_path, monkeypatch):
    """Before Linux 5.14 madvise refuses MADV_POPULATE_READ (EINVAL): the thread stops, says why,
    and the store goes on."""
    monkeypatch.setattr(residency, "MADV_POPULATE_READ", 12345)
    with fpstore.open(tmp_path / "s", k=3, keep_mapped=0.01) as s:
        _fill(s, 1)
        deadline = time.monotonic() + 10
        while s.info()["keep_mapped"]["error"] is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "MADV_POPULATE_READ" in s.info()["keep_mapped"]["error"]
        assert len(s) == 4000


@linux
def test_a_pass_that_fails_is_tried_again_and_says_why(tmp_path, monkeypatch):
    """A pass that fails with the store's own error (every reader slot taken, say) is not the
    end of the thread: the next pass runs, and info() said why the last one failed."""
    from fpstore.errors import StorageError

    with fpstore.open(tmp_path / "s", k=3, keep_mapped=0.01) as s:
        keeper = s._keeper
        real = keeper.run_once
        failures = iter([StorageError("no reader slot free"), StorageError("no reader slot free")])

        def flaky(storage, stop=None):
            failure = next(failures, None)
            if failure is not None:
                raise failure
            return real(storage, stop)

        monkeypatch.setattr(keeper, "run_once", flaky)
        deadline = time.monotonic() + 10
        seen = None
        while keeper.passes < 2 and time.monotonic() < deadline:
            seen = seen or keeper.last_failure
            time.sleep(0.002)
        assert keeper.passes >= 2 and keeper.error is None
        assert seen == "no reader slot free" and s.info()["keep_mapped"]["last_failure"] is None


@linux
def test_a_refused_close_during_a_pass_leaves_the_thread_passing(tmp_path, monkeypatch):
    """close() stops the thread without waiting for a pass in progress (one may wait for a read
    another thread holds); when the storage then refuses to close (that read), the store stays
    open and its keeper passes again once the pass in progress has ended."""
    from fpstore.errors import StorageError
    from fpstore.store import storage as storage_module

    monkeypatch.setattr(storage_module, "CLOSE_WAIT_S", 0.2)
    s = fpstore.open(tmp_path / "s", k=3, keep_mapped=0.01)
    keeper = s._keeper
    real = keeper.run_once
    block, entered, unblock = threading.Event(), threading.Event(), threading.Event()

    def slow(storage, stop=None):
        if block.is_set():
            block.clear()
            entered.set()
            unblock.wait(10)
        return real(storage, stop)

    monkeypatch.setattr(keeper, "run_once", slow)
    try:
        holding, release = threading.Event(), threading.Event()

        def hold_a_read():
            with s.reader():
                holding.set()
                release.wait(10)

        reader = threading.Thread(target=hold_a_read)
        reader.start()
        assert holding.wait(10)
        block.set()
        assert entered.wait(10)  # a pass in progress
        with pytest.raises(StorageError):
            s.close()
        release.set()
        reader.join()
        unblock.set()
        before = keeper.passes
        deadline = time.monotonic() + 10
        while keeper.passes < before + 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert keeper.passes >= before + 3 and keeper.error is None
    finally:
        unblock.set()
        s.close()


def test_an_interval_beyond_what_a_wait_takes_does_not_end_the_thread(tmp_path):
    with fpstore.open(tmp_path / "s", k=3, keep_mapped=1e12) as s:
        time.sleep(0.05)
        keeper = s._keeper
        assert keeper._thread is None or keeper._thread.is_alive() or keeper.error is not None
        assert keeper.error is None or "not supported" in keeper.error


@linux
def test_a_pass_finds_the_file_after_the_store_directory_moved(tmp_path):
    """A pass measures the file by LMDB's own page count, not by the path given at open: a store
    directory renamed while open (its map and descriptors stay valid) does not stop the keeper."""
    with fpstore.open(tmp_path / "s", k=3, keep_mapped=3600) as s:
        _fill(s, 2)
        os.rename(tmp_path / "s", tmp_path / "moved")
        try:
            s._keeper.run_once(s._storage)
            assert s._keeper.passes == 1 and s._keeper.resident_pages > 0
        finally:
            os.rename(tmp_path / "moved", tmp_path / "s")

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
    (each pass inside a read, so the map cannot move under it: a forced map growth below); close()
    ends it, and the answers are those of a store without it."""
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
    finally:
        s.close()
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

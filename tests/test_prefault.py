"""The store's pages mapped into the process ahead of its queries (fpstore/store/prefault.py)."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

import fpstore
from fpstore.errors import InputError
from fpstore.store import prefault
from fpstore.store.storage import Storage

pytestmark = pytest.mark.skipif(not prefault.supported(), reason="needs Linux's /proc/self/maps and MADV_POPULATE_READ")


def mapped_bytes(store: fpstore.Store) -> int:
    """Resident bytes of this process's mappings of the store's data file (/proc/self/smaps)."""
    real = os.path.realpath(os.path.join(store.path, "data.mdb"))
    total, inside = 0, False
    with open("/proc/self/smaps", encoding="utf-8", errors="replace") as smaps:
        for line in smaps:
            fields = line.split(maxsplit=5)
            if fields and "-" in fields[0] and len(fields) >= 5 and ":" not in fields[0]:
                inside = len(fields) == 6 and fields[5].rstrip("\n") == real
            elif inside and fields[0] == "Rss:":
                total += int(fields[1]) * 1024
    return total


def used_bytes(store: fpstore.Store) -> int:
    env = store._storage.env
    return (env.info()["last_pgno"] + 1) * env.stat()["psize"]


def fill(path, n: int = 20_000, **options) -> None:
    rng = np.random.default_rng(3)
    with fpstore.open(path, k=3, **options) as s:
        for lo in range(0, n, 1000):
            s.add_many(list(range(lo, lo + 1000)), fingerprints=rng.integers(0, 2**64, 1000, dtype=np.uint64), pipeline_id=s.pipeline.id)


def test_populate_maps_the_used_file_and_warm_does_it_first(tmp_path):
    fill(tmp_path / "s", merges="manual")
    with fpstore.open(tmp_path / "s", readonly=True) as s:
        used = used_bytes(s)
        assert used > 1 << 20
        assert mapped_bytes(s) < used // 2  # a new mapping: only what opening it read
        assert s._storage.populate() == used
        assert mapped_bytes(s) >= used * 0.95
    with fpstore.open(tmp_path / "s", readonly=True) as s:
        s.warm()
        assert mapped_bytes(s) >= used_bytes(s) * 0.95


def test_the_background_merger_maps_the_file_after_its_merges(tmp_path, monkeypatch):
    populated: list[tuple[str, int, int]] = []
    populate = Storage.populate

    def spy(self: Storage, **options: bool) -> int:
        env = self.env
        used = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
        done = populate(self, **options)
        populated.append((threading.current_thread().name, done, used))
        return done

    monkeypatch.setattr(Storage, "populate", spy)
    with fpstore.open(tmp_path / "s", k=3, flush_entries=500) as s:  # merges="background", prefault=True: the defaults
        rng = np.random.default_rng(4)
        for lo in range(0, 40_000, 1000):
            s.add_many(list(range(lo, lo + 1000)), fingerprints=rng.integers(0, 2**64, 1000, dtype=np.uint64), pipeline_id=s.pipeline.id)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not populated:
            time.sleep(0.05)
        assert s.info()["merges"]["done"] >= 1, "no background merge ran within a minute"
    assert populated, "no merge was followed by a populate"
    assert all(name.startswith("fpstore-merge") for name, _, _ in populated)
    assert populated[0][1] == populated[0][2] > 0  # the first maps the whole file, later ones what it gained


def test_populate_not_whole_maps_what_the_file_gained_unless_the_map_moved(tmp_path):
    with fpstore.open(tmp_path / "s", k=3, merges="manual") as s:
        storage = s._storage
        assert storage.populate() == used_bytes(s)
        assert storage.populate(whole=False) == 0
        before = used_bytes(s)
        rng = np.random.default_rng(6)
        s.add_many(list(range(5_000)), fingerprints=rng.integers(0, 2**64, 5_000, dtype=np.uint64), pipeline_id=s.pipeline.id)
        assert used_bytes(s) > before
        assert storage.populate(whole=False) == used_bytes(s) - before
        assert mapped_bytes(s) >= used_bytes(s) * 0.95
        storage.grow()  # a new map: nothing of it is mapped
        assert storage.populate(whole=False) == used_bytes(s)


def test_prefault_false_leaves_the_merger_to_merge(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(Storage, "populate", lambda self: calls.append(1) or 0)
    with fpstore.open(tmp_path / "s", k=3, flush_entries=200, prefault=False) as s:
        rng = np.random.default_rng(5)
        for lo in range(0, 8_000, 400):
            s.add_many(list(range(lo, lo + 400)), fingerprints=rng.integers(0, 2**64, 400, dtype=np.uint64), pipeline_id=s.pipeline.id)
        deadline = time.monotonic() + 60
        while s.info()["merges"]["done"] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.info()["merges"]["done"] >= 1
        s.merge_runs()  # waits for the background merge in progress
    assert calls == []


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_prefault_must_be_a_bool(tmp_path, value):
    with pytest.raises(InputError, match="prefault"):
        fpstore.open(tmp_path / "s", prefault=value)
    assert not os.path.exists(tmp_path / "s")


def test_a_file_larger_than_half_the_available_memory_is_not_mapped(tmp_path, monkeypatch):
    fill(tmp_path / "s", 2_000, merges="manual")
    with fpstore.open(tmp_path / "s", readonly=True) as s:
        used = used_bytes(s)
        monkeypatch.setattr(prefault, "available_bytes", lambda: 2 * used - 4096)
        assert s._storage.populate() == 0
        monkeypatch.setattr(prefault, "available_bytes", lambda: 2 * used)
        assert s._storage.populate() == used


def test_without_proc_maps_populate_does_nothing_and_warm_reads_the_same(tmp_path, monkeypatch):
    fill(tmp_path / "s", 2_000, merges="manual")
    with fpstore.open(tmp_path / "s", readonly=True) as s:
        read = s.warm()
    monkeypatch.setattr(prefault, "_MAPS", str(tmp_path / "no-such-maps"))
    with fpstore.open(tmp_path / "s", readonly=True) as s:
        assert s._storage.populate() == 0
        assert mapped_bytes(s) < used_bytes(s) // 2
        assert s.warm() == read > 0

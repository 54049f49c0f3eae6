"""The integer key column (header feature ``int_key_column``): a bulk load of integer keys
stores them bit-packed and read in place, where older stores keep zstd key blocks; both layouts
read back what was written, and a damaged column raises CorruptionError."""

from __future__ import annotations

import os
import shutil

import lmdb
import msgpack
import numpy as np
import pytest

import fpstore
from fpstore.errors import CorruptionError, FormatError, InputError
from fpstore.index import tiers
from fpstore.store import header as header_mod
from fpstore.store.storage import MAX_DBS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OLD_LAYOUT = os.path.join(ROOT, "tests", "golden_stores", "v1-default")  # made before the column


def _segments(store: fpstore.Store) -> list[tiers.SegmentMeta]:
    with store._storage.read() as txn:
        return list(store._cat.state(txn).segs)


def _load(store: fpstore.Store, keys: np.ndarray, seed: int) -> np.ndarray:
    fps = np.random.default_rng(seed).integers(0, 2**64 - 1, len(keys), dtype=np.uint64, endpoint=True)
    store.bulk_load(keys, fps, pipeline_id=store.pipeline.id)
    return fps


def _check_reads(store: fpstore.Store, keys: list[int], fps: np.ndarray) -> None:
    for key, fp in zip(keys, fps.tolist()):
        doc = store.get(key)
        assert doc is not None and doc.key == key and doc.fingerprint == fp
        assert key in [m.key for m in store.query(fingerprint=fp, pipeline_id=store.pipeline.id)]
        with store.reader() as r:
            assert key in [m.key for m in r.query(fingerprint=fp, pipeline_id=store.pipeline.id)]
    ids = [store.get(key).id for key in keys]
    assert store.keys_of(ids) == keys
    assert store.keys_of(ids[::-1]) == keys[::-1]
    assert set(keys) <= set(store)


# Sequential keys (narrow column), the whole uint64 range (a 64-bit column, values at both ends)
# and one key (width 0).
CASES = {
    "sequential": np.arange(10_000, 13_000, dtype=np.uint64),
    "full-range": np.array([0, 1, 2**63 - 1, 2**63, 2**64 - 2, 2**64 - 1] + list(range(5, 500)), dtype=np.uint64),
    "one": np.array([2**64 - 1], dtype=np.uint64),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_new_store_keeps_bulk_loaded_integer_keys_in_a_packed_column(tmp_path, case):
    keys = CASES[case]
    with fpstore.open(tmp_path / "s", k=3) as store:
        assert "int_key_column" in store.header["features"]
        fps = _load(store, keys, 1)
        (seg,) = _segments(store)
        assert seg.key_blocks == 0 and seg.int_keys is not None and seg.int_keys.count == len(keys)
        _check_reads(store, keys.tolist(), fps)
        assert sorted(store) == sorted(keys.tolist())
    with fpstore.open(tmp_path / "s", readonly=True) as store:
        _check_reads(store, keys.tolist(), fps)
        assert store.verify() == []


def test_text_keys_keep_key_blocks_in_a_new_store(tmp_path):
    keys = [f"k{i}" for i in range(700)]
    with fpstore.open(tmp_path / "s", k=3) as store:
        fps = np.random.default_rng(2).integers(0, 2**63, len(keys), dtype=np.uint64)
        store.bulk_load(keys, fps, pipeline_id=store.pipeline.id)
        (seg,) = _segments(store)
        assert seg.int_keys is None and seg.key_blocks == 3
        assert store.get("k699").fingerprint == int(fps[699])


def test_a_store_made_before_the_column_keeps_writing_key_blocks(tmp_path):
    path = str(tmp_path / "old")
    shutil.copytree(OLD_LAYOUT, path, ignore=shutil.ignore_patterns("reference.json"))
    keys = np.arange(50_000, 50_600, dtype=np.uint64)
    with fpstore.open(path) as store:
        assert "int_key_column" not in store.header["features"]
        fps = _load(store, keys, 3)
        new = _segments(store)[-1]
        # An older build must still read this store: its new segment is in the layout it knows.
        assert new.int_keys is None and new.key_blocks == 3
        _check_reads(store, keys.tolist(), fps)
    with fpstore.open(path, readonly=True) as store:
        assert "int_key_column" not in store.header["features"]


def test_a_build_that_does_not_know_the_column_refuses_the_store(tmp_path, monkeypatch):
    fpstore.open(tmp_path / "s").close()
    monkeypatch.setattr(header_mod, "KNOWN_FEATURES", frozenset({"sketch"}))
    with pytest.raises(FormatError, match="int_key_column"):
        fpstore.open(tmp_path / "s")


def _edit_state(path: str, edit) -> None:
    env = lmdb.open(path, subdir=True, lib_version=0, max_dbs=MAX_DBS, map_size=0)
    try:
        meta = env.open_db(b"meta")
        with env.begin(write=True) as txn:
            state = msgpack.unpackb(bytes(txn.get(tiers.STATE_KEY, db=meta)), raw=False)
            edit(state["segs"][0])
            state.pop("crc")  # forged as a record written before the CRC, so the checks behind it are reached
            txn.put(tiers.STATE_KEY, msgpack.packb(state, use_bin_type=True), db=meta)
    finally:
        env.close()


def _damage_blobs(path: str, prefix: bytes, damage) -> None:
    """Replace every blob whose name starts with ``prefix`` by ``damage(value)``, or delete it
    when that gives None."""
    env = lmdb.open(path, subdir=True, lib_version=0, max_dbs=MAX_DBS, map_size=0)
    try:
        blobs = env.open_db(b"blobs")
        with env.begin(write=True) as txn:
            items = [(bytes(k), bytes(v)) for k, v in txn.cursor(db=blobs) if bytes(k).startswith(prefix)]
            assert items
            for name, value in items:
                damaged = damage(value)
                if damaged is None:
                    txn.delete(name, db=blobs)
                else:
                    txn.put(name, damaged, db=blobs)
    finally:
        env.close()


DAMAGE = {
    "blocks-and-column": lambda seg: seg.update(key_blocks=1),
    "count-differs": lambda seg: seg["int_keys"].update(count=seg["count"] + 1),
    "width-above-64": lambda seg: seg["int_keys"].update(width=65),
    "prefix-elsewhere": lambda seg: seg["int_keys"].update(prefix=b"elsewhere"),
    "not-a-map": lambda seg: seg.update(int_keys=[1, 2]),
    "values-past-2**64": lambda seg: seg["int_keys"].update(min=2**64 - 2),
}


@pytest.fixture
def column_store(tmp_path):
    path = str(tmp_path / "s")
    keys = np.arange(10**6, 10**6 + 2_000, dtype=np.uint64)
    with fpstore.open(path, k=3) as store:
        fps = _load(store, keys, 4)
        seg = _segments(store)[0]
    return path, keys, fps, seg


def _exercise(path: str, fps: np.ndarray) -> None:
    with fpstore.open(path, readonly=True) as store:
        pid = store.pipeline.id
        for fp in fps[:50].tolist():
            store.query(fingerprint=fp, pipeline_id=pid)
        store.keys_of(list(range(1, 51)))
        list(store)


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_key_column_record_raises_corruption_error(column_store, damage):
    path, _, fps, _ = column_store
    _edit_state(path, DAMAGE[damage])
    with pytest.raises(CorruptionError):
        _exercise(path, fps)


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_a_damaged_key_column_chunk_raises_corruption_error(column_store, damage):
    path, _, fps, seg = column_store
    _damage_blobs(path, seg.keys + b"P", (lambda v: None) if damage == "missing" else (lambda v: v[: len(v) // 3]))
    with pytest.raises(CorruptionError):
        _exercise(path, fps)


def test_keys_of_a_batch_mixes_columns_records_and_tombstones_like_one_key_at_a_time(tmp_path):
    """keys_of of batches (read from the integer key columns in one pass when every id lies in
    them) equals the keys looked up one id at a time, over two bulk loads (two columns), added
    documents (records, not columns), duplicate and unsorted ids; a tombstoned id is refused as
    the one-at-a-time path refuses it."""
    rng = np.random.default_rng(3)
    with fpstore.open(tmp_path / "s", k=3) as store:
        pid = store.pipeline.id
        _load(store, np.arange(0, 3000, dtype=np.uint64) * np.uint64(7), 1)
        _load(store, np.arange(2**64 - 900, 2**64 - 1, dtype=np.uint64), 2)
        for i in range(40):
            store.add(f"added-{i}", fingerprint=int(rng.integers(0, 2**63)), pipeline_id=pid)
        ids = sorted(d.id for d in store.documents())
        one_by_one = {i: store.keys_of([i])[0] for i in ids}
        bulk_ids = [i for i in ids if isinstance(one_by_one[i], int)]
        for batch in (
            list(rng.choice(bulk_ids, 300)),  # columns only: the one-pass path, duplicates included
            list(rng.choice(ids, 300)),  # added documents too: the general path
            bulk_ids[:20][::-1] + bulk_ids[-20:],  # both columns, unsorted
        ):
            batch = [int(i) for i in batch]
            assert store.keys_of(batch) == [one_by_one[i] for i in batch]
            assert store.keys_of(np.array(batch, dtype=np.int64)) == [one_by_one[i] for i in batch]
        victim = bulk_ids[5]
        assert store.delete(one_by_one[victim])
        with pytest.raises(InputError, match="no live document"):
            store.keys_of([victim])
        for n in (30, 100):  # one at a time, and the numpy pass
            with pytest.raises(InputError, match="no live document"):
                store.keys_of(bulk_ids[:n])

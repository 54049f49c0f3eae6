"""Damaged stores on the read and write paths: damage that decodes (a flipped bit a run chunk's
structure cannot show, a table naming the wrong document) must raise CorruptionError before a
read answers with another document or a write acts on one. Quick tier: small stores, no kill
harness (those are in test_reliability.py)."""

from __future__ import annotations

import numpy as np
import pytest

import fpstore
from fpstore.errors import CorruptionError
from tests.test_reliability import _edit


def test_a_keys_entry_naming_another_document_is_damage_not_that_document(tmp_path):
    """The keys table maps a key to its document id. An entry damaged into another document's id
    made get('a') return 'b', and delete('a') delete 'b'; the record holds its key, so the lookup
    checks it."""
    path = str(tmp_path / "s")
    with fpstore.open(path, k=5) as s:
        pid = s.pipeline.id
        s.add_many(["a", "b"], fingerprints=np.array([0x1111, 0xFFFF0000FFFF0000], np.uint64), pipeline_id=pid)
    ids: dict[bytes, bytes] = {}
    _edit(path, b"keys", lambda k: k in (b"sa", b"sb"), lambda v: ids.setdefault(v, v))
    (ida, idb) = ids
    assert _edit(path, b"keys", lambda k: k == b"sa", lambda v: idb) == 1
    with fpstore.open(path) as s:
        with pytest.raises(CorruptionError, match="keys table"):
            s.get("a")
        with pytest.raises(CorruptionError):
            _ = "a" in s
        with pytest.raises(CorruptionError):
            s.delete("a")
        with pytest.raises(CorruptionError):
            s.add("a", fingerprint=7, pipeline_id=pid)
        assert s.get("b").key == "b" and s.get("b").fingerprint == 0xFFFF0000FFFF0000


def test_a_next_id_damaged_below_a_stored_id_is_refused_before_an_add_overwrites_it(tmp_path):
    """A flipped bit in meta/next_id (11 -> 9) made the next add take id 9, an existing
    document's, and overwrite its record."""
    import struct

    path = str(tmp_path / "s")
    fps = np.random.default_rng(1).integers(0, 2**64, 10, dtype=np.uint64)
    with fpstore.open(path, k=5) as s:
        pid = s.pipeline.id
        s.add_many([f"k{i}" for i in range(10)], fingerprints=fps, pipeline_id=pid)
        s.delete("k0")
        s.delete("k1")
    assert _edit(path, b"meta", lambda k: k == b"next_id", lambda v: struct.pack(">Q", struct.unpack(">Q", v)[0] ^ 0b10)) == 1
    with fpstore.open(path) as s:
        for add in (lambda: s.add("new", fingerprint=7, pipeline_id=pid), lambda: s.add_many(["new"], fingerprints=[7], pipeline_id=pid)):
            with pytest.raises(CorruptionError, match="next"):
                add()
        assert s.get("k8").key == "k8" and s.get("k8").fingerprint == int(fps[8])


def test_a_next_id_damaged_below_a_bulk_segment_is_refused(tmp_path):
    import struct

    path = str(tmp_path / "s")
    with fpstore.open(path, k=5) as s:
        pid = s.pipeline.id
        s.bulk_load(np.arange(100, dtype=np.uint64), np.arange(100, dtype=np.uint64) * 977, pipeline_id=pid)
    assert _edit(path, b"meta", lambda k: k == b"next_id", lambda v: struct.pack(">Q", 50)) == 1
    with fpstore.open(path) as s:
        with pytest.raises(CorruptionError, match="next"):
            s.add("new", fingerprint=7, pipeline_id=pid)
        assert s.get(50).key == 50


def test_a_key_hash_run_of_another_length_than_its_segment_is_damage(tmp_path):
    """A segment's key-hash run (its keys' sorted hashes, how get() finds a bulk-loaded key) taken
    from a segment of another size made keys vanish from get() while queries still named them, and
    a re-add of such a key store it twice."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    fa = np.random.default_rng(1).integers(0, 2**64, 20000, dtype=np.uint64)
    with fpstore.open(a, k=5) as s:
        pid = s.pipeline.id
        s.bulk_load(np.arange(20000, dtype=np.uint64) + 10**6, fa, pipeline_id=pid)
    with fpstore.open(b, k=5) as s:
        s.bulk_load(np.arange(5000, dtype=np.uint64) + 2 * 10**6, fa[:5000] ^ np.uint64(1), pipeline_id=pid)
    prefix = b"s\x00\x00\x00\x01h"
    import lmdb

    env = lmdb.open(b, subdir=True, max_dbs=256, readonly=True, lock=False)
    with env.begin(db=env.open_db(b"blobs", create=False)) as txn:
        theirs = {bytes(k): bytes(v) for k, v in txn.cursor() if bytes(k).startswith(prefix)}
    env.close()
    assert theirs
    env = lmdb.open(a, subdir=True, max_dbs=256)
    with env.begin(write=True, db=env.open_db(b"blobs")) as txn:
        for k, v in theirs.items():
            assert txn.get(k) is not None  # the same names in both stores: a swap, not an addition
            txn.put(k, v)
    env.close()
    with fpstore.open(a) as s:
        with pytest.raises(CorruptionError):
            s.get(10**6 + 5)
        with pytest.raises(CorruptionError):
            s.add(10**6 + 5, fingerprint=int(fa[5]) ^ 1, pipeline_id=pid)
        assert len(s) == 20000


def test_a_segment_base_past_the_ids_a_store_gives_is_damage(tmp_path):
    """A state record whose segment starts near 2**64 made get() and verify() raise struct.error
    and clusters() OverflowError: a segment's ids must lie in 1..2**63-1, as a run's do."""
    import msgpack

    path = str(tmp_path / "s")
    fps = np.random.default_rng(1).integers(0, 2**64, 2000, dtype=np.uint64)
    with fpstore.open(path, k=5) as s:
        pid = s.pipeline.id
        s.bulk_load(np.arange(2000, dtype=np.uint64), fps, pipeline_id=pid)

    def damage(raw: bytes) -> bytes:
        state = msgpack.unpackb(raw, raw=False)
        state["segs"][0]["base"] = (1 << 64) - 10
        state.pop("crc")  # forged as a record written before the CRC, so the check behind it is reached
        return msgpack.packb(state, use_bin_type=True)

    assert _edit(path, b"meta", lambda k: k == b"state", damage) == 1
    with fpstore.open(path, readonly=True) as s:
        for call in (lambda: s.get(5), lambda: s.verify(), lambda: s.clusters(), lambda: list(s.documents())):
            with pytest.raises(CorruptionError):
                call()


@pytest.mark.parametrize("table", [0, 1])
def test_a_flipped_bit_in_a_run_chunk_is_found_by_its_checksum_on_every_read_path(tmp_path, table):
    """A flipped remainder bit decodes to keys still sorted and inside their block's bounds, which
    only the chunk's CRC-32 tells from the stored ones. Every read of a run chunk checks it the
    first time this process reads that chunk: before, a flip in table 0 changed the fingerprints
    get() and documents() gave and made query_many's merge miss the documents, silently."""
    import lmdb

    path = str(tmp_path / "s")
    n = 20000
    fps = np.random.default_rng(1).integers(0, 2**64, n, dtype=np.uint64)
    with fpstore.open(path, k=3) as s:
        pid = s.pipeline.id
        s.bulk_load(np.arange(n, dtype=np.uint64), fps, pipeline_id=pid)
    import msgpack

    env = lmdb.open(path, subdir=True, max_dbs=256)
    blobs, meta = env.open_db(b"blobs"), env.open_db(b"meta")
    with env.begin(write=True, db=blobs) as txn:
        runs = msgpack.unpackb(bytes(txn.get(b"state", db=meta)), raw=False)["runs"]
        name = runs[0]["tables"][table] + b"C" + (0).to_bytes(4, "big")
        raw = txn.get(name)
        assert raw is not None, name
        value = bytearray(raw)
        value[len(value) // 2] ^= 0b10  # a remainder bit, in the middle of the chunk
        txn.put(name, bytes(value))
    env.close()
    calls = {
        "query": lambda s: [s.query(fingerprint=int(fp), pipeline_id=pid, k=3) for fp in fps[::50]],
        "query_many small": lambda s: s.query_many(fps[::50], pipeline_id=pid, k=3),
        "query_many merge": lambda s: s.query_many(np.resize(fps, 50_000), pipeline_id=pid, k=3),
        "documents": lambda s: list(s.documents()),
        "get": lambda s: [s.get(int(i)) for i in range(0, n, 50)],
        "warm": lambda s: s.warm(),
        "pairs": lambda s: s.near_duplicate_pairs(),
    }
    if table:
        del calls["documents"], calls["get"]  # table 1 is read by queries and pairs only
    for what, call in calls.items():
        with fpstore.open(path, readonly=True) as s:  # each open checks a chunk on its first read
            with pytest.raises(CorruptionError, match="CRC"):
                call(s)
            assert what


def test_a_flipped_bit_in_the_state_record_is_found_by_its_checksum(tmp_path):
    """The state record names every run and segment with their id bases and key columns: one
    flipped bit that still decodes (a segment's integer-key minimum 1 -> 0) re-keyed every
    bulk-loaded document silently. The record carries a CRC-32 of the rest of it."""
    path = str(tmp_path / "s")
    n = 2000
    fps = np.random.default_rng(1).integers(0, 2**64, n, dtype=np.uint64)
    with fpstore.open(path, k=3) as s:
        pid = s.pipeline.id
        s.bulk_load(np.arange(1, n + 1, dtype=np.uint64), fps, pipeline_id=pid)
        assert s.query(fingerprint=int(fps[100]), pipeline_id=pid, k=0)[0].key == 101

    def flip(raw: bytes) -> bytes:
        value = bytearray(raw)
        at = value.index(b"\xa3min", value.index(b"int_keys")) + 4  # the key column's minimum: 1
        assert value[at] == 1
        value[at] ^= 1
        return bytes(value)

    assert _edit(path, b"meta", lambda k: k == b"state", flip) == 1
    with fpstore.open(path, readonly=True) as s:
        with pytest.raises(CorruptionError, match="CRC"):
            s.query(fingerprint=int(fps[100]), pipeline_id=pid, k=0)


def test_a_state_record_without_a_checksum_still_reads(tmp_path):
    """Stores written before the state record carried its CRC-32 open as they are."""
    import msgpack

    path = str(tmp_path / "s")
    with fpstore.open(path, k=3) as s:
        pid = s.pipeline.id
        s.bulk_load(np.arange(100, dtype=np.uint64), np.arange(100, dtype=np.uint64) * 7919, pipeline_id=pid)

    def drop(raw: bytes) -> bytes:
        obj = msgpack.unpackb(raw, raw=False)
        assert "crc" in obj
        del obj["crc"]
        return msgpack.packb(obj, use_bin_type=True)

    assert _edit(path, b"meta", lambda k: k == b"state", drop) == 1
    with fpstore.open(path) as s:
        assert s.query(fingerprint=7919 * 5, pipeline_id=pid, k=0)[0].key == 5
        s.add(1000, fingerprint=3, pipeline_id=pid)
        s.compact()
        assert len(s) == 101


def test_a_flipped_bit_in_a_key_hash_chunk_is_found_by_a_small_batch_add(tmp_path):
    """A small batch looks its keys up block by block (CodecRun.positions' few-keys path), which
    read the segment's key-hash chunk unchecked: a re-add of a stored key stored it twice."""
    import lmdb

    path = str(tmp_path / "s")
    n = 20000
    with fpstore.open(path, k=3) as s:
        pid = s.pipeline.id
        s.bulk_load(np.arange(n, dtype=np.uint64), np.random.default_rng(1).integers(0, 2**64, n, dtype=np.uint64), pipeline_id=pid)
    env = lmdb.open(path, subdir=True, max_dbs=256)
    with env.begin(write=True, db=env.open_db(b"blobs")) as txn:
        name = b"s\x00\x00\x00\x01hC\x00\x00\x00\x00"  # segment 1's key hashes, chunk 0
        value = bytearray(txn.get(name))
        value[len(value) // 2] ^= 0b10
        txn.put(name, bytes(value))
    env.close()
    with fpstore.open(path) as s:
        with pytest.raises(CorruptionError, match="CRC"):
            for key in range(0, n, 97):  # keys whose hashes sit in every block of the chunk
                s.add_many([key], fingerprints=[5], pipeline_id=pid)
        assert len(s) <= n


def test_a_next_id_damaged_below_a_stored_id_is_refused_by_add_each(tmp_path):
    """add_each writes its documents through the ordered path, which read next_id unchecked."""
    import struct

    path = str(tmp_path / "s")
    with fpstore.open(path, k=5) as s:
        pid = s.pipeline.id
        s.add_many([f"k{i}" for i in range(10)], fingerprints=list(range(10)), pipeline_id=pid)
    assert _edit(path, b"meta", lambda k: k == b"next_id", lambda v: struct.pack(">Q", 3)) == 1
    with fpstore.open(path) as s:
        with pytest.raises(CorruptionError, match="next"):
            s.add_each(["x", "y"], fingerprints=[2**40, 2**50], pipeline_id=pid)
        assert s.get("k2").key == "k2"

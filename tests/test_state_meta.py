"""The typed state record (fpstore.index.meta) encodes to the bytes the dict records gave."""

from __future__ import annotations

import zlib

import msgpack
import numpy as np
import pytest

from fpstore.errors import CorruptionError
from fpstore.index import tiers
from fpstore.index.meta import PackedColumn, RunMeta, SegmentMeta, State


def _old_bytes(runs: list[dict], segs: list[dict], next_run: int, next_seg: int) -> bytes:
    """The encoder as it was before the typed records: raw dicts through msgpack."""
    return msgpack.packb({"v": 1, "runs": runs, "segs": segs, "next_run": next_run, "next_seg": next_seg}, use_bin_type=True)


def _cases():
    yield [], [], 1, 1
    last = (1 << 63) - 5  # the largest base of five documents: ids end at 2**63 - 1
    for base, low, width in ((1, 0, 0), (1 << 40, 7, 33), (last, 0, 64)):
        _, col = tiers.packed_blobs(tiers.run_prefix(9, 0xFFFF), np.array([low, low + (1 << width) - 1], np.uint64) if width else np.zeros(0, np.uint64))
        old_col = {"prefix": col.prefix, "count": col.count, "min": col.min, "width": col.width, "per_chunk": col.per_chunk}
        tables = [tiers.seg_prefix(3, b"f")] + [tiers.run_prefix(2, t) for t in range(1, 4)]
        runs = [
            {"id": 2, "count": 5, "tables": tables, "ids": {"base": base}},
            {"id": 9, "count": col.count, "tables": [tiers.run_prefix(9, t) for t in range(4)], "ids": old_col},
        ]
        ords = {"prefix": tiers.seg_prefix(3, b"o"), "count": 5, "min": 0, "width": 3, "per_chunk": tiers.PACK_CHUNK}
        segs = [{"id": 3, "base": base, "count": 5, "fps": tables[0], "hashes": tiers.seg_prefix(3, b"h"),
                 "ordinals": ords, "keys": tiers.seg_prefix(3, b"k"), "key_blocks": 1}]
        yield runs, segs, 10, 4


@pytest.mark.parametrize("case", list(_cases()))
def test_typed_state_encodes_as_the_dict_state(case):
    runs, segs, next_run, next_seg = case
    old = _old_bytes(runs, segs, next_run, next_seg)
    typed = State(
        tuple(
            RunMeta(r["id"], r["count"], tuple(r["tables"]), ids_base=r["ids"]["base"]) if "base" in r["ids"]
            else RunMeta(r["id"], r["count"], tuple(r["tables"]), ids=PackedColumn(**r["ids"]))
            for r in runs
        ),
        tuple(SegmentMeta(s["id"], s["base"], s["count"], s["fps"], s["hashes"], PackedColumn(**s["ordinals"]), s["keys"], s["key_blocks"]) for s in segs),
        next_run, next_seg,
    )
    # The record as before, with a CRC-32 of it appended as one more key (readers before it ignore it).
    obj = msgpack.unpackb(old, raw=False)
    new = msgpack.packb({**obj, "crc": zlib.crc32(old)}, use_bin_type=True)
    assert typed.to_bytes() == new
    assert State(runs, segs, next_run, next_seg).to_bytes() == new  # dict records (transitional)
    decoded = State.from_bytes(old, 4)  # a store written before the CRC
    assert decoded == typed and decoded.to_bytes() == new and State.from_bytes(new, 4) == typed
    for rec, meta in zip(runs + segs, decoded.runs + decoded.segs):
        assert all(meta[k] == v for k, v in rec.items())  # transitional map access


def test_decoder_refuses_what_it_refused():
    raw = _old_bytes([{"id": 1, "count": 2, "tables": [b"a", b"b", b"c", b"d"],
                       "ids": {"prefix": b"p", "count": 3, "min": 0, "width": 2, "per_chunk": 8}}], [], 2, 1)
    with pytest.raises(CorruptionError, match="id column count differs"):
        State.from_bytes(raw, 4)
    with pytest.raises(CorruptionError, match="tables do not match"):
        State.from_bytes(_old_bytes([{"id": 1, "count": 2, "tables": [b"a"], "ids": {"base": 1}}], [], 2, 1), 4)
    with pytest.raises(CorruptionError, match="unknown version"):
        State.from_bytes(msgpack.packb({"v": 2}), 4)

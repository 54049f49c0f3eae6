"""Typed metadata of the immutable tier: packed columns, runs, key segments and the state record.

One encoder (:meth:`State.to_bytes`) and one decoder (:meth:`State.from_bytes`) for ``meta/state``
(see docs/format.md, "State, runs and key segments"), in the spirit of LevelDB's FileMetaData and
VersionEdit: the rest of the code reads attributes, never msgpack maps. The encoded bytes are the
format's: map keys in the order below, ints and bytes as msgpack gives them.

Every record is a frozen dataclass. ``record[name]`` (the old dict key) is transitional, for
tests that read state records as maps; production code uses attributes.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgpack

from fpstore.errors import CorruptionError

__all__ = ["KEY_BLOCK", "PackedColumn", "RunMeta", "SegmentMeta", "State"]

KEY_BLOCK = 256  # keys per key block: a lookup decompresses one block (~10 µs at this size)
_M64 = 0xFFFFFFFFFFFFFFFF


def _check(cond: bool, what: str) -> None:
    if not cond:
        raise CorruptionError(f"store state: {what}")


def _is_int(v: object, lo: int = 0, hi: int = _M64) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


class _Record:
    """Transitional read-only map access by the old dict keys (``rec["count"]``)."""

    def to_dict(self) -> dict[str, Any]:  # pragma: no cover - overridden
        raise NotImplementedError

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __contains__(self, key: str) -> bool:
        return key in self.to_dict()


@dataclass(frozen=True)
class PackedColumn(_Record):
    """A bit-packed uint64 column: ``count`` values (value − ``min``) of ``width`` bits each,
    ``per_chunk`` values per blob ``prefix + "P" + u32 chunk``."""

    prefix: bytes
    count: int
    min: int
    width: int
    per_chunk: int

    def to_dict(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "count": self.count, "min": self.min, "width": self.width, "per_chunk": self.per_chunk}

    @classmethod
    def decode(cls, rec: object, count: int, what: str) -> PackedColumn:
        """A packed column record owned by a record of ``count`` entries, checked."""
        _check(isinstance(rec, dict), f"{what} is not a map")
        assert isinstance(rec, dict)
        _check(rec.get("count") == count, f"{what} count differs from its owner's")
        _check(_is_int(rec.get("min")) and _is_int(rec.get("width"), 0, 64), f"{what} has a bad min or width")
        _check(_is_int(rec.get("per_chunk"), 1, 1 << 30), f"{what} has a bad chunk size")
        return cls(rec["prefix"], rec["count"], rec["min"], rec["width"], rec["per_chunk"])

    @classmethod
    def coerce(cls, rec: PackedColumn | Mapping[str, Any]) -> PackedColumn:
        if isinstance(rec, PackedColumn):
            return rec
        return cls(rec["prefix"], rec["count"], rec["min"], rec["width"], rec["per_chunk"])


@dataclass(frozen=True)
class RunMeta(_Record):
    """A run: ``count`` entries in one codec run per table (``tables``: blob prefixes), and the
    document ids of table 0's entries: ``ids_base + position`` (a bulk load), else the packed
    column ``ids`` (a flush, merge or compaction). Exactly one of the two is set."""

    id: int
    count: int
    tables: tuple[bytes, ...]
    ids_base: int | None = None
    ids: PackedColumn | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.tables, tuple):
            object.__setattr__(self, "tables", tuple(self.tables))

    def ids_record(self) -> dict[str, Any]:
        if self.ids is not None:
            return self.ids.to_dict()
        return {"base": self.ids_base}

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "count": self.count, "tables": list(self.tables), "ids": self.ids_record()}

    @classmethod
    def decode(cls, rec: object, ntables: int) -> RunMeta:
        _check(isinstance(rec, dict), "a run record is not a map")
        assert isinstance(rec, dict)
        _check(_is_int(rec.get("id"), 0, (1 << 32) - 1) and _is_int(rec.get("count"), 0, 1 << 40), "a run has a bad id or count")
        tables = rec.get("tables")
        _check(
            isinstance(tables, list) and len(tables) == ntables and all(isinstance(p, bytes) for p in tables),
            "a run's tables do not match the design",
        )
        assert isinstance(tables, list)
        ids = rec.get("ids")
        _check(isinstance(ids, dict), "a run's ids record is not a map")
        assert isinstance(ids, dict)
        if "base" in ids:
            _check(_is_int(ids["base"]), "a run's id base is bad")
            return cls(rec["id"], rec["count"], tuple(tables), ids_base=ids["base"])
        _check(isinstance(ids.get("prefix"), bytes), "a run's id column has no prefix")
        _check(_is_int(ids.get("min")), "a run's id column has a bad minimum")
        column = PackedColumn.decode(ids, rec["count"], "a run's id column")
        return cls(rec["id"], rec["count"], tuple(tables), ids=column)

    @classmethod
    def coerce(cls, rec: RunMeta | Mapping[str, Any]) -> RunMeta:
        """Transitional: a run from its old dict form, unchecked (tests that forge records)."""
        if isinstance(rec, RunMeta):
            return rec
        ids = rec["ids"]
        if "base" in ids:
            return cls(rec["id"], rec["count"], tuple(rec["tables"]), ids_base=ids["base"])
        return cls(rec["id"], rec["count"], tuple(rec["tables"]), ids=PackedColumn.coerce(ids))


@dataclass(frozen=True)
class SegmentMeta(_Record):
    """A key segment: documents ``base .. base + count - 1``; blob prefixes of their
    fingerprints (``fps``), sorted key hashes (``hashes``) and keys, and the packed column
    mapping each sorted hash to its ordinal (``ordinals``). Keys are ``key_blocks`` zstd blocks
    under ``keys``, or, for integer keys in a store with the ``int_key_column`` feature, the
    packed column ``int_keys`` (under ``keys`` too, with ``key_blocks`` 0)."""

    id: int
    base: int
    count: int
    fps: bytes
    hashes: bytes
    ordinals: PackedColumn
    keys: bytes
    key_blocks: int
    int_keys: PackedColumn | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "base": self.base,
            "count": self.count,
            "fps": self.fps,
            "hashes": self.hashes,
            "ordinals": self.ordinals.to_dict(),
            "keys": self.keys,
            "key_blocks": self.key_blocks,
            **({"int_keys": self.int_keys.to_dict()} if self.int_keys is not None else {}),
        }

    @classmethod
    def decode(cls, rec: object) -> SegmentMeta:
        _check(isinstance(rec, dict), "a segment record is not a map")
        assert isinstance(rec, dict)
        _check(
            _is_int(rec.get("id"), 0, (1 << 32) - 1) and _is_int(rec.get("base")) and _is_int(rec.get("count"), 0, 1 << 40),
            "a segment has a bad id, base or count",
        )
        _check(
            rec["count"] == 0 or 1 <= rec["base"] <= (1 << 63) - rec["count"],
            "a segment's document ids lie outside 1..2**63-1, the ids a store gives",
        )
        _check(all(isinstance(rec.get(p), bytes) for p in ("fps", "hashes", "keys")), "a segment lacks a blob prefix")
        _check(_is_int(rec.get("key_blocks"), 0, 1 << 32), "a segment has a bad key block count")
        int_keys = None
        if "int_keys" in rec:
            _check(rec["key_blocks"] == 0, "a segment has both key blocks and an integer key column")
            int_keys = PackedColumn.decode(rec["int_keys"], rec["count"], "a segment's integer keys")
            _check(int_keys.prefix == rec["keys"], "a segment's integer keys are not under its key prefix")
        else:
            _check(rec["count"] <= rec["key_blocks"] * KEY_BLOCK, "a segment claims more documents than its key blocks hold")
        _check(isinstance(rec.get("ordinals"), dict) and isinstance(rec["ordinals"].get("prefix"), bytes), "a segment's ordinals are bad")
        ordinals = PackedColumn.decode(rec["ordinals"], rec["count"], "a segment's ordinals")
        return cls(rec["id"], rec["base"], rec["count"], rec["fps"], rec["hashes"], ordinals, rec["keys"], rec["key_blocks"], int_keys)

    @classmethod
    def coerce(cls, rec: SegmentMeta | Mapping[str, Any]) -> SegmentMeta:
        """Transitional: a segment from its old dict form, unchecked (tests that forge records)."""
        if isinstance(rec, SegmentMeta):
            return rec
        return cls(
            rec["id"],
            rec["base"],
            rec["count"],
            rec["fps"],
            rec["hashes"],
            PackedColumn.coerce(rec["ordinals"]),
            rec["keys"],
            rec["key_blocks"],
            PackedColumn.coerce(rec["int_keys"]) if rec.get("int_keys") is not None else None,
        )


@dataclass(frozen=True)
class State:
    """The live runs and key segments, as stored in ``meta/state``.

    ``State(...)`` also accepts runs and segments in their old dict form (transitional, for
    tests that forge records); they are converted unchecked, and checked when decoded.
    """

    runs: tuple[RunMeta, ...] = ()
    segs: tuple[SegmentMeta, ...] = ()
    next_run: int = 1
    next_seg: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "runs", tuple(RunMeta.coerce(r) for r in self.runs))
        object.__setattr__(self, "segs", tuple(SegmentMeta.coerce(s) for s in self.segs))

    @classmethod
    def empty(cls) -> State:
        return cls((), ())

    def to_bytes(self) -> bytes:
        body = {
            "v": 1,
            "runs": [r.to_dict() for r in self.runs],
            "segs": [s.to_dict() for s in self.segs],
            "next_run": self.next_run,
            "next_seg": self.next_seg,
        }
        # A CRC-32 of the map without it: a flipped bit that still decodes would otherwise move
        # a run's or a segment's ids or keys silently. Readers that predate it ignore the key.
        body["crc"] = zlib.crc32(msgpack.packb(body, use_bin_type=True))
        return msgpack.packb(body, use_bin_type=True)

    @classmethod
    def from_bytes(cls, raw: bytes | None, ntables: int) -> State:
        if raw is None:
            return cls.empty()
        try:
            obj = msgpack.unpackb(bytes(raw), raw=False, strict_map_key=True, max_bin_len=1 << 16, max_array_len=1 << 20)
        except Exception as exc:
            raise CorruptionError(f"store state does not decode: {exc}") from None
        _check(isinstance(obj, dict) and obj.get("v") == 1, "unknown version")
        if "crc" in obj:  # written since the record carries it; older stores' records have none
            crc = obj.pop("crc")
            _check(_is_int(crc) and crc == zlib.crc32(msgpack.packb(obj, use_bin_type=True)), "the record fails its CRC-32")
        rs, ss = obj.get("runs"), obj.get("segs")
        _check(isinstance(rs, list) and isinstance(ss, list), "runs and segs must be lists")
        _check(_is_int(obj.get("next_run"), 1, 1 << 32) and _is_int(obj.get("next_seg"), 1, 1 << 32), "bad counters")
        runs = tuple(RunMeta.decode(rec, ntables) for rec in rs)
        segs = tuple(SegmentMeta.decode(rec) for rec in ss)
        return cls(runs, segs, obj["next_run"], obj["next_seg"])

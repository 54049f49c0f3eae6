"""The ``meta`` table: the store header (format, features, pipeline, design), the id counter and
document count, and checkpoints. Every value read back is untrusted and checked before use."""

from __future__ import annotations

import platform
import struct
import time
from typing import Any

import lmdb
import msgpack

from fpstore._version import __version__ as _fpstore_version
from fpstore.errors import CorruptionError, DesignError, FormatError, InputError, NotAStoreError, PipelineMismatchError
from fpstore.fingerprint.image import ImagePipeline
from fpstore.fingerprint.kinds import AnyPipeline, is_image, pipeline_from_config
from fpstore.fingerprint.pipeline import IdfTable
from fpstore.index.design import AUTO_DESIGNS, Design
from fpstore.limits import MAX_CHECKPOINT_BYTES, MAX_CHECKPOINT_NAME_BYTES, READ_MAX_CHECKPOINT_BYTES

__all__ = [
    "BASE_DBS",
    "CHECKPOINT_PREFIX",
    "FORMAT_VERSION",
    "H_COUNT",
    "H_HEADER",
    "H_IDF",
    "H_NEXT_ID",
    "KNOWN_FEATURES",
    "features_of",
    "has_int_key_column",
    "column_dbs",
    "MAGIC",
    "U64",
    "checkpoint_key",
    "decode_checkpoint",
    "decode_header",
    "encode_checkpoint",
    "fill_meta",
    "new_header",
    "read_checkpoints",
    "stored_design_and_pipeline",
    "table_name",
]

MAGIC = "fpstore"
FORMAT_VERSION = 1
#: Features this build understands; a store listing any other required feature is refused.
#: ``"sketch"``: documents carry a verification sketch (fpstore/store/sketches.py).
#: ``"image"``: the pipeline fingerprints images (fpstore/fingerprint/image.py).
#: ``"int_key_column"``: bulk loads of integer keys store them as a bit-packed column read in
#: place (fpstore/index/tiers.py, ``KeySegment``), not in zstd blocks.
KNOWN_FEATURES: frozenset[str] = frozenset({"sketch", "image", "int_key_column"})
#: Features of the store's layout rather than its pipeline: every new store lists them; a store
#: made before them reads and writes the older layout.
LAYOUT_FEATURES: tuple[str, ...] = ("int_key_column",)

BASE_DBS = ["meta", "docs", "keys", "content", "blobs", "dead"]
H_HEADER, H_IDF, H_NEXT_ID, H_COUNT = b"header", b"idf", b"next_id", b"count"
CHECKPOINT_PREFIX = b"checkpoint\x00"
#: Ids and counters: 8 bytes, big-endian.
U64 = struct.Struct(">Q")


def table_name(t: int) -> str:
    """The LMDB database of incremental table ``t``."""
    return f"t{t:02d}"


# -- the header ----------------------------------------------------------------------------------


def features_of(pipeline: AnyPipeline) -> list[str]:
    """The required features a new store with ``pipeline`` lists: only those it uses, so that a
    store without a sketch or images stays readable by builds that predate them."""
    return ["image"] if is_image(pipeline) else ["sketch"] if pipeline.sketch_bits else []


def has_int_key_column(header: dict[str, Any]) -> bool:
    """Whether the store's bulk loads write integer keys as a packed column (feature
    ``int_key_column``); stores made before it keep their zstd key blocks."""
    return "int_key_column" in header["features"]


def column_dbs(pipeline: AnyPipeline) -> list[str]:
    """The per-document columns a store with ``pipeline`` has beside :data:`BASE_DBS`."""
    return ["sketches"] if pipeline.sketch_bits else []


def new_header(design: Design, pipeline: AnyPipeline, threshold: float | None = None) -> dict[str, Any]:
    """A new store's header (stored as msgpack under ``meta/header``); ``threshold``, the
    verification threshold of a store with sketches, is recorded only when given."""
    header = {
        "magic": MAGIC,
        "format": FORMAT_VERSION,
        "features": features_of(pipeline) + list(LAYOUT_FEATURES),
        "pipeline": pipeline.config,
        "pipeline_id": pipeline.id,
        "design": design.config(),
        "created": {
            "fpstore": _fpstore_version,
            "lmdb": ".".join(map(str, lmdb.version())),
            "py-lmdb": lmdb.__version__,
            "python": platform.python_version(),
            "time": int(time.time()),
        },
    }
    if threshold is not None:
        header["threshold"] = threshold
    return header


def fill_meta(txn: lmdb.Transaction, meta: Any, header: dict[str, Any], idf: IdfTable | None) -> None:
    """A new store's ``meta`` table: its header, idf table (when the pipeline has one), and
    counters (the next id is 1, no documents)."""
    txn.put(H_HEADER, msgpack.packb(header, use_bin_type=True), db=meta)
    if idf is not None:
        txn.put(H_IDF, idf.to_bytes(), db=meta)
    txn.put(H_NEXT_ID, U64.pack(1), db=meta)
    txn.put(H_COUNT, U64.pack(0), db=meta)


def decode_header(raw: bytes, path: str) -> dict[str, Any]:
    """The header of the store at ``path``, checked: magic, a format version and features this
    build reads, and the fields an open needs."""
    try:
        header = msgpack.unpackb(raw, raw=False, strict_map_key=True, max_bin_len=1 << 20)
    except Exception as exc:
        raise FormatError(f"{path}: the store header does not decode ({exc})") from None
    if not isinstance(header, dict) or header.get("magic") != MAGIC:
        raise NotAStoreError(f"{path} is not an fpstore store (bad magic)")
    fmt = header.get("format")
    if not isinstance(fmt, int) or fmt > FORMAT_VERSION or fmt < 1:
        raise FormatError(
            f"{path} has format version {fmt!r}; this fpstore ({_fpstore_version}) reads versions 1..{FORMAT_VERSION}: upgrade fpstore"
        )
    features = header.get("features")
    if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
        raise FormatError(f"{path}: the header's feature list is malformed")
    unknown = sorted(set(features) - KNOWN_FEATURES)
    if unknown:
        raise FormatError(f"{path} requires features this fpstore does not know: {unknown}; upgrade fpstore")
    for field in ("pipeline", "pipeline_id", "design"):
        if field not in header:
            raise FormatError(f"{path}: the header lacks {field!r}")
    return header


def stored_design_and_pipeline(
    header: dict[str, Any], idf_raw: bytes | None, path: str, pipeline: AnyPipeline | None, design: str | Design
) -> tuple[Design, AnyPipeline]:
    """The design and pipeline a decoded header records, checked against those an open asks for
    (``pipeline`` None and ``design`` "auto" or "auto-pairs" ask for none)."""
    try:
        stored_design = Design.from_config(header["design"])
    except DesignError as exc:
        raise FormatError(f"{path}: the stored table design is invalid: {exc}") from exc
    if isinstance(design, Design) and design.config() != stored_design.config():
        raise DesignError(f"{path} was created with design {stored_design.name}, not {design.name}")
    if isinstance(design, str) and design not in AUTO_DESIGNS and design != stored_design.name:
        raise DesignError(f"{path} was created with design {stored_design.name!r}, not {design!r}")
    idf = IdfTable.from_bytes(idf_raw) if idf_raw is not None else None
    stored = pipeline_from_config(header["pipeline"], idf)
    if stored.id != header["pipeline_id"]:
        raise FormatError(f"{path}: the header's pipeline id does not match its pipeline config")
    if sorted(f for f in header["features"] if f not in LAYOUT_FEATURES) != features_of(stored):
        raise FormatError(f"{path}: the header's features {header['features']} do not match its pipeline (expected {features_of(stored)})")
    if pipeline is not None and pipeline.id != stored.id:
        raise PipelineMismatchError(
            f"{path} was created with pipeline {stored.id}, not {pipeline.id} ({stored.mismatch(pipeline)}); "
            "fingerprints of different pipelines are not comparable"
        )
    if isinstance(pipeline, ImagePipeline):
        return stored_design, pipeline  # the same id, with the caller's limits (max_pixels, max_bytes)
    return stored_design, stored


# -- checkpoints ---------------------------------------------------------------------------------


def checkpoint_key(name: object) -> bytes:
    """The ``meta`` key of checkpoint ``name`` (a str of at most MAX_CHECKPOINT_NAME_BYTES)."""
    if not isinstance(name, str):
        raise InputError(f"a checkpoint name must be a str, not {type(name).__name__}")
    try:
        key = CHECKPOINT_PREFIX + name.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"checkpoint name {name!r} is not valid Unicode (it holds a lone surrogate)") from None
    if len(key) - len(CHECKPOINT_PREFIX) > MAX_CHECKPOINT_NAME_BYTES:
        raise InputError(
            f"checkpoint name is too long ({len(key) - len(CHECKPOINT_PREFIX):,} bytes of UTF-8; at most {MAX_CHECKPOINT_NAME_BYTES})"
        )
    return key


def encode_checkpoint(checkpoint: object) -> tuple[bytes, bytes]:
    """A ``(name, position)`` checkpoint as its ``meta`` key and value."""
    if not isinstance(checkpoint, tuple) or len(checkpoint) != 2:
        raise InputError("checkpoint must be a (name: str, position) pair")
    name, position = checkpoint
    key = checkpoint_key(name)
    try:
        packed = msgpack.packb(position, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InputError(f"checkpoint position must be msgpack-able (int, str, bytes, list, dict): {exc}") from None
    if len(packed) > MAX_CHECKPOINT_BYTES:
        raise InputError(
            f"checkpoint position packs to {len(packed):,} bytes; at most {MAX_CHECKPOINT_BYTES:,} "
            "(fpstore.limits.MAX_CHECKPOINT_BYTES): record where to resume, not what was read"
        )
    return key, packed


def decode_checkpoint(raw: bytes, name: str) -> Any:
    """A stored checkpoint position."""
    try:
        return msgpack.unpackb(raw, raw=False, max_bin_len=READ_MAX_CHECKPOINT_BYTES, max_str_len=READ_MAX_CHECKPOINT_BYTES)
    except Exception as exc:
        raise CorruptionError(f"checkpoint {name!r} does not decode: {exc}") from None


def read_checkpoints(txn: lmdb.Transaction, meta: Any) -> dict[str, Any]:
    """Every checkpoint in ``meta``: name → position."""
    out: dict[str, Any] = {}
    cur = txn.cursor(db=meta)
    if cur.set_range(CHECKPOINT_PREFIX):
        for key, raw in cur:
            key = bytes(key)
            if not key.startswith(CHECKPOINT_PREFIX):
                break
            try:
                name = key[len(CHECKPOINT_PREFIX) :].decode("utf-8")
            except UnicodeDecodeError:
                raise CorruptionError(f"a checkpoint name is not UTF-8: {key!r}") from None
            out[name] = decode_checkpoint(bytes(raw), name)
    return out

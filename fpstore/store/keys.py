"""User keys and document records: the bytes a store keeps for them.

A user key (str, bytes or a 64-bit unsigned int) is stored *typed*: one tag byte (``s``, ``b``,
``i``) and its bytes, so that reading it back gives the same type. The ``keys`` table holds a
typed key itself, or a hash of it when it is too long for an LMDB key. A document record is a
msgpack array ``[typed key, fingerprint, content hash or nil, canonical id, flags]`` (see
docs/format.md).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence

import msgpack
import numpy as np

from fpstore.errors import CorruptionError, InputError
from fpstore.limits import MAX_KEY_BYTES, READ_MAX_RECORD_BIN

__all__ = [
    "FLAG_SHORT",
    "Key",
    "KeyBatch",
    "FLAG_TEXT",
    "LOOKUP_KEY_BYTES",
    "MAX_RAW_KEY",
    "lookup_key",
    "pack_record",
    "record_lead",
    "typed_key",
    "unpack_record",
    "untyped_key",
]

#: A document key: text, bytes, or an integer in [0, 2**64) (each read back as given).
Key = str | bytes | int
#: Many keys: a sequence of keys, or an integer array of them (which a bulk load takes on a fast path).
KeyBatch = np.ndarray | Sequence[Key]

#: Record flag: the text was below the pipeline's ``min_tokens`` (matched only exactly).
FLAG_SHORT = 1
#: Record flag: the document came as text (its content hash is the exact-duplicate tier's).
FLAG_TEXT = 2
#: Look-ups accept any key a reader can read back (stores written before MAX_KEY_BYTES hold longer ones).
LOOKUP_KEY_BYTES = READ_MAX_RECORD_BIN - 1
#: Typed keys longer than this are stored by hash (LMDB keys stop at 511 bytes).
MAX_RAW_KEY = 400


def typed_key(key: object, limit: int = MAX_KEY_BYTES) -> bytes:
    """A user key as bytes that remember its type: str (may hold surrogates), bytes, or int.

    Writers keep the default ``limit`` (:data:`~fpstore.limits.MAX_KEY_BYTES`); look-ups pass the
    readers' larger bound, so that keys stored before the limit existed can still be found.
    """
    if isinstance(key, str):
        typed = b"s" + key.encode("utf-8", "surrogatepass")
    elif isinstance(key, (bytes, bytearray, memoryview)):
        typed = b"b" + bytes(key)
    else:
        typed = b""
    if typed:
        if len(typed) - 1 > limit:
            raise InputError(
                f"a key of {len(typed) - 1:,} bytes is longer than the {limit:,} bytes a store accepts "
                "(fpstore.limits.MAX_KEY_BYTES); store a digest of it, or the key's first part, instead"
            )
        return typed
    if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
        if not 0 <= int(key) < 1 << 64:
            raise InputError(f"integer keys must be in 0..2**64-1, got {key}")
        return b"i" + int(key).to_bytes(8, "big")
    raise InputError(f"keys must be str, bytes or int, not {type(key).__name__}")


def untyped_key(typed: bytes) -> Key:
    """The user key of a typed key; an unknown tag or bad UTF-8 raises :class:`CorruptionError`."""
    tag, body = typed[:1], typed[1:]
    if tag == b"s":
        try:
            return body.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError as exc:
            raise CorruptionError(f"stored key is not valid UTF-8: {exc}") from None
    if tag == b"b":
        return body
    if tag == b"i" and len(body) == 8:
        return int.from_bytes(body, "big")
    raise CorruptionError(f"stored key has unknown type tag {tag!r}")


def lookup_key(typed: bytes) -> bytes:
    """The ``keys`` table's key for a typed key: itself, or a hash when LMDB could not hold it."""
    if len(typed) <= MAX_RAW_KEY:
        return typed
    return b"h" + hashlib.blake2b(typed, digest_size=32).digest()


_record_packer = threading.local()


def pack_record(typed_key: bytes, fp: int, content_hash: bytes | None, canonical: int, flags: int) -> bytes:
    """A document record's bytes (msgpack; see the module docstring)."""
    # One Packer per thread: msgpack.packb builds a new one per call, which costs more than packing.
    packer = getattr(_record_packer, "packer", None)
    if packer is None:
        packer = _record_packer.packer = msgpack.Packer(use_bin_type=True)
    return packer.pack([typed_key, fp, content_hash, canonical, flags])


def record_lead(typed_key: bytes) -> bytes:
    """The first bytes of every record of ``typed_key`` (:func:`pack_record`'s array header and
    the key as msgpack bin): a lookup that only asks whose record it is compares these."""
    n = len(typed_key)
    head = b"\xc4" + bytes([n]) if n < 1 << 8 else b"\xc5" + n.to_bytes(2, "big") if n < 1 << 16 else b"\xc6" + n.to_bytes(4, "big")
    return b"\x95" + head + typed_key


def unpack_record(raw: bytes | memoryview) -> tuple[bytes, int, bytes | None, int, int]:
    """Decode a stored record; any deviation from the format raises :class:`CorruptionError`."""
    try:
        rec = msgpack.unpackb(raw, raw=False, use_list=True, max_bin_len=READ_MAX_RECORD_BIN, max_array_len=16, max_map_len=0)
    except Exception as exc:  # msgpack raises a variety of ValueError/TypeError subclasses
        raise CorruptionError(f"document record does not decode: {exc}") from None
    if not isinstance(rec, list) or len(rec) != 5:
        raise CorruptionError("document record is not a 5-element array")
    typed, fp, content_hash, canonical, flags = rec
    if (
        not isinstance(typed, bytes)
        or not isinstance(fp, int)
        or not 0 <= fp < 1 << 64
        or not (content_hash is None or (isinstance(content_hash, bytes) and len(content_hash) == 16))
        or not isinstance(canonical, int)
        or not 0 <= canonical < 1 << 64
        or not isinstance(flags, int)
    ):
        raise CorruptionError("document record has fields of the wrong type")
    return typed, fp, content_hash, canonical, flags

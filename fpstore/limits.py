"""Size limits shared by every writer and every reader of a store.

A limit that only a reader enforces turns valid-looking input into an unreadable store: a writer
would accept a value that every later read then rejects as corruption. So each limit is one
constant here; writers refuse input above it with :class:`~fpstore.errors.InputError`, and the
readers' bounds on untrusted bytes are derived from it (and are never below it: the checks at the
end of this module fail the import otherwise).
"""

from __future__ import annotations

__all__ = [
    "MAX_CHECKPOINT_BYTES",
    "MAX_CHECKPOINT_NAME_BYTES",
    "MAX_KEY_BYTES",
    "READ_MAX_CHECKPOINT_BYTES",
    "READ_MAX_KEY_BLOCK_BIN",
    "READ_MAX_RECORD_BIN",
]

#: The longest document key a store accepts: bytes, or the UTF-8 of a str (URLs, paths, ids).
#: Its typed form adds a one-byte type tag.
MAX_KEY_BYTES = 1 << 16

#: The longest checkpoint position, msgpack-encoded (ingest positions are a few dozen bytes).
MAX_CHECKPOINT_BYTES = 1 << 16

#: The longest checkpoint name in UTF-8: it is part of an LMDB key, and LMDB keys stop at 511 bytes.
MAX_CHECKPOINT_NAME_BYTES = 380

#: Readers' bounds on binary fields of untrusted msgpack. They are larger than the writers' limits
#: because stores written before those limits existed hold keys of up to 1 MiB; a reader must go
#: on reading them.
READ_MAX_RECORD_BIN = 1 << 20
#: A key block of a bulk load holds up to 256 keys, each at most ``READ_MAX_RECORD_BIN`` bytes
#: when it was written, and at most ``MAX_KEY_BYTES`` now.
READ_MAX_KEY_BLOCK_BIN = 1 << 24
READ_MAX_CHECKPOINT_BYTES = 1 << 20

# What a writer accepts, every reader reads: fail at import rather than at the first read (an
# explicit check, not an assert, so that ``python -O`` keeps it).
if not (MAX_KEY_BYTES + 1 <= READ_MAX_RECORD_BIN <= READ_MAX_KEY_BLOCK_BIN and MAX_CHECKPOINT_BYTES <= READ_MAX_CHECKPOINT_BYTES):
    raise ImportError("fpstore.limits: a reader's bound is below a writer's limit")

"""fpstore's exceptions: one base class, each subclass also inheriting the closest builtin.

Raw ``lmdb`` errors never escape the public API; the storage layer translates them here. Every
message says what was wrong and, where there is one, what to do about it.
"""

from __future__ import annotations

__all__ = [
    "ClosedError",
    "CorruptionError",
    "DesignError",
    "FormatError",
    "FpstoreError",
    "InputError",
    "InputTypeError",
    "MemoryBudgetError",
    "NotAStoreError",
    "PipelineMismatchError",
    "ReadOnlyError",
    "StorageError",
    "StoreFullError",
    "UnknownKeyError",
    "WriterLockedError",
]


class FpstoreError(Exception):
    """Base class of every error fpstore raises on purpose."""


class InputError(FpstoreError, ValueError):
    """An argument has the wrong value, dtype, shape or length."""


class InputTypeError(InputError, TypeError):
    """An argument has the wrong type (a text that is not str or bytes): an :class:`InputError`
    that ``except TypeError`` also catches."""


class DesignError(FpstoreError, ValueError):
    """A table design cannot answer the request (for example k above the design's k)."""


class MemoryBudgetError(DesignError):
    """The work asked for would need more memory than its budget allows (for example all pairs
    above the design's k, which builds its own tables in memory); the message says how much."""


class PipelineMismatchError(FpstoreError, ValueError):
    """Fingerprints or a pipeline differ from the one a store was created with."""


class FormatError(FpstoreError, ValueError):
    """A store or stream of a format, version or feature set this build does not understand."""


class NotAStoreError(FormatError):
    """A path that holds no fpstore store."""


class CorruptionError(FpstoreError, ValueError):
    """On-disk bytes failed a check (length, checksum, ordering): the data is damaged."""


class UnknownKeyError(FpstoreError, KeyError):
    """A key that is not stored, where a stored document is needed (:meth:`Store.explain`)."""

    def __str__(self) -> str:
        # KeyError's own str() is the repr of its argument: a message would print in quotes.
        return str(self.args[0]) if self.args else ""


class ReadOnlyError(FpstoreError, PermissionError):
    """A write on a store opened read-only."""


class WriterLockedError(FpstoreError, PermissionError):
    """Another process holds the store's writer lock; open with ``readonly=True`` to read."""


class ClosedError(FpstoreError, RuntimeError):
    """Use of a store after ``close()``, or from a process forked after it was opened."""


class StorageError(FpstoreError, OSError):
    """The storage layer failed (I/O error, LMDB panic); the batch in flight was not applied."""


class StoreFullError(StorageError):
    """The disk or the configured size limit is full; the batch in flight was not applied."""

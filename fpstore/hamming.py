"""Hamming distance between 64-bit fingerprints: popcount(a XOR b)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from fpstore.errors import InputError

__all__ = ["RawFingerprints", "hamming", "hamming_many"]

_M64 = 0xFFFFFFFFFFFFFFFF

#: Fingerprints as callers give them: a uint64 array, or a sequence of ints (or numpy integers) in
#: 0..2**64-1 (see :func:`as_fingerprint_array`, which checks them).
RawFingerprints = np.ndarray | Sequence[int | np.integer]


def hamming(a: int | np.integer, b: int | np.integer) -> int:
    """Number of bits in which the 64-bit fingerprints ``a`` and ``b`` differ (0..64)."""
    for name, v in (("a", a), ("b", b)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or not 0 <= int(v) <= _M64:
            raise InputError(f"{name} must be an int in 0..2**64-1, got {v!r}")
    return (int(a) ^ int(b)).bit_count()


def as_fingerprint_array(values: object, name: str = "fingerprints") -> np.ndarray:
    """``values`` as a 1-D uint64 array without copying when it already is one.

    Accepts uint64 arrays and sequences of Python ints or numpy integer scalars in 0..2**64-1.
    Anything else (floats, bools, strings, bytes, Fractions, Decimals, arrays of another dtype) is
    refused rather than converted: numpy would turn ``"77"`` into 77 and ``1.7`` into 1, and a
    silently changed fingerprint is a wrong answer forever after.
    """
    if isinstance(values, np.ndarray):
        if values.dtype != np.uint64:
            raise InputError(f"{name} must have dtype uint64, got {values.dtype}")
        arr = values
    else:
        if isinstance(values, (str, bytes, bytearray, memoryview)) or not hasattr(values, "__len__"):
            raise InputError(f"{name} must be a sequence of ints or a uint64 array, not {type(values).__name__}")
        items = list(values)  # type: ignore[call-overload]  # any object with __len__ (hasattr does not narrow)
        for v in items:
            if not isinstance(v, (int, np.integer)) or isinstance(v, (bool, np.bool_)):
                raise InputError(f"{name} must be ints in 0..2**64-1, got {type(v).__name__} {v!r}"[:200])
            if not 0 <= int(v) <= _M64:
                raise InputError(f"{name} must be ints in 0..2**64-1, got {v!r}")
        arr = np.array([int(v) for v in items], dtype=np.uint64) if items else np.zeros(0, np.uint64)
    if arr.ndim != 1:
        raise InputError(f"{name} must be one-dimensional, got shape {arr.shape}")
    return arr


def _as_u64(x: ArrayLike, name: str) -> np.ndarray:
    """An array as given; a scalar int as a uint64 scalar array; a sequence as
    :func:`as_fingerprint_array` takes it (ints only, never rounded or wrapped)."""
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)):
        if not 0 <= int(x) <= _M64:
            raise InputError(f"{name} must be ints in 0..2**64-1, got {x!r}")
        return np.array(int(x), dtype=np.uint64)
    return as_fingerprint_array(x, name)


def hamming_many(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """Element-wise Hamming distances (uint8) of uint64 arrays ``a`` and ``b``; either may be a scalar."""
    a_arr, b_arr = _as_u64(a, "a"), _as_u64(b, "b")
    if a_arr.dtype != np.uint64 or b_arr.dtype != np.uint64:
        raise InputError("hamming_many takes uint64 arrays")
    return np.bitwise_count(a_arr ^ b_arr)

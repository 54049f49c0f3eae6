"""splitmix64's finaliser, the 64-bit mixer every layer shares.

A bijection on 64-bit integers with full avalanche: each input bit flips each output bit with
probability 1/2. The fingerprint kernels use it to mix token hashes (``cext/_simhash_c.pyx`` and its
twin), the immutable tier to hash integer keys. Its values are part of persisted formats (the
fingerprint pipelines, the key-hash index of bulk loads): never change them.
"""

from __future__ import annotations

import numpy as np

__all__ = ["M64", "fmix64", "fmix64_array"]

M64 = 0xFFFFFFFFFFFFFFFF


def fmix64(x: int) -> int:
    """splitmix64's finaliser of one 64-bit integer."""
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def fmix64_array(x: np.ndarray) -> np.ndarray:
    """:func:`fmix64` of every element of a uint64 array (a new array; wrapping arithmetic)."""
    x = x.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x

"""Checks of the arrays and integers the run codec is given: the codec's input validation."""

from __future__ import annotations

import numpy as np

from fpstore.errors import InputError

__all__ = ["int_in", "sorted_u64_array", "u64_array"]


def u64_array(values: object, name: str) -> np.ndarray:
    """A 1-D C-contiguous uint64 array (copied only when not contiguous); InputError otherwise."""
    if not isinstance(values, np.ndarray) or values.dtype != np.uint64:
        got = values.dtype if isinstance(values, np.ndarray) else type(values).__name__
        raise InputError(f"{name} must be a numpy uint64 array, got {got}")
    if values.ndim != 1:
        raise InputError(f"{name} must be one-dimensional, got shape {values.shape}")
    return np.ascontiguousarray(values)


def sorted_u64_array(values: object, name: str, top_bits: int = 64) -> np.ndarray:
    """:func:`u64_array`, checked to be sorted ascending by the top ``top_bits`` bits."""
    arr = u64_array(values, name)
    if top_bits == 0:
        return arr
    shift = np.uint64(64 - top_bits)
    # In slices, so that the check needs O(1) memory beyond the input.
    step = 1 << 20
    for s in range(0, max(len(arr) - 1, 0), step):
        seg = arr[s : s + step + 1] >> shift
        down = np.flatnonzero(seg[1:] < seg[:-1])
        if len(down):
            i = s + int(down[0])
            what = "ascending" if top_bits == 64 else f"ascending by their top {top_bits} bits"
            raise InputError(f"{name} must be sorted {what}: element {i + 1} is below element {i}")
    return arr


def int_in(value: object, name: str, lo: int, hi: int) -> int:
    """``value`` as an int in ``lo..hi``; InputError otherwise (bools are not ints here)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InputError(f"{name} must be an int, got {type(value).__name__}")
    v = int(value)
    if not lo <= v <= hi:
        raise InputError(f"{name} must be in {lo}..{hi}, got {v}")
    return v

"""The LSM's merge policy and bulk-load preparation, without LMDB."""

from __future__ import annotations

import numpy as np
import pytest

from fpstore.errors import InputError
from fpstore.index.meta import RunMeta
from fpstore.store.lsm import MERGE_FANOUT, MERGE_MAX_ENTRIES, merge_group, prepare_load, take


def runs(*counts: int) -> list[RunMeta]:
    return [RunMeta(i, c, (), ids_base=1) for i, c in enumerate(counts)]


def test_merge_group_takes_the_smallest_full_tier():
    """Runs merge by size tier: the smallest tier holding MERGE_FANOUT runs, in their order."""
    unit = 100
    assert merge_group(runs(*[100] * (MERGE_FANOUT - 1)), unit) == []
    small = runs(*[100] * MERGE_FANOUT)
    assert merge_group(small, unit) == small
    big = [unit * MERGE_FANOUT] * MERGE_FANOUT
    mixed = runs(*big, 50, 60)
    assert merge_group(mixed, unit) == mixed[:MERGE_FANOUT]  # tier 1 is full, tier 0 is not
    both = runs(*big, *[10] * MERGE_FANOUT)
    assert merge_group(both, unit) == both[MERGE_FANOUT:]  # tier 0 first


def test_merge_group_leaves_huge_runs_to_compaction():
    """Runs above MERGE_MAX_ENTRIES never merge on their own."""
    assert merge_group(runs(*[MERGE_MAX_ENTRIES + 1] * (MERGE_FANOUT + 1)), 4096) == []


def test_take_splits_chunks_exactly():
    """take() returns the first n documents across chunks and the rest, in order."""
    keys = [np.arange(0, 5), np.arange(5, 8), np.arange(8, 20)]
    fps = [k.astype(np.uint64) * 3 for k in keys]
    got_k, got_f, rest_k, rest_f = take(keys, fps, 9)
    assert got_k.tolist() == list(range(9)) and got_f.tolist() == [3 * i for i in range(9)]
    assert np.concatenate(rest_k).tolist() == list(range(9, 20)) and len(rest_f) == 1
    got_k, _, _, _ = take([["a", "b"], ["c"]], [np.zeros(2, np.uint64), np.ones(1, np.uint64)], 3)
    assert got_k == ["a", "b", "c"]


def test_prepare_load_keeps_the_last_copy_in_fingerprint_order():
    """A bulk load keeps each key's last copy, sorted by fingerprint, with key hashes."""
    load = prepare_load(np.array([5, 3, 5], np.uint64), np.array([9, 7, 1], np.uint64))
    assert load is not None and load.fps.tolist() == [1, 7] and load.int_keys.tolist() == [5, 3]
    assert list(load.typed_keys()) == [b"i" + (5).to_bytes(8, "big"), b"i" + (3).to_bytes(8, "big")]
    load = prepare_load(["b", "a", "b"], np.array([4, 2, 3], np.uint64))
    assert load.fps.tolist() == [2, 3] and load.typed_keys() == [b"sa", b"sb"] and len(load.hashes) == 2
    assert prepare_load([], np.zeros(0, np.uint64)) is None
    with pytest.raises(InputError):
        prepare_load(np.array([-1, 2]), np.zeros(2, np.uint64))

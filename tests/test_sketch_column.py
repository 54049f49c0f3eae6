"""The sketch column's size and warmth: two faults tools/bench_verified.py found (each test failed
before its fix: the column took twice its bytes, and warm() left it cold)."""

from __future__ import annotations

import numpy as np
import pytest

import fpstore


@pytest.mark.parametrize("bits", [256, 512])
def test_sketch_column_costs_about_its_raw_bytes(tmp_path, bits):
    """The sketch column of a bulk-loaded store takes at most 1.25 times the sketches' own bytes
    (bits / 8 per document). It failed when blocks held 64 sketches: 2,048 bytes (256 bits) or
    4,096 bytes (512 bits), just over what LMDB keeps in a leaf node on a 4,096-byte page, so each
    block went to overflow pages of its own, one page (256 bits) or two (512 bits, with the page
    header): twice the raw bytes, 64 instead of 32 B/doc at 256 bits."""
    pipe = fpstore.Pipeline(sketch_bits=bits)
    n = 64 * 200
    rng = np.random.default_rng(0)
    fps = rng.integers(0, 2**63, n, dtype=np.uint64)
    sketches = rng.integers(0, 2**63, (n, bits // 64), dtype=np.uint64)
    with fpstore.open(tmp_path / "s", pipeline=pipe) as store:
        store.bulk_load(np.arange(n), fpstore.Fingerprints(fps, pipe.id, sketches=sketches))
        column = store.info()["lmdb"]["databases"]["sketches"]["bytes"]
    assert column <= 1.25 * n * bits / 8, f"{column / n:.1f} B/doc for {bits / 8:.0f} B/doc of sketches"


def test_warm_reads_the_sketch_column(tmp_path):
    """``Store.warm()`` of a store with sketches also reads the sketch column, which every verified
    query (``threshold=``) reads after the index: it returns at least the sketches' bytes more than
    warm() of the same fingerprints without sketches. It failed when warm() read the runs, key
    segments and incremental tables only: after it a verified query still faulted in a page of
    the sketch column per candidate it verified."""
    n = 64 * 200
    rng = np.random.default_rng(1)
    fps = rng.integers(0, 2**63, n, dtype=np.uint64)
    sketches = rng.integers(0, 2**63, (n, 4), dtype=np.uint64)
    warmed = {}
    for name, pipe, sk in (("plain", fpstore.Pipeline(sketch_bits=0), None), ("sketch", fpstore.Pipeline(sketch_bits=256), sketches)):
        with fpstore.open(tmp_path / name, pipeline=pipe, k=5) as store:  # one design for both
            store.bulk_load(np.arange(n), fpstore.Fingerprints(fps, pipe.id, sketches=sk))
            warmed[name] = store.warm()
    assert warmed["sketch"] - warmed["plain"] >= n * 32, warmed

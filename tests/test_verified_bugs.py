"""Bugs found by tools/bench_verified.py (issue 17), pinned as failing tests until they are fixed."""

from __future__ import annotations

import numpy as np
import pytest

import fpstore


@pytest.mark.parametrize("bits", [256, 512])
def test_sketch_column_costs_about_its_raw_bytes(tmp_path, bits):
    """The sketch column of a bulk-loaded store takes at most 1.25 times the sketches' own bytes
    (bits / 8 per document). Fails today: a block of 64 sketches is 2,048 bytes (256 bits) or
    4,096 bytes (512 bits), just over what LMDB keeps in a leaf node on a 4,096-byte page, so each
    block goes to overflow pages of its own, one page (256 bits) or two (512 bits, with the page
    header): twice the raw bytes, 64 instead of 32 B/doc at 256 bits (docs/benchmarks.md,
    "Verified queries")."""
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
    warm() of the same fingerprints without sketches. Fails today: warm() reads the runs, key
    segments and incremental tables only, so after it a verified query still faults in a page of
    the sketch column per candidate it verifies (issue 17's latency targets are "after warm()")."""
    n = 64 * 200
    rng = np.random.default_rng(1)
    fps = rng.integers(0, 2**63, n, dtype=np.uint64)
    sketches = rng.integers(0, 2**63, (n, 4), dtype=np.uint64)
    warmed = {}
    for name, pipe, sk in (("plain", fpstore.Pipeline(), None), ("sketch", fpstore.Pipeline(sketch_bits=256), sketches)):
        with fpstore.open(tmp_path / name, pipeline=pipe) as store:
            store.bulk_load(np.arange(n), fpstore.Fingerprints(fps, pipe.id, sketches=sk))
            warmed[name] = store.warm()
    assert warmed["sketch"] - warmed["plain"] >= n * 32, warmed

"""The sketch column's size on disk (found by tools/bench_verified.py: it took twice its bytes)."""

from __future__ import annotations

import numpy as np
import pytest

import fpstore


@pytest.mark.parametrize("bits", [256, 512])
def test_sketch_column_costs_about_its_raw_bytes(tmp_path, bits):
    """The sketch column of a bulk-loaded store takes at most 1.25 times the sketches' own bytes
    (bits / 8 per document). Blocks of 64 sketches were 2,048 bytes (256 bits) or 4,096 bytes
    (512 bits), just over what LMDB keeps in a leaf node on a 4,096-byte page, so each went to
    overflow pages of its own, one page (256 bits) or two (512 bits, with the page header): twice
    the raw bytes. A block now fills one overflow page (fpstore/store/sketches.py)."""
    pipe = fpstore.Pipeline(sketch_bits=bits)
    n = 64 * 200
    rng = np.random.default_rng(0)
    fps = rng.integers(0, 2**63, n, dtype=np.uint64)
    sketches = rng.integers(0, 2**63, (n, bits // 64), dtype=np.uint64)
    with fpstore.open(tmp_path / "s", pipeline=pipe) as store:
        store.bulk_load(np.arange(n), fpstore.Fingerprints(fps, pipe.id, sketches=sketches))
        column = store.info()["lmdb"]["databases"]["sketches"]["bytes"]
    assert column <= 1.25 * n * bits / 8, f"{column / n:.1f} B/doc for {bits / 8:.0f} B/doc of sketches"

# Type stub of the compiled kernel cext/_runs_c.pyx; its specification twin is
# fpstore/index/_runs_py.py (same names, same results). tests/test_stubs.py checks the names.
from collections.abc import Callable
from typing import Any

import numpy as np

OK: int
ERR_COUNT: int
ERR_BOUNDS: int
ERR_RANGE: int
ERR_PARAM: int
ERR_SHORT: int
ERR_TRAILING: int
ERR_UNSORTED: int
ERR_MISSING: int
ERR_LENGTH: int
ERR_UNMATCHED: int
MAX_BLOCK_ENTRIES: int
IX_ENTRIES: int
IX_SUM: int
IX_KEYS: int
IX_LAST: int
IX_CHUNKS: int
IX_FIRST: int
IX_ORDER: int
IX_END: int
IX_DENSE: int

def index_check(
    first_keys: np.ndarray,
    chunk: np.ndarray,
    offset: np.ndarray,
    nentries: np.ndarray,
    chunk_len: np.ndarray,
    count: int,
    last_key: int,
    block_entries: int,
) -> tuple[int, int, tuple[np.ndarray, ...] | None]: ...
def encode_chunk(keys: np.ndarray, block_entries: int, first_block: int, out: np.ndarray, offsets: np.ndarray) -> tuple[int, int, int]: ...
def use_unchecked_loops(on: bool) -> bool: ...
def use_vector_compare(level: int) -> int: ...
def use_wide_decode(on: bool) -> bool: ...
def use_vector_probe(on: bool) -> bool: ...
def decode_blocks(
    buf: Any, starts: np.ndarray, ends: np.ndarray, counts: np.ndarray, bounds: np.ndarray, out: np.ndarray
) -> tuple[int, int]: ...
def probe_chunk(
    buf: Any,
    starts: np.ndarray,
    ends: np.ndarray,
    counts: np.ndarray,
    bounds: np.ndarray,
    queries: np.ndarray,
    mask_hi: int,
    k: int,
    positions: bool = False,
) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray]: ...
def probe_chunks(
    bufs: list[Any],
    chunk_len: np.ndarray,
    chunk_start: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    counts: np.ndarray,
    bounds: np.ndarray,
    entry_start: np.ndarray,
    c0: int,
    c1: int,
    queries: np.ndarray,
    qa: np.ndarray,
    qb: np.ndarray,
    mask_hi: int,
    k: int,
    lookups: np.ndarray,
    la: np.ndarray,
    lb: np.ndarray,
) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]: ...

class ProbeTable:
    names: list[bytes]
    owned_nbytes: int
    @property
    def filtered(self) -> bool: ...
    def build_cells(self, fetch: Callable[[Any], Any], prefix_bits: int) -> int: ...
    def __init__(
        self,
        bounds: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
        counts: np.ndarray,
        chunk: np.ndarray,
        chunk_start: np.ndarray,
        chunk_len: np.ndarray,
        entry_start: np.ndarray,
        names: list[Any],
    ) -> None: ...

def fill_restarts(pt: ProbeTable, fetch: Callable[[Any], Any]) -> tuple[int, int]: ...
def probe_tables(
    tables: list[ProbeTable], fetch: Callable[[Any], Any], ranges: list[tuple[int, int, int, int]], k: int
) -> tuple[int, int, int, list[tuple[int, int, int]]]: ...

class ProbeDesign:
    ntab: int
    def __init__(self, moves: list[Any], prefix_bits: list[int], flip_masks: list[Any]) -> None: ...

def probe_fingerprint(
    d: ProbeDesign, tables: list[ProbeTable], fetch: Callable[[Any], Any], fp: int, k: int, memo: dict[bytes, Any] | None = None
) -> tuple[int, int, int, list[tuple[int, int, int]]]: ...
def probe_fingerprints(
    d: ProbeDesign, tables: list[ProbeTable], fetch: Callable[[Any], Any], fps: np.ndarray, k: int, memo: dict[bytes, Any] | None = None
) -> tuple[int, int, int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None]: ...

# Type stub of the compiled kernel cext/_jpeg_c.pyx; its specification twin is
# fpstore/fingerprint/_jpeg_py.py (same names, same results). tests/test_stubs.py checks the names.
import numpy as np

LOOKAHEAD: int
RUN_BITS: int
TABLE_WIDTH: int
SEQUENTIAL: int
DC_FIRST: int
DC_REFINE: int
OK: int
BAD_CODE: int
SHORT: int
BAD_RESTART: int
BAD_TABLE: int

def next_marker(data: bytes, start: int) -> int: ...
def huffman_table(counts: bytes, symbols: bytes, dc: bool, out: np.ndarray) -> int: ...
def decode_scan(
    data: bytes,
    start: int,
    end: int,
    mode: int,
    al: int,
    restart_interval: int,
    mcus_x: int,
    mcus_y: int,
    blocks: np.ndarray,
    tables: np.ndarray,
    coef: np.ndarray,
) -> int: ...

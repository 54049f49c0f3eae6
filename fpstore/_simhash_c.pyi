# Type stub of the compiled kernel cext/_simhash_c.pyx; its specification twin is
# fpstore/fingerprint/_simhash_py.py (same names, same results). tests/test_stubs.py checks the names.
from typing import Any

import numpy as np

KIND_SIMHASH64: int
KIND_MINHASH1: int

def set_fold_table(fold: np.ndarray) -> None: ...
def set_active_table(bits: np.ndarray) -> None: ...
def nfkc_active_runs(text: str) -> list[int]: ...
def fingerprint(text: str, seed: int, shingle: int, idf: Any, kind: int = 0) -> tuple[int, int, int, int]: ...
def fingerprint_batch(
    texts: list[str],
    lo: int,
    hi: int,
    seed: int,
    shingle: int,
    idf: Any,
    out_fp: np.ndarray,
    out_tokens: np.ndarray,
    out_digest: np.ndarray,
    kind: int = 0,
) -> None: ...

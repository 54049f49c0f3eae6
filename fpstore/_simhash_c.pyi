# Type stub of the compiled kernel cext/_simhash_c.pyx; its specification twin is
# fpstore/fingerprint/_simhash_py.py (same names, same results). tests/test_stubs.py checks the names.
from collections.abc import Callable
from typing import Any

import numpy as np

KIND_SIMHASH64: int
KIND_MINHASH1: int

def set_fold_table(fold: np.ndarray) -> None: ...
def set_active_table(bits: np.ndarray) -> None: ...
def nfkc_active_runs(text: str) -> list[int]: ...
def set_nfkc_tables(
    stage1: np.ndarray, stage2: np.ndarray, pool: np.ndarray, comp: np.ndarray, fallback: Callable[[str], str] | None = None
) -> None: ...
def nfkc(text: str) -> str: ...
def fingerprint(
    text: str, seed: int, shingle: int, idf: Any, kind: int = 0, nfkc: bool = False, sketch: np.ndarray | None = None
) -> tuple[int, int, int, int]: ...
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
    nfkc: bool = False,
    out_sketch: np.ndarray | None = None,
) -> None: ...

"""fpstore: an exact near-duplicate fingerprint store (SimHash + Manku permuted tables, on LMDB)."""

from __future__ import annotations

from fpstore._backend import BACKEND as backend
from fpstore.errors import FpstoreError

__version__ = "0.1.0"

__all__ = ["FpstoreError", "backend"]

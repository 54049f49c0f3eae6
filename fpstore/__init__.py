"""fpstore: an exact near-duplicate fingerprint store (SimHash + Manku permuted tables, on LMDB).

The public API is the names in ``__all__``; everything else is importable for advanced use.
"""

from __future__ import annotations

import functools
import logging

from fpstore._backend import BACKEND as backend
from fpstore._version import __version__ as __version__
from fpstore.errors import FpstoreError
from fpstore.fingerprint.image import ImagePipeline
from fpstore.fingerprint.pipeline import Fingerprints, IdfTable, Pipeline, Signature
from fpstore.fingerprint.text import Text
from fpstore.hamming import hamming, hamming_many
from fpstore.store.explain import Explanation
from fpstore.store.keys import Key
from fpstore.store.opening import open
from fpstore.store.results import AddResult, Cluster, Document, Match
from fpstore.store.store import Store

# The library logs through "fpstore.*" loggers (flushes, merges, map growth, failed groups) and
# prints nothing until the program configures logging (fpstore-admin -v does).
logging.getLogger("fpstore").addHandler(logging.NullHandler())


@functools.lru_cache(maxsize=16)
def _simhash_pipeline(shingle: int) -> Pipeline:
    return Pipeline(kind="simhash64", html="off", shingle=shingle)


def simhash(text: Text, shingle: int = 3) -> int:
    """Charikar's 64-bit SimHash of ``text``: tokenizer v1, ``shingle`` words per shingle, tf
    weights, no HTML extraction (``Pipeline(kind="simhash64", html="off")``). Stores default to
    the better-calibrated ``Pipeline()`` (1-bit MinHash, docs/tuning.md)."""
    return _simhash_pipeline(shingle).fingerprint(text)


__all__ = [
    "AddResult",
    "Cluster",
    "Document",
    "Explanation",
    "Fingerprints",
    "FpstoreError",
    "IdfTable",
    "ImagePipeline",
    "Key",
    "Match",
    "Pipeline",
    "Signature",
    "Store",
    "backend",
    "hamming",
    "hamming_many",
    "open",
    "simhash",
]

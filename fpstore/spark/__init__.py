"""fpstore on Apache Spark: the batch work of a corpus that outgrows one machine.

Four DataFrame operations, with the same kernels and table designs as the store
(``docs/scale-out.md`` shows how to run them on a cluster and what they cost):

* :func:`near_duplicates` — the exact all-pairs self-join (Manku §3.3) of ``(id, fp)`` rows.
* :func:`query_batch` — Manku's batch mode: the small side's fingerprints broadcast, each worker
  building their sorted permuted tables once, the large side streamed past them without a shuffle.
* :func:`fingerprint` — fingerprints computed on the executors by the same :class:`Pipeline`.
* :func:`build_shards` — one complete fpstore per shard, bulk-loaded on the executors, with a
  manifest; :class:`ShardSet` opens them and answers like one store (it needs no Spark).

**Fingerprints in Spark.** Spark has no unsigned 64-bit type. A fingerprint column is a
``LongType`` (signed 64-bit) holding the fingerprint's two's-complement bit pattern: the uint64
``f`` is stored as ``f - 2**64`` when ``f >= 2**63``. Every bit, hence every Hamming distance, is
unchanged; equality, grouping, joining and hashing work as they are; only Spark's *ordering* of the
column differs from unsigned order (fingerprints with the top bit set sort first), and nothing here
relies on it. In numpy the mapping is a free view: ``fps.view(np.int64)`` and back
``col.view(np.uint64)`` (:func:`to_signed`, :func:`to_unsigned`); in Python ints,
``f - (f >> 63 << 64)`` and ``s & (2**64 - 1)``.

**Verification sketches.** With a pipeline that has ``sketch_bits``, :func:`fingerprint` adds a
``sketch`` column (binary, the words little-endian), :func:`near_duplicates` and
:func:`query_batch` take ``threshold=`` to keep only pairs whose sketches estimate at least that
Jaccard similarity (with a ``similarity`` column), and :func:`build_shards` keeps each document's
sketch in its shard (:mod:`fpstore.spark.sketches`).

PySpark, pyarrow and pandas are the ``fpstore[spark]`` extra; this module imports them only when a
Spark function runs, so :class:`ShardSet` and the conversions work without them. The executors
need fpstore itself installed, with its compiled kernels (``docs/scale-out.md``).
"""

from __future__ import annotations

from fpstore.spark.batch import query_batch
from fpstore.spark.frames import fingerprints_frame, to_signed, to_unsigned
from fpstore.spark.join import near_duplicates
from fpstore.spark.plans import spark_batch_design, spark_join_design
from fpstore.spark.shards import build_shards
from fpstore.spark.shardset import MANIFEST, ShardSet, shard_of
from fpstore.spark.texts import fingerprint

__all__ = [
    "MANIFEST",
    "ShardSet",
    "build_shards",
    "fingerprint",
    "fingerprints_frame",
    "near_duplicates",
    "query_batch",
    "shard_of",
    "spark_batch_design",
    "spark_join_design",
    "to_signed",
    "to_unsigned",
]

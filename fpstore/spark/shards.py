"""One complete fpstore per shard, bulk-loaded on the executors: :func:`build_shards`.

:class:`fpstore.spark.shardset.ShardSet` opens the result without Spark.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from fpstore.errors import InputError, PipelineMismatchError
from fpstore.fingerprint.pipeline import Pipeline
from fpstore.index.design import Design, design_for
from fpstore.spark.frames import arrow_u64, check_columns, require, schema_ddl
from fpstore.spark.shardset import MANIFEST, MANIFEST_FORMAT, ROUTING, shard_dir, shard_of
from fpstore.spark.sketches import SKETCH_COL, arrow_sketches, check_sketch_column, check_threshold
from fpstore.spark.texts import pipeline_payload, rebuild_pipeline
from fpstore.store.inputs import check_pipeline_id

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import DataFrame


def _route_fn(id_col: str, shards: int):
    def route(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        for batch in batches:
            ids = batch.column(batch.schema.get_field_index(id_col)).to_pylist()
            sh = np.fromiter((shard_of(i, shards) for i in ids), np.int32, count=len(ids))
            yield pa.RecordBatch.from_arrays(list(batch.columns) + [pa.array(sh, pa.int32())], names=list(batch.schema.names) + ["_shard"])

    return route


def _write_fn(
    root: str,
    payload: dict[str, Any],
    design_cfg: dict[str, Any],
    k: int,
    id_col: str,
    fp_col: str,
    sketch_col: str,
    threshold: float | None,
):
    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        import fpstore
        from fpstore.fingerprint.pipeline import Fingerprints

        parts = [b for b in batches if b.num_rows]
        if not parts:
            return
        tbl = pa.Table.from_batches(parts)
        shard_col = tbl.column("_shard").to_numpy()
        pipe = rebuild_pipeline(payload)
        design = Design.from_config(design_cfg)
        out_s, out_n, out_b = [], [], []
        for s in np.unique(shard_col).tolist():
            sel = tbl.filter(pa.array(shard_col == s))
            id_arr = sel.column(id_col).combine_chunks()
            fps = arrow_u64(sel.column(fp_col).combine_chunks())
            if pa.types.is_integer(id_arr.type):
                keys: Any = id_arr.to_numpy().astype(np.int64, copy=False)
            else:
                keys = id_arr.to_pylist()
            final = os.path.join(root, shard_dir(s))
            # A retried task starts over: build beside the final path, then rename into place.
            tmp = f"{final}.tmp-{uuid.uuid4().hex[:8]}"
            loaded: Any = fps
            if pipe.sketch_bits:
                sketches = arrow_sketches(sel.column(sketch_col), pipe.sketch_bits // 64, f"sketch column {sketch_col!r}")
                loaded = Fingerprints(fps, pipe.id, sketches=sketches)
            with fpstore.open(tmp, k=k, pipeline=pipe, design=design, expected_size=len(fps), threshold=threshold) as store:
                store.bulk_load(keys, loaded, pipeline_id=pipe.id)
                count = len(store)
            if os.path.exists(final):
                shutil.rmtree(final)
            os.rename(tmp, final)
            size = sum(os.path.getsize(os.path.join(final, f)) for f in os.listdir(final))
            out_s.append(s)
            out_n.append(count)
            out_b.append(size)
        host = socket.gethostname()
        yield pa.RecordBatch.from_arrays(
            [
                pa.array(out_s, pa.int32()),
                pa.array(out_n, pa.int64()),
                pa.array(out_b, pa.int64()),
                pa.array([host] * len(out_s), pa.string()),
            ],
            names=["shard", "count", "bytes", "host"],
        )

    return write


def build_shards(
    df: DataFrame,
    path: str | os.PathLike[str],
    *,
    shards: int,
    k: int,
    pipeline_id: str,
    pipeline: Pipeline | None = None,
    id_col: str = "id",
    fp_col: str = "fp",
    design: Design | str = "auto",
    expected_size: int | None = None,
    sketch_col: str = SKETCH_COL,
    threshold: float | None = None,
) -> dict[str, Any]:
    """Build ``shards`` complete fpstores under ``path`` from ``(id, fp)`` rows; returns the manifest.

    Routing: by a hash of the document key (:func:`shard_of`), not by fingerprint bits. A query
    within ``k`` must reach every shard whose range of top-``b`` fingerprint bits lies within ``k``
    bits of its own: ``sum(C(b, i) for i <= k)`` of the ``2**b`` shards, which is all 8 of 8
    shards and 15 of 16 for k = 3, so fingerprint routing would save almost no probes; it would
    also give unequal shards (real fingerprints cluster) and move a document to another shard when
    its text changes, leaving the old version behind. With key routing every query visits every
    shard (:class:`ShardSet` does), shards are equal in size, and a key always lives in one shard.

    Each shard is bulk-loaded (:meth:`Store.bulk_load`) by one task on an executor into
    ``path/shard-NNNNN`` (a local path: in a cluster, a directory every executor and the reader can
    reach, see docs/scale-out.md), with one design for all shards (``design`` chosen for
    ``expected_size / shards``; ``expected_size`` defaults to the row count). ``pipeline`` (default
    ``Pipeline()``, less its sketch without ``threshold``) must have id ``pipeline_id`` (a pipeline
    without a sketch also takes the fingerprints of the same pipeline with one). Keys must be unique (integer keys non-negative, as
    the store requires); rows with a null fingerprint are skipped. ``path/manifest.json`` records the shards, the routing rule, the pipeline, the
    design and the counts. A pipeline with ``sketch_bits`` makes stores that keep every document's
    verification sketch: the rows must carry it in ``sketch_col`` (as :func:`fingerprint` makes
    it), and the shards' matches carry their similarity as one store's do; ``threshold`` makes
    each shard a verifying store (``fpstore.open(threshold=)``), recorded in the manifest.
    """
    require()
    from pyspark.sql import functions as F

    if not isinstance(shards, int) or isinstance(shards, bool) or not 1 <= shards <= 99_999:
        raise InputError(f"shards must be an int in 1..99999, got {shards!r}")
    check_columns(df, id_col, fp_col)
    # As fpstore.open: a radius without a threshold answers within k bits and keeps no sketch.
    pipe = pipeline if pipeline is not None else (Pipeline() if threshold is not None else Pipeline(sketch_bits=0))
    try:
        check_pipeline_id(pipe, pipeline_id)
    except PipelineMismatchError:
        raise PipelineMismatchError(
            f"pipeline_id {pipeline_id!r} is not the id of the pipeline the shards would record ({pipe.id}); "
            "pass pipeline= the pipeline that made the fingerprints"
        ) from None
    root = os.path.abspath(os.fspath(path))
    if os.path.exists(os.path.join(root, MANIFEST)):
        raise InputError(f"{root} already holds a shard set ({MANIFEST}); choose an empty directory")
    os.makedirs(root, exist_ok=True)
    if threshold is not None:
        threshold = check_threshold(threshold)
        if not pipe.sketch_bits:
            raise InputError("build_shards(threshold=) needs a pipeline with a verification sketch (sketch_bits)")
    if pipe.sketch_bits:
        check_sketch_column(df, sketch_col, f"build_shards with a pipeline of {pipe.sketch_bits}-bit sketches")
    rows = df.select(id_col, fp_col, *([sketch_col] if pipe.sketch_bits else [])).where(F.col(fp_col).isNotNull())
    if expected_size is None:
        expected_size = rows.count()
    d = design_for(k, max(1, expected_size // shards), design)
    payload = pipeline_payload(pipe)
    routed = rows.mapInArrow(_route_fn(id_col, shards), f"{schema_ddl(rows)}, _shard int")
    written = (
        routed.repartition(shards, "_shard")
        .mapInArrow(
            _write_fn(root, payload, d.config(), k, id_col, fp_col, sketch_col, threshold), "shard int, count long, bytes long, host string"
        )
        .collect()
    )
    counts = {int(r["shard"]): (int(r["count"]), int(r["bytes"]), r["host"]) for r in written}
    import fpstore

    for s in range(shards):
        if s not in counts:  # no row routed here: an empty store keeps every shard openable
            with fpstore.open(os.path.join(root, shard_dir(s)), k=k, pipeline=pipe, design=d, threshold=threshold):
                pass
            counts[s] = (0, 0, socket.gethostname())
    manifest = {
        "format": MANIFEST_FORMAT,
        "shards": [
            {"shard": s, "path": shard_dir(s), "count": counts[s][0], "bytes": counts[s][1], "host": counts[s][2]} for s in range(shards)
        ],
        "routing": {
            "rule": ROUTING,
            "by": "key",
            "query": "every shard (a near-duplicate may be in any)",
        },
        "k": k,
        "threshold": threshold,
        "pipeline_id": pipe.id,
        "pipeline": pipe.config,
        "design": d.config(),
        "count": sum(c[0] for c in counts.values()),
        "created": int(time.time()),
    }
    tmp = os.path.join(root, MANIFEST + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=1, sort_keys=True)
    os.replace(tmp, os.path.join(root, MANIFEST))
    return manifest

"""Detection quality of a store as it ships, end to end: the answers of a real store, not a model.

    python tools/eval_store.py --corpus ~/.cache/fpstore/eval-corpus/corpus.jsonl \\
        --corpus ~/.cache/fpstore/web-corpus/corpus.jsonl [--open k=5] [--json out.json]

For each corpus (``PATH`` or ``PATH:FIELD=V1,V2`` as in ``tools/eval_sketch.py``) and each
``--open`` (``default``: ``fpstore.open(path)`` with no arguments; ``k=5``,
``threshold=0.7,k=8``...: those keywords), a new store in a temporary directory takes every
document as given (raw HTML pages stay raw) with ``add_many(texts=...)``, and
``near_duplicate_pairs()`` gives its pairs. They are scored against the exact truth of
:mod:`fpstore.quality.evaluate` (word 3-shingle Jaccard of the ``truth`` texts >= ``--threshold``,
default 0.8), byte-identical pages left out as in ``tools/eval_sketch.py``: precision, recall
and F1, with the store's pipeline, radius, threshold and bytes per document on disk.

Prints a Markdown table; ``--json`` writes the same rows. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fpstore  # noqa: E402
from fpstore.quality import evaluate as ev  # noqa: E402
from fpstore.quality import sketch as sk  # noqa: E402
from tools.eval_sketch import load  # noqa: E402


def open_options(spec: str) -> dict[str, Any]:
    """``default`` -> {}; ``k=5,threshold=0.7`` -> {"k": 5, "threshold": 0.7}."""
    if spec == "default":
        return {}
    out: dict[str, Any] = {}
    for item in spec.split(","):
        name, _, value = item.partition("=")
        out[name] = float(value) if "." in value else int(value)
    return out


def score(name: str, corpus: ev.Corpus, spec: str, threshold: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="eval-store-") as tmp:
        t0 = time.perf_counter()
        with fpstore.open(Path(tmp) / "s.fps", **open_options(spec)) as store:
            store.add_many(list(range(len(corpus))), texts=corpus.texts)
            a, b, _ = store.near_duplicate_pairs()
            ka = np.array(store.keys_of(a), np.int64)
            kb = np.array(store.keys_of(b), np.int64)
            info = store.info()
            row: dict[str, Any] = {
                "corpus": name,
                "open": spec,
                "pipeline": store.pipeline.id,
                "sketch_bits": store.pipeline.sketch_bits,
                "k": store.k,
                "threshold": store.threshold,
                "bytes_per_doc": round(info["file_size"] / len(corpus), 1),
            }
        seconds = time.perf_counter() - t0
    found = np.unique(np.stack([np.minimum(ka, kb), np.maximum(ka, kb)], axis=1).reshape(-1, 2), axis=0)
    sets, _ = ev.shingle_sets(corpus.truth, 3)
    digests = [hashlib.blake2b(t.encode("utf-8", "surrogatepass"), digest_size=16).digest() for t in corpus.texts]
    truth = ev.truth_pairs(sets, threshold, found, digests)
    _, positive, identical = sk.label_pairs(truth, found)
    positives = truth.positives - truth.positives_identical
    tp = int((positive & ~identical).sum())
    fp = int((~positive & ~identical).sum())
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / positives if positives else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    row.update(
        documents=len(corpus), positives=positives, tp=tp, fp=fp, precision=round(precision, 3), recall=round(recall, 3), f1=round(f1, 3)
    )
    row["seconds"] = round(seconds, 1)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", action="append", required=True, help="a JSONL corpus, PATH or PATH:FIELD=V1,V2 (repeatable)")
    ap.add_argument("--open", action="append", default=None, help="'default' or keywords of fpstore.open, k=5,threshold=0.7 (repeatable)")
    ap.add_argument("--threshold", type=float, default=0.8, help="truth: Jaccard of 3-shingle sets (default 0.8)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rows = []
    print("| corpus | fpstore.open(...) | pipeline | sketch bits | k | threshold | B/doc | documents | positives | TP | FP | precision | recall | F1 |")
    print("|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for spec in args.corpus:
        name, corpus = load(spec)
        for how in args.open or ["default"]:
            r = score(name, corpus, how, args.threshold)
            rows.append(r)
            print(
                f"| {r['corpus']} | {r['open']} | {r['pipeline']} | {r['sketch_bits']} | {r['k']} | {r['threshold']} | {r['bytes_per_doc']} "
                f"| {r['documents']:,} | {r['positives']:,} | {r['tp']:,} | {r['fp']:,} | {r['precision']:.3f} | {r['recall']:.3f} | {r['f1']:.3f} |",
                flush=True,
            )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``fpstore-admin demo``: ingest the sample corpus of real text on this machine and print its clusters."""

from __future__ import annotations

import argparse
import os
import sys
import time

import fpstore
from fpstore.admin.output import EXIT_ERROR, EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    """Ingest the sample corpus of real text on this machine into a store and print its near-duplicate clusters."""
    import tempfile

    from fpstore.admin.samples import sample_corpus

    docs = list(sample_corpus())
    if not docs:
        print("no sample text found on this machine", file=sys.stderr)
        return EXIT_ERROR
    tmp = None
    path = args.store
    if path is None:
        tmp = tempfile.TemporaryDirectory(prefix="fpstore-demo-")
        path = os.path.join(tmp.name, "demo.fps")
    try:
        mb = sum(len(t) for _, t in docs) / 1e6
        t0 = time.perf_counter()
        with fpstore.open(path, k=args.k) as store:
            store.add_many([n for n, _ in docs], texts=[t for _, t in docs], checkpoint=("demo", len(docs)))
            elapsed = time.perf_counter() - t0
            print(f"stored {len(store)} documents ({mb:.1f} MB of text) in {elapsed * 1000:.0f} ms at {path}")
            print(f"pipeline {store.pipeline.id} ({store.pipeline.kind}); {store.design.describe(len(store))}")
            # What a crawler sees: a page that is a lightly edited copy of one already stored.
            name, text = max(docs, key=lambda d: len(d[1]))
            words = text.split()
            edited = " ".join(words[: len(words) // 2] + ["(edited)"] + words[len(words) // 2 + 1 :])
            verdict = store.add("demo/edited-copy", text=edited)
            nearest = verdict.near_duplicates[0] if verdict.near_duplicates else None
            similarity = "" if nearest is None or nearest.similarity is None else f", estimated similarity {nearest.similarity:.2f}"
            print(
                f"add('demo/edited-copy'): near-duplicate of {verdict.duplicate_of!r} "
                f"(distance {nearest.distance if nearest else '-'}{similarity}), canonical {verdict.canonical!r}"
            )
            rule = (
                f"within k={store.k}"
                if store.threshold is None
                else f"of estimated similarity >= {store.threshold} (candidates within k={store.k})"
            )
        with fpstore.open(path, readonly=True, k=args.k) as store:  # an existing store's own k unless -k
            clusters = store.clusters()
        print(f"{len(clusters)} near-duplicate clusters {rule} (canonical first):")
        for c in clusters[: args.limit]:
            print(f"  {len(c.keys):3d}  {c.canonical!s}")
            for key in c.keys[1 : 1 + args.members]:
                print(f"         ~ {key!s}")
            if len(c.keys) > 1 + args.members:
                print(f"         ... and {len(c.keys) - 1 - args.members} more")
        if len(clusters) > args.limit:
            print(f"  ... and {len(clusters) - args.limit} more clusters (--limit)")
    finally:
        if tmp is not None:
            tmp.cleanup()
    return EXIT_OK

"""Make the golden stores of tests/golden_stores/: small stores written with the current format,
committed so that every later fpstore proves it still opens them and answers the same.

    python tools/make_golden_stores.py [--out tests/golden_stores] [--name v1-default]

A golden store holds every structure of the format: incremental documents (add_many with a
checkpoint), a bulk load of two runs and key segments, a compaction run (packed id column),
tombstones in runs and deletions in the incremental tier, documents added as text (one HTML, one
short text matched by content hash, an exact duplicate), all with the default pipeline. Beside its
``data.mdb`` (an LMDB compacting copy), ``reference.json`` holds the answers, computed by brute
force over what was written (not read back from the store): every key with its fingerprint,
queries by fingerprint and by text, ``near_duplicate_pairs``, the count and the checkpoint.

Make a new golden store when the format changes (FORMAT_VERSION, a run or state version, a new
feature): keep the old ones, which the new code must still read, and add one under a new name.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fpstore  # noqa: E402
from fpstore.store.header import FORMAT_VERSION  # noqa: E402
from tests.support.scenario import near  # noqa: E402

SEED = 20261129
K = 3

_WORDS = [f"word{i}" for i in range(500)]


def _key_json(key: object) -> list:
    if isinstance(key, str):
        return ["s", key]
    if isinstance(key, int):
        return ["i", key]
    return ["b", bytes(key).hex()]


def key_from_json(item: list) -> object:
    tag, value = item
    return value if tag in ("s", "i") else bytes.fromhex(value)


def build(path: str) -> dict:
    """Write the golden store at ``path``; return its reference answers."""
    rng = np.random.default_rng(SEED)
    u64 = np.iinfo(np.uint64).max
    store = fpstore.open(path, k=K)
    pid = store.pipeline.id
    docs: dict[object, int] = {}
    short: set[object] = set()

    # Incremental documents with a checkpoint.
    a_keys = [f"doc-{j}" for j in range(120)]
    a_fps = rng.integers(0, u64, size=120, dtype=np.uint64, endpoint=True)
    a_fps[100:] = near(rng, a_fps[:20], 2)
    store.add_many(a_keys, fingerprints=a_fps, pipeline_id=pid, checkpoint=("crawl", {"file": "part-0001", "offset": 120}))
    docs.update(zip(a_keys, a_fps.tolist()))
    # A bulk load: two runs, two key segments, integer keys.
    b_keys = np.arange(1000, 1300, dtype=np.int64)
    b_fps = rng.integers(0, u64, size=300, dtype=np.uint64, endpoint=True)
    b_fps[:30] = near(rng, a_fps[20:50], 3)
    b_fps[50:60] = b_fps[40:50]  # repeated fingerprints inside a run
    store.bulk_load(b_keys, b_fps, pipeline_id=pid, max_run=200)
    docs.update(zip(b_keys.tolist(), b_fps.tolist()))
    # Texts: plain, HTML (main content extracted), a near-duplicate, an exact duplicate, a short one.
    texts = []
    for j in range(3):
        texts.append((f"text-{j}", " ".join(rng.choice(_WORDS, size=60))))
    texts.append(("text-near", texts[0][1].replace(texts[0][1].split()[10], "changed", 1)))
    texts.append(("text-dup", texts[1][1]))
    texts.append(("html-0", "<html><head><title>t</title></head><body><nav>menu home about</nav><article><p>"
                  + " ".join(rng.choice(_WORDS, size=80)) + "</p></article><footer>copyright</footer></body></html>"))
    texts.append(("short-0", "only a few words here"))
    for key, text in texts:
        sig = store.pipeline.signature(text)
        store.add(key, text=text)
        docs[key] = sig.fingerprint
        if sig.short:
            short.add(key)
    # Deletions: incremental documents and bulk-loaded ones (tombstones in runs).
    for key in ("doc-5", "doc-6", 1003, 1250):
        assert store.delete(key)
        docs.pop(key)
    # A compaction of the incremental tier into a run with a packed id column.
    store.compact(full=False)
    # Incremental documents after it, replacing keys of both tiers.
    c_keys = [f"late-{j}" for j in range(40)] + ["doc-10", 1010]
    c_fps = rng.integers(0, u64, size=len(c_keys), dtype=np.uint64, endpoint=True)
    c_fps[:10] = near(rng, b_fps[100:110], 1)
    store.add_many(c_keys, fingerprints=c_fps, pipeline_id=pid, checkpoint=("crawl", {"file": "part-0002", "offset": 42}))
    docs.update(zip(c_keys, c_fps.tolist()))
    assert store.delete("late-3")
    docs.pop("late-3")

    # The reference: brute force over what was written.
    keys = list(docs)
    indexed = [key for key in keys if key not in short]
    fps = np.array([docs[key] for key in indexed], dtype=np.uint64)
    dist = np.bitwise_count(fps[:, None] ^ fps[None, :])
    ii, jj = np.nonzero(np.triu(dist <= K, 1))
    pairs = sorted(sorted([_key_json(indexed[i]), _key_json(indexed[j])]) + [int(dist[i, j])] for i, j in zip(ii.tolist(), jj.tolist()))
    queries = []
    probe = list(range(0, len(indexed), 7))
    for i in probe:
        q = int(fps[i]) ^ (1 << (i % 64))  # one bit off a stored fingerprint
        d = np.bitwise_count(fps ^ np.uint64(q))
        matches = sorted([_key_json(indexed[j]), int(d[j])] for j in np.flatnonzero(d <= K).tolist())
        queries.append({"fingerprint": q, "matches": matches})
    text_queries = [{"text": text, "matches": None} for key, text in texts]
    for tq, (key, _) in zip(text_queries, texts):
        if key in short:
            same = [k for k, t in texts if k in short and store.pipeline.signature(t).content_hash == store.pipeline.signature(tq["text"]).content_hash]
            tq["matches"] = sorted([_key_json(k), 0] for k in same)
        else:
            q = docs[key]
            d = np.bitwise_count(fps ^ np.uint64(q))
            tq["matches"] = sorted([_key_json(indexed[j]), int(d[j])] for j in np.flatnonzero(d <= K).tolist())
    reference = {
        "format": FORMAT_VERSION,
        "fpstore": fpstore.__version__,
        "pipeline_id": pid,
        "pipeline": store.pipeline.config,
        "design": store.design.name,
        "k": K,
        "count": len(docs),
        "checkpoints": {"crawl": {"file": "part-0002", "offset": 42}},
        "documents": [[_key_json(key), docs[key], key in short] for key in keys],
        "pairs": pairs,
        "queries": queries,
        "text_queries": text_queries,
        "layout": None,
    }
    # The store must agree before it becomes golden.
    for q in queries:
        got = sorted([_key_json(m.key), m.distance] for m in store.query(fingerprint=q["fingerprint"], pipeline_id=pid))
        assert got == q["matches"], (q, got)
    counts = store.counts()
    reference["layout"] = {"runs": len(counts["runs"]), "segments": len(counts["segments"]),
                           "incremental": counts["incremental_entries"], "tombstones": counts["tombstones"]}
    store.close()
    return reference


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "golden_stores"))
    parser.add_argument("--name", default=f"v{FORMAT_VERSION}-default")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="fpstore-golden-")
    try:
        src = os.path.join(work, "store")
        reference = build(src)
        dest = os.path.join(args.out, args.name)
        if os.path.exists(dest):
            shutil.rmtree(dest)
        os.makedirs(dest)
        import lmdb

        env = lmdb.open(src, subdir=True, lib_version=0, max_dbs=256, readonly=True, map_size=0)
        try:
            env.copy(dest, compact=True)  # only live pages: the smallest file that holds the store
        finally:
            env.close()
        with open(os.path.join(dest, "reference.json"), "w", encoding="utf-8") as f:
            json.dump(reference, f, indent=1, sort_keys=True)
            f.write("\n")
        size = os.path.getsize(os.path.join(dest, "data.mdb"))
        print(f"{dest}: {reference['count']} documents, layout {reference['layout']}, data.mdb {size:,} bytes")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

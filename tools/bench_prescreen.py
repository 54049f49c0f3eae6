"""Would a Bloom filter in front of the key catalogue or the content-hash tier pay on ``add()``?
(docs/benchmarks.md, section "A pre-screen on add()").

    cd /work/main && python tools/bench_prescreen.py
    cd /work/main && python tools/bench_prescreen.py --n 1e6 --segments 1 4 16 64

A store of ``--n`` bulk-loaded fingerprints under string keys, loaded in S key segments (one per
``bulk_load`` call: S in ``--segments``), plus 2,000 incremental documents. In one read
transaction, medians over ``--lookups`` keys each:

* ``Catalog.id_of`` of a key that is not stored (what a crawler's new page costs: the incremental
  keys table, then every segment's key-hash run) and of a stored key;
* ``Catalog.content_ids`` of a content hash that is not stored (the exact-duplicate tier: one
  B-tree cursor seek);
* the check a pre-screen would put in front: a Bloom filter of 10 bits per key and 7 probes
  (double hashing of the 64-bit key hash the segments already store), in Python over a
  ``bytearray`` (the form the store would keep), and its build time and size per 10^6 keys;
* ``add()`` of a new key by fingerprint, durable, p50: what the saving is a share of.

Not collected by pytest; tunes nothing. The store goes under ``--tmp`` and is deleted at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _bench_common as bc  # noqa: E402

import fpstore  # noqa: E402
from fpstore.index.tiers import key_hash  # noqa: E402
from fpstore.store.keys import typed_key  # noqa: E402

BITS_PER_KEY, PROBES = 10, 7
M64 = (1 << 64) - 1


class Bloom:
    """The pre-screen under test: m bits, PROBES positions from h1 + i * h2 of a 64-bit hash."""

    def __init__(self, hashes: np.ndarray) -> None:
        self.m = max(64, len(hashes) * BITS_PER_KEY)
        bits = np.zeros(self.m, dtype=bool)
        h1 = hashes & np.uint64(0xFFFFFFFF)
        h2 = (hashes >> np.uint64(32)) | np.uint64(1)
        for i in range(PROBES):
            bits[((h1 + np.uint64(i) * h2) % np.uint64(self.m)).astype(np.int64)] = True
        self.bits = bytearray(np.packbits(bits, bitorder="little").tobytes())

    def __contains__(self, h: int) -> bool:
        h1, h2, m, bits = h & 0xFFFFFFFF, (h >> 32) | 1, self.m, self.bits
        for i in range(PROBES):
            p = (h1 + i * h2) % m
            if not bits[p >> 3] >> (p & 7) & 1:
                return False
        return True


def median_us(fn, items) -> float:
    times = []
    for x in items:
        t = time.perf_counter_ns()
        fn(x)
        times.append(time.perf_counter_ns() - t)
    return statistics.median(times) / 1e3


def run(n: int, segments: int, lookups: int, tmp: str, rng: np.random.Generator) -> dict:
    with tempfile.TemporaryDirectory(dir=tmp) as d, fpstore.open(Path(d) / "s", k=3, expected_size=n) as store:
        pid, cat = store.pipeline.id, store._cat
        per = n // segments
        for s in range(segments):
            store.bulk_load([f"https://example.org/{s}/{i}" for i in range(per)], bc.random_fps(per, rng), pipeline_id=pid)
        store.add_many([f"inc{i}" for i in range(2000)], fingerprints=bc.random_fps(2000, rng), pipeline_id=pid)
        absent = [typed_key(f"https://example.net/new/{i}") for i in range(lookups)]
        present = [typed_key(f"https://example.org/{int(rng.integers(segments))}/{int(rng.integers(per))}") for _ in range(lookups)]
        hashes_absent = [key_hash(t) for t in absent]
        with store._storage.read() as txn:
            miss = median_us(lambda t: cat.id_of(txn, t), absent)
            hit = median_us(lambda t: cat.id_of(txn, t), present)
            content = median_us(lambda h: cat.content_ids(txn, h), [rng.bytes(16) for _ in range(lookups)])
        all_hashes = np.array([key_hash(typed_key(f"https://example.org/0/{i}")) for i in range(min(per, 10**6))], np.uint64)
        t = time.perf_counter()
        bloom = Bloom(all_hashes)
        build_s = (time.perf_counter() - t) * 10**6 / len(all_hashes)
        check = median_us(lambda h: h in bloom, hashes_absent)
        false_pos = sum(h in bloom for h in hashes_absent) / len(hashes_absent)
        fps = bc.random_fps(300, rng).tolist()
        add = median_us(lambda i: store.add(f"https://example.net/add/{i}", fingerprint=fps[i], pipeline_id=pid), range(300))
    return {"n": n, "segments": segments, "id_of_absent_us": miss, "id_of_present_us": hit, "content_absent_us": content,
            "bloom_check_us": check, "bloom_false_positive": false_pos, "bloom_build_s_per_1e6": build_s,
            "bloom_bytes_per_key": BITS_PER_KEY / 8, "add_p50_us": add}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--n", type=float, default=1e6)
    ap.add_argument("--segments", type=int, nargs="*", default=[1, 4, 16, 64])
    ap.add_argument("--lookups", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tmp", default=bc.DEFAULT_TMP)
    ap.add_argument("--json")
    args = ap.parse_args()
    Path(args.tmp).mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    start = bc.uptime()
    rows = [run(int(args.n), s, args.lookups, args.tmp, rng) for s in args.segments]
    print(f"<!-- {' '.join(sys.argv)} -->\nfpstore {bc.code_version()}. Load before: `{start}`; after: `{bc.uptime()}`.\n")
    print(bc.md_table(
        ["n", "segments", "id_of, absent key µs", "id_of, stored key µs", "content tier, absent µs", "Bloom check µs (false +)",
         "saving ÷ add() p50"],
        [[bc.fmt_n(r["n"]), r["segments"], f"{r['id_of_absent_us']:.1f}", f"{r['id_of_present_us']:.1f}", f"{r['content_absent_us']:.1f}",
          f"{r['bloom_check_us']:.1f} ({r['bloom_false_positive']:.3f})",
          f"{max(0.0, r['id_of_absent_us'] - r['bloom_check_us']) / r['add_p50_us']:.1%} of {r['add_p50_us']:.0f} µs"] for r in rows]))
    print(f"\nBloom build: {rows[0]['bloom_build_s_per_1e6']:.2f} s per 10^6 keys (numpy), {BITS_PER_KEY / 8:.2f} B/key.")
    bc.write_json(args.json, {"argv": sys.argv, "rows": rows})


if __name__ == "__main__":
    main()

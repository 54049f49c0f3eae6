"""Instructions per call, counted by valgrind's callgrind: ``store.query`` of one fingerprint, or
one ``Store.add`` in a group of ``--group`` (the group commit's body and commit), on a bulk-loaded
store (docs/benchmarks.md, "Reads in a burst" and "Gathering a group").

    cd /work/main && python tools/bench_ir.py query
    cd /work/main && python tools/bench_ir.py add
    PYTHONPATH=<tree> python tools/bench_ir.py query --code <tree>   # another checkout, same script

Wall time on a shared 2-core machine moves with the other work; an instruction count does not.
The store (``--n`` uniform random fingerprints under integer keys, k = 3, design ``auto``) is built
once, outside valgrind; then the same child runs under ``valgrind --tool=callgrind`` twice, with
``--calls`` and 4 × ``--calls`` timed calls after the same warm-up (open, ``warm()``, 300 untimed
queries or 20 groups), and the difference of the two totals ÷ the difference in calls is the figure:
what opening and warming cost cancels, to within about 5 % between repeated runs (the
warm-up's own count moves by tens of millions). Queries: stored fingerprints with one bit flipped (each
matches its source) and uniform random ones, half each, shuffled. Adds: fresh string keys, 90 %
random fingerprints and 10 % stored ones with bits flipped. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def child(args: argparse.Namespace) -> None:
    if args.code:
        sys.path.insert(0, args.code)
    import fpstore

    stored = np.load(args.store + ".npy")
    n = len(stored)
    rng = np.random.default_rng(7)
    store = fpstore.open(args.store)
    pid = store.pipeline.id
    store.warm()
    if args.what == "query":
        m = 300 + args.count
        near = stored[rng.integers(0, n, m // 2)] ^ (np.uint64(1) << rng.integers(0, 64, m // 2).astype(np.uint64))
        qs = np.concatenate([near, rng.integers(0, 2**63, m - m // 2, dtype=np.uint64)])
        rng.shuffle(qs)
        for q in qs.tolist():
            store.query(fingerprint=q, pipeline_id=pid)
    else:
        from fpstore.store.inputs import prepare_add

        g = args.group
        rounds = 20 + args.count // g
        fps = rng.integers(0, 2**63, g * rounds, dtype=np.uint64)
        near = rng.random(g * rounds) < 0.1
        fps[near] = stored[rng.integers(0, n, int(near.sum()))] ^ np.uint64(5)
        plain = fps.tolist()
        for r in range(rounds):
            adds = [prepare_add(store.pipeline, f"https://example.org/x/{r}-{i}", None, plain[r * g + i], pid, "insert", None) for i in range(g)]
            store._commit_adds(adds)  # what the group commit runs for a group of g callers
    store.close()


def collected(cmd: list[str], env: dict[str, str]) -> int:
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd], capture_output=True, text=True, env=env)
    found = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode or not found:
        raise SystemExit(f"valgrind run failed:\n{out.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("what", choices=["query", "add"])
    ap.add_argument("--n", type=float, default=1e6)
    ap.add_argument("--calls", type=int, default=500, help="timed calls of the shorter run (the longer has 4x)")
    ap.add_argument("--group", type=int, default=16)
    ap.add_argument("--code", help="a checkout whose fpstore to measure (default: this one)")
    ap.add_argument("--tmp", default="/work/bench-tmp")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    ap.add_argument("--count", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    code = args.code or str(Path(__file__).resolve().parent.parent)
    sys.path.insert(0, code)
    import fpstore

    Path(args.tmp).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.tmp) as d:
        base = os.path.join(d, "s")
        n = int(args.n)
        stored = np.random.default_rng(1).integers(0, 2**63, n, dtype=np.uint64)
        with fpstore.open(base, k=3) as store:
            store.bulk_load(np.arange(n), stored, pipeline_id=store.pipeline.id)
        np.save(base + ".npy", stored)
        env = {**os.environ, "PYTHONPATH": code, "PYTHONHASHSEED": "0"}  # the same dict layouts in both runs
        totals = []
        for count in (args.calls, 4 * args.calls):
            path = base
            if args.what == "add":  # every run adds to its own copy of the loaded store
                path = os.path.join(d, f"c{count}")
                shutil.copytree(base, path)
                shutil.copy(base + ".npy", path + ".npy")
            cmd = [sys.executable, __file__, args.what, "--child", "--store", path, "--count", str(count), "--code", code]
            cmd += ["--group", str(args.group)]
            totals.append(collected(cmd, env))
        calls = 3 * args.calls if args.what == "query" else (4 * args.calls // args.group - args.calls // args.group) * args.group
        per = (totals[1] - totals[0]) / calls
        unit = "query" if args.what == "query" else f"add (groups of {args.group})"
        print(f"fpstore from {code}: n={n:,}: {per:,.0f} instructions per {unit} ({totals[0]:,} and {totals[1]:,} in all)")


if __name__ == "__main__":
    main()

"""A/B: the store and run benchmarks of two checkouts, alternated in one sitting, compared by median.

    python tools/bench_ab.py --a /path/to/checkout-A --b . --rounds 3 --n 1e6

Each round runs ``tools/bench_store.py`` and ``tools/bench_runs.py`` of checkout A, then of B
(the order flips every round, so that a drift of the machine's load falls on both), each in its own
process with ``PYTHONPATH`` set to that checkout, each checkout's own benchmark script, and the
same arguments (``--n N --designs auto --no-faiss``). A checkout needs its compiled kernels in place
(``tools/build_inplace.sh``). The table gives, for each figure, the median of A, the median of B
and B / A, oriented so that above 1 is B faster; a figure whose ratio is below ``1 - --tolerance``
is flagged. Medians over rounds, not means: the machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

#: (benchmark, path into its first fpstore result, name, True when larger is better)
FIGURES = [
    ("store", ("add", "rate"), "add_many batches of 1,000, docs/s", True),
    ("store", ("query", "single", "p50"), "single query p50, µs", False),
    ("store", ("query", "single_warm", "p50"), "single query p50 after warm(), µs", False),
    ("store", ("query", "batch", "rate"), "query_many 10^5, q/s", True),
    ("runs", ("bulk", "rate"), "bulk_load, docs/s", True),
    ("runs", ("query", "single_warm", "p50"), "single query p50 after warm() (runs), µs", False),
    ("runs", ("query", "batch_100k", "rate"), "query_many 10^5 (runs), q/s", True),
    ("runs", ("pairs", "seconds"), "all pairs, s", False),
]


def run_one(tree: str, bench: str, n: str, out: str) -> dict:
    script = os.path.join(tree, "tools", f"bench_{bench}.py")
    cmd = [sys.executable, script, "--n", n, "--designs", "auto", "--no-faiss", "--json", out]
    env = dict(os.environ, PYTHONPATH=tree)
    subprocess.run(cmd, cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        data = json.load(f)
    return data["results"][0]["fpstore"][0]


def pick(result: dict, path: tuple[str, ...]) -> float:
    value: object = result
    for part in path:
        value = value[part]  # type: ignore[index]
    return float(value)  # type: ignore[arg-type]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="checkout A (the baseline)")
    ap.add_argument("--b", default=".", help="checkout B (default: this one)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", default="1e6")
    ap.add_argument("--tolerance", type=float, default=0.10)
    args = ap.parse_args()
    trees = {"A": os.path.abspath(args.a), "B": os.path.abspath(args.b)}
    seen: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="fpstore-ab-") as tmp:
        for r in range(args.rounds):
            order = ["A", "B"] if r % 2 == 0 else ["B", "A"]
            for side in order:
                for bench in ("store", "runs"):
                    res = run_one(trees[side], bench, args.n, os.path.join(tmp, f"{side}-{bench}-{r}.json"))
                    for b, path, name, _ in FIGURES:
                        if b == bench:
                            seen.setdefault((side, name), []).append(pick(res, path))
                print(f"round {r + 1}: {side} done", file=sys.stderr, flush=True)
    print(f"A = {trees['A']}\nB = {trees['B']}\nn = {args.n}, {args.rounds} rounds, medians; B/A > 1 means B is faster\n")
    print(f"| figure | A | B | B/A |\n|---|--:|--:|--:|")
    worst = 1.0
    for _, _, name, larger_better in FIGURES:
        a = statistics.median(seen[("A", name)])
        b = statistics.median(seen[("B", name)])
        ratio = b / a if larger_better else a / b
        worst = min(worst, ratio)
        flag = "  **slower**" if ratio < 1 - args.tolerance else ""
        print(f"| {name} | {a:,.4g} | {b:,.4g} | {ratio:.2f}{flag} |")
    return 0 if worst >= 1 - args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())

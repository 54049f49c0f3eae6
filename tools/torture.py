"""Long versions of the crash and concurrency tests (the CI versions are in tests/).

    python tools/torture.py kill --cycles 2000 [--seed 1] [--per-store 200] [--dir DIR]
    python tools/torture.py snapshot --rounds 20 [--batches 150] [--readers 4]

``kill``: SIGKILL a feed writer at random points, ``--per-store`` cycles on each fresh store, then
resume it once to the end and check every document (see tests/test_crash.py for the checks).
``snapshot``: a writer commits ``--batches`` batches while reader processes check, in every
snapshot, that all tables agree with the count and checkpoint (tests/test_concurrency.py).
Prints one line of figures per store or round; exits 1 on the first failure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fpstore  # noqa: E402
from tests.test_concurrency import _feed, _run_writer_with_readers  # noqa: E402
from tests.test_crash import MAX_DELAY, MIN_DELAY, finish_feed, run_kill_cycles, verify_exact  # noqa: E402
from tests.workers import check_snapshot, snapshot  # noqa: E402


def kill(args: argparse.Namespace, root: str) -> None:
    done, n = 0, 0
    totals: dict[str, float] = {}
    t0 = time.perf_counter()
    while done < args.cycles:
        cycles = min(args.per_store, args.cycles - done)
        path = os.path.join(root, f"kill{n}")
        fpstore.open(path, k=3).close()
        stats = run_kill_cycles(path, cycles, args.seed + n, log=lambda *_: None, min_delay=args.min_delay, max_delay=args.max_delay)
        last = finish_feed(path, stats["checkpoint"], extra=3)
        verify_exact(path, last)
        print(f"store {n}: {stats}", flush=True)
        for key, value in stats.items():
            if isinstance(value, (int, float)) and key not in ("checkpoint", "per_cycle_ms", "spawn_to_ready_ms", "verify_ms"):
                totals[key] = totals.get(key, 0) + value
        shutil.rmtree(path)
        done += cycles
        n += 1
    elapsed = time.perf_counter() - t0
    print(f"total: {totals}, {elapsed:.0f} s, {1000 * elapsed / args.cycles:.0f} ms per cycle")


def snapshots(args: argparse.Namespace, root: str) -> None:
    for r in range(args.rounds):
        path = os.path.join(root, f"snap{r}")
        with fpstore.open(path, k=3) as store:
            _feed(store, range(3))
        t0 = time.perf_counter()
        _, stats = _run_writer_with_readers(path, args.batches, args.readers)
        with fpstore.open(path, readonly=True) as store:
            snap = snapshot(store)
            check_snapshot(snap)
            assert snap["ckpt"] == args.batches - 1
        iterations = sum(s["iterations"] for s in stats)
        print(f"round {r}: {time.perf_counter() - t0:.1f} s, {iterations} snapshots checked by {args.readers} readers", flush=True)
        shutil.rmtree(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("kill")
    p.add_argument("--cycles", type=int, default=2000)
    p.add_argument("--per-store", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--min-delay", type=float, default=MIN_DELAY)
    p.add_argument("--max-delay", type=float, default=MAX_DELAY)
    p.set_defaults(fn=kill)
    p = sub.add_parser("snapshot")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--batches", type=int, default=150)
    p.add_argument("--readers", type=int, default=4)
    p.set_defaults(fn=snapshots)
    for p in sub.choices.values():
        p.add_argument("--dir", default=None, help="where to make the stores (default: a temporary directory)")
    args = parser.parse_args()
    root = args.dir or tempfile.mkdtemp(prefix="fpstore-torture-")
    try:
        args.fn(args, root)
    except AssertionError as exc:
        print(f"FAILED: {exc}", flush=True)
        return 1
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

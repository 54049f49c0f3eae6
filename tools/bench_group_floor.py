"""What the group commit itself costs (docs/benchmarks.md, section "The crawler's write path",
"The floor under the group commit"): :class:`fpstore.store.group.GroupCommit` driven by C threads
with no store behind it, its commit a stand-in of ``--work`` ms of CPU with the interpreter lock
held (a group's verdicts and writes) then ``--sync`` ms without it (the durable commit's fsync).

    cd /work/main && python tools/bench_group_floor.py
    cd /work/main && python tools/bench_group_floor.py --callers 16 --work 0 0.5 1.0 --sync 0.9

Each (C, work) runs a window of ``--seconds``: every thread submits as fast as its group returns.
Figures: requests/s, the mean group, the mean group cycle (window ÷ groups), and the cycle less
the stand-in's own time (work + sync): what waking the callers of a group and gathering the next
one costs, which no change to the store's own work removes. Beside it, the issue's ceiling for
the same stand-in, min(C ÷ (work + sync), C ÷ work) ... i.e. min(C ÷ one group's commit, 1 ÷ the
CPU a request costs), and the rate as a share of it.

``--store`` measures the store's own add path instead, in each durability mode of ``--durability``:
C threads calling ``Store.add`` by fingerprint, each window on a fresh copy of a store of ``--n``
(10^6) uniform random fingerprints bulk-loaded under integer keys (k = 3), as in
``tools/bench_aio.py``; once with the verdicts and
writes as they are, once with a stand-in (``Store._add_group`` replaced by one that writes a single
key, so that every durable commit still writes and syncs a page): what the callers, the group
commit or the stager, the nested transactions and the commits cost with no verdict to compute.
Rounds alternate the modes; figures are medians, and each mode's rate ÷ ``full``'s of the same
kind. Not collected by pytest; tunes nothing.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fpstore.store.group import GroupCommit  # noqa: E402


def run_callers(callers: int, caller: Callable[[int], None]) -> tuple[float, float]:
    """``caller(i)`` in a thread of its own for each i < ``callers``: (wall s, process CPU s)."""
    threads = [threading.Thread(target=caller, args=(i,)) for i in range(callers)]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - wall0, time.process_time() - cpu0


def run(callers: int, work_s: float, sync_s: float, seconds: float) -> dict[str, float]:
    def commit(requests: list[int]) -> list[int]:
        started = time.perf_counter()
        while time.perf_counter() - started < work_s:  # CPU with the interpreter lock held
            pass
        time.sleep(sync_s)  # the fsync: the lock released
        return list(requests)

    group: GroupCommit[int, int] = GroupCommit(commit)
    counts = [0] * callers
    stop = time.perf_counter() + seconds

    def caller(i: int) -> None:
        while time.perf_counter() < stop:
            group.submit(i)
            counts[i] += 1

    wall, cpu = run_callers(callers, caller)
    done = sum(counts)
    cycle = wall / max(group.groups, 1)
    mean_group = group.requests / max(group.groups, 1)
    ceiling = callers / (work_s + sync_s)  # C callers over one commit of a full group
    return {
        "rate": done / wall,
        "mean_group": mean_group,
        "cycle_ms": cycle * 1e3,
        "overhead_ms": (cycle - work_s - sync_s) * 1e3,
        "cpu_us": cpu / max(done, 1) * 1e6,
        "ceiling": ceiling,
    }


def base_store(n: int, tmp: str | None) -> str:
    """A directory holding a store of ``n`` random fingerprints bulk-loaded (k = 3)."""
    import numpy as np

    import fpstore

    path = tempfile.mkdtemp(dir=tmp, prefix="floor-base-")
    with fpstore.open(str(Path(path) / "s"), k=3) as store:
        store.bulk_load(np.arange(n), np.random.default_rng(0).integers(0, 2**63, n, dtype=np.uint64), pipeline_id=store.pipeline.id)
    return path


def run_store(base: str, callers: int, durability: str, stand_in: bool, seconds: float, tmp: str | None) -> dict[str, float]:
    """``Store.add`` from ``callers`` threads for ``seconds`` on a copy of ``base``; with ``stand_in``,
    each group's verdicts and writes replaced by one key written (see the module docstring)."""
    import fpstore
    from fpstore.store.results import AddResult
    from fpstore.store.store import Store

    def stand_in_group(store: Store, txn: Any, adds: Any) -> list[AddResult]:
        txn.put(b"floor-stand-in", str(len(adds)).encode(), db=store._cat.meta)
        return [AddResult(1, a.key, a.fp, False, None, [], None) for a in adds]

    real_group = Store._add_group
    with tempfile.TemporaryDirectory(dir=tmp) as d:
        shutil.copytree(Path(base) / "s", Path(d) / "s")
        if stand_in:  # before the open: the stager's requests bind the method when the store opens
            Store._add_group = stand_in_group  # type: ignore[method-assign,assignment]
        try:
            store = fpstore.open(str(Path(d) / "s"), k=3, durability=durability)
        except BaseException:
            Store._add_group = real_group  # type: ignore[method-assign]
            raise
        try:
            pid = store.pipeline.id
            counter = itertools.count()
            counts = [0] * callers
            stop = time.perf_counter() + seconds

            def caller(i: int) -> None:
                rng_state = (i + 1) * 0x9E3779B97F4A7C15
                while time.perf_counter() < stop:
                    rng_state = (rng_state * 6364136223846793005 + 1442695040888963407) % 2**64
                    store.add(f"f{next(counter)}", fingerprint=rng_state, pipeline_id=pid)
                    counts[i] += 1

            wall, cpu = run_callers(callers, caller)
        finally:
            Store._add_group = real_group  # type: ignore[method-assign]
            store.close()
    done = sum(counts)
    return {"rate": done / wall, "cpu_us": cpu / max(done, 1) * 1e6}


def _store_rounds(args: argparse.Namespace, base: str, rows: dict[tuple[int, str, bool], list[dict[str, float]]]) -> None:
    for r in range(args.rounds):
        modes = args.durability[r % len(args.durability) :] + args.durability[: r % len(args.durability)]
        for c in args.callers:
            for durability in modes:
                for stand_in in (False, True):
                    got = run_store(base, c, durability, stand_in, args.seconds, args.tmp)
                    rows.setdefault((c, durability, stand_in), []).append(got)
                    print(f"  round {r} C={c} {durability} {'stand-in' if stand_in else 'verdicts'}: {got['rate']:,.0f} adds/s", flush=True)


def main_store(args: argparse.Namespace) -> None:
    print(
        f"<!-- tools/bench_group_floor.py --store --callers {' '.join(map(str, args.callers))} "
        f"--durability {' '.join(args.durability)} --rounds {args.rounds} --seconds {args.seconds:g} --n {args.n} -->"
    )
    rows: dict[tuple[int, str, bool], list[dict[str, float]]] = {}
    base = base_store(args.n, args.tmp)
    try:
        _store_rounds(args, base, rows)
    finally:
        shutil.rmtree(base)

    def med(c: int, durability: str, stand_in: bool, what: str) -> float:
        return statistics.median(x[what] for x in rows[(c, durability, stand_in)])

    print(
        "| callers | durability | adds/s with verdicts (CPU µs/add) | adds/s, verdicts a stand-in (CPU µs/add) | ÷ full, with verdicts | ÷ full, stand-in |"
    )
    print("|---|---|---|---|---|---|")
    for c in args.callers:
        for durability in args.durability:
            cells = [f"{med(c, durability, s, 'rate'):,.0f} ({med(c, durability, s, 'cpu_us'):.0f})" for s in (False, True)]
            ratios = [
                f"{med(c, durability, s, 'rate') / med(c, 'full', s, 'rate'):.2f}" if "full" in args.durability else "–"
                for s in (False, True)
            ]
            print(f"| {c} | {durability} | {cells[0]} | {cells[1]} | {ratios[0]} | {ratios[1]} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--callers", type=int, nargs="*", default=[1, 4, 16, 64])
    ap.add_argument("--work", type=float, nargs="*", default=[0.0, 1.0], help="ms of CPU per group")
    ap.add_argument("--sync", type=float, default=0.9, help="ms per commit without the lock (an fsync)")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--store", action="store_true", help="the store's add path, with verdicts and with a stand-in")
    ap.add_argument("--durability", nargs="*", default=["full", "interval"], choices=["full", "process", "interval"])
    ap.add_argument("--rounds", type=int, default=3, help="--store: rounds, the modes' order rotating")
    ap.add_argument("--n", type=int, default=10**6, help="--store: documents bulk-loaded first")
    ap.add_argument("--tmp", default=None, help="--store: where the stores go (default: the system's)")
    args = ap.parse_args()
    if args.store:
        if args.callers == [1, 4, 16, 64]:
            args.callers = [16]
        main_store(args)
        return
    print(
        f"<!-- tools/bench_group_floor.py --callers {' '.join(map(str, args.callers))} --work {' '.join(map(str, args.work))} --sync {args.sync} -->"
    )
    print(
        "| callers | work ms | sync ms | requests/s | mean group | group cycle ms | cycle - work - sync ms | CPU µs/request | ceiling/s | ÷ ceiling |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for work in args.work:
        for c in args.callers:
            r = run(c, work / 1e3, args.sync / 1e3, args.seconds)
            print(
                f"| {c} | {work:g} | {args.sync:g} | {r['rate']:,.0f} | {r['mean_group']:.1f} | {r['cycle_ms']:.2f} | "
                f"{r['overhead_ms']:.2f} | {r['cpu_us']:.0f} | {r['ceiling']:,.0f} | {r['rate'] / r['ceiling']:.0%} |"
            )


if __name__ == "__main__":
    main()

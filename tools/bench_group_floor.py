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
CPU a request costs), and the rate as a share of it. Not collected by pytest; tunes nothing.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fpstore.store.group import GroupCommit  # noqa: E402


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

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(callers)]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
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


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--callers", type=int, nargs="*", default=[1, 4, 16, 64])
    ap.add_argument("--work", type=float, nargs="*", default=[0.0, 1.0], help="ms of CPU per group")
    ap.add_argument("--sync", type=float, default=0.9, help="ms per commit without the lock (an fsync)")
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
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

"""What one hand-over between two Python threads costs on this machine, with the threads free to
run on any CPU and with both on one CPU (docs/benchmarks.md, "The crawler's write path on one CPU").

    cd /work/main && python tools/bench_handoff.py

Two threads pass a token back and forth through two locks (``_thread.allocate_lock``), the way a
group commit wakes each caller and each caller hands the interpreter lock back when it waits again:
every pass is a wake-up of the other thread and a hand-over of the interpreter lock. A round trip
is two passes. Each round runs ``--passes`` round trips free, then the same pinned to one CPU
(``os.sched_setaffinity``, Linux), alternating which goes first; the figures are medians over
``--rounds``. Wall time and process CPU time (both threads) per round trip. No fpstore involved:
this is the floor under every thread hand-over fpstore makes. Not collected by pytest.
"""

from __future__ import annotations

import _thread
import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _bench_common as bc  # noqa: E402


def round_trips(passes: int) -> tuple[float, float]:
    """(wall µs, CPU µs) per round trip of ``passes`` round trips between two threads."""
    ping, pong = _thread.allocate_lock(), _thread.allocate_lock()
    ping.acquire()
    pong.acquire()

    def other() -> None:
        for _ in range(passes):
            ping.acquire()
            pong.release()

    t = threading.Thread(target=other)
    t.start()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for _ in range(passes):
        ping.release()
        pong.acquire()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    t.join()
    return wall / passes * 1e6, cpu / passes * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--passes", type=int, default=20_000, help="round trips per measurement")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    print(f"{bc.uptime()}; {len(os.sched_getaffinity(0))} CPU(s)")
    free: list[tuple[float, float]] = []
    one: list[tuple[float, float]] = []
    for r in range(args.rounds):
        for pinned in (False, True) if r % 2 == 0 else (True, False):
            if pinned:
                with bc.on_one_cpu():
                    one.append(round_trips(args.passes))
            else:
                free.append(round_trips(args.passes))
    print("\n| threads | round trip µs (wall), median | CPU µs per round trip, median | wall, every round |")
    print("|---|--:|--:|---|")
    for name, xs in (("free on every CPU", free), ("both on one CPU", one)):
        walls = [w for w, _ in xs]
        print(
            f"| {name} | {statistics.median(walls):.1f} | {statistics.median(c for _, c in xs):.1f} | {', '.join(f'{w:.1f}' for w in walls)} |"
        )
    print(f"\n{bc.uptime()}")


if __name__ == "__main__":
    main()

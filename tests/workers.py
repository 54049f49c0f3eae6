"""Subprocess entry points for the reliability tests (the worker CLI).

Run as ``python -m tests.workers COMMAND PATH [options]`` with the repository root as the working
directory (or as ``python tests/workers.py ...``). Workers talk to the parent on stdout, one line
per event, flushed at once, so that a parent that SIGKILLs a worker still reads every line the
worker printed before it died. A failed check prints ``FAIL <message>`` and exits with status 1.
``fork-server`` forks workers from one interpreter that has imported fpstore.

What the workers check against lives in ``tests/support/``: the feed oracle (``oracle``), the
scenario and its model (``scenario``), crash points (``faults``), fuzz targets (``fuzz``) and the
parent's side of these processes (``processes``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

if __package__ in (None, ""):  # run as a file path: make the repository importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

from tests.support.faults import install_crash_point
from tests.support.fuzz import FUZZ_TARGETS, fuzz_one, fuzz_seeds
from tests.support.oracle import FEED, SEED, CheckFailed, batch, batch_sketches, batch_size, check_keys, check_snapshot, interval_fp, snapshot
from tests.support.scenario import SCENARIO_K, SCENARIO_OPS, run_op, scenario_data


def say(*parts: object) -> None:
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    sys.stdout.flush()


def crash_op(args: argparse.Namespace) -> int:
    """Run scenario operation --op on the store, with crash point --point; print the census."""
    import fpstore

    store = fpstore.open(args.path, merges="inline")  # deterministic: the census counts every merge step
    crash = install_crash_point(args.point)
    say("running", SCENARIO_OPS[args.op], args.point)
    run_op(store, args.op)
    store.close()
    say(json.dumps(crash.census))
    return 0


def build_scenario(args: argparse.Namespace) -> int:
    """Run every scenario operation on a new store at ROOT/work, copying the closed store to
    ROOT/base{op} before each operation and to ROOT/base{n} at the end; print each op's census."""
    import shutil

    import fpstore

    work = os.path.join(args.path, "work")
    crash = install_crash_point("census")
    fpstore.open(work, k=SCENARIO_K, merges="inline").close()
    for op in range(len(SCENARIO_OPS) + 1):
        shutil.copytree(work, os.path.join(args.path, f"base{op}"), ignore=shutil.ignore_patterns("lock.mdb", "writer.lock"))
        if op == len(SCENARIO_OPS):
            break
        crash.reset()
        with fpstore.open(work, merges="inline") as store:
            run_op(store, op)
        say(json.dumps({"op": op, **crash.census}))
    return 0


def fuzz_worker(args: argparse.Namespace) -> int:
    """Hypothesis over every fuzz target for --seconds; print JSON counts, or ``FINDING`` lines."""
    import hypothesis
    from hypothesis import strategies as st

    seeds = fuzz_seeds()
    targets = args.targets.split(",")
    counts: dict[str, dict[str, int]] = {t: {} for t in targets}
    findings: list[str] = []
    per_target = args.seconds / len(targets) if args.seconds else float("inf")

    def mutated(seed_list: list[bytes]) -> st.SearchStrategy[bytes]:
        """A seed with a few bytes replaced, truncated or extended; or arbitrary bytes."""

        @st.composite
        def build(draw) -> bytes:
            base = bytearray(draw(st.sampled_from(seed_list)))
            for _ in range(draw(st.integers(0, 4))):
                if base:
                    i = draw(st.integers(0, len(base) - 1))
                    base[i] = draw(st.integers(0, 255))
            if draw(st.booleans()):
                base = base[: draw(st.integers(0, len(base)))]
            if draw(st.integers(0, 9)) == 0:
                base += draw(st.binary(max_size=64))
            return bytes(base)

        return st.one_of(build(), st.binary(max_size=256))

    for target in targets:
        deadline = time.monotonic() + per_target

        @hypothesis.settings(max_examples=args.examples or 10**9, deadline=None, database=None, derandomize=bool(args.examples),
                             suppress_health_check=list(hypothesis.HealthCheck), phases=[hypothesis.Phase.generate])
        @hypothesis.given(mutated(seeds[target]))
        def run(data: bytes) -> None:
            if time.monotonic() > deadline:
                raise _Stop()
            try:
                outcome = fuzz_one(target, data)
            except Exception as exc:  # noqa: BLE001 - a finding; keep fuzzing the others
                outcome = "FINDING"
                if len(findings) < 20:
                    import traceback

                    where = traceback.extract_tb(exc.__traceback__)[-1]
                    findings.append(f"{target}: {type(exc).__name__}: {exc} at {where.filename}:{where.lineno} input {data[:80]!r}")
            counts[target][outcome] = counts[target].get(outcome, 0) + 1

        try:
            run()
        except _Stop:
            pass
    for f in findings:
        say("FINDING", f)
    say(json.dumps(counts))
    return 0


class _Stop(Exception):
    pass


# -- workers -------------------------------------------------------------------------------------


def feed_writer(args: argparse.Namespace, ready: str = "ready") -> int:
    """Resume the feed from its checkpoint; print ``begin i`` before batch i and ``ack i`` once it
    has committed; stop at --stop."""
    import fpstore

    if args.small_growth:
        # Grow by doubling from a tiny map so that a test sees several growths in a few MiB; the
        # growth step is a tuning constant of the single writer, not part of the on-disk format.
        import fpstore.store.storage

        fpstore.store.storage.INITIAL_MAP_SIZE = 1 << 20
    store = fpstore.open(args.path, durability=args.durability)
    pos = store.checkpoint(FEED)
    start = 0 if pos is None else pos + 1
    say(ready, pos)
    pid = store.pipeline.id
    last_size = None
    words = store.pipeline.sketch_bits // 64
    for i in range(start, args.stop):
        keys, fps = batch(i)
        say("begin", i)
        given = fpstore.Fingerprints(fps, pid, sketches=batch_sketches(i, words)) if words else fps
        store.add_many(keys, fingerprints=given, pipeline_id=pid, checkpoint=(FEED, i))
        say("ack", i)
        if args.report_map:
            size = store.info()["map_size"]
            if size != last_size:
                say("map", size)
                last_size = size
        if args.pause:
            time.sleep(args.pause)
    store.close()
    say("done")
    return 0


def thread_adder(args: argparse.Namespace) -> int:
    """--threads threads add documents one add() at a time (group commit) for ever; after each add
    returns, print ``ack KEY FINGERPRINT``. The parent kills it and checks every acknowledged add."""
    import threading

    import fpstore

    store = fpstore.open(args.path)
    pid = store.pipeline.id
    out_lock = threading.Lock()

    def run(t: int) -> None:
        rng = np.random.default_rng([SEED, t])
        j = 0
        while True:
            key, fp = f"t{t}-{j}", int(rng.integers(0, 2**64, dtype=np.uint64))
            store.add(key, fingerprint=fp, pipeline_id=pid)
            with out_lock:
                say("ack", key, fp)
            j += 1

    say("ready")
    threads = [threading.Thread(target=run, args=(t,), daemon=True) for t in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0


def fill_writer(args: argparse.Namespace) -> int:
    """Feed until a write fails (a full disk, a file size limit, an injected I/O error); report the
    error, try once more, then (after ``go`` on stdin with --wait) free the limit and feed on to
    --stop, in the same Store object when it still works, else after reopening it.

    Lines: ``ready CKPT``, ``ack i``, ``error TYPE i MESSAGE``, ``again TYPE``, ``waiting``,
    ``same-store`` or ``reopened TYPE``, ``ack i``..., ``done``."""
    import resource

    import fpstore
    from fpstore.errors import FpstoreError

    store = fpstore.open(args.path)
    if args.fsize:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (args.fsize, resource.RLIM_INFINITY))
    pos = store.checkpoint(FEED)
    i = 0 if pos is None else pos + 1
    say("ready", pos)
    pid = store.pipeline.id
    while i < args.stop:
        keys, fps = batch(i)
        try:
            store.add_many(keys, fingerprints=fps, pipeline_id=pid, checkpoint=(FEED, i))
        except FpstoreError as exc:
            say("error", type(exc).__name__, i, str(exc).replace("\n", " ")[:300])
            break
        say("ack", i)
        i += 1
    else:
        say("no-error")
        return 2
    try:
        store.add_many(keys, fingerprints=fps, pipeline_id=pid, checkpoint=(FEED, i))
        say("again", "ok")
        i += 1
    except FpstoreError as exc:
        say("again", type(exc).__name__)
    if args.wait:
        say("waiting")
        if sys.stdin.readline().strip() != "go":
            return 3
    if args.fsize:
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    try:
        keys, fps = batch(i)
        store.add_many(keys, fingerprints=fps, pipeline_id=pid, checkpoint=(FEED, i))
        say("same-store")
        say("ack", i)
        i += 1
    except FpstoreError as exc:
        store.close()
        store = fpstore.open(args.path)
        say("reopened", type(exc).__name__)
    while i < args.stop:
        keys, fps = batch(i)
        store.add_many(keys, fingerprints=fps, pipeline_id=pid, checkpoint=(FEED, i))
        say("ack", i)
        i += 1
    store.close()
    say("done")
    return 0


def exercise(args: argparse.Namespace) -> int:
    """Open a (possibly damaged) store and use every reading call (and with --write, writes): each
    must answer or raise an FpstoreError. Prints ``BUG name: error at file:line`` for anything else
    and exits 3; a crash of the interpreter shows as a signal in the exit status; SIGALRM after
    --seconds catches a hang."""
    import traceback

    import fpstore
    from fpstore.errors import FpstoreError

    signal.alarm(int(args.seconds))
    outcomes: dict[str, str] = {}
    bugs: list[str] = []

    def attempt(name: str, fn) -> object:
        try:
            result = fn()
        except FpstoreError as exc:
            outcomes[name] = type(exc).__name__
            return None
        except Exception as exc:  # noqa: BLE001 - the finding this worker exists for
            where = traceback.extract_tb(exc.__traceback__)[-1]
            bugs.append(f"{name}: {type(exc).__name__}: {str(exc)[:200]} at {where.filename}:{where.lineno}")
            outcomes[name] = "BUG"
            return None
        outcomes[name] = "ok"
        return result

    store = attempt("open", lambda: fpstore.open(args.path, readonly=not args.write, create=False, **({"verify": True} if args.verify else {})))
    if store is not None:
        data = scenario_data()
        keys = list(data["a"][0][:20]) + [int(k) for k in data["b"][0][:20]] + [k for k, _ in data["texts"]] + list(data["c"][0][:10])
        fps = np.concatenate([data["a"][1][:20], data["b"][1][:20], data["c"][1][:10]])
        pid = attempt("pipeline", lambda: store.pipeline.id)
        attempt("len", lambda: len(store))
        attempt("iter", lambda: list(store))
        attempt("get", lambda: [store.get(k) for k in keys])
        attempt("contains", lambda: [k in store for k in keys])
        attempt("query", lambda: [store.query(fingerprint=int(f), pipeline_id=pid) for f in fps[::5]])
        attempt("query_text", lambda: store.query(text=data["texts"][0][1]))
        found = attempt("query_many", lambda: store.query_many(fps, pipeline_id=pid))
        attempt("pairs", lambda: store.near_duplicate_pairs())
        attempt("clusters", lambda: store.clusters())
        attempt("checkpoint", lambda: store.checkpoint(FEED))
        if found is not None:
            attempt("keys_of", lambda: store.keys_of(found[1][:50]))
        attempt("info", lambda: store.info())
        if args.write:
            attempt("add_many", lambda: store.add_many(["x1", "x2", keys[0]], fingerprints=fps[:3], pipeline_id=pid, checkpoint=(FEED, 9)))
            attempt("add", lambda: store.add("x3", text=data["texts"][1][1]))
            attempt("delete", lambda: [store.delete(k) for k in keys[::7]])
            attempt("bulk_load", lambda: store.bulk_load(np.arange(50_000, 50_010), fps[:10], pipeline_id=pid))
            attempt("compact", lambda: store.compact(full=True))
            attempt("after_writes", lambda: (len(store), store.near_duplicate_pairs(), list(store)))
        attempt("close", store.close)
    for bug in bugs:
        say("BUG", bug)
    say(json.dumps(outcomes))
    return 3 if bugs else 0


def fork_server(args: argparse.Namespace) -> int:
    """Import fpstore once, then serve stdin commands: ``feed STOP`` forks a feed writer (which
    prints ``ready PID CKPT``, then ``begin``/``ack`` lines), ``reap`` waits for it and prints
    ``exit CODE``, ``quit`` ends the server."""
    import fpstore  # noqa: F401 - the point: every forked writer starts with it imported
    import fpstore.store.store  # noqa: F401

    for i in range(8):
        batch(i)
    child = 0
    say("server ready")
    while True:
        line = sys.stdin.readline()
        if not line:
            break
        cmd = line.split()
        if cmd[0] == "feed":
            child = os.fork()
            if child == 0:
                code = 1
                try:
                    durability = cmd[2] if len(cmd) > 2 else "full"
                    ns = argparse.Namespace(path=args.path, stop=int(cmd[1]), small_growth=False, report_map=False, pause=0.0, durability=durability)
                    code = feed_writer(ns, ready=f"ready {os.getpid()}")
                except BaseException as exc:  # noqa: BLE001 - reported to the parent
                    say("FAIL", type(exc).__name__, exc)
                finally:
                    os._exit(code)
        elif cmd[0] == "call":
            child = os.fork()
            if child == 0:
                code = 1
                try:
                    say("ready", os.getpid(), None)
                    code = main(cmd[1:])
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else 1
                except BaseException as exc:  # noqa: BLE001 - reported to the parent
                    import traceback

                    say("FAIL", type(exc).__name__, exc, traceback.format_exc().replace("\n", " | "))
                finally:
                    os._exit(code)
        elif cmd[0] == "reap":
            _, status = os.waitpid(child, 0)
            say("exit", os.waitstatus_to_exitcode(status))
        elif cmd[0] == "quit":
            break
    return 0


def snapshot_reader(args: argparse.Namespace) -> int:
    """Check snapshots until the feed reaches --stop - 1; print stats as JSON; exit 1 on a failure."""
    import fpstore

    store = fpstore.open(args.path, readonly=True)
    pid = store.pipeline.id
    rng = np.random.default_rng([SEED, os.getpid()])
    early = [(i, int(j)) for i in range(args.early) for j in rng.choice(batch_size(i), size=8, replace=False)]
    say("ready")
    deadline = time.monotonic() + args.timeout
    prev_count, prev_ckpt = -1, -1
    seen: set = set()
    iterations = checked = 0
    map_sizes: set = set()
    try:
        while True:
            snap = snapshot(store)
            check_snapshot(snap)
            count, ckpt = snap["count"], snap["ckpt"]
            if count < prev_count or (ckpt if ckpt is not None else -1) < prev_ckpt:
                raise CheckFailed(f"went back in time: count {prev_count} -> {count}, checkpoint {prev_ckpt} -> {ckpt}")
            prev_count, prev_ckpt = count, ckpt if ckpt is not None else -1
            seen.add(ckpt)
            # Public API, later transactions: what one snapshot showed never disappears (the writer
            # only adds), the early batches are found at distance 0, and len() never decreases.
            picks = [p for p in early if ckpt is not None and p[0] <= ckpt]
            if ckpt is not None:
                picks += [(ckpt, int(j)) for j in rng.choice(batch_size(ckpt), size=4, replace=False)]
            checked += check_keys(store, pid, picks)
            n = len(store)
            if n < count:
                raise CheckFailed(f"len() is {n} after a snapshot showed {count}")
            map_sizes.add(store.info()["map_size"])
            iterations += 1
            if ckpt is not None and ckpt >= args.stop - 1:
                break
            if time.monotonic() > deadline:
                raise CheckFailed(f"timed out at checkpoint {ckpt} after {iterations} iterations")
    except CheckFailed as exc:
        say("FAIL", exc)
        return 1
    store.close()
    say(json.dumps({"iterations": iterations, "checkpoints": len(seen), "keys": checked, "map_sizes": sorted(map_sizes)}))
    return 0


def hold_reader(args: argparse.Namespace) -> int:
    """Open read-only, enter a read transaction, print ``holding``, and wait to be killed."""
    import fpstore

    store = fpstore.open(args.path, readonly=True)
    n = len(store)
    with store._storage.read():  # the open read transaction is the point: it pins a snapshot
        say("holding", n)
        while True:
            signal.pause()
    return 0  # not reached


def interval_adder(args: argparse.Namespace) -> int:
    """``durability="interval"``: resume from the checkpoint and add document i (key ``d{i}``, the
    checkpoint ``(FEED, i)`` in the same add) one ``add()`` at a time, printing ``ack i`` once it
    returns (staged); every --sync-every adds, ``store.sync()`` then ``synced i``. The parent kills
    it and checks that the store holds exactly d0..dj for some j at or after the last sync."""
    import fpstore

    store = fpstore.open(args.path, durability="interval", commit_interval=args.interval)
    pos = store.checkpoint(FEED)
    start = 0 if pos is None else pos + 1
    say("ready", pos)
    pid = store.pipeline.id
    for i in range(start, 1 << 40):
        store.add(f"d{i}", fingerprint=interval_fp(i), pipeline_id=pid, checkpoint=(FEED, i))
        say("ack", i)
        if args.sync_every and i % args.sync_every == 0:
            store.sync()
            say("synced", i)
    return 0


def try_open(args: argparse.Namespace) -> int:
    """Open the store (writer, or reader with --readonly); exit 0 with ``opened N``, 3 on
    WriterLockedError, 4 on another FpstoreError."""
    import fpstore
    from fpstore.errors import FpstoreError, WriterLockedError

    try:
        store = fpstore.open(args.path, readonly=args.readonly, create=False)
    except WriterLockedError as exc:
        say("locked", exc)
        return 3
    except FpstoreError as exc:
        say("error", type(exc).__name__, exc)
        return 4
    say("opened", len(store))
    store.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.workers")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, fn: object, *, path: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name)
        if path:
            p.add_argument("path")
        p.set_defaults(fn=fn)
        return p

    p = command("feed-writer", feed_writer)
    p.add_argument("--stop", type=int, default=1 << 40)
    p.add_argument("--pause", type=float, default=0.0)
    p.add_argument("--small-growth", action="store_true")
    p.add_argument("--report-map", action="store_true")
    p.add_argument("--durability", default="full")
    command("fork-server", fork_server)
    p = command("thread-adder", thread_adder)
    p.add_argument("--threads", type=int, default=8)
    p = command("interval-adder", interval_adder)
    p.add_argument("--interval", type=float, default=0.05)
    p.add_argument("--sync-every", type=int, default=0)
    p = command("fill-writer", fill_writer)
    p.add_argument("--stop", type=int, default=1 << 40)
    p.add_argument("--fsize", type=int, default=0, help="RLIMIT_FSIZE in bytes")
    p.add_argument("--wait", action="store_true", help="wait for 'go' on stdin before freeing space")
    p = command("exercise", exercise)
    p.add_argument("--write", action="store_true")
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--verify", action="store_true", help="open with verify=True (check a file from elsewhere first)")
    p = command("crash-op", crash_op)
    p.add_argument("--op", type=int, required=True)
    p.add_argument("--point", required=True)
    command("build-scenario", build_scenario)
    p = command("fuzz", fuzz_worker, path=False)
    p.add_argument("--seconds", type=float, default=0, help="run each target for its share of this (random inputs)")
    p.add_argument("--examples", type=int, default=0, help="or: this many derandomized inputs per target")
    p.add_argument("--targets", default=",".join(FUZZ_TARGETS))
    p = command("snapshot-reader", snapshot_reader)
    p.add_argument("--stop", type=int, required=True)
    p.add_argument("--early", type=int, default=3)
    p.add_argument("--timeout", type=float, default=60.0)
    command("hold-reader", hold_reader)
    p = command("try-open", try_open)
    p.add_argument("--readonly", action="store_true")
    args = parser.parse_args(argv)
    return args.fn(args)

if __name__ == "__main__":
    sys.exit(main())

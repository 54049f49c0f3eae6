"""Subprocess entry points for the crash and concurrency tests, and the oracle they share.

Run as ``python -m tests.workers COMMAND PATH [options]`` with the repository root as the working
directory (or as ``python tests/workers.py ...``). Workers talk to the parent on stdout, one line
per event, flushed at once, so that a parent that SIGKILLs a worker still reads every line the
worker printed before it died. A failed check prints ``FAIL <message>`` and exits with status 1.

The oracle: batch ``i`` is a pure function of ``i`` (seeded numpy), so a store fed batches
``0..c`` with ``checkpoint=("feed", c)`` must hold exactly those documents after any crash.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import sys
import time

if __package__ in (None, ""):  # run as a file path: make the repository importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import msgpack
import numpy as np

SEED = 20240611
FEED = "feed"
MIN_BATCH, MAX_BATCH = 200, 1000


# -- the oracle ----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def batch(i: int) -> tuple[tuple[str, ...], np.ndarray]:
    """Batch ``i``: keys ``b{i}-{j}`` and 200..1000 random uint64 fingerprints, a pure function of i."""
    rng = np.random.default_rng([SEED, i])
    n = int(rng.integers(MIN_BATCH, MAX_BATCH + 1))
    fps = rng.integers(0, np.iinfo(np.uint64).max, size=n, dtype=np.uint64, endpoint=True)
    fps.setflags(write=False)
    return tuple(f"b{i}-{j}" for j in range(n)), fps


def batch_size(i: int) -> int:
    return len(batch(i)[0])


_prefix = [0]  # _prefix[i] = documents in batches 0..i-1


def total(upto: int | None) -> int:
    """Documents in batches ``0..upto`` (0 when ``upto`` is None: nothing committed yet)."""
    if upto is None or upto < 0:
        return 0
    while len(_prefix) <= upto + 1:
        _prefix.append(_prefix[-1] + batch_size(len(_prefix) - 1))
    return _prefix[upto + 1]


# -- checks inside one snapshot -------------------------------------------------------------------


class CheckFailed(AssertionError):
    pass


def snapshot(store) -> dict:
    """Count, checkpoint and entries of every sub-database, all read in ONE read transaction.

    Internal: it reads the incremental tier (docs, keys, tNN), which is where ``add_many`` puts
    every document as long as nothing compacts or bulk-loads the store (these tests never do)."""
    from fpstore.store import CHECKPOINT_PREFIX, H_COUNT, H_NEXT_ID, _U64

    with store._storage.read() as txn:
        count = _U64.unpack(txn.get(H_COUNT, db=store._meta))[0]
        next_id = _U64.unpack(txn.get(H_NEXT_ID, db=store._meta))[0]
        raw = txn.get(CHECKPOINT_PREFIX + FEED.encode(), db=store._meta)
        ckpt = None if raw is None else msgpack.unpackb(raw)
        entries = {
            "docs": txn.stat(store._docs)["entries"],
            "dead": txn.stat(store._dead)["entries"] if hasattr(store, "_dead") else 0,
            "keys": txn.stat(store._keys)["entries"],
            "content": txn.stat(store._content)["entries"],
        }
        for t, db in enumerate(store._tables):
            entries[f"t{t:02d}"] = txn.stat(db)["entries"]
    return {"count": count, "next_id": next_id, "ckpt": ckpt, "entries": entries}


def check_snapshot(snap: dict) -> None:
    """Every table agrees with the count, and the count is exactly batches 0..checkpoint."""
    count, ckpt, entries = snap["count"], snap["ckpt"], snap["entries"]
    want = total(ckpt)
    if count != want:
        raise CheckFailed(f"count {count} but checkpoint {ckpt} implies {want} documents")
    for name in ("content", "dead"):
        if entries[name] != 0:
            raise CheckFailed(f"{name} table has {entries[name]} entries; fingerprint-only batches of new keys add none")
    bad = {name: n for name, n in entries.items() if name not in ("content", "dead") and n != count}
    if bad:
        raise CheckFailed(f"tables disagree with count {count} (checkpoint {ckpt}): {bad}")
    if snap["next_id"] != count + 1:  # keys are never repeated across batches, so ids are dense
        raise CheckFailed(f"next_id {snap['next_id']} but {count} documents were added")


def check_keys(store, pipeline_id: str, picks: list[tuple[int, int]]) -> int:
    """Each (batch, j) is stored with its fingerprint, and a query finds it at distance 0 and nothing else.

    Returns how many keys were checked. Uses the public API (one transaction per call)."""
    if not picks:
        return 0
    fps = np.array([batch(i)[1][j] for i, j in picks], dtype=np.uint64)
    ids = []
    for (i, j), fp in zip(picks, fps.tolist()):
        key = batch(i)[0][j]
        doc = store.get(key)
        if doc is None:
            raise CheckFailed(f"key {key} of committed batch {i} is missing")
        if doc.fingerprint != fp:
            raise CheckFailed(f"key {key} has fingerprint {doc.fingerprint}, expected {fp}")
        ids.append(doc.id)
    q, found, dist = store.query_many(fps, pipeline_id=pipeline_id)
    exact = {(int(a), int(b)) for a, b, d in zip(q, found, dist) if d == 0}
    missing = [picks[n] for n, doc_id in enumerate(ids) if (n, doc_id) not in exact]
    if missing:
        raise CheckFailed(f"query_many does not find {len(missing)} stored fingerprints at distance 0, e.g. {missing[:3]}")
    # Random 64-bit fingerprints have no neighbour within k=3 (p < 1e-9 here): exactly one match each.
    if len(q) != len(picks):
        raise CheckFailed(f"query_many returned {len(q)} matches for {len(picks)} stored fingerprints")
    return len(picks)


# -- the parent's side: spawning workers and reading their lines --------------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Child:
    """A worker subprocess whose stdout lines the parent reads with a timeout."""

    def __init__(self, *args: str, stdin: bool = False, prefix: tuple[str, ...] = ()) -> None:
        import subprocess

        self.args = args
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "tests.workers", *args],
            cwd=ROOT,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self._buf = b""
        self.lines: list[str] = []

    @property
    def pid(self) -> int:
        return self.proc.pid

    def line(self, timeout: float = 60.0) -> str:
        """The next stdout line; fails (killing the child) on timeout or EOF."""
        import select

        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            ready = select.select([fd], [], [], max(left, 0))[0] if left > 0 else []
            if not ready:
                self.kill()
                raise CheckFailed(f"worker {self.args} printed no line within {timeout} s; stderr: {self.stderr()}")
            chunk = os.read(fd, 65536)
            if not chunk:
                rc = self.proc.wait()
                raise CheckFailed(f"worker {self.args} exited ({rc}) before a line; stderr: {self.stderr()}")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\n", 1)
        text = raw.decode()
        self.lines.append(text)
        return text

    def kill(self) -> int:
        """SIGKILL the child, reap it, and keep every line it printed before dying."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        return self.finish()

    def finish(self, timeout: float = 60.0) -> int:
        """Wait for the child; collect the rest of its stdout into ``lines``; return its status."""
        import select

        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        out = b""
        while True:  # read to EOF, which comes once the child is gone
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                raise CheckFailed(f"worker {self.args} did not finish within {timeout} s; stderr: {self.stderr()}")
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            out += chunk
        rc = self.proc.wait(timeout)
        rest = (self._buf + out).decode()
        self._buf = b""
        self.lines.extend(line for line in rest.split("\n") if line)
        return rc

    def send(self, line: str) -> None:
        """Write one command line to the child's stdin (started with ``stdin=True``)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        return self.proc.stderr.read().decode(errors="replace")[-4000:]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                try:
                    f.close()
                except OSError:  # a pipe to a child that is gone
                    pass


class ForkServer(Child):
    """A long-lived worker that has imported fpstore and forks one feed writer per kill cycle.

    A fresh interpreter costs ~0.3 s of imports per cycle; a fork costs a few milliseconds, and
    the forked writer still opens the store from scratch (the recovery path under test). The
    server keeps each dead writer unreaped until :meth:`reap`, so its pid cannot be reused before
    the parent has sent its SIGKILL.
    """

    def __init__(self, path: str) -> None:
        super().__init__("fork-server", path, stdin=True)
        assert self.line(timeout=120) == "server ready"

    def start_feed(self, stop: int = 1 << 40, timeout: float = 60.0) -> tuple[int, int | None]:
        """Fork a feed writer; return (its pid, the checkpoint it resumes from)."""
        self.lines.clear()
        self.send(f"feed {stop}")
        line = self.line(timeout)
        parts = line.split()
        if parts[:1] != ["ready"]:
            raise CheckFailed(f"fork server: expected 'ready PID CKPT', got {line!r}")
        return int(parts[1]), None if parts[2] == "None" else int(parts[2])

    def reap(self, timeout: float = 60.0) -> tuple[int, list[str]]:
        """Reap the current writer (kill it first, or let it finish); return (exit code, its lines)."""
        self.send("reap")
        while True:
            line = self.line(timeout)
            if line.startswith("exit "):
                lines = self.lines[:-1]
                self.lines.clear()
                return int(line.split()[1]), lines

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("quit")
                self.proc.wait(10)
            except Exception:  # noqa: BLE001 - a server that does not answer is killed below
                pass
        super().close()


# -- workers -------------------------------------------------------------------------------------


def say(*parts: object) -> None:
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    sys.stdout.flush()


def feed_writer(args: argparse.Namespace, ready: str = "ready") -> int:
    """Resume the feed from its checkpoint; print ``begin i`` before batch i and ``ack i`` once it
    has committed; stop at --stop."""
    import fpstore

    if args.small_growth:
        # Grow by doubling from a tiny map so that a test sees several growths in a few MiB; the
        # growth step is a tuning constant of the single writer, not part of the on-disk format.
        import fpstore.storage

        fpstore.storage.INITIAL_MAP_SIZE = 1 << 20
    store = fpstore.open(args.path)
    pos = store.checkpoint(FEED)
    start = 0 if pos is None else pos + 1
    say(ready, pos)
    pid = store.pipeline.id
    last_size = None
    for i in range(start, args.stop):
        keys, fps = batch(i)
        say("begin", i)
        store.add_many(keys, fingerprints=fps, pipeline_id=pid, checkpoint=(FEED, i))
        say("ack", i)
        if args.report_map:
            size = store._storage.env.info()["map_size"]
            if size != last_size:
                say("map", size)
                last_size = size
        if args.pause:
            time.sleep(args.pause)
    store.close()
    say("done")
    return 0


def fork_server(args: argparse.Namespace) -> int:
    """Import fpstore once, then serve stdin commands: ``feed STOP`` forks a feed writer (which
    prints ``ready PID CKPT``, then ``begin``/``ack`` lines), ``reap`` waits for it and prints
    ``exit CODE``, ``quit`` ends the server."""
    import fpstore  # noqa: F401 - the point: every forked writer starts with it imported
    import fpstore.store  # noqa: F401

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
                    ns = argparse.Namespace(path=args.path, stop=int(cmd[1]), small_growth=False, report_map=False, pause=0.0)
                    code = feed_writer(ns, ready=f"ready {os.getpid()}")
                except BaseException as exc:  # noqa: BLE001 - reported to the parent
                    say("FAIL", type(exc).__name__, exc)
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
            map_sizes.add(store._storage.env.info()["map_size"])
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
    with store._storage.read() as txn:
        n = txn.stat(store._docs)["entries"]
        say("holding", n)
        while True:
            signal.pause()
    return 0  # not reached


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
    p = sub.add_parser("feed-writer")
    p.add_argument("path")
    p.add_argument("--stop", type=int, default=1 << 40)
    p.add_argument("--pause", type=float, default=0.0)
    p.add_argument("--small-growth", action="store_true")
    p.add_argument("--report-map", action="store_true")
    p.set_defaults(fn=feed_writer)
    p = sub.add_parser("fork-server")
    p.add_argument("path")
    p.set_defaults(fn=fork_server)
    p = sub.add_parser("snapshot-reader")
    p.add_argument("path")
    p.add_argument("--stop", type=int, required=True)
    p.add_argument("--early", type=int, default=3)
    p.add_argument("--timeout", type=float, default=60.0)
    p.set_defaults(fn=snapshot_reader)
    p = sub.add_parser("hold-reader")
    p.add_argument("path")
    p.set_defaults(fn=hold_reader)
    p = sub.add_parser("try-open")
    p.add_argument("path")
    p.add_argument("--readonly", action="store_true")
    p.set_defaults(fn=try_open)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())

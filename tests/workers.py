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


# -- fuzz targets: every decoder of on-disk bytes, fed untrusted input ---------------------------
#
# ``fuzz_one(target, data)`` runs one decoder on ``data`` and returns "ok" or the name of the
# FpstoreError it raised. Anything else (another exception, a result that breaks the decoder's
# promise, and of course a crash of the interpreter) is a finding. Used by the hypothesis tests in
# tests/test_reliability.py and by ``tools/torture.py fuzz`` (atheris, coverage-guided).

FUZZ_TARGETS = ("run_index", "run_index_crc", "run_chunk", "state", "header", "record", "key_block", "idf", "packed")
_fuzz_cache: dict = {}


def _fuzz_samples() -> list:
    """A few encoded runs (index, chunks, keys) of different shapes, made once per process."""
    if "runs" not in _fuzz_cache:
        from fpstore import runs

        rng = np.random.default_rng([SEED, 99])
        out = []
        for n, be, spread in ((1, 16, 64), (7, 4, 8), (300, 16, 20), (700, 64, 64), (260, 32, 3)):
            keys = np.sort(rng.integers(0, 1 << spread, size=n, dtype=np.uint64))
            index, chunks = runs.encode_run(keys, block_entries=be, chunk_bytes=max(runs.max_block_bytes(be), 3 * runs.max_block_bytes(be) // 2))
            out.append((index, chunks, keys))
        _fuzz_cache["runs"] = out
    return _fuzz_cache["runs"]


class _FakeTxn:
    """Just enough of an lmdb transaction for the tier readers: ``get`` from a dict."""

    def __init__(self, values: dict) -> None:
        self.values = values

    def get(self, key, db=None):  # noqa: ANN001 - mirrors lmdb.Transaction.get
        return self.values.get(bytes(key))


def fuzz_seeds() -> dict[str, list[bytes]]:
    """Valid inputs for each target (a fuzzer mutates from these)."""
    import zstandard

    from fpstore import runs
    from fpstore.pipeline import IdfTable, Pipeline
    from fpstore.store import _pack_record
    from fpstore.tiers import State

    seeds: dict[str, list[bytes]] = {t: [] for t in FUZZ_TARGETS}
    for n, (index, chunks, _) in enumerate(_fuzz_samples()):
        raw = index.to_bytes()
        seeds["run_index"].append(raw)
        seeds["run_index_crc"].append(raw[6:-4])
        for c, chunk in enumerate(chunks[:3]):
            seeds["run_chunk"].append(bytes([n, c, 0, 0]) + chunk)
    seeds["state"].append(State([], []).to_bytes())
    seeds["state"].append(
        State(
            [{"id": 1, "count": 5, "tables": [b"s\0\0\0\1f", b"r1", b"r2", b"r3"], "ids": {"base": 1}},
             {"id": 2, "count": 3, "tables": [b"a", b"b", b"c", b"d"], "ids": {"prefix": b"p", "count": 3, "min": 4, "width": 3, "per_chunk": 65536}}],
            [{"id": 1, "base": 1, "count": 5, "fps": b"f", "hashes": b"h", "keys": b"k", "key_blocks": 1,
              "ordinals": {"prefix": b"o", "count": 5, "min": 0, "width": 3, "per_chunk": 65536}}],
            3, 2,
        ).to_bytes()
    )
    pipe = Pipeline()
    from fpstore.design import design_for

    header = {"magic": "fpstore", "format": 1, "features": [], "pipeline": pipe.config, "pipeline_id": pipe.id,
              "design": design_for(3, None, "auto").config(), "created": {"fpstore": "x", "time": 0}}
    seeds["header"].append(msgpack.packb(header, use_bin_type=True))
    seeds["record"] += [_pack_record(b"sdoc-1", 12345, None, 0, 0), _pack_record(b"i" + bytes(8), (1 << 64) - 1, bytes(16), 7, 3)]
    cctx = zstandard.ZstdCompressor(level=3)
    seeds["key_block"] += [b"\0" + cctx.compress(b"M" + msgpack.packb([b"sa", b"sb", b"i" + bytes(8)], use_bin_type=True)),
                           b"\0" + cctx.compress(b"I" + np.arange(5, dtype="<u8").tobytes()),
                           b"\1" + b"M" + msgpack.packb([b"sa"], use_bin_type=True)]
    seeds["idf"].append(IdfTable({"the": 1, "cat": 200}, 9).to_bytes())
    seeds["packed"].append(bytes([5, 3, 0, 0]) + bytes(range(16)))
    return seeds


def fuzz_one(target: str, data: bytes) -> str:
    """Run decoder ``target`` on ``data``: "ok" or the FpstoreError class name; anything else is raised."""
    import zlib

    from fpstore.errors import FpstoreError

    try:
        _FUZZ[target](data, zlib)
    except FpstoreError as exc:
        return type(exc).__name__
    return "ok"


def _fz_run_index(data: bytes, zlib) -> None:
    from fpstore import runs

    runs.RunIndex.from_bytes(data)


def _fz_run_index_crc(data: bytes, zlib) -> None:
    """Magic, version and checksum made right, so that the structural checks see the rest."""
    from fpstore import runs

    body = b"FPRI\x01\x00" + data
    idx = runs.RunIndex.from_bytes(body + zlib.crc32(body).to_bytes(4, "little"))
    # An index that parsed is consistent: decoding all-zero chunks of the right lengths either
    # works or raises CorruptionError (never reads out of bounds).
    if idx.nchunks and int(idx.chunk_len.max()) <= 1 << 16:
        chunks = [bytes(int(n)) for n in idx.chunk_len]
        runs.decode_run(lambda c: chunks[c], idx)


def _fz_run_chunk(data: bytes, zlib) -> None:
    """A sample run's index with fuzzed bytes for one chunk, through every chunk decoder."""
    from fpstore import runs

    if len(data) < 4:
        return
    samples = _fuzz_samples()
    index, chunks, _keys = samples[data[0] % len(samples)]
    c = data[1] % index.nchunks
    op = data[2]
    chunk = data[4:]
    if op & 1:  # make the length right so the block decoders run
        want = int(index.chunk_len[c])
        chunk = (chunk + bytes(want))[:want]
    getter = lambda i: chunk if i == c else chunks[i]  # noqa: E731
    b0, b1 = int(index._chunk_start[c]), int(index._chunk_start[c + 1])
    lo_key, hi_key = int(index._bounds[b0]), int(index._bounds[b1])
    try:
        got = runs.decode_chunk(chunk, index, c)
    except runs.CorruptionError:
        pass
    else:
        # The module's promise: decoded keys are sorted and lie within their blocks' bounds.
        if len(got) != int(index._entry_start[b1] - index._entry_start[b0]):
            raise AssertionError("decode_chunk returned the wrong number of keys")
        if len(got) and (np.any(got[1:] < got[:-1]) or int(got[0]) < lo_key or int(got[-1]) > hi_key):
            raise AssertionError("decode_chunk returned keys out of order or outside the chunk's bounds")
    damage = None
    for b in range(b0, b1):
        try:
            runs.decode_block(chunk, index, b)
        except runs.CorruptionError as exc:
            damage = damage or exc
    lo = lo_key + (op >> 1) % 7
    hi = max(lo, hi_key - (op >> 4))
    for fn in (
        lambda: runs.probe(getter, index, lo, hi),
        lambda: runs.probe_one(getter, index, lo, hi, lo, 64),
        lambda: runs.positions_one(getter, index, lo),
        lambda: runs.probe_batch_run(getter, index, np.array([lo, hi], np.uint64), 8, 64),
        lambda: runs.decode_run(getter, index, checksum=bool(op & 2)),
    ):
        try:
            fn()
        except runs.CorruptionError as exc:
            damage = damage or exc
    if damage is not None:
        raise damage


def _fz_state(data: bytes, zlib) -> None:
    from fpstore.tiers import State

    State.from_bytes(data, 4)


def _fz_header(data: bytes, zlib) -> None:
    """The store header as an opening store decodes it: header, design, pipeline."""
    import types

    from fpstore.design import Design
    from fpstore.errors import DesignError, FormatError
    from fpstore.pipeline import Pipeline
    from fpstore.store import Store

    fake = types.SimpleNamespace(_storage=types.SimpleNamespace(path="fuzz"))
    header = Store._decode_header(fake, data)  # type: ignore[arg-type]
    try:
        Design.from_config(header["design"])
    except DesignError:
        pass
    try:
        pipe = Pipeline.from_config(header["pipeline"], None)
    except FormatError:
        return
    if pipe.id != header["pipeline_id"]:
        return


def _fz_record(data: bytes, zlib) -> None:
    from fpstore.store import _unpack_record, _untyped_key

    typed, *_ = _unpack_record(data)
    _untyped_key(typed)


def _fz_key_block(data: bytes, zlib) -> None:
    """A segment's key block (zstd-compressed when the first byte is even) read as a lookup would."""
    import zstandard

    from fpstore.tiers import KEY_BLOCK, KeySegment, TierCache

    if not data:
        return
    body = data[1:]
    if data[0] % 2 == 1:
        body = zstandard.ZstdCompressor(level=1).compress(body)
    seg = KeySegment(_FakeTxn({b"kK" + bytes(4): body}), None, TierCache(), {"id": 1, "base": 1, "count": KEY_BLOCK, "keys": b"k", "key_blocks": 1})
    seg.keys_at([0, 1, 2, KEY_BLOCK - 1][: 1 + data[0] % 4])


def _fz_idf(data: bytes, zlib) -> None:
    from fpstore.pipeline import IdfTable

    IdfTable.from_bytes(data)


def _fz_packed(data: bytes, zlib) -> None:
    """A packed column chunk (width and count from the first bytes) read at a few positions."""
    from fpstore.tiers import read_packed

    if len(data) < 4:
        return
    width, count = data[0] % 65, 1 + data[1] * 3
    rec = {"count": count, "min": data[2], "width": width, "per_chunk": 1 << 16}
    pos = np.array(sorted({0, count - 1, data[3] % count}), np.int64)
    read_packed(_FakeTxn({b"pP" + bytes(4): data[4:]}), None, b"p", rec, pos)


_FUZZ = {name: globals()[f"_fz_{name}"] for name in FUZZ_TARGETS}


def fuzz_worker(args: argparse.Namespace) -> int:
    """Hypothesis over every fuzz target for --seconds; print JSON counts, or ``FINDING`` lines."""
    import hypothesis
    from hypothesis import strategies as st

    seeds = fuzz_seeds()
    targets = args.targets.split(",")
    counts: dict[str, dict[str, int]] = {t: {} for t in targets}
    findings: list[str] = []
    per_target = args.seconds / len(targets)

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

        @hypothesis.settings(max_examples=10**9, deadline=None, database=None, derandomize=False,
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
    p = sub.add_parser("fuzz")
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--targets", default=",".join(FUZZ_TARGETS))
    p.set_defaults(fn=fuzz_worker)
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

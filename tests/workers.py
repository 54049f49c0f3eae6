"""Subprocess entry points for the reliability tests, and the oracles they share.

Run as ``python -m tests.workers COMMAND PATH [options]`` with the repository root as the working
directory (or as ``python tests/workers.py ...``). Workers talk to the parent on stdout, one line
per event, flushed at once, so that a parent that SIGKILLs a worker still reads every line the
worker printed before it died. A failed check prints ``FAIL <message>`` and exits with status 1.
``fork-server`` forks workers from one interpreter that has imported fpstore (``ForkServer``).

The feed oracle: batch ``i`` is a pure function of ``i`` (seeded numpy), so a store fed batches
``0..c`` with ``checkpoint=("feed", c)`` must hold exactly those documents after any crash.
The scenario oracle: eight operations covering every kind of write, and a model of the store after
each of their transactions (``model_after``, ``check_model``: every answer against brute force).
Also here: named crash points patched into the storage layer (``install_crash_point``), the
``exercise`` worker that uses a damaged store, and the fuzz targets of every on-disk decoder.
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
    from fpstore.store.header import CHECKPOINT_PREFIX, H_COUNT, H_NEXT_ID, U64

    with store._storage.read() as txn:
        count = U64.unpack(txn.get(H_COUNT, db=store._meta))[0]
        next_id = U64.unpack(txn.get(H_NEXT_ID, db=store._meta))[0]
        raw = txn.get(CHECKPOINT_PREFIX + FEED.encode(), db=store._meta)
        ckpt = None if raw is None else msgpack.unpackb(raw)
        entries = {
            "docs": txn.stat(store._docs)["entries"],
            "dead": txn.stat(store._dead)["entries"] if hasattr(store, "_dead") else 0,
            "keys": txn.stat(store._keys)["entries"],
            "content": txn.stat(store._content)["entries"],
        }
        # Entries of every table: in its incremental B-tree, or flushed into a run (a run holds
        # every table for the same documents).
        in_runs = sum(r["count"] for r in store._state(txn).runs)
        for t, db in enumerate(store._tables):
            entries[f"t{t:02d}"] = txn.stat(db)["entries"] + in_runs
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


# -- the scenario: every kind of write, with a model of what the store must hold after each ------
#
# Seven operations, each made of one or more write transactions ("steps"): add_many, a bulk load of
# three runs, text adds and deletes (tombstones in runs), add_many replacing keys of both tiers, a
# partial compaction, add_many of near-duplicates, a full compaction. The model after any prefix
# of steps is a dict key -> fingerprint (and checkpoints); a crash inside step s must leave exactly
# the model after s - 1 or s steps, whatever the store's internal layout.

SCENARIO_K = 3
_WORDS = [f"w{i:03d}" for i in range(400)]


@functools.lru_cache(maxsize=1)
def scenario_data() -> dict:
    rng = np.random.default_rng([SEED, 5])
    u64 = np.iinfo(np.uint64).max

    def near(base: np.ndarray, bits: int) -> np.ndarray:
        out = base.copy()
        for _ in range(bits):
            out ^= np.uint64(1) << rng.integers(0, 64, size=len(out)).astype(np.uint64)
        return out

    a_keys = [f"a{j}" for j in range(300)]
    a_fps = rng.integers(0, u64, size=300, dtype=np.uint64, endpoint=True)
    a_fps[250:] = near(a_fps[:50], 2)  # pairs inside A
    b_keys = np.arange(10_000, 10_900, dtype=np.int64)
    b_fps = rng.integers(0, u64, size=900, dtype=np.uint64, endpoint=True)
    b_fps[:40] = near(a_fps[50:90], 3)  # pairs between A and B
    texts = []
    for j in range(4):
        words = list(rng.choice(_WORDS, size=40))
        texts.append((f"t{j}", " ".join(words)))
    texts[1] = ("t1", texts[0][1].replace(texts[0][1].split()[5], "zzz", 1))  # a near-duplicate text
    texts[3] = ("t3", texts[2][1])  # an exact duplicate text
    deletes = ["a3", "a4", "a260", 10_001, 10_002, 10_450]
    c_keys = [f"c{j}" for j in range(200)] + [f"a{j}" for j in range(100, 150)] + [int(x) for x in range(10_500, 10_550)]
    c_fps = rng.integers(0, u64, size=300, dtype=np.uint64, endpoint=True)
    c_fps[:30] = near(b_fps[100:130], 1)
    d_keys = [f"d{j}" for j in range(200)]
    d_fps = np.concatenate([near(b_fps[200:300], 2), near(c_fps[100:200], 3)])
    # A batch that crosses the store's flush threshold: its transaction also moves the incremental
    # tables into a run and merges the small runs of the lowest tier (the bulk load's included).
    from fpstore.store.lsm import FLUSH_ENTRIES

    e_keys = [f"e{j}" for j in range(FLUSH_ENTRIES + 100)] + [f"c{j}" for j in range(20)]
    e_fps = rng.integers(0, u64, size=len(e_keys), dtype=np.uint64, endpoint=True)
    e_fps[:50] = near(d_fps[:50], 1)
    return {"a": (a_keys, a_fps), "b": (b_keys, b_fps), "texts": texts, "deletes": deletes, "c": (c_keys, c_fps), "d": (d_keys, d_fps),
            "e": (e_keys, e_fps)}


SCENARIO_OPS = ("add_many_a", "bulk_load_b", "texts_deletes", "add_many_c", "compact_partial", "add_many_flush", "add_many_d",
                "compact_full", "compact_file")
BULK_MAX_RUN = 400


def run_op(store, op: int) -> None:
    """Operation ``op`` of the scenario on an open writer store."""
    data = scenario_data()
    pid = store.pipeline.id
    name = SCENARIO_OPS[op]
    if name == "add_many_a":
        store.add_many(data["a"][0], fingerprints=data["a"][1], pipeline_id=pid, checkpoint=(FEED, 0))
    elif name == "bulk_load_b":
        store.bulk_load(data["b"][0], data["b"][1], pipeline_id=pid, max_run=BULK_MAX_RUN)
    elif name == "texts_deletes":
        for key, text in data["texts"]:
            store.add(key, text=text)
        for key in data["deletes"]:
            store.delete(key)  # False when a resumed run already deleted it
    elif name == "add_many_c":
        store.add_many(data["c"][0], fingerprints=data["c"][1], pipeline_id=pid, checkpoint=(FEED, 1))
    elif name == "compact_partial":
        store.compact(full=False)
    elif name == "add_many_d":
        store.add_many(data["d"][0], fingerprints=data["d"][1], pipeline_id=pid, checkpoint=(FEED, 3))
    elif name == "add_many_flush":
        store.add_many(data["e"][0], fingerprints=data["e"][1], pipeline_id=pid, checkpoint=(FEED, 2))
    elif name == "compact_full":
        store.compact(full=True)
    elif name == "compact_file":
        store.compact_file()


def model_steps(op: int) -> list:
    """The steps (one per write transaction) of operation ``op``, as functions on the model."""
    data = scenario_data()
    name = SCENARIO_OPS[op]

    def put_all(keys, fps, ckpt=None):
        def step(m):
            m["docs"].update(zip([k if isinstance(k, str) else int(k) for k in keys], [int(f) for f in fps]))
            if ckpt is not None:
                m["ckpt"] = ckpt
        return step

    def delete(key):
        return lambda m: m["docs"].pop(key)

    if name == "add_many_a":
        return [put_all(*data["a"], 0)]
    if name == "bulk_load_b":
        keys, fps = data["b"]
        return [put_all(keys[i : i + BULK_MAX_RUN], fps[i : i + BULK_MAX_RUN]) for i in range(0, len(keys), BULK_MAX_RUN)]
    if name == "texts_deletes":
        from fpstore.fingerprint.pipeline import Pipeline

        pipe = Pipeline()
        steps = [put_all([key], [pipe.signature(text).fingerprint]) for key, text in data["texts"]]
        return steps + [delete(key) for key in data["deletes"]]
    if name == "add_many_c":
        return [put_all(*data["c"], 1)]
    if name == "add_many_d":
        return [put_all(*data["d"], 3)]
    if name == "add_many_flush":
        return [put_all(*data["e"], 2)]
    return [lambda m: None]  # compaction changes no answer, only the layout


def model_after(op: int, steps: int | None = None) -> dict:
    """The model after operations 0..op-1 and the first ``steps`` steps of ``op`` (all when None)."""
    m: dict = {"docs": {}, "ckpt": None}
    for o in range(op):
        for step in model_steps(o):
            step(m)
    for step in model_steps(op)[: steps]:
        step(m)
    return m


def layout(store) -> tuple:
    """The store's internal shape in one snapshot: (runs, segments, incremental entries, tombstones, records)."""
    with store._storage.read() as txn:
        state = store._state(txn)
        return (len(state.runs), len(state.segs), txn.stat(store._tables[0])["entries"],
                txn.stat(store._dead)["entries"], txn.stat(store._docs)["entries"])


def check_model(store, model: dict, k: int = SCENARIO_K) -> None:
    """The store answers exactly as the model: every key with its fingerprint, the count, the
    checkpoint, every fingerprint's neighbours (query_many and query) and near_duplicate_pairs, all
    against brute force. Raises CheckFailed naming the first difference."""
    docs = model["docs"]
    keys = list(docs)
    fps = np.array([docs[key] for key in keys], dtype=np.uint64)
    if len(store) != len(docs):
        raise CheckFailed(f"len() is {len(store)}, the model holds {len(docs)}")
    if store.checkpoint(FEED) != model["ckpt"]:
        raise CheckFailed(f"checkpoint is {store.checkpoint(FEED)}, the model says {model['ckpt']}")
    listed = list(store)
    if len(listed) != len(set(listed)) or set(listed) != set(keys):
        extra, missing = set(listed) - set(keys), set(keys) - set(listed)
        raise CheckFailed(f"iteration differs from the model: {len(extra)} extra (e.g. {sorted(map(str, extra))[:3]}), "
                          f"{len(missing)} missing (e.g. {sorted(map(str, missing))[:3]})")
    ids = {}
    for key, fp in docs.items():
        doc = store.get(key)
        if doc is None or doc.fingerprint != fp:
            raise CheckFailed(f"key {key!r}: stored {None if doc is None else doc.fingerprint}, model {fp}")
        ids[doc.id] = key
    if not len(keys):
        return
    dist = np.bitwise_count(fps[:, None] ^ fps[None, :])
    # Pairs: store ids -> keys, against brute force over the model.
    a, b, d = store.near_duplicate_pairs(k)
    got = {(frozenset((ids[int(x)], ids[int(y)])), int(z)) for x, y, z in zip(a, b, d)}
    ii, jj = np.nonzero(np.triu(dist <= k, 1))
    want = {(frozenset((keys[i], keys[j])), int(dist[i, j])) for i, j in zip(ii.tolist(), jj.tolist())}
    if got != want or len(a) != len(want):
        raise CheckFailed(f"near_duplicate_pairs differ from brute force: {len(got - want)} extra, {len(want - got)} missing")
    # Every stored fingerprint as a query.
    q, found, qd = store.query_many(fps, pipeline_id=store.pipeline.id)
    got_q = {(int(x), ids.get(int(y), ("unknown id", int(y))), int(z)) for x, y, z in zip(q, found, qd)}
    qi, qj = np.nonzero(dist <= k)
    want_q = {(int(i), keys[j], int(dist[i, j])) for i, j in zip(qi.tolist(), qj.tolist())}
    # Compared as sets: repeated rows are a query_many bug of their own, tested on its own in
    # tests/test_reliability.py, so that it does not hide what these crash checks are about.
    if got_q != want_q:
        raise CheckFailed(f"query_many differs from brute force: {len(got_q - want_q)} extra, {len(want_q - got_q)} missing")
    for i in range(0, len(keys), max(1, len(keys) // 25)):
        got1 = {(m.key, m.distance) for m in store.query(fingerprint=int(fps[i]), pipeline_id=store.pipeline.id)}
        want1 = {(keys[j], int(dist[i, j])) for j in np.flatnonzero(dist[i] <= k).tolist()}
        if got1 != want1:
            raise CheckFailed(f"query of {keys[i]!r} differs from brute force: {got1 ^ want1}")


# -- named crash points, applied from outside the store code ---------------------------------------
#
# fpstore has no crash-point hooks, so a worker patches the storage layer in its own process:
#   before_commit@N   the N-th write transaction ran all its puts; SIGKILL before its commit
#   after_commit@N    the N-th write transaction committed; SIGKILL before the call returns
#   put@N.M           SIGKILL at the M-th mutation (put, putmulti, delete, drop) of write N
#   after_reserve@N   the N-th map reservation (bulk load, compaction) grew the map; SIGKILL
#   before_fsync@N    file compaction: before the N-th fsync (1: the copy, 2: its directory,
#   after_fsync@N       3: the store directory after the rename); or just after it
#   before_replace    file compaction: the copy is synced, the environment closed; before the rename
#   after_replace     file compaction: data.mdb renamed over, its directory not yet synced
# A point prefixed "stop:" sends SIGSTOP instead (the power-loss test copies the disk then).
# "census" runs the operation and reports, per write transaction, how many mutations it made.


class _CountingTxn:
    """A write transaction that counts (and may die at) mutations, cursors' included."""

    MUTATIONS = ("put", "putmulti", "delete", "drop", "replace", "pop")

    def __init__(self, txn, on_mutation) -> None:
        self._txn = txn
        self._on = on_mutation

    def __getattr__(self, name):
        attr = getattr(self._txn, name)
        if name == "cursor":
            return lambda *a, **kw: _CountingTxn(attr(*a, **kw), self._on)
        if name in self.MUTATIONS:
            def mutate(*a, **kw):
                self._on()
                return attr(*a, **kw)
            return mutate
        return attr

    def __iter__(self):
        return iter(self._txn)


_DEATH = [signal.SIGKILL]


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), _DEATH[0])
    os.kill(os.getpid(), signal.SIGKILL)  # after a SIGSTOP and SIGCONT: never carry on past the point


def install_crash_point(point: str) -> dict:
    """Patch fpstore's storage layer in this process for ``point``; returns the census record."""
    import fpstore.store.storage

    census: dict = {"writes": [], "reserves": 0, "fsyncs": 0}
    if point.startswith("stop:"):
        _DEATH[0] = signal.SIGSTOP
        point = point[len("stop:"):]
    kind, _, where = point.partition("@")
    n_at, _, m_at = where.partition(".")
    n_at = int(n_at) if n_at else 0
    m_at = int(m_at) if m_at else 0
    orig_write = fpstore.store.storage.Storage.write
    orig_reserve = fpstore.store.storage.Storage.reserve

    def write(self, fn, *, action="writing"):
        census["writes"].append(0)
        n = len(census["writes"])

        def on_mutation() -> None:
            census["writes"][n - 1] += 1
            if kind == "put" and n == n_at and census["writes"][n - 1] == m_at:
                _die()

        def wrapped(txn):
            census["writes"][n - 1] = 0  # a retry after map growth starts the count again
            result = fn(_CountingTxn(txn, on_mutation))
            if kind == "before_commit" and n == n_at:
                _die()
            return result

        result = orig_write(self, wrapped, action=action)
        if kind == "after_commit" and n == n_at:
            _die()
        return result

    def reserve(self, nbytes):
        census["reserves"] += 1
        orig_reserve(self, nbytes)
        if kind == "after_reserve" and census["reserves"] == n_at:
            _die()

    orig_fsync = fpstore.store.storage._fsync_path
    orig_replace = os.replace

    def fsync_path(path):
        census["fsyncs"] += 1
        if kind == "before_fsync" and census["fsyncs"] == n_at:
            _die()
        orig_fsync(path)
        if kind == "after_fsync" and census["fsyncs"] == n_at:
            _die()

    def replace(src, dst, **kw):
        if kind == "before_replace":
            _die()
        orig_replace(src, dst, **kw)
        if kind == "after_replace":
            _die()

    fpstore.store.storage.Storage.write = write
    fpstore.store.storage.Storage.reserve = reserve
    fpstore.store.storage._fsync_path = fsync_path
    os.replace = replace
    return census


def crash_op(args: argparse.Namespace) -> int:
    """Run scenario operation --op on the store, with crash point --point; print the census."""
    import fpstore

    store = fpstore.open(args.path)
    census = install_crash_point(args.point)
    say("running", SCENARIO_OPS[args.op], args.point)
    run_op(store, args.op)
    store.close()
    say(json.dumps(census))
    return 0


def build_scenario(args: argparse.Namespace) -> int:
    """Run every scenario operation on a new store at ROOT/work, copying the closed store to
    ROOT/base{op} before each operation and to ROOT/base{n} at the end; print each op's census."""
    import shutil

    import fpstore

    work = os.path.join(args.path, "work")
    census = install_crash_point("census")
    fpstore.open(work, k=SCENARIO_K).close()
    for op in range(len(SCENARIO_OPS) + 1):
        shutil.copytree(work, os.path.join(args.path, f"base{op}"), ignore=shutil.ignore_patterns("lock.mdb", "writer.lock"))
        if op == len(SCENARIO_OPS):
            break
        census["writes"].clear()
        census["reserves"] = census["fsyncs"] = 0
        with fpstore.open(work) as store:
            run_op(store, op)
        say(json.dumps({"op": op, "writes": census["writes"], "reserves": census["reserves"], "fsyncs": census["fsyncs"]}))
    return 0


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
        from fpstore.index import runs

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

    from fpstore.fingerprint.pipeline import IdfTable, Pipeline
    from fpstore.store.keys import pack_record
    from fpstore.index.tiers import State

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
    from fpstore.index.design import design_for

    header = {"magic": "fpstore", "format": 1, "features": [], "pipeline": pipe.config, "pipeline_id": pipe.id,
              "design": design_for(3, None, "auto").config(), "created": {"fpstore": "x", "time": 0}}
    seeds["header"].append(msgpack.packb(header, use_bin_type=True))
    seeds["record"] += [pack_record(b"sdoc-1", 12345, None, 0, 0), pack_record(b"i" + bytes(8), (1 << 64) - 1, bytes(16), 7, 3)]
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
    from fpstore.index import runs

    runs.RunIndex.from_bytes(data)


def _fz_run_index_crc(data: bytes, zlib) -> None:
    """Magic, version and checksum made right, so that the structural checks see the rest."""
    from fpstore.index import runs

    body = b"FPRI\x01\x00" + data
    idx = runs.RunIndex.from_bytes(body + zlib.crc32(body).to_bytes(4, "little"))
    # An index that parsed is consistent: decoding all-zero chunks of the right lengths either
    # works or raises CorruptionError (never reads out of bounds).
    if idx.nchunks and int(idx.chunk_len.max()) <= 1 << 16:
        chunks = [bytes(int(n)) for n in idx.chunk_len]
        runs.decode_run(lambda c: chunks[c], idx)


def _fz_run_chunk(data: bytes, zlib) -> None:
    """A sample run's index with fuzzed bytes for one chunk, through every chunk decoder."""
    from fpstore.index import runs

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
        # The single-query kernel, chunk names being chunk numbers: a range probe (decoding
        # stops past hi) and an exact lookup.
        lambda: runs.probe_tables([runs.probe_table(index, list(range(index.nchunks)))], getter, [(0, lo, hi, lo)], 64),
        lambda: runs.probe_tables([runs.probe_table(index, list(range(index.nchunks)))], getter, [(0, lo, lo, lo)], 0),
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
    from fpstore.index.tiers import State

    State.from_bytes(data, 4)


def _fz_header(data: bytes, zlib) -> None:
    """The store header as an opening store decodes it: header, design, pipeline."""
    from fpstore.index.design import Design
    from fpstore.errors import DesignError, FormatError
    from fpstore.fingerprint.pipeline import Pipeline
    from fpstore.store.header import decode_header

    header = decode_header(data, "fuzz")
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
    from fpstore.store.keys import unpack_record, untyped_key

    typed, *_ = unpack_record(data)
    untyped_key(typed)


def _fz_key_block(data: bytes, zlib) -> None:
    """A segment's key block (zstd-compressed when the first byte is even) read as a lookup would."""
    import zstandard

    from fpstore.index.tiers import KEY_BLOCK, KeySegment, PackedColumn, SegmentMeta, TierCache

    if not data:
        return
    body = data[1:]
    if data[0] % 2 == 1:
        body = zstandard.ZstdCompressor(level=1).compress(body)
    seg = KeySegment(_FakeTxn({b"kK" + bytes(4): body}), None, TierCache(),
                     SegmentMeta(1, 1, KEY_BLOCK, b"f", b"h", PackedColumn(b"o", KEY_BLOCK, 0, 0, 1), b"k", 1))
    seg.keys_at([0, 1, 2, KEY_BLOCK - 1][: 1 + data[0] % 4])


def _fz_idf(data: bytes, zlib) -> None:
    from fpstore.fingerprint.pipeline import IdfTable

    IdfTable.from_bytes(data)


def _fz_packed(data: bytes, zlib) -> None:
    """A packed column chunk (width and count from the first bytes) read at a few positions."""
    from fpstore.index.tiers import PackedColumn, read_packed

    if len(data) < 4:
        return
    width, count = data[0] % 65, 1 + data[1] * 3
    rec = PackedColumn(b"p", count, data[2], width, 1 << 16)
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
            start_new_session=True,  # its own process group: kill() reaches a tracee under strace too
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
        self._kill_group()
        return self.finish()

    def _kill_group(self) -> None:
        """SIGKILL the child's process group (the child, and a tracee when the child is strace)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def finish(self, timeout: float = 60.0) -> int:
        """Wait for the child; collect the rest of its stdout into ``lines``; return its status."""
        import select

        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        out = b""
        while True:  # read to EOF, which comes once the child is gone
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self._kill_group()
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
        """What the child wrote to stderr so far (never waits: a tracee may hold the pipe open)."""
        import select

        if self.proc.poll() is None:
            return "(still running)"
        fd = self.proc.stderr.fileno()
        out = b""
        while select.select([fd], [], [], 0.2)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            out += chunk
        return out.decode(errors="replace")[-4000:]

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

    def poll_lines(self) -> list[str]:
        """Every complete line already printed, without waiting (appended to ``lines``)."""
        import select

        fd = self.proc.stdout.fileno()
        while select.select([fd], [], [], 0)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            self._buf += chunk
        while b"\n" in self._buf:
            raw, self._buf = self._buf.split(b"\n", 1)
            self.lines.append(raw.decode())
        return self.lines

    def call(self, *args: str, timeout: float = 120.0) -> tuple[int, list[str]]:
        """Fork a worker running ``python -m tests.workers ARGS`` (no spaces in args), wait for it
        to end (it may SIGKILL itself), and return (exit code, its lines)."""
        assert all(" " not in a for a in args), args
        self.lines.clear()
        self.send("call " + " ".join(args))
        self.line(timeout)  # "ready PID None"
        return self.reap(timeout)

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
        import fpstore.store.storage

        fpstore.store.storage.INITIAL_MAP_SIZE = 1 << 20
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
                    ns = argparse.Namespace(path=args.path, stop=int(cmd[1]), small_growth=False, report_map=False, pause=0.0)
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
    p = sub.add_parser("fill-writer")
    p.add_argument("path")
    p.add_argument("--stop", type=int, default=1 << 40)
    p.add_argument("--fsize", type=int, default=0, help="RLIMIT_FSIZE in bytes")
    p.add_argument("--wait", action="store_true", help="wait for 'go' on stdin before freeing space")
    p.set_defaults(fn=fill_writer)
    p = sub.add_parser("exercise")
    p.add_argument("path")
    p.add_argument("--write", action="store_true")
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--verify", action="store_true", help="open with verify=True (check a file from elsewhere first)")
    p.set_defaults(fn=exercise)
    p = sub.add_parser("crash-op")
    p.add_argument("path")
    p.add_argument("--op", type=int, required=True)
    p.add_argument("--point", required=True)
    p.set_defaults(fn=crash_op)
    p = sub.add_parser("build-scenario")
    p.add_argument("path")
    p.set_defaults(fn=build_scenario)
    p = sub.add_parser("fuzz")
    p.add_argument("--seconds", type=float, default=0, help="run each target for its share of this (random inputs)")
    p.add_argument("--examples", type=int, default=0, help="or: this many derandomized inputs per target")
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

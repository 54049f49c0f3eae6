"""The scenario oracle: ten operations covering every kind of write, and a model of the store after
each of their transactions (``model_after``, ``check_model``: every answer against brute force).
``tools/make_golden_stores.py`` draws its data with the same ``near``."""

from __future__ import annotations

import functools

import numpy as np

from tests.support.oracle import FEED, SEED, CheckFailed

# -- the scenario: every kind of write, with a model of what the store must hold after each ------
#
# Ten operations, each made of one or more write transactions ("steps"): add_many, a bulk load of
# three runs, text adds and deletes (tombstones in runs), add_many replacing keys of both tiers, a
# partial compaction, add_many crossing the flush threshold, a redesign to a larger radius (runs,
# incremental entries and tombstones into one run of the new design), add_many of near-duplicates
# under it, a full compaction, a file compaction. The model after any prefix
# of steps is a dict key -> fingerprint (and checkpoints); a crash inside step s must leave exactly
# the model after s - 1 or s steps, whatever the store's internal layout.

SCENARIO_K = 3
_WORDS = [f"w{i:03d}" for i in range(400)]


def near(rng: np.random.Generator, fps: np.ndarray, bits: int) -> np.ndarray:
    """``fps`` with ``bits`` random bit positions flipped in each (a position may repeat, so a
    fingerprint ends at most ``bits`` away)."""
    out = fps.copy()
    for _ in range(bits):
        out ^= np.uint64(1) << rng.integers(0, 64, size=len(out)).astype(np.uint64)
    return out


@functools.lru_cache(maxsize=1)
def scenario_data() -> dict:
    rng = np.random.default_rng([SEED, 5])
    u64 = np.iinfo(np.uint64).max

    a_keys = [f"a{j}" for j in range(300)]
    a_fps = rng.integers(0, u64, size=300, dtype=np.uint64, endpoint=True)
    a_fps[250:] = near(rng, a_fps[:50], 2)  # pairs inside A
    b_keys = np.arange(10_000, 10_900, dtype=np.int64)
    b_fps = rng.integers(0, u64, size=900, dtype=np.uint64, endpoint=True)
    b_fps[:40] = near(rng, a_fps[50:90], 3)  # pairs between A and B
    texts = []
    for j in range(4):
        words = list(rng.choice(_WORDS, size=40))
        texts.append((f"t{j}", " ".join(words)))
    texts[1] = ("t1", texts[0][1].replace(texts[0][1].split()[5], "zzz", 1))  # a near-duplicate text
    texts[3] = ("t3", texts[2][1])  # an exact duplicate text
    deletes = ["a3", "a4", "a260", 10_001, 10_002, 10_450]
    c_keys = [f"c{j}" for j in range(200)] + [f"a{j}" for j in range(100, 150)] + [int(x) for x in range(10_500, 10_550)]
    c_fps = rng.integers(0, u64, size=300, dtype=np.uint64, endpoint=True)
    c_fps[:30] = near(rng, b_fps[100:130], 1)
    d_keys = [f"d{j}" for j in range(200)]
    d_fps = np.concatenate([near(rng, b_fps[200:300], 2), near(rng, c_fps[100:200], 3)])
    # A batch that crosses the store's flush threshold: its transaction also moves the incremental
    # tables into a run and merges the small runs of the lowest tier (the bulk load's included).
    from fpstore.store.lsm import FLUSH_ENTRIES

    e_keys = [f"e{j}" for j in range(FLUSH_ENTRIES + 100)] + [f"c{j}" for j in range(20)]
    e_fps = rng.integers(0, u64, size=len(e_keys), dtype=np.uint64, endpoint=True)
    e_fps[:50] = near(rng, d_fps[:50], 1)
    return {"a": (a_keys, a_fps), "b": (b_keys, b_fps), "texts": texts, "deletes": deletes, "c": (c_keys, c_fps), "d": (d_keys, d_fps),
            "e": (e_keys, e_fps)}


SCENARIO_OPS = ("add_many_a", "bulk_load_b", "texts_deletes", "add_many_c", "compact_partial", "add_many_flush", "redesign",
                "add_many_d", "compact_full", "compact_file")
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
    elif name == "redesign":
        store.redesign(SCENARIO_K + 2)  # a larger radius: the later operations write under the new design
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
    return [lambda m: None]  # compaction and redesign change no answer, only the layout


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
    """The store's internal shape in one snapshot: (design, runs, segments, incremental entries, tombstones, records)."""
    counts = store.counts()
    return (store.design.name, len(counts["runs"]), len(counts["segments"]), counts["incremental_entries"], counts["tombstones"],
            counts["records"])


def leftovers(store) -> list[str]:
    """What a dead merge could leave: its marker, a garbage list, blobs no live run or key segment
    names (read in one snapshot of an open store)."""
    from fpstore.store.merging import GARBAGE_KEY, MERGING_KEYS

    cat, found = store._cat, []
    with store._storage.read() as txn:
        for key in (*MERGING_KEYS, GARBAGE_KEY):
            if txn.get(key, db=cat.meta) is not None:
                found.append(f"meta/{key.decode()}")
        state = cat.state(txn)
        owners = {p[:5] for rec in state.runs for p in rec.tables} | {rec.ids.prefix[:5] for rec in state.runs if rec.ids}
        owners |= {seg.fps[:5] for seg in state.segs}
        stray = {bytes(key)[:5] for key in txn.cursor(db=cat.blobs).iternext(keys=True, values=False)} - owners
        found += [f"blobs under {p!r}" for p in sorted(stray)]
    return found


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
    q, found, qd = store.query_many(fps, pipeline_id=store.pipeline.id, k=k)
    got_q = {(int(x), ids.get(int(y), ("unknown id", int(y))), int(z)) for x, y, z in zip(q, found, qd)}
    qi, qj = np.nonzero(dist <= k)
    want_q = {(int(i), keys[j], int(dist[i, j])) for i, j in zip(qi.tolist(), qj.tolist())}
    # Compared as sets: repeated rows are a query_many bug of their own, tested on its own in
    # tests/test_reliability.py, so that it does not hide what these crash checks are about.
    if got_q != want_q:
        raise CheckFailed(f"query_many differs from brute force: {len(got_q - want_q)} extra, {len(want_q - got_q)} missing")
    for i in range(0, len(keys), max(1, len(keys) // 25)):
        got1 = {(m.key, m.distance) for m in store.query(fingerprint=int(fps[i]), pipeline_id=store.pipeline.id, k=k)}
        want1 = {(keys[j], int(dist[i, j])) for j in np.flatnonzero(dist[i] <= k).tolist()}
        if got1 != want1:
            raise CheckFailed(f"query of {keys[i]!r} differs from brute force: {got1 ^ want1}")

"""All pairs streamed over a store's sorted tables (fpstore/index/pairs_stream.py, fpstore/store/pairs.py):
exactly numpy brute force over runs, the incremental tier, tombstones and repeated fingerprints,
for one-level and multi-probe designs at every k up to the design's; batches, snapshots, the
in-memory join's budget, clusters over the stream, the prefix_join kernel, and memory that does
not grow with the store."""

from __future__ import annotations

import contextlib
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fpstore
from fpstore import _backend
from fpstore.errors import DesignError, InputError, MemoryBudgetError
from fpstore.index import pairs_stream, search
from fpstore.index.design import design_for, designs_for_k
from fpstore.store import pairs
from tests.conftest import load_twins

C, PY = load_twins("search")


def brute_pairs(fps: np.ndarray, ids: np.ndarray, k: int) -> set[tuple[int, int, int]]:
    """Every (smaller id, larger id, distance <= k) of live documents, by numpy over all pairs."""
    out: set[tuple[int, int, int]] = set()
    for lo in range(0, len(fps), 512):
        d = np.bitwise_count(fps[lo : lo + 512, None] ^ fps[None, :])
        a, b = np.nonzero(d <= k)
        a = a + lo
        sel = a < b
        for x, y in zip(a[sel].tolist(), b[sel].tolist()):
            i, j = int(ids[x]), int(ids[y])
            out.add((min(i, j), max(i, j), int(d[x - lo, y])))
    return out


def as_set(batches) -> set[tuple[int, int, int]]:
    rows = [row for a, b, d in batches for row in zip(a.tolist(), b.tolist(), d.tolist())]
    got = set(rows)
    assert len(got) == len(rows), "a pair came twice"
    return got


def mixed_store(path, k: int, design: str, seed: int, n: int = 1500) -> fpstore.Store:
    """A store with several runs (bulk loads and flushed adds), a non-empty incremental tier,
    tombstones, replaced keys and repeated fingerprints; near pairs at every distance."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 2**64, n // 3, dtype=np.uint64)
    near = base[rng.integers(0, len(base), n // 3)]
    for _ in range(k):  # 1..k flipped bits
        near = near ^ np.where(rng.random(len(near)) < 0.7, np.uint64(1) << rng.integers(0, 64, len(near)).astype(np.uint64), np.uint64(0))
    copies = base[rng.integers(0, len(base), n - 2 * (n // 3))]
    fps = np.concatenate([base, near, copies])
    rng.shuffle(fps)
    s = fpstore.open(path, k=k, design=design, flush_entries=64)
    pid = s.pipeline.id
    half = n // 2
    s.bulk_load(np.arange(half), fps[:half], pipeline_id=pid, max_run=300)
    for lo in range(half, n, 200):
        s.add_many(list(range(lo, min(lo + 200, n))), fingerprints=fps[lo : lo + 200], pipeline_id=pid)
    for key in range(0, n, 29):
        s.delete(key)
    s.add_many(list(range(3, n, 97)), fingerprints=fps[3:n:97] ^ np.uint64(6), pipeline_id=pid)  # replaced keys
    s.add_many([f"extra{i}" for i in range(40)], fingerprints=fps[100:140], pipeline_id=pid)  # stays incremental
    counts = s.counts()
    assert len(counts["runs"]) >= 3 and counts["incremental_entries"] > 0 and counts["tombstones"] > 0
    return s


DESIGNS = [(3, "r4"), (3, "r5"), (3, "r6"), (2, "r2f1"), (3, "r2f1"), (3, "r5f1"), (2, "3x3")]


@pytest.mark.parametrize(("k", "design"), DESIGNS, ids=[f"k{k}-{d}" for k, d in DESIGNS])
def test_streamed_pairs_equal_brute_force(tmp_path, k, design):
    """Every k from 0 to the design's, one window or many (dyadic partner windows for the
    multi-probe designs), one thread or two: exactly the brute-force pairs of the live documents,
    each once, in batches of at most batch_size with id_a < id_b."""
    assert design in {d.name for d in designs_for_k(k)}
    with mixed_store(tmp_path / "s", k, design, seed=k * 10 + len(design)) as s:
        fps, ids = s.fingerprints()
        assert len(np.unique(fps)) < len(fps)  # repeated fingerprints
        for kq in range(k + 1):
            want = brute_pairs(fps, ids, kq)
            assert as_set(s.iter_near_duplicate_pairs(kq)) == want
            for window, threads in ((48, 1), (300, 2)):
                batches = list(pairs.iter_pairs(s._storage, s._cat, kq, batch_size=37, window_entries=window, threads=threads))
                assert all(len(a) <= 37 and np.all(a < b) and a.dtype == np.int64 and d.dtype == np.uint8 for a, b, d in batches)
                assert as_set(batches) == want, (design, kq, window, threads)
            a, b, d = s.near_duplicate_pairs(kq)
            assert set(zip(a.tolist(), b.tolist(), d.tolist())) == want
            assert np.array_equal(np.lexsort((b, a)), np.arange(len(a)))  # sorted by (id_a, id_b)
        assert len(want) > 100


def test_fingerprints_held_by_many_documents_expand_in_chunks(tmp_path, monkeypatch):
    """A fingerprint held by hundreds of documents (in runs and the incremental tier) pairs each
    with each, in table 0 and, across table 0's prefix, through the lookup in table 0: the id
    pairs come out at most EXPAND_ROWS candidates at a time, all of them, each once."""
    monkeypatch.setattr(pairs_stream, "EXPAND_ROWS", 1000)
    rng = np.random.default_rng(8)
    a = int(rng.integers(0, 2**63))
    groups = [a, a ^ 1, a ^ (1 << 63), a ^ (1 << 63) ^ (1 << 5) ^ (1 << 9)]  # the last two: beyond table 0's prefix
    fps = np.repeat(np.array(groups, np.uint64), [300, 120, 150, 60])
    fps = np.concatenate([fps, rng.integers(0, 2**64, 2000, dtype=np.uint64)])
    rng.shuffle(fps)
    with fpstore.open(tmp_path / "s", k=3, design="r4", flush_entries=10_000) as s:
        s.bulk_load(np.arange(400), fps[:400], pipeline_id=s.pipeline.id, max_run=250)
        s.add_many(list(range(400, len(fps))), fingerprints=fps[400:], pipeline_id=s.pipeline.id)
        s.delete(0)
        live, ids = s.fingerprints()
        want = brute_pairs(live, ids, 3)
        chunks = list(pairs.iter_pairs(s._storage, s._cat, 3, batch_size=1 << 30, threads=1))
        assert as_set(chunks) == want and len(want) > 100_000
        with s._storage.read() as txn:
            raw = list(pairs_stream.stream_pairs(s.design, 3, pairs._sources(txn, s._cat, 4), threads=2))
        assert max(len(x[0]) for x in raw) <= 1000 and as_set(raw) == want


def test_stream_reads_the_store_tables_not_an_in_memory_join(tmp_path, monkeypatch):
    """Up to the design's k the pairs come from the store's tables: the in-memory join is never
    called; above it, it is (and answers the same as brute force)."""
    with mixed_store(tmp_path / "s", 2, "r3", seed=4) as s:
        fps, ids = s.fingerprints()
        real = search.pairs_within
        calls = []

        def spy(*args, **kwargs):
            calls.append(args[1])
            return real(*args, **kwargs)

        monkeypatch.setattr(search, "pairs_within", spy)
        assert as_set(s.iter_near_duplicate_pairs(2)) == brute_pairs(fps, ids, 2)
        assert calls == []
        assert as_set(s.iter_near_duplicate_pairs(4)) == brute_pairs(fps, ids, 4)
        assert calls == [4]


def test_in_memory_join_budget(tmp_path):
    """Above the design's k the join's estimate is checked against the budget on the call:
    MemoryBudgetError (a DesignError) names the sizes; a budget that fits, or k within the
    design, runs."""
    with mixed_store(tmp_path / "s", 2, "r3", seed=5) as s:
        with pytest.raises(MemoryBudgetError, match=r"above the budget") as info:
            s.iter_near_duplicate_pairs(3, memory_budget=1000)  # raised before any batch is taken
        assert isinstance(info.value, DesignError)
        with pytest.raises(MemoryBudgetError):
            s.near_duplicate_pairs(5, memory_budget=1000)
        with pytest.raises(MemoryBudgetError):
            s.clusters(5, memory_budget=1000)
        assert len(s.near_duplicate_pairs(3, memory_budget=1 << 30)[0]) > 0
        assert len(s.near_duplicate_pairs(2, memory_budget=1000)[0]) > 0  # streamed: no budget to meet
        for bad in (0, -1, 1.5, True):
            with pytest.raises(InputError):
                s.iter_near_duplicate_pairs(3, memory_budget=bad)
        for bad in (0, -3, "9", None):
            with pytest.raises(InputError):
                s.iter_near_duplicate_pairs(2, batch_size=bad)
        for bad in (-1, 11, True, 2.0):
            with pytest.raises(InputError):
                s.iter_near_duplicate_pairs(bad)


def test_iterator_holds_one_snapshot_until_closed(tmp_path):
    """Writes after the first batch are not seen by the iterator; closing it early releases the
    snapshot, and a new iterator sees the writes."""
    with mixed_store(tmp_path / "s", 2, "r3", seed=6) as s:
        it = s.iter_near_duplicate_pairs(0, batch_size=1)
        first = next(it)
        fp = int(s.fingerprints()[0][0])
        s.add_many(["copy-a", "copy-b"], fingerprints=np.array([fp, fp], np.uint64), pipeline_id=s.pipeline.id)
        new_ids = {s["copy-a"].id, s["copy-b"].id}
        seen = as_set([first, *it])
        assert not any(a in new_ids or b in new_ids for a, b, _ in seen)
        it2 = s.iter_near_duplicate_pairs(0, batch_size=1)
        next(it2)
        with contextlib.closing(it2):
            pass
        assert (min(new_ids), max(new_ids), 0) in as_set(s.iter_near_duplicate_pairs(0))


def test_a_write_that_must_grow_the_map_under_an_open_iterator_is_refused(tmp_path):
    """Growing the map remaps it; an iterator between batches still reads the old mapping. A
    write from the iterating thread that needs more map is refused with StorageError (it used to
    be a segfault waiting to happen), the store unchanged; once the iterator is closed it goes
    through."""
    from fpstore.errors import StorageError

    rng = np.random.default_rng(9)
    fps = rng.integers(0, 2**64, 2000, dtype=np.uint64)
    fps[:1000] = fps[1000:]
    with fpstore.open(tmp_path / "s", k=3, map_size=2 << 20) as s:  # 2 MiB: the next writes must grow it
        s.add_many(list(range(2000)), fingerprints=fps, pipeline_id=s.pipeline.id)
        assert s._storage.env.info()["map_size"] == 2 << 20
        more = rng.integers(0, 2**64, 20_000, dtype=np.uint64)
        it = s.iter_near_duplicate_pairs(0, batch_size=10)
        assert len(next(it)[0]) == 10
        with pytest.raises(StorageError, match="still holds a read"):
            s.add_many([f"m{i}" for i in range(len(more))], fingerprints=more, pipeline_id=s.pipeline.id)
        assert len(s) == 2000
        rest = as_set(it)  # the iterator reads on, unharmed
        assert len(rest) == 1000 - 10
        s.add_many([f"m{i}" for i in range(len(more))], fingerprints=more, pipeline_id=s.pipeline.id)
        assert len(s) == 22_000


def test_clusters_from_the_stream_equal_components_of_brute_force(tmp_path, monkeypatch):
    """Store.clusters (a union-find over the stream, contracted every few edges here) equals
    the connected components of the brute-force pair graph, largest first, smallest id first."""
    monkeypatch.setattr(pairs, "CONTRACT_EDGES", 16)
    with mixed_store(tmp_path / "s", 3, "r4", seed=7) as s:
        fps, ids = s.fingerprints()
        edges = np.array(sorted(brute_pairs(fps, ids, 3)), dtype=np.int64)
        want = search.components(edges[:, 0], edges[:, 1])
        got = pairs.components(s.iter_near_duplicate_pairs(3, batch_size=5))
        assert [g.tolist() for g in got] == [g.tolist() for g in want]
        clusters = s.clusters(3)
        assert [c.ids.tolist() for c in clusters] == [g.tolist() for g in want]
        assert all(s[c.canonical].id == c.ids[0] for c in clusters)


@given(st.lists(st.tuples(st.integers(1, 60), st.integers(1, 60)), max_size=80), st.integers(1, 9))
@settings(max_examples=60)
def test_components_union_find_equals_kernel(edges, batch):
    """pairs.components over edges in batches (contracted every 2 edges) equals search.components."""
    a = np.array([x for x, _ in edges], np.int64)
    b = np.array([y for _, y in edges], np.int64)
    old, pairs.CONTRACT_EDGES = pairs.CONTRACT_EDGES, 2
    try:
        got = pairs.components((a[i : i + batch], b[i : i + batch], None) for i in range(0, len(a), batch))
    finally:
        pairs.CONTRACT_EDGES = old
    assert [g.tolist() for g in got] == [g.tolist() for g in search.components(a, b)]


def test_tables_needed_and_windows():
    """k = 0 needs table 0 only; windows cover every prefix in order, split where the samples
    say; a crowded multi-probe table gets more dyadic bits."""
    d = design_for(3, design="r5")
    assert pairs_stream.tables_needed(d, 0) == 1 and pairs_stream.tables_needed(d, 3) == len(d.tables)
    assert 1 < pairs_stream.tables_needed(d, 2) < len(d.tables)
    rng = np.random.default_rng(1)
    keys = np.sort(rng.integers(0, 2**64, 20_000, dtype=np.uint64))
    src = pairs_stream.ArraySource(keys)
    wins = pairs_stream.prefix_windows([src], 16, 1000)
    assert wins[0][0] == 0 and wins[-1][1] == 1 << 16 and all(w[1] == v[0] for w, v in zip(wins, wins[1:]))
    assert 12 <= len(wins) <= 30
    assert pairs_stream.prefix_windows([src], 16, 10**6) == [(0, 1 << 16)]
    assert pairs_stream.dyadic_width([src], 32, 1000) == 5
    many = np.sort(rng.integers(0, 2**64, 200_000, dtype=np.uint64))
    assert pairs_stream.dyadic_width([pairs_stream.ArraySource(many)], 32, 5000) == 6
    crowded = pairs_stream.ArraySource(np.sort(np.concatenate([many, many[:1].repeat(100_000)])))
    assert pairs_stream.dyadic_width([crowded], 32, 5000) == 6 + 4  # as far as it may go
    assert pairs_stream.dyadic_width([crowded], 8, 5000) == 8  # never past the prefix


# -- the prefix_join kernel ------------------------------------------------------------------------

prefix_keys = hnp.arrays(
    np.uint64, st.integers(0, 60), elements=st.one_of(st.integers(0, 2**64 - 1), st.integers(0, 15).map(lambda x: x << 60 | 7))
)


def brute_prefix_join(a, b, p, masks, k, same):
    shift = 64 - p
    pre = (lambda v: v >> shift) if p else (lambda v: 0)
    out = set()
    for i, x in enumerate(a.tolist()):
        for j, y in enumerate(b.tolist()):
            if same and j <= i and pre(x) == pre(y):
                continue
            m = pre(x) ^ pre(y)
            if same and m and pre(x) > pre(y):
                continue
            if m in masks and (x ^ y).bit_count() <= k:
                out.add((i, j, (x ^ y).bit_count()))
    return out


@given(
    prefix_keys, prefix_keys, st.integers(0, 8), st.lists(st.integers(0, 255), max_size=6, unique=True), st.integers(0, 64), st.booleans()
)
@settings(max_examples=300)
def test_prefix_join_equals_twin_and_brute_force(a, b, p, masks, k, same):
    """prefix_join: pairs whose prefixes differ by one of the masks, within k; with same=True each
    unordered pair once; both twins equal, row for row."""
    if same:
        b = a
    shift = np.uint64(64 - p)
    a = a[np.argsort(a >> shift if p else np.zeros(len(a), np.uint64), kind="stable")]
    b = a if same else b[np.argsort(b >> shift if p else np.zeros(len(b), np.uint64), kind="stable")]
    m = np.array(masks, np.uint64)
    got = C.prefix_join(a, b, p, m, k, same)
    want = PY.prefix_join(a, b, p, m, k, same)
    assert all(np.array_equal(x, y) and x.dtype == y.dtype for x, y in zip(got, want))
    assert set(zip(*(x.tolist() for x in got))) == brute_prefix_join(a, b, p, set(masks), k, same)
    assert len(set(zip(got[0].tolist(), got[1].tolist()))) == len(got[0])


def test_prefix_join_rejects_bad_arguments():
    keys = np.array([1, 2, 3], np.uint64)
    for mod in (C, PY):
        with pytest.raises(ValueError):
            mod.prefix_join(keys, keys, 65, np.zeros(1, np.uint64), 3, True)
        with pytest.raises(ValueError):
            mod.prefix_join(keys, keys[:2], 8, np.zeros(1, np.uint64), 3, True)


# -- memory ----------------------------------------------------------------------------------------


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.skipif(
    _backend.PURE_PYTHON, reason="10^6 fingerprints: a bound on the compiled path's memory (the twins are its specification)"
)
def test_streamed_pairs_memory_does_not_grow_with_the_store(tmp_path):
    """Peak traced memory (numpy included) of streaming all pairs: 10^5 against 10^6 documents
    (a run, tombstones, an incremental tier), windows of 2^14 entries, one thread. The stream
    may grow only by the per-document arrays it declares (the runs' block indexes, about 0.25 B per
    document and table, and 8 B per tombstone), about 1 B per document here against a window's
    worth of megabytes, while a window holding whole tables grows ~10x."""
    peaks = {}
    for n in (100_000, 1_000_000):
        rng = np.random.default_rng(n)
        fps = rng.integers(0, 2**64, n, dtype=np.uint64)
        fps[: n // 50] = fps[n // 50 : n // 25] ^ np.uint64(5)
        with fpstore.open(tmp_path / f"s{n}", k=3, design="r4") as s:
            s.bulk_load(np.arange(n), fps, pipeline_id=s.pipeline.id)
            s.add_many(list(range(n, n + 500)), fingerprints=fps[:500] ^ np.uint64(1 << 40), pipeline_id=s.pipeline.id)
            for key in range(0, n, n // 8):
                s.delete(key)
        with fpstore.open(tmp_path / f"s{n}", readonly=True) as s:  # nothing cached yet: indexes count
            found: list[int] = []

            def stream(window: int, store: fpstore.Store = s, found: list[int] = found) -> None:
                batches = pairs.iter_pairs(store._storage, store._cat, 3, batch_size=4096, window_entries=window, threads=1)
                found.append(sum(len(a) for a, _, _ in batches))

            peaks[n] = (_peak(lambda: stream(1 << 14)), _peak(lambda: stream(1 << 30)))
            assert found[0] == found[1] > n // 50
    (small, small_whole), (large, large_whole) = peaks[100_000], peaks[1_000_000]
    declared = 900_000 * 4 * 0.35  # the block indexes of 4 tables (tombstones: 8 of them)
    assert large - small < declared, peaks
    assert large < 4 * small, peaks
    # The measure sees growth: one window holding a whole table grows ~10x with the store.
    assert large_whole > 5 * small_whole and large_whole > 10 * large, peaks


@pytest.mark.parametrize("buffer", [5, 1 << 22])
def test_dedup_spill_reads_back_sorted_by_distance_then_ids(monkeypatch, buffer):
    """fpstore-admin dedup holds the streamed pairs in sorted runs per distance (spilled to files
    once BUFFER pairs are held) and reads them back merged: distance, then id_a, then id_b."""
    from fpstore.admin.data import PairSpill

    monkeypatch.setattr(PairSpill, "BUFFER", buffer)
    rng = np.random.default_rng(2)
    want = []
    with PairSpill(3) as spill:
        for _ in range(30):
            n = int(rng.integers(0, 25))
            a = rng.integers(1, 200, n)
            b = a + rng.integers(1, 60, n)
            d = rng.integers(0, 4, n).astype(np.uint8)
            spill.add(a, b, d)
            want += list(zip(d.tolist(), a.tolist(), b.tolist()))
        got = [(dist, x, y) for a, b, dist in spill.chunks(7) for x, y in zip(a.tolist(), b.tolist())]
        assert spill.count == len(want)
    assert got == sorted(want)

"""Short documents in all pairs (issue 17, item 4): documents below the pipeline's min_tokens are
not in the tables, and take part in Store.near_duplicate_pairs, iter_near_duplicate_pairs,
clusters and fpstore-admin dedup as exact duplicates: every pair of live documents sharing a
content hash, one of them at least short, within k. Compared with a brute-force oracle over what
the store holds (Store.documents), across runs, the incremental tier, tombstones, replaced and
deleted documents, documents stored by fingerprint only, bulk loads and the in-memory join."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest

import fpstore
from fpstore.fingerprint.pipeline import Fingerprints
from fpstore.index import pairs_stream, search
from fpstore.store import pairs
from tests.test_cli import cli

SOFT_404 = "Page not found. Sorry!"
LOGIN = "Please log in to continue"
VOCAB = [f"{w}{i}" for i in range(60) for w in ("river", "stone", "cloud", "ember", "frost", "maple")]


def long_text(rng: np.random.Generator, n: int = 60) -> str:
    return " ".join(rng.choice(VOCAB, n).tolist())


def oracle(s: fpstore.Store, k: int) -> set[tuple[int, int, int]]:
    """Every pair a store must report at radius k, by brute force over its live documents: two
    indexed (not short) documents within k, or two documents of one content hash, one of them at
    least short, within k."""
    docs = list(s.documents())
    ids = np.array([d.id for d in docs], np.int64)
    fps = np.array([d.fingerprint for d in docs], np.uint64)
    short = np.array([d.short for d in docs], bool)
    hashes = [d.content_hash for d in docs]
    dist = np.bitwise_count(fps[:, None] ^ fps[None, :])
    out = set()
    for x, y in zip(*np.nonzero(np.triu(dist <= k, 1))):
        if (not short[x] and not short[y]) or (hashes[x] is not None and hashes[x] == hashes[y]):
            i, j = int(ids[x]), int(ids[y])
            out.add((min(i, j), max(i, j), int(dist[x, y])))
    return out


def as_set(batches) -> set[tuple[int, int, int]]:
    rows = []
    for a, b, d in batches:
        assert a.dtype == np.int64 and b.dtype == np.int64 and d.dtype == np.uint8
        assert bool(np.all(a < b))
        rows += zip(a.tolist(), b.tolist(), d.tolist())
    got = set(rows)
    assert len(got) == len(rows), "a pair came twice"
    return got


def soft404_store(path, k: int = 3, design: str = "r4") -> fpstore.Store:
    """100 identical short pages (the soft-404s of the issue) and other short groups beside
    long documents and their near and exact copies; some in runs, some incremental; short
    documents deleted and replaced, long ones replaced by short ones; documents stored by
    fingerprint only, one with the soft-404s' fingerprint; a bulk load with tombstones."""
    rng = np.random.default_rng(17)
    s = fpstore.open(path, k=k, design=design, flush_entries=64, merges="manual")
    pid = s.pipeline.id
    s.add_many([f"404/{i}" for i in range(60)], texts=[SOFT_404] * 60)
    longs = [long_text(rng) for _ in range(80)]
    variants = [t.replace(t.split()[5], "changed", 1) for t in longs[:30]]
    s.add_many([f"long/{i}" for i in range(80)], texts=longs)
    s.add_many([f"variant/{i}" for i in range(30)], texts=variants)
    s.add_many([f"copy/{i}" for i in range(10)], texts=longs[:10])
    s.add_many(["login/1", "login/2", "login/3"], texts=[LOGIN] * 3)
    s.add("lonely", text="one short text alone")
    for i in range(60, 100):  # single adds (group commit) and add_each
        s.add(f"404/{i}", text=SOFT_404) if i % 2 else s.add_each([f"404/{i}"], texts=[SOFT_404])
    soft_fp = s["404/0"].fingerprint
    s.add_many(["fp/soft", "fp/other"], fingerprints=np.array([soft_fp, soft_fp ^ 1], np.uint64), pipeline_id=pid)
    s.bulk_load(np.arange(1000, 1200), np.concatenate([[soft_fp], rng.integers(0, 2**64, 199, dtype=np.uint64)]), pipeline_id=pid)
    s.compact()
    s.delete("404/5")
    s.delete("login/2")
    s.delete(1001)  # a tombstone in a run
    s.add("404/7", text=long_text(rng))  # a short document replaced by a long one
    s.add("login/3", text="something else entirely")  # by another short text
    s.add("long/0", text=SOFT_404)  # a long document replaced by a short one: joins the group
    s.add("login/4", text=LOGIN)
    counts = s.counts()
    assert counts["runs"] and counts["incremental_entries"] and counts["tombstones"]
    return s


def test_short_exact_duplicates_are_pairs_clusters_and_dedup(tmp_path):
    """The issue's case: 100 identical short pages are one cluster and their pairs are reported,
    exactly as the oracle says, by every all-pairs entry point."""
    with soft404_store(tmp_path / "s") as s:
        want = oracle(s, 3)
        group = {s[f"404/{i}"].id for i in range(100) if i not in (5, 7)} | {s["long/0"].id}
        assert len(group) == 99
        short_pairs = {(a, b) for a, b, _ in want if a in group and b in group}
        assert len(short_pairs) == 99 * 98 // 2
        a, b, d = s.near_duplicate_pairs()
        assert set(zip(a.tolist(), b.tolist(), d.tolist())) == want
        assert np.array_equal(np.lexsort((b, a)), np.arange(len(a)))  # sorted by (id_a, id_b)
        batches = list(s.iter_near_duplicate_pairs(batch_size=97))
        assert all(len(x[0]) <= 97 for x in batches) and as_set(batches) == want
        clusters = s.clusters()
        edges = np.array(sorted(want), np.int64)
        assert [c.ids.tolist() for c in clusters] == [g.tolist() for g in search.components(edges[:, 0], edges[:, 1])]
        soft = next(c for c in clusters if c.canonical == "404/0")
        assert set(soft.ids.tolist()) == group and set(soft.keys) == {s.keys_of([i])[0] for i in group}
        assert {"login/1", "login/4"} in [set(c.keys) for c in clusters]
        assert all("lonely" not in c.keys and "fp/soft" not in c.keys for c in clusters if c.canonical == "404/0")


def test_in_memory_join_includes_short_pairs(tmp_path):
    """Above the design's k (the in-memory join) the short pairs are there too."""
    with soft404_store(tmp_path / "s", k=2, design="r3") as s:
        assert as_set(s.iter_near_duplicate_pairs(4)) == oracle(s, 4)
        assert as_set(s.iter_near_duplicate_pairs(2)) == oracle(s, 2)


def test_content_table_read_in_chunks_and_groups_expanded_in_chunks(tmp_path, monkeypatch):
    """The content table is streamed a few entries at a time (a group straddles reads) and a
    large group's pairs come out a bounded number of candidate rows at a time."""
    from fpstore.store import exact_pairs

    monkeypatch.setattr(exact_pairs, "READ_ENTRIES", 7)
    monkeypatch.setattr(pairs_stream, "EXPAND_ROWS", 200)
    with soft404_store(tmp_path / "s") as s:
        with s._storage.read() as txn:
            raw = list(exact_pairs.pairs_of(exact_pairs.groups(txn, s._cat), 3))
        assert raw and max(len(x[0]) for x in raw) <= 200
        assert as_set(s.iter_near_duplicate_pairs(batch_size=1 << 20)) == oracle(s, 3)


def test_mixed_groups_and_distances_from_imported_signatures(tmp_path):
    """Signatures given with content hashes (an import): a short and a long document of one hash
    pair at their distance; short documents of one hash whose fingerprints differ by more than
    k are left out (every pair is within k); long ones pair only by fingerprint, as before."""
    with fpstore.open(tmp_path / "s", k=3, design="r4") as s:
        h = np.array([[1, 2]] * 2 + [[3, 4]] * 2 + [[5, 6]] * 3 + [[7, 8]] * 2, np.uint64)
        fps = np.array([10, 10, 0, 0xFFF, 40, 40 ^ 3, 40 ^ 0xFF00, 0xFFFFFFFF00000000, 0xFFFFFFFF0000F0F0], np.uint64)
        short = np.array([True, False, True, True, True, True, True, False, False])
        sigs = Fingerprints(fps, s.pipeline.id, np.where(short, 3, 50).astype(np.int64), short, h)
        ids = s.add_many([f"d{i}" for i in range(len(fps))], fingerprints=sigs).tolist()
        got = as_set(s.iter_near_duplicate_pairs())
        assert got == {(ids[0], ids[1], 0), (ids[4], ids[5], 2)} == oracle(s, 3)


def test_documents_by_fingerprint_only_take_no_exact_part(tmp_path):
    """Documents stored by fingerprint have no content hash: they pair by fingerprint only, never
    with a short document of the same fingerprint."""
    with fpstore.open(tmp_path / "s", k=3) as s:
        s.add("short", text=SOFT_404)
        fp = s["short"].fingerprint
        s.add("raw", fingerprint=fp, pipeline_id=s.pipeline.id)
        s.bulk_load([7], np.array([fp], np.uint64), pipeline_id=s.pipeline.id)
        a, b, d = s.near_duplicate_pairs()
        assert list(zip(a.tolist(), b.tolist(), d.tolist())) == [(s["raw"].id, s[7].id, 0)]
        s.add("short2", text=SOFT_404)
        a, b, d = s.near_duplicate_pairs()
        assert (s["short"].id, s["short2"].id, 0) in set(zip(a.tolist(), b.tolist(), d.tolist())) and len(a) == 2


def test_deleted_and_replaced_short_documents_leave_the_pairs(tmp_path):
    with fpstore.open(tmp_path / "s", k=3) as s:
        s.add_many(["a", "b", "c"], texts=[SOFT_404] * 3)
        assert len(s.near_duplicate_pairs()[0]) == 3
        s.delete("a")
        s.add("b", text=LOGIN)
        assert len(s.near_duplicate_pairs()[0]) == 0
        s.add("d", text=LOGIN)
        a, b, _ = s.near_duplicate_pairs()
        assert list(zip(a.tolist(), b.tolist())) == [(s["b"].id, s["d"].id)]
        assert [c.keys for c in s.clusters()] == [["b", "d"]]


@pytest.mark.parametrize("fmt", ["jsonl", "clusters"])
def test_dedup_reports_short_duplicates(tmp_path, fmt):
    """fpstore-admin dedup: the short group's pairs (distance 0) and its cluster."""
    with soft404_store(tmp_path / "s") as s:
        want = oracle(s, 3)
        by_id = {d.id: d.key for d in s.documents()}
    if fmt == "jsonl":
        r = cli("dedup", tmp_path / "s")
        assert r.code == 0, r.err
        rows = [json.loads(line) for line in r.out.splitlines()]
        assert {(x["a"], x["b"], x["distance"]) for x in rows} == {(by_id[a], by_id[b], d) for a, b, d in want}
        assert len(rows) == len(want)
        assert [(x["distance"]) for x in rows] == sorted(x["distance"] for x in rows)
    else:
        r = cli("dedup", tmp_path / "s", "--clusters")
        assert r.code == 0, r.err
        rows = [json.loads(line) for line in r.out.splitlines()]
        soft = next(x for x in rows if x["canonical"] == "404/0")
        assert soft["size"] == 99 and "long/0" in soft["keys"] and "404/5" not in soft["keys"]


def test_pairs_module_reads_short_pairs_in_its_snapshot(tmp_path):
    """The short pairs come from the iterator's own snapshot: a write after it started is not seen."""
    with fpstore.open(tmp_path / "s", k=3) as s:
        s.add_many(["a", "b"], texts=[SOFT_404] * 2)
        it = pairs.iter_pairs(s._storage, s._cat, 3, batch_size=1)
        first = next(it)
        s.add("c", text=SOFT_404)
        rest = list(it)
        assert len(first[0]) + sum(len(x[0]) for x in rest) == 1


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_short_pairs_memory_does_not_grow_with_the_content_table(tmp_path, monkeypatch):
    """Peak traced memory of the short pairs' pass over 2 x 10^4 against 2 x 10^5 documents with
    content hashes (a few short groups among them), reading 1,000 keys at a time: flat, while
    reading the whole table at once grows with it (the measure sees growth)."""
    from fpstore.store import exact_pairs

    peaks = {}
    for n in (20_000, 200_000):
        rng = np.random.default_rng(n)
        hashes = rng.integers(0, 2**64, (n, 2), dtype=np.uint64)
        hashes[: n // 100] = hashes[n // 100 : n // 50]  # 1 % of the hashes held twice
        short = np.zeros(n, bool)
        short[: n // 50] = True
        fps = rng.integers(0, 2**64, n, dtype=np.uint64)
        fps[: n // 100] = fps[n // 100 : n // 50]
        with fpstore.open(tmp_path / f"s{n}", k=3) as s:
            s.add_many(list(range(n)), fingerprints=Fingerprints(fps, s.pipeline.id, np.full(n, 5), short, hashes))
        with fpstore.open(tmp_path / f"s{n}", readonly=True) as s:
            found: list[int] = []

            def run(store: fpstore.Store = s, found: list[int] = found) -> None:
                with store._storage.read() as txn:
                    found.append(sum(len(a) for a, _, _ in exact_pairs.pairs_of(exact_pairs.groups(txn, store._cat), 3)))

            monkeypatch.setattr(exact_pairs, "READ_ENTRIES", 1000)
            batched = _peak(run)
            monkeypatch.setattr(exact_pairs, "READ_ENTRIES", 1 << 30)
            whole = _peak(run)
            assert found[0] == found[1] == n // 100
            peaks[n] = (batched, whole)
    (small, small_whole), (large, large_whole) = peaks[20_000], peaks[200_000]
    assert large < 2 * small, peaks
    assert large_whole > 5 * small_whole and large_whole > 10 * large, peaks

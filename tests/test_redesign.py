"""Store.redesign: a store indexed again for another radius answers exactly as brute force and as
a store created with that radius; the switch is one transaction (the kill harness covers it: the
scenario of tests/support/scenario.py has a redesign operation), needs the store alone, and a
failed switch leaves the old design working."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest

import fpstore
from fpstore.errors import DesignError, ReadOnlyError, StorageError


def planted(rng: np.random.Generator, n: int) -> np.ndarray:
    """Random fingerprints, a third of them copies of others with 1..7 bits flipped."""
    fps = rng.integers(0, 2**64, size=n, dtype=np.uint64, endpoint=False)
    m = n // 3
    src = rng.integers(0, n - m, size=m)
    out = fps[src].copy()
    flips = rng.integers(1, 8, size=m)
    for j in range(7):
        bit = np.uint64(1) << rng.integers(0, 64, size=m).astype(np.uint64)
        out ^= np.where(flips > j, bit, np.uint64(0))
    fps[n - m :] = out
    return fps


def fill(store: fpstore.Store, fps: np.ndarray) -> dict[object, int]:
    """Two bulk runs, adds that flush into runs and stay in the incremental tables, replacements
    and deletions; returns the model (key -> fingerprint)."""
    pid = store.pipeline.id
    n = len(fps)
    half = n // 2
    store.bulk_load(np.arange(half), fps[:half], pipeline_id=pid, max_run=half // 2 + 1)
    keys = [f"k{j}" for j in range(half, n)]
    for lo in range(0, len(keys), 300):
        store.add_many(keys[lo : lo + 300], fingerprints=fps[half + lo : half + lo + 300], pipeline_id=pid)
    model: dict[object, int] = {j: int(fps[j]) for j in range(half)}
    model.update({key: int(fp) for key, fp in zip(keys, fps[half:])})
    for key in list(range(0, half, 41)) + keys[::53]:
        store.delete(key)
        del model[key]
    replaced = list(range(1, half, 13))
    new = fps[: len(replaced)] ^ np.uint64(0b101)
    store.add_many(replaced, fingerprints=new, pipeline_id=pid)
    model.update({key: int(fp) for key, fp in zip(replaced, new)})
    return model


def brute_pairs(model: dict[object, int], k: int) -> set[tuple[frozenset, int]]:
    keys = list(model)
    fps = np.array([model[key] for key in keys], dtype=np.uint64)
    dist = np.bitwise_count(fps[:, None] ^ fps[None, :])
    i, j = np.nonzero(np.triu(dist <= k, 1))
    return {(frozenset((keys[a], keys[b])), int(dist[a, b])) for a, b in zip(i.tolist(), j.tolist())}


def answers(store: fpstore.Store, queries: np.ndarray, k: int) -> tuple[set, set]:
    """(query index, key, distance) of query_many, and all pairs by keys, at radius ``k``."""
    q, ids, dist = store.query_many(queries, pipeline_id=store.pipeline.id, k=k)
    keys = store.keys_of(ids)
    found = {(int(a), key, int(d)) for a, key, d in zip(q, keys, dist)}
    a, b, d = store.near_duplicate_pairs(k)
    ka, kb = store.keys_of(a), store.keys_of(b)
    pairs = {(frozenset((x, y)), int(z)) for x, y, z in zip(ka, kb, d)}
    return found, pairs


def brute_queries(model: dict[object, int], queries: np.ndarray, k: int) -> set:
    keys = list(model)
    fps = np.array([model[key] for key in keys], dtype=np.uint64)
    dist = np.bitwise_count(queries[:, None] ^ fps[None, :])
    i, j = np.nonzero(dist <= k)
    return {(int(a), keys[b], int(dist[a, b])) for a, b in zip(i.tolist(), j.tolist())}


@pytest.mark.parametrize("start_k, new_k", [(3, 5), (5, 3), (2, 7), (4, 4)])
def test_redesign_answers_as_brute_force_and_a_store_made_with_the_radius(tmp_path, start_k, new_k):
    rng = np.random.default_rng([start_k, new_k])
    fps = planted(rng, 2400)
    queries = np.concatenate([fps[::17], fps[::23] ^ np.uint64(0b1000010001)])
    with (
        fpstore.open(tmp_path / "old", k=start_k, flush_entries=1000) as old,
        fpstore.open(tmp_path / "made", k=new_k, flush_entries=1000) as made,
    ):
        model = fill(old, fps)
        assert fill(made, fps) == model
        assert len(old.counts()["runs"]) >= 3 and old.counts()["incremental_entries"] > 0 and old.counts()["tombstones"] > 0
        seen: list[tuple[int, int | None]] = []
        result = old.redesign(new_k, progress=lambda done, total: seen.append((done, total)))
        assert old.design.config() == made.design.config() and old.k == new_k
        assert result == {"design_before": result["design_before"], "design_after": made.design.name, "k": new_k, "threshold": None, "entries": len(model)}
        if result["design_before"] != result["design_after"]:
            assert seen and seen[-1] == (len(made.design.tables), len(made.design.tables))
        for k in sorted({0, min(start_k, new_k), new_k}):
            want = (brute_queries(model, queries, k), brute_pairs(model, k))
            assert answers(old, queries, k) == want == answers(made, queries, k), f"k={k}"
        assert old.verify(deep=False) == []
        # Writes under the new design, and the design survives a reopen.
        more = planted(rng, 700)
        old.add_many([f"m{j}" for j in range(700)], fingerprints=more, pipeline_id=old.pipeline.id)
        model.update({f"m{j}": int(fp) for j, fp in enumerate(more)})
    with fpstore.open(tmp_path / "old", readonly=True) as again:
        assert again.design.config() == made.design.config() and again.k == new_k
        assert answers(again, queries, new_k) == (brute_queries(model, queries, new_k), brute_pairs(model, new_k))
        assert again.verify() == []


def test_redesign_to_the_same_design_writes_nothing(tmp_path):
    with fpstore.open(tmp_path / "s", k=3) as s:
        s.add_many(["a", "b"], fingerprints=[1, 3], pipeline_id=s.pipeline.id)
        before = s.counts()
        assert s.redesign(3) == {"design_before": s.design.name, "design_after": s.design.name, "k": 3, "threshold": None, "entries": 2}
        assert s.counts() == before  # the incremental tables were not merged into a run


def test_redesign_takes_a_named_design_and_an_expected_size(tmp_path):
    with fpstore.open(tmp_path / "s", k=3) as s:
        s.add_many(["a", "b"], fingerprints=[1, 3], pipeline_id=s.pipeline.id)
        s.compact()  # one run and nothing else: the lone run is still encoded again
        assert s.redesign(3, design="r5")["design_after"] == "r5" == s.design.name
        big = s.redesign(3, expected_size=10**9)["design_after"]
        assert big == fpstore.index.design.design_for(3, 10**9).name
        assert {m.key for m in s.query(fingerprint=0, pipeline_id=s.pipeline.id)} == {"a", "b"}


@pytest.mark.parametrize("k", [11, -1, "5", True, 2.0])
def test_bad_radius_is_refused_before_anything_changes(tmp_path, k):
    with fpstore.open(tmp_path / "s", k=3) as s:
        s.add("a", fingerprint=1, pipeline_id=s.pipeline.id)
        with pytest.raises(DesignError, match="k must be|k="):
            s.redesign(k)
        assert s.design.k == 3 and s.k == 3 and "a" in s


def test_redesign_of_a_readonly_store_is_refused(tmp_path):
    fpstore.open(tmp_path / "s", k=3).close()
    with fpstore.open(tmp_path / "s", readonly=True) as r:
        with pytest.raises(ReadOnlyError):
            r.redesign(5)
        assert r.design.k == 3


def test_redesign_refuses_while_another_process_has_the_store(tmp_path):
    path = tmp_path / "s"
    with fpstore.open(path, k=3) as s:
        s.add("a", fingerprint=1, pipeline_id=s.pipeline.id)
        reader = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import fpstore, sys, time; s = fpstore.open(sys.argv[1], readonly=True); print(len(s), flush=True); time.sleep(30)",
                str(path),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert reader.stdout is not None and reader.stdout.readline().strip() == "1"
            with pytest.raises(StorageError, match="another process; a redesign needs it alone"):
                s.redesign(5)
            assert s.design.k == 3 and "a" in s
        finally:
            reader.kill()
            reader.wait()
        s.redesign(5)  # alone again: allowed
        assert s.design.k == 5


@pytest.mark.parametrize("start_k, new_k", [(5, 3), (3, 5)])
def test_a_failed_switch_leaves_the_old_design_working(tmp_path, monkeypatch, start_k, new_k):
    """The write fails after dropping the tables the new design lacks (5 -> 3) or before using
    the ones it adds (3 -> 5): the store keeps its design, answers, and later writes."""
    from fpstore.store import lsm

    rng = np.random.default_rng(7)
    fps = planted(rng, 1200)
    with fpstore.open(tmp_path / "s", k=start_k, flush_entries=300) as s:
        model = fill(s, fps)
        design = s.design.config()

        def boom(self, txn, state):
            raise RuntimeError("injected")

        with monkeypatch.context() as m:
            m.setattr(lsm.Lsm, "save_state", boom)
            with pytest.raises(RuntimeError, match="injected"):
                s.redesign(new_k)
        assert s.design.config() == design and s.k == start_k
        assert answers(s, fps[::7], start_k) == (brute_queries(model, fps[::7], start_k), brute_pairs(model, start_k))
        s.add("late", fingerprint=int(fps[0]), pipeline_id=s.pipeline.id)
        assert "late" in {m.key for m in s.query(fingerprint=int(fps[0]), pipeline_id=s.pipeline.id)}
        assert s.verify() == []
        s.redesign(new_k)
        assert s.design.k == new_k and "late" in s


def test_queries_in_other_threads_stay_exact_through_a_redesign(tmp_path):
    rng = np.random.default_rng(11)
    fps = planted(rng, 4000)
    with fpstore.open(tmp_path / "s", k=3, flush_entries=500) as s:
        model = fill(s, fps)
        queries = fps[::50]
        want = brute_queries(model, queries, 3)
        stop = threading.Event()
        problems: list[str] = []
        rounds = [0]

        def query_loop() -> None:
            while not stop.is_set():
                try:
                    q, ids, dist = s.query_many(queries, pipeline_id=s.pipeline.id, k=3)
                    got = {(int(a), key, int(d)) for a, key, d in zip(q, s.keys_of(ids), dist)}
                    if got != want:
                        problems.append(f"{len(got ^ want)} differences")
                except Exception as exc:  # noqa: BLE001 - any failure is the finding
                    problems.append(repr(exc))
                rounds[0] += 1

        threads = [threading.Thread(target=query_loop) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            for k in (5, 4, 6, 3):
                s.redesign(k)
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert not problems, problems[:3]
        assert rounds[0] > 0

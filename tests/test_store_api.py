"""The store's inspection API: counts, verify, stats, documents, fingerprints, info's LMDB figures, the
file's structural check, and the pipeline mismatch description."""

from __future__ import annotations

import numpy as np
import pytest

import fpstore
from fpstore.store.storage import structure_problems

PID = fpstore.Pipeline().id


def filled(path, *, flush_entries: int = 64) -> fpstore.Store:
    """A store with documents in every tier: bulk-loaded, flushed into runs, incremental, short
    texts, canonicals, deletions (records and tombstones)."""
    rng = np.random.default_rng(7)
    s = fpstore.open(path, k=3, flush_entries=flush_entries)
    s.bulk_load(np.arange(1000, 1300, dtype=np.uint64), rng.integers(0, 2**64, 300, dtype=np.uint64), pipeline_id=PID)
    fps = rng.integers(0, 2**64, 200, dtype=np.uint64)
    s.add_many([f"k{i}" for i in range(200)], fingerprints=fps, pipeline_id=PID)
    s.add_many(["v0", "v1"], fingerprints=fps[:2] ^ np.uint64(1), pipeline_id=PID, canonicals=["k0", None])
    s.add("short", text="two words")
    s.add(b"bytes-key", text="some words of a text long enough to be indexed by the default pipeline here")
    for key in ("k3", 1005, "k150"):
        assert s.delete(key)
    return s


def test_counts_agree_with_the_documents_and_the_index(tmp_path):
    """counts(): the live count is what documents() yields, every table holds what fingerprints()
    holds plus the deleted run entries (tombstones), runs and segments sum to the entries in runs."""
    with filled(tmp_path / "s") as s:
        s.set_checkpoint("feed", {"line": 7})
        c = s.counts()
        live = list(s.documents())
        fps, _ = s.fingerprints()
        assert c["documents"] == len(live) == len(s)
        assert c["next_id"] > max(d.id for d in live)
        assert len(c["table_entries"]) == len(s.design.tables)
        assert set(c["table_entries"]) == {len(fps) + c["tombstones"]}
        assert c["table_entries"][0] == c["incremental_entries"] + sum(c["runs"])
        assert sum(c["segments"]) == 300 and len(c["runs"]) >= 2
        assert c["checkpoints"] == {"feed": {"line": 7}}
        assert c["content_hashes"] >= 1 and c["keys"] == c["records"]


def test_verify_of_a_sound_store_is_empty(tmp_path):
    """A sound store with every tier verifies deep and shallow with no problem."""
    with filled(tmp_path / "s") as s:
        assert s.verify() == []
        assert s.verify(deep=False) == []
        s.compact()
        assert s.verify() == []


def test_verify_reports_a_damaged_table_entry(tmp_path):
    """An entry removed from one incremental table is reported, deep and shallow."""
    with filled(tmp_path / "s", flush_entries=0) as s:
        last = len(s.design.tables) - 1
        db = s._storage.dbs[f"t{last:02d}"]
        with s._storage.read() as txn:  # tamper below the API, as a bad disk or a bug would
            victim = next(iter(txn.cursor(db=db).iternext(keys=True, values=False)))
        s._storage.write(lambda txn: txn.delete(victim, db=db))
        problems = s.verify()
        assert problems and any(p.startswith(f"table {last} ") for p in problems)
        assert any(p.startswith(f"table {last} ") for p in s.verify(deep=False))


def test_documents_equal_get_of_every_key(tmp_path):
    """documents() gives get() of every key, in id order, over records and bulk loads."""
    with filled(tmp_path / "s") as s:
        docs = list(s.documents())
        assert [d.key for d in docs] == list(s)
        assert docs == [s.get(d.key) for d in docs]
        assert [d.id for d in docs] == sorted(d.id for d in docs)
        assert s.get("v0").canonical == "k0" and any(d.key == "v0" and d.canonical == "k0" for d in docs)


def test_fingerprints_equal_brute_force(tmp_path):
    """fingerprints() holds exactly the indexed live documents with their fingerprints."""
    with filled(tmp_path / "s") as s:
        fps, ids = s.fingerprints()
        assert fps.dtype == np.uint64 and ids.dtype == np.uint64
        want = sorted((d.id, d.fingerprint) for d in s.documents() if not d.short)
        assert sorted(zip(ids.tolist(), fps.tolist())) == want


def test_stats_is_deterministic_and_counts(tmp_path):
    """stats() counts the documents, is the same for the same seed, and describes every table."""
    with filled(tmp_path / "s") as s:
        a = s.stats(sample=50, seed=1)
        assert a == s.stats(sample=50, seed=1)
        assert a["documents"] == len(s) and a["indexed"] == len(s.fingerprints()[0]) and a["sample"] == 50
        assert len(a["tables"]) == len(s.design.tables)


def test_info_has_lmdb_figures(tmp_path):
    """info() adds LMDB's figures: every database's entries, pages, map use and readers."""
    with filled(tmp_path / "s") as s:
        lm = s.info()["lmdb"]
        assert set(lm["databases"]) >= {"meta", "docs", "keys", "t00"}
        assert lm["databases"]["docs"]["entries"] > 0 and 0 < lm["map_used"] <= 1
        assert lm["page_size"] > 0 and isinstance(lm["readers"], list)


def test_structure_problems(tmp_path):
    """The file's structural check: [] for a sound store, None where there is no store file."""
    filled(tmp_path / "s").close()
    assert structure_problems(str(tmp_path / "s")) == []
    assert structure_problems(str(tmp_path / "none")) is None


def test_pipeline_mismatch_names_each_field():
    """Pipeline.mismatch names every differing field with both values."""
    a, b = fpstore.Pipeline(), fpstore.Pipeline(shingle=5)
    assert a.mismatch(a) == ""
    assert a.mismatch(b) == f"shingle: store has {a.config['shingle']!r}, given 5"


def test_open_with_another_pipeline_names_the_field(tmp_path):
    """Opening with another pipeline raises with the mismatch description."""
    fpstore.open(tmp_path / "s").close()
    with pytest.raises(fpstore.errors.PipelineMismatchError, match="shingle: store has"):
        fpstore.open(tmp_path / "s", pipeline=fpstore.Pipeline(shingle=5))


def test_copy_is_a_consistent_store_of_its_own_and_refuses_a_non_empty_directory(tmp_path):
    """Store.copy writes a snapshot that opens as a store with the same answers; a directory holding anything else is refused."""
    import numpy as np
    import pytest

    import fpstore
    from fpstore.errors import FpstoreError

    with fpstore.open(tmp_path / "s", k=5) as s:
        s.add_many([f"k{i}" for i in range(50)], fingerprints=np.arange(50, dtype=np.uint64), pipeline_id=s.pipeline.id)
        size = s.copy(tmp_path / "copy")
        assert size > 0
        (tmp_path / "busy").mkdir()
        (tmp_path / "busy" / "notes.txt").write_text("mine")
        with pytest.raises(FpstoreError):
            s.copy(tmp_path / "busy")
        assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"
    with fpstore.open(tmp_path / "copy", readonly=True) as c:
        assert len(c) == 50 and c.get("k7").fingerprint == 7


def test_a_reader_answers_as_the_store_does_in_one_snapshot(tmp_path):
    """store.reader(): the same answers as the store's own calls, all from the snapshot taken when
    its block began (a write committed meanwhile is not seen), and nothing outside its block."""
    import numpy as np

    from fpstore.errors import ClosedError

    rng = np.random.default_rng(2)
    fps = rng.integers(0, 2**63, 300, dtype=np.uint64)
    with fpstore.open(tmp_path / "s", k=3) as store:
        pid = store.pipeline.id
        store.add_many([f"k{i}" for i in range(300)], fingerprints=fps, pipeline_id=pid)
        store.add("page", text="a page of words " * 20)
        queries = np.concatenate([fps[:50] ^ np.uint64(1), rng.integers(0, 2**63, 50, dtype=np.uint64)])
        with store.reader() as r:
            for q in queries.tolist():
                assert r.query(fingerprint=q, pipeline_id=pid) == store.query(fingerprint=q, pipeline_id=pid)
            assert r.query(text="a page of words " * 20) == store.query(text="a page of words " * 20)
            got, want = r.query_many(queries, pipeline_id=pid), store.query_many(queries, pipeline_id=pid)
            assert all((a == b).all() for a, b in zip(got, want))
            assert r.keys_of(got[1][:5]) == store.keys_of(want[1][:5])
            assert r.get("k7") == store.get("k7") and r.get("missing", 0) == 0
            store.add("late", fingerprint=int(fps[0]), pipeline_id=pid)  # committed after the snapshot
            assert [m.key for m in r.query(fingerprint=int(fps[0]), pipeline_id=pid, k=0)] == ["k0"]
            assert r.get("late") is None
        assert sorted(m.key for m in store.query(fingerprint=int(fps[0]), pipeline_id=pid, k=0)) == ["k0", "late"]
        with pytest.raises(ClosedError):
            r.query(fingerprint=1, pipeline_id=pid)
    with pytest.raises(ClosedError):
        store.reader()

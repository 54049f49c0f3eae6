"""A store whose pipeline has a verification sketch: every write path keeps each document's
sketch, matches carry the similarity it estimates, and ``threshold=`` verifies candidates; each
answer equals a brute-force evaluation over the pipeline's own sketches."""

from __future__ import annotations

import lmdb
import msgpack
import numpy as np
import pytest

import fpstore
from fpstore.errors import CorruptionError, FormatError, InputError
from fpstore.fingerprint.pipeline import sketch_similarity
from fpstore.store.header import H_HEADER
from fpstore.store.sketches import block_size
from tests.support.corpora import token_variants, unrelated_texts

PIPE = fpstore.Pipeline(sketch_bits=256, html="off")
K = 8


def _family(rng: np.random.Generator, n: int, edits_max: int) -> list[str]:
    """n variants of one 300-token text, each with up to ``edits_max`` replaced tokens."""
    return token_variants(rng, n, edits_max)


def _corpus(seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    texts: list[str] = []
    for _ in range(6):
        texts += _family(rng, 12, 40)
    return texts + unrelated_texts(rng, 10, 200)


def _fill(store: fpstore.Store, texts: list[str]) -> list[str]:
    """Every write path: add, add_many, add_each and bulk_load (a quarter each); returns the keys."""
    keys = [f"d{i}" for i in range(len(texts))]
    q = len(texts) // 4
    for key, t in zip(keys[:q], texts[:q]):
        store.add(key, text=t)
    store.add_many(keys[q : 2 * q], texts=texts[q : 2 * q])
    store.add_each(keys[2 * q : 3 * q], texts=texts[2 * q : 3 * q])
    store.bulk_load(keys[3 * q :], PIPE.signatures(texts[3 * q :]))
    return keys


@pytest.fixture
def filled(tmp_path):
    texts = _corpus()
    with fpstore.open(tmp_path / "s", pipeline=PIPE, k=K) as store:
        keys = _fill(store, texts)
        yield store, texts, keys


def test_query_similarities_and_threshold_equal_brute_force(filled):
    store, texts, keys = filled
    sigs = PIPE.signatures(texts)
    assert sigs.sketches is not None
    for qi in range(0, len(texts), 5):
        d = np.bitwise_count(sigs.values ^ sigs.values[qi])
        sims = sketch_similarity(sigs.sketches, sigs.sketches[qi][None, :])
        got = store.query(text=texts[qi])
        assert {m.key for m in got} == {keys[i] for i in np.flatnonzero(d <= K)}
        for m in got:
            i = keys.index(m.key)
            assert m.similarity == pytest.approx(float(sims[i]))
        for theta in (0.5, 0.8, 0.95):
            kept = store.query(text=texts[qi], threshold=theta)
            want = {keys[i] for i in np.flatnonzero((d <= K) & (sims >= theta))}
            assert {m.key for m in kept} == want
            assert all(m.similarity >= theta for m in kept)


def test_add_verdicts_carry_similarities(tmp_path):
    texts = _family(np.random.default_rng(1), 12, 8)  # close variants: each within k of the others
    with fpstore.open(tmp_path / "s", pipeline=PIPE, k=K) as store:
        store.add_many([f"a{i}" for i in range(9)], texts=texts[:9])
        one = store.add("x", text=texts[9])
        each = store.add_each(["y", "z"], texts=texts[10:12])
        sigs = PIPE.signatures(texts)
        assert sigs.sketches is not None
        for result, qi in ((one, 9), (each[0], 10), (each[1], 11)):
            assert result.near_duplicates, "the family's variants lie within k"
            for m in result.near_duplicates:
                i = {"x": 9, "y": 10}.get(str(m.key)) or int(str(m.key)[1:])
                assert m.similarity == pytest.approx(float(sketch_similarity(sigs.sketches[i], sigs.sketches[qi])))


def test_writes_without_sketches_are_refused_and_change_nothing(tmp_path):
    with fpstore.open(tmp_path / "s", pipeline=PIPE, k=K) as store:
        bare = fpstore.Fingerprints(np.array([1, 2], dtype=np.uint64), PIPE.id)
        narrow = fpstore.Pipeline(sketch_bits=128, html="off").signatures(["a b c d", "e f g h"])
        for call in (
            lambda: store.add("a", fingerprint=5, pipeline_id=PIPE.id),
            lambda: store.add_many(["a", "b"], fingerprints=bare),
            lambda: store.bulk_load(["a", "b"], bare),
            lambda: store.add_many(["a", "b"], fingerprints=fpstore.Fingerprints(narrow.values, PIPE.id, sketches=narrow.sketches)),
        ):
            with pytest.raises(InputError, match="sketch"):
                call()
        assert len(store) == 0
        with pytest.raises(InputError, match="threshold"):
            store.query(fingerprint=5, pipeline_id=PIPE.id, threshold=0.8)
        with pytest.raises(InputError, match="threshold"):
            store.query(text="a b c", threshold=1.5)


def test_a_store_without_a_sketch_lists_no_sketch_feature_and_refuses_a_threshold(tmp_path):
    with fpstore.open(tmp_path / "s", pipeline=fpstore.Pipeline(html="off", sketch_bits=0)) as store:
        store.add("a", text="one two three four five six")
        assert "sketch" not in store.header["features"]
        assert store.query(text="one two three four five six")[0].similarity is None
        with pytest.raises(InputError, match="threshold"):
            store.query(text="one two three four five six", threshold=0.5)


def test_the_sketch_is_a_required_feature_and_survives_reopening(tmp_path):
    texts = _corpus(2)[:20]
    with fpstore.open(tmp_path / "s", pipeline=PIPE, k=K) as store:
        store.add_many([f"d{i}" for i in range(20)], texts=texts)
        before = store.query(text=texts[0])
        assert sorted(store.header["features"]) == ["int_key_column", "sketch"]
    with fpstore.open(tmp_path / "s") as store:
        assert store.pipeline == PIPE and store.query(text=texts[0]) == before
    # A header that drops the feature (a tool that rewrote it) is refused, not half-read.
    env = lmdb.open(str(tmp_path / "s"), max_dbs=64)
    with env.begin(write=True) as txn:
        meta = env.open_db(b"meta", txn=txn)
        header = msgpack.unpackb(txn.get(H_HEADER, db=meta), raw=False)
        header["features"] = []
        txn.put(H_HEADER, msgpack.packb(header, use_bin_type=True), db=meta)
    env.close()
    with pytest.raises(FormatError, match="features"):
        fpstore.open(tmp_path / "s")


def test_a_damaged_sketch_block_is_a_corruption_error(tmp_path):
    texts = _corpus(3)[:12]
    with fpstore.open(tmp_path / "s", pipeline=PIPE, k=K) as store:
        store.add_many([f"d{i}" for i in range(12)], texts=texts)
    env = lmdb.open(str(tmp_path / "s"), max_dbs=64)
    with env.begin(write=True) as txn:
        db = env.open_db(b"sketches", txn=txn)
        key, value = next(iter(txn.cursor(db=db)))
        txn.put(key, bytes(value)[:-8], db=db)
    env.close()
    with fpstore.open(tmp_path / "s", readonly=True) as store, pytest.raises(CorruptionError, match="sketch block"):
        store.query(text=texts[0])


def test_sketches_span_blocks_and_replacements(tmp_path):
    """Ids cross several blocks, and a replaced key's new document gets its own sketch."""
    BLOCK = block_size(PIPE.sketch_bits // 64)
    rng = np.random.default_rng(4)
    texts = _family(rng, 3 * BLOCK + 5, 60)
    with fpstore.open(tmp_path / "s", pipeline=PIPE, k=K) as store:
        store.add_many([f"d{i}" for i in range(BLOCK + 3)], texts=texts[: BLOCK + 3])
        store.bulk_load([f"d{i}" for i in range(BLOCK + 3, len(texts))], PIPE.signatures(texts[BLOCK + 3 :]))
        store.add("d0", text=texts[-1])  # replaces d0: same text as the last document
        got = {m.key: m.similarity for m in store.query(text=texts[-1])}
        assert got["d0"] == 1.0 and got[f"d{len(texts) - 1}"] == 1.0


@pytest.mark.parametrize("k", [K, K + 2])  # streamed from the tables, and the in-memory join above the design
def test_pairs_and_clusters_under_a_threshold_equal_brute_force(filled, k):
    store, texts, keys = filled
    sigs = PIPE.signatures(texts)
    assert sigs.sketches is not None
    ids = np.array([store.get(key).id for key in keys])
    i, j = np.triu_indices(len(texts), 1)
    d = np.bitwise_count(sigs.values[i] ^ sigs.values[j])
    sims = sketch_similarity(sigs.sketches[i], sigs.sketches[j])
    for theta in (0.6, 0.85):
        a, b, dist = store.near_duplicate_pairs(k, threshold=theta)
        want = {(min(ids[x], ids[y]), max(ids[x], ids[y])) for x, y in zip(i[(d <= k) & (sims >= theta)], j[(d <= k) & (sims >= theta)])}
        assert set(zip(a.tolist(), b.tolist())) == want
        pairs_all = store.near_duplicate_pairs(k)
        assert len(a) <= len(pairs_all[0])
        clustered = {frozenset(c.keys) for c in store.clusters(k, threshold=theta)}
        assert all(len(c) >= 2 for c in clustered)
        assert sum(len(c) for c in clustered) <= len({x for pair in want for x in pair})
    with pytest.raises(InputError, match="threshold"):
        store.near_duplicate_pairs(k, threshold=-0.1)


def test_pairs_threshold_needs_a_sketch(tmp_path):
    with fpstore.open(tmp_path / "s", pipeline=fpstore.Pipeline(html="off", sketch_bits=0)) as store, pytest.raises(InputError, match="sketch"):
        store.near_duplicate_pairs(threshold=0.8)


def test_sketches_survive_file_compaction_and_redesign(filled):
    store, texts, keys = filled
    before = store.query(text=texts[3], threshold=0.7)
    store.compact_file()
    assert store.query(text=texts[3], threshold=0.7) == before
    store.redesign(6)
    assert store.query(text=texts[3], threshold=0.7) == [m for m in before if m.distance <= 6]


def test_query_by_fingerprint_and_sketch_and_query_many_under_a_threshold(filled):
    store, texts, keys = filled
    sigs = PIPE.signatures(texts)
    assert sigs.sketches is not None
    for qi in (0, 13, 40):
        by_text = store.query(text=texts[qi], threshold=0.75)
        by_fp = store.query(fingerprint=int(sigs.values[qi]), pipeline_id=PIPE.id, sketch=sigs.sketches[qi], threshold=0.75)
        by_list = store.query(fingerprint=int(sigs.values[qi]), pipeline_id=PIPE.id, sketch=[int(w) for w in sigs.sketches[qi]])
        assert by_fp == by_text and {m.key for m in by_text} <= {m.key for m in by_list}
    q, ids, d = store.query_many(sigs, threshold=0.75)
    all_q, all_ids, _ = store.query_many(sigs)
    index_of = {store.get(key).id: i for i, key in enumerate(keys)}
    sims = sketch_similarity(sigs.sketches[all_q], sigs.sketches[[index_of[i] for i in all_ids.tolist()]])
    want = set(zip(all_q[sims >= 0.75].tolist(), all_ids[sims >= 0.75].tolist()))
    assert set(zip(q.tolist(), ids.tolist())) == want and len(want) < len(all_q)
    for bad in ([1, 2], np.zeros(5, np.uint64), ["x"] * 4, [-1, 0, 0, 0]):
        with pytest.raises(InputError, match="sketch"):
            store.query(fingerprint=1, pipeline_id=PIPE.id, sketch=bad)
    with pytest.raises(InputError, match="sketch"):
        store.query(text=texts[0], sketch=sigs.sketches[0])
    with pytest.raises(InputError, match="threshold"):
        store.query_many(fpstore.Fingerprints(sigs.values, PIPE.id), threshold=0.8)
    narrow = fpstore.Fingerprints(sigs.values, PIPE.id, sketches=sigs.sketches[:, :2].copy())
    with pytest.raises(InputError, match="bits"):
        store.query_many(narrow, threshold=0.8)


def test_a_store_opened_with_a_threshold_verifies_every_answer(tmp_path):
    """open(threshold=) picks the sketch pipeline and the candidate radius, records the threshold,
    and add verdicts, queries, pairs and clusters follow it; each equals brute force."""
    from fpstore.store.sketches import CANDIDATE_K, DEFAULT_SKETCH_BITS

    texts = _corpus(5)
    with fpstore.open(tmp_path / "s", threshold=0.8) as store:
        assert store.pipeline.sketch_bits == DEFAULT_SKETCH_BITS and store.k == CANDIDATE_K and store.threshold == 0.8
        pipe, k = store.pipeline, store.k
        sigs = pipe.signatures(texts)
        assert sigs.sketches is not None
        results = [store.add(f"a{i}", text=t) for i, t in enumerate(texts[:30])]
        results += store.add_each([f"a{i}" for i in range(30, len(texts))], texts=texts[30:])
        for i, r in enumerate(results):  # each verdict: the earlier documents within k and at or above 0.8
            d = np.bitwise_count(sigs.values[:i] ^ sigs.values[i])
            sims = sketch_similarity(sigs.sketches[:i], sigs.sketches[i][None, :])
            want = {f"a{j}" for j in np.flatnonzero((d <= k) & (sims >= 0.8))}
            assert {m.key for m in r.near_duplicates} == want, i
            assert all(m.similarity >= 0.8 for m in r.near_duplicates)
        unverified = store.query(text=texts[0], threshold=0)
        verified_ = store.query(text=texts[0])
        assert {m.key for m in verified_} < {m.key for m in unverified}
        a, _, _ = store.near_duplicate_pairs()
        a0, _, _ = store.near_duplicate_pairs(threshold=0)
        assert len(a) < len(a0)
        with pytest.raises(InputError, match="threshold"):
            store.query(fingerprint=int(sigs.values[0]), pipeline_id=pipe.id)  # no sketch to verify with
        assert store.query(fingerprint=int(sigs.values[0]), pipeline_id=pipe.id, threshold=0)
    with fpstore.open(tmp_path / "s") as store:
        assert store.threshold == 0.8 and store.query(text=texts[0]) == verified_
    with fpstore.open(tmp_path / "s", threshold=0.5) as store:
        assert store.threshold == 0.5
    with pytest.raises(InputError, match="sketch"):
        fpstore.open(tmp_path / "t", threshold=0.8, pipeline=fpstore.Pipeline(sketch_bits=0))
    assert not (tmp_path / "t").exists() or not any((tmp_path / "t").iterdir())
    with pytest.raises(InputError, match="threshold"):
        fpstore.open(tmp_path / "u", threshold=2)


def test_explain_reports_the_sketch_estimate_and_the_threshold(tmp_path):
    texts = _family(np.random.default_rng(6), 2, 60)
    with fpstore.open(tmp_path / "s", threshold=0.95) as store:
        store.add_many(["a", "b"], texts=texts)
        sigs = store.pipeline.signatures(texts)
        assert sigs.sketches is not None
        want = float(sketch_similarity(sigs.sketches[0], sigs.sketches[1]))
        found = store.explain("a", "b")
        assert found.sketch_similarity == pytest.approx(want) and found.threshold == 0.95
        d = int(np.bitwise_count(sigs.values[0] ^ sigs.values[1]))
        assert found.paired == (d <= store.k and want >= 0.95)
        assert found.paired == bool(len(store.near_duplicate_pairs()[0]))
    with fpstore.open(tmp_path / "s", threshold=0.0) as store:
        assert store.explain("a", "b").paired == (d <= store.k)


def test_exhaustive_under_a_threshold_applies_the_rule_to_every_document(filled):
    store, texts, keys = filled
    sigs = PIPE.signatures(texts)
    assert sigs.sketches is not None
    for qi in (2, 50):
        sims = sketch_similarity(sigs.sketches, sigs.sketches[qi][None, :])
        got = store.query(text=texts[qi], k=64, exhaustive=True, threshold=0.6)
        assert {m.key for m in got} == {keys[i] for i in np.flatnonzero(sims >= 0.6)}


def test_redesign_to_a_threshold(tmp_path):
    """redesign(threshold=) records the threshold (with the candidate radius when no k is given)
    in the design's transaction; a store without sketches refuses it and is left as it was."""
    from fpstore.store.sketches import CANDIDATE_K

    texts = _corpus(7)
    with fpstore.open(tmp_path / "s", pipeline=PIPE, k=5) as store:
        store.add_many([f"d{i}" for i in range(len(texts))], texts=texts)
        loose = store.query(text=texts[0])
        result = store.redesign(threshold=0.85)
        assert result["k"] == CANDIDATE_K and result["threshold"] == 0.85 and store.threshold == 0.85
        strict = store.query(text=texts[0])
        assert all(m.similarity >= 0.85 for m in strict)
        assert {m.key for m in strict if m.distance <= 5} <= {m.key for m in loose}
        assert store.redesign(CANDIDATE_K, threshold=0.7)["design_before"] == store.design.name  # no tables rebuilt
    with fpstore.open(tmp_path / "s") as store:
        assert store.threshold == 0.7 and store.k == CANDIDATE_K
    with fpstore.open(tmp_path / "plain", pipeline=fpstore.Pipeline(html="off", sketch_bits=0)) as store:
        store.add("a", text="one two three four five six seven")
        with pytest.raises(InputError, match="sketch"):
            store.redesign(threshold=0.8)
        with pytest.raises(InputError, match="k=, threshold="):
            store.redesign()
        assert store.threshold is None and store.header.get("threshold") is None


def test_verify_finds_missing_and_damaged_sketches(tmp_path):
    texts = _corpus(8)
    with fpstore.open(tmp_path / "s", pipeline=PIPE, k=K) as store:
        store.add_many([f"d{i}" for i in range(len(texts))], texts=texts)
        assert store.verify() == []
        victim = store.get("d3").id
    block = victim // block_size(PIPE.sketch_bits // 64)
    env = lmdb.open(str(tmp_path / "s"), max_dbs=64)
    with env.begin(write=True) as txn:
        db = env.open_db(b"sketches", txn=txn)
        key = block.to_bytes(8, "big")
        value = bytearray(txn.get(key, db=db))
        slot = victim % block_size(PIPE.sketch_bits // 64)
        value[slot * 32 : slot * 32 + 32] = bytes(32)
        txn.put(key, bytes(value), db=db)
    env.close()
    with fpstore.open(tmp_path / "s", readonly=True) as store:
        problems = store.verify()
        assert any("no sketch" in p and f"id {victim}" in p for p in problems), problems
    env = lmdb.open(str(tmp_path / "s"), max_dbs=64)
    with env.begin(write=True) as txn:
        txn.delete(block.to_bytes(8, "big"), db=env.open_db(b"sketches", txn=txn))
    env.close()
    with fpstore.open(tmp_path / "s", readonly=True) as store:
        assert any("missing" in p for p in store.verify())


@pytest.mark.parametrize("words", [1, 4, 8])
def test_sketch_column_reads_back_what_it_holds_few_or_many_ids_per_block(tmp_path, words):
    """Sketches.get of ids in any order, with repeats, a few per block (each id's bytes copied
    alone) and many per block (whole blocks copied): what put wrote; a missing block and a block of
    the wrong length are CorruptionErrors naming them."""
    from fpstore.store.sketches import Sketches

    rng = np.random.default_rng(words)
    env = lmdb.open(str(tmp_path / "col"), max_dbs=4, map_size=1 << 26)
    db = env.open_db(b"sketches")
    col = Sketches(db, words)
    ids = np.arange(1, 20 * col.block, dtype=np.int64)
    values = rng.integers(0, 2**64 - 1, (len(ids), words), dtype=np.uint64, endpoint=True)
    with env.begin(write=True, buffers=True) as txn:
        col.put(txn, ids, values)
    with env.begin(buffers=True) as txn:
        for pick in (rng.choice(ids, 15), rng.choice(ids, 5000), ids[::-1], np.repeat(ids[:3], 40)):
            assert np.array_equal(col.get(txn, pick), values[pick - 1])
    with env.begin(write=True) as txn:
        txn.delete((3).to_bytes(8, "big"), db=db)
        txn.put((5).to_bytes(8, "big"), b"\0" * 16, db=db)
    with env.begin(buffers=True) as txn:
        with pytest.raises(CorruptionError, match="block 3"):
            col.get(txn, np.array([1, 3 * col.block + 2]))
        with pytest.raises(CorruptionError, match="sketch block 5 holds 16 bytes"):
            col.get(txn, np.array([5 * col.block]))
    env.close()


# -- the defaults: a new store verifies ------------------------------------------------------------


def test_a_new_store_verifies_by_default_and_k_alone_keeps_no_sketch(tmp_path):
    """``fpstore.open(path)`` makes a verifying store (``Pipeline()`` with its 512-bit sketch,
    threshold 0.8, candidate radius 7) whose answers equal the brute-force rule over its sketches;
    a ``k`` without a threshold makes a store that answers within k bits and keeps no sketch, and
    a store made so keeps answering so when opened without arguments."""
    from fpstore.store.sketches import CANDIDATE_K, DEFAULT_THRESHOLD

    texts = _corpus(3)
    keys = [f"d{i}" for i in range(len(texts))]
    with fpstore.open(tmp_path / "default") as store:
        assert (store.pipeline, store.threshold, store.k) == (fpstore.Pipeline(), DEFAULT_THRESHOLD, CANDIDATE_K)
        assert "sketch" in store.header["features"]
        store.add_many(keys, texts=texts)
        sigs = store.pipeline.signatures(texts)
        for i in range(0, len(texts), 7):
            d = np.bitwise_count(sigs.values ^ sigs.values[i])
            sim = np.array([sketch_similarity(sigs.sketches[i], s) for s in sigs.sketches])
            want = {keys[j] for j in np.flatnonzero((d <= CANDIDATE_K) & (sim >= DEFAULT_THRESHOLD))}
            assert {m.key for m in store.query(text=texts[i])} == want
    with fpstore.open(tmp_path / "default") as store:  # reopened: the recorded threshold
        assert store.threshold == DEFAULT_THRESHOLD
    with fpstore.open(tmp_path / "plain", k=5) as store:
        assert (store.pipeline, store.threshold, store.k) == (fpstore.Pipeline(sketch_bits=0), None, 5)
        assert "sketch" not in store.header["features"]
        store.add("bare", fingerprint=5, pipeline_id=store.pipeline.id)
    with fpstore.open(tmp_path / "plain") as store:  # a store without a sketch keeps working as it did
        assert (store.threshold, store.k) == (None, 5)
        assert [m.key for m in store.query(fingerprint=4, pipeline_id=store.pipeline.id)] == ["bare"]
    with fpstore.open(tmp_path / "shingle2", pipeline=fpstore.Pipeline(shingle=2)) as store:  # a given sketching pipeline
        assert (store.threshold, store.k) == (DEFAULT_THRESHOLD, CANDIDATE_K)
    with fpstore.open(tmp_path / "shingle2-k", pipeline=fpstore.Pipeline(shingle=2), k=6) as store:  # kept, not verified
        assert (store.threshold, store.k, store.pipeline.sketch_bits) == (None, 6, 512)


def test_a_bare_fingerprint_in_a_default_store_says_how_to_make_a_store_that_takes_it(tmp_path):
    with fpstore.open(tmp_path / "s") as store, pytest.raises(InputError, match=r"fpstore.open\(path, k=5\)"):
        store.add("a", fingerprint=5, pipeline_id=store.pipeline.id)


def test_a_store_without_a_sketch_takes_the_fingerprints_of_its_pipeline_with_one(tmp_path):
    """A sketch leaves the 64-bit fingerprint as it is, so ``Pipeline()``'s fingerprints (with their
    sketches) enter a store of ``Pipeline(sketch_bits=0)``, which drops the sketches; fingerprints of
    another pipeline are still refused, and a store with a sketch still refuses them without one."""
    texts = _corpus(4)[:20]
    sketched = fpstore.Pipeline().signatures(texts)
    with fpstore.open(tmp_path / "plain", k=5) as store:
        store.add_many([f"a{i}" for i in range(20)], fingerprints=sketched)
        store.bulk_load([f"b{i}" for i in range(20)], sketched)
        store.add("c", fingerprint=int(sketched.values[0]), pipeline_id=sketched.pipeline_id)
        assert [m.distance for m in store.query(fingerprint=int(sketched.values[0]), pipeline_id=sketched.pipeline_id)][:3] == [0, 0, 0]
        assert [store.get(f"a{i}").fingerprint for i in range(20)] == sketched.values.tolist()
        with pytest.raises(fpstore.errors.PipelineMismatchError):
            store.add_many(["x"], fingerprints=fpstore.Pipeline(shingle=2).signatures(texts[:1]))
    with fpstore.open(tmp_path / "v") as store, pytest.raises(fpstore.errors.PipelineMismatchError, match="without its sketch"):
        store.add_many(["x"], fingerprints=fpstore.Pipeline(sketch_bits=0).signatures(texts[:1]))


def test_a_store_that_keeps_sketches_without_verifying_refuses_a_bare_fingerprint_in_its_own_words(tmp_path):
    """A store made with a sketching pipeline and k= keeps sketches but answers within k bits: its
    refusal of a bare fingerprint said it "verifies matches" and advised making it the way it was made."""
    with fpstore.open(tmp_path / "s", pipeline=fpstore.Pipeline(sketch_bits=256), k=5) as store:
        assert store.threshold is None
        with pytest.raises(InputError) as exc:
            store.add("a", fingerprint=5, pipeline_id=store.pipeline.id)
    message = str(exc.value)
    assert "verifies" not in message and "keeps a 256-bit verification sketch" in message and "no sketch" in message, message


def test_a_threshold_on_a_store_without_a_sketch_names_the_store_as_what_lacks_it(tmp_path):
    """It said "needs a verification sketch on both sides ... and a query with text=" to a query
    that gave the text."""
    with fpstore.open(tmp_path / "s", k=5) as store:
        store.add("a", text="one two three four five six seven")
        with pytest.raises(InputError) as exc:
            store.query(text="one two three four five six seven", threshold=0.8)
    assert "this store keeps none" in str(exc.value) and "text=" not in str(exc.value), str(exc.value)

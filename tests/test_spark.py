"""fpstore.spark on Spark local[2] against numpy brute force (about 20,000 fingerprints).

One Spark session for the module (shuffle partitions 4, UI off). Skipped only when PySpark (or
pyarrow/pandas, which mapInArrow needs) is not importable: CI installs them with the test extra.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

pytest.importorskip("pyspark", reason="PySpark is not installed (pip install 'fpstore[spark]')")
pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install 'fpstore[spark]')")
pytest.importorskip("pandas", reason="pandas is not installed (pip install 'fpstore[spark]')")

import fpstore  # noqa: E402
from fpstore import spark as fs  # noqa: E402
from fpstore.errors import InputError, PipelineMismatchError  # noqa: E402
from fpstore.spark.join import _heavy_buckets  # noqa: E402
from fpstore.spark.plans import JoinPlan, sub_tables  # noqa: E402
from tests.support.corpora import token_variants, unrelated_texts  # noqa: E402

#: A local Spark session takes tens of seconds to start: the slow tier (docs/development.md).
pytestmark = pytest.mark.slow

K = 3
M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    root = os.path.dirname(os.path.dirname(os.path.abspath(fpstore.__file__)))
    session = (
        SparkSession.builder.master("local[2]")
        .appName("fpstore-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "5000")
        # Workers import fpstore from this tree even when it is not installed.
        .config("spark.executorEnv.PYTHONPATH", root)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _flip(fps: np.ndarray, nbits: np.ndarray, rng: np.random.Generator, low: int = 64) -> np.ndarray:
    """Each fingerprint with ``nbits[i]`` distinct random bits (below bit ``low``) flipped."""
    out = fps.copy()
    for i, nb in enumerate(nbits.tolist()):
        for b in rng.choice(low, size=nb, replace=False).tolist():
            out[i] ^= np.uint64(1) << np.uint64(b)
    return out


@pytest.fixture(scope="module")
def corpus():
    """~20,000 fingerprints: random ones, planted near-duplicates at 1..k+1 bits, identical
    copies (groups up to 5), and a dense cluster sharing its top 36 bits (oversized buckets)."""
    rng = np.random.default_rng(8)
    rand = rng.integers(0, 2**64, size=14_000, dtype=np.uint64)
    bases = rand[rng.choice(len(rand), 2_000, replace=False)]
    near = _flip(bases, rng.integers(1, K + 2, size=len(bases)), rng)
    top = rng.integers(0, 2**64, dtype=np.uint64) & ~np.uint64((1 << 28) - 1)
    cluster = top | rng.integers(0, 1 << 28, size=600, dtype=np.uint64)
    cluster_near = _flip(cluster[:600], rng.integers(1, K + 1, size=600), rng, low=28)
    distinct = np.concatenate([rand, near, cluster, cluster_near])
    copies = distinct[rng.choice(len(distinct), 1_500, replace=False)]
    copies = np.concatenate([copies, np.repeat(copies[:100], 3)])  # groups of 2 and of 5
    fps = np.concatenate([distinct, copies])
    fps = fps[rng.permutation(len(fps))]
    return fps


def brute_pairs(fps: np.ndarray, k: int) -> set[tuple[int, int, int]]:
    """Every (i, j, d), i < j, with popcount(fps[i] ^ fps[j]) = d <= k, by comparing all pairs."""
    out: set[tuple[int, int, int]] = set()
    n = len(fps)
    step = 512
    for lo in range(0, n, step):
        block = fps[lo : lo + step]
        d = np.bitwise_count(block[:, None] ^ fps[None, :])
        bi, bj = np.nonzero(d <= k)
        i = bi + lo
        keep = i < bj
        out.update(zip(i[keep].tolist(), bj[keep].tolist(), d[bi[keep], bj[keep]].tolist()))
    return out


def brute_queries(queries: np.ndarray, stored: np.ndarray, k: int) -> set[tuple[int, int, int]]:
    """Every (query index, stored index, d) with d <= k."""
    d = np.bitwise_count(queries[:, None] ^ stored[None, :])
    qi, si = np.nonzero(d <= k)
    return set(zip(qi.tolist(), si.tolist(), d[qi, si].tolist()))


@pytest.fixture(scope="module")
def expected_pairs(corpus):
    return brute_pairs(corpus, K)


@pytest.fixture(scope="module")
def queries(corpus):
    rng = np.random.default_rng(9)
    picked = corpus[rng.choice(len(corpus), 1_000, replace=False)]
    return np.concatenate(
        [
            picked[:400],  # stored fingerprints themselves
            _flip(picked[400:], rng.integers(1, K + 2, size=600), rng),  # within k, and just past it
            rng.integers(0, 2**64, size=300, dtype=np.uint64),
            picked[:50],  # repeated queries
        ]
    )


@pytest.fixture(scope="module")
def corpus_df(spark, corpus):
    # Not cached: Spark reuses the group-by exchange of near_duplicates only over uncached input.
    return fs.fingerprints_frame(spark, np.arange(len(corpus), dtype=np.int64), corpus)


def test_signed_mapping_round_trips():
    fps = np.array([0, 1, 2**63 - 1, 2**63, 2**64 - 1], dtype=np.uint64)
    signed = fs.to_signed(fps)
    assert signed.dtype == np.int64
    assert signed.tolist() == [0, 1, 2**63 - 1, -(2**63), -1]
    assert np.array_equal(fs.to_unsigned(signed), fps)
    with pytest.raises(InputError):
        fs.to_signed(signed)


def test_corpus_has_what_the_tests_need(corpus, expected_pairs):
    assert 19_000 <= len(corpus) <= 21_000
    dists = [d for _, _, d in expected_pairs]
    assert dists.count(0) > 1_500 and all(dists.count(d) > 100 for d in range(1, K + 1))


def test_missing_pyspark_names_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pyspark.sql", None)
    with pytest.raises(ImportError, match=r"fpstore\[spark\]"):
        fs.near_duplicates(None, K)


def test_heavy_buckets_are_found(spark, corpus, corpus_df):
    # The dense cluster (600 + 600 fingerprints sharing their top 36 bits) overfills the buckets of
    # the tables whose prefix lies in those bits; the sample finds them and nothing else.
    plan = JoinPlan.build(fs.spark_join_design(K, len(corpus)), K)
    heavy = _heavy_buckets(corpus_df, plan, "fp", 100, 0)
    uniq = np.unique(corpus)
    want = {}
    for t, table in enumerate(plan.design.tables):
        prefix = table.permute(uniq) >> np.uint64(64 - table.prefix_bits)
        values, counts = np.unique(prefix, return_counts=True)
        if (counts >= 100).any():
            want[t] = values[counts >= 100].tolist()
    assert want and {t: v.tolist() for t, v in heavy.items()} == want


def test_near_duplicates_equals_brute_force(spark, corpus_df, expected_pairs):
    # max_bucket=100 splits the dense cluster's buckets into sub-tables (on a 20,000-row sample:
    # 64/100 of the rows), so the split path is part of the exact answer checked here.
    rows = fs.near_duplicates(corpus_df, K, max_bucket=100).collect()
    got = [(r["id_a"], r["id_b"], r["distance"]) for r in rows]
    assert len(got) == len(set(got)), "a pair was reported twice"
    assert set(got) == expected_pairs


def test_split_of_oversized_buckets_is_exact():
    # Members of one bucket agree on the table's prefix, so a pair within k differs in <= k of the
    # remaining bits. The sub-tables add k + 1 disjoint blocks that tile those bits: one block is
    # clean (pigeonhole), and that sub-table puts the pair in one sub-bucket.
    from fpstore.index.search import join_design

    for k in (1, 3, 5):
        for n in (10**4, 10**8):
            for table in join_design(k, n).tables:
                top = table.prefix_mask()
                subs = sub_tables(table, k)
                extra = [s.prefix_mask() & ~top for s in subs]
                assert len(subs) == k + 1
                assert all(s.prefix_mask() & top == top and e for s, e in zip(subs, extra))
                assert sum(bin(e).count("1") for e in extra) == 64 - table.prefix_bits
                union = 0
                for e in extra:
                    assert union & e == 0
                    union |= e
                assert union == (2**64 - 1) & ~top


def test_near_duplicates_k0_and_small_inputs(spark):
    fps = np.array([5, 5, 7, 5, 2**64 - 1, 2**64 - 1], dtype=np.uint64)
    df = fs.fingerprints_frame(spark, [10, 11, 12, 13, 14, 15], fps)
    got = {(r["id_a"], r["id_b"], r["distance"]) for r in fs.near_duplicates(df, 0).collect()}
    assert got == {(10, 11, 0), (10, 13, 0), (11, 13, 0), (14, 15, 0)}
    got1 = {(r["id_a"], r["id_b"], r["distance"]) for r in fs.near_duplicates(df, 1, max_bucket=None).collect()}
    assert got1 == got | {(10, 12, 1), (11, 12, 1), (12, 13, 1)}


def test_query_batch_equals_brute_force(spark, corpus, corpus_df, queries):
    qdf = fs.fingerprints_frame(spark, [f"q{i}" for i in range(len(queries))], queries)
    rows = fs.query_batch(corpus_df, qdf, K).collect()
    got = [(int(r["query_id"][1:]), r["id"], r["distance"]) for r in rows]
    assert len(got) == len(set(got)), "a (query, row) pair was reported twice"
    assert set(got) == brute_queries(queries, corpus, K)


def test_fingerprint_on_executors_equals_local(spark):
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(400)]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(5, 120))).tolist()) for _ in range(300)]
    texts[7] = "<html><body><article><p>" + texts[8] + "</p></article></body></html>"
    texts[9] = "too short"
    idf = fpstore.IdfTable.build(texts)
    pipes = [fpstore.Pipeline(), fpstore.Pipeline(kind="simhash64", weighting="idf", idf=idf, html="off")]
    schema = StructType([StructField("id", LongType()), StructField("text", StringType())])
    df = spark.createDataFrame([(i, t) for i, t in enumerate(texts)] + [(len(texts), None)], schema)
    for pipe in pipes:
        rows = sorted(fs.fingerprint(df, "text", pipe).collect(), key=lambda r: r["id"])
        sigs = pipe.signatures(texts)
        assert [r["fp"] for r in rows[:-1]] == fs.to_signed(sigs.values).tolist()
        assert [r["tokens"] for r in rows[:-1]] == sigs.tokens.tolist()
        assert [r["short"] for r in rows[:-1]] == sigs.short.tolist()
        assert rows[-1]["fp"] is None and rows[-1]["text"] is None


def test_shards_answer_like_one_store(spark, tmp_path, corpus, corpus_df, queries):
    pipe = fpstore.Pipeline()
    with pytest.raises(PipelineMismatchError):
        fs.build_shards(corpus_df, tmp_path / "bad", shards=3, k=K, pipeline_id="0" * 16)
    manifest = fs.build_shards(corpus_df, tmp_path / "shards", shards=3, k=K, pipeline_id=pipe.id)
    on_disk = json.loads((tmp_path / "shards" / fs.MANIFEST).read_text())
    assert on_disk == manifest
    # k without a threshold: the shards keep the pipeline less its sketch, which takes pipe's fingerprints
    assert manifest["count"] == len(corpus) and manifest["pipeline_id"] == fpstore.Pipeline(sketch_bits=0).id
    assert len(manifest["shards"]) == 3 and all(s["count"] > 0 for s in manifest["shards"])
    for s in manifest["shards"]:  # each shard is a complete store, and holds the keys routed to it
        with fpstore.open(tmp_path / "shards" / s["path"], readonly=True, create=False) as st:
            assert len(st) == s["count"]
            some = list(st)[:50]
            assert all(fs.shard_of(key, 3) == s["shard"] for key in some)

    with fs.ShardSet(tmp_path / "shards") as shards:
        assert len(shards) == len(corpus)
        q, gid, d = shards.query_many(queries, pipeline_id=pipe.id)
        keys = shards.keys_of(gid)
        got = list(zip(q.tolist(), keys, d.tolist()))
        assert len(got) == len(set(got))
        assert set(got) == brute_queries(queries, corpus, K)
        # One query by fingerprint: merged over the shards, sorted by distance then key.
        fp = int(queries[0])
        want = sorted((int(np.bitwise_count(np.uint64(fp) ^ f)), i) for i, f in enumerate(corpus.tolist()) if int(np.bitwise_count(np.uint64(fp) ^ f)) <= K)
        matches = shards.query(fingerprint=fp, pipeline_id=pipe.id)
        assert [(m.distance, m.key) for m in matches] == want


# -- verification sketches ------------------------------------------------------------------------------------

SKETCH_PIPE = fpstore.Pipeline(sketch_bits=256, html="off")
SKETCH_K = 8
THETA = 0.7


def _sketch_texts() -> list[str]:
    """Families of near-duplicate 200-token texts (up to 15 tokens replaced) and unrelated texts."""
    rng = np.random.default_rng(17)
    texts = [t for _ in range(8) for t in token_variants(rng, 10, 15, length=200)]
    return texts + unrelated_texts(rng, 40, 150)


def test_sketches_on_spark_equal_brute_force(spark, tmp_path):
    """A pipeline with a sketch: fingerprint adds the sketch column (the local pipeline's, null for
    a null text); near_duplicates and query_batch with threshold keep exactly the pairs within k
    whose sketches reach it, with their similarities; build_shards keeps the sketches, so the shard
    set's matches carry one store's similarities; without the sketch column each refuses."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from fpstore.fingerprint.pipeline import sketch_similarity

    texts = _sketch_texts()
    n = len(texts)
    schema = StructType([StructField("id", LongType()), StructField("text", StringType())])
    df = spark.createDataFrame([(i, t) for i, t in enumerate(texts)] + [(n, None)], schema)
    rows_df = fs.fingerprint(df, "text", SKETCH_PIPE)
    rows = sorted(rows_df.collect(), key=lambda r: r["id"])
    sigs = SKETCH_PIPE.signatures(texts)
    assert [bytes(r["sketch"]) for r in rows[:-1]] == [s.astype("<u8").tobytes() for s in sigs.sketches]
    assert rows[-1]["sketch"] is None and rows[-1]["fp"] is None

    fps, sk = sigs.values, sigs.sketches
    dist = np.bitwise_count(fps[:, None] ^ fps[None, :])
    sim = sketch_similarity(sk[:, None, :], sk[None, :, :])
    i, j = np.nonzero((dist <= SKETCH_K) & (sim >= THETA) & np.triu(np.ones((n, n), bool), 1))
    want = {(int(a), int(b), int(dist[a, b]), float(sim[a, b])) for a, b in zip(i, j)}
    assert len(want) > 50 and np.count_nonzero((dist <= SKETCH_K) & (sim < THETA)) > 0  # the threshold drops some
    fps_df = rows_df.select("id", "fp", "sketch")
    got = fs.near_duplicates(fps_df, SKETCH_K, threshold=THETA).collect()
    assert {(r["id_a"], r["id_b"], r["distance"], r["similarity"]) for r in got} == want and len(got) == len(want)

    queries = fps_df.where("id < 20")
    qi, si = np.nonzero((dist[:20] <= SKETCH_K) & (sim[:20] >= THETA))
    want_q = {(int(a), int(b), int(dist[a, b]), float(sim[a, b])) for a, b in zip(qi, si)}
    got_q = fs.query_batch(fps_df, queries, SKETCH_K, threshold=THETA).collect()
    assert {(r["query_id"], r["id"], r["distance"], r["similarity"]) for r in got_q} == want_q and len(got_q) == len(want_q)

    with pytest.raises(InputError, match="sketch"):
        fs.near_duplicates(fps_df.select("id", "fp"), SKETCH_K, threshold=THETA)
    with pytest.raises(InputError, match="sketch"):
        fs.query_batch(fps_df.select("id", "fp"), queries, SKETCH_K, threshold=THETA)
    with pytest.raises(InputError, match="sketch"):
        fs.build_shards(fps_df.select("id", "fp"), tmp_path / "bad", shards=2, k=SKETCH_K, pipeline_id=SKETCH_PIPE.id, pipeline=SKETCH_PIPE)

    manifest = fs.build_shards(
        fps_df, tmp_path / "shards", shards=3, k=SKETCH_K, pipeline_id=SKETCH_PIPE.id, pipeline=SKETCH_PIPE, threshold=THETA
    )
    assert manifest["threshold"] == THETA
    with fpstore.open(tmp_path / "one", pipeline=SKETCH_PIPE, k=SKETCH_K) as one, fs.ShardSet(tmp_path / "shards") as shards:
        one.bulk_load(np.arange(n, dtype=np.int64), sigs)
        for t in texts[:30:3]:
            a = [(m.key, m.distance, m.similarity) for m in shards.query(text=t)]  # the shards verify by default
            b = [(m.key, m.distance, m.similarity) for m in one.query(text=t, threshold=THETA)]
            assert a == b and a and all(s is not None for _, _, s in a)
            assert len(shards.query(text=t, threshold=0)) >= len(a)

"""Verified-search quality: sketch distances, union candidates, labels and counts per threshold."""

from __future__ import annotations

import itertools
import json
import random

import numpy as np
import pytest

from fpstore.errors import InputError
from fpstore.fingerprint.pipeline import Pipeline
from fpstore.quality import evaluate as ev
from fpstore.quality import sketch as sk
from tests.support.corpora import word_families

WORDS = [f"w{i}" for i in range(80)]


def _families(rng: random.Random, families: int = 5, copies: int = 4, n: int = 60) -> list[str]:
    return word_families(rng, WORDS, families, copies, n, max_edits=7)


def test_sketch_distances_sum_the_words():
    """The sketch distance of a pair is the popcount of the XOR summed over its words."""
    rng = np.random.default_rng(1)
    s = rng.integers(0, 2**63, size=(20, 4), dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, (20, 4), dtype=np.uint64)
    pairs = np.array(list(itertools.combinations(range(20), 2)))
    want = [sum(bin(int(s[i, w]) ^ int(s[j, w])).count("1") for w in range(4)) for i, j in pairs]
    assert sk.sketch_distances(s, pairs).tolist() == want
    assert sk.sketch_distances(s, np.zeros((0, 2), np.int64)).shape == (0,)
    assert sk.estimated_jaccard(np.array([0, 64, 128]), 256).tolist() == [1.0, 0.5, 0.0]


@pytest.mark.parametrize("bad", [np.zeros(5, np.uint64), np.zeros((5, 2), np.int64), np.zeros((5, 0), np.uint64)])
def test_sketch_distances_reject_bad_arrays(bad):
    """A sketch that is not uint64[n, W >= 1] is an InputError."""
    with pytest.raises(InputError):
        sk.sketch_distances(bad, np.array([[0, 1]]))


def test_candidate_union_equals_brute_force():
    """The union structure holds exactly the pairs with any word within r bits."""
    rng = np.random.default_rng(2)
    base = rng.integers(0, 2**63, size=40, dtype=np.uint64)
    words = []
    for _ in range(3):
        flips = np.zeros(40, np.uint64)
        for i in range(40):
            for b in rng.choice(64, size=int(rng.integers(0, 6)), replace=False):
                flips[i] |= np.uint64(1) << np.uint64(int(b))
        words.append(base ^ flips)
    words[0][20:] = base[:20]  # near copies in word 0
    got = {tuple(p) for p in sk.candidate_union(words, 4).tolist()}
    want = {(i, j) for i, j in itertools.combinations(range(40), 2)
            if any(bin(int(w[i]) ^ int(w[j])).count("1") <= 4 for w in words)}
    assert got == want
    with pytest.raises(InputError):
        sk.candidate_union([], 3)


def test_labels_and_verified_counts_against_the_truth():
    """Candidates carry the truth's exact Jaccard; an exact estimate verifies with precision 1 and
    reaches the recall ceiling; pairs outside the truth are negatives."""
    docs = _families(random.Random(3))
    docs.append(docs[0])  # a byte-identical pair
    sets, _ = ev.shingle_sets(docs)
    digests = [d.encode() for d in docs]
    every = np.array(list(itertools.combinations(range(len(docs)), 2)))
    truth = ev.truth_pairs(sets, 0.8, every, digests)
    jac, pos, ident = sk.label_pairs(truth, every)
    identical = sum(docs[i] == docs[j] for i, j in every.tolist())
    assert not np.isnan(jac).any() and pos.sum() == truth.positives and ident.sum() == identical >= 1
    # Without the pairs as extra_pairs: those not in the truth table are negatives with J nan.
    bare = ev.truth_pairs(sets, 0.8, None, digests)
    jb, pb, _ = sk.label_pairs(bare, every)
    assert (pb == pos).all() and np.isnan(jb).any() and (jac[np.isnan(jb)] < 0.8).all()
    half = every[: len(every) // 2]
    c = sk.verified_curve("oracle", truth, half, sk.label_pairs(truth, half)[0], [0.5, 0.8, 0.9])
    ceiling, positives = sk.recall_ceiling(truth, half)
    assert positives == truth.positives - truth.positives_identical == c.positives
    i = c.ks.index(0.8)
    assert c.fp[i] == 0 and c.tp[i] == ceiling
    assert c.tp[0] >= c.tp[i] >= c.tp[2]  # a lower θ keeps more
    with pytest.raises(InputError):
        sk.verified_curve("bad", truth, half, np.zeros(3), [0.8])


def test_eval_sketch_tool_on_a_small_corpus(tmp_path, capsys):
    """tools/eval_sketch.py prints its tables and writes JSON on a small corpus (needs the sketch API)."""
    pytest.importorskip("tools.eval_sketch")
    try:
        Pipeline(sketch_bits=128)
    except TypeError:
        pytest.skip("Pipeline has no sketch_bits yet")
    from tools import eval_sketch

    docs = _families(random.Random(4), families=6, copies=3, n=120)
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": t, "group": i % 2}) + "\n" for i, t in enumerate(docs)))
    out = tmp_path / "r.json"
    assert eval_sketch.main(["--corpus", str(path), "--corpus", f"{path}:group=0", "--truth-text", str(path), "--kc", "4", "6",
                             "--m", "1", "2", "--r", "3", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Verified, best θ per row" in text and "Best configurations" in text
    res = json.loads(out.read_text())
    assert len(res["corpora"]) == 3 and res["corpora"][1]["documents"] == len(docs) // 2 + len(docs) % 2
    assert res["corpora"][2]["corpus"].endswith("truth text fingerprinted")
    first, *acc = res["corpora"][2]["accuracy"]
    assert first["words"] == 9 and 0 <= first["max_abs_error_correlation"] <= 1
    assert {a["bits"] for a in acc} == {64, 128, 256, 512} and all(abs(a["bias"]) < 0.2 for a in acc)
    first = res["corpora"][0]
    assert {(v["kc"], v["bits"]) for v in first["verified"]} == {(k, b) for k in (4, 6) for b in (128, 256, 512)}
    for v in first["verified"]:
        assert v["best"]["f1"] >= v["fixed"]["f1"] and v["best"]["tp"] <= v["ceiling"]

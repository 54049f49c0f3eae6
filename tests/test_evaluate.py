"""Calibration: exact truth, curves per k, recommendations, corpus loading, plots and the CLI."""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys

import numpy as np
import pytest
from hypothesis import given, strategies as st

import fpstore
from fpstore.quality import evaluate as ev
from fpstore.errors import InputError
from tests.support.corpora import word_families

WORDS = [f"w{i}" for i in range(60)]


def _shingles(t: str, w: int = 3) -> set[tuple[str, ...]]:
    toks = fpstore.fingerprint.text.tokens(t)
    if not toks:
        return set()
    if len(toks) < w:
        return {tuple(toks)}
    return {tuple(toks[i : i + w]) for i in range(len(toks) - w + 1)}


def _brute_truth(texts: list[str], threshold: float) -> dict[tuple[int, int], float]:
    sets = [_shingles(t) for t in texts]
    out = {}
    for i, j in itertools.combinations(range(len(texts)), 2):
        if sets[i] and sets[j]:
            jac = len(sets[i] & sets[j]) / len(sets[i] | sets[j])
            if jac >= threshold:
                out[(i, j)] = jac
    return out


def _family_corpus(rng: random.Random, families: int = 6, copies: int = 4, n: int = 40) -> list[str]:
    """Documents and lightly edited copies of them (a few word substitutions each)."""
    return word_families(rng, WORDS, families, copies, n, max_edits=5)


@given(st.lists(st.lists(st.sampled_from(WORDS[:8]), max_size=12).map(" ".join), max_size=14),
       st.sampled_from([0.3, 0.5, 0.8, 1.0]))
def test_truth_equals_brute_force(texts, threshold):
    """The prefix-filter truth finds exactly the pairs a brute force finds, with the same Jaccard."""
    sets, exact = ev.shingle_sets(texts, 3)
    assert exact
    truth = ev.truth_pairs(sets, threshold)
    want = _brute_truth(texts, threshold)
    label = truth.jaccard >= threshold - 1e-12
    got = {(int(i), int(j)): float(x) for (i, j), x, lab in zip(truth.pairs, truth.jaccard, label) if lab}
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == pytest.approx(value)
    assert truth.positives == len(want)


def test_truth_on_edited_families_and_extra_pairs():
    """Larger corpus: the truth equals brute force, and extra pairs come back with their exact Jaccard."""
    rng = random.Random(3)
    texts = _family_corpus(rng)
    sets, _ = ev.shingle_sets(texts)
    extra = np.array([[0, len(texts) - 1], [1, 7]])
    truth = ev.truth_pairs(sets, 0.8, extra)
    want = _brute_truth(texts, 0.8)
    assert truth.positives == len(want)
    allj = _brute_truth(texts, 0.0)
    for (i, j), jac in zip(truth.pairs.tolist(), truth.jaccard):
        assert jac == pytest.approx(allj.get((i, j), 0.0))
    assert {(0, len(texts) - 1), (1, 7)} <= set(map(tuple, truth.pairs.tolist()))


def test_shingle_sets_are_exact_and_short_texts_are_one_shingle():
    """Equal codes mean equal shingles; a text shorter than w is one shingle; no tokens, no shingle."""
    sets, exact = ev.shingle_sets(["a b c d", "b c d a", "a b", "", "A, B!"], 3)
    assert exact
    assert len(sets[0]) == 2 and len(np.intersect1d(sets[0], sets[1])) == 1
    assert len(sets[2]) == 1 and len(sets[3]) == 0
    assert np.array_equal(sets[2], sets[4])


def test_close_pairs_equal_brute_force():
    """close_pairs returns every pair within max_k, with its distance, across block boundaries."""
    rng = np.random.default_rng(5)
    base = rng.integers(0, 2**63, 50, dtype=np.uint64)
    fps = np.concatenate([base, base ^ np.uint64(0b111), rng.integers(0, 2**63, 30, dtype=np.uint64)])
    pairs, d = ev.close_pairs(fps, 8, block=7)
    want = {(i, j): bin(int(fps[i]) ^ int(fps[j])).count("1") for i in range(len(fps)) for j in range(i + 1, len(fps))}
    want = {k: v for k, v in want.items() if v <= 8}
    assert dict(zip(map(tuple, pairs.tolist()), d.tolist())) == want


def test_curve_counts_and_recommendation():
    """Counts per k follow d <= k; recommend_k is the largest k meeting the precision target."""
    d = np.array([0, 1, 2, 3, 3, 5, 9])
    label = np.array([True, True, True, False, True, False, True])
    c = ev.curve_from_distances("x", d, label, positives=6, max_k=9)
    assert c.tp[:4] == [1, 2, 3, 4] and c.fp[3] == 1 and c.fp[5] == 2
    assert c.recall[9] == pytest.approx(5 / 6)
    assert c.precision[2] == 1.0
    assert ev.recommend_k(c, 1.0) == 2
    assert ev.recommend_k(c, 0.8) == 4
    assert ev.recommend_k(ev.curve_from_distances("y", d, ~label, 2, 9), 0.99) is None
    assert c.best()[1] == max(c.f1)


def test_evaluate_corpus_separates_identical_pairs():
    """Byte-identical pairs count in 'all pairs' only; minhash1 finds the edited copies."""
    rng = random.Random(8)
    texts = _family_corpus(rng, families=8, copies=3, n=80)
    texts += texts[:5]  # byte-identical copies
    corpus = ev.Corpus([str(i) for i in range(len(texts))], texts, texts, ["text"] * len(texts))
    pipe = fpstore.Pipeline()
    rep = ev.evaluate_corpus(corpus, {"minhash1": pipe.fingerprint_many}, reference=False)
    t = rep.truth
    identical = sum(a == b for a, b in itertools.combinations(texts, 2))
    assert t.positives_identical == identical >= 5
    assert rep.curves[0].positives == t.positives - identical and rep.curves_all[0].positives == t.positives
    assert rep.curves_all[0].tp[0] >= identical + rep.curves[0].tp[0]
    assert rep.curves[0].best()[1] > 0.8
    d = rep.to_dict()
    assert d["truth"]["positives"] == t.positives and len(d["without_identical"][0]["rows"]) == ev.MAX_K + 1
    assert "| 0 |" in ev.format_table(rep.curves) and "precision" in ev.format_curve(rep.curves[0])


def test_evaluate_corpus_rejects_bad_methods():
    """A method returning the wrong shape, or nothing to evaluate, raises InputError."""
    corpus = ev.Corpus(["a", "b"], ["x y z", "x y w"], ["x y z", "x y w"], ["text", "text"])
    with pytest.raises(InputError):
        ev.evaluate_corpus(corpus, {"bad": lambda t: np.zeros(3, np.uint64)}, reference=False)
    with pytest.raises(InputError):
        ev.evaluate_corpus(corpus, {}, reference=False)
    with pytest.raises(InputError):
        ev.truth_pairs([], 0.0)


def test_evaluate_pairs_from_labels():
    """Labelled pairs give a curve over those pairs only."""
    rng = random.Random(2)
    a = " ".join(rng.choice(WORDS) for _ in range(200))
    b = a + " extra words"
    c = " ".join(rng.choice(WORDS) for _ in range(200))
    curves = ev.evaluate_pairs([(a, b, True), (a, c, False)], {"m": fpstore.Pipeline().fingerprint_many})
    assert curves[0].positives == 1 and curves[0].tp[5] == 1 and curves[0].fp[5] == 0
    with pytest.raises(InputError):
        ev.evaluate_pairs([], {"m": fpstore.Pipeline().fingerprint_many})
    with pytest.raises(InputError):
        ev.evaluate_pairs([("only one",)], {"m": fpstore.Pipeline().fingerprint_many})


def test_load_corpus_directory_and_jsonl(tmp_path):
    """A directory is walked (HTML detected, truth = visible text); JSONL keeps ids, truth and format."""
    d = tmp_path / "docs"
    (d / "sub").mkdir(parents=True)
    (d / "a.txt").write_text("plain text here")
    (d / "sub" / "b.html").write_text("<!DOCTYPE html><body><nav>menu</nav><main>page body</main></body>")
    (d / ".hidden.txt").write_text("skipped")
    (d / "image.png").write_bytes(b"\x89PNG")
    c = ev.load_corpus(d)
    assert c.ids == ["a.txt", "sub/b.html"] and c.formats == ["text", "html"]
    assert ev.load_corpus(d, limit=1).ids == ["a.txt"]
    assert "menu" in c.truth[1] and "<" not in c.truth[1]
    j = tmp_path / "c.jsonl"
    j.write_text(json.dumps({"id": "x", "text": "<p>a</p><p>b</p><p>c</p>", "truth": "a b c"}) + "\n\n"
                 + json.dumps({"text": "t", "format": "text"}) + "\n")
    c = ev.load_corpus(j)
    assert c.ids == ["x", "3"] and c.truth == ["a b c", "t"] and c.formats == ["html", "text"]
    assert len(ev.load_corpus(j, limit=1)) == 1
    assert len(c.subset([1])) == 1


@pytest.mark.parametrize("content", ["not json\n", json.dumps({"no_text": 1}) + "\n", json.dumps({"text": 5}) + "\n"])
def test_load_corpus_bad_jsonl(tmp_path, content):
    """Malformed JSONL lines raise InputError naming the line."""
    p = tmp_path / "bad.jsonl"
    p.write_text(content)
    with pytest.raises(InputError, match="bad.jsonl:1"):
        ev.load_corpus(p)


def test_load_corpus_missing_or_empty(tmp_path):
    """A missing path or a corpus without documents raises InputError."""
    with pytest.raises(InputError):
        ev.load_corpus(tmp_path / "nope")
    with pytest.raises(InputError):
        ev.load_corpus(tmp_path)


def test_minhash_reference_matches_truth():
    """The datasketch reference at J_est >= 0.8 finds edited copies and reports 512 bytes per document."""
    pytest.importorskip("datasketch")
    rng = random.Random(4)
    texts = _family_corpus(rng, families=5, copies=3, n=120)
    sets, _ = ev.shingle_sets(texts)
    truth = ev.truth_pairs(sets, 0.8)
    c = ev.minhash_reference(sets, truth, 0.8)
    assert c.bytes_per_doc == 512 and c.positives == truth.positives
    i = c.ks.index(0.8)
    assert c.recall[i] > 0.7 and c.precision[i] > 0.7
    assert ev.recommend_k(c, 0.5) == min(k for k, t in zip(c.ks, c.tp) if t)


def test_plot_writes_png_or_says_what_to_install(tmp_path, monkeypatch):
    """plot writes a PNG; without matplotlib it raises ImportError naming the extra to install."""
    c = ev.curve_from_distances("x", np.array([0, 3, 7]), np.array([True, True, False]), 2)
    pytest.importorskip("matplotlib")
    out = tmp_path / "p.png"
    ev.plot([c], out, title="t", target_precision=0.95)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match="matplotlib"):
        ev.plot([c], tmp_path / "q.png")


def _cli():
    from fpstore.admin import calibrate as evaluate_cli

    parser = argparse.ArgumentParser(prog="fpstore-admin")
    sub = parser.add_subparsers(dest="command", required=True)
    evaluate_cli.register(sub)
    return parser


def test_cli_calibrate_on_a_directory(tmp_path, capsys):
    """`calibrate DIR` prints the table and a recommended k, and writes the JSON and the PNG."""
    rng = random.Random(6)
    d = tmp_path / "corpus"
    d.mkdir()
    for i, t in enumerate(_family_corpus(rng, families=5, copies=3, n=100)):
        if i % 2:
            t = f"<!DOCTYPE html><body><nav>menu {i}</nav><main><p>{t}</p></main></body>"
        (d / f"{i:03d}.html").write_text(t)
    args = _cli().parse_args(["calibrate", str(d), "--compare", "--json", str(tmp_path / "r.json"),
                              "--png", str(tmp_path / "r.png") if _has("matplotlib") else ""])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "recommended k" in out or "no k reaches" in out
    assert "| k | TP | FP | precision | recall | F1 |" in out
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["pipeline_id"] == fpstore.Pipeline(sketch_bits=0).id and data["report"]["documents"] == 20
    if _has("matplotlib"):
        assert (tmp_path / "r.png").exists()


def test_cli_calibrate_labelled_pairs_and_bad_input(tmp_path, capsys):
    """--pairs reads labelled pairs; a zero threshold and bad pair files raise InputError, numbers
    out of range are usage errors (exit 2, the option named)."""
    p = tmp_path / "pairs.jsonl"
    a = " ".join(random.Random(1).choice(WORDS) for _ in range(100))
    p.write_text(json.dumps({"a": a, "b": a + " x", "label": True}) + "\n" + json.dumps({"a": a, "b": "other text", "label": False}) + "\n")
    args = _cli().parse_args(["calibrate", str(p), "--pairs", "--png", ""])
    assert args.func(args) == 0
    assert "1 near-duplicate pairs" in capsys.readouterr().out
    for bad in (["--threshold", "0"], ["--target-precision", "0"]):
        args = _cli().parse_args(["calibrate", str(p), "--pairs", "--png", ""] + bad)
        with pytest.raises(InputError):
            args.func(args)
    # Out of range: usage errors while parsing (the checked types of fpstore.admin.options).
    for bad in (["--threshold", "1.5"], ["--target-precision", "2"], ["--max-k", "99"], ["--shingle", "0"], ["--max-k", "x"]):
        with pytest.raises(SystemExit) as exc:
            _cli().parse_args(["calibrate", str(p), "--pairs", "--png", ""] + bad)
        assert exc.value.code == 2 and bad[0] in capsys.readouterr().err
    p.write_text('{"a": 1}\n')
    args = _cli().parse_args(["calibrate", str(p), "--pairs", "--png", ""])
    with pytest.raises(InputError, match="pairs.jsonl:1"):
        args.func(args)


def test_cli_help_describes_calibrate():
    """The subcommand has help text that names its input and outputs."""
    text = _cli().parse_args.__self__._subparsers._group_actions[0].choices["calibrate"].format_help()
    assert "JSONL" in text and "--target-precision" in text and "PNG" in text


def _has(mod: str) -> bool:
    try:
        __import__(mod)
        return True
    except ImportError:
        return False


def test_cli_calibrate_recommends_only_a_radius_a_store_accepts(tmp_path, capsys):
    """Families of near copies and nothing else: precision stays at 1 up to large k, so the
    largest k reaching the target is beyond the designs; calibrate recommends the largest radius a
    store can be created with (it recommended k = 13, which `create` refuses) and names the commands
    that apply it to a new store and to an existing one."""
    from fpstore.index.design import MAX_K as STORE_MAX_K

    rng = random.Random(6)
    d = tmp_path / "corpus"
    d.mkdir()
    for f in range(5):
        base = [rng.choice(WORDS) for _ in range(150)]
        for c in range(3):
            words = list(base)
            words[rng.randrange(150)] = f"edit{f}{c}"  # one word: every pair of the family is near
            (d / f"{f}-{c}.txt").write_text(" ".join(words))
    args = _cli().parse_args(["calibrate", str(d), "--max-k", "16", "--png", "", "--no-reference", "--json", str(tmp_path / "r.json")])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    k = json.loads((tmp_path / "r.json").read_text())["recommended_k"]
    assert all(v is not None and v <= STORE_MAX_K for v in k.values()), k
    first = list(k.values())[0]
    assert f"fpstore-admin create STORE -k {first}" in out and f"fpstore-admin redesign STORE -k {first}" in out


def test_cli_calibrate_without_positive_pairs_does_not_contradict_itself(tmp_path, capsys):
    """A corpus with no pair at the threshold: no precision table claiming 1.000 followed by "no k
    reaches precision"; it says there is nothing to calibrate on and recommends nothing."""
    d = tmp_path / "corpus"
    d.mkdir()
    rng = random.Random(3)
    for i in range(12):
        (d / f"{i}.txt").write_text(" ".join(rng.choice(WORDS) for _ in range(80)))
    args = _cli().parse_args(["calibrate", str(d), "--png", "", "--no-reference", "--json", str(tmp_path / "r.json")])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "no k reaches" not in out and "recommended k" not in out
    assert "no pair" in out and "--threshold" in out
    assert all(v is None for v in json.loads((tmp_path / "r.json").read_text())["recommended_k"].values())


def test_cli_calibrate_reports_its_stages_on_stderr(tmp_path, capsys):
    """Long work says what it is doing: each stage is a line on stderr."""
    d = tmp_path / "corpus"
    d.mkdir()
    for i, t in enumerate(_family_corpus(random.Random(1), families=2, copies=2, n=60)):
        (d / f"{i}.txt").write_text(t)
    args = _cli().parse_args(["calibrate", str(d), "--png", "", "--no-reference"])
    assert args.func(args) == 0
    err = capsys.readouterr().err
    assert "fingerprinting" in err and "exact truth" in err

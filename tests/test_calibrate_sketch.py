"""``fpstore-admin calibrate --sketch-bits``: the verified search per θ, the recommended θ, and the
commands that apply it, checked against a brute force and against ``create`` and ``redesign``."""

from __future__ import annotations

import io
import itertools
import json
import random
import re
import shlex
import sys

import numpy as np
import pytest

import fpstore
from fpstore.admin.cli import main
from fpstore.quality import evaluate as ev
from fpstore.quality import sketch as sk
from fpstore.store.sketches import CANDIDATE_K
from tests.support.corpora import word_families

WORDS = [f"w{i}" for i in range(400)]
BITS = 256


def _corpus(seed: int = 7, families: int = 60, copies: int = 4, n: int = 120) -> list[str]:
    """Families of a random text and copies with 0..13 words replaced: Jaccards spread around 0.8,
    some copies byte-identical."""
    return word_families(random.Random(seed), WORDS, families, copies, n, max_edits=13)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[list[str], str]:
    texts = _corpus()
    path = tmp_path_factory.mktemp("corpus") / "c.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts)))
    return texts, str(path)


@pytest.fixture(scope="module")
def calibrated(corpus, tmp_path_factory) -> tuple[str, dict]:
    """The output and JSON of ``calibrate --sketch-bits 256`` on the corpus (run once)."""
    _, path = corpus
    out = tmp_path_factory.mktemp("out") / "r.json"
    capture = pytest.MonkeyPatch()  # module scope: capsys is per test
    buf = io.StringIO()
    capture.setattr(sys, "stdout", buf)
    capture.setattr(sys, "stderr", io.StringIO())
    try:
        code = main(["calibrate", path, "--sketch-bits", str(BITS), "--png", "", "--no-reference", "--json", str(out)])
    finally:
        capture.undo()
    assert code == 0
    return buf.getvalue(), json.loads(out.read_text())


def _brute(texts: list[str], bits: int, kc: int, threshold: float = 0.8):
    """Per θ of THETAS, (tp, fp) of "key within kc bits and sketch estimate >= θ", and per k
    (tp, fp) of the key alone, over every pair of different raw texts; and the positives."""
    sets = []
    for t in texts:
        toks = fpstore.fingerprint.text.tokens(t)
        sets.append({tuple(toks[i : i + 3]) for i in range(len(toks) - 2)})
    sig = fpstore.Pipeline(sketch_bits=bits).signatures(texts)
    keys, sketches = sig.values, sig.sketches
    ii, jj, label = [], [], []
    for i, j in itertools.combinations(range(len(texts)), 2):
        if texts[i] == texts[j]:
            continue  # byte-identical pairs are left out, as calibrate's tables leave them out
        ii.append(i)
        jj.append(j)
        label.append(len(sets[i] & sets[j]) / len(sets[i] | sets[j]) >= threshold)
    a, b, lab = np.array(ii), np.array(jj), np.array(label)
    kd = np.bitwise_count(keys[a] ^ keys[b])
    est = 1.0 - 2.0 * np.bitwise_count(sketches[a] ^ sketches[b]).sum(axis=1) / bits
    per_theta = {t: (int(((kd <= kc) & (est >= t) & lab).sum()), int(((kd <= kc) & (est >= t) & ~lab).sum())) for t in sk.THETAS}
    per_k = {k: (int(((kd <= k) & lab).sum()), int(((kd <= k) & ~lab).sum())) for k in range(11)}
    return per_theta, per_k, int(lab.sum())


def _prf(tp: int, fp: int, positives: int) -> tuple[float, float, float]:
    p = tp / (tp + fp) if tp + fp else 1.0
    r = tp / positives
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def test_recommended_theta_is_the_brute_force_one(corpus, calibrated):
    """The θ printed is the best F1 among the θ reaching precision 0.95, and its precision, recall
    and the whole curve are those of a brute force over every pair (store's rule: estimate >= θ)."""
    texts, _ = corpus
    out, data = calibrated
    per_theta, per_k, positives = _brute(texts, BITS, CANDIDATE_K)
    assert positives > 50  # a corpus with something to calibrate on
    v = data["verified"]
    assert v["candidate_k"] == CANDIDATE_K and v["sketch_bits"] == BITS and v["bytes_per_doc"] == 8 + BITS // 8
    assert [(r["tp"], r["fp"]) for r in v["curve"]["rows"]] == [per_theta[t] for t in sk.THETAS]
    scores = {t: _prf(*per_theta[t], positives) for t in sk.THETAS}
    ok = [t for t in sk.THETAS if scores[t][0] >= 0.95 and per_theta[t][0] > 0]
    assert ok, "the corpus should have a θ reaching the target"
    best_f1 = max(scores[t][2] for t in ok)
    want = min(t for t in ok if scores[t][2] == best_f1)
    p, r, f = scores[want]
    assert v["recommended_theta"] == want
    assert f"recommended θ = {want:.2f} (best F1 with precision >= 0.95): precision {p:.3f}, recall {r:.3f}, F1 {f:.3f}" in out
    # The comparison with the key alone: its best F1 over the radii a store accepts.
    key_f1 = {k: _prf(*per_k[k], positives)[2] for k in per_k}
    bk = max(key_f1, key=lambda k: (key_f1[k], -k))
    vf = max(s[2] for s in scores.values())
    assert data["verified"]["key_best"]["k"] == bk and data["verified"]["beats_key"] == (vf > key_f1[bk])
    said = "the verified search beats the key alone on this corpus" if vf > key_f1[bk] else "does not beat the key alone"
    assert said in out and f"against {key_f1[bk]:.3f} (key alone, k = {bk})" in out


def test_printed_commands_are_accepted_and_make_the_measured_store(corpus, calibrated, tmp_path, capsys):
    """`create` accepts the printed command and makes a store whose verified pairs are the
    calibrated ones at the recommended θ (TP + FP); `redesign` accepts its command on that store
    and refuses a store without sketches (as the output says)."""
    texts, _ = corpus
    out, data = calibrated
    theta = data["verified"]["recommended_theta"]
    create = re.search(r"apply it to a new store:\s+(fpstore-admin create STORE .*)", out).group(1)
    redesign = re.search(r"or to an existing store:\s+(fpstore-admin redesign STORE .*)", out).group(1)
    assert data["verified"]["commands"] == {"create": create, "redesign": redesign}
    assert create == f"fpstore-admin create STORE --threshold {theta:.2f} --sketch-bits {BITS} -k {CANDIDATE_K}"
    store = tmp_path / "s.fps"
    argv = [str(store) if a == "STORE" else a for a in shlex.split(create)[1:]]
    assert main(argv) == 0
    with fpstore.open(store) as s:
        assert s.pipeline.sketch_bits == BITS and s.k == CANDIDATE_K
        s.add_many([str(i) for i in range(len(texts))], texts=texts)
        a, b, _ = s.near_duplicate_pairs()
        ka, kb = (np.array([int(x) for x in s.keys_of(ids)]) for ids in (a, b))
    found = {(min(i, j), max(i, j)) for i, j in zip(ka.tolist(), kb.tolist()) if texts[i] != texts[j]}
    row = data["verified"]["at_recommended"]
    assert len(found) == row["tp"] + row["fp"]
    assert main([str(store) if a == "STORE" else a for a in shlex.split(redesign)[1:]]) == 0
    plain = tmp_path / "plain.fps"
    assert main(["create", str(plain), "-k", "5"]) == 0  # within k bits: no sketch
    capsys.readouterr()
    assert main([str(plain) if a == "STORE" else a for a in shlex.split(redesign)[1:]]) == 2
    assert "ingest the texts" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--sketch-bits", "100"], "argument --sketch-bits: must be a multiple of 64 up to 512, got 100"),
        (["--sketch-bits", "1024"], "argument --sketch-bits: must be an integer in 0..512, got 1024"),
        (["--sketch-bits", "256", "--candidate-k", "11"], "argument --candidate-k: must be an integer in 0..10, got 11"),
        (["--sketch-bits", "256", "--candidate-k", "-1"], "argument --candidate-k: must be an integer in 0..10, got -1"),
        (["--sketch-bits", "256", "--candidate-k", "eight"], "argument --candidate-k: wants an integer, got 'eight'"),
    ],
)
def test_bad_values_are_usage_errors(corpus, capsys, extra, says):
    """A sketch length that is not a multiple of 64 up to 512, or a candidate radius outside the
    designs' 0..10, exits 2 while parsing, naming the option."""
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", corpus[1], "--png", "", *extra])
    assert exc.value.code == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--candidate-k", "6", "--sketch-bits", "0"], "--sketch-bits 0 turns off"),
        (["--candidate-k", "6", "--kind", "simhash64"], "--kind simhash64 does not run"),
        (["--sketch-bits", "256", "--kind", "simhash64"], "--sketch-bits needs the minhash1 kind"),
    ],
)
def test_options_that_do_not_fit_together_exit_2(corpus, capsys, extra, says):
    """--candidate-k without a sketch, and a sketch with SimHash, are refused (exit 2) before any work."""
    assert main(["calibrate", corpus[1], "--png", "", "--no-reference", *extra]) == 2
    captured = capsys.readouterr()
    assert says in captured.err and captured.out == ""


def test_labelled_pairs_get_the_verified_curve(tmp_path, capsys):
    """--pairs --sketch-bits: the curve counts the pairs within the candidate radius whose sketch
    estimate reaches θ, as a brute force over the labelled pairs does."""
    rng = random.Random(2)
    rows = []
    for _ in range(60):
        a = [rng.choice(WORDS) for _ in range(100)]
        b = list(a)
        for _ in range(rng.randrange(0, 15)):
            b[rng.randrange(100)] = rng.choice(WORDS)
        rows.append((" ".join(a), " ".join(b), rng.random() < 0.5))
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"a": a, "b": b, "label": lab}) + "\n" for a, b, lab in rows))
    out = tmp_path / "r.json"
    argv = ["calibrate", str(path), "--pairs", "--sketch-bits", "128", "--candidate-k", "6", "--png", "", "--json", str(out)]
    assert main(argv) == 0
    v = json.loads(out.read_text())["verified"]
    pipe = fpstore.Pipeline(sketch_bits=128)
    sa, sb = pipe.signatures([a for a, _, _ in rows]), pipe.signatures([b for _, b, _ in rows])
    found = np.bitwise_count(sa.values ^ sb.values) <= 6
    est = 1 - 2 * np.bitwise_count(sa.sketches ^ sb.sketches).sum(axis=1) / 128
    lab = np.array([x for _, _, x in rows])
    want = [(int((found & (est >= t) & lab).sum()), int((found & (est >= t) & ~lab).sum())) for t in sk.THETAS]
    assert [(r["tp"], r["fp"]) for r in v["curve"]["rows"]] == want
    assert "on these labelled pairs" in capsys.readouterr().out


def test_recommend_theta_picks_the_best_f1_reaching_the_target():
    """Best F1 among the θ whose precision reaches the target (the smallest θ on ties); None when none does."""
    c = ev.Curve("v", [0.5, 0.6, 0.7, 0.8], tp=[10, 9, 9, 5], fp=[5, 1, 1, 0], positives=10, bytes_per_doc=40)
    assert sk.recommend_theta(c, 0.9) == 0.6
    assert sk.recommend_theta(c, 1.0) == 0.8
    assert sk.recommend_theta(ev.Curve("v", [0.5], [3], [3], 4, 40), 0.9) is None


def test_the_default_measures_what_a_new_store_answers_with(corpus, tmp_path):
    """Without --sketch-bits, calibrate measures the verified search of a new store (512-bit
    sketch, candidate radius 7) beside the 64-bit key, and prints the commands that make it; with
    --sketch-bits 0, the key alone. It measured the key alone when stores answered with it."""
    out = tmp_path / "r.json"
    assert main(["calibrate", corpus[1], "--png", "", "--no-reference", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["verified"]["sketch_bits"] == fpstore.Pipeline().sketch_bits == 512
    assert data["verified"]["candidate_k"] == CANDIDATE_K
    assert main(["calibrate", corpus[1], "--png", "", "--no-reference", "--sketch-bits", "0", "--json", str(out)]) == 0
    assert "verified" not in json.loads(out.read_text())

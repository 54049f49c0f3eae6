"""Explaining a match (issue 17, item 5): Store.explain and fpstore-admin explain. The distance,
the Jaccard estimate of a MinHash pipeline (none for SimHash), exact duplicates, whether the
store pairs them, and with texts the exact Jaccard of the shingle sets, computed here again by
brute force from the tokenizer; unknown keys and bad arguments as the project's errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import fpstore
from fpstore.errors import FpstoreError, InputError, UnknownKeyError
from fpstore.fingerprint import text as fptext
from tests.test_cli import cli, run

WORDS = [f"{w}{i}" for i in range(50) for w in ("amber", "birch", "coral", "delta")]


def article(seed: int, n: int = 80) -> str:
    rng = np.random.default_rng(seed)
    return " ".join(rng.choice(WORDS, n).tolist())


def edited(text: str, words: int) -> str:
    tokens = text.split()
    for i in range(words):
        tokens[7 + 5 * i] = f"edit{i}"
    return " ".join(tokens)


def brute_shingles(text: str, w: int) -> set[tuple[str, ...]]:
    tokens = fptext.tokens(text)
    return {tuple(tokens[i : i + w]) for i in range(len(tokens) - w + 1)} if len(tokens) >= w else {tuple(tokens)}


@pytest.fixture
def texts():
    base = article(1)
    return {"base": base, "near": edited(base, 2), "far": article(2), "short": "Page not found"}


def filled(path, texts, pipeline=None) -> fpstore.Store:
    s = fpstore.open(path, k=5, pipeline=pipeline)
    s.add_many(
        ["base", "near", "far", "404/a", "404/b"], texts=[texts["base"], texts["near"], texts["far"], texts["short"], texts["short"]]
    )
    s.add(7, fingerprint=s["base"].fingerprint, pipeline_id=s.pipeline.id)
    s.add(b"\x01\x02", text=texts["near"])
    return s


def test_explain_from_the_store_alone(tmp_path, texts):
    with filled(tmp_path / "s", texts) as s:
        e = s.explain("base", "near")
        a, b = s["base"], s["near"]
        assert dataclasses.is_dataclass(e) and (e.key_a, e.key_b, e.id_a, e.id_b) == ("base", "near", a.id, b.id)
        assert e.distance == bin(a.fingerprint ^ b.fingerprint).count("1") and e.kind == "minhash1"
        assert e.estimated_jaccard == pytest.approx(max(0.0, 1 - 2 * e.distance / 64))
        assert e.exact_duplicate is False and e.k == 5
        pairs = set(zip(*(x.tolist() for x in s.near_duplicate_pairs()[:2])))
        for x, y in [("base", "near"), ("base", "far"), ("404/a", "404/b"), ("base", 7), ("near", b"\x01\x02"), ("404/a", "base")]:
            got = s.explain(x, y)
            i, j = sorted((s[x].id, s[y].id))
            assert got.paired == ((i, j) in pairs), (x, y)
        assert s.explain("404/a", "404/b").exact_duplicate is True and s.explain("404/a", "404/b").short_a
        assert s.explain("near", b"\x01\x02").exact_duplicate is True
        assert s.explain("base", 7).exact_duplicate is None  # stored by fingerprint: no content hash
        assert s.explain("base", 7).distance == 0
        same = s.explain("base", "base")
        assert same.distance == 0 and not same.paired
        assert e.jaccard is None and e.shared_sample is None and e.texts_as_stored is None
        with pytest.raises(dataclasses.FrozenInstanceError):
            e.distance = 0  # type: ignore[misc]


def test_explain_with_texts_gives_the_exact_jaccard_of_the_shingle_sets(tmp_path, texts):
    with filled(tmp_path / "s", texts) as s:
        e = s.explain("base", "near", text_a=texts["base"], text_b=texts["near"].encode(), sample=3)
        sa, sb = brute_shingles(texts["base"], 3), brute_shingles(texts["near"], 3)
        assert e.jaccard == pytest.approx(len(sa & sb) / len(sa | sb)) and 0 < e.jaccard < 1
        assert (e.shingles_a, e.shingles_b, e.shared) == (len(sa), len(sb), len(sa & sb))
        assert len(e.shared_sample) == 3 and all(tuple(x.split()) in sa & sb for x in e.shared_sample)
        assert e.only_a_sample and all(tuple(x.split()) in sa - sb for x in e.only_a_sample)
        assert e.only_b_sample and all(tuple(x.split()) in sb - sa for x in e.only_b_sample)
        assert any("edit0" in x for x in e.only_b_sample)
        assert e.texts_as_stored == (True, True)
        # The estimate tracks the exact value (64 bits: a loose bound).
        assert abs(e.estimated_jaccard - e.jaccard) < 0.35
        other = s.explain("base", "near", text_a=texts["far"], text_b=texts["near"], sample=0)
        assert other.texts_as_stored == (False, True) and other.shared_sample == ()
        short = s.explain("404/a", "404/b", text_a=texts["short"], text_b=texts["short"])
        assert short.jaccard == 1.0 and short.shared == short.shingles_a == 1  # fewer tokens than a shingle: one
        empty = s.explain("404/a", "404/b", text_a="", text_b="  ")
        assert empty.jaccard == 1.0 and empty.shingles_a == 0


def test_explain_uses_the_stores_pipeline(tmp_path, texts):
    """Shingles as the store's pipeline makes them (shingle width 1 here), and a SimHash store
    gives no Jaccard estimate."""
    pipe = fpstore.Pipeline(kind="simhash64", shingle=1, html="off")
    with filled(tmp_path / "s", texts, pipeline=pipe) as s:
        e = s.explain("base", "near", text_a=texts["base"], text_b=texts["near"])
        assert e.kind == "simhash64" and e.estimated_jaccard is None
        sa, sb = brute_shingles(texts["base"], 1), brute_shingles(texts["near"], 1)
        assert e.jaccard == pytest.approx(len(sa & sb) / len(sa | sb)) and e.texts_as_stored == (True, True)


def test_explain_refuses_unknown_keys_and_bad_arguments(tmp_path, texts):
    with filled(tmp_path / "s", texts) as s:
        with pytest.raises(UnknownKeyError, match="'missing' is not stored") as info:
            s.explain("base", "missing")
        assert isinstance(info.value, KeyError) and isinstance(info.value, FpstoreError)
        assert str(info.value) == "key 'missing' is not stored"
        with pytest.raises(UnknownKeyError):
            s.explain(8, "base")
        with pytest.raises(InputError, match="both"):
            s.explain("base", "near", text_a="x")
        with pytest.raises(InputError, match="text_b"):
            s.explain("base", "near", text_a="x", text_b=3)  # type: ignore[arg-type]
        with pytest.raises(InputError, match="sample"):
            s.explain("base", "near", sample=-1)
        with pytest.raises(InputError):
            s.explain(1.5, "near")  # type: ignore[arg-type]


def test_cli_explain_text_and_json(tmp_path, texts):
    with filled(tmp_path / "s", texts) as s:
        want = s.explain("base", "near", text_a=texts["base"], text_b=texts["near"])
    (tmp_path / "a.txt").write_text(texts["base"])
    (tmp_path / "b.txt").write_text(texts["near"])
    r = cli("explain", tmp_path / "s", "base", "near", "--text-a", tmp_path / "a.txt", "--text-b", tmp_path / "b.txt", "--json")
    assert r.code == 0, r.err
    data = r.json()
    assert data["distance"] == want.distance and data["jaccard"] == pytest.approx(want.jaccard)
    assert data["estimated_jaccard"] == pytest.approx(want.estimated_jaccard) and data["key_a"] == "base"
    assert data["fingerprint_a"] == f"{want.fingerprint_a:016x}" and data["shared_sample"] == list(want.shared_sample)
    r = cli("explain", tmp_path / "s", "404/a", "404/b")
    assert r.code == 0 and "exact duplicates: yes" in r.out and "estimated Jaccard 1.000" in r.out
    assert "short" in r.out
    r = cli("explain", tmp_path / "s", "7", "hex:0102", "--json")  # an int key, a bytes key (as dump prints them)
    assert r.code == 0, r.err
    assert r.json()["key_a"] == 7 and r.json()["key_b"] == {"hex": "0102"} and r.json()["exact_duplicate"] is None
    assert cli("explain", tmp_path / "s", "0102", "hex:0102", "--key-type", "bytes").code == 0


def test_cli_explain_errors_exit_2_in_one_line(tmp_path, texts):
    filled(tmp_path / "s", texts).close()
    r = run("explain", tmp_path / "s", "base", "nope")
    assert r.code == 2 and r.err.strip() == f"fpstore-admin: error: KEY_B 'nope' is not stored in {tmp_path / 's'}"
    r = cli("explain", tmp_path / "s", "base", "near", "--text-a", tmp_path / "missing.txt", "--text-b", tmp_path / "missing.txt")
    assert r.code == 2 and "missing.txt" in r.err
    (tmp_path / "a.txt").write_text("x")
    r = cli("explain", tmp_path / "s", "base", "near", "--text-a", tmp_path / "a.txt")
    assert r.code == 2 and "both --text-a and --text-b" in r.err
    r = cli("explain", tmp_path / "s", "base", "near", "--sample", "-1")
    assert r.code == 2
    r = cli("explain", tmp_path / "s", "base")
    assert r.code == 2
    r = cli("explain", tmp_path / "s", "x", "base", "--key-type", "int")
    assert r.code == 2 and "not an int key" in r.err
    r = cli("explain", tmp_path / "nostore", "a", "b")
    assert r.code == 2


def test_cli_explain_ambiguous_key(tmp_path):
    with fpstore.open(tmp_path / "s", k=3) as s:
        s.add("12", text="some words here")
        s.add(12, text="other words there")
    r = cli("explain", tmp_path / "s", "12", "12")
    assert r.code == 2 and "--key-type" in r.err and "int key 12" in r.err
    r = cli("explain", tmp_path / "s", "12", "12", "--key-type", "int", "--json")
    assert r.code == 0 and r.json()["key_a"] == 12
    r = cli("explain", tmp_path / "s", "12", "12", "--key-type", "str", "--json")
    assert r.code == 0 and r.json()["key_a"] == "12"

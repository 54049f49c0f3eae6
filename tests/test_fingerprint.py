"""Fingerprint kernels, the pipeline, golden values and bad input."""

from __future__ import annotations

import json
import pathlib
import random
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, strategies as st

import fpstore
from fpstore import _backend
from fpstore.fingerprint import _simhash_py, text
from fpstore.errors import FormatError, InputError
from tests.conftest import expected_kernel, load_twins

GOLDEN_DIR = pathlib.Path(__file__).parent / "golden"
GOLDEN = json.loads((GOLDEN_DIR / "fingerprints_v1.json").read_text())
GOLDEN_FILES = {path.name: json.loads(path.read_text()) for path in sorted(GOLDEN_DIR.glob("fingerprints_v*.json"))}
LEGACY = {"kind": "simhash64", "html": "off"}  # the defaults of the first releases
KINDS = [_simhash_py.KIND_SIMHASH64, _simhash_py.KIND_MINHASH1]
VOCAB = [f"w{i}" for i in range(5000)]

texts = st.one_of(
    st.text(),
    st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=200),  # surrogates too
    st.text(alphabet=" \t\n.,!ab", max_size=50),
    st.lists(st.sampled_from(["The", "quick", "BROWN", "café", "東京", "x" * 300, "١٢٣", "e\u0301"]), max_size=40).map(" ".join),
)


def _compiled_and_python():
    c, py = load_twins("simhash")
    c.set_fold_table(text.FOLD)
    py.set_fold_table(text.FOLD)
    return c, py


def _idf():
    return fpstore.IdfTable({"the": 0, "quick": 40, "café": 255, "x" * 300: 7}, default=90)


@given(texts, st.integers(1, 6), st.integers(0, 2**64 - 1), st.booleans(), st.sampled_from(KINDS))
def test_twins_agree_bit_for_bit(raw, shingle, seed, weighted, kind):
    """The compiled kernel equals the Python specification on arbitrary text, shingle, seed, weights, kind."""
    c, py = _compiled_and_python()
    idf = _idf()._kernel_table(seed) if weighted else None
    t = text.normalize(raw)
    assert c.fingerprint(t, seed, shingle, idf, kind) == py.fingerprint(t, seed, shingle, idf, kind)


@given(st.lists(st.sampled_from(VOCAB[:300]), max_size=120), st.integers(1, 4), st.integers(0, 2**64 - 1))
def test_twins_agree_on_minhash1_densification(words, shingle, seed):
    """Texts of 0..120 tokens (so 0..64+ filled bins, every densification path) agree in both twins."""
    c, py = _compiled_and_python()
    t = " ".join(words)
    k = _simhash_py.KIND_MINHASH1
    assert c.fingerprint(t, seed, shingle, None, k) == py.fingerprint(t, seed, shingle, None, k)


@given(st.lists(st.sampled_from(VOCAB[:300]), max_size=150), st.integers(1, 4), st.integers(0, 2**64 - 1), st.integers(1, 8))
def test_twins_agree_on_the_sketch(words, shingle, seed, width):
    """Sketches of 1..8 words (odd widths drop a pair's second word) agree in both twins, and the
    fingerprint beside them is the one computed without a sketch."""
    c, py = _compiled_and_python()
    t = " ".join(words)
    k = _simhash_py.KIND_MINHASH1
    out_c, out_py = np.zeros(width, np.uint64), np.zeros(width, np.uint64)
    assert c.fingerprint(t, seed, shingle, None, k, False, out_c) == py.fingerprint(t, seed, shingle, None, k, False, out_py)
    assert out_c.tolist() == out_py.tolist()
    assert c.fingerprint(t, seed, shingle, None, k)[0] == c.fingerprint(t, seed, shingle, None, k, False, out_c)[0]
    if len(words) >= shingle + 2:
        assert out_c.any()


def test_a_sketch_is_refused_by_simhash_and_beyond_eight_words():
    for mod in _compiled_and_python():
        with pytest.raises(ValueError, match="MinHash1"):
            mod.fingerprint("a b c", 0, 3, None, _simhash_py.KIND_SIMHASH64, False, np.zeros(2, np.uint64))
        with pytest.raises(ValueError, match="at most 8"):
            mod.fingerprint("a b c", 0, 3, None, _simhash_py.KIND_MINHASH1, False, np.zeros(9, np.uint64))


def test_the_sketch_estimates_jaccard_with_the_variance_of_independent_bits():
    """Over pairs of 400-token texts at Jaccard ~0.75 the 256-bit sketch's estimate has mean error
    within 0.01 and a spread within 20 % of independent bits' (4 P (1 - P) / 256, P = (1 + J) / 2),
    and its words agree with the fingerprint's bits no more than chance allows."""
    rng = np.random.default_rng(3)
    pipe = fpstore.Pipeline(sketch_bits=256, html="off")
    firsts, seconds, truth = [], [], []
    for _ in range(300):
        a = rng.integers(0, 2000, 400)
        b = a.copy()
        b[rng.integers(0, 400, 20)] = rng.integers(0, 2000, 20)
        sa, sb = ({tuple(x[i : i + 3]) for i in range(len(x) - 2)} for x in (a.tolist(), b.tolist()))
        truth.append(len(sa & sb) / len(sa | sb))
        firsts.append(" ".join(f"w{x}" for x in a))
        seconds.append(" ".join(f"w{x}" for x in b))
    fa, fb = pipe.signatures(firsts), pipe.signatures(seconds)
    assert fa.sketches is not None and fb.sketches is not None
    est = 1 - 2 * fpstore.fingerprint.pipeline.sketch_distance(fa.sketches, fb.sketches) / 256
    err = est - np.array(truth)
    p = (1 + np.mean(truth)) / 2
    assert abs(err.mean()) < 0.01
    assert err.std() < 1.2 * np.sqrt(4 * p * (1 - p) / 256)
    # A sketch word of one text is as unrelated to its own fingerprint as two random words are.
    same = np.bitwise_count(fa.values ^ fa.sketches[:, 0]).mean()
    assert 30 < same < 34


def test_pipeline_sketch_bits_are_checked_and_recorded():
    for bad in (32, 65, 576, -64, True, "256"):
        with pytest.raises(InputError, match="sketch_bits"):
            fpstore.Pipeline(sketch_bits=bad)
    with pytest.raises(InputError, match="minhash1"):
        fpstore.Pipeline(kind="simhash64", sketch_bits=256)
    pipe = fpstore.Pipeline(sketch_bits=256)
    assert pipe.config["sketch_bits"] == 256 and "sketch_bits" not in fpstore.Pipeline(sketch_bits=0).config
    assert fpstore.Pipeline.from_config(pipe.config) == pipe and pipe.id != fpstore.Pipeline(sketch_bits=0).id
    with pytest.raises(FormatError, match="sketch"):
        fpstore.Pipeline.from_config({**fpstore.Pipeline(sketch_bits=0).config, "sketch_bits": 0})
    # The kind's default: MinHash1 keeps a 512-bit sketch, SimHash (which cannot) none.
    assert (fpstore.Pipeline().sketch_bits, fpstore.Pipeline(kind="simhash64").sketch_bits) == (512, 0)
    assert fpstore.Pipeline() == fpstore.Pipeline(sketch_bits=512) and fpstore.Pipeline().config["sketch_bits"] == 512
    sig = pipe.signature("one two three four five")
    batch = pipe.signatures(["one two three four five"], threads=1)
    assert len(sig.sketch) == 4 and batch.sketches is not None and batch.sketches[0].tolist() == list(sig.sketch)
    assert fpstore.Pipeline(sketch_bits=0).signature("one two three").sketch == ()


@pytest.mark.slow
@given(st.lists(texts, max_size=12), st.integers(1, 4), st.sampled_from(KINDS))
def test_batch_equals_single(raws, shingle, kind):
    """fingerprint_batch fills exactly what single calls return, in both twins."""
    for mod in _compiled_and_python():
        ts = [text.normalize(r) for r in raws]
        n = len(ts)
        fp, tok, dig = np.zeros(n, np.uint64), np.zeros(n, np.int64), np.zeros((n, 2), np.uint64)
        mod.fingerprint_batch(ts, 0, n, 5, shingle, None, fp, tok, dig, kind)
        for i, t in enumerate(ts):
            assert (int(fp[i]), int(tok[i]), int(dig[i, 0]), int(dig[i, 1])) == mod.fingerprint(t, 5, shingle, None, kind)


def test_long_ascii_block_counts_past_lane_flush(simhash_kernel):
    """More than 255 shingles (a byte-lane flush) and 16-bit-lane flushes still equal the spec, both kinds."""
    t = " ".join(random.Random(3).choice(VOCAB) for _ in range(5000))
    idf = _idf()._kernel_table(0)
    for table in (None, idf):
        for kind in KINDS:
            assert simhash_kernel.fingerprint(t, 0, 3, table, kind) == _simhash_py.fingerprint(t, 0, 3, table, kind)



LONG_WORDS = ["a", "of", "the", "quick", "brown", "café", "東京", "\U0001f600x", "straße", "x" * 37, "naïve", "1999"]
SEPARATORS = [" ", ", ", ".\n\n", " — ", "\t"]


@given(
    st.lists(st.tuples(st.sampled_from(LONG_WORDS), st.sampled_from(SEPARATORS)), min_size=1, max_size=500),
    st.integers(1, 16),
    st.integers(0, 2**64 - 1),
    st.booleans(),
    st.sampled_from(KINDS),
    st.sampled_from([0, 1, 4]),
)
def test_twins_agree_on_long_texts_and_wide_shingles(pairs, shingle, seed, weighted, kind, sketch_words):
    """Texts of thousands of characters in all three str widths, whose tokens straddle the kernel's
    scan blocks at every offset, and shingles up to the widest: the kernel equals the spec."""
    c, py = _compiled_and_python()
    t = text.normalize("".join(word + sep for word, sep in pairs))
    if kind == _simhash_py.KIND_SIMHASH64 or weighted:
        sketch_words = 0
    idf = _idf()._kernel_table(seed) if weighted and kind == _simhash_py.KIND_SIMHASH64 else None
    out_c = np.zeros(sketch_words, dtype=np.uint64)
    out_py = np.zeros(sketch_words, dtype=np.uint64)
    if sketch_words:
        assert c.fingerprint(t, seed, shingle, idf, kind, False, out_c) == py.fingerprint(t, seed, shingle, idf, kind, False, out_py)
        assert out_c.tolist() == out_py.tolist()
    else:
        assert c.fingerprint(t, seed, shingle, idf, kind) == py.fingerprint(t, seed, shingle, idf, kind)

def test_unknown_kernel_kind_is_refused(simhash_kernel):
    """A kind number the kernel does not know raises ValueError in both twins."""
    with pytest.raises(ValueError):
        simhash_kernel.fingerprint("a b c", 0, 3, None, 7)


def test_selected_backend_is_loaded():
    """The compiled kernel runs, or its twin under FPSTORE_PUREPYTHON=1."""
    assert fpstore.backend == ("python" if _backend.PURE_PYTHON else "cython")
    assert _backend.load("simhash").__name__ == expected_kernel("simhash")


def test_quick_brown_fox():
    """Case, spacing and punctuation do not change the fingerprint."""
    assert fpstore.simhash("The quick brown fox") == fpstore.simhash("the  QUICK, brown fox!")


def _doc(rng: random.Random, n: int = 400) -> list[str]:
    return [rng.choice(VOCAB) for _ in range(n)]


@pytest.mark.parametrize("kind", ["minhash1", "simhash64"])
def test_one_edit_moves_few_bits_and_unrelated_texts_many(kind):
    """400-word texts: one changed token moves <= 8 bits; unrelated texts differ in >= 20 bits."""
    rng = random.Random(2024)
    pipe = fpstore.Pipeline(kind=kind)
    for _ in range(50):
        a = _doc(rng)
        b = list(a)
        b[rng.randrange(len(b))] = "edited"
        c = _doc(rng)
        fa, fb, fc = (pipe.fingerprint(" ".join(x)) for x in (a, b, c))
        assert fpstore.hamming(fa, fb) <= 8
        assert fpstore.hamming(fa, fc) >= 20


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["minhash1", "simhash64"])
def test_bits_are_balanced_and_uncorrelated(kind):
    """Over 10^5 random texts each bit is set with probability 0.5 +- 0.01 and bit pairs barely correlate.

    12-token texts have 10 shingles: MinHash1 fills at most 10 of its 64 bins, so this also checks
    that densified bins do not repeat or bias bits.
    """
    rng = np.random.default_rng(7)
    words = rng.integers(0, 1_000_000, size=(100_000, 12))
    docs = [" ".join(f"t{w}" for w in row) for row in words.tolist()]
    fps = fpstore.Pipeline(kind=kind).fingerprint_many(docs)
    bits = ((fps[:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)).astype(np.float64)
    p = bits.mean(axis=0)
    assert np.all(np.abs(p - 0.5) <= 0.01), p
    corr = np.corrcoef(bits, rowvar=False)
    off = np.abs(corr[~np.eye(64, dtype=bool)])
    assert off.max() < 0.02, off.max()


@pytest.mark.parametrize("file,name", [(f, n) for f in sorted(GOLDEN_FILES) for n in sorted(GOLDEN_FILES[f]["pipelines"])])
def test_golden_fingerprints(file, name):
    """Committed fingerprints pin every supported version; changing them must be a deliberate new version."""
    from tools.gen_golden import GOLDEN as SOURCES

    pipe = SOURCES[file][1][name]
    data = GOLDEN_FILES[file]
    gold = data["pipelines"][name]
    assert pipe.id == gold["id"]
    if "config" in gold:
        assert pipe.config == gold["config"]
        assert fpstore.Pipeline.from_config(gold["config"]).id == gold["id"]
    assert len(gold["fingerprints"]) >= len(GOLDEN_FILES[file]["texts"]) or file in ("fingerprints_v1.json", "fingerprints_v2.json")
    sketches = gold.get("sketches", [None] * len(gold["fingerprints"]))
    assert ("sketches" in gold) == bool(pipe.sketch_bits)
    for t, fp, ntok, ch, sk in zip(data["texts"], gold["fingerprints"], gold["tokens"], gold["content_hashes"], sketches):
        sig = pipe.signature(t)
        assert (f"{sig.fingerprint:016x}", sig.tokens, sig.content_hash.hex()) == (fp, ntok, ch), t
        if sk is not None:
            assert [f"{w:016x}" for w in sig.sketch] == sk, t


def test_pipeline_id_is_stable_and_changes_with_every_parameter():
    """The same parameters give the same id; any change gives another."""
    base = fpstore.Pipeline()
    assert base.id == fpstore.Pipeline().id == "c2e8e15cd9444861"
    assert fpstore.Pipeline(sketch_bits=0).id == "b7d500c764ccea22"  # the default before the sketch, unchanged
    assert fpstore.Pipeline(html="main-v1", sketch_bits=0).id == "3711d4b2ac097d9d"  # the default before main-v2, unchanged
    assert fpstore.Pipeline(**LEGACY).id == "7d098142278897b3"  # the first releases' default, unchanged
    variants = [
        fpstore.Pipeline(shingle=2),
        fpstore.Pipeline(seed=1),
        fpstore.Pipeline(min_tokens=5),
        fpstore.Pipeline(html="off"),
        fpstore.Pipeline(html="main-v1"),
        fpstore.Pipeline(sketch_bits=0),
        fpstore.Pipeline(sketch_bits=256),
        fpstore.Pipeline(kind="simhash64"),
        fpstore.Pipeline(**LEGACY),
        fpstore.Pipeline(weighting="idf", idf=_idf(), **LEGACY),
        fpstore.Pipeline(weighting="idf", idf=fpstore.IdfTable({"the": 1}, default=90), **LEGACY),
    ]
    ids = {base.id} | {v.id for v in variants}
    assert len(ids) == 1 + len(variants)


def test_legacy_config_gives_legacy_fingerprints():
    """A store header written by the first releases rebuilds a pipeline with their exact fingerprints."""
    legacy_config = {"kind": "simhash64", "scheme": 1, "tokenizer": 1, "unicode": "14.0.0", "shingle": 3,
                     "seed": 0, "weighting": "tf", "idf": None, "min_tokens": 20}
    pipe = fpstore.Pipeline.from_config(legacy_config)
    assert pipe.config == legacy_config and pipe.id == "7d098142278897b3"
    assert pipe.kind == "simhash64" and pipe.html == "off"
    gold = GOLDEN["pipelines"]["default"]
    for t, fp in zip(GOLDEN["texts"], gold["fingerprints"]):
        assert f"{pipe.fingerprint(t):016x}" == fp


def test_config_round_trip_and_refusals():
    """from_config rebuilds the same pipeline; unknown schemes, fields or idf mismatches are refused."""
    idf = _idf()
    for p in (fpstore.Pipeline(shingle=2, seed=3, min_tokens=4), fpstore.Pipeline(html="off"), fpstore.Pipeline(kind="simhash64")):
        assert fpstore.Pipeline.from_config(p.config).id == p.id
    with pytest.raises(FormatError, match="kind"):
        fpstore.Pipeline.from_config({**fpstore.Pipeline().config, "kind": "minhash9"})
    with pytest.raises(FormatError, match="html"):
        fpstore.Pipeline.from_config({**fpstore.Pipeline().config, "html": "off"})
    with pytest.raises(FormatError):
        fpstore.Pipeline.from_config({**fpstore.Pipeline().config, "html": "main-v9"})
    with pytest.raises(FormatError):
        fpstore.Pipeline.from_config({**fpstore.Pipeline().config, "weighting": "tf"})
    pipe = fpstore.Pipeline(shingle=4, seed=9, weighting="idf", idf=idf, min_tokens=3, kind="simhash64")
    assert fpstore.Pipeline.from_config(pipe.config, idf).id == pipe.id
    with pytest.raises(FormatError, match="idf"):
        fpstore.Pipeline.from_config(pipe.config, None)
    with pytest.raises(FormatError, match="scheme"):
        fpstore.Pipeline.from_config({**pipe.config, "scheme": 99}, idf)
    with pytest.raises(FormatError, match="does not know"):
        fpstore.Pipeline.from_config({**pipe.config, "future": 1}, idf)
    with pytest.raises(FormatError):
        fpstore.Pipeline.from_config({**pipe.config, "shingle": 0}, idf)


@pytest.mark.parametrize(
    "kwargs",
    [{"shingle": 0}, {"shingle": 17}, {"seed": -1}, {"seed": 2**64}, {"weighting": "bm25"}, {"weighting": "idf"},
     {"min_tokens": -1}, {"kind": "bogus"}, {"html": "bogus"}, {"weighting": "tf"}, {"kind": "simhash64", "weighting": "set"},
     {"kind": "simhash64", "weighting": "idf"}],
)
def test_bad_pipeline_parameters(kwargs):
    """Out-of-range parameters raise InputError (a ValueError)."""
    with pytest.raises(InputError):
        fpstore.Pipeline(**kwargs)


def test_idf_table_weights_stopwords_near_zero_and_round_trips():
    """A word in every document weighs 0; rare words weigh more; bytes round-trip to the same digest."""
    rng = random.Random(1)
    docs = [f"the {' '.join(rng.choice(VOCAB) for _ in range(30))}" for _ in range(300)]
    idf = fpstore.IdfTable.build(docs)
    assert idf.weights["the"] == 0
    assert idf.default > max(w for t, w in idf.weights.items() if t != "the") >= 1
    again = fpstore.IdfTable.from_bytes(idf.to_bytes())
    assert again.digest == idf.digest and again.weights == idf.weights


@pytest.mark.parametrize("blob", [b"", b"\x00", b"\x81\xa1v\x02", b"\x84\xa1v\x01\xa7default\x05\xa6tokens\x91\xa1a\xa7weights\xc4\x00"])
def test_idf_from_hostile_bytes(blob):
    """Garbage, wrong versions and inconsistent idf tables raise FormatError."""
    with pytest.raises(FormatError):
        fpstore.IdfTable.from_bytes(blob)


def test_idf_weighting_lets_stopwords_barely_vote():
    """With idf weights, a run of stopword-only shingles barely moves the fingerprint; with tf it does."""
    rng = random.Random(5)
    docs = [" ".join(rng.choice(VOCAB) for _ in range(200)) for _ in range(50)]
    stop = ["the", "of", "and", "a", "to"]
    idf = fpstore.IdfTable.build([d + " " + " ".join(stop) for d in docs])
    tf, weighted = fpstore.Pipeline(kind="simhash64"), fpstore.Pipeline(kind="simhash64", weighting="idf", idf=idf)
    moved_tf = moved_idf = 0
    for d in docs:
        noisy = d + " " + " ".join(rng.choice(stop) for _ in range(150))
        moved_tf += fpstore.hamming(tf.fingerprint(d), tf.fingerprint(noisy))
        moved_idf += fpstore.hamming(weighted.fingerprint(d), weighted.fingerprint(noisy))
    assert moved_idf < moved_tf / 2


def test_short_texts_are_flagged():
    """Below min_tokens the signature says short; at or above it, not."""
    pipe = fpstore.Pipeline(min_tokens=5)
    assert pipe.signature("one two three four").short
    assert not pipe.signature("one two three four five").short
    assert pipe.signature("").tokens == 0 and pipe.signature("").short


def test_content_hash_follows_the_token_stream():
    """Texts with equal token streams share a content hash; one changed token changes it."""
    pipe = fpstore.Pipeline()
    assert pipe.signature("A b, C!").content_hash == pipe.signature("a B c").content_hash
    assert pipe.signature("a b c").content_hash != pipe.signature("a b d").content_hash
    assert pipe.signature("ab c").content_hash != pipe.signature("a bc").content_hash


@pytest.mark.parametrize("bad", [None, 12, 1.5, ["text"]])
def test_non_text_input(bad):
    """Non-text input raises TypeError."""
    with pytest.raises(TypeError):
        fpstore.Pipeline().fingerprint(bad)


def test_batch_with_non_text_names_its_index():
    """A bad element in a batch raises TypeError naming its index, and nothing is computed."""
    with pytest.raises(TypeError, match="index 2"):
        fpstore.Pipeline().fingerprint_many(["a", "b", None, "d"])
    with pytest.raises(TypeError, match="sequence"):
        fpstore.Pipeline().fingerprint_many("just one text")


def test_bytes_input_equals_decoded_text():
    """Bytes are fingerprinted as their UTF-8 decoding (invalid bytes as U+FFFD)."""
    pipe = fpstore.Pipeline()
    assert pipe.fingerprint("café au lait".encode()) == pipe.fingerprint("café au lait")
    assert pipe.fingerprint(b"ab\xff cd ef gh") == pipe.fingerprint("ab\ufffd cd ef gh")


def test_threads_give_the_same_answers():
    """fingerprint_many on 1 and 2 threads returns identical arrays."""
    rng = random.Random(9)
    docs = [" ".join(rng.choice(VOCAB) for _ in range(rng.randrange(0, 60))) for _ in range(2000)]
    pipe = fpstore.Pipeline()
    one, two = pipe.fingerprint_many(docs, threads=1), pipe.fingerprint_many(docs, threads=2)
    assert one.dtype == np.uint64 and np.array_equal(one, two)
    assert one[5] == pipe.fingerprint(docs[5])


@pytest.mark.skipif(_backend.PURE_PYTHON, reason="a bound on the compiled kernel's memory; the twin is the specification, not the implementation")
def test_100mb_text_in_constant_extra_memory():
    """A 100 MB text is fingerprinted without the kernel allocating per token or per shingle."""
    big = ("lorem ipsum dolor sit amet " * 4_000_000)[:100_000_000]
    pipe = fpstore.Pipeline()
    tracemalloc.start()
    try:
        sig = pipe.signature(big)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sig.tokens > 18_000_000
    assert peak < 1_000_000


def test_hamming_helpers():
    """hamming counts differing bits; hamming_many is element-wise; bad values raise InputError."""
    assert fpstore.hamming(0, 2**64 - 1) == 64 and fpstore.hamming(0b1011, 0b0001) == 2
    a = np.array([0, 1, 2**64 - 1], dtype=np.uint64)
    assert fpstore.hamming_many(a, np.uint64(0)).tolist() == [0, 1, 64]
    with pytest.raises(InputError):
        fpstore.hamming(-1, 0)
    with pytest.raises(InputError):
        fpstore.hamming_many(np.array([1.0]), a)


def test_minhash1_counts_each_distinct_shingle_once():
    """Repeating a text's shingles changes nothing for minhash1 (a set), but moves simhash64 tf."""
    rng = random.Random(11)
    base = _doc(rng, 200)
    repeated = " ".join(base + base[:50] * 4)
    once = " ".join(base + base[:50])
    mh = fpstore.Pipeline()
    assert mh.fingerprint(once) == mh.fingerprint(" ".join(base + base[:50] + base[:50]))
    assert fpstore.hamming(mh.fingerprint(once), mh.fingerprint(repeated)) <= 2  # only the seams differ


def test_minhash1_distance_tracks_jaccard():
    """Mean distance over many pairs is 32 * (1 - J) within a few percent, for J = 0.5 and J = 0.8."""
    rng = random.Random(12)
    pipe = fpstore.Pipeline(shingle=1)
    for target in (0.5, 0.8):
        ds = []
        for i in range(300):
            common = [f"c{i}x{j}" for j in range(int(400 * target / (1 + target) * 2))]
            rest = int((len(common) / target - len(common)) / 2)
            a = common + [f"a{i}x{j}" for j in range(rest)]
            b = common + [f"b{i}x{j}" for j in range(rest)]
            j_true = len(common) / (len(common) + 2 * rest)
            ds.append(fpstore.hamming(pipe.fingerprint(" ".join(a)), pipe.fingerprint(" ".join(b))) / (32 * (1 - j_true)))
        assert 0.9 < np.mean(ds) < 1.1, (target, np.mean(ds))


PAGE = (
    "<!DOCTYPE html><html><head><title>{t}</title><script>var a = {t!r};</script></head><body>"
    "<nav>{nav}</nav><main><h1>{t}</h1><p>{body}</p></main><footer>{foot}</footer></body></html>"
)


def test_raw_html_is_reduced_to_its_main_content():
    """A raw page fingerprints like its main text; navigation, footer and scripts do not vote."""
    rng = random.Random(13)
    body = " ".join(_doc(rng, 300))
    a = PAGE.format(t="Title", nav="Home Docs Blog " * 30, body=body, foot="Copyright 2024")
    b = PAGE.format(t="Title", nav="Other site menu entirely " * 50, body=body, foot="(c) someone else, 1999")
    pipe = fpstore.Pipeline()
    assert pipe.fingerprint(a) == pipe.fingerprint(b) == pipe.fingerprint("Title " + body)
    assert pipe.fingerprint(a.encode()) == pipe.fingerprint(a)
    assert pipe.signatures([a, b]).values.tolist() == [pipe.fingerprint(a)] * 2
    off = fpstore.Pipeline(html="off")
    assert off.fingerprint(a) != off.fingerprint(b)


def test_html_off_and_plain_text_are_untouched():
    """Text that does not look like HTML is fingerprinted as it is, whatever the html mode."""
    t = "<stdin> is a file name; 3 < 4 and 5 > 2 " * 10
    assert fpstore.Pipeline().fingerprint(t) == fpstore.Pipeline(html="off").fingerprint(t)
    assert fpstore.Pipeline().prepare("plain text") == "plain text"
    with pytest.raises(TypeError, match="index 1"):
        fpstore.Pipeline().signatures(["<p>a</p>", 5])


def test_store_add_takes_raw_html(tmp_path):
    """Store.add(text=raw HTML) fingerprints the main content: the plain text finds the page, another
    site's wrapper around the same article is a match, and the store records the new pipeline."""
    rng = random.Random(14)
    body = " ".join(_doc(rng, 300))
    page = PAGE.format(t="Title", nav="Home Docs Blog " * 30, body=body, foot="Copyright 2024")
    other_site = PAGE.format(t="Title", nav="Another menu " * 40, body=body, foot="Mirror, 2025")
    with fpstore.open(tmp_path / "s", k=5) as store:  # answers within k bits: the default pipeline less its sketch
        assert store.pipeline.id == fpstore.Pipeline(sketch_bits=0).id
        store.add("page", text=page)
        assert [m.key for m in store.query(text="Title " + body)] == ["page"]
        assert [(m.key, m.distance) for m in store.query(text=other_site)] == [("page", 0)]
        unrelated = PAGE.format(t="Other", nav="Home Docs Blog " * 30, body=" ".join(_doc(rng, 300)), foot="Copyright 2024")
        assert store.query(text=unrelated) == []


def test_a_config_with_a_null_sketch_is_refused_and_mismatches_name_the_missing_fields_defaults():
    """A store header's ``"sketch_bits": None`` is not a length: refused as a FormatError, where
    the constructor's None default would have read it as 512. A mismatch names a field the config
    leaves out by its value (0 bits, html off), not None."""
    config = fpstore.Pipeline(sketch_bits=0).config
    for bad in (None, True, "512"):
        with pytest.raises(FormatError, match="sketch_bits"):
            fpstore.Pipeline.from_config({**config, "sketch_bits": bad})
    text = fpstore.Pipeline(sketch_bits=0).mismatch(fpstore.Pipeline())
    assert text == "sketch_bits: store has 0, given 512", text
    assert fpstore.Pipeline(html="off", sketch_bits=0).mismatch(fpstore.Pipeline(sketch_bits=0)) == "html: store has 'off', given 'main-v2'"

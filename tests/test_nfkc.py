"""NFKC in the compiled kernel: equal to ``unicodedata`` on any str, fingerprints equal to those of
the text normalised by ``unicodedata`` first (the path before the kernel computed NFKC), its
tables equal to what the generator makes, and refused when malformed."""

from __future__ import annotations

import random
import time
import unicodedata

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fpstore
from fpstore import _backend
from fpstore.fingerprint import _nfkc_pack, _nfkc_v1, _simhash_py, text
from tests.conftest import load_twins

SAME_UNICODE = unicodedata.unidata_version == _nfkc_v1.UNICODE_VERSION
KINDS = [_simhash_py.KIND_SIMHASH64, _simhash_py.KIND_MINHASH1]


def _code_points(pred) -> list[int]:
    return [cp for cp in range(0x110000) if pred(cp)]


_ACTIVE = _code_points(lambda cp: text.ACTIVE_BITS[cp >> 3] >> (cp & 7) & 1)
_MARKS = _code_points(lambda cp: unicodedata.combining(chr(cp)) != 0)
_COMPAT = [row[0] for row in _nfkc_v1.DECOMPOSITIONS]
_HANGUL = [
    *range(0x1100, 0x1113),  # leading jamo
    *range(0x1161, 0x1176),  # vowel jamo
    *range(0x11A7, 0x11C3),  # trailing jamo (0x11A7 is one below the first, so never composes)
    0xAC00,
    0xAC01,
    0xAC1C,
    0xD7A3,
    0xD7A4,  # syllables LV, LVT, LV, the last one, the first after
    *range(0x3131, 0x318F),  # compatibility jamo: NFKC maps them to conjoining jamo, which compose
    *range(0xFFA0, 0xFFDD),  # half-width jamo
]
_CJK_COMPAT = [*range(0xF900, 0xFB00), *range(0x2F800, 0x2FA20)]
_EDGES = [0xD800, 0xDBFF, 0xDC00, 0xDFFF, 0x10FFFF, 0xFFFE, 0xFDD0, 0x0378, 0xE0001, 0x110000 - 2, 0]
_PLAIN = [ord(c) for c in "aeiouAEZ09 ,.\n\u00e9\u2019"]

# Drawn mostly from code points NFKC changes or that combine: the inputs where it can go wrong.
code_point = st.one_of(
    st.sampled_from(_ACTIVE),
    st.sampled_from(_MARKS),
    st.sampled_from(_COMPAT),
    st.sampled_from(_HANGUL),
    st.sampled_from(_CJK_COMPAT),
    st.sampled_from(_EDGES),
    st.sampled_from(_PLAIN),
    st.integers(0, 0x10FFFF),
)
texts = st.lists(code_point, max_size=80).map(lambda cps: "".join(map(chr, cps)))


def _random_text(rng: random.Random, n: int) -> str:
    pools = (_ACTIVE, _MARKS, _COMPAT, _HANGUL, _CJK_COMPAT, _EDGES, _PLAIN, _PLAIN)
    return "".join(chr(rng.choice(rng.choice(pools))) if rng.random() < 0.95 else chr(rng.randrange(0x110000)) for _ in range(n))


@given(texts)
@settings(max_examples=600)
def test_kernel_nfkc_equals_unicodedata(s):
    """The kernel's NFKC equals unicodedata's on text dense in what NFKC rewrites, reorders or composes."""
    assert text.nfkc(s) == unicodedata.normalize("NFKC", s)


def test_kernel_nfkc_equals_unicodedata_on_seeded_random_text():
    """5,000 seeded texts of 0..300 code points, and 20 of 5,000-20,000 (normalised without the GIL)."""
    rng = random.Random(20)
    for n in [rng.randrange(300) for _ in range(5_000)] + [rng.randrange(5_000, 20_000) for _ in range(20)]:
        s = _random_text(rng, n)
        assert text.nfkc(s) == unicodedata.normalize("NFKC", s), [hex(ord(c)) for c in s]


def test_every_code_point_between_a_starter_and_a_mark():
    """Each of the 0x110000 code points, surrogates and U+10FFFF included, after a letter and
    before a composing mark: its decomposition, class and compositions on both sides."""
    for cp in range(0x110000):
        s = "a" + chr(cp) + "\u0301"
        assert text.nfkc(s) == unicodedata.normalize("NFKC", s), hex(cp)


@pytest.mark.skipif(_backend.PURE_PYTHON, reason="the pure-Python backend normalises with unicodedata, which is quadratic here")
def test_hostile_run_of_marks_is_linear():
    """A million alternating marks of two classes sort in linear time (unicodedata takes quadratic)."""
    k = 500_000
    s = "a" + "\u0301\u0316" * k
    t0 = time.perf_counter()
    out = text.nfkc(s)
    assert time.perf_counter() - t0 < 5  # about 30 ms; quadratic would be hours
    # Ordered: the class-220 marks first; the first acute composes with "a"; the rest stay.
    assert out == "\u00e1" + "\u0316" * k + "\u0301" * (k - 1)
    assert unicodedata.normalize("NFKC", s[:201]) == "\u00e1" + "\u0316" * 100 + "\u0301" * 99


def test_ascii_and_inert_text_come_back_as_the_same_object():
    """Text NFKC cannot change is returned as it is, not copied."""
    for s in ("plain ascii", "curly \u2019quotes\u2019 \u2014 and caf\u00e9", ""):
        assert text.nfkc(s) is s


_installed: list = []


def _twins():
    """(compiled, python) kernels with the fold, active and NFKC tables installed (``text``
    installed them in the backend's kernel; the other needs them too)."""
    if not _installed:
        for mod in load_twins("simhash"):
            mod.set_fold_table(text.FOLD)
            mod.set_active_table(text.ACTIVE_BITS)
            mod.set_nfkc_tables(*_nfkc_pack.pack(), fallback=text._NFKC_FALLBACK)
            _installed.append(mod)
    return tuple(_installed)


@given(st.lists(texts | st.text(max_size=40), max_size=8), st.integers(1, 4), st.integers(0, 2**64 - 1), st.sampled_from(KINDS))
@settings(max_examples=150)
def test_fingerprints_equal_those_of_text_normalised_by_unicodedata(raws, shingle, seed, kind):
    """fingerprint and fingerprint_batch with nfkc=True, in both twins, equal the fingerprint of
    the text put in NFKC form by unicodedata: the fingerprints of before this change."""
    c, py = _twins()
    n = len(raws)
    want = [c.fingerprint(unicodedata.normalize("NFKC", r), seed, shingle, None, kind) for r in raws]
    for mod in (c, py):
        assert [mod.fingerprint(r, seed, shingle, None, kind, True) for r in raws] == want
        fp, tok, dig = np.zeros(n, np.uint64), np.zeros(n, np.int64), np.zeros((n, 2), np.uint64)
        mod.fingerprint_batch(raws, 0, n, seed, shingle, None, fp, tok, dig, kind, True)
        assert [(int(fp[i]), int(tok[i]), int(dig[i, 0]), int(dig[i, 1])) for i in range(n)] == want


def test_pipeline_batch_and_single_agree_on_nfkc_rich_text():
    """fingerprint_many on 1 and 2 threads, signature, and the old path (unicodedata first)
    agree on long texts full of NFKC-active stretches (the GIL-free path of the kernel)."""
    rng = random.Random(5)
    docs = [" ".join(_random_text(rng, rng.randrange(1, 12)) for _ in range(rng.randrange(0, 500))) for _ in range(300)]
    for pipe in (fpstore.Pipeline(), fpstore.Pipeline(kind="simhash64", html="off")):
        one, two = pipe.fingerprint_many(docs, threads=1), pipe.fingerprint_many(docs, threads=2)
        assert np.array_equal(one, two)
        old = [pipe.signature(unicodedata.normalize("NFKC", pipe.prepare(d))).fingerprint for d in docs[:100]]
        assert one[:100].tolist() == old
        assert [pipe.signature(d).fingerprint for d in docs[:100]] == old


@pytest.fixture
def marked_fallback():
    """The kernel's tables installed with a fallback that marks what it normalises; afterwards
    the tables as ``text`` installed them."""
    c, _ = load_twins("simhash")
    seen: list[str] = []

    def fallback(s: str) -> str:
        seen.append(s)
        return unicodedata.normalize("NFKC", s) + " fallback"

    c.set_nfkc_tables(*_nfkc_pack.pack(), fallback=fallback)
    try:
        yield c, seen
    finally:
        c.set_nfkc_tables(*_nfkc_pack.pack(), fallback=text._NFKC_FALLBACK)


def test_unassigned_code_points_go_to_the_fallback(marked_fallback):
    """With a fallback installed (a Python of another Unicode version), a text holding a code point
    the tables call unassigned is normalised by it, whole; other texts are not."""
    c, seen = marked_fallback
    assert c.nfkc("x\u0378 y") == "x\u0378 y fallback"
    assert c.nfkc("\ufb01 e\u0301") == "fi \u00e9" and seen == ["x\u0378 y"]
    docs = ["\ufb01ne \u0378 words", "plain", "\ufb01ne words", "\U000e0080 x"]
    n = len(docs)
    fp, tok, dig = np.zeros(n, np.uint64), np.zeros(n, np.int64), np.zeros((n, 2), np.uint64)
    c.fingerprint_batch(docs, 0, n, 1, 2, None, fp, tok, dig, 0, True)
    want = [
        c.fingerprint(unicodedata.normalize("NFKC", d) + (" fallback" if i in (0, 3) else ""), 1, 2, None, 0) for i, d in enumerate(docs)
    ]
    assert [(int(fp[i]), int(tok[i]), int(dig[i, 0]), int(dig[i, 1])) for i in range(n)] == want
    assert c.fingerprint(docs[0] * 1000, 1, 2, None, 0, True) == c.fingerprint(
        unicodedata.normalize("NFKC", docs[0] * 1000) + " fallback", 1, 2, None, 0
    )


def test_a_fallback_must_return_str(marked_fallback):
    c, _ = marked_fallback
    c.set_nfkc_tables(*_nfkc_pack.pack(), fallback=lambda s: s.encode())
    with pytest.raises(TypeError, match="not str"):
        c.nfkc("\u0378")
    with pytest.raises(TypeError):
        c.set_nfkc_tables(*_nfkc_pack.pack(), fallback="NFKC")


def test_fallback_is_installed_only_for_another_unicode_version():
    assert (text._NFKC_FALLBACK is None) == SAME_UNICODE


def _malformed() -> list[tuple[str, tuple]]:
    t = _nfkc_pack.pack()
    stage2 = t.stage2.copy()
    stage2[5] = (3 << _nfkc_pack.LEN_SHIFT) | ((len(t.pool) - 2) << _nfkc_pack.OFF_SHIFT)
    stage1 = t.stage1.copy()
    stage1[7] = len(t.stage2) // 128
    pool = t.pool.copy()
    pool[0] = 0x110000
    comp = t.comp.copy()
    comp[comp == 0] = 1 << 42 | 1 << 21 | 0x41
    return [
        ("stage1", (t.stage1[:-1], t.stage2, t.pool, t.comp)),
        ("stage2", (t.stage1, t.stage2[:-1], t.pool, t.comp)),
        ("names block", (stage1, t.stage2, t.pool, t.comp)),
        ("power-of-two", (t.stage1, t.stage2, t.pool, t.comp[:-1])),
        ("empty slot", (t.stage1, t.stage2, t.pool, comp)),
        ("past the end of pool", (t.stage1, stage2, t.pool, t.comp)),
        ("not a code point", (t.stage1, t.stage2, pool, t.comp)),
    ]


@pytest.mark.parametrize("case", range(len(_malformed())))
def test_malformed_tables_are_refused(case):
    """Tables whose indices would lead the kernel outside them raise ValueError and leave the
    installed ones in place (the twin checks the shapes, the kernel every index)."""
    what, args = _malformed()[case]
    c, py = load_twins("simhash")
    mods = (c, py) if case < 5 else (c,)
    for mod in mods:
        with pytest.raises(ValueError, match=what):
            mod.set_nfkc_tables(*args)
    assert c.nfkc("\ufb01") == "fi"


@pytest.mark.skipif(not SAME_UNICODE, reason="the shipped tables are of another Unicode version than this Python's database")
def test_shipped_nfkc_tables_are_the_generators():
    """The committed _nfkc_v1.py is what tools/gen_unicode_tables.py makes from this Python's database."""
    from tools import gen_unicode_tables

    assert gen_unicode_tables.nfkc_module() == gen_unicode_tables.OUT_NFKC.read_text()


def test_packed_tables_describe_the_generated_ones():
    """Every record of the packed two-stage table holds its code point's class and NFKD form."""
    t = _nfkc_pack.pack()
    cps = np.arange(0x110000)
    rec = t.stage2[t.stage1[cps >> 7].astype(np.int64) * 128 + (cps & 127)]
    for start, end, ccc in _nfkc_v1.CCC_RANGES[::7]:
        assert (rec[start:end] & 0xFF == ccc).all()
    for cp, *form in _nfkc_v1.DECOMPOSITIONS[::11]:
        r = int(rec[cp])
        off, n = r >> _nfkc_pack.OFF_SHIFT, (r >> _nfkc_pack.LEN_SHIFT) & 31
        assert t.pool[off : off + n].tolist() == form
    assert rec[0x0378] & _nfkc_pack.UNASSIGNED and not rec[ord("a")] & (_nfkc_pack.UNASSIGNED | _nfkc_pack.SECOND)
    assert rec[0x0301] & _nfkc_pack.SECOND and rec[0x1161] & _nfkc_pack.SECOND

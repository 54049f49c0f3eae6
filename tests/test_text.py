"""The v1 token rule: normalisation, the character table, and input types."""

from __future__ import annotations

import unicodedata

import pytest

from fpstore.fingerprint import _unicode_v1, text


def test_tokens_lowercase_and_split_on_non_alphanumerics():
    """Case and punctuation do not matter; runs of letters and digits are tokens."""
    assert text.tokens("The  QUICK, brown fox! 42x") == ["the", "quick", "brown", "fox", "42x"]


def test_nfkc_unifies_composed_decomposed_and_compatibility_forms():
    """Decomposed accents, ligatures and full-width letters give the same tokens as their plain forms."""
    assert text.tokens("cafe\u0301 ﬁne Ｆｕｌｌ") == ["café", "fine", "full"]


def test_simple_lowercase_of_dotted_capital_i_and_final_sigma():
    """U+0130 folds to 'i' (simple mapping) and Σ to σ whatever its position (no context rules)."""
    assert text.tokens("İstanbul ΟΔΟΣ") == ["istanbul", "οδοσ"]


def test_marks_stay_inside_tokens():
    """A combining mark with no precomposed form stays inside its token instead of splitting it."""
    assert text.tokens("नमस्ते दुनिया") == ["नमस्ते", "दुनिया"]


def test_bytes_are_utf8_with_replacement():
    """Bytes decode as UTF-8; an invalid sequence becomes U+FFFD, a separator."""
    assert text.normalize(b"caf\xc3\xa9 ok") == "café ok"
    assert text.tokens(b"ab\xffcd") == ["ab", "cd"]


@pytest.mark.parametrize("bad", [None, 3, 4.5, ["a"], object()])
def test_non_text_raises_type_error(bad):
    """Anything but str or bytes-like is a TypeError, not a silent str() conversion."""
    with pytest.raises(TypeError, match="must be str"):
        text.normalize(bad)


def test_batch_index_in_message():
    """normalize names the batch position it was given."""
    with pytest.raises(TypeError, match="index 7"):
        text.normalize(None, index=7)


def test_lone_surrogates_are_separators():
    """Lone surrogates (legal in a Python str) separate tokens instead of crashing."""
    assert text.tokens("ab\ud800cd\udfff") == ["ab", "cd"]


def test_fold_table_shape_and_separators():
    """FOLD covers every code point; separators map to 0 and are not writable."""
    assert text.FOLD.shape == (0x110000,)
    assert text.FOLD[ord(" ")] == 0 and text.FOLD[ord("A")] == ord("a") and text.FOLD[0xD800] == 0
    with pytest.raises(ValueError):
        text.FOLD[0] = 1


@pytest.mark.skipif(
    unicodedata.unidata_version != _unicode_v1.UNICODE_VERSION,
    reason="the shipped table is pinned to another Unicode version than this Python's database",
)
def test_shipped_table_matches_the_rule():
    """The committed table equals the rule evaluated on this Python's Unicode database."""
    fold = text.FOLD
    for cp in range(0x110000):
        ch = chr(cp)
        is_tok = not (0xD800 <= cp <= 0xDFFF) and unicodedata.category(ch)[0] in "LNM"
        expected = ord(ch.lower()[0]) if is_tok else 0
        assert fold[cp] == expected, hex(cp)


from hypothesis import given, settings, strategies as st  # noqa: E402

_nfkc_alphabet = st.sampled_from(
    list("aeiouAEZ09 .,-\t\n") + ["\u0301", "\u0308", "\u0327", "\u1100", "\u1161", "\u11a8", "\uac00", "\u2026", "\ufb01",
     "\uff21", "\u00e9", "e\u0301", "\u0390", "\u1e9b\u0323", "\u0d4a", "\u0d46\u0d3e", "\u2126", "\u00bd", "\u3000", "\u0130", "\u1f71"]
)


@pytest.mark.slow
@given(st.lists(_nfkc_alphabet, max_size=60).map("".join) | st.text(max_size=80))
@settings(max_examples=500)
def test_segmented_nfkc_equals_unicodedata(s):
    """nfkc() (normalising only non-ASCII stretches) equals unicodedata's NFKC of the whole text."""
    assert text.nfkc(s) == unicodedata.normalize("NFKC", s)


@given(st.lists(_nfkc_alphabet, max_size=60).map("".join) | st.text(max_size=80) | st.text(alphabet=st.characters(codec=None), max_size=80))
@settings(max_examples=300)
def test_active_runs_agree_between_twins(s):
    """The compiled scan finds the same runs of NFKC-active code points as its Python twin."""
    from tests.conftest import load_twins

    c, py = load_twins("simhash")
    for mod in (c, py):
        mod.set_active_table(text.ACTIVE_BITS)
    runs = c.nfkc_active_runs(s)
    assert runs == py.nfkc_active_runs(s)
    assert all(not text.ACTIVE_BITS[ord(ch) >> 3] >> (ord(ch) & 7) & 1 for ch in s[: runs[0] if runs else len(s)])


def test_inert_code_points_are_inert_under_this_python():
    """Every code point the committed table calls inert is, by this Python's unicodedata, a starter
    that is its own NFKC form: the condition nfkc()'s segmentation relies on. A later Unicode
    keeps this by its stability policy; this test notices if it ever does not."""
    bad = [
        hex(cp)
        for a, b in _unicode_v1.NFKC_INERT_RANGES
        for cp in range(a, b)
        if unicodedata.combining(chr(cp)) or unicodedata.normalize("NFKC", chr(cp)) != chr(cp)
    ]
    assert bad == []
    # An inert character followed by a mark that composes with it: the run reaches back one.
    assert text.nfkc("x\u00e9\u0323y\u2026") == unicodedata.normalize("NFKC", "x\u00e9\u0323y\u2026")


@given(st.lists(st.tuples(st.integers(0, 120), _nfkc_alphabet | st.text(max_size=3)), max_size=12))
@settings(max_examples=300)
def test_sparse_nfkc_equals_unicodedata(pieces):
    """Long mostly-ASCII text with a few active stretches takes the per-run path of nfkc()."""
    s = "".join("lorem ipsum " * (n // 12) + "x" * (n % 12) + piece for n, piece in pieces)
    assert text.nfkc(s) == unicodedata.normalize("NFKC", s)
    assert text.normalize(s) == unicodedata.normalize("NFKC", s)

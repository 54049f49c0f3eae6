"""The compiled HTML nesting scan (``fpstore._html_c``) against its twin, the specification
(``fpstore/fingerprint/_html_py.py``): equal results on the project's examples, on generated tag
soup and character soup, and on real pages found on this machine."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fpstore import _backend
from fpstore.fingerprint import _html_py as twin
from fpstore.fingerprint import html
from tests.test_edges_ingest import EVASIONS, ORDINARY, TAGS, deep

def _built() -> bool:
    try:
        import fpstore._html_c  # noqa: F401
    except ImportError:
        return False
    return True


# The comparisons need the compiled kernel only, whichever backend runs the store.
needs_compiled = pytest.mark.skipif(not _built(), reason="the compiled kernels are not built here")

LIMITS = (0, 1, 3, 12, html.MAX_DEPTH, 10**9)


def compiled():
    import fpstore._html_c

    return fpstore._html_c


def same(doc: str, limits=LIMITS) -> None:
    kernel = compiled()
    for limit in limits:
        assert kernel.nesting_depth(doc, limit) == twin.nesting_depth(doc, limit), (limit, doc[:300])


def test_html_uses_the_selected_backend():
    """html.nesting_depth runs the compiled kernel, or the twin under FPSTORE_PUREPYTHON=1."""
    assert html._kernel is (twin if _backend.PURE_PYTHON else compiled())
    assert html.nesting_depth("<div><div>x", 100) == twin.nesting_depth("<div><div>x", 100) == 4


def _bound_pages() -> list[str]:
    levels = html.MAX_DEPTH - 3
    at = "<html><body>" + "<div>" * levels + "<main>kept</main><nav>dropped</nav>" + "</div>" * levels + "<i></i>" * 2000
    return [at, at.replace("<main>", "<div><main>", 1)]


TABLES = ["_VOID", "_HEADINGS", "_FORMATTING", "_SPECIAL", "_CLOSES_P", "_SCOPED_END", "_TABLE_PARTS", "_BREAKOUT",
          "_INTEGRATION", "_NO_RAW", "_RUBY_IMPLIED", "_MARKERS", "_SCOPE_NAMES", "_SIMPLE_START", "_SIMPLE_END",
          "_NOT_PLAIN"]


@needs_compiled
def test_kernel_tables_are_the_twins():
    """The name tables compiled into the kernel are the twin's, name for name."""
    kernel = compiled()
    for table in TABLES:
        assert getattr(kernel, table) == getattr(twin, table), table
    assert kernel._RAW == twin.RAW


EDGES = [
    "",
    "<",
    "plain text without tags",
    "<dialog>x</dialog><p><dialog>y",  # a block without scope classes (the twin once raised KeyError here)
    "<body><svg><font color=red><div>x",
    "<body><svg><font face><div>x",
    "<body><svg><font data-size=1><div>x",
    "<body><svg><font SIZE><div>x",
    "<body><svg><font colour><div>x",
    "<body><math><mi><b>x</b><div><span>",
    "<body><math><annotation-xml><svg><g><g></annotation-xml>",
    "<body><svg><foreignObject><div><p></svg></p>",
    "<body><svg><desc><svg/><g/><g></desc></svg>",
    "<!---->" "<!-->" "<!--->" "<!-- a --!>" "<div>",
    "<!-- unclosed <div><div>",
    "<!doctype html><?xml x?></ ><//x></1><div>",
    "<DIV><Div><dIV>x</div></DIV>",
    "<SCRIPT>x</script ><div></SCRIPT><div>",
    "<script>never closed <div><div>",
    "<style>a</STYLEx></style/><div>",
    "<textarea></textareA\t><b>",
    "<title><div></title\n><div>",
    "<select><script>x</script><div></select>",
    "<template><style><div></style></template><div>",
    "<a href='x>y'><div title=\"a>b\">c",
    "<div a=\"unclosed quote <div><div>",
    "<div a='unclosed <div>",
    "<div a= b = c d= 'e'/><div/ ><div / x>",
    "<div =\"><div>\"><div>",
    "<div\x0b><div\x0c><div\u00a0x>",
    "<d\u00efv><d\u00cfv></d\u00efv><\u0434\u0438\u0432><\U0001f600>",
    "<K\u212a><s\u017f><span></\u017fpan>",
    "<svg><font \u017fize><div>x",  # re.A: no non-ASCII case folding in the attribute or end-tag tests
    "<script></\u017fcript><div><div>",
    "<table><tr><td><table><td><caption><tr><th><table>",
    "<table><b><tr><td></b></td></table></b>",
    "<ruby><rb>a<rt>b<rtc><rp>c<rt>d</ruby>",
    "<ul><li><ol><li><li></ol><dl><dt><dd><dt>",
    "<h1><h2><h3></h1></h2>",
    "<button><p><button></p>",
    "<select><option><optgroup><option></select><select><p></select>",
    "<p><a><a><a href=1><a href=1><a href=1><a href=1></a>",
    "".join(f"<b id={i % 4}>" for i in range(40)) + "<p>x</p>",
    "<object><b><applet><i><marquee><u></object></b></i></u>",
    "<html><head><head><body><body><html></html></body>",
    "<plaintext><div><div></plaintext>",
    "<xmp><div></xmp><listing><pre>",
    "<div" + " a" * 50,
    "<div>" * 40 + "<b>" * 40 + "</div>" * 20,
]


@needs_compiled
@pytest.mark.parametrize("name", sorted(EVASIONS) + sorted(ORDINARY))
def test_kernel_equals_twin_on_the_edge_examples(name):
    """The kernel counts as the twin on every nesting-depth example of tests/test_edges_ingest.py."""
    same({**EVASIONS, **ORDINARY}[name])


@needs_compiled
def test_kernel_equals_twin_on_deep_and_bound_pages():
    """Deep pages, and pages at and just over MAX_DEPTH, count the same."""
    for doc in [deep(100_000), deep(3000, "span"), deep(3000, "b"), *_bound_pages()]:
        same(doc)


@needs_compiled
@pytest.mark.parametrize("doc", EDGES)
def test_kernel_equals_twin_on_tokenizer_and_builder_edges(doc):
    """Comments, raw text, quotes, case, non-ASCII names, foreign content and the builder's special cases."""
    same(doc)
    same("<body>" + doc)
    same(doc.upper())


#: Every name the model knows, some it does not, and spellings that only ASCII-lowercase to them.
NAMES = sorted(
    set(TAGS)
    | twin._SPECIAL
    | twin._FORMATTING
    | twin._VOID
    | twin.RAW
    | twin._BREAKOUT
    | twin._INTEGRATION
    | twin._RUBY_IMPLIED
    | twin._TABLE_PARTS
    | twin._SCOPED_END
    | twin._CLOSES_P
    | {"svg", "math", "foreignObject", "annotation-xml", "dialog", "x", "my-el", "DIV", "Svg", "\u00e9l"}
)
ATTRS = ["", " id=1", " class='a b'", ' title="x>y"', " a=b/", " color=1", " face", " SIZE=2", " /", " x='<div>'",
         ' y="', " z='", " =q", " encoding=text/html", " href=1"]


@st.composite
def tag_soup(draw) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 80))):
        kind = draw(st.integers(0, 9))
        name = draw(st.sampled_from(NAMES))
        if kind <= 4:
            parts.append(f"<{name}{draw(st.sampled_from(ATTRS))}{draw(st.sampled_from(['>', '/>', ' >']))}")
        elif kind <= 6:
            parts.append(f"</{name}{draw(st.sampled_from(['', ' x', '/']))}>")
        elif kind == 7:
            parts.append(draw(st.sampled_from(["<!-- <div> -->", "<!--->", "<!-->", "<!-- x --!>", "<!--", "<!doctype html>",
                                               "<?php x ?>", "</ >", "< div>", "<"])))
        else:
            parts.append(draw(st.sampled_from(["x", " ", "a<b", "</script>", "</STYLE >", "</title", "\u00e9", "\U0001f600"])))
    doc = "".join(parts)
    if draw(st.booleans()):
        doc = doc[: draw(st.integers(0, len(doc)))]  # cut anywhere: inside a tag, a comment, a quote
    return doc


@pytest.mark.slow
@needs_compiled
@settings(max_examples=1000, database=None, derandomize=True, deadline=None)
@given(tag_soup(), st.sampled_from([2, 5, 10**9]))
def test_kernel_equals_twin_on_tag_soup(doc, limit):
    """Random tag soup (known and unknown names, attributes with quotes, comments, raw text, foreign content, tables)."""
    kernel = compiled()
    for d in (doc, "<body>" + doc):
        assert kernel.nesting_depth(d, limit) == twin.nesting_depth(d, limit)


@pytest.mark.slow
@needs_compiled
@settings(max_examples=3000, database=None, derandomize=True, deadline=None)
@given(st.text(alphabet="<>/!?-=\"' \t\nabdipstvABDSVé\u0434", max_size=120), st.sampled_from([3, 10**9]))
def test_kernel_equals_twin_on_character_soup(doc, limit):
    """Random strings of the characters the tokenizer reads: every way a tag, comment or quote can be cut."""
    assert compiled().nesting_depth(doc, limit) == twin.nesting_depth(doc, limit)


PAGES = "/tmp/htmlfiles.txt"


def real_pages() -> list[str]:
    if not os.path.exists(PAGES):
        return []
    with open(PAGES) as f:
        return [line.strip() for line in f if line.strip()]


@pytest.mark.slow
@needs_compiled
@pytest.mark.skipif(not real_pages(), reason=f"no list of real HTML pages at {PAGES}")
def test_kernel_equals_twin_on_real_pages():
    """Every readable page listed in /tmp/htmlfiles.txt counts the same, at the bound and unbounded."""
    checked = 0
    for path in real_pages():
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                doc = f.read()
        except OSError:
            continue
        same(doc, (html.MAX_DEPTH, 10**9))
        checked += 1
    if not checked:
        pytest.skip(f"none of the pages listed in {PAGES} is readable")

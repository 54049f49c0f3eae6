"""HTML detection and main-content extraction (fpstore.fingerprint.html, rule main-v1)."""

from __future__ import annotations

import pytest

from fpstore.fingerprint import html


@pytest.mark.parametrize(
    "doc",
    [
        "<!DOCTYPE html><html><body>x</body></html>",
        "  \n<!doctype HTML>\n<p>x",
        "<html lang=en><p>x",
        "\ufeff<html>",
        '<?xml version="1.0"?>\n<!-- generated --><html xmlns="http://www.w3.org/1999/xhtml">',
        "<!-- a comment -->\n<body>text</body>",
        "<p>A fragment</p><p>with</p><div>tags</div>",
    ],
)
def test_documents_and_fragments_are_html(doc):
    """Documents (doctype/html/head/body first) and tag-rich fragments are detected."""
    assert html.looks_like_html(doc)


@pytest.mark.parametrize(
    "text",
    ["", "   ", "plain text <b>with a tag</b> inside", "<stdin> is not markup", "3 < 4 and 5 > 2", "<", "<<<>>>",
     "<p>one tag only</p> and text"],
)
def test_plain_text_is_not_html(text):
    """Text that does not start with markup, or has too few known tags, is text."""
    assert not html.looks_like_html(text)


PAGE = """<!DOCTYPE html><html><head><title>T</title><style>body {color: red}</style>
<script>var secret = "script words";</script></head><body>
<header><h1>Site name</h1></header>
<nav><a href="/">Home</a> <a href="/docs">Docs</a></nav>
<div role="navigation">breadcrumbs here</div>
<main><h2>Heading</h2><p>The main &amp; only <em>content</em>.</p><div hidden>hidden words</div></main>
<aside>related links</aside><footer>Copyright notice</footer></body></html>"""


def test_main_text_keeps_main_and_drops_furniture():
    """main-v1 keeps the main element's text and drops scripts, styles, nav, header, footer, aside, hidden."""
    got = " ".join(html.main_text(PAGE).split())
    assert got == "Heading The main & only content ."
    for gone in ("script words", "Site name", "Home", "breadcrumbs", "related", "Copyright", "hidden", "color"):
        assert gone not in got


def test_role_main_and_single_article_are_roots():
    """Without <main>, [role=main] is the root; else the only <article>; several articles mean body."""
    assert html.main_text("<body><div>menu</div><div role=main>body text</div></body>").strip() == "body text"
    assert html.main_text("<body><div>menu</div><article>story</article></body>").strip() == "story"
    two = " ".join(html.main_text("<body><div>intro</div><article>a</article><article>b</article></body>").split())
    assert two == "intro a b"


def test_empty_main_falls_back_to_body():
    """A main element without text does not swallow the page."""
    assert " ".join(html.main_text("<body><main> </main><div>real text</div></body>").split()) == "real text"


def test_visible_text_has_no_heuristics():
    """visible_text keeps navigation and footers (it is the evaluation's neutral truth) but not scripts."""
    got = html.visible_text(PAGE)
    assert "Home" in got and "Copyright" in got and "content" in got
    assert "script words" not in got and "color" not in got


@pytest.mark.parametrize(
    "bad",
    ["<html><body><p>unclosed <b>bold <i>italic", "<<<<>>>>", "<html>" * 1000, "<p>\x00\ud800 bad chars</p>", "</div></div></p>", ""],
)
def test_broken_markup_never_raises(bad):
    """Broken or hostile markup parses like a browser would and returns a str."""
    assert isinstance(html.main_text(bad), str)
    assert isinstance(html.visible_text(bad), str)


def test_entities_and_inline_markup():
    """Entities are decoded; inline markup between words keeps them separate tokens."""
    got = html.main_text("<main><p>caf&eacute; &lt;tag&gt; <code>x</code><b>y</b></p></main>")
    assert "café" in got and "<tag>" in got
    assert got.split()[-2:] == ["x", "y"]

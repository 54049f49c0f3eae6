"""HTML detection and main-content extraction (fpstore.fingerprint.html, rules main-v1 and main-v2)."""

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
    got = " ".join(html.main_text(PAGE, "main-v1").split())
    assert got == "Heading The main & only content ."
    for gone in ("script words", "Site name", "Home", "breadcrumbs", "related", "Copyright", "hidden", "color"):
        assert gone not in got


def test_role_main_and_single_article_are_roots():
    """Without <main>, [role=main] is the root; else the only <article>; several articles mean body."""
    assert html.main_text("<body><div>menu</div><div role=main>body text</div></body>", "main-v1").strip() == "body text"
    assert html.main_text("<body><div>menu</div><article>story</article></body>", "main-v1").strip() == "story"
    two = " ".join(html.main_text("<body><div>intro</div><article>a</article><article>b</article></body>", "main-v1").split())
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


# -- main-v2 -----------------------------------------------------------------------------------------


def v2(doc: str) -> str:
    return " ".join(html.main_text(doc, "main-v2").split())


STORY = "<h1>Title</h1><p>First paragraph of the story.</p><p>Second paragraph of the story.</p>"
WORDPRESS = (
    '<body><header id="masthead">Site</header><div id="content"><main id="main" class="site-main"><article class="post">'
    + STORY
    + '<div class="sharedaddy">Share this: Email Print</div></article><nav class="post-navigation">Previous post</nav>'
    '<section class="comments" id="comments"><ol><li class="comment"><p>Great post!</p></li></ol>'
    '<div id="respond"><form><textarea></textarea><button>Post Comment</button></form></div></section>'
    '<section class="related-posts"><a href="/x">Another story</a></section><div class="newsletter">Sign up today</div>'
    "</main></div></body>"
)


def test_main_v2_drops_furniture_inside_the_main_element():
    """Comments, share lines, related stories, newsletter boxes and forms inside <main> go; main-v1 keeps them."""
    assert v2(WORDPRESS) == "Title First paragraph of the story. Second paragraph of the story."
    v1 = " ".join(html.main_text(WORDPRESS, "main-v1").split())
    for furniture in ("Great post!", "Share this", "Another story", "Sign up today", "Post Comment"):
        assert furniture in v1


@pytest.mark.parametrize(
    "attrs,dropped",
    [
        ('class="comment-list"', True),
        ('class="x  Comments"', True),  # upper case, among other tokens
        ('id="AD"', True),
        ('class="c&#111;mments"', True),  # a character reference in the value
        ("class=share", True),  # unquoted
        ("CLASS = 'related'", True),
        ('id="ad\rbox"', True),  # the parser reads CR as LF
        ('id="ad\x00"', True),  # and NUL as U+FFFD
        ('class="ad\u00a0box"', True),  # no-break space is not a class separator, but it splits words
        ('class="commentary"', False),  # a word is the whole run of letters and digits
        ('class="download"', False),
        ('data-class="comments"', False),  # another attribute
        ('class="header"', False),
        ('class="ad&#1;"', True),  # references the parser keeps (control characters, noncharacters)
        ('id="ad&#xfdd0;"', True),
        ('class="ad&amp;&notx"', True),  # "&not" before a letter stays as written in an attribute
        ("class=ad=x", True),  # unquoted values keep "=", '"' and non-ASCII spaces
        ("class=ad\"x", True),
        ("class=ad\u00a0x", True),
        ("title='class=\"x' class=\"ad\"", True),  # an attribute that spells another inside its value
        ("data-x='id=\"' class=\"ad\"", True),
        ('class="ad\ud800"', True),  # a lone surrogate
        ('class="coo\u212aie"', False),  # KELVIN SIGN is not an ASCII "k": words are ASCII
    ],
)
def test_main_v2_matches_furniture_names_as_words(attrs, dropped):
    """A class or id is split at every character other than a-z0-9; one word in BOILERPLATE_WORDS drops the element."""
    got = v2(f"<main><div {attrs}>maybe words</div><p>the rest</p></main>")
    assert got == ("the rest" if dropped else "maybe words the rest")


def test_main_v2_never_drops_the_root_or_what_holds_it():
    """html, body, main and article, and any element holding the chosen root, stay whatever their names."""
    assert v2('<body class="sidebar"><div class="ads"><main class="comments"><p>kept</p></main></div></body>') == "kept"
    assert v2('<body><article class="comments"><p>kept</p></article><div class="ad">gone</div></body>') == "kept"


def test_main_v2_keeps_a_page_wrapped_in_a_form():
    """ASP.NET pages wrap the whole body in one form: its text is the page's, not a form's."""
    assert v2("<body><form id=form1><div><h1>T</h1><p>article text here</p></div></form></body>") == "T article text here"
    assert v2("<body><form><main><p>article text</p></main></form></body>") == "article text"
    assert v2("<main><p>text</p><form><label>Name</label><input value=x><button>Send</button></form></main>") == "text Name"


@pytest.mark.parametrize("rule", html.EXTRACTORS)
@pytest.mark.parametrize("doc", ["<html hidden><p>x</p>", "<p>x</p><html role=banner>", "<html class=sidebar><p>x</p>"])
def test_furniture_attributes_on_the_html_element_do_not_raise(rule, doc):
    """A stray <html> tag passes its attributes to the root element, which is never removed."""
    assert html.main_text(doc, rule).split() == ["x"]


@pytest.mark.parametrize("rule", html.EXTRACTORS)
def test_an_html_element_inside_mathml_is_removed_like_any_other(rule):
    """Inside <math> an "html" tag makes a MathML element, not the root: hidden, it goes."""
    assert html.main_text("<p>keep</p><math><html hidden>secret</html></math>", rule).split() == ["keep"]


def test_main_v2_counts_nested_links_once():
    """A link inside a link (table cells allow it) is link text once, not twice."""
    links = "<div><a href=#><table><tr><td><a href=#>Links links links</a></td></tr></table></a></div>"
    assert v2(f"<body>{links}<div><p>Article text</p></div></body>") == "Article text"


DIVSOUP = (
    '<body><div id="hdr"><div class="logo">Site</div><a href="/">Home</a> <a href="/b">Blog</a></div><div id="wrap">'
    '<div class="left"><h3>Popular</h3><ul><li><a href="/p">A popular story with a long title</a></li></ul></div>'
    '<div class="content">{story}</div><div class="right"><p>{about}</p></div></div><div class="bottom">(c) 2024 Site</div></body>'
)


def test_main_v2_without_a_semantic_root_takes_the_element_holding_most_text():
    """Without main, [role=main] or one article, the root descends from body to the child holding more than
    half the text outside links; main-v1 takes the whole body."""
    page = DIVSOUP.format(story=STORY, about="About this site.")
    assert v2(page) == "Title First paragraph of the story. Second paragraph of the story."
    assert "Popular" in html.main_text(page, "main-v1") and "(c) 2024" in html.main_text(page, "main-v1")


def test_main_v2_descends_only_towards_the_only_h1():
    """A sidebar paragraph longer than the article does not become the root when the page has one h1."""
    about = "About this site: " + "we write about many things, at length. " * 10
    page = DIVSOUP.format(story=STORY, about=about)
    got = v2(page)
    assert "First paragraph" in got and "Blog" not in got and "(c) 2024" not in got  # stops at #wrap, around the article
    no_title = DIVSOUP.format(story=STORY.replace("<h1>Title</h1>", ""), about=about)
    assert v2(no_title) == " ".join(about.split())  # the majority alone takes the sidebar


def test_main_v2_descent_is_bounded():
    """However deep the one-child chain, the descent stops after MAX_DESCENT levels (its time bound)."""
    depth = html.MAX_DESCENT + 20
    page = "<body>" + "<div>" * depth + "<p>deep words</p><p>more words here</p>" + "</div>" * depth + "</body>"
    assert v2(page) == "deep words more words here"


@pytest.mark.parametrize("rule", html.EXTRACTORS)
@pytest.mark.parametrize(
    "bad",
    ["<html><body><p>unclosed <b>bold <i>italic", "<<<<>>>>", "<html>" * 1000, "<p>\x00\ud800 bad chars</p>", "</div></div></p>", "",
     '<div class="ad"><div class="ad"><span class=ad>x</span></div></div>', '<div id="\\">x</div><div class=\'"\'>y</div>',
     "<body>" + '<div class="comment">' * 600 + "x"],
)
def test_broken_markup_never_raises_under_either_rule(rule, bad):
    """Broken or hostile markup, nested furniture and odd attribute values give a str under every rule."""
    assert isinstance(html.main_text(bad, rule), str)


def test_unknown_rule_is_refused():
    from fpstore.errors import InputError

    with pytest.raises(InputError, match="main-v9"):
        html.main_text("<p>x</p>", "main-v9")

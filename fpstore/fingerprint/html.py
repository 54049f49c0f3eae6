"""HTML detection and main-content extraction, before the token rule sees the text.

Crawlers feed raw pages. Fingerprinted as text, markup and navigation outvote the content: every
page of a site shares its menus, and syntax-highlighting markup repeats per token (measured: raw
pages of unrelated documents at distance 0). A pipeline with ``html="main-v2"`` (the default) or
``html="main-v1"`` therefore reduces every input that :func:`looks_like_html` to :func:`main_text` first.

Extraction rule ``main-v1`` (a change to it is a new pipeline version):

1. Parse with the HTML5 algorithm (lexbor, through ``selectolax``), so broken markup parses the way
   browsers parse it and entities are decoded.
2. Remove elements that are never content: ``script style noscript template svg canvas iframe
   object embed`` and ``head``; and page furniture: ``nav header footer aside``, elements whose
   ``role`` is ``navigation banner contentinfo search complementary``, and ``[hidden]``. Never the
   ``html`` element itself (a stray ``<html hidden>`` anywhere in a page gives it its attributes).
3. The root is the first ``main`` element, else the first ``[role=main]``, else the only
   ``article``, else ``body`` (else the whole document); a root without text falls back to ``body``.
4. Its text: text nodes joined with single spaces (inline markup inside a word may split it; both
   copies of a page split the same way, which is what fingerprints need).
5. The bound: a document whose tags nest more than ``MAX_DEPTH`` (512) levels deep, as
   :func:`nesting_depth` counts them, and that has more than sqrt(512 x its length) ``<``
   characters, is not parsed: the HTML5 tree builder takes time quadratic in the nesting depth
   (a 16 MiB page of nested ``<div>`` would take most of an hour), and with fewer ``<`` than that
   even the deepest nesting parses in linear time. Its text is the text between its tags instead,
   outside comments and ``script style`` and the other raw-text elements, with character
   references decoded, pieces joined with single spaces. So extraction does at most about 512
   tree-building steps per input character. Browsers stop nesting at 512 levels too; a page below
   the bound is parsed and extracted by steps 1-4, as if there were no bound.

Extraction rule ``main-v2`` (the default; ``main-v1`` stays for the stores and fingerprints made
with it) is main-v1 with two more steps, for the pages where the element main-v1 takes as the
root also holds comments, related stories, share lines and the like, or where the page has no
semantic element at all:

2b. Remove the form controls ``button input select textarea``, then every element whose ``class``
    or ``id`` names page furniture: lowercased (ASCII letters only) and split at every character
    other than ``a-z0-9``, one of its words is in :data:`BOILERPLATE_WORDS` (``comments``,
    ``related``, ``share``, ``sidebar``, ``newsletter``, ``cookie``, ``ad``...). Never ``html body
    main article``, nor the root step 3 chooses or an element holding it.
3b. Without a ``main``, ``[role=main]`` or single ``article``, the root is found from ``body``
    down: while one child element holds more than half of the node's text outside links
    (characters other than white space), and, when the page has exactly one ``h1``, that child
    holds the ``h1``, the root moves to that child (at most :data:`MAX_DESCENT` levels). Text
    inside a link inside a link counts once. The title anchors the article: on a page whose
    article is shorter than a sidebar's paragraph, the majority alone would take the sidebar.

Measured on 1,285 real documentation pages (Clang, Python, Git) against each page's authored
source, and on the 3,104 pages of the web corpus (comments, related stories and sidebars around
known articles): see ``docs/tuning.md``. ``selectolax`` is a runtime dependency (pinned below 2, because
its text output is part of the fingerprint).
"""

from __future__ import annotations

import html as _entities
import re

from fpstore import _backend
from fpstore.errors import InputError
from fpstore.fingerprint._html_py import ASCII_LOWER, RAW, TOKEN, raw_end

_kernel = _backend.load("html")

__all__ = [
    "BOILERPLATE_WORDS",
    "EXTRACTOR",
    "EXTRACTORS",
    "MAX_DEPTH",
    "MAX_DESCENT",
    "looks_like_html",
    "main_text",
    "nesting_depth",
    "visible_text",
]

#: The extraction rules above, oldest first; a pipeline records the one it uses in its config.
EXTRACTORS = ("main-v1", "main-v2")
#: The rule of ``Pipeline()``.
EXTRACTOR = "main-v2"

#: Words of a ``class`` or ``id`` that mark page furniture (main-v2, step 2b). A change to this
#: set is a new extraction rule.
BOILERPLATE_WORDS = frozenset(
    "comment comments respond reply replies related share sharing sharedaddy social newsletter subscribe "
    "subscription signup cookie cookies consent gdpr ad ads advert advertisement sponsor sponsored promo "
    "widget widgets sidebar breadcrumb breadcrumbs pagination pager navigation nav navbar menu footer "
    "masthead byline dateline popular trending".split()
)
#: How many levels step 3b descends at most (it reads each level's text once: this bounds its time).
MAX_DESCENT = 32

_NEVER_CONTENT = "script,style,noscript,template,svg,canvas,iframe,object,embed,head"
_CONTROLS = "button,input,select,textarea"
_FURNITURE = "nav,header,footer,aside,[role=navigation],[role=banner],[role=contentinfo],[role=search],[role=complementary],[hidden]"

# A document: optional BOM, whitespace, XML declaration and comments, then one of these tags.
_DOC_START = re.compile(r"\A\ufeff?\s*(?:<\?xml[^>]*>\s*)?(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html|head|body)\b", re.I | re.S)
# A fragment: starts with a tag and has a few common element tags within its first 4 KB.
_FRAGMENT_TAG = re.compile(
    r"</?(?:p|div|span|a|li|ul|ol|table|tr|td|th|h[1-6]|br|section|article|main|pre|code|em|strong|b|i|img|meta|link)\b[^<>]*>",
    re.I,
)


#: What :func:`looks_like_html` skips before its "<" test.
LEADING_SPACE = " \t\r\n\ufeff"


def looks_like_html(text: str) -> bool:
    """True when ``text`` is an HTML document or fragment.

    A document starts (after whitespace, a BOM, an XML declaration or comments) with
    ``<!DOCTYPE html``, ``<html``, ``<head`` or ``<body``; a fragment starts with ``<`` and has at
    least 3 common HTML tags in its first 4096 characters. Plain text that merely contains a tag
    is text. Costs one character test for text that does not start with ``<``.
    """
    i = 0
    n = len(text)
    while i < n and i < 256 and text[i] in LEADING_SPACE:
        i += 1
    if i >= n or text[i] != "<":
        return False
    head = text[:4096]
    if _DOC_START.match(head):
        return True
    return len(_FRAGMENT_TAG.findall(head, i)) >= 3


def _parser():
    try:
        from selectolax.lexbor import LexborHTMLParser
    except ImportError as exc:  # pragma: no cover - selectolax is a dependency
        raise ImportError(
            "HTML extraction needs selectolax (pip install 'selectolax>=1.0,<2'); or fingerprint "
            "markup as text on purpose with Pipeline(html='off')"
        ) from exc
    return LexborHTMLParser


def _text_of(node) -> str:
    return node.text(deep=True, separator=" ", strip=False) if node is not None else ""


def main_text(html: str, rule: str = EXTRACTOR) -> str:
    """The main content of an HTML page as text, by extraction rule ``rule`` (one of
    :data:`EXTRACTORS`, above). Never raises on bad markup.

    Linear time: a document over the nesting bound (step 5) is reduced by :func:`_flat_text`.
    """
    if rule not in EXTRACTORS:
        raise InputError(f"unknown extraction rule {rule!r}; known: {', '.join(EXTRACTORS)}")
    if _too_deep(html):
        return _flat_text(html)
    tree = _parser()(html)
    _remove(tree.css(_NEVER_CONTENT))
    _remove(tree.css(_FURNITURE))
    if rule != "main-v1":
        _remove(tree.css(_CONTROLS))
    root = tree.css_first("main") or tree.css_first("[role=main]")
    if root is None:
        articles = tree.css("article")
        root = articles[0] if len(articles) == 1 else None
    if rule != "main-v1":
        _remove_boilerplate(tree, root)
        if root is None and tree.body is not None:
            root = _densest(tree, tree.body)
    out = _text_of(root)
    if not out.strip():
        out = _text_of(tree.body) or _text_of(tree.root)
    return out


def _remove(nodes: list) -> None:
    # Last first: a node inside another is removed before it, so no node is touched after the
    # subtree holding it was removed. The root element is never removed: a stray <html hidden>
    # tag anywhere in a page gives it its attributes, and lexbor refuses to remove it. (An "html"
    # element inside MathML is not the root, and goes like any other.)
    for node in reversed(nodes):
        if node.parent is not None and node.parent.parent is not None:
            node.decompose()


_NOT_ALNUM = re.compile(r"[^a-z0-9]+")
_NEVER_REMOVED = frozenset(("html", "body", "main", "article"))


def _lineage(node) -> set[int]:
    """The ``mem_id`` of ``node`` and of every element holding it."""
    ids = set()
    while node is not None:
        ids.add(node.mem_id)
        node = node.parent
    return ids


def _names_furniture(value: str) -> bool:
    words = value.lower() if value.isascii() else value.translate(ASCII_LOWER)
    return not BOILERPLATE_WORDS.isdisjoint(_NOT_ALNUM.split(words))


def _remove_boilerplate(tree, root) -> None:
    """Step 2b of main-v2: remove the elements whose class or id names page furniture."""
    kept = _lineage(root)  # the root and every element holding it stay
    verdicts: dict[tuple[str, str], bool] = {}  # highlighted code repeats a few names thousands of times
    found = []
    for node in tree.css("[class],[id]"):
        attrs = node.attributes
        names = (attrs.get("class") or "", attrs.get("id") or "")
        furniture = verdicts.get(names)
        if furniture is None:
            furniture = verdicts[names] = _names_furniture(names[0]) or _names_furniture(names[1])
        if furniture and node.tag not in _NEVER_REMOVED and node.mem_id not in kept:
            found.append(node)
    _remove(found)


def _chars(node) -> int:
    return len("".join(node.text(deep=True, separator=" ", strip=False).split()))


def _densest(tree, body):
    """Step 3b of main-v2: from ``body``, down to the child holding most of the text outside
    links (and the page's only h1, when it has one)."""
    h1s = tree.css("h1")
    holds_title = _lineage(h1s[0]) if len(h1s) == 1 else None
    # A link inside a link (table cells allow it) is link text once: only outermost links count
    # (-1). Each link's length is read once, not at every level that holds it.
    link_chars = {a.mem_id: -1 for a in tree.css("a a")}

    def outside_links(node, chars: int) -> int:
        for a in node.css("a"):
            n = link_chars.get(a.mem_id)
            if n is None:
                n = link_chars[a.mem_id] = _chars(a)
            if n > 0:
                chars -= n
        return chars

    root = body
    total = outside_links(body, _chars(body))
    for _ in range(MAX_DESCENT):
        if total <= 0:
            break
        for child in root.iter():
            # Text outside links is at most all the text: only a child with more than half of
            # all of it can hold more than half of that, and only then are its links read.
            chars = _chars(child)
            if 2 * chars > total and 2 * (own := outside_links(child, chars)) > total:
                break
        else:
            break
        if holds_title is not None and child.mem_id not in holds_title:
            break
        root, total = child, own
    return root


def visible_text(html: str) -> str:
    """All text a reader could see: everything but ``script style noscript template head`` and the like.

    No main-content heuristics: the evaluation uses it as ground truth for HTML without a source.
    A document over the nesting bound is reduced by :func:`_flat_text`, as by :func:`main_text`.
    """
    if _too_deep(html):
        return _flat_text(html)
    tree = _parser()(html)
    _remove(tree.css(_NEVER_CONTENT))
    return _text_of(tree.body) or _text_of(tree.root)


# -- the nesting bound (step 5) ----------------------------------------------------------------------
#
# Where the time goes: lexbor's tree builder (the parse itself; selecting, removing and reading
# text take milliseconds) checks "is there a p element in button scope?" and the like by walking
# the stack of open elements, for most start and end tags. A stack n deep makes that walk O(n) per
# tag, so n nested <div>s take O(n^2): 12.5k/25k/50k/100k levels took 0.19/0.72/2.97/14 s. With
# the stack at most MAX_DEPTH deep, every tag costs O(MAX_DEPTH) and the parse is linear (a 16 MiB
# page of 512-deep nests parses in about 5 s on the benchmark machine, against 2 s for a shallow one).
#
# nesting_depth() must therefore never count less than the stack the tree builder will build
# (else a page could hide its depth from it), and should count no more on real pages (else a
# page's fingerprint would change for nothing). So it follows the HTML tokenizer exactly (tags
# with quoted attributes, comments, raw text) and a simplified tree builder that only ever pops
# less than the real one: implied end tags (p, li, dd, dt, option, headings, table cells and
# rows), end tags that close what is in scope, and the formatting elements the builder keeps in
# its "list of active formatting elements" and re-opens (each counts until an end tag closes it).
# Checked against lexbor's trees on random tag soup (tests/test_edges_ingest.py) and on real pages.
#
# Not bounded here: the builder re-opens (clones) every formatting element left open when a block
# closed, at each following run of text, so a page can make it build a tree much larger than
# itself (42 such elements, three of each kind, are valid HTML: 1 MB of "<p>x</p>" after them
# builds 5 million elements). That cost is linear in the input, with a large constant.

#: Documents whose tags nest deeper than this (as :func:`nesting_depth` counts) are not parsed.
MAX_DEPTH = 512


def _too_deep(html: str) -> bool:
    """True when ``html`` is over the bound of step 5: more than sqrt(MAX_DEPTH x its length) '<'
    and tags nested more than MAX_DEPTH deep.

    With L '<' the tree builder does at most about L^2 steps, however the tags nest; so a page with
    L^2 <= MAX_DEPTH x length is parsed in at most about MAX_DEPTH steps per character without a
    scan (one count: most pages), and any other page in as many once its depth is within the bound.
    """
    lt = html.count("<")
    return lt * lt > MAX_DEPTH * len(html) and nesting_depth(html, MAX_DEPTH) > MAX_DEPTH


def nesting_depth(html: str, limit: int = MAX_DEPTH) -> int:
    """How deep the tags of ``html`` nest, as the HTML5 tree builder would open them (a number
    above ``limit`` once it is exceeded). The contract is the specification's,
    ``fpstore.fingerprint._html_py.nesting_depth``; this runs the kernel ``fpstore._backend`` selects.
    """
    return _kernel.nesting_depth(html, limit)


def _flat_text(html: str) -> str:
    """The text between the tags of ``html``, outside comments and raw-text elements, character
    references decoded, pieces joined with single spaces; linear time (step 5 of main-v1)."""
    parts: list[str] = []
    pos = 0
    while True:
        t = TOKEN.search(html, pos)
        if t is None:
            parts.append(html[pos:])
            break
        parts.append(html[pos : t.start()])
        pos = t.end()
        name = t.group(2)
        if name is None or t.group(1):
            continue
        if t.group(4) is None:
            break
        name = name.lower() if name.isascii() else name.translate(ASCII_LOWER)
        if name in RAW:
            found = raw_end(name).search(html, pos)
            if found is None:
                break
            pos = found.start()
        elif name == "plaintext":
            parts.append(html[pos:])
            break
    return _entities.unescape(" ".join(p for p in parts if p))

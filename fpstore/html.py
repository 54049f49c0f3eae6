"""HTML detection and main-content extraction, before the token rule sees the text.

Crawlers feed raw pages. Fingerprinted as text, markup and navigation outvote the content: every
page of a site shares its menus, and syntax-highlighting markup repeats per token (measured: raw
pages of unrelated documents at distance 0). A pipeline with ``html="main-v1"`` (the default)
therefore reduces every input that :func:`looks_like_html` to :func:`main_text` first.

Extraction rule ``main-v1`` (a change to it is a new pipeline version):

1. Parse with the HTML5 algorithm (lexbor, through ``selectolax``), so broken markup parses the way
   browsers parse it and entities are decoded.
2. Remove elements that are never content: ``script style noscript template svg canvas iframe
   object embed`` and ``head``; and page furniture: ``nav header footer aside``, elements whose
   ``role`` is ``navigation banner contentinfo search complementary``, and ``[hidden]``.
3. The root is the first ``main`` element, else the first ``[role=main]``, else the only
   ``article``, else ``body`` (else the whole document); a root without text falls back to ``body``.
4. Its text: text nodes joined with single spaces (inline markup inside a word may split it; both
   copies of a page split the same way, which is what fingerprints need).

Measured on 1,285 real documentation pages (Clang, Python, Git) against each page's authored
source: see ``docs/tuning.md``. ``selectolax`` is a runtime dependency (pinned below 2, because
its text output is part of the fingerprint).
"""

from __future__ import annotations

import re

__all__ = ["EXTRACTOR", "looks_like_html", "main_text", "visible_text"]

#: Name of the extraction rule above; recorded in the pipeline config.
EXTRACTOR = "main-v1"

_NEVER_CONTENT = "script,style,noscript,template,svg,canvas,iframe,object,embed,head"
_FURNITURE = (
    "nav,header,footer,aside,[role=navigation],[role=banner],[role=contentinfo],[role=search],"
    "[role=complementary],[hidden]"
)

# A document: optional BOM, whitespace, XML declaration and comments, then one of these tags.
_DOC_START = re.compile(
    r"\A\ufeff?\s*(?:<\?xml[^>]*>\s*)?(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html|head|body)\b", re.I | re.S
)
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


def main_text(html: str) -> str:
    """The main content of an HTML page as text (rule ``main-v1`` above). Never raises on bad markup."""
    tree = _parser()(html)
    for node in tree.css(_NEVER_CONTENT):
        node.decompose()
    for node in tree.css(_FURNITURE):
        node.decompose()
    root = tree.css_first("main") or tree.css_first("[role=main]")
    if root is None:
        articles = tree.css("article")
        root = articles[0] if len(articles) == 1 else None
    out = _text_of(root)
    if not out.strip():
        out = _text_of(tree.body) or _text_of(tree.root)
    return out


def visible_text(html: str) -> str:
    """All text a reader could see: everything but ``script style noscript template head`` and the like.

    No main-content heuristics: the evaluation uses it as ground truth for HTML without a source.
    """
    tree = _parser()(html)
    for node in tree.css(_NEVER_CONTENT):
        node.decompose()
    return _text_of(tree.body) or _text_of(tree.root)

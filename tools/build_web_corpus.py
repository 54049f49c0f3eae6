"""Build a web-like evaluation corpus: articles on site templates, copies, comments, teasers, edits.

    python tools/build_web_corpus.py --out ~/.cache/fpstore/web-corpus [--seed 0] [--articles 900]

The second evaluation corpus of ``docs/tuning.md``, built differently from the first
(``tools/build_eval_corpus.py``, documentation releases): raw HTML pages of invented sites around
authored articles, so that a fingerprint is judged on what a crawler meets, with the truth known.

**Articles** (the authored text, each page's ``truth``) come from text on the machine, read in a
fixed order: the docstrings of the Python standard library (parsed with ``ast``, not imported;
consecutive docstrings of one module packed into articles of 60-1,500 words), the sections of
``pydoc_data.topics`` (the language reference as ``help()`` shows it), and
``/usr/share/common-licenses`` (regular files, split at blank lines). ``--articles`` of them are
drawn with the seed.

**Sites**: 24 invented sites, each with its own template: one of seven layouts (HTML5 with
``main``/``aside``; WordPress-like, whose ``main`` also holds comments and post navigation; an
``article`` element without ``main``; ``role`` attributes on ``div``s; a magazine whose ``main``
holds related stories and a newsletter box; ``div`` soup without semantic elements; a table
layout), its own menu, tagline, sidebar widgets, footer and cookie banner. Per page the date, the
"popular posts" sidebar and the share line change.

**Page kinds** (the JSONL ``kind`` field):

* ``original``: each article on its home site, as an unrelated page to every other article;
* ``syndicated``: the same article on one to three other sites' templates, with an attribution
  line in the template (truth: the article);
* ``comments``: two or three more copies of the home page with different comment sections (1-25
  comments, about 5 on average; truth: the article: comments are not authored text);
* ``teaser``: the title and first paragraph on another site, linking to the full article (truth:
  that excerpt, so a teaser of a one-paragraph article is a near-duplicate of it, others not);
* ``edit``: edited versions (word substitutions, sentences added or deleted, a paragraph replaced
  or appended, paragraphs swapped), each edited until the word 3-shingle Jaccard with the original
  (estimated here with a simple tokenizer) falls below a target drawn uniformly from 0.55-0.98, so
  that many pairs sit near the 0.8 threshold on both sides.

The output is deterministic for a seed, a Python version (the docstrings) and the licence files of
the machine; ``MANIFEST.json`` records the Python version, the counts per kind and the SHA-256 of
``corpus.jsonl``. Output:

* ``OUT/corpus.jsonl``: one object per page: ``id``, ``site``, ``layout``, ``kind``, ``article``, ``format``
  (``"html"``), ``text`` (the raw page) and ``truth`` (the authored text on it);
* ``OUT/MANIFEST.json``.

Evaluate with ``fpstore-admin calibrate OUT/corpus.jsonl`` or ``tools/eval_sketch.py --corpus
OUT/corpus.jsonl``.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import html
import json
import os
import pathlib
import random
import re
import sys
import sysconfig
from dataclasses import dataclass, field

LAYOUTS = ("html5", "wordpress", "article", "roles", "magazine", "divsoup", "table")
KINDS = ("original", "syndicated", "comments", "teaser", "edit")
SOURCES = ("stdlib", "topics", "licenses")
LICENSES = pathlib.Path("/usr/share/common-licenses")

# Per-article probabilities of each kind of derived page, and how many.
P_SYNDICATED, P_COMMENTS, P_TEASER, P_EDIT = 0.35, 0.25, 0.30, 0.45

_REACTIONS = [
    "Thanks for writing this up.", "Great article!", "I ran into the same problem last week.",
    "This is exactly what I was looking for.", "Could you expand on the second part?",
    "Not sure I agree with all of this.", "Bookmarked.", "Finally someone explains it properly.",
    "We do something similar at work.", "Has anyone tried this on Windows?", "Very helpful, thank you.",
    "The examples are a bit short.", "+1", "Interesting take.", "I think there is a typo in the third paragraph.",
    "Does this still apply to the latest release?", "Good read.", "Saved me hours.",
]
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December"]
_SYLLABLES = ["ka", "lo", "mi", "ren", "tor", "vex", "sa", "bel", "dor", "fin", "gal", "hu", "jo",
              "ket", "lum", "nor", "pax", "qua", "ris", "tem", "ul", "vor", "wen", "zed"]
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'])")


@dataclass
class Article:
    id: str
    source: str
    title: str
    paras: list[str]

    def text(self) -> str:
        return "\n\n".join([self.title, *self.paras])


@dataclass
class Site:
    name: str
    domain: str
    layout: str
    tagline: str
    nav: list[str]
    tags: list[str]
    about: str
    newsletter: str
    cookie: str
    footer: list[str]
    authors: list[str]
    articles: list[str] = field(default_factory=list)  # titles of its articles, for its widgets


# -- articles --------------------------------------------------------------------------------------


def _paragraphs(doc: str) -> list[str]:
    out = []
    for block in re.split(r"\n\s*\n", doc):
        p = " ".join(block.split())
        if p:
            out.append(p)
    return out


def _words(paras: list[str]) -> int:
    return sum(len(p.split()) for p in paras)


def _stdlib_docstrings() -> list[tuple[str, str, list[str]]]:
    """(module, title, paragraphs) of every docstring of 25+ words in the stdlib, in file order."""
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "dist-packages", "test", "idlelib", "lib2to3", "tkinter", "turtledemo", "ensurepip"}
    out = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root)
        if rel.parts[0] in skip or "tests" in rel.parts or "test" in rel.parts:
            continue
        try:
            tree = ast.parse(f.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        module = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
        nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
        for node in nodes:
            doc = ast.get_docstring(node)
            if not doc or len(doc.split()) < 25:
                continue
            paras = _paragraphs(doc)
            name = module if isinstance(node, ast.Module) else f"{module}.{node.name}"
            first = " ".join(paras[0].split()[:10])
            out.append((module, f"{name}: {first}", paras))
    return out


def _article_pool(sources: tuple[str, ...], rng: random.Random) -> list[Article]:
    pool: list[Article] = []
    if "stdlib" in sources:
        # Consecutive docstrings of one module packed into articles of a drawn length.
        docs = _stdlib_docstrings()
        i = 0
        while i < len(docs):
            module, title, paras = docs[i]
            want = min(1500, max(60, int(rng.lognormvariate(5.6, 0.7))))
            body = list(paras)
            i += 1
            while i < len(docs) and docs[i][0] == module and _words(body) < want:
                body += docs[i][2]
                i += 1
            if _words(body) >= 60:
                pool.append(Article("", "stdlib", title, body))
    if "topics" in sources:
        from pydoc_data.topics import topics

        for key in sorted(topics):
            paras = _paragraphs(topics[key])
            while paras:
                want = min(1500, max(60, int(rng.lognormvariate(5.8, 0.6))))
                body = []
                while paras and _words(body) < want:
                    body.append(paras.pop(0))
                if _words(body) >= 60:
                    pool.append(Article("", "topics", f"{key}: {' '.join(body[0].split()[:8])}", body))
    if "licenses" in sources and LICENSES.is_dir():
        for f in sorted(LICENSES.iterdir()):
            if f.is_symlink() or not f.is_file():
                continue
            paras = _paragraphs(f.read_text(encoding="utf-8", errors="replace"))
            part = 0
            while paras:
                want = min(1500, max(60, int(rng.lognormvariate(6.0, 0.5))))
                body = []
                while paras and _words(body) < want:
                    body.append(paras.pop(0))
                part += 1
                if _words(body) >= 60:
                    pool.append(Article("", "licenses", f"{f.name}, part {part}: {' '.join(body[0].split()[:8])}", body))
    # The same text twice (a docstring inherited verbatim, a licence shipped under two names) would
    # be an unplanned pair; keep the first.
    seen: dict[str, None] = {}
    unique = []
    for a in pool:
        if a.text() not in seen:
            seen[a.text()] = None
            unique.append(a)
    return unique


# -- sites -----------------------------------------------------------------------------------------


def _name(rng: random.Random, parts: int = 2) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(parts)).capitalize()


def _phrase(rng: random.Random, vocab: list[str], lo: int, hi: int) -> str:
    return " ".join(rng.choice(vocab) for _ in range(rng.randint(lo, hi)))


def make_sites(rng: random.Random, vocab: list[str], count: int = 24) -> list[Site]:
    sites = []
    for i in range(count):
        name = f"{_name(rng)} {rng.choice(['Journal', 'Weekly', 'Dev', 'Notes', 'Hub', 'Times', 'Digest', 'Post'])}"
        domain = name.lower().replace(" ", "") + rng.choice([".com", ".org", ".net", ".io", ".example"])
        cookie = rng.choice([
            f"We use cookies to improve your experience on {domain}. By continuing to browse you agree to our use of cookies.",
            f"{name} and its partners store and access information on your device. {_phrase(rng, vocab, 8, 20)}. Accept all Reject all Manage preferences",
            "This site uses cookies. Accept",
            f"Your privacy matters to {name}. We and {rng.randint(40, 900)} partners use cookies and similar technologies to "
            f"{_phrase(rng, vocab, 10, 30)}. Agree Disagree Show purposes",
        ])
        sites.append(Site(
            name=name, domain=domain, layout=LAYOUTS[i % len(LAYOUTS)],
            tagline=_phrase(rng, vocab, 3, 9).capitalize(),
            nav=[w.capitalize() for w in rng.sample(vocab, rng.choice([5, 8, 12, 30]))],
            tags=rng.sample(vocab, rng.randint(6, 25)),
            about=f"{name} is {_phrase(rng, vocab, 12, 60)}.",
            newsletter=f"Get the best of {name} in your inbox. {_phrase(rng, vocab, 4, 15).capitalize()}. Subscribe",
            cookie=cookie,
            footer=[f"\u00a9 {rng.randint(2005, 2024)} {name}. All rights reserved.",
                    " | ".join(rng.sample(["About", "Contact", "Privacy", "Terms", "Advertise", "Careers", "RSS", "Sitemap",
                                           "Imprint", "Accessibility"], rng.randint(3, 8))),
                    _phrase(rng, vocab, 0, 40)],
            authors=[f"{_name(rng)} {_name(rng, 3)}" for _ in range(rng.randint(1, 6))],
        ))
    return sites


# -- pages -----------------------------------------------------------------------------------------


def _e(s: str) -> str:
    return html.escape(s, quote=False)


def _ul(items: list[str], cls: str = "") -> str:
    c = f' class="{cls}"' if cls else ""
    return f"<ul{c}>" + "".join(f'<li><a href="/{_slug(x)}">{_e(x)}</a></li>' for x in items) + "</ul>"


def _slug(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-")[:60]


@dataclass
class Page:
    """What goes on one page besides the template: the authored part and the page's extras."""

    title: str
    body_html: str  # the authored text as HTML (title not included)
    date: str
    author: str
    popular: list[str]
    comments: list[tuple[str, str, str]] = field(default_factory=list)  # (author, date, text)
    note: str = ""  # template line inside the article area (syndication attribution, teaser link)


def _comments_html(comments: list[tuple[str, str, str]]) -> str:
    if not comments:
        return ""
    items = "".join(
        f'<li class="comment"><div class="comment-author">{_e(a)}</div><time>{_e(d)}</time><p>{_e(t)}</p>'
        f'<a class="reply" href="#respond">Reply</a></li>'
        for a, d, t in comments
    )
    return (f'<section class="comments" id="comments"><h2>{len(comments)} Comments</h2><ol>{items}</ol>'
            f'<div id="respond"><h3>Leave a comment</h3><form><textarea name="comment"></textarea>'
            f'<button>Post Comment</button></form></div></section>')


def render(site: Site, page: Page, rng: random.Random) -> str:
    """The full HTML of ``page`` on ``site``'s template."""
    t, lay = page.title, site.layout
    share = f"Share this: {' '.join(rng.sample(['Twitter', 'Facebook', 'LinkedIn', 'Email', 'Reddit', 'Print', 'WhatsApp'], 4))}"
    meta = f"By {page.author} \u00b7 {page.date} \u00b7 {rng.randint(2, 25)} min read"
    note = f'<p class="note">{_e(page.note)}</p>' if page.note else ""
    comments = _comments_html(page.comments)
    head = (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{_e(t)} | {_e(site.name)}</title>"
            f'<meta name="description" content="{html.escape(site.tagline)}"><link rel="stylesheet" href="/static/{_slug(site.name)}.css">'
            f"<style>body{{font-family:sans-serif}} .cookie{{position:fixed;bottom:0}}</style>"
            f"<script>window.dataLayer=window.dataLayer||[];function gtag(){{dataLayer.push(arguments)}}</script></head>\n")
    popular = "<h3>Popular</h3>" + _ul(page.popular)
    tags = "<h3>Tags</h3>" + " ".join(f'<a href="/tag/{_slug(x)}">{_e(x)}</a>' for x in site.tags)
    about = f"<h3>About</h3><p>{_e(site.about)}</p>"
    news = f'<div class="newsletter"><p>{_e(site.newsletter)}</p><input type="email" placeholder="Email"></div>'
    foot = "".join(f"<p>{_e(x)}</p>" for x in site.footer if x)
    cookie = f'<div class="cookie" id="cookie-consent"><p>{_e(site.cookie)}</p><button>OK</button></div>'
    script = '<script src="/static/app.js"></script><script>gtag("config","G-XYZ")</script>'
    h1 = f"<h1>{_e(t)}</h1>"
    if lay == "html5":
        body = (f"<body>{cookie}<header><div class=\"logo\">{_e(site.name)}</div><p>{_e(site.tagline)}</p></header>"
                f"<nav>{_ul(site.nav)}</nav><main><article>{h1}<p class=\"byline\">{_e(meta)}</p>{note}{page.body_html}"
                f"<div class=\"share\">{_e(share)}</div></article>{comments}</main>"
                f"<aside>{popular}{tags}{about}</aside><footer>{foot}</footer>{script}</body>")
    elif lay == "wordpress":
        prev, nxt = (page.popular + ["Hello world!", "Welcome"])[:2]
        body = (f'<body class="post-template-default single"><div id="page" class="site">'
                f'<header id="masthead" class="site-header"><p class="site-title">{_e(site.name)}</p>'
                f'<p class="site-description">{_e(site.tagline)}</p><nav id="site-navigation">{_ul(site.nav, "menu")}</nav></header>'
                f'<div id="content" class="site-content"><div id="primary"><main id="main" class="site-main">'
                f'<article class="post type-post"><header class="entry-header">{h1}<div class="entry-meta">{_e(meta)}</div></header>'
                f'<div class="entry-content">{note}{page.body_html}<div class="sharedaddy">{_e(share)}</div></div>'
                f'<footer class="entry-footer">Posted in {_e(site.tags[0])}. Tagged {_e(", ".join(site.tags[1:5]))}.</footer></article>'
                f'<nav class="post-navigation">Previous post: {_e(prev)} Next post: {_e(nxt)}</nav>{comments}</main></div>'
                f'<aside id="secondary" class="widget-area">{popular}{about}{news}</aside></div>'
                f'<footer id="colophon">{foot}<p>Proudly powered by WordPress</p></footer></div>{cookie}{script}</body>')
    elif lay == "article":
        body = (f'<body><div class="top"><span class="brand">{_e(site.name)}</span> {_ul(site.nav, "menu")}</div>'
                f'<div class="wrap"><article>{h1}<p class="meta">{_e(meta)}</p>{note}{page.body_html}</article>'
                f'<div class="share">{_e(share)}</div>{comments}<div class="sidebar">{popular}{tags}</div></div>'
                f'<div class="bottom">{foot}</div>{cookie}{script}</body>')
    elif lay == "roles":
        body = (f'<body><div role="banner"><b>{_e(site.name)}</b> <i>{_e(site.tagline)}</i></div>'
                f'<div role="navigation">{_ul(site.nav)}</div><div class="cols"><div role="main" class="story">'
                f'{h1}<div class="dateline">{_e(meta)}</div>{note}{page.body_html}{comments}</div>'
                f'<div role="complementary">{popular}{news}</div></div><div role="contentinfo">{foot}</div>{cookie}{script}</body>')
    elif lay == "magazine":
        related = "".join(f'<div class="card"><a href="/{_slug(x)}">{_e(x)}</a></div>' for x in page.popular[:4])
        body = (f"<body>{cookie}<header><h2 class=\"masthead\">{_e(site.name)}</h2><nav>{_ul(site.nav)}</nav></header>"
                f'<main><div class="kicker">{_e(site.tags[0])}</div>{h1}<p class="byline">{_e(meta)}</p>{note}'
                f'<div class="story-body">{page.body_html}</div>{comments}<section class="related"><h2>You may also like</h2>{related}</section>'
                f'{news}</main><footer>{foot}<p>{_e(site.tagline)}</p></footer>{script}</body>')
    elif lay == "divsoup":
        body = (f'<body><div id="hdr"><div class="logo">{_e(site.name)}</div><div class="menu">'
                + " ".join(f'<a href="/{_slug(x)}">{_e(x)}</a>' for x in site.nav)
                + f'</div></div><div id="wrap"><div class="left">{popular}{tags}</div><div class="content">{h1}'
                f'<div class="info">{_e(meta)}</div>{note}{page.body_html}<div class="share">{_e(share)}</div>{comments}</div>'
                f'<div class="right">{about}<div class="ad">Advertisement</div></div></div><div class="footer">{foot}</div>'
                f"{cookie}{script}</body>")
    else:  # table
        body = (f'<body><table width="100%"><tr><td colspan="2" class="header"><font size="5">{_e(site.name)}</font><br>'
                + " | ".join(f'<a href="/{_slug(x)}">{_e(x)}</a>' for x in site.nav)
                + f'</td></tr><tr><td class="side" width="180">{popular}{about}</td><td class="main">{h1}<p><small>{_e(meta)}</small></p>'
                f'{note}{page.body_html}{comments}</td></tr><tr><td colspan="2" class="footer">{foot}</td></tr></table>'
                f"{cookie}{script}</body>")
    return head + body + "</html>\n"


def _body_html(paras: list[str]) -> str:
    out = []
    for p in paras:
        out.append(f"<pre>{_e(p)}</pre>" if p.startswith((">>>", "$ ")) else f"<p>{_e(p)}</p>")
    return "".join(out)


# -- edits -----------------------------------------------------------------------------------------


def _shingles3(text: str) -> set[tuple[str, ...]]:
    w = re.findall(r"\w+", text.lower())
    return {tuple(w[i : i + 3]) for i in range(max(1, len(w) - 2))}


def _jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def _sentences(p: str) -> list[str]:
    return _SENTENCE_END.split(p)


def edit_until(art: Article, target: float, rng: random.Random, donors: list[str], vocab: list[str]) -> list[str]:
    """Paragraphs of ``art`` edited step by step until the estimated 3-shingle Jaccard with the
    original is at most ``target`` (or 400 steps). ``donors`` are sentences of other articles."""
    orig = _shingles3(art.text())
    paras = [list(_sentences(p)) for p in art.paras]
    for _ in range(400):
        op = rng.choices(["word", "delete", "insert", "replace", "append", "swap"], [6, 3, 3, 1, 1, 1])[0]
        i = rng.randrange(len(paras))
        if op == "word":
            s = rng.randrange(len(paras[i]))
            words = paras[i][s].split()
            if words:
                words[rng.randrange(len(words))] = rng.choice(vocab)
                paras[i][s] = " ".join(words)
        elif op == "delete" and sum(map(len, paras)) > 2:
            if len(paras[i]) > 1:
                del paras[i][rng.randrange(len(paras[i]))]
            elif len(paras) > 1:
                del paras[i]
        elif op == "insert":
            paras[i].insert(rng.randrange(len(paras[i]) + 1), rng.choice(donors))
        elif op == "replace" and len(paras) > 2:
            paras[i] = [rng.choice(donors) for _ in range(rng.randint(1, 4))]
        elif op == "append":
            paras.append(["Update: " + rng.choice(donors)] + [rng.choice(donors) for _ in range(rng.randint(0, 2))])
        elif op == "swap" and len(paras) > 1:
            j = rng.randrange(len(paras))
            paras[i], paras[j] = paras[j], paras[i]
        out = [" ".join(p) for p in paras if p]
        if _jaccard(orig, _shingles3("\n\n".join([art.title, *out]))) <= target:
            return out
    return [" ".join(p) for p in paras if p]


# -- the corpus ------------------------------------------------------------------------------------


def _count(rng: random.Random) -> int:
    """Comments on a page: 1-25, most pages a few (geometric, mean about 5)."""
    return min(25, 1 + int(rng.expovariate(1 / 4)))


def _date(rng: random.Random) -> str:
    return f"{rng.randint(1, 28)} {rng.choice(_MONTHS)} {rng.randint(2012, 2024)}"


def build_docs(seed: int = 0, articles: int = 900, sources: tuple[str, ...] = SOURCES) -> list[dict]:
    """The corpus as a list of JSONL records (deterministic for the seed and the inputs)."""
    rng = random.Random(seed)
    pool = _article_pool(sources, random.Random(seed ^ 0x5EED))
    chosen = sorted(rng.sample(range(len(pool)), min(articles, len(pool))))
    arts = [pool[i] for i in chosen]
    for n, a in enumerate(arts):
        a.id = f"a{n:04d}"
    vocab_counts: dict[str, int] = {}
    for a in arts:
        for w in re.findall(r"[a-z]{4,12}", a.text()):
            vocab_counts[w] = vocab_counts.get(w, 0) + 1
    vocab = sorted(w for w, c in vocab_counts.items() if c >= 3)
    donors = [s for a in arts for p in a.paras for s in _sentences(p) if 5 <= len(s.split()) <= 40]
    sites = make_sites(rng, vocab)
    home = {a.id: rng.randrange(len(sites)) for a in arts}
    for a in arts:
        sites[home[a.id]].articles.append(a.title)

    docs: list[dict] = []

    def page(site_i: int, kind: str, a: Article, variant: int, paras: list[str], title: str, truth: str, **extra) -> None:
        site = sites[site_i]
        others = site.articles if len(site.articles) > 6 else [x.title for x in arts]
        pg = Page(title, _body_html(paras), _date(rng), rng.choice(site.authors),
                  rng.sample(others, min(5, len(others))), **extra)
        docs.append({
            "id": f"{_slug(site.name)}/{kind}/{a.id}/{variant}", "site": site.name, "layout": site.layout, "kind": kind,
            "article": a.id,
            "format": "html", "text": render(site, pg, rng), "truth": truth,
        })

    def comments(k: int) -> list[tuple[str, str, str]]:
        out = []
        for _ in range(k):
            parts = [rng.choice(_REACTIONS)] + [rng.choice(donors) for _ in range(rng.choice([0, 0, 1, 1, 2, 3]))]
            rng.shuffle(parts)
            out.append((f"{_name(rng)}{rng.randint(1, 99)}", _date(rng), " ".join(parts)))
        return out

    for a in arts:
        h = home[a.id]
        other = [i for i in range(len(sites)) if i != h]
        with_comments = rng.random() < P_COMMENTS
        page(h, "original", a, 0, a.paras, a.title, a.text(), comments=comments(_count(rng)) if with_comments else [])
        if rng.random() < P_SYNDICATED:
            for v, s in enumerate(rng.sample(other, rng.randint(1, 3))):
                note = rng.choice([f"This article originally appeared on {sites[h].name}.",
                                   f"Republished with permission from {sites[h].domain}.", f"Source: {sites[h].name}"])
                page(s, "syndicated", a, v, a.paras, a.title, a.text(), note=note)
        if with_comments:
            for v in range(rng.randint(2, 3)):
                page(h, "comments", a, v + 1, a.paras, a.title, a.text(), comments=comments(_count(rng)))
        if rng.random() < P_TEASER:
            s = rng.choice(other)
            note = f"Continue reading on {sites[h].name} \u2192"
            page(s, "teaser", a, 0, a.paras[:1], a.title, "\n\n".join([a.title, a.paras[0]]), note=note)
        if rng.random() < P_EDIT:
            for v in range(rng.randint(1, 3)):
                paras = edit_until(a, rng.uniform(0.55, 0.98), rng, donors, vocab)
                page(h, "edit", a, v + 1, paras, a.title, "\n\n".join([a.title, *paras]))
    return docs


def build(out: pathlib.Path, seed: int = 0, articles: int = 900, sources: tuple[str, ...] = SOURCES) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    docs = build_docs(seed, articles, sources)
    corpus = out / "corpus.jsonl"
    with open(corpus, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    kinds: dict[str, int] = {k: 0 for k in KINDS}
    for d in docs:
        kinds[d["kind"]] += 1
    manifest = {
        "documents": len(docs),
        "articles": len({d["article"] for d in docs}),
        "kinds": kinds,
        "seed": seed,
        "sources": list(sources),
        "python": sys.version.split()[0],
        "bytes": sum(len(d["text"].encode()) for d in docs),
        "corpus_sha256": hashlib.sha256(corpus.read_bytes()).hexdigest(),
    }
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache")) / "fpstore" / "web-corpus"
    ap.add_argument("--out", type=pathlib.Path, default=default, help=f"output directory (default {default})")
    ap.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    ap.add_argument("--articles", type=int, default=900, help="authored articles to draw (default 900)")
    ap.add_argument("--sources", default=",".join(SOURCES), help=f"comma-separated article sources (default {','.join(SOURCES)})")
    args = ap.parse_args(argv)
    sources = tuple(s for s in args.sources.split(",") if s)
    if not sources or any(s not in SOURCES for s in sources):
        ap.error(f"--sources: choose from {','.join(SOURCES)}")
    m = build(args.out, args.seed, args.articles, sources)
    print(f"wrote {args.out}/corpus.jsonl: {m['documents']} pages of {m['articles']} articles "
          f"({', '.join(f'{k} {v}' for k, v in m['kinds'].items())}), {m['bytes'] / 1e6:.1f} MB, sha256 {m['corpus_sha256']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

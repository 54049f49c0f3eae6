"""Write the golden fingerprints that pin every pipeline version this build supports.

    cd /work/main && PYTHONPATH=/work/main python tools/gen_golden.py

* ``tests/golden/fingerprints_v1.json``: SimHash scheme 1 without HTML extraction, the pipelines
  of fpstore's first releases (their ids and fingerprints must never change: stores made with
  them must stay readable). Regenerating it must leave the file byte-identical.
* ``tests/golden/fingerprints_v2.json``: MinHash1 scheme 1 with HTML main-v1 (the defaults until
  main-v2) and their variants, on the same texts plus raw HTML pages.
* ``tests/golden/fingerprints_v3.json``: MinHash1 with a verification sketch (``sketch_bits``),
  fingerprints and sketch words (HTML main-v1).
* ``tests/golden/fingerprints_v4.json``: HTML main-v2, without a sketch (the default of its build)
  and with one, on every text above plus pages whose main content holds comments, related stories
  and the like, and pages without a semantic root.
* ``tests/golden/fingerprints_v5.json``: the current default, ``Pipeline()`` (HTML main-v2 and a
  512-bit sketch), on the texts of version 4.

Run this only when a pipeline change is deliberate (a new scheme, kind, extractor or tokenizer
version); the golden test fails on any other change to a fingerprint, which is the point.
"""

from __future__ import annotations

import json
import pathlib

import fpstore

GOLDEN_DIR = pathlib.Path(__file__).resolve().parent.parent / "tests" / "golden"

TEXTS = [
    "",
    "   \t\n",
    "a",
    "The quick brown fox",
    "the  QUICK, brown fox!",
    "The quick brown fox jumps over the lazy dog",
    "Café café CAFÉ cafe\u0301",
    "İstanbul ΟΔΟΣ Straße ﬁne Ｆｕｌｌｗｉｄｔｈ",
    "東京 タワー は 高い 。 北京 上海",
    "Ελληνικά κείμενα και русский текст вместе",
    "numbers 123 ٤٥٦ ⅻ ½ mixed",
    "lone \ud800 surrogate \udfff here",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore "
    "et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut "
    "aliquip ex ea commodo consequat.",
    " ".join(f"word{i % 97}" for i in range(1000)),
]

_LEGACY = {"kind": "simhash64", "html": "off"}

# Version 1: the pipelines of the first releases, spelled out (their defaults were these).
PIPELINES = {
    "default": fpstore.Pipeline(**_LEGACY),
    "shingle1": fpstore.Pipeline(shingle=1, **_LEGACY),
    "shingle5_seed": fpstore.Pipeline(shingle=5, seed=0xDEADBEEFCAFEF00D, **_LEGACY),
    "idf": fpstore.Pipeline(
        weighting="idf", idf=fpstore.IdfTable({"the": 0, "fox": 200, "quick": 50, "ut": 3}, default=100), **_LEGACY
    ),
}

_PAGE = (
    "<!DOCTYPE html><html><head><title>Site - {title}</title><style>p {{color: red}}</style></head><body>"
    "<nav><a href='/'>Home</a> <a href='/docs'>Documentation</a> <a href='/blog'>Blog</a></nav>"
    "<header><h1>Example site</h1></header><main><h2>{title}</h2>{body}</main>"
    "<footer>Copyright 2024 Example. All rights reserved.</footer><script>var x = 1;</script></body></html>"
)
HTML_TEXTS = [
    _PAGE.format(title="The fox", body="<p>The <b>quick</b> brown fox jumps over the lazy dog.</p>"),
    _PAGE.format(title="Lorem", body="<p>" + TEXTS[12] + "</p><pre><span class='k'>def</span> f(): pass</pre>"),
    "<p>A fragment</p><p>with a few</p><div>paragraphs &amp; an entity &eacute;</div>",
    "<html><body><article>only article text here</article></body></html>",
    "<stdin> is not markup, and neither is this line",
    "\ufeff<!doctype html><body>" + "word " * 30 + "<nav>menu</nav></body>",
]

# Version 2: the defaults of their build (HTML main-v1) and variants.
_V1 = {"html": "main-v1"}
PIPELINES_V2 = {
    "default": fpstore.Pipeline(sketch_bits=0, **_V1),
    "shingle1": fpstore.Pipeline(shingle=1, sketch_bits=0, **_V1),
    "shingle5_seed": fpstore.Pipeline(shingle=5, seed=0xDEADBEEFCAFEF00D, sketch_bits=0, **_V1),
    "html_off": fpstore.Pipeline(html="off", sketch_bits=0),
    "simhash64_html": fpstore.Pipeline(kind="simhash64", **_V1),
}

# Version 3: pipelines with a verification sketch (an odd word count, the default length, the longest).
PIPELINES_V3 = {
    "sketch64": fpstore.Pipeline(sketch_bits=64, **_V1),
    "sketch192": fpstore.Pipeline(sketch_bits=192, shingle=2, **_V1),
    "sketch256": fpstore.Pipeline(sketch_bits=256, **_V1),
    "sketch512_seed": fpstore.Pipeline(sketch_bits=512, seed=0xDEADBEEFCAFEF00D, html="off"),
}

_STORY = "<h1>Release notes</h1><p>" + TEXTS[12] + "</p><p>" + TEXTS[5] + " again and again.</p>"
_COMMENTS = (
    '<section class="comments" id="comments"><h2>2 Comments</h2><ol><li class="comment-body"><p>First!</p></li>'
    '<li class="comment-body"><p>Thanks for the notes.</p></li></ol><form><textarea></textarea><button>Post</button></form></section>'
)
HTML_TEXTS_V4 = [
    # main holds the article, its comments, a share line and related stories (step 2b).
    f'<!DOCTYPE html><body><main><article>{_STORY}<div class="share-buttons">Share: Email Print</div></article>{_COMMENTS}'
    '<section class="related"><h2>You may also like</h2><a href="/x">Other story</a></section></main></body>',
    # The same article on a page without semantic elements: the root is found by the text (step 3b).
    f'<html><body><div id="top">Site <a href="/">Home</a></div><div class="wrap"><div class="left"><p>{TEXTS[12]}</p></div>'
    f'<div class="content">{_STORY}{_COMMENTS}</div></div><div class="bottom">(c) Site</div></body></html>',
    # A short article beside a longer sidebar paragraph: the only h1 anchors the root.
    f'<html><body><table><tr><td class="side"><p>{TEXTS[12]} {TEXTS[12]}</p></td><td class="story"><h1>Short</h1><p>{TEXTS[5]}</p>'
    "</td></tr></table></body></html>",
    # Names are words of the value: "commentary" is not "comment"; entity-encoded and upper-case names are.
    '<body><main><div class="commentary">kept words</div><div class="C&#79;MMENT-list">dropped words</div>'
    '<p id="AD">dropped too</p><p>the rest</p></main></body>',
    # One form around the whole page (ASP.NET): its text stays, its controls go; a link in a link counts once.
    f'<html><body><form id="form1"><div class="page"><h1>Notes</h1><p>{TEXTS[12]}</p><input value="q"><button>Go</button></div>'
    '<div class="aside-box"><a href="/a"><table><tr><td><a href="/b">Links links links</a></td></tr></table></a></div>'
    "</form></body></html>",
]

# Version 4: HTML main-v2, the default of its build ("default", which kept no sketch) and variants.
PIPELINES_V4 = {
    "default": fpstore.Pipeline(sketch_bits=0),
    "sketch256": fpstore.Pipeline(sketch_bits=256),
    "simhash64_html": fpstore.Pipeline(kind="simhash64"),
}

# Version 5: the defaults of this build: HTML main-v2 and a 512-bit verification sketch.
PIPELINES_V5 = {
    "default": fpstore.Pipeline(),
}

GOLDEN = {
    "fingerprints_v1.json": (TEXTS, PIPELINES),
    "fingerprints_v2.json": (TEXTS + HTML_TEXTS, PIPELINES_V2),
    "fingerprints_v3.json": (TEXTS + HTML_TEXTS, PIPELINES_V3),
    "fingerprints_v4.json": (TEXTS + HTML_TEXTS + HTML_TEXTS_V4, PIPELINES_V4),
    "fingerprints_v5.json": (TEXTS + HTML_TEXTS + HTML_TEXTS_V4, PIPELINES_V5),
}


def write(name: str) -> None:
    texts, pipelines = GOLDEN[name]
    data = {"texts": texts, "pipelines": {}}
    for name_, pipe in pipelines.items():
        # Versions 1 and 2 pin TEXTS only (their files were written so); later ones every text.
        sigs = [pipe.signature(t) for t in (TEXTS if name in ("fingerprints_v1.json", "fingerprints_v2.json") else texts)]
        data["pipelines"][name_] = {
            "id": pipe.id,
            "config": pipe.config,
            "fingerprints": [f"{s.fingerprint:016x}" for s in sigs],
            "tokens": [s.tokens for s in sigs],
            "content_hashes": [s.content_hash.hex() for s in sigs],
        }
        if pipe.sketch_bits:
            data["pipelines"][name_]["sketches"] = [[f"{w:016x}" for w in s.sketch] for s in sigs]
    if name == "fingerprints_v1.json":
        for p in data["pipelines"].values():
            del p["config"]  # version 1 files predate the field: keep them byte-identical
    out = GOLDEN_DIR / name
    out.write_text(json.dumps(data, indent=1, ensure_ascii=True) + "\n")
    print(f"wrote {out}")


def main() -> None:
    for name in GOLDEN:
        write(name)


if __name__ == "__main__":
    main()

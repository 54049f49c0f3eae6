"""What HTML extraction costs, per rule: ``main_text`` alone and whole fingerprints of raw pages.

    cd /work/main && PYTHONPATH=/work/main python tools/bench_html.py \\
        [--corpus ~/.cache/fpstore/eval-corpus/corpus.jsonl] [--repeat 7] [--json /tmp/bench_html.json]

Pages: the web corpus's (``tools/build_web_corpus.py``, made in process: seed 0, 300 articles,
about 1,000 pages with their templates, comments and sidebars), and the HTML records of each
``--corpus`` JSONL (such as the evaluation corpus's 1,285 documentation pages). For each page set
and each extraction rule (``fpstore.fingerprint.html.EXTRACTORS``), timed in turn within every
repeat (the order rotated each repeat): ``main_text(page, rule)`` over every page, and
``Pipeline(html=rule).fingerprint_many(pages, threads=1)``. Reported: the median over repeats of
pages/s and MB/s (MB = 10**6 bytes of UTF-8), and each rule's median time over main-v1's.
``--hostile`` times instead, for both rules, pages shaped to cost extraction the most, each at
two sizes four times apart (a linear cost shows as a ratio near 4): tens of thousands of distinct
furniture class names, an h1 under thousands of nested elements, and a chain of 40 elements
around a paragraph and thousands of links (the descent's costliest shape).
Results go to ``docs/benchmarks.md``, section "HTML extraction".
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from fpstore.fingerprint import html
from fpstore.fingerprint.pipeline import Pipeline


def pages_of(path: str) -> list[str]:
    with open(path, encoding="utf-8") as fh:
        texts = [json.loads(line)["text"] for line in fh if line.strip()]
    return [t for t in texts if html.looks_like_html(t)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", action="append", default=[], help="a JSONL corpus whose HTML records are timed too (repeatable)")
    ap.add_argument("--repeat", type=int, default=7, help="repeats (default 7)")
    ap.add_argument("--hostile", action="store_true", help="time the costliest page shapes instead")
    ap.add_argument("--json", help="also write every figure here")
    args = ap.parse_args(argv)
    if args.hostile:
        return hostile(args)
    from tools import build_web_corpus as web

    sets = {"web corpus (seed 0, 300 articles)": [d["text"] for d in web.build_docs(seed=0, articles=300)]}
    for path in args.corpus:
        sets[path] = pages_of(path)
    out = []
    for name, pages in sets.items():
        mb = sum(len(p.encode("utf-8", "surrogatepass")) for p in pages) / 1e6
        times: dict[tuple[str, str], list[float]] = {}
        rules = list(html.EXTRACTORS)
        for r in range(args.repeat):
            for rule in rules[r % len(rules) :] + rules[: r % len(rules)]:
                pipe = Pipeline(html=rule)
                t0 = time.perf_counter()
                for p in pages:
                    html.main_text(p, rule)
                t1 = time.perf_counter()
                pipe.fingerprint_many(pages, threads=1)
                t2 = time.perf_counter()
                times.setdefault((rule, "main_text"), []).append(t1 - t0)
                times.setdefault((rule, "fingerprint_many"), []).append(t2 - t1)
        print(f"\n{name}: {len(pages):,} pages, {mb:.1f} MB, median of {args.repeat} repeats")
        print("| rule | what | pages/s | MB/s | time ÷ main-v1's |\n|---|---|--:|--:|--:|")
        for (rule, what), ts in times.items():
            med = statistics.median(ts)
            base = statistics.median(times[("main-v1", what)])
            row = {
                "pages": name,
                "rule": rule,
                "what": what,
                "seconds": ts,
                "median_s": med,
                "pages_per_s": len(pages) / med,
                "mb_per_s": mb / med,
                "ratio_to_v1": med / base,
            }
            out.append(row)
            print(f"| {rule} | {what} | {row['pages_per_s']:,.0f} | {row['mb_per_s']:.1f} | {row['ratio_to_v1']:.2f} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


HOSTILE = {
    "distinct furniture classes": lambda n: (
        "<html><body><main><h1>T</h1>" + "".join(f'<p class="ad-{i}">w</p>' for i in range(n)) + "</main></body></html>"
    ),
    "h1 under deep nesting": lambda n: (
        "<html><body>" + "<div>" * (n // 10) + "<h1>Title</h1><p>" + "word " * n + "</p>" + "</div>" * (n // 10) + "</body></html>"
    ),
    "40-level chain of many links": lambda n: (
        "<html><body>"
        + "<div>" * 40
        + "<p>"
        + "word " * 2000
        + "</p>"
        + "".join(f'<a href="/{i}">link text {i}</a> ' for i in range(n))
        + "</div>" * 40
        + "</body></html>"
    ),
}


def hostile(args: argparse.Namespace) -> int:
    out = []
    print("| page | size | main-v1 s | main-v2 s | main-v2 ÷ main-v1 | main-v2 at 4× the size ÷ at 1× |\n|---|--:|--:|--:|--:|--:|")
    for name, make in HOSTILE.items():
        v2_by_size = []
        for n in (5_000, 20_000):
            page = make(n)
            times: dict[str, list[float]] = {rule: [] for rule in html.EXTRACTORS}
            for _ in range(args.repeat):
                for rule in html.EXTRACTORS:
                    t0 = time.perf_counter()
                    html.main_text(page, rule)
                    times[rule].append(time.perf_counter() - t0)
            v1, v2 = statistics.median(times["main-v1"]), statistics.median(times["main-v2"])
            v2_by_size.append(v2)
            growth = f"{v2_by_size[1] / v2_by_size[0]:.1f}" if len(v2_by_size) == 2 else ""
            print(f"| {name} | {len(page) / 1e6:.2f} MB | {v1:.3f} | {v2:.3f} | {v2 / v1:.1f} | {growth} |")
            out.append({"page": name, "n": n, "bytes": len(page), "main-v1_s": v1, "main-v2_s": v2})
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
    ap.add_argument("--json", help="also write every figure here")
    args = ap.parse_args(argv)
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
            row = {"pages": name, "rule": rule, "what": what, "seconds": ts, "median_s": med,
                   "pages_per_s": len(pages) / med, "mb_per_s": mb / med, "ratio_to_v1": med / base}
            out.append(row)
            print(f"| {rule} | {what} | {row['pages_per_s']:,.0f} | {row['mb_per_s']:.1f} | {row['ratio_to_v1']:.2f} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

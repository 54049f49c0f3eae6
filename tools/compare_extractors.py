"""Main-content extractors compared: how close each one's text is to the authored text, and what
that does to near-duplicate detection.

    python tools/build_web_corpus.py --out ~/.cache/fpstore/web-corpus
    PYTHONPATH=/work/main python tools/compare_extractors.py --corpus ~/.cache/fpstore/web-corpus/corpus.jsonl \\
        [--corpus ~/.cache/fpstore/eval-corpus/corpus.jsonl] [--peers-path DIR] [--json /tmp/extractors.json]

Extractors: all visible text (``fpstore.fingerprint.html.visible_text``), fpstore's rules
``main-v1`` and ``main-v2``, and, when importable, resiliparse's
``extract_plain_text(HTMLTree.parse(page), main_content=True)`` and trafilatura's
``extract(page, fast=True)``, with and without ``include_comments=False`` (``--peers-path DIR`` appends DIR to ``sys.path``, for peers
installed with ``pip install --target DIR``, so that they do not shadow this environment's
packages). For each corpus's HTML records and each extractor:

* **J to truth**: mean Jaccard of the word 3-shingle sets of the extracted text and the record's
  ``truth`` (the authored text);
* **pages/s**: extraction alone, one thread, the median of ``--repeat`` passes (extractors in
  turn within each pass);
* **F1**: the default pipeline's fingerprint kind on the extracted text (``Pipeline(html="off")``
  fed the extractor's output; ``Pipeline()`` itself is ``main-v2``), against the exact truth of
  ``fpstore.quality.evaluate`` (truth Jaccard >= 0.8, byte-identical pages left out): at k = 5,
  the default radius, and the best over k.

Not collected by pytest; a few minutes per corpus with the peers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

from fpstore.fingerprint import html
from fpstore.fingerprint.pipeline import Pipeline
from fpstore.quality import evaluate as ev


def extractors(say: Callable[[str], None]) -> dict[str, Callable[[str], str]]:
    out: dict[str, Callable[[str], str]] = {
        "visible text": html.visible_text,
        "fpstore main-v1": lambda page: html.main_text(page, "main-v1"),
        "fpstore main-v2": lambda page: html.main_text(page, "main-v2"),
    }
    try:
        from resiliparse.extract.html2text import extract_plain_text
        from resiliparse.parse.html import HTMLTree

        out["resiliparse (main_content=True)"] = lambda page: extract_plain_text(HTMLTree.parse(page), main_content=True)
    except ImportError:
        say("resiliparse not importable: skipped")
    try:
        import trafilatura

        version = trafilatura.__version__
        out[f"trafilatura {version} (fast=True)"] = lambda page: trafilatura.extract(page, fast=True) or ""
        # Its default keeps the comments it finds; without them is what deduplication wants.
        out[f"trafilatura {version} (fast=True, include_comments=False)"] = lambda page: (
            trafilatura.extract(page, fast=True, include_comments=False) or ""
        )
    except ImportError:
        say("trafilatura not importable: skipped")
    return out


def _shingles(text: str) -> set[tuple[str, ...]]:
    w = text.split()
    return {tuple(w[i : i + 3]) for i in range(max(1, len(w) - 2))} if w else set()


def _jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a else 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", action="append", required=True, help="a JSONL corpus with truth texts (repeatable)")
    ap.add_argument("--peers-path", help="a directory appended to sys.path, where the peers are installed")
    ap.add_argument("--repeat", type=int, default=3, help="timed passes (default 3)")
    ap.add_argument("--json", help="write every figure here")
    args = ap.parse_args(argv)
    if args.peers_path:
        sys.path.append(args.peers_path)

    def say(what: str) -> None:
        print(f"[compare_extractors] {what}", file=sys.stderr, flush=True)

    methods = extractors(say)
    fingerprint = Pipeline(html="off").fingerprint_many
    rows = []
    for path in args.corpus:
        corpus = ev.load_corpus(path)
        corpus = corpus.subset([i for i, f in enumerate(corpus.formats) if f == "html"])
        say(f"{path}: {len(corpus):,} HTML pages")
        texts: dict[str, list[str]] = {}
        times: dict[str, list[float]] = {name: [] for name in methods}
        for r in range(args.repeat):
            names = list(methods)
            for name in names[r % len(names) :] + names[: r % len(names)]:
                t0 = time.perf_counter()
                out = [methods[name](page) for page in corpus.texts]
                times[name].append(time.perf_counter() - t0)
                texts[name] = out
        truth = [_shingles(t) for t in corpus.truth]
        fns = {name: (lambda pages, out=texts[name]: fingerprint(out)) for name in methods}
        report = ev.evaluate_corpus(corpus, fns, reference=False, stage=say)
        print(
            f"\n{path}: {len(corpus):,} HTML pages, {report.truth.positives - report.truth.positives_identical:,} positive pairs "
            f"(byte-identical pages left out), median of {args.repeat} passes"
        )
        print("| extractor | J to truth | pages/s | F1 at k = 5 (P / R) | best F1 (k) |\n|---|--:|--:|---|---|")
        for curve in report.curves:
            name = curve.name
            js = [_jaccard(a, _shingles(t)) for a, t in zip(truth, texts[name])]
            best = int(np.argmax(curve.f1))
            at5 = curve.ks.index(5)
            row = {
                "corpus": path,
                "extractor": name,
                "j_to_truth": float(np.mean(js)),
                "pages_per_s": len(corpus) / statistics.median(times[name]),
                "f1_k5": curve.f1[at5],
                "precision_k5": curve.precision[at5],
                "recall_k5": curve.recall[at5],
                "best_f1": curve.f1[best],
                "best_k": curve.ks[best],
            }
            rows.append(row)
            print(
                f"| {name} | {row['j_to_truth']:.3f} | {row['pages_per_s']:,.0f} | {row['f1_k5']:.3f} "
                f"({row['precision_k5']:.3f} / {row['recall_k5']:.3f}) | {row['best_f1']:.3f} ({row['best_k']:g}) |"
            )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

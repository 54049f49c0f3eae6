"""The measurements behind ``docs/tuning.md``: every pipeline variant on the evaluation corpus.

    cd /work/main && python tools/build_eval_corpus.py
    cd /work/main && PYTHONPATH=/work/main python tools/calibrate_report.py \\
        --corpus ~/.cache/fpstore/eval-corpus/corpus.jsonl --out /tmp/calibrate --img docs/img

Prints Markdown tables (F1, precision and recall per k for each variant; byte-identical pairs left
out unless said) and writes ``report.json`` and PNG plots. Variants:

* the shipped kernels through :class:`fpstore.Pipeline` (``kind`` simhash64 with tf weights, and
  minhash1), on raw HTML, on HTML reduced by ``fpstore.fingerprint.html`` (main-v1), and on visible text;
* numpy prototypes of alternatives that are not shipped, on the same shingles (HTML main-v1):
  SimHash with each distinct shingle once (``set``) or weighted ``1 + ln(tf)``, and 1-bit MinHash
  from 64 independent hash functions (the textbook form) instead of one-permutation hashing;
* shingle widths 1..5 for the chosen kind;
* the MinHash reference (datasketch, 128 permutations, same shingles) at its own thresholds.

Not collected by pytest; takes a few minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import numpy as np

import fpstore
from fpstore.quality import evaluate as ev
from fpstore.fingerprint import html
from fpstore.fingerprint.pipeline import _fast_tokens
from fpstore.fingerprint import text as _text

M58 = np.uint64((1 << 58) - 1)


def _mix(x: np.ndarray) -> np.ndarray:
    return ev._mix(x)


class ShingleHashes:
    """Per text: 64-bit shingle hashes with their occurrence counts (prototype features)."""

    def __init__(self, texts: list[str], shingle: int = 3, extract: bool = True):
        vocab: dict[str, int] = {}
        self.hashes, self.counts = [], []
        for raw in texts:
            t = html.main_text(raw) if extract and html.looks_like_html(raw) else raw
            toks = _fast_tokens(_text.normalize(t))
            ids = np.fromiter((vocab.setdefault(x, len(vocab) + 1) for x in toks), np.uint64, len(toks))
            th = _mix(ids * np.uint64(0x9E3779B97F4A7C15))
            n = len(th)
            if n == 0:
                self.hashes.append(np.zeros(0, np.uint64))
                self.counts.append(np.zeros(0, np.int64))
                continue
            w = min(shingle, n)
            a = np.full(n - w + 1, 0x243F6A8885A308D3, np.uint64)
            for j in range(w):
                a = (a ^ th[j : n - w + 1 + j]) * np.uint64(0xD6E8FEB86659FD93)
            h, c = np.unique(_mix(a), return_counts=True)
            self.hashes.append(h)
            self.counts.append(c)


def _simhash(h: np.ndarray, w: np.ndarray) -> int:
    if not len(h):
        return 0
    bits = ((h[:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)).astype(np.float64)
    v = w @ (2 * bits - 1)
    return int(np.packbits((v > 0)[::-1]).view(">u8")[0])


def proto_simhash(sh: ShingleHashes, weighting: str) -> np.ndarray:
    out = np.zeros(len(sh.hashes), np.uint64)
    for i, (h, c) in enumerate(zip(sh.hashes, sh.counts)):
        w = {"tf": c.astype(np.float64), "set": np.ones(len(c)), "logtf": 1 + np.log(c)}[weighting]
        out[i] = _simhash(h, w)
    return out


def proto_minhash_classic(sh: ShingleHashes) -> np.ndarray:
    seeds = _mix(np.arange(1, 65, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
    out = np.zeros(len(sh.hashes), np.uint64)
    for i, h in enumerate(sh.hashes):
        if not len(h):
            continue
        hv = _mix(h[:, None] ^ seeds[None, :])
        am = hv.argmin(0)
        bit = _mix(h[am] ^ seeds) & np.uint64(1)
        out[i] = int((bit << np.arange(64, dtype=np.uint64)).sum())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("/tmp/calibrate"))
    ap.add_argument("--img", type=pathlib.Path, default=None, help="also write the docs' PNGs here")
    ap.add_argument("--threshold", type=float, default=0.8)
    ap.add_argument("--quick", action="store_true", help="skip the prototypes and the width sweep")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    corpus = ev.load_corpus(args.corpus)
    print(f"corpus: {len(corpus)} documents, {sum(f == 'html' for f in corpus.formats)} HTML", flush=True)

    def pipe(**kw):
        p = fpstore.Pipeline(**kw)
        return lambda texts: p.fingerprint_many(texts, threads=1)

    def visible(p):
        return lambda texts: p([html.visible_text(t) if html.looks_like_html(t) else t for t in texts])

    methods = {
        "simhash tf, raw HTML (old default)": pipe(kind="simhash64", html="off"),
        "simhash tf, main-v1": pipe(kind="simhash64", html="main-v1"),
        "minhash1, raw HTML": pipe(kind="minhash1", html="off"),
        "minhash1, visible text": visible(pipe(kind="minhash1", html="off")),
        "minhash1, main-v1 (default)": pipe(),
    }
    report = {}
    rep = ev.evaluate_corpus(corpus, methods, threshold=args.threshold)
    report["main"] = rep.to_dict()
    t = rep.truth
    print(f"truth: {t.positives} pairs with J >= {args.threshold} ({t.positives_identical} byte-identical), "
          f"{len(t.pairs)} candidate pairs, {t.seconds:.1f} s; codes exact: {t.exact_codes}\n")
    print("### F1 by k, byte-identical pairs left out\n")
    print(ev.format_table(rep.curves))
    print("\n### F1 by k, all pairs\n")
    print(ev.format_table(rep.curves_all))
    for c in rep.curves:
        print(f"\n#### {c.name} ({c.seconds:.1f} s)\n\n{ev.format_curve(c)}")
    for c in rep.reference:
        print(f"\n#### {c.name} ({c.bytes_per_doc} bytes/doc, {c.seconds:.1f} s)\n\n{ev.format_curve(c)}")
    ev.plot(rep.curves, args.out / "pipelines.png", title="precision (solid) and recall (dashed), byte-identical pairs left out",
            target_precision=0.95)
    if args.img:
        args.img.mkdir(parents=True, exist_ok=True)
        ev.plot([c for c in rep.curves if c.name in ("simhash tf, raw HTML (old default)", "simhash tf, main-v1", "minhash1, main-v1 (default)")],
                args.img / "pr_by_k.png", title="eval corpus: precision (solid) and recall (dashed) by k", target_precision=0.95)

    if not args.quick:
        t0 = time.perf_counter()
        sh = ShingleHashes(corpus.texts, 3, extract=True)
        print(f"\nprototype shingles: {time.perf_counter() - t0:.1f} s", flush=True)
        prepared = [fpstore.Pipeline().prepare(t) for t in corpus.texts]
        idf = fpstore.IdfTable.build(prepared)
        protos = {
            "simhash tf (kernel)": pipe(kind="simhash64"),
            "simhash idf from corpus (kernel)": pipe(kind="simhash64", weighting="idf", idf=idf),
            "simhash tf (proto)": lambda texts: proto_simhash(sh, "tf"),
            "simhash set (proto)": lambda texts: proto_simhash(sh, "set"),
            "simhash 1+ln tf (proto)": lambda texts: proto_simhash(sh, "logtf"),
            "minhash1 64 hashes (proto)": lambda texts: proto_minhash_classic(sh),
            "minhash1 OPH (kernel)": pipe(),
        }
        rep2 = ev.evaluate_corpus(corpus, protos, threshold=args.threshold, reference=False)
        report["prototypes"] = rep2.to_dict()
        print("\n### Weighting and MinHash form (HTML main-v1, 3-shingles), F1 by k, byte-identical left out\n")
        print(ev.format_table(rep2.curves))
        ev.plot(rep2.curves, args.out / "weighting.png", title="weighting and MinHash form", target_precision=0.95)
        if args.img:
            ev.plot(rep2.curves, args.img / "weighting.png", title="F1 by k: weighting and MinHash form (HTML main-v1, w=3)",
                    metric="f1")

        seeds = {f"minhash1 seed {s}": pipe(seed=s) for s in range(5)}
        seeds.update({f"simhash tf main-v1 seed {s}": pipe(kind="simhash64", seed=s) for s in range(5)})
        rep4 = ev.evaluate_corpus(corpus, seeds, threshold=args.threshold, reference=False)
        report["seeds"] = rep4.to_dict()
        print("\n### Seeds (hash functions): best F1 and F1 at k per seed\n")
        for kind in ("minhash1", "simhash tf"):
            cs = [c for c in rep4.curves if c.name.startswith(kind)]
            best = [c.best() for c in cs]
            print(f"- {kind}: best F1 " + ", ".join(f"{f:.3f} (k={k})" for k, f in best)
                  + f"; mean {np.mean([f for _, f in best]):.3f}, sd {np.std([f for _, f in best], ddof=1):.3f}")
            for k in (4, 5, 6, 8, 9):
                f = [c.f1[k] for c in cs]
                p = [c.precision[k] for c in cs]
                print(f"  - k={k}: F1 mean {np.mean(f):.3f} (min {min(f):.3f}, max {max(f):.3f}); precision mean {np.mean(p):.3f} (min {min(p):.3f})")

        widths = {f"minhash1 w={w}": pipe(shingle=w) for w in (1, 2, 3, 4, 5)}
        rep3 = ev.evaluate_corpus(corpus, widths, threshold=args.threshold, reference=False)
        report["widths"] = rep3.to_dict()
        print("\n### Shingle width (minhash1, main-v1; truth stays word 3-shingle J >= 0.8), F1 by k\n")
        print(ev.format_table(rep3.curves))
        if args.img:
            ev.plot(rep3.curves, args.img / "shingle_width.png", title="F1 by k: shingle width (minhash1, HTML main-v1)", metric="f1")
        for thr in (0.7, 0.9):
            r = ev.evaluate_corpus(corpus, {"minhash1 (default)": pipe(), "simhash tf, main-v1": pipe(kind="simhash64", html="main-v1")},
                                   threshold=thr, reference=True)
            report[f"threshold_{thr}"] = r.to_dict()
            print(f"\n### Truth J >= {thr}: F1 by k\n")
            print(ev.format_table(r.curves))
            for c in r.reference:
                print(f"- {c.name}: best F1 {c.best()[1]:.3f} at estimated J >= {c.best()[0]}")
    (args.out / "report.json").write_text(json.dumps(report, indent=1))
    print(f"\nwrote {args.out}/report.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())

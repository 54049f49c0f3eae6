"""Detection quality of the verification sketch: key candidates, verified by sketch similarity.

    python tools/build_eval_corpus.py --out ~/.cache/fpstore/eval-corpus
    python tools/build_web_corpus.py --out ~/.cache/fpstore/web-corpus
    python tools/eval_sketch.py --corpus ~/.cache/fpstore/eval-corpus/corpus.jsonl \\
        --corpus ~/.cache/fpstore/web-corpus/corpus.jsonl --json /tmp/eval_sketch.json

A corpus may be narrowed to the JSONL records whose FIELD is one of some values:
``--corpus PATH:layout=html5,wordpress``.

For each corpus, against the exact truth of :mod:`fpstore.quality.evaluate` (word 3-shingle
Jaccard of the ``truth`` texts >= ``--threshold``, default 0.8), byte-identical pairs left out,
with the default pipeline and ``Pipeline(sketch_bits=B)`` for B in ``--bits``:

* **key alone**: precision, recall and F1 of "64-bit fingerprints within k bits", k = 0..16;
* **verified**: candidates within ``k_c`` bits of the key (``--kc``, default 3..10), kept when the
  sketch's estimated Jaccard ``1 - 2 d / B`` is >= θ; per row the θ of the best F1 (θ in
  0.50..0.95) and θ = ``--theta`` (0.8), with the recall ceiling (positives among the candidates);
* **sketch, every pair**: the sketch compared over all pairs (no candidate structure), the most a
  verification by it can give;
* **union of words**: candidates are the pairs whose first ``m`` words (the key as word 0, then
  sketch words) have any word within ``r`` bits (``--m`` 1..4, ``--r`` 3..6), verified by the full
  sketch: the candidate count, the recall ceiling and F1.

``--truth-text PATH`` evaluates a corpus with each document's truth text fingerprinted instead of
its page (byte-identical truth texts are then the byte-identical pairs left out): the estimators
without the extractor; for such a run the tool also reports the bias and spread of each estimate of
J against the exact Jaccard of every pair at 0.5 <= J < 1, beside those of independent bits.

Prints Markdown tables and, with ``--json``, writes every count. Bytes per document are the key's 8
plus the sketch's B / 8. Not collected by pytest; a few minutes for both corpora on 2 cores.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import sys
import time
from typing import Any

import numpy as np

from fpstore.fingerprint.pipeline import HTML_MODES, Pipeline
from fpstore.quality import evaluate as ev
from fpstore.quality import sketch as sk

ALL_PAIRS_MIN_THETA = 0.6  # the every-pair reference keeps pairs estimated at or above this


def signatures(texts: list[str], bits: int, html: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(key uint64[n], sketch uint64[n, bits / 64]) of the default pipeline with a sketch of ``bits``
    (and the extraction rule ``html``, when given)."""
    fps = (Pipeline(sketch_bits=bits) if html is None else Pipeline(sketch_bits=bits, html=html)).signatures(texts)
    return fps.values, fps.sketches


def load(spec: str) -> tuple[str, ev.Corpus]:
    """A corpus from ``PATH`` or ``PATH:FIELD=V1,V2`` (JSONL records whose FIELD is one of the values)."""
    path, _, where = spec.rpartition(":") if "=" in spec.rpartition(":")[2] else (spec, "", "")
    corpus = ev.load_corpus(path)
    name = pathlib.Path(path).parent.name or path
    if not where:
        return name, corpus
    field, _, values = where.partition("=")
    wanted = set(values.split(","))
    with open(path, encoding="utf-8") as fh:
        keep = [i for i, line in enumerate(x for x in fh if x.strip()) if str(json.loads(line).get(field)) in wanted]
    return f"{name} ({field} = {values})", corpus.subset(keep)


def every_pair(sketch: np.ndarray, bits: int, min_theta: float, block: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """All pairs i < j whose sketch estimate is >= ``min_theta``: (pairs, estimates)."""
    n = len(sketch)
    max_d = int(np.floor((1 - min_theta) * bits / 2 + 1e-9))
    out_p, out_d = [np.zeros((0, 2), np.int64)], [np.zeros(0, np.int64)]
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        d = np.zeros((hi - lo, n), np.int64)
        for w in range(sketch.shape[1]):
            d += np.bitwise_count(sketch[lo:hi, w][:, None] ^ sketch[None, :, w])
        i, j = np.nonzero(d <= max_d)
        keep = j > i + lo
        i, j = i[keep], j[keep]
        out_p.append(np.stack([i + lo, j], 1))
        out_d.append(d[i, j])
    return np.concatenate(out_p), sk.estimated_jaccard(np.concatenate(out_d), bits)


def _row(c: ev.Curve, theta: float | None = None) -> dict[str, Any]:
    i = int(np.argmax(c.f1)) if theta is None else c.ks.index(theta)
    return {"theta": c.ks[i], "tp": c.tp[i], "fp": c.fp[i], "precision": c.precision[i], "recall": c.recall[i], "f1": c.f1[i]}


def evaluate(name: str, corpus: ev.Corpus, args: argparse.Namespace, say, on_truth: bool = False) -> dict[str, Any]:
    t0 = time.perf_counter()
    n = len(corpus)
    thetas = sorted(set(sk.THETAS) | {args.theta})
    say(f"{name}: signatures of {n:,} documents, sketch bits {args.bits}")
    # --truth-text fingerprints the truth texts: extraction taken out, the estimators alone.
    texts = corpus.truth if on_truth else corpus.texts
    if on_truth:
        name += ", truth text fingerprinted"
    keys, sketches = None, {}
    for b in args.bits:
        key, s = signatures(texts, b, args.html)
        if keys is not None and not np.array_equal(key, keys):
            raise SystemExit(f"the key of Pipeline(sketch_bits={b}) differs from the others': not comparable")
        keys, sketches[b] = key, s
    say(f"{name}: candidate pairs")
    key_pairs, key_d = ev.close_pairs(keys, max(ev.MAX_K, max(args.kc)))
    union: dict[tuple[int, int, int], np.ndarray] = {}
    for b in args.bits:
        words = [keys] + [sketches[b][:, w] for w in range(sketches[b].shape[1])]
        for r in args.r:
            per_word = [ev.close_pairs(w, r)[0] for w in words[: max(args.m)]]
            for m in args.m:
                if m <= len(words):
                    union[(b, m, r)] = sk.unique_pairs(np.concatenate(per_word[:m]))
    full = {b: every_pair(sketches[b], b, ALL_PAIRS_MIN_THETA) for b in args.bits}
    say(f"{name}: the exact truth")
    sets, exact = ev.shingle_sets(corpus.truth, args.shingle)
    extra = np.concatenate([key_pairs, *union.values(), *(p for p, _ in full.values())])
    digests = [hashlib.blake2b(t.encode("utf-8", "surrogatepass"), digest_size=16).digest() for t in texts]
    truth = ev.truth_pairs(sets, args.threshold, extra, digests)
    truth.exact_codes = exact
    positives = truth.positives - truth.positives_identical
    say(f"{name}: {positives:,} positive pairs (byte-identical left out); curves")

    _, lab, ident = sk.label_pairs(truth, key_pairs)
    keep = ~ident
    key_curve = ev.curve_from_distances("key", key_d[keep], lab[keep], positives, ev.MAX_K)
    out: dict[str, Any] = {
        "corpus": name, "documents": n, "threshold": args.threshold, "positives": positives,
        "positives_byte_identical": truth.positives_identical, "truth_pairs": len(truth.pairs),
        "exact_codes": exact, "key": key_curve.to_dict(), "verified": [], "every_pair": [], "union": [],
    }
    for kc in args.kc:
        sel = key_d <= kc
        pairs = key_pairs[sel]
        ceiling = sk.recall_ceiling(truth, pairs)[0]
        for b in args.bits:
            est = sk.estimated_jaccard(sk.sketch_distances(sketches[b], pairs), b)
            c = sk.verified_curve(f"k_c={kc}, {b} bits", truth, pairs, est, thetas, 8 + b // 8)
            out["verified"].append({"kc": kc, "bits": b, "bytes_per_doc": 8 + b // 8, "candidates": int(sel.sum()),
                                    "ceiling": ceiling, "best": _row(c), "fixed": _row(c, args.theta), "curve": c.to_dict()})
    for b in args.bits:
        pairs, est = full[b]
        c = sk.verified_curve(f"every pair, {b} bits", truth, pairs, est, [t for t in thetas if t >= ALL_PAIRS_MIN_THETA], 8 + b // 8)
        out["every_pair"].append({"bits": b, "bytes_per_doc": 8 + b // 8, "best": _row(c), "fixed": _row(c, args.theta), "curve": c.to_dict()})
    for (b, m, r), pairs in sorted(union.items()):
        est = sk.estimated_jaccard(sk.sketch_distances(sketches[b], pairs), b)
        c = sk.verified_curve(f"union m={m} r={r}, {b} bits", truth, pairs, est, thetas, 8 + b // 8)
        out["union"].append({"bits": b, "m": m, "r": r, "candidates": len(pairs), "ceiling": sk.recall_ceiling(truth, pairs)[0],
                             "best": _row(c), "fixed": _row(c, args.theta), "curve": c.to_dict()})
    if on_truth:
        say(f"{name}: the estimates' error against the exact Jaccard (pairs at J >= 0.5)")
        out["accuracy"] = accuracy(sets, keys, sketches, texts)
    out["seconds"] = time.perf_counter() - t0
    return out


def accuracy(sets: list[np.ndarray], keys: np.ndarray, sketches: dict[int, np.ndarray], texts: list[str]) -> list[dict[str, Any]]:
    """Bias and spread of each estimate of J (the key's ``1 - d / 32``, each sketch's) against the
    exact Jaccard of every pair with 0.5 <= J < 1, by band of J, beside the spread of independent
    bits (``sqrt(mean(4 q (1 - q) / bits))``, q = (1 - J) / 2). Meaningful only when the text
    fingerprinted is the truth text (the same shingles)."""
    t = ev.truth_pairs(sets, 0.5)
    keep = (t.jaccard >= 0.5 - 1e-12) & (t.jaccard < 1 - 1e-12)  # the filter's candidates include pairs below 0.5
    pairs, jac = t.pairs[keep], t.jaccard[keep]
    estimates = {64: 1 - ev.distances(keys, pairs) / 32}
    estimates.update({b: sk.estimated_jaccard(sk.sketch_distances(s, pairs), b) for b, s in sketches.items()})
    # Words that were not independent would show as correlated errors of their one-word estimates.
    big = max(sketches)
    words = [keys] + [sketches[big][:, w] for w in range(sketches[big].shape[1])]
    def max_corr(columns: list[np.ndarray]) -> float:
        errors = np.stack([1 - ev.distances(w, pairs) / 32 - jac for w in columns])
        return float(np.abs(np.corrcoef(errors) - np.eye(len(columns))).max())

    # The same for as many fingerprints of independent seeds: what chance gives with these pairs
    # (pairs share documents, so they are not independent samples).
    seeded = [Pipeline(seed=s).fingerprint_many(texts) for s in range(1, len(words) + 1)]
    rows: list[dict[str, Any]] = [{"bits": big, "words": len(words), "pairs": len(pairs), "max_abs_error_correlation": max_corr(words),
                                   "max_abs_error_correlation_seeds": max_corr(seeded)}]
    for bits, est in estimates.items():
        for lo, hi in ((0.5, 0.7), (0.7, 0.9), (0.9, 1.0)):
            m = (jac >= lo) & (jac < hi)
            if not m.any():
                continue
            q = (1 - jac[m]) / 2
            err = est[m] - jac[m]
            rows.append({"bits": bits, "band": [lo, hi], "pairs": int(m.sum()), "bias": float(err.mean()),
                         "sd": float(err.std()), "sd_independent_bits": float(np.sqrt(np.mean(4 * q * (1 - q) / bits)))})
    return rows


def _cell(r: dict[str, Any], theta: bool = True) -> str:
    s = f"**{r['f1']:.3f}** / {r['precision']:.3f} / {r['recall']:.3f}"
    return s + (f" ({r['theta']:.2f})" if theta else "")


def markdown(res: dict[str, Any], theta: float) -> str:
    bits = sorted({v["bits"] for v in res["verified"]})
    pos = res["positives"]
    lines = [f"### {res['corpus']}", "",
             f"{res['documents']:,} documents, {pos:,} positive pairs without byte-identical ones "
             f"({res['positives_byte_identical']:,} byte-identical), {res['seconds']:.0f} s.", "",
             "Key alone (64 bits, 8 bytes per document):", "", "| k | TP | FP | precision | recall | F1 |", "|---:|---:|---:|---:|---:|---:|"]
    for row in res["key"]["rows"]:
        if row["k"] <= 12:
            lines.append(f"| {row['k']} | {row['tp']} | {row['fp']} | {row['precision']:.3f} | {row['recall']:.3f} | {row['f1']:.3f} |")
    head = "| k_c | candidates | recall ceiling | " + " | ".join(f"{b} bits ({8 + b // 8} B/doc)" for b in bits) + " |"
    sep = "|---:|---:|---:|" + "---|" * len(bits)
    for title, which, show in (("best θ per row", "best", True), (f"θ = {theta}", "fixed", False)):
        lines += ["", f"Verified, {title}: F1 / precision / recall" + (" (θ)" if show else "") + ":", "", head, sep]
        for kc in sorted({v["kc"] for v in res["verified"]}):
            row = {v["bits"]: v for v in res["verified"] if v["kc"] == kc}
            first = row[bits[0]]
            lines.append(f"| {kc} | {first['candidates']:,} | {first['ceiling'] / pos:.3f} | "
                         + " | ".join(_cell(row[b][which], show) for b in bits) + " |")
    lines += ["", "Sketch compared over every pair (no candidate structure):", "",
              f"| sketch | best F1 / precision / recall (θ) | at θ = {theta} |", "|---|---|---|"]
    for e in res["every_pair"]:
        lines.append(f"| {e['bits']} bits | {_cell(e['best'])} | {_cell(e['fixed'], False)} |")
    for b in sorted({u["bits"] for u in res["union"]}):
        lines += ["", f"Union of words, {b} bits: candidates are the pairs with any of the key and the first m - 1 sketch words "
                  "within r bits, verified by the full sketch:", "",
                  f"| m | r | candidates | recall ceiling | best F1 / precision / recall (θ) | at θ = {theta} |",
                  "|---:|---:|---:|---:|---|---|"]
        for u in sorted((u for u in res["union"] if u["bits"] == b), key=lambda u: (u["m"], u["r"])):
            lines.append(f"| {u['m']} | {u['r']} | {u['candidates']:,} | {u['ceiling'] / pos:.3f} | {_cell(u['best'])} | "
                         f"{_cell(u['fixed'], False)} |")
    if res.get("accuracy"):
        lines += ["", "The estimates' error against the exact Jaccard, every pair at 0.5 <= J < 1 (64 bits: the key, 1 - d / 32):", "",
                  "| bits | J | pairs | bias | sd | sd of independent bits |", "|---:|---|---:|---:|---:|---:|"]
        first, *bands = res["accuracy"]
        for a in bands:
            lines.append(f"| {a['bits']} | {a['band'][0]:.1f}-{a['band'][1]:.1f} | {a['pairs']:,} | {a['bias']:+.4f} | {a['sd']:.4f} | "
                         f"{a['sd_independent_bits']:.4f} |")
        lines += ["", f"Largest |correlation| between the errors of one-word estimates (the key and the {first['words'] - 1} words of "
                  f"the {first['bits']}-bit sketch, {first['pairs']:,} pairs): {first['max_abs_error_correlation']:.3f}; "
                  f"between {first['words']} fingerprints of independent seeds: {first['max_abs_error_correlation_seeds']:.3f}."]
    return "\n".join(lines)


def summary(results: list[dict[str, Any]], theta: float) -> tuple[str, dict[str, Any]]:
    """The best configuration per corpus, and the θ that is best over all corpora per sketch length."""
    lines = ["### Best configurations", "", "| corpus | key alone: best F1 / P / R (k) | verified: best F1 / P / R | k_c | bits | θ |",
             "|---|---|---|---:|---:|---:|"]
    best_rows = []
    for res in results:
        kr = max(res["key"]["rows"], key=lambda r: r["f1"])
        v = max(res["verified"], key=lambda v: (v["best"]["f1"], -v["bits"], -v["kc"]))
        best_rows.append({"corpus": res["corpus"], "key": kr, "kc": v["kc"], "bits": v["bits"], **v["best"]})
        lines.append(f"| {res['corpus']} | **{kr['f1']:.3f}** / {kr['precision']:.3f} / {kr['recall']:.3f} ({kr['k']}) | "
                     f"{_cell(v['best'], False)} | {v['kc']} | {v['bits']} | {v['best']['theta']:.2f} |")
    # Overall θ per sketch length: the mean over runs of the best F1 over k_c at that θ, over the
    # runs where a verification beats the key alone (elsewhere the text, not the estimate, is the
    # bound, and the lowest θ wins by keeping every candidate).
    helped = [res for res, row in zip(results, best_rows) if row["f1"] > row["key"]["f1"]]
    left_out = [res["corpus"] for res in results if res not in helped]
    overall = []
    lines += ["", "θ best over the runs where the verified search beats the key alone (mean over those runs of the best F1 "
              "over k_c at that θ)" + (f"; left out: {', '.join(left_out)}" if left_out else "") + ":", "",
              "| bits | best θ | mean F1 there | mean F1 at θ = " + f"{theta} |", "|---:|---:|---:|---:|"]
    for b in sorted({v["bits"] for res in helped for v in res["verified"]}):
        ths = helped[0]["verified"][0]["curve"]["rows"]
        means = []
        for i, row in enumerate(ths):
            per = [max(v["curve"]["rows"][i]["f1"] for v in res["verified"] if v["bits"] == b) for res in helped]
            means.append((float(np.mean(per)), row["k"]))
        best_mean, best_t = max(means, key=lambda x: (x[0], -abs(x[1] - theta)))
        at = next(m for m, t in means if abs(t - theta) < 1e-9)
        overall.append({"bits": b, "theta": best_t, "mean_f1": best_mean, "mean_f1_at_fixed": at, "runs": [r["corpus"] for r in helped]})
        lines.append(f"| {b} | {best_t:.2f} | {best_mean:.3f} | {at:.3f} |")
    return "\n".join(lines), {"best": best_rows, "overall_theta": overall}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", action="append", default=[], help="JSONL corpus, PATH or PATH:FIELD=V1,V2 (repeatable)")
    ap.add_argument("--bits", type=int, nargs="+", default=[128, 256, 512], help="sketch lengths (default 128 256 512)")
    ap.add_argument("--kc", type=int, nargs="+", default=list(range(3, 11)), help="candidate radii of the key (default 3..10)")
    ap.add_argument("--m", type=int, nargs="+", default=[1, 2, 3, 4], help="words of the union structure (default 1..4)")
    ap.add_argument("--r", type=int, nargs="+", default=[3, 4, 5, 6], help="radii of the union structure (default 3..6)")
    ap.add_argument("--theta", type=float, default=0.8, help="the fixed verification threshold reported (default 0.8)")
    ap.add_argument("--threshold", type=float, default=0.8, help="truth: 3-shingle Jaccard >= this (default 0.8)")
    ap.add_argument("--shingle", type=int, default=3, help="truth shingle width (default 3)")
    ap.add_argument("--truth-text", action="append", default=[], metavar="CORPUS",
                    help="a corpus (as --corpus) whose truth texts are fingerprinted instead of its pages (repeatable)")
    ap.add_argument("--html", choices=HTML_MODES, default=None, help="HTML handling (default: the default pipeline's)")
    ap.add_argument("--json", type=pathlib.Path, help="write every count here")
    args = ap.parse_args(argv)
    args.theta = round(args.theta, 2)

    def say(what: str) -> None:
        print(f"[eval_sketch] {what}", file=sys.stderr, flush=True)

    if not args.corpus and not args.truth_text:
        ap.error("give at least one --corpus or --truth-text")
    results = []
    for spec, on_truth in [(c, False) for c in args.corpus] + [(c, True) for c in args.truth_text]:
        name, corpus = load(spec)
        results.append(evaluate(name, corpus, args, say, on_truth))
        print(markdown(results[-1], args.theta) + "\n", flush=True)
    text, overall = summary(results, args.theta)
    print(text)
    if args.json:
        args.json.write_text(json.dumps({"corpora": results, **overall}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

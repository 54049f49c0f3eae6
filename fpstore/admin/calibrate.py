"""``fpstore-admin calibrate``: measure precision and recall per k on your data, and pick k.

Wired into ``fpstore-admin`` by :func:`register` (``fpstore/admin/cli.py`` calls it); a thin shell over
:mod:`fpstore.quality.evaluate`.
"""

from __future__ import annotations

import argparse
import json
import sys

from fpstore.admin.options import POSITIVE

__all__ = ["register"]

_DESCRIPTION = """\
Measure how well a pipeline's fingerprints find near-duplicates in a corpus, per Hamming distance k.

INPUT is a directory of text/HTML files, or a JSONL file with one {"text": ..., "id": ..., "truth": ...}
object per line (HTML is detected and given raw to the pipeline). The ground truth is exact: two
documents are near-duplicates when the Jaccard similarity of their word 3-shingle sets is at least
--threshold. With --pairs, INPUT is a JSONL file of labelled pairs {"a": text, "b": text, "label": bool}.

Prints precision, recall and F1 for k = 0..--max-k (byte-identical pairs left out, and all pairs),
the recommended k (the largest k a store can be created with whose precision reaches
--target-precision, with the commands that apply it to a new store and to an existing one), each stage of the work on stderr, and, when datasketch is
installed, a 128-permutation MinHash reference at its own thresholds. Writes a PNG of precision and
recall against k (needs matplotlib) and, with --json, every number.
"""


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``calibrate`` subcommand to ``fpstore-admin``'s subparsers; returns its parser."""
    p = subparsers.add_parser(
        "calibrate",
        help="precision/recall per k on a corpus or labelled pairs; recommend k",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("input", help="directory of text/HTML files, or a JSONL corpus (or labelled pairs with --pairs)")
    p.add_argument("--pairs", action="store_true", help="INPUT is JSONL of labelled pairs {a, b, label}")
    p.add_argument("--threshold", type=float, default=0.8, help="Jaccard of 3-shingle sets that makes a near-duplicate (default 0.8)")
    p.add_argument("--target-precision", type=float, default=0.95, help="recommend the largest k with this precision (default 0.95)")
    p.add_argument("--max-k", type=int, default=None, help="largest k reported (default: the largest radius a store can be created with)")
    p.add_argument("--kind", choices=["minhash1", "simhash64"], default=None, help="fingerprint kind (default: the default pipeline's)")
    p.add_argument("--shingle", type=int, default=None, help="the pipeline's shingle width (default: the default pipeline's)")
    p.add_argument("--html", choices=["main-v1", "off"], default=None, help="HTML handling (default: main-v1)")
    p.add_argument("--compare", action="store_true", help="also measure the simhash64 pipeline (tf weights, html off) for comparison")
    p.add_argument("--no-reference", action="store_true", help="skip the datasketch MinHash reference")
    p.add_argument("--limit", type=POSITIVE, default=None, help="read at most this many documents")
    p.add_argument("--png", default="calibrate.png", help="where to write the plot (default calibrate.png; '' for none)")
    p.add_argument("--json", default=None, help="also write every number to this JSON file")
    p.set_defaults(func=_cmd_calibrate)
    return p


def _pipeline(args: argparse.Namespace):
    import fpstore

    kw = {}
    if args.kind:
        kw["kind"] = args.kind
    if args.shingle is not None:
        kw["shingle"] = args.shingle
    if args.html:
        kw["html"] = args.html
    return fpstore.Pipeline(**kw)


def _read_pairs(path: str) -> list[tuple[str, str, bool]]:
    from fpstore.errors import InputError

    out = []
    try:
        fh = open(path, encoding="utf-8")  # noqa: SIM115 - the with below closes it; only open() raises InputError
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror}") from exc
    with fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                a, b, label = obj["a"], obj["b"], obj["label"]
            except (ValueError, KeyError, TypeError) as exc:
                raise InputError(f"{path}:{lineno}: not a JSON object with 'a', 'b' and 'label' ({exc})") from exc
            if not isinstance(a, str) or not isinstance(b, str) or not isinstance(label, (bool, int)):
                raise InputError(f"{path}:{lineno}: 'a' and 'b' must be strings and 'label' a boolean")
            out.append((a, b, bool(label)))
    return out


def _cmd_calibrate(args: argparse.Namespace) -> int:
    """Measure precision/recall per k and recommend k."""
    from fpstore.errors import InputError
    from fpstore.quality import evaluate as ev

    if not 0 < args.threshold <= 1:
        raise InputError(f"--threshold must be in (0, 1], got {args.threshold}")
    if not 0 < args.target_precision <= 1:
        raise InputError(f"--target-precision must be in (0, 1], got {args.target_precision}")
    from fpstore.index.design import MAX_K as STORE_MAX_K

    if args.max_k is None:
        args.max_k = STORE_MAX_K
    if not 0 <= args.max_k <= 64:
        raise InputError(f"--max-k must be in 0..64, got {args.max_k}")
    import fpstore

    pipe = _pipeline(args)
    methods = {f"{pipe.kind}, html {pipe.html}, w={pipe.shingle} ({pipe.id})": lambda t: pipe.fingerprint_many(t)}
    if args.compare:
        old = fpstore.Pipeline(kind="simhash64", html="off")
        methods[f"simhash64 tf, html off ({old.id})"] = lambda t: old.fingerprint_many(t)
    result: dict = {"pipeline": pipe.config, "pipeline_id": pipe.id}
    if args.pairs:
        curves = ev.evaluate_pairs(_read_pairs(args.input), methods, args.max_k)
        labelled = curves[0].positives
        print(f"{labelled} near-duplicate pairs among the labelled pairs")
        result["pairs"] = [c.to_dict() for c in curves]
        reference: list = []
    else:
        corpus = ev.load_corpus(args.input, limit=args.limit)
        rep = ev.evaluate_corpus(
            corpus,
            methods,
            threshold=args.threshold,
            max_k=args.max_k,
            reference=not args.no_reference,
            stage=lambda what: print(f"fpstore-admin: calibrate: {what}", file=sys.stderr, flush=True),
        )
        t = rep.truth
        nhtml = sum(f == "html" for f in corpus.formats)
        print(
            f"{len(corpus)} documents ({nhtml} HTML, given raw); {t.positives} pairs with 3-shingle Jaccard >= "
            f"{args.threshold}, {t.positives_identical} of them byte-identical; {t.empty_docs} documents without tokens"
        )
        for note in rep.notes:
            print(f"note: {note}")
        curves = rep.curves
        reference = rep.reference
        print("\nAll pairs (F1 by k):\n")
        print(ev.format_table(rep.curves_all))
        print("\nByte-identical pairs left out:")
        result["report"] = rep.to_dict()
    for c in curves:
        result.setdefault("recommended_k", {})[c.name] = None
        if not c.positives:
            # Precision and recall measure nothing without a single true pair: say so instead of
            # printing a perfect precision and then failing to recommend.
            print(
                f"\n{c.name}: no pair of documents (byte-identical copies aside) reaches Jaccard {args.threshold}, so there is nothing to "
                "calibrate on: use a corpus with near-duplicates, or a lower --threshold"
            )
            continue
        print(f"\n{c.name}, {c.bytes_per_doc} bytes/document, {c.seconds:.1f} s\n")
        print(ev.format_curve(c))
        # Only a radius a store can be created with (designs stop at STORE_MAX_K).
        k = ev.recommend_k(c, args.target_precision, max_k=STORE_MAX_K)
        bk, bf = c.best()
        if k is None:
            print(f"\nno k up to {STORE_MAX_K} reaches precision {args.target_precision}; best F1 {bf:.3f} at k = {bk}")
        else:
            i = c.ks.index(k)
            beyond = ev.recommend_k(c, args.target_precision)
            capped = f" (k = {beyond} would too, but stores stop at k = {STORE_MAX_K})" if beyond is not None and beyond > k else ""
            print(
                f"\nrecommended k = {k} (largest k with precision >= {args.target_precision}){capped}: precision "
                f"{c.precision[i]:.3f}, recall {c.recall[i]:.3f}, F1 {c.f1[i]:.3f}; best F1 {bf:.3f} at k = {bk}"
            )
            print(f"apply it: fpstore-admin create STORE -k {k} (a new store), or fpstore-admin redesign STORE -k {k} (an existing one)")
            result["recommended_k"][c.name] = k
    for c in reference:
        bk, bf = c.best()
        i = c.ks.index(bk)
        print(
            f"\nreference: {c.name}, {c.bytes_per_doc} bytes/document: best F1 {bf:.3f} at estimated J >= {bk} "
            f"(precision {c.precision[i]:.3f}, recall {c.recall[i]:.3f})"
        )
    if args.png:
        try:
            ev.plot(
                curves,
                args.png,
                title=f"precision (solid) and recall (dashed) by k, J >= {args.threshold}",
                target_precision=args.target_precision,
            )
            print(f"\nwrote {args.png}")
        except ImportError as exc:
            print(f"fpstore-admin: note: no PNG written: {exc}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1, default=float)
        print(f"wrote {args.json}")
    return 0

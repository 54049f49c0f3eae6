"""``fpstore-admin calibrate``: measure precision and recall per k on your data, and pick k; with
``--sketch-bits``, also the verified search's per threshold θ, and pick θ.

Wired into ``fpstore-admin`` by :func:`register` (``fpstore/admin/cli.py`` calls it); a thin shell over
:mod:`fpstore.quality.evaluate` and :mod:`fpstore.quality.sketch`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from fpstore.admin.options import POSITIVE, int_arg, similarity_arg, sketch_bits_arg
from fpstore.fingerprint.pipeline import MAX_SHINGLE
from fpstore.index.design import MAX_K as STORE_MAX_K
from fpstore.store.sketches import CANDIDATE_K

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

With a sketch (--sketch-bits B, by default 512, what a new store keeps; 0: none), also measures the verified search a store runs: the
pairs within --candidate-k bits of the 64-bit key, kept when their B-bit sketches estimate a Jaccard
of at least θ, for θ = 0.50..0.95. Prints precision, recall and F1 per θ, the recommended θ (the
best F1 among the θ whose precision reaches --target-precision), the create and redesign commands
that apply it, and whether it beats the best k of the key alone on this corpus.
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
    p.add_argument(
        "--threshold", type=similarity_arg, default=0.8, help="Jaccard of 3-shingle sets that makes a near-duplicate (default 0.8)"
    )
    p.add_argument(
        "--target-precision", type=similarity_arg, default=0.95, help="recommend the largest k with this precision (default 0.95)"
    )
    p.add_argument(
        "--max-k", type=int_arg(0, 64), default=None, help="largest k reported (default: the largest radius a store can be created with)"
    )
    p.add_argument("--kind", choices=["minhash1", "simhash64"], default=None, help="fingerprint kind (default: the default pipeline's)")
    p.add_argument(
        "--shingle", type=int_arg(1, MAX_SHINGLE), default=None, help="the pipeline's shingle width (default: the default pipeline's)"
    )
    p.add_argument("--html", choices=["main-v2", "main-v1", "off"], default=None, help="HTML handling (default: main-v2)")
    p.add_argument(
        "--sketch-bits",
        type=sketch_bits_arg,
        default=None,
        metavar="B",
        help="also measure the search verified by a sketch of B bits (a multiple of 64 up to 512) per threshold θ, and recommend θ "
        "(default 512, the sketch of a new store; 0: the 64-bit key alone)",
    )
    p.add_argument(
        "--candidate-k",
        type=int_arg(0, STORE_MAX_K),
        default=None,
        metavar="K",
        help=f"the verified search's candidate radius of the key, 0..{STORE_MAX_K} (default {CANDIDATE_K})",
    )
    p.add_argument("--compare", action="store_true", help="also measure the simhash64 pipeline (tf weights, html off) for comparison")
    p.add_argument("--no-reference", action="store_true", help="skip the datasketch MinHash reference")
    p.add_argument("--limit", type=POSITIVE, default=None, help="read at most this many documents")
    p.add_argument("--png", default="calibrate.png", help="where to write the plot (default calibrate.png; '' for none)")
    p.add_argument("--json", default=None, help="also write every number to this JSON file")
    p.set_defaults(func=_cmd_calibrate)
    return p


def _pipeline_options(args: argparse.Namespace) -> dict[str, Any]:
    """The pipeline options given (``kind``, ``shingle``, ``html``), as Pipeline keywords."""
    kw: dict[str, Any] = {}
    if args.kind:
        kw["kind"] = args.kind
    if args.shingle is not None:
        kw["shingle"] = args.shingle
    if args.html:
        kw["html"] = args.html
    return kw


def _pipeline(args: argparse.Namespace, sketch_bits: int = 0):
    import fpstore

    return fpstore.Pipeline(**_pipeline_options(args), sketch_bits=sketch_bits)


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
    """Measure precision/recall per k and recommend k; with --sketch-bits, per θ and recommend θ."""
    import fpstore
    from fpstore.errors import InputError
    from fpstore.quality import evaluate as ev
    from fpstore.quality import sketch as sk

    if not 0 < args.threshold <= 1:
        raise InputError(f"--threshold must be in (0, 1], got {args.threshold}")
    if not 0 < args.target_precision <= 1:
        raise InputError(f"--target-precision must be in (0, 1], got {args.target_precision}")
    if args.sketch_bits and args.kind == "simhash64":
        raise InputError("--sketch-bits needs the minhash1 kind (a sketch is more MinHash1 words): leave out --kind simhash64")
    # The kind's default sketch, as a new store gets it: the verified search is what it answers with.
    bits = args.sketch_bits if args.sketch_bits is not None else fpstore.Pipeline(**_pipeline_options(args)).sketch_bits
    if args.candidate_k is not None and not bits:
        why = "--kind simhash64 does not run (it keeps no sketch)" if args.kind == "simhash64" else "--sketch-bits 0 turns off"
        raise InputError(f"--candidate-k is the candidate radius of the verified search, which {why}")
    candidate_k = CANDIDATE_K if args.candidate_k is None else args.candidate_k
    if args.max_k is None:
        args.max_k = STORE_MAX_K
    if not 0 <= args.max_k <= 64:
        raise InputError(f"--max-k must be in 0..64, got {args.max_k}")

    pipe = _pipeline(args)
    # The verified search's pipeline: the same key (a sketch is computed beside it, never changes
    # it) and the sketch, in one pass over the texts.
    sketching = _pipeline(args, bits) if bits else None
    held: dict[str, Any] = {}

    def key_and_sketch(texts):
        held["signatures"] = sketching.signatures(texts)
        return held["signatures"].values

    methods = {f"{pipe.kind}, html {pipe.html}, w={pipe.shingle} ({pipe.id})": key_and_sketch if sketching else pipe.fingerprint_many}
    if args.compare:
        old = fpstore.Pipeline(kind="simhash64", html="off")
        methods[f"simhash64 tf, html off ({old.id})"] = lambda t: old.fingerprint_many(t)
    result: dict = {"pipeline": pipe.config, "pipeline_id": pipe.id}
    verified: sk.Verified | None = None
    name = f"verified: k = {candidate_k}, {bits}-bit sketch"
    if args.pairs:
        labelled_pairs = _read_pairs(args.input)
        curves = ev.evaluate_pairs(labelled_pairs, methods, args.max_k)
        labelled = curves[0].positives
        print(f"{labelled} near-duplicate pairs among the labelled pairs")
        result["pairs"] = [c.to_dict() for c in curves]
        reference: list = []
        if sketching is not None:
            import numpy as np

            from fpstore.fingerprint.pipeline import sketch_distance

            a = sketching.signatures([x for x, _, _ in labelled_pairs])
            b = sketching.signatures([y for _, y, _ in labelled_pairs])
            verified = sk.verified_pairs_curve(
                name,
                np.bitwise_count(a.values ^ b.values),
                sketch_distance(a.sketches, b.sketches),
                bits,
                np.array([lab for _, _, lab in labelled_pairs], bool),
                candidate_k,
            )
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
        if sketching is not None:
            sig = held["signatures"]
            verified = sk.verified_search(name, rep.truth, sig.values, sig.sketches, candidate_k)
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
            given = "".join(f" --{name.replace('_', '-')} {value}" for name, value in _pipeline_options(args).items())
            print(
                f"apply it: fpstore-admin create STORE -k {k}{given} (a new store, without a sketch), or fpstore-admin redesign "
                f"STORE -k {k} (an existing one; a store that verifies also needs --threshold 0 to answer by the key alone)"
            )
            result["recommended_k"][c.name] = k
    if verified is not None:
        result["verified"] = _report_verified(args, verified, curves[0], sketching)
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


def _row(c, i: int) -> dict[str, Any]:
    return {"k": c.ks[i], "tp": c.tp[i], "fp": c.fp[i], "precision": c.precision[i], "recall": c.recall[i], "f1": c.f1[i]}


def _report_verified(args: argparse.Namespace, v, key, sketching) -> dict[str, Any]:
    """Print the verified search's curve, the recommended θ with the commands that apply it, and
    how it compares with the key alone (``key``: the key's curve, byte-identical pairs left out);
    return the same as JSON."""
    from fpstore.quality import evaluate as ev
    from fpstore.quality import sketch as sk

    c = v.curve
    out: dict[str, Any] = {"name": c.name, "bytes_per_doc": c.bytes_per_doc, **v.to_dict(), "recommended_theta": None}
    if not c.positives:
        return out  # the key's table already said there is nothing to calibrate on
    ceiling = v.ceiling / c.positives
    print(
        f"\nVerified search: the pairs within k = {v.candidate_k} bits of the key ({v.candidates} pairs, recall ceiling "
        f"{ceiling:.3f}), kept when their {v.sketch_bits}-bit sketches estimate a Jaccard >= θ; {c.bytes_per_doc} bytes/document\n"
    )
    rows = ["| θ | TP | FP | precision | recall | F1 |", "|---:|---:|---:|---:|---:|---:|"]
    rows += [
        f"| {t:.2f} | {tp} | {fp} | {p:.3f} | {r:.3f} | {f:.3f} |"
        for t, tp, fp, p, r, f in zip(c.ks, c.tp, c.fp, c.precision, c.recall, c.f1)
    ]
    print("\n".join(rows))
    bt, bf = c.best()
    ib = c.ks.index(bt)
    out["best"] = _row(c, ib)
    theta = sk.recommend_theta(c, args.target_precision)
    if theta is None:
        print(
            f"\nno θ reaches precision {args.target_precision}; best F1 {bf:.3f} at θ = {bt:.2f} "
            f"(precision {c.precision[ib]:.3f}, recall {c.recall[ib]:.3f})"
        )
    else:
        i = c.ks.index(theta)
        out["recommended_theta"] = theta
        out["at_recommended"] = _row(c, i)
        print(
            f"\nrecommended θ = {theta:.2f} (best F1 with precision >= {args.target_precision}): precision {c.precision[i]:.3f}, "
            f"recall {c.recall[i]:.3f}, F1 {c.f1[i]:.3f}"
        )
        given = " ".join(f"--{name} {value}" for name, value in _pipeline_options(args).items())
        create = f"fpstore-admin create STORE --threshold {theta:.2f} --sketch-bits {v.sketch_bits} -k {v.candidate_k}" + (
            f" {given}" if given else ""
        )
        redesign = f"fpstore-admin redesign STORE --threshold {theta:.2f} -k {v.candidate_k}"
        out["commands"] = {"create": create, "redesign": redesign}
        print(f"apply it to a new store:  {create}")
        print(f"or to an existing store:  {redesign}")
        print(
            f"  (redesign needs a store whose pipeline keeps {v.sketch_bits}-bit sketches, {sketching.id}; a store without "
            "sketches cannot gain them from its fingerprints: ingest its texts into a new store made with the create command)"
        )
    # The key alone at the radii a store can be created with, byte-identical pairs left out as here.
    usable = [j for j, k in enumerate(key.ks) if k <= STORE_MAX_K]
    j = max(usable, key=lambda j: (key.f1[j], -j))
    out["key_best"] = _row(key, j)
    beats = bf > key.f1[j]
    on = "on these labelled pairs" if args.pairs else "on this corpus"
    out["beats_key"] = beats
    verdict = (
        f"the verified search beats the key alone {on}: best F1 {bf:.3f} (θ = {bt:.2f}, k = {v.candidate_k}) against "
        f"{key.f1[j]:.3f} (key alone, k = {key.ks[j]}), at {c.bytes_per_doc} bytes/document instead of {key.bytes_per_doc}"
        if beats
        else f"the verified search does not beat the key alone {on}: best F1 {bf:.3f} (θ = {bt:.2f}, k = {v.candidate_k}) "
        f"against {key.f1[j]:.3f} (key alone, k = {key.ks[j]}): a store without a sketch (-k {key.ks[j]}, no --threshold, "
        f"{key.bytes_per_doc} bytes/document instead of {c.bytes_per_doc}) does as well here"
    )
    print(f"\n{verdict}")
    k = ev.recommend_k(key, args.target_precision, max_k=STORE_MAX_K)
    if theta is not None and k is not None:
        i, j = c.ks.index(theta), key.ks.index(k)
        out["at_target_precision"] = {"verified_f1": c.f1[i], "key_f1": key.f1[j], "key_k": k}
        print(
            f"at precision >= {args.target_precision}: F1 {c.f1[i]:.3f} verified (θ = {theta:.2f}) against {key.f1[j]:.3f} "
            f"for the key alone (k = {k})"
        )
    return out

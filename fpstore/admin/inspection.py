"""``fpstore-admin`` commands that look at a store: create (and show it), info, stats, verify."""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import fpstore
from fpstore.admin.options import Damaged, open_checked, open_store, pipeline_from
from fpstore.admin.output import EXIT_FINDINGS, EXIT_OK, dumps, mib, note, print_json, stages
from fpstore.errors import CorruptionError, FpstoreError, InputError
from fpstore.store.inspect import MAX_PROBLEMS
from fpstore.store.storage import structure_problems


def cmd_create(args: argparse.Namespace) -> int:
    """Create a new, empty store with the given pipeline and table design."""
    if os.path.exists(os.path.join(args.store, "data.mdb")):
        raise InputError(f"{args.store} already holds a store; use info to see it")
    pipeline = pipeline_from(args)  # without options, the store picks its default
    with fpstore.open(
        args.store, k=args.k, pipeline=pipeline, design=args.design, expected_size=args.expected_size, threshold=args.threshold
    ) as store:
        data = _info_data(store)
    if args.json:
        print_json(data)
    else:
        print(f"created {args.store}")
        _print_info(data)
    return EXIT_OK


def _info_data(store: fpstore.Store) -> dict[str, Any]:
    """:meth:`fpstore.Store.info` (LMDB's own figures under ``"lmdb"``) and three figures drawn from it."""
    data = dict(store.info())
    n = data["documents"]
    data.update(
        {
            "incremental_entries_per_table": data["lmdb"]["databases"].get("t00", {}).get("entries"),
            "bytes_per_fingerprint": (data["file_size"] / n) if n else None,
            "tables": len(store.design.tables),
        }
    )
    return data


def _print_info(d: dict[str, Any]) -> None:
    created = d.get("created") or {}
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(created["time"])) if "time" in created else "?"
    pipe = d["pipeline"]
    lm = d["lmdb"]
    readers = lm["readers"]
    lags = [r["lag"] for r in readers if r["lag"] is not None]
    print(f"store        {d['path']}")
    print(
        f"format       {d['format']}, created {when} by fpstore {created.get('fpstore', '?')} "
        f"(LMDB {created.get('lmdb', '?')}, Python {created.get('python', '?')})"
    )
    print(f"pipeline     {d['pipeline_id']}: " + ", ".join(f"{k}={v}" for k, v in pipe.items()))
    print(f"design       {d['design']}")
    print(f"k            {d['k']} (default query radius)")
    if d.get("threshold") is not None:
        print(f"threshold    {d['threshold']:g} (answers keep candidates whose sketches estimate at least this similarity)")
    print(f"documents    {d['documents']:,}")
    if "runs" in d:
        runs = d["runs"]
        print(
            f"tiers        {d['incremental_entries']:,} incremental (flushed at {d['flush_entries']:,}), "
            f"{len(runs)} run{'' if len(runs) == 1 else 's'} ({', '.join(f'{r:,}' for r in runs) or 'none'}), "
            f"{d['tombstones']:,} tombstones"
        )
    extra = {k: v for k, v in d.items() if k not in _INFO_SHOWN}
    for k, v in extra.items():  # figures newer store versions add (runs, tombstones, ...)
        print(f"{k:<12} {v if not isinstance(v, (dict, list)) else dumps(v)}")
    bpf = d["bytes_per_fingerprint"]
    print(
        f"size         file {mib(d['file_size'])}, map {mib(d['map_size'])} ({lm['map_used'] * 100:.1f}% used)"
        + (f", {bpf:,.1f} bytes per fingerprint" if bpf is not None else "")
    )
    print(f"pages        {lm['pages_used']:,} of {lm['page_size']} bytes used, ~{lm['free_pages']:,} free")
    print(f"readers      {len(readers)} of {lm['max_readers']}" + (f", oldest {max(lags)} transactions behind" if lags else ""))
    tables = {k: v for k, v in lm["databases"].items()}
    print("databases    " + ", ".join(f"{k} {v['entries']:,}" for k, v in tables.items()))


_INFO_SHOWN = {
    "path",
    "format",
    "pipeline_id",
    "pipeline",
    "design",
    "design_detail",
    "k",
    "threshold",
    "documents",
    "file_size",
    "map_size",
    "created",
    "lmdb",
    "incremental_entries_per_table",
    "bytes_per_fingerprint",
    "tables",
    "incremental_entries",
    "runs",
    "tombstones",
    "flush_entries",
}


def cmd_info(args: argparse.Namespace) -> int:
    """Show a store's header, pipeline, design, counts, sizes, map use and readers."""
    with open_checked(args.store) as store:
        try:
            data = _info_data(store)
        except CorruptionError as exc:
            raise Damaged(str(exc)) from None
    if args.json:
        print_json(data)
    else:
        _print_info(data)
    return EXIT_OK


# -- stats --------------------------------------------------------------------------------------------------


def _hist_lines(hist: dict[str, int], width: int = 40) -> Iterator[str]:
    if not hist:
        yield "  (none)"
        return
    top = max(hist.values())
    for d, c in sorted((int(d), c) for d, c in hist.items()):
        yield f"  {d:3d} {c:8,} {'#' * max(1, round(c / top * width))}"


def cmd_stats(args: argparse.Namespace) -> int:
    """Per table, candidates per probe over a sample of stored fingerprints, and distance histograms."""
    with open_store(args.store) as store:
        data = store.stats(sample=args.sample, seed=args.seed)
        info = store.info()
    if args.png:
        _stats_png(data, info["incremental_entries"], info["runs"], args.png)
        note(f"wrote {args.png}")
    if args.json:
        print_json(data)
        return EXIT_OK
    print(f"{data['indexed']:,} indexed fingerprints of {data['documents']:,} documents; sample of {data['sample']:,}")
    print(f"design: {data['design']}")
    print("table  prefix  probes  candidates/probe p50     p99     max   (uniform expectation)")
    for t in data["tables"]:
        c = t["candidates_per_probe"]
        print(
            f"{t['table']:5d}  {t['prefix_bits']:6d}  {t['probes_per_query']:6d}  {c['p50']:20,} {c['p99']:7,} {c['max']:7,}   "
            f"({t['expected_per_probe_uniform']:.3g})"
        )
    print("Hamming distance of random pairs:")
    for line in _hist_lines(data["distance_random_pairs"]):
        print(line)
    print(f"Hamming distance to the nearest other fingerprint ({data['nearest_neighbour_sample']:,} sampled):")
    for line in _hist_lines(data["distance_nearest_neighbour"]):
        print(line)
    return EXIT_OK


def _stats_png(data: dict[str, Any], incremental: int, runs: list[int], path: str) -> None:
    """Three panels: distances to the nearest other fingerprint beside those of random pairs,
    candidates per probe per table (p50, p99, max against the uniform expectation), and the
    documents of each tier (the incremental tables, then each run)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError("--png needs matplotlib: pip install 'fpstore[quality]'") from None
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(15, 4.2))
    for name, hist, color in (
        ("random pairs", data["distance_random_pairs"], "0.6"),
        ("nearest other fingerprint", data["distance_nearest_neighbour"], "C0"),
    ):
        total = sum(hist.values()) or 1
        xs = sorted(int(d) for d in hist)
        left.bar(xs, [hist[str(x)] / total for x in xs], width=0.9, alpha=0.7, color=color, label=name)
    left.set_xlabel("Hamming distance")
    left.set_ylabel("share of the sample")
    left.set_title("distances (a peak near 0: near-duplicates)")
    left.legend()
    tables = data["tables"]
    xs = [t["table"] for t in tables]
    for key, marker in (("p50", "o"), ("p99", "s"), ("max", "^")):
        middle.plot(xs, [t["candidates_per_probe"][key] for t in tables], marker=marker, label=key)
    middle.plot(xs, [t["expected_per_probe_uniform"] for t in tables], "k--", label="uniform expectation")
    middle.set_yscale("symlog")
    middle.set_xticks(xs)
    middle.set_xlabel("table")
    middle.set_ylabel("candidates per probe")
    middle.set_title("bucket sizes per table (skew: max far above p50)")
    middle.legend()
    sizes = [incremental, *runs]
    right.bar(range(len(sizes)), [max(n, 0.5) for n in sizes], color=["C1"] + ["C2"] * len(runs))
    right.set_xticks(range(len(sizes)), ["incremental"] + [f"run {i + 1}" for i in range(len(runs))], rotation=45, ha="right")
    right.set_yscale("log")
    right.set_ylabel("documents")
    right.set_title(f"tiers: incremental tables and {len(runs)} runs")
    fig.suptitle(data["design"], fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- verify --------------------------------------------------------------------------------------------------


def _copy_check(store: fpstore.Store, tmp_parent: str | None) -> tuple[list[str], dict[str, Any]]:
    """Copy the environment (a consistent snapshot, compacted) and open the copy as a store.
    Runs after LMDB's structural check of the file passed (the copy walks every B-tree)."""

    problems: list[str] = []
    parent = tmp_parent or os.path.dirname(os.path.abspath(store.path))
    try:
        tmp = tempfile.mkdtemp(prefix=".fpstore-verify-", dir=parent)
    except OSError as exc:
        raise InputError(f"cannot make a temporary copy in {parent} ({exc.strerror}); pass --tmp DIR or --no-copy") from None
    facts: dict[str, Any] = {}
    try:
        try:
            store.copy(tmp, compact=True)
        except FpstoreError as exc:
            problems.append(f"LMDB cannot copy the environment: {exc}")
            return problems, facts
        facts["copy_bytes"] = os.path.getsize(os.path.join(tmp, "data.mdb"))
        try:
            with fpstore.open(tmp, readonly=True, create=False) as copy:
                facts["copy_documents"] = len(copy)
        except FpstoreError as exc:
            problems.append(f"the consistent copy does not open as a store: {exc}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return problems, facts


def cmd_verify(args: argparse.Namespace) -> int:
    """Check a store deeply; exit 1 when anything is wrong.

    First LMDB's structural check of the file (``lmdb.verify``, which reads it as bytes: nothing
    walks a B-tree of a damaged file); then every document in every table, runs sorted and
    decodable, counts that agree, and a consistent, compacted copy of the environment.
    """
    t0 = time.monotonic()
    say = stages("verify", args)
    say("LMDB's structural check of the file")
    structure = structure_problems(args.store)
    facts: dict[str, Any] = {}
    if structure:
        problems = [f"LMDB's structural check: {p}" for p in structure[:MAX_PROBLEMS]]
        facts.update({"documents": None, "check": "LMDB's structural check only", "lmdb_verifier": f"{len(structure)} problems"})
        verdict = (
            f"damaged: the file failed LMDB's structural check ({len(structure)} problem{'s' * (len(structure) != 1)}); "
            "nothing else was read (LMDB can crash on a damaged page): restore the store from a good copy"
        )
    else:
        if structure is not None:
            facts["lmdb_verifier"] = "ok"
        try:
            store = open_store(args.store)
        except CorruptionError as exc:
            problems = [f"the store does not open: {exc}"]
            facts.update({"documents": None, "check": "open"})
        else:
            with store:
                say(f"every document and table entry of {len(store):,} documents")
                try:
                    problems = store.verify()
                except FpstoreError as exc:
                    problems = [f"the check stopped: {exc}"]
                facts.update({"documents": len(store), "check": "Store.verify"})
                if not args.no_copy:
                    say("a consistent, compacted copy of the environment")
                    more, cfacts = _copy_check(store, args.tmp)
                    problems += more
                    facts.update(cfacts)
        verdict = "ok" if not problems else f"{len(problems)} problem{'s' * (len(problems) != 1)}"
    facts["seconds"] = round(time.monotonic() - t0, 3)
    if args.json:
        print_json({"ok": not problems, "problems": problems, **facts})
    else:
        for p in problems:
            print(f"problem: {p}")
        if structure:
            print(f"{args.store}: {verdict} ({facts['seconds']:.2f} s)")
        else:
            docs = "" if facts["documents"] is None else f"{facts['documents']:,} documents, "
            extra = ", LMDB verifier " + str(facts.get("lmdb_verifier")) if "lmdb_verifier" in facts else ""
            print(f"{args.store}: {verdict} ({docs}{facts['check']}{extra}, {facts['seconds']:.2f} s)")
    return EXIT_OK if not problems else EXIT_FINDINGS

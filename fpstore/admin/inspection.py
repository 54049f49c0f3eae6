"""``fpstore-admin`` commands that look at a store: create (and show it), info, stats, verify."""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from typing import Any, Iterator

import numpy as np

import fpstore
from fpstore.admin.options import Damaged, open_checked, open_store, pipeline_from, structure_problems
from fpstore.admin.output import EXIT_FINDINGS, EXIT_OK, dumps, mib, print_json
from fpstore.errors import CorruptionError, FpstoreError, InputError


def cmd_create(args: argparse.Namespace) -> int:
    """Create a new, empty store with the given pipeline and table design."""
    if os.path.exists(os.path.join(args.store, "data.mdb")):
        raise InputError(f"{args.store} already holds a store; use info to see it")
    with fpstore.open(
        args.store, k=args.k, pipeline=pipeline_from(args, True), design=args.design, expected_size=args.expected_size
    ) as store:
        data = _info_data(store)
    if args.json:
        print_json(data)
    else:
        print(f"created {args.store}")
        _print_info(data)
    return EXIT_OK


def _readers(env_readers: str, last_txnid: int) -> list[dict[str, Any]]:
    """Parse LMDB's reader table (``pid thread txnid`` lines) into dicts with the lag in transactions."""
    out = []
    for line in env_readers.splitlines()[1:]:
        parts = line.split()
        if len(parts) != 3:
            continue
        pid, thread, txnid = parts
        try:
            txn = int(txnid)
        except ValueError:
            txn = None  # "-": a slot not in a transaction
        out.append({"pid": int(pid), "thread": thread, "txnid": txn, "lag": None if txn is None else last_txnid - txn})
    return out


def _info_data(store: fpstore.Store) -> dict[str, Any]:
    data = dict(store.info())
    lmdb_info = store._storage.info()  # LMDB's own figures (env.info, env.stat, readers)
    psize = lmdb_info["psize"]
    used_pages = lmdb_info["last_pgno"] + 1
    sub = {}
    tree_pages = lmdb_info["branch_pages"] + lmdb_info["leaf_pages"] + lmdb_info["overflow_pages"]
    with store._storage.read() as txn:
        for name, db in sorted(store._storage.dbs.items()):
            st = txn.stat(db)
            pages = st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
            tree_pages += pages
            sub[name] = {"entries": st["entries"], "pages": pages, "bytes": pages * psize}
    n = data["documents"]
    indexed = sub.get("t00", {}).get("entries")
    data.update(
        {
            "lmdb": {
                "page_size": psize,
                "pages_used": used_pages,
                # Pages in the file that no tree holds: LMDB's free list (reusable) plus its own
                # bookkeeping; an estimate, since py-lmdb cannot open the free-list database.
                "free_pages": max(used_pages - 2 - tree_pages, 0),
                "map_used": used_pages * psize / lmdb_info["map_size"],
                "last_txnid": lmdb_info["last_txnid"],
                "max_readers": lmdb_info["max_readers"],
                "readers": _readers(lmdb_info["readers"], lmdb_info["last_txnid"]),
                "databases": sub,
            },
            "incremental_entries_per_table": indexed,
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
    print(f"format       {d['format']}, created {when} by fpstore {created.get('fpstore', '?')} "
          f"(LMDB {created.get('lmdb', '?')}, Python {created.get('python', '?')})")
    print(f"pipeline     {d['pipeline_id']}: " + ", ".join(f"{k}={v}" for k, v in pipe.items()))
    print(f"design       {d['design']}")
    print(f"k            {d['k']} (default query radius)")
    print(f"documents    {d['documents']:,}")
    if "runs" in d:
        runs = d["runs"]
        print(f"tiers        {d['incremental_entries']:,} incremental (flushed at {d['flush_entries']:,}), "
              f"{len(runs)} run{'' if len(runs) == 1 else 's'} ({', '.join(f'{r:,}' for r in runs) or 'none'}), "
              f"{d['tombstones']:,} tombstones")
    extra = {k: v for k, v in d.items() if k not in _INFO_SHOWN}
    for k, v in extra.items():  # figures newer store versions add (runs, tombstones, ...)
        print(f"{k:<12} {v if not isinstance(v, (dict, list)) else dumps(v)}")
    bpf = d["bytes_per_fingerprint"]
    print(f"size         file {mib(d['file_size'])}, map {mib(d['map_size'])} ({lm['map_used'] * 100:.1f}% used)"
          + (f", {bpf:,.1f} bytes per fingerprint" if bpf is not None else ""))
    print(f"pages        {lm['pages_used']:,} of {lm['page_size']} bytes used, ~{lm['free_pages']:,} free")
    print(f"readers      {len(readers)} of {lm['max_readers']}"
          + (f", oldest {max(lags)} transactions behind" if lags else ""))
    tables = {k: v for k, v in lm["databases"].items()}
    print("databases    " + ", ".join(f"{k} {v['entries']:,}" for k, v in tables.items()))


_INFO_SHOWN = {
    "path", "format", "pipeline_id", "pipeline", "design", "k", "documents", "file_size", "map_size", "created",
    "lmdb", "incremental_entries_per_table", "bytes_per_fingerprint", "tables",
    "incremental_entries", "runs", "tombstones", "flush_entries",
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


def _live_fingerprints(store: fpstore.Store) -> tuple[np.ndarray, np.ndarray]:
    """(fingerprints uint64, ids) of every indexed live document, in one snapshot."""
    # The store has no public bulk reader of its fingerprints; _live_index is its own (read-only).
    with store._storage.read() as txn:
        fps, ids = store._live_index(txn)
    return np.asarray(fps, dtype=np.uint64), np.asarray(ids, dtype=np.uint64)


def _percentiles(values: np.ndarray) -> dict[str, float]:
    if not len(values):
        return {"p50": 0, "p99": 0, "max": 0, "mean": 0.0}
    return {
        "p50": int(np.percentile(values, 50, method="nearest")),
        "p99": int(np.percentile(values, 99, method="nearest")),
        "max": int(values.max()),
        "mean": float(values.mean()),
    }


def _stats_data(store: fpstore.Store, sample: int, seed: int) -> dict[str, Any]:
    design = store.design
    fps, ids = _live_fingerprints(store)
    n = len(fps)
    rng = np.random.default_rng(seed)
    pick = rng.choice(n, size=min(sample, n), replace=False) if n else np.zeros(0, np.int64)
    sampled = fps[pick]
    tables = []
    for t, table in enumerate(design.tables):
        keys = np.sort(design.permute(fps, t))
        per_probe: list[int] = []
        per_table: list[int] = []
        for perm in design.permute(sampled, t).tolist():
            total = 0
            for lo, hi in design.probe_prefixes(perm, t):
                c = int(np.searchsorted(keys, np.uint64(hi), "right") - np.searchsorted(keys, np.uint64(lo), "left"))
                per_probe.append(c)
                total += c
            per_table.append(total)
        tables.append(
            {
                "table": t,
                "prefix_bits": table.prefix_bits,
                "flips": table.flips,
                "probes_per_query": table.n_probes,
                "candidates_per_probe": _percentiles(np.array(per_probe, dtype=np.int64)),
                "candidates_per_query": _percentiles(np.array(per_table, dtype=np.int64)),
                "expected_per_probe_uniform": n / 2.0**table.prefix_bits,
            }
        )
    # Distances: random pairs show the background (about 32 for unrelated texts); each sampled
    # fingerprint's nearest other fingerprint shows how near duplicates sit, to choose k by.
    pairs = min(10000, n * (n - 1) // 2) if n > 1 else 0
    random_hist = np.zeros(65, dtype=np.int64)
    if pairs:
        a = rng.integers(0, n, pairs)
        b = (a + rng.integers(1, n, pairs)) % n
        random_hist = np.bincount(np.bitwise_count(fps[a] ^ fps[b]).astype(np.int64), minlength=65)
    nearest_hist = np.zeros(65, dtype=np.int64)
    nn_sample = pick[: max(0, min(len(pick), 50_000_000 // max(n, 1)))]
    if n > 1 and len(nn_sample):
        nearest = []
        for i in nn_sample.tolist():
            d = np.bitwise_count(fps ^ fps[i]).astype(np.int64)
            d[i] = 65
            nearest.append(int(d.min()))
        nearest_hist = np.bincount(np.array(nearest), minlength=66)[:65]
    return {
        "documents": len(store),
        "indexed": n,
        "sample": int(len(pick)),
        "seed": seed,
        "design": design.describe(max(n, 1)),
        "tables": tables,
        "distance_random_pairs": {str(d): int(c) for d, c in enumerate(random_hist) if c},
        "distance_nearest_neighbour": {str(d): int(c) for d, c in enumerate(nearest_hist) if c},
        "nearest_neighbour_sample": int(len(nn_sample)),
    }


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
        data = _stats_data(store, args.sample, args.seed)
    if args.json:
        print_json(data)
        return EXIT_OK
    print(f"{data['indexed']:,} indexed fingerprints of {data['documents']:,} documents; sample of {data['sample']:,}")
    print(f"design: {data['design']}")
    print("table  prefix  probes  candidates/probe p50     p99     max   (uniform expectation)")
    for t in data["tables"]:
        c = t["candidates_per_probe"]
        print(f"{t['table']:5d}  {t['prefix_bits']:6d}  {t['probes_per_query']:6d}  {c['p50']:20,} {c['p99']:7,} {c['max']:7,}   "
              f"({t['expected_per_probe_uniform']:.3g})")
    print("Hamming distance of random pairs:")
    for line in _hist_lines(data["distance_random_pairs"]):
        print(line)
    print(f"Hamming distance to the nearest other fingerprint ({data['nearest_neighbour_sample']:,} sampled):")
    for line in _hist_lines(data["distance_nearest_neighbour"]):
        print(line)
    return EXIT_OK


# -- verify --------------------------------------------------------------------------------------------------


_MAX_PROBLEMS = 100


def _deep_check(store: fpstore.Store) -> list[str]:
    """Problems found by reading every document and every table entry (read-only, one snapshot).

    Used when the store has no ``verify()`` of its own. Checks: every live document's record
    decodes and its key maps back to it; the document count agrees; every indexed live document
    sits in table 0 (incremental tables plus runs, less tombstones) with its fingerprint; every
    other table holds exactly table 0's fingerprints, permuted; runs are sorted and decodable.
    """
    from fpstore.store import store as _s

    problems: list[str] = []

    def problem(msg: str) -> None:
        if len(problems) < _MAX_PROBLEMS:
            problems.append(msg)

    design = store.design
    with store._storage.read() as txn:
        count = store._meta_int(txn, _s.H_COUNT)
        next_id = store._meta_int(txn, _s.H_NEXT_ID)
        dead = set(int(i) for i in store._dead_ids(txn).tolist())
        # Table 0 of both tiers, with ids.
        inc: list[np.ndarray] = []
        for t, db in enumerate(store._tables):
            raw = b"".join(txn.cursor(db=db).iternext(keys=True, values=False))
            if len(raw) % 16:
                problem(f"table {t} holds keys that are not 16 bytes")
                raw = raw[: len(raw) // 16 * 16]
            inc.append(np.frombuffer(raw, dtype=">u8").reshape(-1, 2).astype(np.uint64))
        run_fps: list[list[np.ndarray]] = [[] for _ in design.tables]
        run_ids: list[np.ndarray] = []
        for r, run in enumerate(store._runs(txn)):
            try:
                for t in range(len(design.tables)):
                    vals = np.asarray(run.table(t).all(), dtype=np.uint64)
                    if len(vals) > 1 and np.any(vals[1:] < vals[:-1]):
                        problem(f"run {r} table {t} is not sorted")
                    run_fps[t].append(vals)
                run_ids.append(np.asarray(run.all_ids(), dtype=np.uint64))
            except FpstoreError as exc:
                problem(f"run {r} does not decode: {exc}")
                return problems
        fps0 = np.concatenate([inc[0][:, 0]] + run_fps[0]) if len(design.tables) else np.zeros(0, np.uint64)
        ids0 = np.concatenate([inc[0][:, 1]] + run_ids)
        if len(ids0) != len(fps0):
            problem("run id lists and table 0 differ in length")
            return problems
        for t in range(1, len(design.tables)):
            have = np.sort(np.concatenate([inc[t][:, 0]] + run_fps[t]))
            want = np.sort(design.permute(fps0, t))
            if len(have) != len(want):
                problem(f"table {t} holds {len(have):,} entries, table 0 holds {len(want):,}")
            elif not np.array_equal(have, want):
                bad = int(np.count_nonzero(have != want))
                problem(f"table {t} differs from table 0 permuted in {bad:,} positions")
            # Incremental entries also carry ids: each must be the permuted entry of that id.
            if len(inc[t]):
                got = sorted(zip(inc[t][:, 1].tolist(), inc[t][:, 0].tolist()))
                exp = sorted(zip(inc[0][:, 1].tolist(), design.permute(inc[0][:, 0], t).tolist()))
                if got != exp:
                    problem(f"incremental table {t} does not hold the same documents as incremental table 0")
        index: dict[int, int] = {}
        for i, f in zip(ids0.tolist(), fps0.tolist()):
            if i in dead:
                continue
            if i in index:
                problem(f"document {i} is in table 0 twice")
            index[i] = f
    # Every live document, through the public API (both tiers).
    seen = 0
    indexed_docs = set()
    for key in store:
        seen += 1
        doc = store.get(key)
        if doc is None:
            problem(f"key {key!r} is listed but cannot be read")
            continue
        if doc.key != key:
            problem(f"key {key!r} reads back as {doc.key!r}")
        if not 0 < doc.id < next_id:
            problem(f"document {key!r} has id {doc.id}, outside 1..{next_id - 1}")
        if not doc.short:
            indexed_docs.add(doc.id)
            f = index.get(doc.id)
            if f is None:
                problem(f"document {key!r} (id {doc.id}) is missing from the tables")
            elif f != doc.fingerprint:
                problem(f"document {key!r} (id {doc.id}) has fingerprint {doc.fingerprint:016x} but table 0 holds {f:016x}")
    if seen != count:
        problem(f"the store counts {count:,} documents but {seen:,} were read")
    stray = set(index) - indexed_docs
    if stray:
        problem(f"{len(stray):,} table entries name no live document (for example id {min(stray)})")
    return problems


def _copy_check(store: fpstore.Store, tmp_parent: str | None) -> tuple[list[str], dict[str, Any]]:
    """Copy the environment (a consistent snapshot, compacted) and open the copy as a store.

    Runs after LMDB's structural check of the file passed (the copy walks every B-tree)."""
    import lmdb

    problems: list[str] = []
    parent = tmp_parent or os.path.dirname(os.path.abspath(store.path))
    try:
        tmp = tempfile.mkdtemp(prefix=".fpstore-verify-", dir=parent)
    except OSError as exc:
        raise InputError(f"cannot make a temporary copy in {parent} ({exc.strerror}); pass --tmp DIR or --no-copy") from None
    facts: dict[str, Any] = {}
    try:
        try:
            store._storage.env.copy(tmp, compact=True)
        except lmdb.Error as exc:
            problems.append(f"LMDB cannot copy the environment: {type(exc).__name__}: {exc}")
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
    structure = structure_problems(args.store)
    facts: dict[str, Any] = {}
    if structure:
        problems = [f"LMDB's structural check: {p}" for p in structure[:_MAX_PROBLEMS]]
        facts.update({"documents": None, "check": "LMDB's structural check only", "lmdb_verifier": f"{len(structure)} problems"})
        verdict = (f"damaged: the file failed LMDB's structural check ({len(structure)} problem{'s' * (len(structure) != 1)}); "
                   "nothing else was read (LMDB can crash on a damaged page): restore the store from a good copy")
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
                own = getattr(store, "verify", None)
                try:
                    problems = list(own()) if callable(own) else _deep_check(store)
                except FpstoreError as exc:
                    problems = [f"the check stopped: {exc}"]
                facts.update({"documents": len(store), "check": "Store.verify" if callable(own) else "fpstore-admin deep check"})
                if not args.no_copy:
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

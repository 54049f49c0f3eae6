"""``fpstore-admin``: the operator's command line, a thin shell over the public API.

Exit codes: 0 ok, 1 findings (damage found by ``verify``, or by ``export`` and ``info``, which
refuse a damaged store; input skipped by ``ingest``; no match for ``query``), 2 usage or error,
130 interrupted. Errors are printed as one line without a
traceback. ``docs/cli.md`` documents every command.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import IO, Any, Callable, Iterator, Sequence

import numpy as np

import fpstore
from fpstore.index.design import MAX_K
from fpstore.errors import CorruptionError, FpstoreError, InputError, PipelineMismatchError, StorageError

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130
PROG = "fpstore-admin"


# -- output helpers -------------------------------------------------------------------------------------


def _key_out(key: object) -> object:
    """A key as JSON: str and int as themselves, bytes as ``{"hex": ...}``."""
    if isinstance(key, (bytes, bytearray)):
        return {"hex": bytes(key).hex()}
    return key


def _key_text(key: object) -> str:
    if isinstance(key, (bytes, bytearray)):
        return "hex:" + bytes(key).hex()
    return str(key)


def _json_default(obj: object) -> object:
    if isinstance(obj, (bytes, bytearray)):
        return bytes(obj).hex()
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)


def _dumps(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False, default=_json_default)


def _print_json(obj: object) -> None:
    print(json.dumps(obj, ensure_ascii=False, default=_json_default, indent=2))


def _note(msg: str) -> None:
    print(f"{PROG}: {msg}", file=sys.stderr)


def _mib(n: float) -> str:
    return f"{n / (1 << 20):,.1f} MiB"


def _hms(seconds: float) -> str:
    if not math.isfinite(seconds) or seconds < 0:
        return "--:--"
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class Progress:
    """A one-line progress bar on stderr: percent, documents, rate and ETA (redrawn at most 5×/s)."""

    def __init__(self, total_bytes: int, enabled: bool, stream: IO[str] | None = None) -> None:
        self.total = max(total_bytes, 0)
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.t0 = time.monotonic()
        self.last = 0.0
        self.drawn = False
        self.state = (0, 0)

    def update(self, docs: int, nbytes: int, *, force: bool = False) -> None:
        if not self.enabled:
            return
        self.state = (docs, nbytes)
        now = time.monotonic()
        if not force and now - self.last < 0.2:
            return
        self.last = now
        elapsed = max(now - self.t0, 1e-9)
        frac = min(nbytes / self.total, 1.0) if self.total else 0.0
        width = 24
        bar = "#" * int(frac * width) + "." * (width - int(frac * width))
        byte_rate = nbytes / elapsed
        eta = (self.total - nbytes) / byte_rate if byte_rate > 0 and self.total else float("nan")
        line = (
            f"\r[{bar}] {frac * 100:5.1f}%  {docs:,} docs  {docs / elapsed:,.0f} docs/s  "
            f"{byte_rate / 1e6:,.1f} MB/s  ETA {_hms(eta)}"
        )
        self.stream.write(line)
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.enabled:
            self.update(*self.state, force=True)
            self.stream.write("\n")
            self.stream.flush()


def _want_progress(args: argparse.Namespace) -> bool:
    if args.progress is not None:
        return bool(args.progress)
    return sys.stderr.isatty()


# -- opening stores ---------------------------------------------------------------------------------------


def _open(path: str, *, readonly: bool = True) -> fpstore.Store:
    """An existing store; a missing one is an error, never silently created."""
    return fpstore.open(path, readonly=readonly, create=False)


class _Damaged(CorruptionError):
    """Damage found by a command that runs on damaged stores (verify, export, info): a finding,
    reported in one line with exit 1 (RELIABILITY.md rule 9), not an error of use."""


def _verify_file_once(data_path: str) -> list[str]:
    from lmdb import verify as lmdb_verify

    try:
        return list(lmdb_verify.verify(data_path, subdir=False))
    except lmdb_verify.VerifyError as exc:
        return [f"the file cannot be verified: {exc}"]
    except OSError as exc:
        raise StorageError(f"{data_path}: cannot read the store file to check it: {exc.strerror or exc}") from None


def _verify_file_pinned(path: str, data_path: str) -> list[str] | None:
    """:func:`_verify_file_once` while holding a read transaction; None when LMDB does not even
    open the environment (its meta pages are bad: the unpinned findings stand).

    A read transaction keeps every page reachable from the newest commit in place (LMDB reuses
    only pages freed before the oldest reader's snapshot), so a writer committing meanwhile cannot
    make the walk see pages it is rewriting. Opening the environment and beginning a read touch
    only the meta pages, never a B-tree.
    """
    import fcntl

    import lmdb

    from fpstore.store.storage import MAX_DBS, OPEN_LOCK

    lock_fd = None
    try:
        try:
            lock_fd = os.open(os.path.join(path, OPEN_LOCK), os.O_RDONLY | os.O_CLOEXEC)
            # Shared, as every opener holds it: a file compaction cannot swap data.mdb meanwhile.
            fcntl.flock(lock_fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except FileNotFoundError:
            pass
        except BlockingIOError:
            raise StorageError(f"{path} is being rewritten by a file compaction; run the command again in a moment") from None
        try:
            env = lmdb.open(path, subdir=True, lib_version=0, readonly=True, max_dbs=MAX_DBS, map_size=0,
                            lock=True, readahead=False)
        except lmdb.Error:
            return None
        try:
            txn = env.begin()
            try:
                return _verify_file_once(data_path)
            finally:
                txn.abort()
        except lmdb.Error:
            return None
        finally:
            env.close()
    finally:
        if lock_fd is not None:
            os.close(lock_fd)


def _structure_problems(path: str) -> list[str] | None:
    """LMDB's structural problems of the store file in ``path`` ([] when it is sound), or None
    when ``path`` holds no store file (the open that follows says what it is instead).

    py-lmdb's pure-Python verifier (``lmdb.verify``) reads the file as bytes and never hands it to
    LMDB, which trusts its pages: a zeroed or forged B-tree page aborts the process inside the
    engine (SIGABRT in ``mdb_cursor_next``). The tools that run on damaged stores therefore check
    first and walk the B-trees only when the check passes (RELIABILITY.md rule 9). The check costs a
    full read of the file (~115 MB/s). A writer committing during the check can make pages look
    wrong, so findings are confirmed by a second check that holds a read transaction.
    """
    data_path = os.path.join(path, "data.mdb")
    if not os.path.isfile(data_path):
        return None
    problems = _verify_file_once(data_path)
    if problems and not problems[0].startswith("the file cannot be verified"):
        pinned = _verify_file_pinned(path, data_path)
        if pinned is not None:
            problems = pinned
    return problems


def _damage_line(path: str, problems: list[str]) -> str:
    shown = "; ".join(problems[:2])
    more = f" (and {len(problems) - 2} more)" if len(problems) > 2 else ""
    return (f"{path}: the store file failed LMDB's structural check: {shown}{more}; nothing was read from it "
            "(LMDB can crash on a damaged page): restore the store from a good copy")


def _open_checked(path: str) -> fpstore.Store:
    """:func:`_open` for the commands that must survive damaged stores (verify, export, info):
    LMDB's structural check first; damage raises :class:`_Damaged`."""
    problems = _structure_problems(path)
    if problems:
        raise _Damaged(_damage_line(path, problems))
    try:
        return _open(path)
    except CorruptionError as exc:
        raise _Damaged(str(exc)) from None


def _int_arg(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An argparse ``type`` for every numeric option: an integer in ``lo..hi`` (``hi`` None: no
    upper bound). Anything else is a usage error (exit 2, the option named) raised while parsing,
    before a store is opened or made: a negative size or count, or zero where it means nothing,
    would otherwise run and quietly do the wrong thing (``--max-bytes -1`` read nothing,
    ``--limit -1`` dropped the last match)."""

    def integer(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"wants an integer, got {text!r}") from None
        if value < lo or (hi is not None and value > hi):
            want = f">= {lo}" if hi is None else f"in {lo}..{hi}"
            raise argparse.ArgumentTypeError(f"must be an integer {want}, got {value}")
        return value

    return integer


_POSITIVE = _int_arg(1)  # sizes, counts and limits
_NON_NEGATIVE = _int_arg(0)  # seeds, token counts


def _pipeline_from(args: argparse.Namespace, defaults: bool) -> fpstore.Pipeline | None:
    """The pipeline the options ask for; None when no option was given and ``defaults`` is False."""
    given = {name: getattr(args, name) for name in ("kind", "html", "shingle", "seed", "min_tokens") if getattr(args, name) is not None}
    if not given and not defaults:
        return None
    return fpstore.Pipeline(**given)


def _add_pipeline_options(p: argparse.ArgumentParser, note: str = "") -> None:
    from fpstore.fingerprint.pipeline import HTML_MODES, KINDS, MAX_SHINGLE

    g = p.add_argument_group("pipeline" + note)
    g.add_argument("--kind", choices=sorted(KINDS), default=None, help="fingerprint kind (default: the default pipeline's)")
    g.add_argument("--html", choices=list(HTML_MODES), default=None,
                   help="HTML handling: reduce HTML input to its main content, or 'off' (default: the default pipeline's)")
    g.add_argument("--shingle", type=_int_arg(1, MAX_SHINGLE), default=None, metavar="W", help="words per shingle (default 3)")
    g.add_argument("--seed", type=_int_arg(0, (1 << 64) - 1), default=None, help="64-bit hash seed (default 0)")
    g.add_argument("--min-tokens", type=_NON_NEGATIVE, default=None, metavar="N",
                   help="texts with fewer tokens are matched only exactly (default 20)")


def _add_design_options(p: argparse.ArgumentParser, note: str = "") -> None:
    g = p.add_argument_group("table design" + note)
    g.add_argument("-k", type=_int_arg(0, MAX_K), default=None, help="Hamming radius the design is exact for, and the default query radius (default 3)")
    g.add_argument("--design", default="auto", help="design name (see docs/designs.md) or 'auto' (default)")
    g.add_argument("--expected-size", type=_POSITIVE, default=None, metavar="N", help="documents expected, to choose the design")


# -- create / info ----------------------------------------------------------------------------------------


def _cmd_create(args: argparse.Namespace) -> int:
    """Create a new, empty store with the given pipeline and table design."""
    if os.path.exists(os.path.join(args.store, "data.mdb")):
        raise InputError(f"{args.store} already holds a store; use info to see it")
    with fpstore.open(
        args.store, k=args.k, pipeline=_pipeline_from(args, True), design=args.design, expected_size=args.expected_size
    ) as store:
        data = _info_data(store)
    if args.json:
        _print_json(data)
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
        print(f"{k:<12} {v if not isinstance(v, (dict, list)) else _dumps(v)}")
    bpf = d["bytes_per_fingerprint"]
    print(f"size         file {_mib(d['file_size'])}, map {_mib(d['map_size'])} ({lm['map_used'] * 100:.1f}% used)"
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


def _cmd_info(args: argparse.Namespace) -> int:
    """Show a store's header, pipeline, design, counts, sizes, map use and readers."""
    with _open_checked(args.store) as store:
        try:
            data = _info_data(store)
        except CorruptionError as exc:
            raise _Damaged(str(exc)) from None
    if args.json:
        _print_json(data)
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


def _cmd_stats(args: argparse.Namespace) -> int:
    """Per table, candidates per probe over a sample of stored fingerprints, and distance histograms."""
    with _open(args.store) as store:
        data = _stats_data(store, args.sample, args.seed)
    if args.json:
        _print_json(data)
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


def _cmd_verify(args: argparse.Namespace) -> int:
    """Check a store deeply; exit 1 when anything is wrong.

    First LMDB's structural check of the file (``lmdb.verify``, which reads it as bytes: nothing
    walks a B-tree of a damaged file); then every document in every table, runs sorted and
    decodable, counts that agree, and a consistent, compacted copy of the environment.
    """
    t0 = time.monotonic()
    structure = _structure_problems(args.store)
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
            store = _open(args.store)
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
        _print_json({"ok": not problems, "problems": problems, **facts})
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


# -- compact -------------------------------------------------------------------------------------------------


def _cmd_compact(args: argparse.Namespace) -> int:
    """Merge incremental tables and runs into one run per table, dropping deleted entries."""
    with _open(args.store, readonly=False) as store:
        compact = getattr(store, "compact", None)
        if not callable(compact):
            raise InputError("this fpstore build cannot compact stores yet")
        before = store._storage.info()
        t0 = time.monotonic()
        result = store.compact_file() if args.file else compact()
        after = store._storage.info()
    data = {
        "result": result if isinstance(result, dict) else None,
        "seconds": round(time.monotonic() - t0, 3),
        "pages_used_before": before["last_pgno"] + 1,
        "pages_used_after": after["last_pgno"] + 1,
        "file_size": after["file_size"],
    }
    if args.json:
        _print_json(data)
    else:
        res = ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in (data["result"] or {}).items())
        print(f"compacted {args.store} in {data['seconds']:.2f} s" + (f": {res}" if res else ""))
        if args.file:
            print(f"file {_mib(data['file_size'])} (rewritten without free pages)")
        else:
            print(f"file {_mib(data['file_size'])}; freed pages are reused by later writes (--file shrinks the file)")
    return EXIT_OK


# -- query ---------------------------------------------------------------------------------------------------


def _read_text(args: argparse.Namespace) -> str | None:
    sources = [x for x in (args.text, args.file, args.fingerprint) if x is not None]
    if len(sources) != 1:
        raise InputError("give exactly one of TEXT, '-' (stdin), --file FILE or --fingerprint HEX")
    if args.file is not None:
        with open(args.file, "rb") as fh:
            return fh.read().decode("utf-8", errors="replace")
    if args.text == "-":
        return sys.stdin.buffer.read().decode("utf-8", errors="replace")
    return args.text


def _cmd_query(args: argparse.Namespace) -> int:
    """Stored documents within k bits of a text (argument, '-' for stdin, --file) or a fingerprint."""
    text = _read_text(args)
    with _open(args.store) as store:
        info: dict[str, Any] = {}
        if args.fingerprint is not None:
            try:
                fp = int(args.fingerprint.removeprefix("0x"), 16)
            except ValueError:
                raise InputError(f"--fingerprint wants up to 16 hex digits, got {args.fingerprint!r}") from None
            if not 0 <= fp < 1 << 64:
                raise InputError("--fingerprint must fit in 64 bits")
            matches = store.query(fingerprint=fp, pipeline_id=store.pipeline.id, k=args.k, exhaustive=args.exhaustive)
            info["fingerprint"] = f"{fp:016x}"
        else:
            sig = store.pipeline.signature(text)
            info.update({"fingerprint": f"{sig.fingerprint:016x}", "tokens": sig.tokens, "short": sig.short})
            matches = store.query(text=text, k=args.k, exhaustive=args.exhaustive)
        k = store.k if args.k is None else args.k
    if args.limit is not None:
        matches = matches[: args.limit]
    if args.json:
        _print_json({**info, "k": k, "matches": [
            {"key": _key_out(m.key), "distance": m.distance, "fingerprint": f"{m.fingerprint:016x}"} for m in matches]})
    else:
        short = " (short text: exact matches only)" if info.get("short") else ""
        print(f"fingerprint {info['fingerprint']}{short}: {len(matches)} match{'es' * (len(matches) != 1)} within k={k}")
        for m in matches:
            print(f"  d={m.distance:2d}  {m.fingerprint:016x}  {_key_text(m.key)}")
    return EXIT_OK if matches else EXIT_FINDINGS


# -- dedup ---------------------------------------------------------------------------------------------------


def _chunks(n: int, size: int = 10000) -> Iterator[slice]:
    for lo in range(0, n, size):
        yield slice(lo, min(lo + size, n))


def _cmd_dedup(args: argparse.Namespace) -> int:
    """Every near-duplicate pair within k bits, or the clusters they form, as JSONL or CSV."""
    out_path = args.output
    out = open(out_path, "w", encoding="utf-8", newline="") if out_path and out_path != "-" else sys.stdout
    try:
        with _open(args.store) as store:
            k = store.k if args.k is None else args.k
            writer = csv.writer(out) if args.format == "csv" else None
            if args.clusters:
                clusters = store.clusters(k)
                clusters = [c for c in clusters if len(c.keys) >= args.min_size]
                if writer:
                    writer.writerow(["cluster", "canonical", "key"])
                for c_no, c in enumerate(clusters, 1):
                    if writer:
                        for key in c.keys:
                            writer.writerow([c_no, _key_text(c.canonical), _key_text(key)])
                    else:
                        out.write(_dumps({"cluster": c_no, "size": len(c.keys), "canonical": _key_out(c.canonical),
                                          "keys": [_key_out(x) for x in c.keys]}) + "\n")
                summary = f"{len(clusters):,} clusters of {sum(len(c.keys) for c in clusters):,} documents within k={k}"
            else:
                a, b, d = store.near_duplicate_pairs(k)
                order = np.lexsort((b, a, d))
                a, b, d = a[order], b[order], d[order]
                if writer:
                    writer.writerow(["a", "b", "distance"])
                for sl in _chunks(len(a)):
                    ka, kb = store.keys_of(a[sl].tolist()), store.keys_of(b[sl].tolist())
                    for x, y, dist in zip(ka, kb, d[sl].tolist()):
                        if writer:
                            writer.writerow([_key_text(x), _key_text(y), dist])
                        else:
                            out.write(_dumps({"a": _key_out(x), "b": _key_out(y), "distance": dist}) + "\n")
                summary = f"{len(a):,} pairs within k={k}"
        out.flush()
    finally:
        if out is not sys.stdout:
            out.close()
    _note(summary)
    return EXIT_OK


# -- ingest --------------------------------------------------------------------------------------------------


class _Reporter:
    """Prints problems and notes to stderr, at most ``limit`` of each kind; counts the rest."""

    QUIET = frozenset({"not-response", "status"})

    def __init__(self, limit: int = 20) -> None:
        self.limit = limit
        self.shown: dict[str, int] = {}
        self.progress: Progress | None = None

    def __call__(self, ev: Any) -> None:
        from fpstore.admin.ingest import Problem

        if not isinstance(ev, Problem) and ev.kind in self.QUIET:
            return  # expected in every WARC file: counted in the summary, not shown one by one
        kind = ("problem " if isinstance(ev, Problem) else "note ") + ev.kind
        n = self.shown.get(kind, 0) + 1
        self.shown[kind] = n
        if n > self.limit:
            return
        if self.progress is not None and self.progress.drawn:
            sys.stderr.write("\r\x1b[K")
        suffix = f" (further {ev.kind} {'problems' if isinstance(ev, Problem) else 'notes'} are counted, not shown)" if n == self.limit else ""
        _note(f"{'' if isinstance(ev, Problem) else 'note: '}{ev}{suffix}")


def _cmd_ingest(args: argparse.Namespace) -> int:
    """Add documents from JSON Lines files, directories of text files and WARC files, resumably."""
    from fpstore.admin import ingest as ing

    if not args.sources and not args.sample:
        raise InputError("give at least one SOURCE (a .jsonl file, a directory or a .warc[.gz] file), or --sample")
    sources: list[ing.Source] = [
        ing.make_source(p, args.format, key_field=args.key_field, text_field=args.text_field,
                        key_prefix=args.key_prefix, max_bytes=args.max_bytes, follow_symlinks=args.follow_symlinks)
        for p in args.sources
    ]
    if args.sample:
        sources.append(ing.SampleSource())
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        raise InputError("the same source is given twice")
    created = not os.path.exists(os.path.join(args.store, "data.mdb"))
    store = fpstore.open(args.store, k=args.k, pipeline=_pipeline_from(args, False) if created else None,
                         design=args.design, expected_size=args.expected_size)
    if not created:
        # Pipeline options name fields of the existing store's pipeline: each must match.
        given = {f: getattr(args, f) for f in ("kind", "html", "shingle", "seed", "min_tokens") if getattr(args, f) is not None}
        differ = {f: (store.pipeline.config.get(f), v) for f, v in given.items() if store.pipeline.config.get(f) != v}
        if differ:
            store.close()
            raise PipelineMismatchError(
                f"{args.store} was created with " + ", ".join(f"{f}={a!r}, not {b!r}" for f, (a, b) in differ.items())
                + "; fingerprints of different pipelines are not comparable: ingest into a new store instead"
            )
    stop = threading.Event()
    interrupted = {"n": 0}

    def on_signal(signum: int, frame: Any) -> None:
        interrupted["n"] += 1
        if interrupted["n"] > 1:
            raise KeyboardInterrupt  # a second Ctrl-C: the batch in flight is not applied
        stop.set()
        sys.stderr.write(f"\n{PROG}: stopping after the current batch (Ctrl-C again to abandon it)\n")

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    reporter = _Reporter()
    try:
        with store:
            if created:
                _note(f"created {args.store} with pipeline {store.pipeline.id}, design {store.design.name}")
            progress = Progress(sum(s.size for s in sources), _want_progress(args))
            reporter.progress = progress
            try:
                result = ing.ingest(
                    store, sources, batch_size=args.batch_size, on_error=args.on_error, restart=args.restart,
                    stop=stop, report=reporter, progress=progress.update,
                )
            finally:
                progress.close()
            total = len(store)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    data = {
        "store": args.store,
        "created": created,
        "sources": [s.as_dict() for s in result.sources],
        "added": result.added,
        "documents": total,
        "problems": result.problems,
        "interrupted": result.interrupted,
        "stopped_at": None if result.stopped_at is None else str(result.stopped_at),
        "seconds": round(result.seconds, 3),
    }
    if args.json:
        _print_json(data)
    else:
        for s in result.sources:
            extra = []
            if s.problems:
                extra.append("problems: " + ", ".join(f"{k} {v}" for k, v in sorted(s.problems.items())))
            if s.notes:
                extra.append("notes: " + ", ".join(f"{k} {v}" for k, v in sorted(s.notes.items())))
            print(f"{s.path}: {s.added:,} documents added (from {s.resumed_from})" + ("; " + "; ".join(extra) if extra else ""))
        rate = result.added / result.seconds if result.seconds > 0 else 0.0
        print(f"added {result.added:,} documents in {result.seconds:.2f} s ({rate:,.0f}/s); the store holds {total:,}")
    if result.interrupted:
        _note("interrupted; everything before the last batch is stored: rerun the same command to resume")
        return EXIT_INTERRUPTED
    if result.stopped_at is not None:
        _note(f"stopped at {result.stopped_at.where} (--on-error stop); the documents before it are stored: "
              "fix the input or pass --on-error skip, and rerun to resume there")
        return EXIT_ERROR
    return EXIT_FINDINGS if result.problems else EXIT_OK


# -- export / import -----------------------------------------------------------------------------------------


def _cmd_export(args: argparse.Namespace) -> int:
    """Write every document to a versioned, zstd-compressed msgpack stream (see docs/cli.md)."""
    from fpstore.admin.exchange import export_store

    to_stdout = args.output in (None, "-")
    if to_stdout and sys.stdout.isatty():
        raise InputError("refusing to write a binary stream to a terminal: pass -o FILE or redirect stdout")
    # A damaged store is refused before anything is written (exit 1). There is no salvage mode:
    # reading around a damaged page means walking B-trees that LMDB would abort on.
    with _open_checked(args.store) as store:
        try:
            if to_stdout:
                n = export_store(store, sys.stdout.buffer, level=args.level)
                sys.stdout.buffer.flush()
                size = None
            else:
                tmp = f"{args.output}.partial-{os.getpid()}"
                try:
                    with open(tmp, "wb") as fh:
                        n = export_store(store, fh, level=args.level)
                        fh.flush()
                        os.fsync(fh.fileno())
                    os.replace(tmp, args.output)
                except BaseException:
                    if os.path.exists(tmp):
                        os.unlink(tmp)
                    raise
                size = os.path.getsize(args.output)
        except CorruptionError as exc:
            where = "the stream on stdout is incomplete" if to_stdout else f"{args.output} was not written"
            raise _Damaged(f"{exc}; the export stopped: {where}") from None
    _note(f"exported {n:,} documents" + (f" to {args.output} ({_mib(size)})" if size is not None else ""))
    return EXIT_OK


def _cmd_import(args: argparse.Namespace) -> int:
    """Read an export stream into a new store (with the stream's pipeline) or an existing one."""
    from fpstore.admin.exchange import import_stream

    existing = os.path.exists(os.path.join(args.store, "data.mdb"))

    def on_signal(signum: int, frame: Any) -> None:
        # SIGTERM takes Ctrl-C's path: import_stream removes the hidden store it was building
        # (a new path), or keeps the batches it committed (an existing store; a rerun resumes).
        # Further signals are ignored so that the cleanup runs to its end.
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)
        raise KeyboardInterrupt

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        if args.input in (None, "-"):
            result = import_stream(sys.stdin.buffer, args.store, batch_size=args.batch_size)
        else:
            with open(args.input, "rb") as fh:
                result = import_stream(fh, args.store, batch_size=args.batch_size)
    except KeyboardInterrupt:
        _note("interrupted; " + ("the batches committed are kept: rerun the same command to resume" if existing
                                 else "nothing was imported (the half-built store was removed)"))
        return EXIT_INTERRUPTED
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    data = {"store": result.path, "created": result.created, "records": result.records,
            "pipeline_id": result.pipeline_id, "design": result.design}
    if args.json:
        _print_json(data)
    else:
        what = "created" if result.created else "updated"
        print(f"{what} {result.path}: {result.records:,} documents imported (pipeline {result.pipeline_id}, design {result.design})")
    return EXIT_OK


# -- demo ------------------------------------------------------------------------------------------------------


def _cmd_demo(args: argparse.Namespace) -> int:
    """Ingest the sample corpus of real text on this machine into a store and print its near-duplicate clusters."""
    import tempfile

    from fpstore.admin.samples import sample_corpus

    docs = list(sample_corpus())
    if not docs:
        print("no sample text found on this machine", file=sys.stderr)
        return EXIT_ERROR
    tmp = None
    path = args.store
    if path is None:
        tmp = tempfile.TemporaryDirectory(prefix="fpstore-demo-")
        path = os.path.join(tmp.name, "demo.fps")
    try:
        mb = sum(len(t) for _, t in docs) / 1e6
        t0 = time.perf_counter()
        with fpstore.open(path, k=args.k) as store:
            store.add_many([n for n, _ in docs], texts=[t for _, t in docs], checkpoint=("demo", len(docs)))
            elapsed = time.perf_counter() - t0
            print(f"stored {len(store)} documents ({mb:.1f} MB of text) in {elapsed * 1000:.0f} ms at {path}")
            print(f"pipeline {store.pipeline.id} ({store.pipeline.kind}); {store.design.describe(len(store))}")
            # What a crawler sees: a page that is a lightly edited copy of one already stored.
            name, text = max(docs, key=lambda d: len(d[1]))
            words = text.split()
            edited = " ".join(words[: len(words) // 2] + ["(edited)"] + words[len(words) // 2 + 1 :])
            verdict = store.add("demo/edited-copy", text=edited)
            print(f"add('demo/edited-copy'): near-duplicate of {verdict.duplicate_of!r} "
                  f"(distance {verdict.near_duplicates[0].distance if verdict.near_duplicates else '-'}), canonical {verdict.canonical!r}")
        with fpstore.open(path, readonly=True) as store:
            clusters = store.clusters()
        print(f"{len(clusters)} near-duplicate clusters within k={args.k} (canonical first):")
        for c in clusters[: args.limit]:
            print(f"  {len(c.keys):3d}  {c.canonical}")
            for key in c.keys[1 : 1 + args.members]:
                print(f"         ~ {key}")
            if len(c.keys) > 1 + args.members:
                print(f"         ... and {len(c.keys) - 1 - args.members} more")
        if len(clusters) > args.limit:
            print(f"  ... and {len(clusters) - args.limit} more clusters (--limit)")
    finally:
        if tmp is not None:
            tmp.cleanup()
    return EXIT_OK


# -- the parser --------------------------------------------------------------------------------------------------


def _first_line(fn: Callable[..., Any]) -> str:
    return (fn.__doc__ or "").strip().splitlines()[0].rstrip(".")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="The operator's command line for fpstore stores: a thin shell over the public API.",
        epilog="Exit codes: 0 ok, 1 findings, 2 usage or error, 130 interrupted. See docs/cli.md.",
    )
    parser.add_argument("--version", action="version", version=f"fpstore {fpstore.__version__} ({fpstore.backend})")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, fn: Callable[[argparse.Namespace], int], *, store: bool = True, json_out: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=_first_line(fn), description=fn.__doc__)
        if store:
            p.add_argument("store", metavar="STORE", help="the store's directory")
        if json_out:
            p.add_argument("--json", action="store_true", help="print machine-readable JSON")
        p.set_defaults(func=fn)
        return p

    p = command("create", _cmd_create)
    _add_pipeline_options(p)
    _add_design_options(p)

    command("info", _cmd_info)

    p = command("stats", _cmd_stats)
    p.add_argument("--sample", type=_POSITIVE, default=1000, metavar="N", help="fingerprints sampled (default 1000)")
    p.add_argument("--seed", type=_NON_NEGATIVE, default=0, help="sampling seed (default 0)")

    p = command("verify", _cmd_verify)
    p.add_argument("--no-copy", action="store_true",
                   help="skip the consistent, compacted copy (LMDB's structural check of the file always runs first)")
    p.add_argument("--tmp", metavar="DIR", default=None,
                   help="where to put the temporary copy (default: beside the store; needs its size free)")

    p = command("compact", _cmd_compact)
    p.add_argument(
        "--file", action="store_true",
        help="also rewrite the file without free pages (needs the store to itself: no other process may have it open)",
    )

    p = command("query", _cmd_query)
    p.add_argument("text", nargs="?", metavar="TEXT", help="the text to look up; '-' reads stdin")
    p.add_argument("--file", metavar="FILE", help="read the text from FILE (UTF-8; invalid bytes become U+FFFD)")
    p.add_argument("--fingerprint", metavar="HEX", help="look up a 64-bit fingerprint made by this store's pipeline")
    p.add_argument("-k", type=_int_arg(0, 64), default=None, help="radius (default: the store's k)")
    p.add_argument("--exhaustive", action="store_true", help="compare with every fingerprint (any k up to 64; slow)")
    p.add_argument("--limit", type=_POSITIVE, default=None, metavar="N", help="print at most N matches")

    p = command("dedup", _cmd_dedup, json_out=False)
    p.add_argument("-k", type=_int_arg(0, MAX_K), default=None, help=f"radius (default: the store's k; at most {MAX_K})")
    p.add_argument("--clusters", action="store_true", help="print clusters (connected components) instead of pairs")
    p.add_argument("--min-size", type=_POSITIVE, default=2, metavar="N", help="smallest cluster to print (default 2)")
    p.add_argument("--format", choices=["jsonl", "csv"], default="jsonl", help="output format (default jsonl)")
    p.add_argument("-o", "--output", metavar="FILE", default=None, help="write to FILE instead of stdout")

    p = command("ingest", _cmd_ingest)
    p.add_argument("sources", nargs="*", metavar="SOURCE", help="a .jsonl file, a directory, or a .warc / .warc.gz file")
    p.add_argument("--sample", action="store_true", help="also ingest the sample corpus of real text found on this machine")
    p.add_argument("--format", choices=["auto", "jsonl", "dir", "warc"], default="auto",
                   help="source type (default: from the path: directory, *.jsonl/*.ndjson, *.warc[.gz])")
    p.add_argument("--key-field", default="id", metavar="NAME", help="JSONL: the member holding the key (default id)")
    p.add_argument("--text-field", default="text", metavar="NAME", help="JSONL: the member holding the text (default text)")
    p.add_argument("--key-prefix", default="", metavar="P", help="directory: prefix for keys (default none: the relative path)")
    p.add_argument("--follow-symlinks", action="store_true",
                   help="directory: read links to files outside the tree too (default: skip them with a note)")
    p.add_argument("--batch-size", type=_POSITIVE, default=1000, metavar="N", help="documents per transaction and checkpoint (default 1000)")
    p.add_argument("--max-bytes", type=_POSITIVE, default=16 << 20, metavar="N", help="skip documents larger than N bytes (default 16 MiB)")
    p.add_argument("--on-error", choices=["skip", "stop"], default="skip",
                   help="bad input: report and skip it (exit 1 at the end), or stop there (exit 2)")
    p.add_argument("--restart", action="store_true", help="ignore stored checkpoints and read every source from the start")
    p.add_argument("--progress", dest="progress", action="store_true", default=None, help="show a progress bar (default: when stderr is a terminal)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="never show a progress bar")
    _add_pipeline_options(p, " (only for a new store; must match an existing one)")
    _add_design_options(p, " (only for a new store)")

    p = command("export", _cmd_export, json_out=False)
    p.add_argument("-o", "--output", metavar="FILE", default=None, help="write to FILE (atomically) instead of stdout")
    p.add_argument("--level", type=_int_arg(1, 22), default=3, help="zstd level, 1..22 (default 3)")

    p = command("import", _cmd_import)
    p.add_argument("input", nargs="?", metavar="FILE", default=None, help="the stream to read (default or '-': stdin)")
    p.add_argument("--batch-size", type=_POSITIVE, default=10000, metavar="N", help="documents per transaction (default 10000)")

    p = command("demo", _cmd_demo, store=False, json_out=False)
    p.add_argument("-k", type=_int_arg(0, MAX_K), default=5, help="Hamming radius (default 5, the calibrated k of the default pipeline)")
    p.add_argument("--store", default=None, help="keep the demo store at this path (default: a temporary directory)")
    p.add_argument("--limit", type=_POSITIVE, default=15, help="clusters to print (default 15)")
    p.add_argument("--members", type=_NON_NEGATIVE, default=4, help="members to print per cluster (default 4)")

    from fpstore.admin import calibrate as evaluate_cli

    evaluate_cli.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # Keys and texts may hold lone surrogates; print them escaped rather than fail mid-output.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        return args.func(args)
    except _Damaged as exc:
        _note(f"damaged: {exc}")
        return EXIT_FINDINGS
    except FpstoreError as exc:
        _note(f"error: {exc}")
        return EXIT_ERROR
    except BrokenPipeError:
        # The reader of our output went away (``| head``): not an error of ours.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return EXIT_OK
    except OSError as exc:
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        _note(f"error: {where}{exc.strerror or exc}")
        return EXIT_ERROR
    except KeyboardInterrupt:
        _note("interrupted")
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

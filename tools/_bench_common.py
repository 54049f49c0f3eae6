"""Helpers shared by ``tools/bench_store.py`` and ``tools/bench_runs.py`` (not a benchmark itself).

Data generation, latency percentiles, machine load, memory, on-disk sizes, Markdown tables and the
peers that both scripts run side by side in the same process: faiss ``IndexBinaryMultiHash`` in
exact configurations and numpy brute force. Nothing here is collected by pytest (no ``test_``
names) and nothing here tunes fpstore.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

U64MAX = (1 << 64) - 1
DEFAULT_TMP = "/work/bench-tmp"


# -- machine ------------------------------------------------------------------------------------


def uptime() -> str:
    """The load line of ``uptime`` (``os.getloadavg`` when the command is missing)."""
    try:
        import subprocess

        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except Exception:
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def machine() -> dict[str, Any]:
    import platform

    import lmdb

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "lmdb": ".".join(map(str, lmdb.version())),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
    }
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import fpstore

        info["fpstore"] = getattr(fpstore, "__version__", "?")
        info["fpstore_backend"] = str(getattr(fpstore, "backend", "?"))
    except Exception:
        pass
    return info


def code_version() -> str:
    """The commit the measured fpstore came from, and whether its sources differed from it."""
    import subprocess

    try:
        head = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h %ci"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "fpstore", "cext", "setup.py"],
                               capture_output=True, text=True, check=True).stdout.split("\n")
        dirty = [line[3:] for line in dirty if line.strip()]
    except Exception as exc:
        return f"unknown ({exc})"
    return f"commit {head}" + (f", with uncommitted changes to {', '.join(dirty)}" if dirty else ", clean")


def pin_cpus(n: int | None) -> int:
    """Restrict this process to ``n`` of its CPUs (None: leave it); returns how many it may use.
    fpstore sizes its thread pools from the affinity mask, so ``n = 1`` measures one thread."""
    cpus = sorted(os.sched_getaffinity(0))
    if n:
        os.sched_setaffinity(0, set(cpus[-n:]))
    return len(os.sched_getaffinity(0))


@contextlib.contextmanager
def on_one_cpu() -> Iterator[int]:
    """Run every thread of this process (those there now, and those they start) on one CPU, the
    last of its affinity mask, for the ``with`` block; each thread's own mask comes back after.
    Linux only: a thread's id is a process id to ``sched_setaffinity``."""
    main_mask = os.sched_getaffinity(0)
    cpu = max(main_mask)
    saved: dict[int, set[int]] = {}
    try:
        for tid in [int(t) for t in os.listdir("/proc/self/task")]:
            with contextlib.suppress(OSError):  # a thread that ends meanwhile
                saved[tid] = os.sched_getaffinity(tid)
                os.sched_setaffinity(tid, {cpu})
        yield cpu
    finally:
        for tid in [int(t) for t in os.listdir("/proc/self/task")]:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, saved.get(tid, main_mask))


def status_kib(field: str) -> int:
    """A field of /proc/self/status in KiB (``VmHWM``, ``RssAnon``, ``RssFile``; 0 if missing)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def loadavg() -> str:
    """/proc/loadavg's three load averages (1, 5 and 15 minutes), as one string."""
    try:
        with open("/proc/loadavg") as fh:
            return " ".join(fh.read().split()[:3])
    except OSError:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())


class AnonPeak:
    """The largest RssAnon (KiB) seen by a thread polling /proc/self/status every ``interval`` s:
    the kernel keeps a high-water mark of the whole resident set (VmHWM, which counts the pages of
    a mapped file too), not of the process's own memory."""

    def __init__(self, interval: float = 0.005) -> None:
        import threading

        self.peak = status_kib("RssAnon")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, args=(interval,), daemon=True)
        self._thread.start()

    def _poll(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.peak = max(self.peak, status_kib("RssAnon"))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, status_kib("RssAnon"))
        return self.peak


def warm_file(path: str | os.PathLike[str]) -> None:
    """Read a file once, so that the process measured next finds it in the page cache."""
    with open(path, "rb") as fh:
        while fh.read(16 << 20):
            pass


def rss_anon() -> int:
    """Anonymous resident memory of this process in bytes (file-backed pages, such as an LMDB
    map in the page cache, are left out)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def trim_heap() -> None:
    """Return freed heap to the OS so an RSS delta measures what a structure holds."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except Exception:
        pass


# -- data ---------------------------------------------------------------------------------------


def random_fps(n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, U64MAX, n, dtype=np.uint64, endpoint=True)


def flip_bits(fps: np.ndarray, rng: np.random.Generator, lo: int = 1, hi: int = 3) -> np.ndarray:
    """Each fingerprint with ``lo..hi`` distinct random bits flipped."""
    out = fps.copy()
    m = len(fps)
    nflip = rng.integers(lo, hi + 1, m)
    # Distinct positions: a random permutation of 0..63 per row, first nflip of them.
    pos = np.argsort(rng.random((m, 64)), axis=1)[:, :hi].astype(np.uint64)
    for j in range(hi):
        sel = nflip > j
        out[sel] ^= np.uint64(1) << pos[sel, j]
    return out


def make_queries(stored: np.ndarray, m: int, rng: np.random.Generator, frac_random: float = 0.2) -> np.ndarray:
    """``m`` queries: stored fingerprints with 1-3 flipped bits (so matches exist), and a fraction
    ``frac_random`` of uniform random ones (which almost never match), shuffled."""
    n_rand = int(round(m * frac_random))
    near = flip_bits(stored[rng.integers(0, len(stored), m - n_rand)], rng)
    q = np.concatenate([near, random_fps(n_rand, rng)])
    rng.shuffle(q)
    return q


def planted_fps(n: int, rng: np.random.Generator, near_frac: float = 0.01, dup_frac: float = 0.001) -> np.ndarray:
    """``n`` fingerprints: uniform random ones, with a fraction ``near_frac`` replaced by copies of
    another with 1-3 bits flipped and ``dup_frac`` by identical copies (so all-pairs has pairs at
    every distance 0..3). Shuffled."""
    fps = random_fps(n, rng)
    n_near, n_dup = int(n * near_frac), int(n * dup_frac)
    base = n_near + n_dup
    src = rng.integers(base, n, n_near + n_dup)
    fps[:n_near] = flip_bits(fps[src[:n_near]], rng)
    fps[n_near:base] = fps[src[n_near:]]
    rng.shuffle(fps)
    return fps


def floor_bits(n: int) -> float:
    """The entropy floor of a sorted table of ``n`` uniform 64-bit values, in bits per value:
    64 - log2 n + 1.44 (log2 of C(2^64, n), divided by n)."""
    return 64 - math.log2(n) + 1.44


# -- brute force --------------------------------------------------------------------------------


def brute_force(stored: np.ndarray, queries: Iterable[int], k: int) -> list[np.ndarray]:
    """For each query, the indices of stored fingerprints within ``k`` bits (sorted)."""
    out = []
    for q in queries:
        out.append(np.flatnonzero(np.bitwise_count(stored ^ np.uint64(q)) <= k))
    return out


def distinct_designs(k: int, n: int, arguments: Sequence[str]) -> list[tuple[str, str]]:
    """(label, argument) of each distinct design the ``--designs`` arguments resolve to at n: one
    that resolves like an earlier one is named in its label (``auto (r4) = r4``), not run twice."""
    from fpstore.index.design import design_for

    designs: list[list[str]] = []  # [label, argument, resolved name]
    for arg in arguments:
        name = design_for(k, n, arg).name
        dup = next((x for x in designs if x[2] == name), None)
        if dup is not None:
            dup[0] += f" = {arg}"
        else:
            designs.append([f"auto ({name})" if arg == "auto" else arg, arg, name])
    return [(label, arg) for label, arg, _ in designs]


def check_exact(store: Any, verify: np.ndarray, truth: list[np.ndarray]) -> dict[str, Any]:
    """``query`` and ``query_many`` against brute force (keys are indices into the stored array)."""
    pid = store.pipeline.id
    want = sum(len(t) for t in truth)
    single_missing = single_extra = 0
    for q, t in zip(verify.tolist(), truth):
        got = {m.key for m in store.query(fingerprint=q, pipeline_id=pid)}
        ts = set(t.tolist())
        single_missing += len(ts - got)
        single_extra += len(got - ts)
    qi, ids, _ = store.query_many(verify, pipeline_id=pid)
    keys = store.keys_of(ids.tolist())
    got_pairs = set(zip(qi.tolist(), keys))
    want_pairs = {(i, int(x)) for i, t in enumerate(truth) for x in t.tolist()}
    many_missing, many_extra = len(want_pairs - got_pairs), len(got_pairs - want_pairs)
    exact = single_missing == single_extra == many_missing == many_extra == 0
    return {
        "queries": len(verify),
        "matches": want,
        "query_missing": single_missing,
        "query_extra": single_extra,
        "query_many_missing": many_missing,
        "query_many_extra": many_extra,
        "exact": exact,
    }


def brute_force_rate(stored: np.ndarray, queries: np.ndarray, k: int, budget_s: float = 3.0) -> dict[str, float]:
    """numpy popcount over all stored, one query at a time, for about ``budget_s`` seconds."""
    done, t0, c0 = 0, time.perf_counter(), time.process_time()
    for q in queries:
        np.flatnonzero(np.bitwise_count(stored ^ np.uint64(q)) <= k)
        done += 1
        if time.perf_counter() - t0 > budget_s and done >= 3:
            break
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"queries": done, "qps": done / wall, "qps_cpu": done / cpu if cpu else float("nan")}


def brute_pairs(fps: np.ndarray, k: int, block: int = 2048) -> set[tuple[int, int]]:
    """Every index pair (i < j) within ``k`` bits, by blocks of rows against the rest (O(n^2))."""
    out: set[tuple[int, int]] = set()
    n = len(fps)
    for s in range(0, n, block):
        rows = fps[s : s + block]
        d = np.bitwise_count(rows[:, None] ^ fps[None, s:])
        i, j = np.nonzero(d <= k)
        gi, gj = i + s, j + s
        keep = gi < gj
        out.update(zip(gi[keep].tolist(), gj[keep].tolist()))
    return out


def brute_pairs_time(fps: np.ndarray, k: int, m: int, rng: np.random.Generator, block: int = 1024) -> dict[str, float]:
    """All-pairs time of numpy brute force on a subsample of ``m``, and its extrapolation to
    ``len(fps)`` by the pair count (n(n-1)/2 over m(m-1)/2)."""
    m = min(m, len(fps))
    sub = fps[rng.choice(len(fps), m, replace=False)] if m < len(fps) else fps
    t0 = time.perf_counter()
    count = 0
    for s in range(0, m, block):
        d = np.bitwise_count(sub[s : s + block, None] ^ sub[None, s:])
        count += int(np.count_nonzero(d <= k))
    t = time.perf_counter() - t0
    n = len(fps)
    return {"sample": m, "seconds": t, "extrapolated_s": t * (n * (n - 1)) / (m * (m - 1))}


# -- timing -------------------------------------------------------------------------------------


def percentiles_us(samples_ns: Sequence[int] | np.ndarray) -> dict[str, float]:
    a = np.asarray(samples_ns, dtype=np.float64) / 1e3
    return {
        "p50": float(np.percentile(a, 50)),
        "p90": float(np.percentile(a, 90)),
        "p99": float(np.percentile(a, 99)),
        "max": float(a.max()),
        "mean": float(a.mean()),
        "count": int(len(a)),
    }


def time_calls(fn: Callable[[Any], Any], args: Sequence[Any], warmup: int = 200) -> tuple[dict[str, float], float]:
    """Latency percentiles (µs) of ``fn(a)`` for each ``a`` (after ``warmup`` untimed calls on
    the first ones), and the CPU-time rate of the timed calls (calls per CPU second).

    Wall-clock percentiles are the figures; on a shared machine a call that loses the CPU to
    another process shows up as a multi-millisecond tail, so the thread-CPU time of each call is
    also recorded (``cpu_p50`` .. ``cpu_max``): it excludes time spent descheduled (but also
    time waiting for I/O, which these calls do not do once the store is in the page cache).
    """
    for a in args[:warmup]:
        fn(a)
    out = np.empty(len(args), dtype=np.int64)
    cpu_ns = np.empty(len(args), dtype=np.int64)
    clock = time.perf_counter_ns
    tclock = time.thread_time_ns
    c0 = time.process_time()
    for i, a in enumerate(args):
        c = tclock()
        t = clock()
        fn(a)
        out[i] = clock() - t
        cpu_ns[i] = tclock() - c
    cpu = time.process_time() - c0
    res = percentiles_us(out)
    cp = percentiles_us(cpu_ns)
    res.update({f"cpu_{k}": v for k, v in cp.items() if k != "count"})
    return res, len(args) / cpu if cpu else float("nan")


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """(result, wall seconds, process CPU seconds) of ``fn()``."""
    t, c = time.perf_counter(), time.process_time()
    r = fn()
    return r, time.perf_counter() - t, time.process_time() - c


def median_rate(fn: Callable[[], Any], items: int, repeat: int, budget_s: float = 20.0) -> dict[str, float]:
    """Median items/s over up to ``repeat`` runs of ``fn`` (fewer when one run exceeds the budget)."""
    walls, cpus = [], []
    spent = 0.0
    for _ in range(repeat):
        _, w, c = timed(fn)
        walls.append(w)
        cpus.append(c)
        spent += w
        if spent > budget_s:
            break
    w, c = statistics.median(walls), statistics.median(cpus)
    return {"rate": items / w, "rate_cpu": items / c if c else float("nan"), "seconds": w, "runs": len(walls)}


# -- faiss --------------------------------------------------------------------------------------

#: Exact configurations for k = 3 (nhash, bits, nflip): 4 x 16 with no flips is exact by
#: pigeonhole (3 differing bits leave one 16-bit hash intact); 2 x 32 with 1 flip is exact because
#: 3 bits cannot put 2 into both halves.
FAISS_CONFIGS = [(4, 16, 0), (2, 32, 1)]


def spawn_child(script: str, kind: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run phase ``kind`` of benchmark ``script`` in a fresh process (its ``--child`` argument,
    served by :func:`serve_child`); returns the JSON object the child prints last."""
    cmd = [sys.executable, str(Path(script).resolve()), "--child", json.dumps({"kind": kind, **args})]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
    if proc.returncode:
        raise RuntimeError(f"{kind} child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def serve_child(child: str, children: dict[str, Callable[[dict[str, Any]], dict[str, Any]]]) -> None:
    """The child side of :func:`spawn_child`: run the phase ``child`` names and print its result."""
    a = json.loads(child)
    print(json.dumps(children[a.pop("kind")](a), default=float))


def faiss_available() -> str | None:
    try:
        import faiss  # noqa: F401
    except Exception as exc:  # pragma: no cover - depends on the machine
        return f"faiss not importable: {exc}"
    return None


def _codes(fps: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(fps, dtype="<u8").view(np.uint8).reshape(-1, 8)


def faiss_index(fps: np.ndarray, nhash: int, bits: int, nflip: int) -> Any:
    """faiss ``IndexBinaryMultiHash`` of ``fps`` (one OpenMP thread), ``nhash`` x ``bits``."""
    import faiss

    faiss.omp_set_num_threads(1)
    index = faiss.IndexBinaryMultiHash(64, nhash, bits)
    index.nflip = nflip
    index.add(_codes(fps))
    return index


def faiss_peer(
    stored: np.ndarray,
    k: int,
    single: np.ndarray,
    batch: np.ndarray,
    verify: np.ndarray,
    truth: list[np.ndarray],
    configs: Sequence[tuple[int, int, int]] = FAISS_CONFIGS,
    repeat: int = 3,
) -> list[dict[str, Any]]:
    """faiss ``IndexBinaryMultiHash`` (one OpenMP thread) per configuration: build time, RAM
    (anonymous RSS delta), single-query latency (one ``range_search`` call per query), batch
    rate, and recall / extra matches against brute force ``truth`` for ``verify``.
    faiss's range search keeps distances strictly below the radius, so the radius is k + 1."""
    rows = []
    for nhash, bits, nflip in configs:
        trim_heap()
        rss0 = rss_anon()
        index, build_s, _ = timed(lambda: faiss_index(stored, nhash, bits, nflip))
        trim_heap()
        ram = rss_anon() - rss0
        qs = _codes(single)
        lat, cpu_qps = time_calls(lambda i: index.range_search(qs[i : i + 1], k + 1), range(len(qs)))
        qb = _codes(batch)
        res: dict[str, Any] = {}
        br = median_rate(lambda: res.__setitem__("r", index.range_search(qb, k + 1)), len(qb), repeat)
        br["matches"] = int(res.pop("r")[0][-1])
        lims, _, ids = index.range_search(_codes(verify), k + 1)
        found = tp = extra = 0
        want = 0
        for i, t in enumerate(truth):
            got = ids[lims[i] : lims[i + 1]]
            s = np.intersect1d(got, t)
            tp += len(s)
            want += len(t)
            extra += len(np.setdiff1d(got, t))
            found += len(got)
        rows.append(
            {
                "config": f"{nhash}x{bits} nflip={nflip}",
                "build_s": build_s,
                "build_rate": len(stored) / build_s,
                "ram_bytes": ram,
                "ram_per_fp": ram / len(stored),
                "single": lat,
                "single_qps_cpu": cpu_qps,
                "batch": br,
                "recall": tp / want if want else 1.0,
                "extra": extra,
                "verified_queries": len(verify),
                "verified_matches": want,
            }
        )
        index = None  # freed before the next configuration is built
    trim_heap()
    return rows


# -- stores on disk -----------------------------------------------------------------------------


def fresh_dir(path: str | os.PathLike[str]) -> str:
    p = Path(path)
    if p.exists():
        shutil.rmtree(p)
    p.parent.mkdir(parents=True, exist_ok=True)
    return str(p)


def remove(path: str | os.PathLike[str]) -> None:
    shutil.rmtree(path, ignore_errors=True)


def store_sizes(store: Any) -> dict[str, Any]:
    """File size, used pages and per-sub-database pages of a store (reads LMDB statistics through
    the store's private ``_storage``: a benchmark may look inside)."""
    import lmdb

    st = store._storage
    env = st.env
    info = env.info()
    psize = env.stat()["psize"]
    out: dict[str, Any] = {
        "file_size": os.path.getsize(os.path.join(store.path, "data.mdb")),
        "used_bytes": (info["last_pgno"] + 1) * psize,
        "page_size": psize,
    }
    dbs = {}
    with st.read() as txn:
        for name, db in st.dbs.items():
            s = txn.stat(db)
            dbs[name] = {
                "entries": s["entries"],
                "bytes": (s["branch_pages"] + s["leaf_pages"] + s["overflow_pages"]) * psize,
            }
        main = txn.stat()
    out["dbs"] = dbs
    # Pages reachable from some sub-database (or the main one): what the data needs. The file and
    # the used range also hold pages freed by earlier transactions (LMDB reuses, never shrinks).
    out["live_bytes"] = sum(v["bytes"] for v in dbs.values()) + (
        main["branch_pages"] + main["leaf_pages"] + main["overflow_pages"]
    ) * psize
    del lmdb
    return out


def blob_bytes(store: Any) -> dict[bytes, dict[str, int]]:
    """Bytes of the ``blobs`` sub-database grouped by blob prefix: ``r`` + run id + table (a run
    table, table 0xFFFF = the run's id column) or ``s`` + segment id + part (``f`` fingerprints =
    table 0 of a bulk load, ``h`` key hashes, ``o`` ordinals, ``k`` keys). Values and names are
    counted separately; LMDB page overhead is not included (see :func:`store_sizes`)."""
    out: dict[bytes, dict[str, int]] = {}
    with store._storage.read() as txn:
        cur = txn.cursor(db=store._cat.blobs)  # the layout below the API is what this measures
        for key, value in cur:
            key = bytes(key)
            prefix = key[:7] if key[:1] == b"r" else key[:6]
            d = out.setdefault(prefix, {"value": 0, "name": 0, "blobs": 0})
            d["value"] += len(value)
            d["name"] += len(key)
            d["blobs"] += 1
    return out


# -- output -------------------------------------------------------------------------------------


def fmt_rate(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e3:
        return f"{x / 1e3:.0f}k"
    return f"{x:.0f}"


def fmt_n(n: int) -> str:
    e = round(math.log10(n)) if n > 0 else 0
    return f"10^{e}" if 10**e == n else f"{n:,}"


def fmt_us(x: float) -> str:
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}"


def section(title: str, headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A titled Markdown table, one of a report's sections."""
    return f"\n{title}\n\n" + md_table(headers, rows)


def md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(lines)


def note(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def write_json(path: str | None, data: Any) -> None:
    if not path:
        return

    def default(o: Any) -> Any:
        if isinstance(o, (np.integer,)):
            return int(o)
        if isinstance(o, (np.floating,)):
            return float(o)
        if isinstance(o, bytes):
            return o.decode("latin-1")
        if isinstance(o, np.ndarray):
            return o.tolist()
        return str(o)

    with open(path, "w") as fh:
        json.dump(data, fh, indent=1, default=default)


# -- the command line both scripts share ---------------------------------------------------------


def run_parser(doc: str | None, *, largest: float, designs: Sequence[str]) -> Any:
    """A parser with the options of a sized run against the peers, common to both benchmark
    scripts (described by the first paragraph of ``doc``)."""
    import argparse

    ap = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    ap.add_argument("--max", type=float, default=largest, help="largest n")
    ap.add_argument("--n", type=float, nargs="*", help="explicit sizes instead of 10^5..--max")
    ap.add_argument("--quick", action="store_true", help="10^5 only, a smoke run")
    ap.add_argument("--designs", nargs="*", default=list(designs))
    ap.add_argument("--single", type=int, default=5000)
    ap.add_argument("--verify", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--brute-budget", type=float, default=3.0)
    ap.add_argument("--no-faiss", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tmp", default=DEFAULT_TMP)
    ap.add_argument("--json", help="write every figure to this file")
    ap.add_argument("--cpus", type=int, help="pin the process to this many CPUs (1: fpstore runs one thread)")
    ap.add_argument("--report", metavar="JSON", help="only print the tables of a saved --json file")
    return ap


def sizes(args: Any) -> list[int]:
    if args.quick:
        return [10**5]
    if args.n:
        return [int(x) for x in args.n]
    return [10**e for e in (5, 6, 7) if 10**e <= args.max]


def load_saved(path: str) -> dict[str, Any]:
    """Read a saved --json file and print the header its run printed."""
    with open(path) as fh:
        saved: dict[str, Any] = json.load(fh)
    print(f"<!-- {' '.join(saved['argv'])} -->")
    print(f"fpstore {saved.get('code', '?')}; {saved.get('cpus', '?')} CPU(s) available to the process.\n")
    print(f"Load before: `{saved['load_before']}`; after: `{saved['load_after']}`.\n")
    return saved


def run_sizes(args: Any, run_one: Callable[[int, np.random.Generator], dict[str, Any]],
              render: Callable[[list[dict[str, Any]]], str], extra: dict[str, Any] | None = None) -> None:
    """Run ``run_one`` at each size of the command line, print the header and the tables, and save
    every figure to ``--json`` (with ``extra``)."""
    sizes_run = sizes(args)
    cpus = pin_cpus(args.cpus)
    code = code_version()
    rng = np.random.default_rng(args.seed)
    start = uptime()
    t0 = time.perf_counter()
    results = [run_one(n, rng) for n in sizes_run]
    end = uptime()
    print(f"<!-- {' '.join(sys.argv)} -->")
    print(f"fpstore {code}; {cpus} CPU(s) available to the process (fpstore's thread pools use them all; "
          f"faiss runs 1 OpenMP thread).\n")
    print(f"Load before: `{start}`; after: `{end}`; {time.perf_counter() - t0:.0f} s in all.\n")
    print(render(results))
    write_json(args.json, {"argv": sys.argv, "machine": machine(), "code": code, "cpus": cpus,
                           "load_before": start, "load_after": end, **(extra or {}), "results": results})

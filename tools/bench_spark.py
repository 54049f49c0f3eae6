"""fpstore.spark throughput on this machine: Spark local[N], the way docs/scale-out.md quotes it.

    cd /work/main && PYTHONPATH=/work/main nice -n 10 python tools/bench_spark.py --json /tmp/bench_spark.json

``--sizes 100000,1000000`` sets the fingerprint counts of near_duplicates and query_batch;
``--texts 100000`` the documents of fingerprint(); ``--queries 10000,100000,1000000`` the
batches of query_batch (each at most the size);
``--cores 2`` the local[N]. Results go to ``docs/scale-out.md``, section "Measured".

What it measures, one Spark session for everything (its start-up is reported, not counted):

* Inputs: fingerprints (80 % uniform random, 10 % near-duplicates of them at 1..4 bits, 10 %
  identical copies) generated on the driver and written to Parquet, which each run reads (the
  way a real job starts; Spark reuses the group-by exchange of near_duplicates only over files,
  not over a cached frame); texts (300 words over a 5,000-word vocabulary, seeded per row)
  generated on the executors, cached and counted before the clock starts; the queries of
  query_batch cached likewise.
* Each operation runs ``--repeat`` times (default 3) to completion into Spark's ``noop`` sink
  (every row computed, nothing written; near_duplicates is cached and counted to report its pair
  count), timed by the wall clock; near_duplicates includes its row count and its heavy-bucket
  sample, which a user pays too. Medians are reported, and the best run.
* Rows/s is input rows over wall seconds. CPU seconds are the user+system time of the whole
  process tree (driver, JVM, Python workers) over the run, read from /proc: on a shared machine
  they, not the wall clock, give the per-core rate (rows per CPU second) the 8-billion estimate
  scales from. Shuffle bytes and records come from Spark's REST API (the UI runs on a free port).
* The machine's load average (1 min), lowest and highest seen around the runs, is printed too.

Benchmarks are scripts, not tests: nothing here is named for pytest to collect.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from fpstore import Pipeline  # noqa: E402
from fpstore import spark as fs  # noqa: E402
from fpstore.spark.plans import flip_free  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(root_pid: int) -> float:
    """user+system CPU seconds of ``root_pid`` and every live descendant (with reaped children)."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                raw = fh.read()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        pid, ppid = int(name), int(fields[1])
        stats[pid] = fields
        children.setdefault(ppid, []).append(pid)
    total = 0.0
    stack = [root_pid]
    while stack:
        pid = stack.pop()
        f = stats.get(pid)
        if f is not None:
            # utime, stime, cutime, cstime are fields 14-17 of stat (11-14 after pid, comm, state)
            total += sum(int(x) for x in f[11:15]) / _TICK
        stack.extend(children.get(pid, []))
    return total


class Shuffle:
    """Shuffle write bytes/records summed over the stages Spark's REST API lists."""

    def __init__(self, sc) -> None:
        self.url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/stages"

    def totals(self) -> tuple[int, int]:
        try:
            with urllib.request.urlopen(self.url, timeout=10) as resp:
                stages = json.load(resp)
        except OSError:
            return 0, 0
        return (
            sum(int(s.get("shuffleWriteBytes", 0)) for s in stages),
            sum(int(s.get("shuffleWriteRecords", 0)) for s in stages),
        )


def corpus(n: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 2**64, size=n - 2 * (n // 10), dtype=np.uint64)
    src = base[rng.integers(0, len(base), size=n // 10)]
    masks = np.zeros(len(src), np.uint64)
    for _ in range(4):
        on = rng.random(len(src)) < 0.6
        masks |= np.where(on, np.uint64(1) << rng.integers(0, 64, size=len(src)).astype(np.uint64), np.uint64(0))
    masks[masks == 0] = 1
    near = src ^ masks
    copies = base[rng.integers(0, len(base), size=n // 10)]
    out = np.concatenate([base, near, copies])
    return out[rng.permutation(len(out))]


def _texts_fn(vocab_size: int, words: int):
    """mapInArrow body: (id, text) of ``words`` words drawn uniformly from a fixed vocabulary of
    ``vocab_size`` consonant-vowel words, seeded by the row id."""

    def gen(batches):
        import pyarrow as pa

        syll = [c + v for c in "bcdfghklmnprstvz" for v in "aeiou"]
        vrng = np.random.default_rng(12345)
        vocab = np.array(["".join(vrng.choice(syll, size=int(vrng.integers(2, 5)))) for _ in range(vocab_size)])
        for batch in batches:
            ids = batch.column(0).to_numpy()
            texts = [" ".join(vocab[np.random.default_rng(i).integers(0, vocab_size, size=words)]) for i in ids.tolist()]
            yield pa.RecordBatch.from_arrays([batch.column(0), pa.array(texts, pa.string())], names=["id", "text"])

    return gen


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--texts", type=int, default=100_000)
    ap.add_argument("--queries", default="10000,100000,1000000", help="query_batch batch sizes (at most the size)")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--designs", default="auto,r5", help="near_duplicates designs (auto = spark_join_design)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each operation (median and best reported)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    from pyspark.sql import SparkSession

    t0 = time.perf_counter()
    spark = (
        SparkSession.builder.master(f"local[{args.cores}]")
        .appName("fpstore-bench")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.ui.port", "4077")
        .config("spark.port.maxRetries", "64")
        .config("spark.driver.memory", "3g")
        .config("spark.sql.shuffle.partitions", str(4 * args.cores))
        .config("spark.executorEnv.PYTHONPATH", ROOT)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    startup = time.perf_counter() - t0
    shuffle = Shuffle(spark.sparkContext)
    tmp = tempfile.mkdtemp(prefix="fpstore-bench-spark-")
    me = os.getpid()
    results: dict[str, object] = {
        "cores": args.cores,
        "k": args.k,
        "startup_s": round(startup, 1),
        "nproc": os.cpu_count(),
        "runs": [],
    }
    print(f"spark local[{args.cores}] up in {startup:.1f} s; load {os.getloadavg()[0]:.2f}", flush=True)

    def measure(name: str, rows: int, action, **extra) -> dict:
        walls, cpus, loads = [], [], []
        out = None
        b0, r0 = shuffle.totals()
        for _ in range(args.repeat):
            loads.append(os.getloadavg()[0])
            c0 = tree_cpu_seconds(me)
            t = time.perf_counter()
            out = action()
            walls.append(time.perf_counter() - t)
            cpus.append(tree_cpu_seconds(me) - c0)
        loads.append(os.getloadavg()[0])
        b1, r1 = shuffle.totals()
        wall, cpu = float(np.median(walls)), float(np.median(cpus))
        rec = {
            "op": name,
            "rows": rows,
            "wall_s": round(wall, 2),
            "wall_best_s": round(min(walls), 2),
            "cpu_s": round(cpu, 2),
            "rows_per_s": round(rows / wall),
            "rows_per_s_best": round(rows / min(walls)),
            "rows_per_cpu_s": round(rows / cpu) if cpu else None,
            "shuffle_bytes": (b1 - b0) // args.repeat,
            "shuffle_records": (r1 - r0) // args.repeat,
            "load_min": round(min(loads), 2),
            "load_max": round(max(loads), 2),
            **extra,
            **({"output": out} if out is not None else {}),
        }
        results["runs"].append(rec)
        print(json.dumps(rec), flush=True)
        return rec

    def noop(df) -> None:
        df.write.format("noop").mode("overwrite").save()

    # fingerprint(): texts generated on the executors, cached.
    if args.texts:
        texts = (
            spark.range(0, args.texts, numPartitions=4 * args.cores)
            .mapInArrow(_texts_fn(5000, 300), "id long, text string")
            .cache()
        )
        texts.count()
        pipe = Pipeline()
        measure("fingerprint", args.texts, lambda: noop(fs.fingerprint(texts, "text", pipe)), pipeline="Pipeline()")
        texts.unpersist()


    for n in [int(x) for x in args.sizes.split(",") if x]:
        fps = corpus(n)
        src = os.path.join(tmp, f"fps-{n}")
        fs.fingerprints_frame(spark, np.arange(n, dtype=np.int64), fps).repartition(4 * args.cores).write.parquet(src)
        df = spark.read.parquet(src)
        for dname in [x for x in args.designs.split(",") if x]:
            design = None if dname == "auto" else dname
            d = flip_free(design, args.k, n)

            def nd(design=design) -> int:
                pairs = fs.near_duplicates(df, args.k, design=design).cache()
                count = pairs.count()
                pairs.unpersist()
                return count

            measure("near_duplicates", n, nd, design=d.name, tables=len(d.tables))
        for q in [min(int(x), n) for x in args.queries.split(",") if x]:
            qdf = fs.fingerprints_frame(spark, np.arange(q, dtype=np.int64), corpus(q, seed=2)).cache()
            qdf.count()
            qd = fs.spark_batch_design(args.k, q)
            measure("query_batch", n, lambda: noop(fs.query_batch(df, qdf, args.k)), queries=q, design=qd.name)
            qdf.unpersist()

    # The self_join kernel alone: sorted keys in groups of g, all pairs compared (for the estimate).
    from fpstore import _backend

    kern = _backend.load("search")
    rng = np.random.default_rng(3)
    for g in (16, 170):
        groups = 2_000_000 // g
        keys = (np.repeat(np.arange(groups, dtype=np.uint64), g) << np.uint64(40)) | rng.integers(0, 1 << 40, size=groups * g, dtype=np.uint64)
        t = time.perf_counter()
        kern.self_join(keys, 24, args.k)
        wall = time.perf_counter() - t
        comparisons = groups * g * (g - 1) / 2
        rec = {"op": "self_join_kernel", "group": g, "comparisons_per_s": round(comparisons / wall)}
        results["runs"].append(rec)
        print(json.dumps(rec), flush=True)

    spark.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark the sorted-run codec (fpstore.index.runs): size against the entropy floor, encode, decode,
batch probe and single-range probe, for n uniform random sorted keys.

    python tools/bench_codec.py --threads          # n = 10^5, 10^6, 10^7: the table in docs/format.md
    python tools/bench_codec.py --alternatives     # other block codings and block sizes
    python tools/bench_codec.py --n 1000000 --repeat 9

Rates are medians over ``--repeat`` runs (5 by default), one thread: wall clock, and CPU time of
the calling thread (in brackets), which stays meaningful when other processes share the machine.
bits/entry counts every byte a run stores: the chunks and the serialised index. The floor is
64 - log2(n) + 1.44 bits, the entropy of n sorted uniform 64-bit keys. probe_batch: 10^6 random
queries, sorted, prefix 25 bits, k = 3, over the whole run (probe_batch_run). probe: one
prefix-25 range per call through the public function, p50 / p99 latency over 20,000 calls.
``--threads`` adds the summed decode rate of two threads each decoding the whole run at once
(the kernels release the GIL, so on an idle 2-core machine it approaches twice the one-thread
rate). ``--alternatives`` prints exact sizes of Elias-Fano and bit-packed codings of the same
blocks (from their size formulas), this codec's size and decode rate for B = 64..1024, and zstd
over raw gaps.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fpstore import _backend  # noqa: E402

from fpstore.index import runs

U64MAX = (1 << 64) - 1


def floor_bits(n: int) -> float:
    return 64 - math.log2(n) + 1.44


def random_keys(n: int, seed: int = 1) -> np.ndarray:
    return np.sort(np.random.default_rng(seed).integers(0, U64MAX, n, dtype=np.uint64, endpoint=True))


def median_time(fn, repeat: int) -> float:
    return median_times(fn, repeat)[0]


def median_times(fn, repeat: int) -> tuple[float, float]:
    """Median wall-clock and median thread-CPU seconds of ``fn()``."""
    wall, cpu = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.thread_time()
        fn()
        cpu.append(time.thread_time() - c)
        wall.append(time.perf_counter() - t)
    return statistics.median(wall), statistics.median(cpu)


def bench(n: int, repeat: int, block_entries: int, threads: bool) -> dict[str, float]:
    keys = random_keys(n)
    enc, enc_cpu = median_times(lambda: runs.encode_run(keys, block_entries=block_entries), repeat)
    index, chunks = runs.encode_run(keys, block_entries=block_entries)
    stored = sum(len(c) for c in chunks) + len(index.to_bytes())
    get = chunks.__getitem__
    assert np.array_equal(runs.decode_run(get, index), keys)
    dec, dec_cpu = median_times(lambda: runs.decode_run(get, index), repeat)

    def two_threads() -> None:
        ts = [threading.Thread(target=runs.decode_run, args=(get, index)) for _ in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    dec2 = median_time(two_threads, repeat) if threads else float("nan")
    rng = np.random.default_rng(2)
    queries = np.sort(rng.integers(0, U64MAX, 10**6, dtype=np.uint64, endpoint=True))
    pb = median_time(lambda: runs.probe_batch_run(get, index, queries, 25, 3), repeat)
    mask = (U64MAX >> 25) ^ U64MAX
    lat = []
    for q in rng.integers(0, U64MAX, 20_000, dtype=np.uint64, endpoint=True):
        lo = int(q) & mask
        t = time.perf_counter()
        runs.probe(get, index, lo, lo | (U64MAX ^ mask))
        lat.append(time.perf_counter() - t)
    lat.sort()
    bits = 8 * stored / n
    return {
        "n": n,
        "bits": bits,
        "floor": floor_bits(n),
        "ratio": bits / floor_bits(n),
        "encode": n / enc,
        "encode_cpu": n / enc_cpu,
        "decode": n / dec,
        "decode_cpu": n / dec_cpu,
        "decode2": 2 * n / dec2,
        "probe_batch": len(queries) / pb,
        "p50": lat[len(lat) // 2] * 1e6,
        "p99": lat[int(len(lat) * 0.99)] * 1e6,
    }


def print_table(rows: list[dict[str, float]], threads: bool) -> None:
    print(f"backend: {_backend.BACKEND}, block_entries {runs.DEFAULT_BLOCK_ENTRIES}, chunk_bytes {runs.DEFAULT_CHUNK_BYTES}")
    print(
        "| n | bits/entry | floor | ratio | encode keys/s (cpu) | decode keys/s (cpu) | "
        + ("decode, 2 threads | " if threads else "")
        + "probe_batch queries/s | probe p50 / p99 µs |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if threads else ""))
    for r in rows:
        print(
            f"| 10^{round(math.log10(r['n']))} | {r['bits']:.2f} | {r['floor']:.2f} | {r['ratio']:.3f} | "
            f"{r['encode'] / 1e6:.0f}M ({r['encode_cpu'] / 1e6:.0f}M) | "
            f"{r['decode'] / 1e6:.0f}M ({r['decode_cpu'] / 1e6:.0f}M) | "
            + (f"{r['decode2'] / 1e6:.0f}M | " if threads else "")
            + f"{r['probe_batch'] / 1e6:.1f}M | {r['p50']:.1f} / {r['p99']:.1f} |"
        )


# --------------------------------------------------------------------------- alternative codings


def _block_stats(keys: np.ndarray, bsz: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per block: m (coded gaps), span (last - first), max gap; for the size formulas below."""
    nb = -(-len(keys) // bsz)
    starts = np.arange(nb) * bsz
    ends = np.minimum(starts + bsz, len(keys)) - 1
    m = (ends - starts).astype(np.int64)
    span = keys[ends] - keys[starts]
    gaps = np.diff(keys)
    gaps = np.append(gaps, np.uint64(0))
    pad = np.zeros(nb * bsz, np.uint64)
    pad[: len(gaps)] = gaps
    pad = pad.reshape(nb, bsz)
    pad[:, -1] = 0  # the gap from a block's last key to the next block's first is not coded
    return m, span, pad.max(axis=1)


def _bitlen(x: np.ndarray) -> np.ndarray:
    out = np.zeros(len(x), np.int64)
    nz = x > 0
    out[nz] = np.floor(np.log2(x[nz].astype(np.float64))).astype(np.int64) + 1
    # float rounding near powers of two: fix up exactly
    too_big = nz & ((np.uint64(1) << (out - 1).clip(0).astype(np.uint64)) > x)
    out[too_big] -= 1
    return out


def alternative_sizes(keys: np.ndarray, bsz: int) -> dict[str, float]:
    """bits/entry (with the same index: 14 bytes per block, 1 header byte per block) per coding."""
    n = len(keys)
    m, span, gmax = _block_stats(keys, bsz)
    nb = len(m)
    index = 8 * (40 + 14 * nb + 4)
    out = {}
    # Elias-Fano of offsets from the first key: l = floor(log2(span / m)) low bits, unary highs.
    mean = np.where(m > 0, span // np.maximum(m, 1).astype(np.uint64), 0)
    lbits = np.maximum(_bitlen(mean) - 1, 0)
    highs = m + (span >> lbits.astype(np.uint64)).astype(np.int64)
    ef = 8 * (1 + (m * lbits + 7) // 8 + (highs + 7) // 8)
    out["Elias-Fano"] = (ef.sum() + index) / n
    # Frame of reference, bit-packed gaps: width of the largest gap in the block.
    w = _bitlen(gmax)
    out["FOR gaps"] = (8 * (1 + (m * w + 7) // 8).sum() + index) / n
    # Frame of reference, bit-packed offsets from the first key.
    w = _bitlen(span)
    out["FOR offsets"] = (8 * (1 + (m * w + 7) // 8).sum() + index) / n
    # This codec (Rice), measured.
    index_obj, chunks = runs.encode_run(keys, block_entries=bsz)
    out["Rice (fpstore)"] = 8 * (sum(len(c) for c in chunks) + len(index_obj.to_bytes())) / n
    return out


def zstd_gaps(keys: np.ndarray) -> tuple[float, float]:
    """bits/entry and decode keys/s of zstd level 3 over raw little-endian gaps, 4 MiB pieces."""
    import zstandard

    raw = np.diff(keys, prepend=np.uint64(0)).astype("<u8").tobytes()
    piece = 4 << 20
    cctx = zstandard.ZstdCompressor(level=3)
    blobs = [cctx.compress(raw[i : i + piece]) for i in range(0, len(raw), piece)]
    dctx = zstandard.ZstdDecompressor()

    def decode() -> np.ndarray:
        parts = [np.frombuffer(dctx.decompress(b), np.uint64) for b in blobs]
        return np.cumsum(np.concatenate(parts), dtype=np.uint64)

    assert np.array_equal(decode(), keys)
    _, cpu = median_times(decode, 3)
    return 8 * sum(len(b) for b in blobs) / len(keys), len(keys) / cpu


def alternatives(ns: list[int], repeat: int) -> None:
    sizes = (64, 128, 256, 512, 1024)
    for n in ns:
        keys = random_keys(n)
        print(f"\nn = {n}: floor {floor_bits(n):.2f} bits/entry; bits/entry (ratio to floor) by block size")
        table = {b: alternative_sizes(keys, b) for b in sizes}
        print("| coding | " + " | ".join(f"B = {b}" for b in sizes) + " |")
        print("|---|" + "---:|" * len(sizes))
        for name in table[sizes[0]]:
            cells = [f"{table[b][name]:.2f} ({table[b][name] / floor_bits(n):.3f})" for b in sizes]
            print(f"| {name} | " + " | ".join(cells) + " |")
        rates = []
        for b in sizes:
            index, chunks = runs.encode_run(keys, block_entries=b)
            _, cpu = median_times(lambda: runs.decode_run(chunks.__getitem__, index), repeat)
            rates.append(f"{n / cpu / 1e6:.0f}M")
        print("| Rice decode keys/s (cpu) | " + " | ".join(rates) + " |")
        bits, rate = zstd_gaps(keys)
        print(f"zstd-3 over raw 64-bit gaps (no index): {bits:.2f} bits/entry ({bits / floor_bits(n):.3f}), "
              f"decode {rate / 1e6:.0f}M keys/s (cpu) with numpy cumsum")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="*", default=[10**5, 10**6, 10**7])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--alternatives", action="store_true", help="compare codings and block sizes by size")
    ap.add_argument("--threads", action="store_true", help="add the summed decode rate of two threads")
    args = ap.parse_args()
    if args.alternatives:
        alternatives([n for n in args.n if n >= 10**6] or args.n, args.repeat)
        return
    print_table([bench(n, args.repeat, runs.DEFAULT_BLOCK_ENTRIES, args.threads) for n in args.n], args.threads)


if __name__ == "__main__":
    main()

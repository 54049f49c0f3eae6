"""What a verification sketch costs the fingerprint pipeline: time of ``Pipeline(sketch_bits=B)``
against ``Pipeline(sketch_bits=0)`` (no sketch) on the same texts, in one process, rounds interleaved.

    cd /work/main && python tools/bench_sketch.py [--repeat 7] [--threads 1]

Texts: every ``*.py`` file of the running Python's standard library (real English-and-code text,
found on any machine), and, as HTML, the same files wrapped in a page template with navigation
(so the HTML extractor runs); and 2,000 synthetic 600-token ASCII texts, on which the pipeline is
the kernel alone (no HTML, no NFKC work). Reports medians of ``--repeat`` rounds and the ratio to
no sketch.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sysconfig
import time

import numpy as np

import fpstore


def stdlib_texts(limit_bytes: int = 30 << 20) -> list[str]:
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    texts, total = [], 0
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts or "test" in path.parts:
            continue
        try:
            t = path.read_text("utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        texts.append(t)
        total += len(t)
        if total >= limit_bytes:
            break
    return texts


def as_pages(texts: list[str]) -> list[str]:
    nav = "<nav>" + " ".join(f"<a href='/p{i}'>Page {i}</a>" for i in range(30)) + "</nav>"
    return [f"<!DOCTYPE html><html><head><title>t</title></head><body>{nav}<main><pre>{t}</pre></main><footer>f</footer></body></html>" for t in texts]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    plain = stdlib_texts()
    rng = np.random.default_rng(2)
    vocab = ["".join(chr(97 + c) for c in rng.integers(0, 16, int(rng.integers(2, 10)))) for _ in range(5000)]
    synthetic = [" ".join(vocab[i] for i in rng.integers(0, len(vocab), 600)) for _ in range(2000)]
    corpora = {"stdlib .py as text": plain, "stdlib .py as HTML pages": as_pages(plain), "synthetic 600-token texts": synthetic}
    widths = (0, 128, 256, 512)
    pipes = {b: fpstore.Pipeline(sketch_bits=b) for b in widths}
    print(f"{len(plain)} files, {sum(map(len, plain)) / 1e6:.1f} M characters; threads {args.threads}; medians of {args.repeat} rounds")
    print()
    print("| corpus | sketch bits | seconds (median) | MB/s | ÷ no sketch |")
    print("|---|--:|--:|--:|--:|")
    for name, texts in corpora.items():
        size = sum(len(t.encode()) for t in texts)
        times: dict[int, list[float]] = {b: [] for b in widths}
        for _ in range(args.repeat):
            for b in widths:  # interleaved: machine noise falls on every width alike
                t0 = time.perf_counter()
                pipes[b].signatures(texts, threads=args.threads)
                times[b].append(time.perf_counter() - t0)
        base = statistics.median(times[0])
        for b in widths:
            med = statistics.median(times[b])
            print(f"| {name} | {b} | {med:.3f} | {size / med / 1e6:.1f} | {med / base:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``fpstore-admin``: the operator's command line, a thin shell over the public API.

Exit codes: 0 ok, 1 findings (for example damage found by ``verify``), 2 usage or error.
Errors are printed as one line without a traceback.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Sequence

import numpy as np

import fpstore
from fpstore.errors import FpstoreError

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def _cmd_demo(args: argparse.Namespace) -> int:
    """Fingerprint the sample corpus of real text on this machine and print its near-duplicate pairs."""
    from fpstore.samples import sample_corpus

    docs = list(sample_corpus())
    if not docs:
        print("no sample text found on this machine", file=sys.stderr)
        return EXIT_ERROR
    names = [n for n, _ in docs]
    pipe = fpstore.Pipeline()
    t0 = time.perf_counter()
    sigs = pipe.signatures([t for _, t in docs])
    elapsed = time.perf_counter() - t0
    mb = sum(len(t) for _, t in docs) / 1e6
    print(f"fingerprinted {len(docs)} documents ({mb:.1f} MB) in {elapsed * 1000:.1f} ms with pipeline {pipe.id}")
    fps = sigs.values
    dist = np.bitwise_count(fps[:, None] ^ fps[None, :])
    a, b = np.nonzero(np.triu(dist <= args.k, k=1))
    order = np.lexsort((b, a, dist[a, b]))
    print(f"{len(order)} near-duplicate pairs within k={args.k}:")
    for i in order:
        x, y = int(a[i]), int(b[i])
        same = " (same token stream)" if (sigs.content_hashes[x] == sigs.content_hashes[y]).all() else ""
        print(f"  d={int(dist[x, y]):2d}  {names[x]}  ~  {names[y]}{same}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fpstore-admin", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"fpstore {fpstore.__version__} ({fpstore.backend})")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = sub.add_parser("demo", help="find near-duplicates in real text found on this machine", description=_cmd_demo.__doc__)
    demo.add_argument("-k", type=int, default=6, help="Hamming radius (default 6)")
    demo.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except FpstoreError as exc:
        print(f"fpstore-admin: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("fpstore-admin: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of our output went away (``| head``): not an error of ours.
        sys.stderr.close()
        return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

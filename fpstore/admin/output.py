"""``fpstore-admin``'s output: exit codes, keys and values as JSON or text, notes on stderr, and the
progress bar. Shared by every command module."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import IO

import numpy as np

from fpstore.store.keys import Key

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130
PROG = "fpstore-admin"


def key_out(key: Key) -> str | int | dict[str, str]:
    """A key as JSON: str and int as themselves, bytes as ``{"hex": ...}``."""
    if isinstance(key, (bytes, bytearray)):
        return {"hex": bytes(key).hex()}
    return key


def key_text(key: Key) -> str:
    if isinstance(key, (bytes, bytearray)):
        return "hex:" + bytes(key).hex()
    return str(key)


def json_default(obj: object) -> object:
    if isinstance(obj, (bytes, bytearray)):
        return bytes(obj).hex()
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)


def dumps(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False, default=json_default)


def print_json(obj: object) -> None:
    print(json.dumps(obj, ensure_ascii=False, default=json_default, indent=2))


def note(msg: str) -> None:
    print(f"{PROG}: {msg}", file=sys.stderr)


def mib(n: float) -> str:
    return f"{n / (1 << 20):,.1f} MiB"


def hms(seconds: float) -> str:
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
        line = f"\r[{bar}] {frac * 100:5.1f}%  {docs:,} docs  {docs / elapsed:,.0f} docs/s  {byte_rate / 1e6:,.1f} MB/s  ETA {hms(eta)}"
        self.stream.write(line)
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.enabled:
            self.update(*self.state, force=True)
            self.stream.write("\n")
            self.stream.flush()


def want_progress(args: argparse.Namespace) -> bool:
    if args.progress is not None:
        return bool(args.progress)
    return sys.stderr.isatty()

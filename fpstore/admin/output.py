"""``fpstore-admin``'s output: exit codes, keys and values as JSON or text, notes on stderr, and
progress bars (tqdm). Shared by every command module."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import IO, Any

import numpy as np

from fpstore.closing import Closing
from fpstore.errors import InputError
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


class Bar(Closing):
    """A progress bar on stderr (tqdm: done, total, rate, ETA), drawn only when ``enabled``; called
    as every library ``progress=`` callback is, ``bar(done, total)``."""

    def __init__(self, desc: str, unit: str, enabled: bool, total: int | None = None) -> None:
        from tqdm import tqdm

        self._bar = tqdm(
            total=total, desc=desc, unit=unit, unit_scale=True, disable=not enabled, file=sys.stderr, dynamic_ncols=True, mininterval=0.2
        )

    def __call__(self, done: int, total: int | None = None) -> None:
        bar = self._bar
        if total is not None and total != bar.total:
            bar.total = total
        bar.update(done - bar.n)

    def write(self, message: str) -> None:
        """Print a line on stderr above the bar."""
        self._bar.write(message, file=sys.stderr)

    def close(self) -> None:
        self._bar.close()


def want_progress(args: argparse.Namespace) -> bool:
    """A bar on stderr: with ``--progress``, never with ``--no-progress`` or ``--quiet``, else when
    stderr is a terminal."""
    if getattr(args, "quiet", False):
        return False
    if getattr(args, "progress", None) is not None:
        return bool(args.progress)
    return sys.stderr.isatty()


def stages(command: str, args: argparse.Namespace) -> Callable[[str], None]:
    """A function announcing each stage of long work on stderr, when a bar would be shown
    (:func:`want_progress`)."""
    if want_progress(args):
        return lambda what: note(f"{command}: {what}")
    return lambda what: None


def stdout_stream(binary: bool = False) -> IO[Any]:
    """Standard output (its byte stream when ``binary``); an InputError when it is closed."""
    if sys.stdout is None:
        raise InputError("standard output is closed: pass -o FILE or redirect it")
    return sys.stdout.buffer if binary else sys.stdout


def stdin_stream() -> IO[bytes]:
    """Standard input's byte stream; an InputError when it is closed."""
    if sys.stdin is None:
        raise InputError("standard input is closed: pass the input as a FILE instead of '-'")
    return sys.stdin.buffer


@contextlib.contextmanager
def output_file(path: str | None, *, binary: bool = False) -> Iterator[IO[Any]]:
    """Where a command writes its result: standard output for None or ``"-"``. A new file, or a
    regular one (a symlink's target), appears only once the command has succeeded: it is written
    beside it as ``NAME.partial-XXXXXXXX`` (with the old file's permissions) and renamed at the
    end, so that a command that fails, is interrupted or is killed leaves a file of the user's as
    it was. Anything else (a FIFO, a device such as ``/dev/null``) is written in place."""
    if path in (None, "-"):
        out = stdout_stream(binary)
        yield out
        out.flush()
        return
    assert path is not None
    if os.path.isdir(path):
        raise InputError(f"{path} is a directory: -o takes a file name")
    target = os.path.realpath(path)  # a symlink stays one: its target is replaced
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        with open(target, "wb") if binary else open(target, "w", encoding="utf-8", newline="") as direct:
            yield direct
        return
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(target) + ".partial-", dir=os.path.dirname(target))
    try:
        if mode is None:  # a new file gets what open() would have given it
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        else:
            os.chmod(tmp, stat.S_IMODE(mode))
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise

"""``fpstore-admin``'s arguments and stores: the checked numeric argparse type, the pipeline and
design options, and opening a store (a missing one is an error; the commands that run on damaged
stores check the file first)."""

from __future__ import annotations

import argparse
import os
from typing import Callable

import fpstore
from fpstore.errors import CorruptionError, StorageError
from fpstore.index.design import MAX_K


def open_store(path: str, *, readonly: bool = True) -> fpstore.Store:
    """An existing store; a missing one is an error, never silently created."""
    return fpstore.open(path, readonly=readonly, create=False)


class Damaged(CorruptionError):
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


def structure_problems(path: str) -> list[str] | None:
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


def open_checked(path: str) -> fpstore.Store:
    """:func:`open_store` for the commands that must survive damaged stores (verify, export, info):
    LMDB's structural check first; damage raises :class:`Damaged`."""
    problems = structure_problems(path)
    if problems:
        raise Damaged(_damage_line(path, problems))
    try:
        return open_store(path)
    except CorruptionError as exc:
        raise Damaged(str(exc)) from None


def int_arg(lo: int, hi: int | None = None) -> Callable[[str], int]:
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


POSITIVE = int_arg(1)  # sizes, counts and limits
NON_NEGATIVE = int_arg(0)  # seeds, token counts


def pipeline_from(args: argparse.Namespace, defaults: bool) -> fpstore.Pipeline | None:
    """The pipeline the options ask for; None when no option was given and ``defaults`` is False."""
    given = {name: getattr(args, name) for name in ("kind", "html", "shingle", "seed", "min_tokens") if getattr(args, name) is not None}
    if not given and not defaults:
        return None
    return fpstore.Pipeline(**given)


def add_pipeline_options(p: argparse.ArgumentParser, note: str = "") -> None:
    from fpstore.fingerprint.pipeline import HTML_MODES, KINDS, MAX_SHINGLE

    g = p.add_argument_group("pipeline" + note)
    g.add_argument("--kind", choices=sorted(KINDS), default=None, help="fingerprint kind (default: the default pipeline's)")
    g.add_argument("--html", choices=list(HTML_MODES), default=None,
                   help="HTML handling: reduce HTML input to its main content, or 'off' (default: the default pipeline's)")
    g.add_argument("--shingle", type=int_arg(1, MAX_SHINGLE), default=None, metavar="W", help="words per shingle (default 3)")
    g.add_argument("--seed", type=int_arg(0, (1 << 64) - 1), default=None, help="64-bit hash seed (default 0)")
    g.add_argument("--min-tokens", type=NON_NEGATIVE, default=None, metavar="N",
                   help="texts with fewer tokens are matched only exactly (default 20)")


def add_design_options(p: argparse.ArgumentParser, note: str = "") -> None:
    g = p.add_argument_group("table design" + note)
    g.add_argument("-k", type=int_arg(0, MAX_K), default=None, help="Hamming radius the design is exact for, and the default query radius (default 3)")
    g.add_argument("--design", default="auto", help="design name (see docs/designs.md) or 'auto' (default)")
    g.add_argument("--expected-size", type=POSITIVE, default=None, metavar="N", help="documents expected, to choose the design")


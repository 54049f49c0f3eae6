"""``fpstore-admin``: the operator's command line, a thin shell over the public API.

Exit codes: 0 ok, 1 findings (damage found by ``verify``, or by ``export`` and ``info``, which
refuse a damaged store; input skipped by ``ingest``; no match for ``query``), 2 usage or error,
130 interrupted. Errors are printed as one line without a
traceback. ``docs/cli.md`` documents every command.

The commands live in modules of one job each: :mod:`fpstore.admin.output` (exit codes, JSON, notes,
progress), :mod:`fpstore.admin.options` (checked arguments, opening stores),
:mod:`fpstore.admin.inspection` (create, info, stats, verify), :mod:`fpstore.admin.data` (compact, redesign, query,
dedup, export, import), :mod:`fpstore.admin.explaining` (explain), :mod:`fpstore.admin.ingesting` (ingest) and
:mod:`fpstore.admin.demo`; this module builds the parser and runs a command.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

import fpstore
from fpstore.admin.data import cmd_compact, cmd_dedup, cmd_dump, cmd_export, cmd_import, cmd_query, cmd_redesign
from fpstore.admin.demo import cmd_demo
from fpstore.admin.explaining import KEY_TYPES, cmd_explain
from fpstore.admin.ingesting import cmd_ingest
from fpstore.admin.inspection import cmd_create, cmd_info, cmd_stats, cmd_verify
from fpstore.admin.options import (
    DESIGN_HELP,
    NON_NEGATIVE,
    POSITIVE,
    Damaged,
    add_design_options,
    add_pipeline_options,
    int_arg,
    similarity_arg,
)
from fpstore.admin.output import EXIT_ERROR, EXIT_FINDINGS, EXIT_INTERRUPTED, EXIT_OK, PROG, note
from fpstore.errors import FpstoreError
from fpstore.fingerprint.pipeline import DEFAULT_K
from fpstore.index.design import MAX_K


def _first_line(fn: Callable[..., Any]) -> str:
    """A command's summary: the first paragraph of its docstring, on one line."""
    paragraph = (fn.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(line.strip() for line in paragraph.splitlines()).rstrip(".")


class _CommandParser(argparse.ArgumentParser):
    """A command's parser: options may come anywhere among its arguments (``query STORE -k 9 -``).
    Plain argparse takes an optional positional (``nargs="?"``) as absent when an option follows
    the positional before it, and then refuses it as unrecognised."""

    _intermixed = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> tuple[Any, list[str]]:
        if self._intermixed or self._subparsers is not None:  # argparse's own passes, or a group of commands
            return super().parse_known_args(args, namespace)
        self._intermixed = True
        try:
            return super().parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixed = False


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="The operator's command line for fpstore stores: a thin shell over the public API.",
        epilog="Exit codes: 0 ok, 1 findings, 2 usage or error, 130 interrupted. See docs/cli.md.",
    )
    parser.add_argument("--version", action="version", version=f"fpstore {fpstore.__version__} ({fpstore.backend})")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_CommandParser)

    def command(
        name: str, fn: Callable[[argparse.Namespace], int], *, store: bool = True, json_out: bool = True
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=_first_line(fn), description=fn.__doc__)
        if store:
            p.add_argument("store", metavar="STORE", help="the store's directory")
        if json_out:
            p.add_argument("--json", action="store_true", help="print machine-readable JSON")
        p.add_argument("-v", "--verbose", action="count", default=0, help="log what the library does on stderr (-vv: more)")
        p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
        p.set_defaults(func=fn)
        return p

    def progress_options(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--progress",
            dest="progress",
            action="store_true",
            default=None,
            help="show a progress bar (default: when stderr is a terminal)",
        )
        p.add_argument("--no-progress", dest="progress", action="store_false", help="never show a progress bar")

    p = command("create", cmd_create)
    add_pipeline_options(p)
    add_design_options(p)

    command("info", cmd_info)

    p = command("stats", cmd_stats)
    p.add_argument("--sample", type=POSITIVE, default=1000, metavar="N", help="fingerprints sampled (default 1000)")
    p.add_argument("--seed", type=NON_NEGATIVE, default=0, help="sampling seed (default 0)")
    p.add_argument("--png", metavar="FILE", default=None, help="also plot distances, bucket sizes and run sizes to FILE (needs matplotlib)")

    p = command("verify", cmd_verify)
    p.add_argument(
        "--no-copy", action="store_true", help="skip the consistent, compacted copy (LMDB's structural check of the file always runs first)"
    )
    p.add_argument(
        "--tmp", metavar="DIR", default=None, help="where to put the temporary copy (default: beside the store; needs its size free)"
    )
    progress_options(p)

    p = command("compact", cmd_compact)
    p.add_argument(
        "--file",
        action="store_true",
        help="also rewrite the file without free pages (needs the store to itself: no other process may have it open)",
    )
    progress_options(p)

    p = command("redesign", cmd_redesign)
    p.add_argument("-k", type=int_arg(0, MAX_K), default=None, help=f"the new radius (at most {MAX_K}; default with --threshold: 7)")
    p.add_argument(
        "--threshold",
        type=similarity_arg,
        default=None,
        metavar="J",
        help="a store with a sketch: make J its verification threshold (recorded with the design)",
    )
    p.add_argument("--design", default="auto", help=DESIGN_HELP)
    p.add_argument(
        "--expected-size",
        type=POSITIVE,
        default=None,
        metavar="N",
        help="documents expected, to choose the design (default: the store's size, at least 10^6)",
    )
    progress_options(p)

    p = command("query", cmd_query)
    p.add_argument("text", nargs="?", metavar="TEXT", help="the text to look up; '-' reads stdin")
    p.add_argument("--file", metavar="FILE", help="read the text from FILE (UTF-8; invalid bytes become U+FFFD)")
    p.add_argument("--image", metavar="FILE", help="look up the image in FILE (a store of image fingerprints)")
    p.add_argument("--fingerprint", metavar="HEX", help="look up a 64-bit fingerprint made by this store's pipeline")
    p.add_argument("-k", type=int_arg(0, 64), default=None, help="radius (default: the store's k)")
    p.add_argument("--exhaustive", action="store_true", help="compare with every fingerprint (any k up to 64; slow)")
    p.add_argument(
        "--threshold",
        type=similarity_arg,
        default=None,
        metavar="J",
        help="keep matches whose sketches estimate at least J (a store with a sketch; default: the store's; 0: every candidate)",
    )
    p.add_argument("--limit", type=POSITIVE, default=None, metavar="N", help="print at most N matches")
    p.add_argument("--parquet", metavar="FILE", default=None, help="also write the matches to FILE as Parquet (needs pyarrow)")

    p = command("explain", cmd_explain)
    p.add_argument("key_a", metavar="KEY_A", help="a stored document's key")
    p.add_argument("key_b", metavar="KEY_B", help="another stored document's key")
    p.add_argument("--text-a", metavar="FILE", default=None, help="KEY_A's text, for the exact Jaccard of the shingle sets (with --text-b)")
    p.add_argument("--text-b", metavar="FILE", default=None, help="KEY_B's text (with --text-a)")
    p.add_argument(
        "--key-type",
        choices=KEY_TYPES,
        default="auto",
        help="read the keys as str, int (decimal) or bytes (hex); auto (default): the one stored among them",
    )
    p.add_argument("--sample", type=NON_NEGATIVE, default=5, metavar="N", help="shingles shown of each kind (default 5)")

    p = command("dedup", cmd_dedup, json_out=False)
    p.add_argument("-k", type=int_arg(0, MAX_K), default=None, help=f"radius (default: the store's k; at most {MAX_K})")
    p.add_argument("--clusters", action="store_true", help="print clusters (connected components) instead of pairs")
    p.add_argument(
        "--threshold",
        type=similarity_arg,
        default=None,
        metavar="J",
        help="keep pairs whose sketches estimate at least J (a store with a sketch; default: the store's; 0: every pair within k)",
    )
    p.add_argument("--min-size", type=POSITIVE, default=2, metavar="N", help="smallest cluster to print (default 2)")
    p.add_argument(
        "--format", choices=["jsonl", "csv", "parquet"], default="jsonl", help="output format (default jsonl; parquet needs pyarrow)"
    )
    p.add_argument("-o", "--output", metavar="FILE", default=None, help="write to FILE instead of stdout")
    progress_options(p)

    p = command("ingest", cmd_ingest)
    p.add_argument("sources", nargs="*", metavar="SOURCE", help="a .jsonl file, a directory, or a .warc / .warc.gz file")
    p.add_argument(
        "--images",
        action="store_true",
        help="read images instead of texts: a directory's image files, a WARC file's image/* responses, "
        "into a store of image fingerprints (new: --kind phash64, the default, or dhash64)",
    )
    p.add_argument(
        "--max-pixels",
        type=POSITIVE,
        default=None,
        metavar="N",
        help="--images: skip images that declare more than N pixels (default 64,000,000)",
    )
    p.add_argument("--sample", action="store_true", help="also ingest the sample corpus of real text found on this machine")
    p.add_argument(
        "--format",
        choices=["auto", "jsonl", "dir", "warc"],
        default="auto",
        help="source type (default: from the path: directory, *.jsonl/*.ndjson, *.warc[.gz])",
    )
    p.add_argument("--key-field", default="id", metavar="NAME", help="JSONL: the member holding the key (default id)")
    p.add_argument("--text-field", default="text", metavar="NAME", help="JSONL: the member holding the text (default text)")
    p.add_argument("--key-prefix", default="", metavar="P", help="directory: prefix for keys (default none: the relative path)")
    p.add_argument(
        "--follow-symlinks",
        action="store_true",
        help="directory: read links to files outside the tree too (default: skip them with a note)",
    )
    p.add_argument("--include", action="append", default=[], metavar="GLOB", help="directory: read only paths matching GLOB (repeatable)")
    p.add_argument("--exclude", action="append", default=[], metavar="GLOB", help="directory: skip paths matching GLOB (repeatable)")
    p.add_argument("--batch-size", type=POSITIVE, default=1000, metavar="N", help="documents per transaction and checkpoint (default 1000)")
    p.add_argument("--max-bytes", type=POSITIVE, default=16 << 20, metavar="N", help="skip documents larger than N bytes (default 16 MiB)")
    p.add_argument(
        "--on-error",
        choices=["skip", "stop"],
        default="skip",
        help="bad input: report and skip it (exit 1 at the end), or stop there (exit 2)",
    )
    p.add_argument("--restart", action="store_true", help="ignore stored checkpoints and read every source from the start")
    progress_options(p)
    add_pipeline_options(p, " (only for a new store; must match an existing one)")
    add_design_options(p, " (only for a new store)")

    p = command("dump", cmd_dump, json_out=False)
    p.add_argument(
        "--format", choices=["jsonl", "csv", "parquet"], default="jsonl", help="output format (default jsonl; parquet needs pyarrow)"
    )
    p.add_argument("-o", "--output", metavar="FILE", default=None, help="write to FILE instead of stdout")

    p = command("export", cmd_export, json_out=False)
    p.add_argument("-o", "--output", metavar="FILE", default=None, help="write to FILE (atomically) instead of stdout")
    p.add_argument("--level", type=int_arg(1, 22), default=3, help="zstd level, 1..22 (default 3)")
    progress_options(p)

    p = command("import", cmd_import)
    p.add_argument("input", nargs="?", metavar="FILE", default=None, help="the stream to read (default or '-': stdin)")
    p.add_argument("--batch-size", type=POSITIVE, default=10000, metavar="N", help="documents per transaction (default 10000)")
    progress_options(p)

    p = command("demo", cmd_demo, store=False, json_out=False)
    p.add_argument(
        "-k",
        type=int_arg(0, MAX_K),
        default=None,
        help=f"a new demo store answers within k bits (the calibrated k of the pipeline without a sketch is {DEFAULT_K}) instead "
        "of by the default verified similarity; an existing one (--store) keeps its own rule, with k as its radius",
    )
    p.add_argument("--store", default=None, help="keep the demo store at this path (default: a temporary directory)")
    p.add_argument("--limit", type=POSITIVE, default=15, help="clusters to print (default 15)")
    p.add_argument("--members", type=NON_NEGATIVE, default=4, help="members to print per cluster (default 4)")

    from fpstore.admin import calibrate as evaluate_cli

    evaluate_cli.register(sub)

    p = command("completion", cmd_completion, store=False, json_out=False)
    p.add_argument("shell", choices=["bash", "zsh", "tcsh"], help="the shell to complete for")
    return parser


def cmd_completion(args: argparse.Namespace) -> int:
    """Print a shell completion script of every command and option (bash, zsh or tcsh; see docs/cli.md)."""
    import shtab

    print(shtab.complete(build_parser(), shell=args.shell))
    return EXIT_OK


#: The library's hints name Python arguments; on the command line they name flags and commands
#: (regular expressions and their replacements).
_CLI_WORDS = (
    (r"pass exhaustive=True to scan every fingerprint", "add --exhaustive to scan every fingerprint"),
    (r"store\.redesign\((\d+)\)", r"fpstore-admin redesign STORE -k \1"),
    (r"pass create=True to make one", "make one with: fpstore-admin create STORE"),
    (r"a read-only open cannot make one", "make one with: fpstore-admin create STORE"),
    (r"open with readonly=True to read", "commands that only read (info, query, explain, dedup, export, verify) work beside it"),
    (
        r"give a query with text= \(or fingerprint= and sketch=\), or threshold=0",
        "give the TEXT instead of --fingerprint, or --threshold 0",
    ),
    (
        r"^threshold= needs a pipeline with a verification sketch, such as fpstore\.Pipeline\(\) \(512 bits\)",
        "--threshold needs a store that keeps verification sketches",
    ),
    (
        r"ingest them into a new store made without k= \(or with threshold=\)",
        "ingest them into a new store made without -k (or with --threshold)",
    ),
)


def in_cli_words(message: str) -> str:
    """A library error's message with its hints put as the command line's flags and commands."""
    for library, cli in _CLI_WORDS:
        message = re.sub(library, cli, message)
    return message


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "verbose", 0):
        # The library logs through "fpstore.*" loggers, silent until a program configures them.
        logging.basicConfig(
            stream=sys.stderr, level=logging.INFO if args.verbose == 1 else logging.DEBUG, format=f"{PROG}: %(name)s: %(message)s"
        )
    # Keys and texts may hold lone surrogates; print them escaped rather than fail mid-output.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        return args.func(args)
    except Damaged as exc:
        note(f"damaged: {exc}")
        return EXIT_FINDINGS
    except FpstoreError as exc:
        note(f"error: {in_cli_words(str(exc))}")
        return EXIT_ERROR
    except BrokenPipeError:
        # The reader of our output went away (``| head``): not an error of ours.
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - stdout for the rest of the process
        except OSError:
            pass
        return EXIT_OK
    except OSError as exc:
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        note(f"error: {where}{exc.strerror or exc}")
        return EXIT_ERROR
    except KeyboardInterrupt:
        note("interrupted")
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

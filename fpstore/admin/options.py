"""``fpstore-admin``'s arguments and stores: the checked numeric argparse type, the pipeline and
design options, and opening a store (a missing one is an error; the commands that run on damaged
stores check the file first)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import fpstore
from fpstore.errors import CorruptionError, InputError
from fpstore.fingerprint.kinds import AnyPipeline
from fpstore.fingerprint.pipeline import DEFAULT_K
from fpstore.index.design import MAX_K
from fpstore.store.storage import structure_problems
from fpstore.store.store import default_pipeline


def open_store(path: str, *, readonly: bool = True) -> fpstore.Store:
    """An existing store; a missing one is an error, never silently created."""
    return fpstore.open(path, readonly=readonly, create=False)


class Damaged(CorruptionError):
    """Damage found by a command that runs on damaged stores (verify, export, info): a finding,
    reported in one line with exit 1 (docs/cli.md, exit codes), not an error of use."""


def _damage_line(path: str, problems: list[str]) -> str:
    shown = "; ".join(problems[:2])
    more = f" (and {len(problems) - 2} more)" if len(problems) > 2 else ""
    return (
        f"{path}: the store file failed LMDB's structural check: {shown}{more}; nothing was read from it "
        "(LMDB can crash on a damaged page): restore the store from a good copy"
    )


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
    would otherwise run and quietly do the wrong thing (``--max-bytes -1`` would read nothing,
    ``--limit -1`` would drop the last match)."""

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


#: The pipeline options, each named as the Pipeline parameter and attribute it sets.
PIPELINE_OPTIONS = ("kind", "html", "shingle", "seed", "min_tokens", "sketch_bits")


def pipeline_options(args: argparse.Namespace) -> dict[str, Any]:
    """The pipeline options given on the command line."""
    return {name: getattr(args, name) for name in PIPELINE_OPTIONS if getattr(args, name) is not None}


def pipeline_from(args: argparse.Namespace) -> AnyPipeline | None:
    """The pipeline the options ask for; None when no option was given (the store picks its default).

    An image kind (``--kind phash64``/``dhash64``) makes an :class:`fpstore.ImagePipeline`; the
    text options (``--html``, ``--shingle``, ...) with it are an error (exit 2)."""
    from fpstore.fingerprint.image import IMAGE_KINDS

    given = pipeline_options(args)
    if given.get("kind") in IMAGE_KINDS:
        text_only = sorted(name for name in given if name != "kind")
        if text_only:
            flags = ", ".join("--" + name.replace("_", "-") for name in text_only)
            raise InputError(f"{flags}: options of text pipelines; an image pipeline ({given['kind']}) takes none")
        return fpstore.ImagePipeline(kind=given["kind"])
    if not given:
        return None
    return default_pipeline(getattr(args, "k", None), getattr(args, "threshold", None), **given)


def pipeline_conflicts(pipeline: Any, args: argparse.Namespace) -> str:
    """The given pipeline options that differ from ``pipeline``'s (``"shingle=2, not 3"``), or ""
    (an image pipeline has none of the text options: each given one differs)."""
    return ", ".join(
        f"{name}={getattr(pipeline, name)!r}, not {value!r}"
        if hasattr(pipeline, name)
        else f"{pipeline.kind} (which takes no {name}), not {name}={value!r}"
        for name, value in pipeline_options(args).items()
        if getattr(pipeline, name, None) != value
    )


def add_pipeline_options(p: argparse.ArgumentParser, note: str = "") -> None:
    from fpstore.fingerprint.image import IMAGE_KINDS
    from fpstore.fingerprint.pipeline import HTML_MODES, KINDS, MAX_SHINGLE

    g = p.add_argument_group("pipeline" + note)
    g.add_argument(
        "--kind",
        choices=sorted(KINDS) + sorted(IMAGE_KINDS),
        default=None,
        help=f"fingerprint kind: of texts (default: the default pipeline's) or of images ({', '.join(sorted(IMAGE_KINDS))}: "
        "an image store, which takes none of the text options below)",
    )
    g.add_argument(
        "--html",
        choices=list(HTML_MODES),
        default=None,
        help="HTML handling: reduce HTML input to its main content, or 'off' (default: the default pipeline's)",
    )
    g.add_argument("--shingle", type=int_arg(1, MAX_SHINGLE), default=None, metavar="W", help="words per shingle (default 3)")
    g.add_argument("--seed", type=int_arg(0, (1 << 64) - 1), default=None, help="64-bit hash seed (default 0)")
    g.add_argument(
        "--min-tokens", type=NON_NEGATIVE, default=None, metavar="N", help="texts with fewer tokens are matched only exactly (default 20)"
    )
    g.add_argument(
        "--sketch-bits",
        type=sketch_bits_arg,
        default=None,
        metavar="B",
        help="bits of the verification sketch kept per document (a multiple of 64 up to 512; default 512, "
        "or 0 with -k and no --threshold: a store answering within k bits keeps none)",
    )


DESIGN_HELP = "design name (see docs/designs.md), 'auto' (the default: chosen for queries) or 'auto-pairs' (for queries and all pairs)"


def add_design_options(p: argparse.ArgumentParser, note: str = "") -> None:
    g = p.add_argument_group("table design" + note)
    g.add_argument(
        "-k",
        type=int_arg(0, MAX_K),
        default=None,
        help="Hamming radius the design is exact for, and the default query radius (default: the candidate radius 7 of a "
        f"verifying store; {DEFAULT_K} for a pipeline without a sketch)",
    )
    g.add_argument("--design", default="auto", help=DESIGN_HELP)
    g.add_argument("--expected-size", type=POSITIVE, default=None, metavar="N", help="documents expected, to choose the design")
    g.add_argument(
        "--threshold",
        type=similarity_arg,
        default=None,
        metavar="J",
        help="answer by verified similarity: keep candidates whose sketches estimate at least J "
        "(default 0.8 unless -k is given; needs a sketch; see docs/tuning.md)",
    )


def sketch_bits_arg(text: str) -> int:
    """A sketch length on the command line: 0 or a multiple of 64 up to 512."""
    from fpstore.fingerprint.pipeline import SKETCH_BITS

    value = int_arg(0, SKETCH_BITS[-1])(text)
    if value not in SKETCH_BITS:
        raise argparse.ArgumentTypeError(f"must be a multiple of 64 up to {SKETCH_BITS[-1]}, got {value}")
    return value


def similarity_arg(text: str) -> float:
    """A similarity threshold on the command line: a number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"wants a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {value}")
    return value

"""``fpstore-admin ingest``: the command over :func:`fpstore.admin.ingest.ingest` (signals, the
reporter of problems and notes, the progress bar and the summary)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import signal
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import fpstore
from fpstore.admin.options import pipeline_conflicts, pipeline_from
from fpstore.admin.output import EXIT_ERROR, EXIT_FINDINGS, EXIT_INTERRUPTED, EXIT_OK, PROG, Bar, note, print_json, want_progress
from fpstore.errors import InputError, PipelineMismatchError
from fpstore.fingerprint.kinds import is_image


class _Reporter:
    """Prints problems and notes to stderr, at most ``limit`` problems and ``note_limit`` notes of
    each kind; counts the rest (the summary gives every count per kind)."""

    QUIET = frozenset({"not-response", "status", "not-image"})
    #: Notes shown as many times as problems: each names input the operator may want to look at.
    NAMED = frozenset({"bad-image"})

    def __init__(self, limit: int = 20, note_limit: int = 3) -> None:
        self.limit, self.note_limit = limit, note_limit
        self.shown: dict[str, int] = {}
        self.bar: Bar | None = None  # lines go above it while it is drawn

    def __call__(self, ev: Any) -> None:
        from fpstore.admin.ingest import Problem

        if not isinstance(ev, Problem) and ev.kind in self.QUIET:
            return  # expected in every WARC file: counted in the summary, not shown one by one
        kind = ("problem " if isinstance(ev, Problem) else "note ") + ev.kind
        n = self.shown.get(kind, 0) + 1
        self.shown[kind] = n
        limit = self.limit if isinstance(ev, Problem) or ev.kind in self.NAMED else self.note_limit
        if n > limit:
            return
        suffix = f" (further {ev.kind} {'problems' if isinstance(ev, Problem) else 'notes'} are counted, not shown)" if n == limit else ""
        message = f"{'' if isinstance(ev, Problem) else 'note: '}{ev}{suffix}"
        if self.bar is not None:
            self.bar.write(f"{PROG}: {message}")
        else:
            note(message)


@contextlib.contextmanager
def _quiet_decoders(images: bool) -> Iterator[None]:
    """Pillow's warnings (a large image, corrupt EXIF data) are not shown while images are read:
    the images it cannot decode are noted, the others are stored."""
    with warnings.catch_warnings():
        if images:
            warnings.filterwarnings("ignore", module=r"PIL(\.|$)")
            with contextlib.suppress(ImportError):
                from PIL import Image

                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        yield


def _new_pipeline(args: argparse.Namespace, created: bool) -> Any:
    """The pipeline of a new store (None: an existing store, or the default text pipeline), checked
    against ``--images``: an image kind with it (default phash64), a text kind without it."""
    if args.images and args.kind is None:
        # phash64 by default: text options with it are refused as with --kind phash64
        args = argparse.Namespace(**{**vars(args), "kind": "phash64"})
    pipeline = pipeline_from(args) if created else None
    if args.images:
        if pipeline is not None and not is_image(pipeline):
            raise InputError(f"--kind {pipeline.kind} fingerprints texts; --images needs an image kind (--kind phash64 or dhash64)")
    elif pipeline is not None and is_image(pipeline):
        raise InputError(f"--kind {pipeline.kind} makes a store of image fingerprints: add --images to ingest images")
    return pipeline


def cmd_ingest(args: argparse.Namespace) -> int:
    """Add documents from JSON Lines files, directories of text files and WARC files, or images (--images), resumably."""
    from fpstore.admin import ingest as ing

    if args.images and args.sample:
        raise InputError("--sample is a corpus of texts; it cannot go into an image store (--images)")
    if not args.sources and not args.sample:
        if args.images:
            raise InputError("give at least one SOURCE (a directory or a .warc[.gz] file)")
        raise InputError("give at least one SOURCE (a .jsonl file, a directory or a .warc[.gz] file), or --sample")
    created = not os.path.exists(os.path.join(args.store, "data.mdb"))
    new_pipeline = _new_pipeline(args, created)
    sources: list[ing.Source] = [
        ing.make_source(
            p,
            args.format,
            key_field=args.key_field,
            text_field=args.text_field,
            key_prefix=args.key_prefix,
            max_bytes=args.max_bytes,
            follow_symlinks=args.follow_symlinks,
            include=args.include,
            exclude=args.exclude,
            images=args.images,
        )
        for p in args.sources
    ]
    if args.sample:
        sources.append(ing.SampleSource())
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        raise InputError("the same source is given twice")
    store = fpstore.open(
        args.store,
        k=args.k,
        pipeline=new_pipeline,
        design=args.design,
        expected_size=args.expected_size,
        threshold=args.threshold,
    )
    if not created:
        # Pipeline options name settings of the existing store's pipeline: each must match.
        conflicts = pipeline_conflicts(store.pipeline, args)
        if conflicts:
            store.close()
            raise PipelineMismatchError(
                f"{args.store} was created with {conflicts}"
                + "; fingerprints of different pipelines are not comparable: ingest into a new store instead"
            )
        if is_image(store.pipeline) != bool(args.images):
            kind = store.pipeline.kind
            store.close()
            if args.images:
                raise InputError(
                    f"{args.store} holds fingerprints of texts ({kind}); ingest images into a store of their own "
                    "(a new STORE; --kind phash64 or dhash64)"
                )
            raise InputError(f"{args.store} holds fingerprints of images ({kind}): pass --images to ingest images into it")
    image_pipeline = None
    if args.images and args.max_pixels is not None:
        image_pipeline = dataclasses.replace(store.pipeline, max_pixels=args.max_pixels)
    noun = "images" if args.images else "documents"
    stop = threading.Event()
    interrupted = {"n": 0}

    def on_signal(signum: int, frame: Any) -> None:
        interrupted["n"] += 1
        if interrupted["n"] > 1:
            raise KeyboardInterrupt  # a second Ctrl-C: the batch in flight is not applied
        stop.set()
        sys.stderr.write(f"\n{PROG}: stopping after the current batch (Ctrl-C again to abandon it)\n")

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    reporter = _Reporter()
    try:
        with store:
            if created:
                note(f"created {args.store} with pipeline {store.pipeline.id}, design {store.design.name}")
            with Bar("ingest", "B", want_progress(args), total=sum(s.size for s in sources)) as bar, _quiet_decoders(args.images):
                reporter.bar = bar
                result = ing.ingest(
                    store,
                    sources,
                    batch_size=args.batch_size,
                    on_error=args.on_error,
                    restart=args.restart,
                    stop=stop,
                    report=reporter,
                    progress=bar,
                    image_pipeline=image_pipeline,
                )
            reporter.bar = None
            total = len(store)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    data = {
        "store": args.store,
        "created": created,
        "sources": [s.as_dict() for s in result.sources],
        "added": result.added,
        "documents": total,
        "problems": result.problems,
        "interrupted": result.interrupted,
        "stopped_at": None if result.stopped_at is None else str(result.stopped_at),
        "seconds": round(result.seconds, 3),
    }
    if args.json:
        print_json(data)
    else:
        for src in result.sources:
            extra = []
            if src.problems:
                extra.append("problems: " + ", ".join(f"{k} {v}" for k, v in sorted(src.problems.items())))
            if src.notes:
                extra.append("notes: " + ", ".join(f"{k} {v}" for k, v in sorted(src.notes.items())))
            print(f"{src.path}: {src.added:,} {noun} added (from {src.resumed_from})" + ("; " + "; ".join(extra) if extra else ""))
            if not src.read and src.problems:
                note(
                    f"{src.path}: no {noun[:-1]} could be read, so its checkpoint did not move: fix the options "
                    "(--format, --key-field, --text-field) and rerun"
                )
        rate = result.added / result.seconds if result.seconds > 0 else 0.0
        print(f"added {result.added:,} {noun} in {result.seconds:.2f} s ({rate:,.0f}/s); the store holds {total:,}")
    if result.interrupted:
        note("interrupted; everything before the last batch is stored: rerun the same command to resume")
        return EXIT_INTERRUPTED
    if result.stopped_at is not None:
        note(
            f"stopped at {result.stopped_at.where} (--on-error stop); the documents before it are stored: "
            "fix the input or pass --on-error skip, and rerun to resume there"
        )
        return EXIT_ERROR
    return EXIT_FINDINGS if result.problems else EXIT_OK

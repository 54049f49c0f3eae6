"""Feed a store from files: JSON Lines, a directory of text files, WARC files; resumable.

A *source* reads one path and yields :class:`Item` (a key, a text, and the position just after it)
or :class:`Problem` (bad input, with where it is). :func:`ingest` batches items into
:meth:`fpstore.Store.add_many`, recording the source's checkpoint ``(source name, position)`` in
the same transaction as each batch, so after a crash or an interrupt a rerun resumes exactly after
the last committed batch and no document is stored twice (keys are idempotent as well).

Positions (msgpack-able dicts, stored by the store as checkpoints):

* JSON Lines ``{"line": n, "offset": bytes, "head": digest}``: lines 1..n are done, the next line
  starts at ``offset``; ``head`` is a digest of the file's first bytes, to notice a replaced file.
* directory ``{"file": relative path, "count": n}``: every file up to ``file`` in the walk order
  (sorted by path components) is done; ``file`` is bytes when the path is not UTF-8.
* WARC ``{"record": n, "offset": bytes, "id": record id}``: records 1..n are done; the last one
  starts at ``offset`` and has WARC-Record-ID ``id``. Resuming seeks there (per-record gzip and
  uncompressed files) and checks the id; otherwise it skips n records from the start. When record
  n was skipped because its header is too long to read, ``"next": bytes`` says where record n + 1
  starts; resuming checks record n again and seeks there.

Text is passed to the store as read (HTML included: the pipeline reduces markup itself). Bytes are
decoded as UTF-8 (or a WARC response's declared charset, when it names a character set Python
knows; an unknown name or a codec that is not a character set, such as ``rot13`` or ``base64``,
means UTF-8) with invalid sequences replaced by U+FFFD, and counted. The WARC reader is FastWARC
(``pip install 'fpstore[ingest]'``), imported only when a WARC file is read.

Images (``make_source(..., images=True)``: the image files of a directory, the ``image/*``
responses of a WARC file) go to a store of image fingerprints. The sources yield the encoded bytes;
:func:`ingest` fingerprints each batch's images one by one on a few threads with the store's
:class:`~fpstore.ImagePipeline` (or ``image_pipeline``, the same kind with other limits), so an
image that does not decode (truncated, not an image, over the pipeline's ``max_pixels``: a
decompression bomb) is skipped with one ``bad-image`` note naming it and why, and the rest of its
batch is stored. The positions are the text sources' (the options recorded with them say
``images``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fpstore.admin.sources import (
    DEFAULT_MAX_BYTES,
    IMAGE_SUFFIXES,
    JSONL_SUFFIXES,
    WARC_SUFFIXES,
    DirectorySource,
    ImageDirectorySource,
    Item,
    JsonlSource,
    Note,
    Problem,
    SampleSource,
    Source,
    check_key,
    image_format,
)
from fpstore.admin.warc import WarcSource, load_fastwarc
from fpstore.errors import InputError
from fpstore.fingerprint.pipeline import Fingerprints, Signature
from fpstore.parallel import available_cores, executor

__all__ = [
    "DirectorySource",
    "IMAGE_SUFFIXES",
    "ImageDirectorySource",
    "IngestResult",
    "Item",
    "JsonlSource",
    "Note",
    "Problem",
    "SampleSource",
    "Source",
    "SourceResult",
    "WarcSource",
    "detect_kind",
    "image_format",
    "image_signatures",
    "ingest",
    "make_source",
]

DEFAULT_BATCH = 1000
DEFAULT_BATCH_BYTES = 32 << 20


def detect_kind(path: str) -> str:
    """``"dir"``, ``"jsonl"`` or ``"warc"`` from what ``path`` is and how its name ends."""
    if os.path.isdir(path):
        return "dir"
    lower = path.lower()
    if lower.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if lower.endswith(WARC_SUFFIXES):
        return "warc"
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file or directory")
    raise InputError(
        f"cannot tell the type of {path} from its name (expected a directory, "
        f"{', '.join(JSONL_SUFFIXES)} or {', '.join(WARC_SUFFIXES)}); pass --format"
    )


def make_source(path: str, kind: str = "auto", **options: Any) -> Source:
    """A source for ``path``; ``kind`` is ``auto``, ``jsonl``, ``dir`` or ``warc``.

    ``options``: ``key_field``/``text_field`` (JSONL), ``key_prefix``, ``follow_symlinks``,
    ``include`` and ``exclude`` (directory), ``max_bytes``; ``images=True`` reads the images of a
    directory or a WARC file instead of its texts (for a store of image fingerprints).
    """
    if kind == "auto":
        kind = detect_kind(path)
    max_bytes = options.get("max_bytes", DEFAULT_MAX_BYTES)
    images = bool(options.get("images", False))
    if images:
        if kind not in ("dir", "warc"):
            raise InputError(f"{path}: --images reads directories and WARC files, not {kind} (JSON Lines files hold texts)")
        load_pillow()
    if kind != "dir" and not os.path.isfile(path):
        raise InputError(f"{path}: no such file" if not os.path.exists(path) else f"{path} is not a file")
    if kind == "dir" and not os.path.isdir(path):
        raise InputError(f"{path} is not a directory")
    if kind == "jsonl":
        return JsonlSource(
            path, key_field=options.get("key_field", "id"), text_field=options.get("text_field", "text"), max_bytes=max_bytes
        )
    if kind == "dir":
        return (ImageDirectorySource if images else DirectorySource)(
            path,
            key_prefix=options.get("key_prefix", ""),
            max_bytes=max_bytes,
            follow_symlinks=bool(options.get("follow_symlinks", False)),
            include=options.get("include") or (),
            exclude=options.get("exclude") or (),
        )
    if kind == "warc":
        load_fastwarc()
        return WarcSource(path, max_bytes=max_bytes, images=images)
    raise InputError(f"unknown source format {kind!r} (expected auto, jsonl, dir or warc)")


def load_pillow() -> None:
    """Refuse an image ingest up front where Pillow is missing (else every image would be noted)."""
    try:
        import PIL  # noqa: F401
    except ImportError:
        raise InputError("reading images needs Pillow: pip install 'fpstore[image]'") from None


# -- images -------------------------------------------------------------------------------------------

_BYTESIO = re.compile(r" ?<_io\.BytesIO object at 0x[0-9a-fA-F]+>")


def image_reason(exc: InputError) -> str:
    """Why an image does not decode, from the pipeline's error (without the repr of a buffer)."""
    return _BYTESIO.sub("", str(exc)).rstrip(".")


def _image_signature(pipeline: Any, data: bytes) -> Signature | str:
    """The signature of one encoded image, or why it has none (one line)."""
    try:
        sig: Signature = pipeline.signature(data)
        return sig
    except InputError as exc:
        return image_reason(exc)
    except MemoryError:
        return "image does not decode in the memory available"
    except RecursionError:  # a plugin's recursive structure (TIFF IFDs) nested too deeply
        return "image does not decode: nested too deeply"
    except Exception as exc:  # noqa: BLE001 - a bug of ours; one file must not stop the ingest for good
        return f"image does not fingerprint ({type(exc).__name__}: {exc}; an fpstore bug: please report it with the file)"


def image_signatures(pipeline: Any, images: Sequence[bytes], threads: int = 1) -> list[Signature | str]:
    """Each image's signature, or the reason it does not decode, on ``threads`` threads (Pillow
    decodes without the GIL). Unlike :meth:`fpstore.ImagePipeline.signatures`, one bad image does
    not fail the others."""
    if threads <= 1 or len(images) < 2:
        return [_image_signature(pipeline, data) for data in images]
    return list(executor(threads).map(lambda data: _image_signature(pipeline, data), images))


# -- the driver ---------------------------------------------------------------------------------------


def _resume_position(store: Any, src: Source) -> dict[str, Any] | None:
    """Where ``src`` resumes: its checkpoint without the options recorded in it, once they are
    checked against the source's own (another reading of the same file needs --restart)."""
    pos = store.checkpoint(src.name)
    if pos is None:
        return None
    if not isinstance(pos, dict):
        raise InputError(f"the checkpoint of {src.path} is malformed; pass --restart to ingest it from the start")
    pos = dict(pos)
    recorded = pos.pop(OPTIONS, None)
    mine = src.options()
    if recorded is not None and recorded != mine:
        differ = ", ".join(
            f"{k} {recorded.get(k)!r} (now {mine.get(k)!r})" for k in sorted(set(recorded) | set(mine)) if recorded.get(k) != mine.get(k)
        )
        raise InputError(
            f"{src.path} was ingested with other options: {differ}; rerun with the same options to resume, "
            "or pass --restart to ingest it from the start with the new ones"
        )
    return pos


@dataclass
class SourceResult:
    """What one source's ingest did."""

    path: str
    kind: str
    resumed_from: str
    added: int = 0
    read: int = 0  # documents read (a source that reads none but problems keeps its checkpoint)
    batches: int = 0
    problems: dict[str, int] = field(default_factory=dict)
    notes: dict[str, int] = field(default_factory=dict)
    position: dict[str, Any] | None = None
    done: bool = False

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class IngestResult:
    """What :func:`ingest` did: per source, and whether it stopped early."""

    sources: list[SourceResult] = field(default_factory=list)
    interrupted: bool = False
    stopped_at: Problem | None = None
    seconds: float = 0.0

    @property
    def added(self) -> int:
        return sum(s.added for s in self.sources)

    @property
    def problems(self) -> int:
        return sum(sum(s.problems.values()) for s in self.sources)


#: The key of a checkpoint position that holds the source's options (:meth:`Source.options`).
OPTIONS = "options"


class _Batch:
    """The documents of one source read since its last commit, and the source's position after
    the last thing read (a document, a note or a skipped problem). ``options`` ride with every
    position committed."""

    def __init__(self, pos: dict[str, Any] | None, options: dict[str, Any]) -> None:
        self.keys: list[str] = []
        self.texts: list[str] = []
        self.images: list[bytes] = []  # an image source's items (then texts stays empty)
        self.wheres: list[str] = []  # where each image was read, for its note
        self.fingerprints: Fingerprints | None = None  # the images' (after fingerprint_images)
        self.nbytes = 0
        self.pos = pos
        self.committed_pos = pos
        self.committed_docs = 0
        self.options = options

    def append(self, item: Item) -> None:
        self.keys.append(item.key)
        if item.image is not None:
            self.images.append(item.image)
            self.wheres.append(item.where or item.key)
        else:
            self.texts.append(item.text)
        self.nbytes += item.nbytes
        self.pos = item.pos

    def fingerprint_images(self, pipeline: Any, threads: int) -> list[Note]:
        """Fingerprint the batch's images; those that do not decode leave the batch, each with a
        ``bad-image`` note."""
        if not self.images:
            return []
        sigs = image_signatures(pipeline, self.images, threads)
        notes = [Note(self.wheres[i], "bad-image", f"{s}; skipped") for i, s in enumerate(sigs) if isinstance(s, str)]
        good = [s for s in sigs if not isinstance(s, str)]
        self.keys = [k for k, s in zip(self.keys, sigs) if not isinstance(s, str)]
        self.fingerprints = Fingerprints.of(good, pipeline.id)
        self.images, self.wheres = [], []
        return notes

    def commit(self, store: Any, checkpoint: str) -> bool:
        """Add the documents with the checkpoint at ``pos`` in one transaction; False when there
        is nothing new to record."""
        if not self.keys and self.pos == self.committed_pos:
            return False
        position = None if self.pos is None else {**self.pos, OPTIONS: self.options}
        if self.fingerprints is not None:
            store.add_many(self.keys, fingerprints=self.fingerprints, checkpoint=(checkpoint, position))
        elif self.images:
            raise AssertionError("fingerprint_images() comes before commit()")
        else:
            store.add_many(self.keys, texts=self.texts, checkpoint=(checkpoint, position))
        self.committed_pos, self.committed_docs = self.pos, len(self.keys)
        self.keys, self.texts, self.fingerprints, self.nbytes = [], [], None, 0
        return True


def ingest(
    store: Any,
    sources: Sequence[Source],
    *,
    batch_size: int = DEFAULT_BATCH,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    on_error: str = "skip",
    restart: bool = False,
    stop: threading.Event | None = None,
    report: Callable[[Problem | Note], None] | None = None,
    progress: Callable[[int, int | None], None] | None = None,
    image_pipeline: Any = None,
    threads: int | None = None,
) -> IngestResult:
    """Read ``sources`` into ``store`` in batches, each committed with its source's checkpoint.

    ``on_error="skip"`` reports bad input through ``report`` and goes on; ``"stop"`` commits the
    documents before it and stops (``result.stopped_at``). Setting ``stop`` makes the ingest
    commit what it has read and return (``result.interrupted``). ``restart`` ignores the stored
    checkpoints. ``progress(bytes read, bytes of every source)`` is called after each batch and
    every few hundred documents (the same ``(done, total)`` signature as every ``progress=``).

    Images (from sources made with ``images=True``) are fingerprinted with ``image_pipeline``
    (default: the store's pipeline; one of its kind with other limits, such as ``max_pixels``) on
    ``threads`` threads (default: every core); each that does not decode is reported as a
    ``bad-image`` note and skipped.
    """
    if on_error not in ("skip", "stop"):
        raise InputError(f"on_error must be 'skip' or 'stop', got {on_error!r}")
    if batch_size < 1:
        raise InputError(f"batch size must be >= 1, got {batch_size}")
    stop = stop or threading.Event()
    result = IngestResult()
    t0 = time.monotonic()
    done_bytes = 0  # bytes of sources finished before the current one
    total_bytes = sum(src.size for src in sources)
    image_pipeline = store.pipeline if image_pipeline is None else image_pipeline
    n_threads = available_cores() if threads is None else max(1, int(threads))

    for src in sources:
        pos = None if restart else _resume_position(store, src)
        res = SourceResult(src.path, src.kind, src.describe(pos), position=pos)
        result.sources.append(res)
        batch = _Batch(pos, src.options())

        def flush(src: Source = src, res: SourceResult = res, batch: _Batch = batch, done_bytes: int = done_bytes) -> None:
            if not res.read and res.problems:
                # Nothing but refusals (the wrong fields, the wrong format): moving the checkpoint
                # past them would make the corrected rerun skip the whole source.
                return
            for bad in batch.fingerprint_images(image_pipeline, n_threads):
                res.notes[bad.kind] = res.notes.get(bad.kind, 0) + 1
                if report is not None:
                    report(bad)
            if batch.commit(store, src.name):
                res.added += batch.committed_docs
                res.batches += 1
                res.position = batch.pos
                if progress is not None:
                    progress(done_bytes + src.consumed, total_bytes)

        for n_seen, ev in enumerate(src.items(pos), 1):
            if isinstance(ev, Item):
                ev = check_key(src, ev)
            if isinstance(ev, Note):
                res.notes[ev.kind] = res.notes.get(ev.kind, 0) + 1
                if report is not None:
                    report(ev)
                if ev.pos is not None:
                    batch.pos = ev.pos
            elif isinstance(ev, Problem):
                res.problems[ev.kind] = res.problems.get(ev.kind, 0) + 1
                if report is not None:
                    report(ev)
                if on_error == "stop":
                    flush()
                    result.stopped_at = ev
                    result.seconds = time.monotonic() - t0
                    return result
                if ev.pos is None:
                    break  # the source cannot go on (truncated): commit up to before it
                batch.pos = ev.pos
            else:
                res.read += 1
                batch.append(ev)
                if len(batch.keys) >= batch_size or batch.nbytes >= batch_bytes:
                    flush()
            if stop.is_set():
                flush()
                result.interrupted = True
                result.seconds = time.monotonic() - t0
                return result
            if progress is not None and n_seen % 256 == 0:
                progress(done_bytes + src.consumed, total_bytes)
        else:
            res.done = True
        flush()
        if res.problems.get("truncated"):
            res.done = False
        done_bytes += src.size
        if progress is not None:
            progress(done_bytes, total_bytes)
    result.seconds = time.monotonic() - t0
    return result

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
"""

from __future__ import annotations

import codecs
import errno
import hashlib
import io
import json
import os
import stat
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, NamedTuple, Sequence

from fpstore.errors import InputError
from fpstore.limits import MAX_CHECKPOINT_NAME_BYTES, MAX_KEY_BYTES

__all__ = [
    "DirectorySource",
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
    "ingest",
    "make_source",
]

DEFAULT_MAX_BYTES = 16 << 20  # larger documents (lines, files, payloads) are skipped with a note
DEFAULT_BATCH = 1000
DEFAULT_BATCH_BYTES = 32 << 20
_HEAD_BYTES = 4096  # bytes of a JSONL file hashed into its checkpoint, to notice a replaced file
_SNIFF_BYTES = 8192  # a NUL byte in a file's first 8 KiB makes it binary (as git and grep decide)

JSONL_SUFFIXES = (".jsonl", ".ndjson", ".jsonlines")
WARC_SUFFIXES = (".warc", ".warc.gz", ".warc.lz4", ".warc.zst")
_TEXT_TYPES = ("text/", "application/xhtml+xml", "application/xml", "application/json")


# -- what sources yield ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One document: its key, its text, and the source position just after it."""

    key: str
    text: str
    pos: dict[str, Any]
    nbytes: int


@dataclass(frozen=True)
class Problem:
    """Bad input at ``where`` (``path:line``, ``path: record n``, a file path).

    ``kind`` is one of ``malformed``, ``missing-field``, ``bad-field``, ``truncated``,
    ``unreadable``, ``too-large``. ``pos`` is the position after the bad input, where a skip
    resumes; None when the input cannot be skipped (a truncated record: the source ends there,
    and its checkpoint stays before it so a rerun retries it once the file is complete).
    """

    where: str
    kind: str
    message: str
    pos: dict[str, Any] | None

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@dataclass(frozen=True)
class Note:
    """Input skipped or repaired on purpose (binary files, non-text records, invalid UTF-8)."""

    where: str
    kind: str  # "binary", "not-text", "invalid-utf8", "status", "too-large", "symlink", ...
    message: str
    pos: dict[str, Any] | None = None

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


#: Text codecs Python knows that are not character sets: ``undefined`` fails on every input,
#: ``idna`` and ``punycode`` refuse ``errors="replace"``, the escape codecs are Python syntax.
_NOT_CHARSETS = frozenset({"undefined", "idna", "punycode", "unicode-escape", "raw-unicode-escape"})


def _charset(declared: str | None) -> str:
    """The codec name to decode a payload whose declared charset is ``declared``: a real text
    encoding Python knows, else ``"utf-8"`` (unknown names, bytes-to-bytes codecs such as
    ``rot13``, ``base64`` or ``zlib_codec``, and the text codecs in ``_NOT_CHARSETS``)."""
    if not declared:
        return "utf-8"
    try:
        info = codecs.lookup(declared.strip().strip('"'))
    except (LookupError, ValueError, TypeError):  # ValueError: a NUL in the name
        return "utf-8"
    if not getattr(info, "_is_text_encoding", True) or info.name in _NOT_CHARSETS:
        return "utf-8"
    return info.name


def _decode(data: bytes, encoding: str = "utf-8") -> tuple[str, bool]:
    """``(text, clean)``: ``data`` decoded, invalid sequences replaced by U+FFFD (clean=False)."""
    try:
        return data.decode(encoding), True
    except UnicodeDecodeError:
        return data.decode(encoding, errors="replace"), False


# -- sources ----------------------------------------------------------------------------------------


class Source:
    """A path to read documents from. Subclasses set ``kind`` and implement :meth:`items`."""

    kind = ""

    def __init__(self, path: str, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.consumed = 0  # bytes of the source read so far (for progress)

    @property
    def name(self) -> str:
        """The checkpoint name: kind and real path, so a renamed working directory still resumes.

        ``ingest:KIND:REAL PATH`` when that is valid UTF-8 of at most
        :data:`~fpstore.limits.MAX_CHECKPOINT_NAME_BYTES` bytes (the name every version gave it);
        otherwise (a path that is not UTF-8, or a long one) ``ingest:KIND:#DIGEST:...TAIL``, a
        digest of the whole real path and as much of its end as fits, escaped to be readable.
        """
        return _checkpoint_name(self.kind, os.path.realpath(self.path))

    @property
    def size(self) -> int:
        """Total bytes to read (for progress and ETA)."""
        return os.path.getsize(self.path)

    def describe(self, pos: dict[str, Any] | None) -> str:
        """A position, for people ("line 120", "record 17")."""
        return "the start" if not pos else ", ".join(f"{k} {v}" for k, v in pos.items() if k in ("line", "record", "file", "index"))

    def items(self, pos: dict[str, Any] | None) -> Iterator[Item | Problem | Note]:  # pragma: no cover
        raise NotImplementedError


def _checkpoint_name(kind: str, real: str) -> str:
    """The checkpoint name of a source of ``kind`` at real path ``real`` (see :attr:`Source.name`)."""
    name = f"ingest:{kind}:{real}"
    try:
        if len(name.encode("utf-8")) <= MAX_CHECKPOINT_NAME_BYTES:
            return name
    except UnicodeEncodeError:  # surrogates: the path's bytes are not UTF-8
        pass
    # A real path starts with "/" (or a drive), never "#": no such name collides with a plain one.
    digest = hashlib.blake2b(real.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    head = f"ingest:{kind}:#{digest}:..."
    room = MAX_CHECKPOINT_NAME_BYTES - len(head.encode("utf-8"))
    tail = real.encode("utf-8", "backslashreplace")[-room:].decode("utf-8", "ignore")
    return head + tail


class JsonlSource(Source):
    """One JSON object per line; ``key_field`` and ``text_field`` name the members to read.

    Blank lines are ignored. A key may be a string or an integer (stored as its decimal string).
    """

    kind = "jsonl"

    def __init__(self, path: str, *, key_field: str = "id", text_field: str = "text", max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        super().__init__(path, max_bytes=max_bytes)
        self.key_field = key_field
        self.text_field = text_field

    def items(self, pos: dict[str, Any] | None) -> Iterator[Item | Problem | Note]:
        with open(self.path, "rb") as fh:
            first = fh.read(_HEAD_BYTES)  # the head digest of a position hashes these
            line_no, offset = 0, 0
            if pos:
                line_no, offset = _pos_int(pos, "line", self), _pos_int(pos, "offset", self)
                size = os.fstat(fh.fileno()).st_size
                if size < offset or _head_digest(first, offset) != pos.get("head"):
                    why = "it is shorter than the bytes already read" if size < offset else "its first bytes differ"
                    raise InputError(
                        f"{self.path} changed since its checkpoint at line {line_no} ({why}); "
                        "pass --restart to ingest it again from the start"
                    )
            fh.seek(offset)
            self.consumed = offset
            while True:
                raw = fh.readline(self.max_bytes + 1)
                if not raw:
                    return
                if len(first) < _HEAD_BYTES and offset + len(raw) > len(first):
                    first = _reread_head(fh)  # the file grew since it was opened
                if len(raw) > self.max_bytes and not raw.endswith(b"\n"):
                    # Skip the rest of an over-long line without holding it in memory.
                    while raw and not raw.endswith(b"\n"):
                        offset += len(raw)
                        raw = fh.readline(1 << 20)
                    offset += len(raw)
                    line_no += 1
                    self.consumed = offset
                    here = {"line": line_no, "offset": offset, "head": _head_digest(first, offset)}
                    yield Problem(f"{self.path}:{line_no}", "too-large", f"line longer than {self.max_bytes:,} bytes; skipped", here)
                    continue
                offset += len(raw)
                line_no += 1
                self.consumed = offset
                if not raw.strip():
                    continue
                where = f"{self.path}:{line_no}"
                here = {"line": line_no, "offset": offset, "head": _head_digest(first, offset)}
                text, clean = _decode(raw)
                try:
                    obj = json.loads(text)
                except (ValueError, RecursionError) as exc:
                    # RecursionError: arrays or objects nested deeper than the parser recurses
                    # (100,000 "[" do it); bad JSON like any other, not a crash of the ingest.
                    if isinstance(exc, RecursionError):
                        exc = ValueError("nested too deeply")
                    if not raw.endswith(b"\n"):
                        # A last line without its newline may still be being written: leave it
                        # for the next run rather than skip it for good.
                        yield Problem(where, "truncated", f"the last line is incomplete ({exc}); a rerun retries it", None)
                        return
                    yield Problem(where, "malformed", f"malformed JSON ({exc})", here)
                    continue
                if not clean:
                    yield Note(where, "invalid-utf8", "invalid UTF-8 replaced by U+FFFD")
                if not isinstance(obj, dict):
                    yield Problem(where, "malformed", f"expected a JSON object, got {_json_type(obj)}", here)
                    continue
                missing = [f for f in (self.key_field, self.text_field) if f not in obj]
                if missing:
                    yield Problem(where, "missing-field", "missing field " + " and ".join(repr(f) for f in missing), here)
                    continue
                key, body = obj[self.key_field], obj[self.text_field]
                if isinstance(key, int) and not isinstance(key, bool):
                    key = str(key)
                if not isinstance(key, str):
                    yield Problem(where, "bad-field", f"field {self.key_field!r} is {_json_type(key)}, expected a string or an integer", here)
                    continue
                if not isinstance(body, str):
                    yield Problem(where, "bad-field", f"field {self.text_field!r} is {_json_type(body)}, expected a string", here)
                    continue
                yield Item(key, body, here, len(raw))

    def describe(self, pos: dict[str, Any] | None) -> str:
        return "the start" if not pos else f"line {pos.get('line')}"


def _head_digest(first: bytes, offset: int) -> str:
    """Digest of the file's first ``min(offset, 4096)`` bytes: a checkpoint's guard against a replaced file."""
    return hashlib.blake2b(first[: min(offset, _HEAD_BYTES)], digest_size=8).hexdigest()


def _reread_head(fh: io.BufferedReader) -> bytes:
    cur = fh.tell()
    fh.seek(0)
    first = fh.read(_HEAD_BYTES)
    fh.seek(cur)
    return first


class _File(NamedTuple):
    """A file of a :class:`DirectorySource`."""

    parts: tuple[str, ...]  # components of its path below the directory: the walk order
    rel: str  # the same, joined with "/": its key (after the prefix)
    size: int
    #: what to open: components below the directory's real path, opened following no link
    #: (a regular file, or a link to one inside the tree); a path (follow_symlinks=True); or None
    #: for a link to a file outside the tree, which is skipped with a note.
    target: tuple[str, ...] | str | None


class DirectorySource(Source):
    """Every regular file under a directory, in path order; the key is the path relative to it.

    Hidden files and directories (names starting with ``.``) are left out. Symbolic links are
    followed only inside the tree: a link to a file in it is read (under the link's own path),
    a link to a file outside it is skipped with a ``symlink`` note, and links to directories are
    not followed; files are opened following no link below the directory, so a file swapped for a
    link after the walk is not read through it. ``follow_symlinks=True`` follows every link, to
    files and directories, wherever it points (each directory is walked once, so a link to an
    ancestor does not loop). Binary files (a NUL byte in the first 8 KiB) are skipped with a note.

    Names that are not UTF-8 give keys with the undecodable bytes as lone surrogates
    (:func:`os.fsdecode`; :func:`os.fsencode` of the key gives the name's bytes back), which the
    store keeps as they are; such a name is held in a position as bytes.
    """

    kind = "dir"

    def __init__(self, path: str, *, key_prefix: str = "", max_bytes: int = DEFAULT_MAX_BYTES,
                 follow_symlinks: bool = False) -> None:
        super().__init__(path, max_bytes=max_bytes)
        self.key_prefix = key_prefix
        self.follow_symlinks = follow_symlinks
        self._files: list[_File] | None = None

    def files(self) -> list[_File]:
        """Every file, sorted by path components (see :class:`_File`)."""
        if self._files is None:
            out = []
            real_root = os.path.realpath(self.path)
            walked: set[tuple[int, int]] = set()
            for root, dirs, names in os.walk(self.path, onerror=None, followlinks=self.follow_symlinks):
                if self.follow_symlinks:
                    try:
                        st = os.stat(root)
                    except OSError:
                        dirs[:] = []
                        continue
                    if (st.st_dev, st.st_ino) in walked:  # reached again through a link
                        dirs[:] = []
                        continue
                    walked.add((st.st_dev, st.st_ino))
                # Sorted: which path reaches a directory first (following links) is deterministic.
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                rel_root = os.path.relpath(root, self.path)
                for name in names:
                    if name.startswith("."):
                        continue
                    full = os.path.join(root, name)
                    rel = name if rel_root == "." else f"{rel_root}/{name}".replace(os.sep, "/")
                    parts = tuple(rel.split("/"))
                    try:
                        lst = os.lstat(full)
                        st = os.stat(full) if stat.S_ISLNK(lst.st_mode) else lst
                    except OSError:
                        continue
                    if not stat.S_ISREG(st.st_mode):
                        continue
                    target: tuple[str, ...] | str | None = parts
                    if self.follow_symlinks:
                        target = full
                    elif stat.S_ISLNK(lst.st_mode):
                        real = os.path.realpath(full)
                        inside = os.path.commonpath([real_root, real]) == real_root and real != real_root
                        target = tuple(os.path.relpath(real, real_root).split(os.sep)) if inside else None
                    out.append(_File(parts, rel, st.st_size, target))
            out.sort()
            self._files = out
        return self._files

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files())

    def items(self, pos: dict[str, Any] | None) -> Iterator[Item | Problem | Note]:
        done: tuple[str, ...] | None = None
        count = 0
        if pos:
            last = pos.get("file")
            if isinstance(last, bytes):
                last = os.fsdecode(last)
            if not isinstance(last, str):
                raise InputError(f"the checkpoint of {self.path} is malformed; pass --restart to ingest it from the start")
            done = tuple(last.split("/"))
            count = _pos_int(pos, "count", self)
        self.consumed = 0
        for parts, rel, size, target in self.files():
            if done is not None and parts <= done:
                self.consumed += size
                continue
            count += 1
            here = {"file": _fs_name(rel), "count": count}
            full = os.path.join(self.path, *parts)
            self.consumed += size
            if target is None:
                yield Note(full, "symlink", "a symbolic link to a file outside the directory; skipped "
                           "(follow_symlinks, --follow-symlinks, reads it)", here)
                continue
            if size > self.max_bytes:
                yield Note(full, "too-large", f"larger than {self.max_bytes:,} bytes; skipped", here)
                continue
            try:
                data = self._read(target)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    yield Note(full, "symlink", "became a symbolic link after the directory was listed; not followed", here)
                else:
                    yield Problem(full, "unreadable", f"cannot read: {exc.strerror or exc}", here)
                continue
            if b"\x00" in data[:_SNIFF_BYTES]:
                yield Note(full, "binary", "binary file (NUL bytes); skipped", here)
                continue
            text, clean = _decode(data)
            if not clean:
                yield Note(full, "invalid-utf8", "invalid UTF-8 replaced by U+FFFD")
            yield Item(self.key_prefix + rel, text, here, len(data))

    def _read(self, target: tuple[str, ...] | str) -> bytes:
        """The first ``max_bytes + 1`` bytes of a regular file (raises OSError otherwise)."""
        if isinstance(target, str):
            fd = os.open(target, os.O_RDONLY | _O_NONBLOCK | _O_CLOEXEC)
        else:
            fd = _open_beneath(self.path, target)
        with open(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file any more")
            return fh.read(self.max_bytes + 1)

    def describe(self, pos: dict[str, Any] | None) -> str:
        if not pos:
            return "the start"
        name = pos.get("file")
        return f"file {pos.get('count')} ({os.fsdecode(name) if isinstance(name, bytes) else name})"


_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a file swapped for a FIFO does not block the open
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_BENEATH = bool(_O_NOFOLLOW) and os.open in os.supports_dir_fd


def _fs_name(rel: str) -> str | bytes:
    """A relative path as a position holds it: str when it is UTF-8, else its bytes."""
    try:
        rel.encode("utf-8")
        return rel
    except UnicodeEncodeError:
        return os.fsencode(rel)


def _open_beneath(root: str, parts: tuple[str, ...]) -> int:
    """A read-only descriptor of ``root/parts...``, following no symbolic link below ``root``
    (a link raises OSError ELOOP). Where the platform has no ``O_NOFOLLOW`` and ``dir_fd``, the
    path's real path is checked to be under ``root`` instead."""
    if not _BENEATH:
        real_root = os.path.realpath(root)
        real = os.path.realpath(os.path.join(root, *parts))
        if os.path.commonpath([real_root, real]) != real_root:
            raise OSError(errno.ELOOP, "a symbolic link out of the directory")
        return os.open(real, os.O_RDONLY | _O_NONBLOCK | _O_CLOEXEC)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | _O_CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=fd)
            except NotADirectoryError:
                raise OSError(errno.ELOOP, "a symbolic link (or not a directory) in the path") from None
            os.close(fd)
            fd = sub
        return os.open(parts[-1], os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC, dir_fd=fd)
    finally:
        os.close(fd)


def _load_fastwarc() -> Any:
    try:
        from fastwarc import warc
    except ImportError:
        raise InputError(
            "reading WARC files needs the FastWARC library: pip install 'fpstore[ingest]'"
        ) from None
    return warc


class WarcSource(Source):
    """``response`` records with text or HTML payloads of a WARC file (any compression FastWARC reads).

    The key is the record's WARC-Target-URI. HTTP transfer and content encodings (chunked, gzip,
    deflate, brotli) are undone with a bound on the decoded size. Other record types, non-2xx
    responses and non-text payloads are skipped with a note. A truncated record ends the source;
    its checkpoint stays before it.

    Record headers (WARC and HTTP) are read up to :attr:`header_limit` bytes (``max_bytes``, at
    least 32 KiB). A record with a longer header is skipped with a ``too-large`` note in
    uncompressed and per-record gzip files; in other files (one compressed stream for all records)
    it is a ``too-large`` problem that ends the source, and a larger ``max_bytes`` reads it.
    """

    kind = "warc"

    @property
    def header_limit(self) -> int:
        """The longest record header read (FastWARC's ``max_header_len``): ``max_bytes``, and at
        least FastWARC's default of 32 KiB. A longer header is skipped with its record."""
        return max(_MIN_HEADER_LIMIT, self.max_bytes)

    def items(self, pos: dict[str, Any] | None) -> Iterator[Item | Problem | Note]:
        warc = _load_fastwarc()
        with open(self.path, "rb") as fh:
            index, last_offset = 0, None
            # Where the next record starts, when known without reading the one at last_offset:
            # the file's start, or the end of a record skipped by hand.
            next_start: int | None = 0
            if pos:
                index, last_offset = _pos_int(pos, "record", self), _pos_int(pos, "offset", self)
                if "next" in pos:  # the last record done was skipped by hand: resume after it
                    next_start = _pos_int(pos, "next", self)
                    try:
                        found = self._record_end(fh, last_offset)
                    except EOFError:
                        found = (None, None)
                    if found != (next_start, pos.get("id")):
                        raise InputError(
                            f"{self.path} changed since its checkpoint (record {index} is not where it was); "
                            "pass --restart to ingest it again from the start"
                        )
                    fh.seek(next_start)
                    records = self._records(warc, fh, self.header_limit)
                else:
                    next_start = None
                    records = self._resume(warc, fh, index, last_offset, pos.get("id"))
            else:
                records = self._records(warc, fh, self.header_limit)
            while True:
                try:
                    rec = next(records)
                except StopIteration:
                    break
                except (OSError, ValueError) as exc:
                    if "header length" not in str(exc):
                        yield Problem(f"{self.path}: record {index + 1}", "truncated",
                                      f"unreadable WARC data after record {index} ({exc})", None)
                        return
                    # FastWARC cannot go past a header over its limit: find the record's end by
                    # hand and start a new iterator there.
                    try:
                        start = next_start if next_start is not None else self._record_end(fh, last_offset)[0]
                        end, rid = self._record_end(fh, start)
                    except EOFError:
                        yield Problem(f"{self.path}: record {index + 1}", "truncated",
                                      f"truncated WARC record after record {index} (the file ends in it)", None)
                        return
                    index += 1
                    where = f"{self.path}: record {index}" + ("" if start is None else f" at byte {start}")
                    if start is None or end is None:
                        yield Problem(where, "too-large",
                                      f"a WARC record header longer than {self.header_limit:,} bytes, which this file's "
                                      "compression does not let the reader skip alone; pass a --max-bytes larger "
                                      "than the header to read it", None)
                        return
                    yield Note(where, "too-large", f"WARC record header longer than {self.header_limit:,} bytes; skipped",
                               {"record": index, "offset": start, "id": rid, "next": end})
                    last_offset, next_start = start, end
                    fh.seek(end)
                    records = self._records(warc, fh, self.header_limit)
                    continue
                next_start = None
                index += 1
                self.consumed = fh.tell()
                last_offset = rec.stream_pos
                rid = rec.headers.get("WARC-Record-ID")
                here = {"record": index, "offset": rec.stream_pos, "id": rid}
                where = f"{self.path}: record {index} at byte {rec.stream_pos}"
                declared = rec.headers.get("Content-Length")
                if declared is None or not declared.strip().isdigit():
                    yield Problem(where, "truncated", "truncated WARC record (its header has no valid Content-Length)", None)
                    return
                length = rec.content_length  # of the payload, once the HTTP header block is parsed
                if rec.record_type != warc.WarcRecordType.response or length > self.max_bytes:
                    got = rec.reader.consume()
                    if got < length:
                        yield Problem(where, "truncated", f"truncated WARC record ({got:,} of {length:,} bytes)", None)
                        return
                    if length > self.max_bytes:
                        yield Note(where, "too-large", f"payload larger than {self.max_bytes:,} bytes; skipped", here)
                    else:
                        yield Note(where, "not-response", f"{rec.record_type} record; skipped", here)
                    continue
                raw = rec.reader.read(length)
                if len(raw) < length:
                    yield Problem(where, "truncated", f"truncated WARC record ({len(raw):,} of {length:,} payload bytes)", None)
                    return
                yield from self._payload(rec, raw, where, here)
            if last_offset is None:
                if os.fstat(fh.fileno()).st_size > 0:
                    yield Problem(f"{self.path}: record {index + 1}", "truncated",
                                  "no whole WARC record could be read (a truncated record, or not a WARC file)", None)
                return
            problem = self._check_tail(fh, last_offset, index)
            if problem is not None:
                yield problem

    def _payload(self, rec: Any, raw: bytes, where: str, here: dict[str, Any]) -> Iterator[Item | Note]:
        status = rec.http_headers.status_code if rec.is_http else None
        if status is not None and not 200 <= status < 300:
            yield Note(where, "status", f"HTTP status {status}; skipped", here)
            return
        uri = rec.headers.get("WARC-Target-URI")
        if not uri:
            yield Note(where, "no-uri", "response record without WARC-Target-URI; skipped", here)
            return
        ctype = (rec.http_content_type or "").lower() if rec.is_http else ""
        if ctype and not ctype.startswith(_TEXT_TYPES):
            yield Note(where, "not-text", f"{ctype} payload; skipped", here)
            return
        try:
            data = self._undo_encodings(rec, raw)
        except (OSError, ValueError, zlib.error) as exc:
            yield Note(where, "bad-encoding", f"payload does not decode ({exc}); skipped", here)
            return
        if data is None:
            yield Note(where, "too-large", f"decoded payload larger than {self.max_bytes:,} bytes; skipped", here)
            return
        if not ctype and b"\x00" in data[:_SNIFF_BYTES]:
            yield Note(where, "not-text", "binary payload; skipped", here)
            return
        charset = _charset(rec.http_charset if rec.is_http else None)
        try:
            text, clean = _decode(data, charset)
        except (ValueError, LookupError):  # a text codec that cannot decode with errors="replace"
            charset = "utf-8"
            text, clean = _decode(data)
        if not clean:
            yield Note(where, "invalid-utf8", f"invalid {charset} replaced by U+FFFD")
        yield Item(uri, text, here, len(raw))

    def _undo_encodings(self, rec: Any, raw: bytes) -> bytes | None:
        """The payload with chunked transfer coding and gzip/deflate/br content coding undone.

        Returns None when the decoded size exceeds ``max_bytes`` (a compression bomb is read no
        further than that).
        """
        if not rec.is_http:
            return raw
        from fastwarc import stream_io

        headers = rec.http_headers
        data = raw
        te = (headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            data = stream_io.ChunkedReader(io.BytesIO(data)).read(self.max_bytes + 1)
        for coding in reversed([c.strip() for c in (headers.get("Content-Encoding") or "").lower().split(",") if c.strip()]):
            if coding in ("gzip", "x-gzip"):
                reader = stream_io.GzipReader(io.BytesIO(data))
            elif coding == "deflate":
                reader = stream_io.GzipReader(io.BytesIO(data), zlib=True)
            elif coding == "br":
                reader = stream_io.BrotliReader(io.BytesIO(data))
            elif coding == "identity":
                continue
            else:
                raise ValueError(f"unsupported Content-Encoding {coding!r}")
            data = reader.read(self.max_bytes + 1)
        if len(data) > self.max_bytes:
            return None
        return data

    @staticmethod
    def _records(warc: Any, fh: io.BufferedReader, header_limit: int = 32 << 10) -> Iterator[Any]:
        return iter(warc.ArchiveIterator(fh, parse_http=True, auto_decode="none", strict_mode=False,
                                         max_header_len=header_limit))

    def _record_end(self, fh: io.BufferedReader, start: int | None) -> tuple[int | None, str | None]:
        """``(offset where the next record starts, WARC-Record-ID)`` of the record that starts at
        ``start``, read by hand in bounded memory however long its header; ``(None, None)`` when
        that cannot be told: not a record there, or a compression whose records do not start at
        offsets of their own (only uncompressed and per-record gzip files can skip one record).
        Raises EOFError when the file ends inside the record."""
        if start is None:
            return None, None
        try:
            return self._record_end_at(fh, start)
        except (OSError, ValueError, zlib.error):  # a damaged gzip member, an unreadable file
            return None, None

    @staticmethod
    def _record_end_at(fh: io.BufferedReader, start: int) -> tuple[int | None, str | None]:
        fh.seek(start)
        magic = fh.read(5)
        fh.seek(start)
        if magic == b"WARC/":
            got = _skip_warc_record(fh)
            if got is None:
                return None, None
            rid = got
            # Records end with CRLF CRLF; tolerate fewer or more line ends before the next one.
            here = fh.tell()
            peek = fh.read(16)
            rest = peek.lstrip(b"\r\n")
            if rest and not rest.startswith(b"WARC/"[: len(rest)]):
                return None, None
            return here + len(peek) - len(rest), rid
        if magic[:2] == b"\x1f\x8b":
            member = _GzipMember(fh, start)
            reader = io.BufferedReader(member, 1 << 16)
            got = _skip_warc_record(reader)
            if got is None or reader.read(16).strip(b"\r\n") or not member.at_end():
                return None, None  # not exactly one record in this gzip member
            return member.end, got
        return None, None

    def _resume(self, warc: Any, fh: io.BufferedReader, index: int, offset: int, expect_id: object) -> Iterator[Any]:
        """Records after the ``index``-th, whose id must be ``expect_id``: found by seeking to its
        offset where a record starts there (uncompressed or per-record gzip files), else by
        reading ``index`` records from the start."""
        if index == 0:
            return self._records(warc, fh, self.header_limit)
        if self._seekable_at(fh, offset):
            fh.seek(offset)
            records = self._records(warc, fh, self.header_limit)
            try:
                first = next(records, None)
            except (OSError, ValueError):
                first = None
            if first is not None and first.headers.get("WARC-Record-ID") == expect_id:
                first.reader.consume()
                return records
        fh.seek(0)
        records = self._records(warc, fh, self.header_limit)
        rec = None
        for _ in range(index):
            try:
                rec = next(records, None)
            except (OSError, ValueError):
                rec = None
            if rec is None:
                break
            rec.reader.consume()
        rid = None if rec is None else rec.headers.get("WARC-Record-ID")
        if rid != expect_id:
            raise InputError(
                f"{self.path} changed since its checkpoint (record {index} is {rid or 'missing'}, "
                f"the checkpoint says {expect_id}); pass --restart to ingest it again from the start"
            )
        return records

    @staticmethod
    def _seekable_at(fh: io.BufferedReader, offset: int) -> bool:
        """True when a record starts at ``offset``: "WARC/" there, or a gzip member (per-record gzip)."""
        if offset <= 0:
            return False
        fh.seek(offset)
        magic = fh.read(5)
        fh.seek(0)
        return magic == b"WARC/" or magic[:2] == b"\x1f\x8b"

    def _check_tail(self, fh: io.BufferedReader, offset: int, index: int) -> Problem | None:
        """A per-record gzip file cut inside a member's first bytes ends FastWARC's iteration
        silently; so check that the last record's gzip member is followed by nothing."""
        fh.seek(offset)
        if fh.read(2) != b"\x1f\x8b":
            return None  # uncompressed (FastWARC itself reports a cut) or one gzip member for all
        fh.seek(offset)
        d = zlib.decompressobj(wbits=31)
        while not d.eof:  # decompress the last member, 64 KiB of output at a time, and discard it
            if d.unconsumed_tail:
                d.decompress(d.unconsumed_tail, 1 << 16)
                continue
            chunk = fh.read(1 << 16)
            if not chunk:
                return None  # the last record was read whole; only its gzip trailer is short
            d.decompress(chunk, 1 << 16)
        rest = len(d.unused_data) + len(fh.read())
        if rest:
            return Problem(f"{self.path}: record {index + 1}", "truncated",
                           f"truncated WARC record after record {index} ({rest:,} bytes at the end hold no whole record)", None)
        return None

    def describe(self, pos: dict[str, Any] | None) -> str:
        return "the start" if not pos else f"record {pos.get('record')}"


_MIN_HEADER_LIMIT = 32 << 10  # FastWARC's default max_header_len


def _skip_warc_record(fh: Any) -> str | None:
    """Read one WARC record from ``fh`` (at its "WARC/" line) up to the end of its block, holding
    at most 64 KiB of it; its WARC-Record-ID ("" when it has none, or it is on a line over 64 KiB),
    or None when the bytes are not a record with a Content-Length. Raises EOFError when they end
    inside the record."""
    if not fh.readline(64).startswith(b"WARC/"):
        return None
    length, rid = None, ""
    while True:
        line = fh.readline(1 << 16)
        if not line:
            raise EOFError
        if line in (b"\r\n", b"\n"):
            break
        if not line.endswith(b"\n"):  # a long line (the URI): not one we need; read past it
            while line and not line.endswith(b"\n"):
                line = fh.readline(1 << 16)
            if not line:
                raise EOFError
            continue
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            value = value.strip()
            if not value.isdigit():
                return None
            length = int(value)
        elif name == b"warc-record-id":
            rid = value.strip().decode("latin-1")
    if length is None:
        return None
    while length > 0:
        chunk = fh.read(min(length, 1 << 20))
        if not chunk:
            raise EOFError
        length -= len(chunk)
    return rid


class _GzipMember(io.RawIOBase):
    """The decompressed bytes of the one gzip member that starts at ``start`` in ``fh``; once read
    to its end, ``end`` is the offset just after it (where the next member starts)."""

    def __init__(self, fh: io.BufferedReader, start: int) -> None:
        self._fh = fh
        self._z = zlib.decompressobj(wbits=31)
        self._pos = start  # offset in fh of the next compressed byte to feed
        self.end: int | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        while True:
            if self._z.eof:
                return 0
            data = self._z.unconsumed_tail
            if not data:
                self._fh.seek(self._pos)
                data = self._fh.read(1 << 16)
                if not data:
                    return 0  # a truncated member: at_end() stays False
                self._pos += len(data)
            out = self._z.decompress(data, len(buf))
            if self._z.eof:
                self.end = self._pos - len(self._z.unused_data)
            if out:
                buf[: len(out)] = out
                return len(out)

    def at_end(self) -> bool:
        """True when the member was read to its end."""
        while self.end is None and self.readinto(bytearray(1 << 16)):
            pass
        return self.end is not None


class SampleSource(Source):
    """The sample corpus of real text found on this machine (:mod:`fpstore.admin.samples`)."""

    kind = "sample"

    def __init__(self, path: str = "sample", *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        super().__init__(path, max_bytes=max_bytes)
        from fpstore.admin.samples import sample_corpus

        self._docs = list(sample_corpus())

    @property
    def name(self) -> str:
        return "ingest:sample"

    @property
    def size(self) -> int:
        return sum(len(t) for _, t in self._docs)

    def items(self, pos: dict[str, Any] | None) -> Iterator[Item | Problem | Note]:
        start = _pos_int(pos, "index", self) if pos else 0
        self.consumed = sum(len(t) for _, t in self._docs[:start])
        for i in range(start, len(self._docs)):
            name, text = self._docs[i]
            self.consumed += len(text)
            yield Item(name, text, {"index": i + 1, "name": name}, len(text))

    def describe(self, pos: dict[str, Any] | None) -> str:
        return "the start" if not pos else f"document {pos.get('index')}"


def _check_key(src: Source, item: Item) -> Item | Problem:
    """``item``, or a ``too-large`` problem when its key is longer than the store accepts
    (:data:`fpstore.limits.MAX_KEY_BYTES`, measured as the store encodes the key): one such record
    must not fail its whole batch."""
    key = item.key
    n = len(key) if isinstance(key, (bytes, bytearray)) else len(key) if key.isascii() else len(key.encode("utf-8", "surrogatepass"))
    if n <= MAX_KEY_BYTES:
        return item
    return Problem(f"{src.path}: {src.describe(item.pos)}", "too-large",
                   f"key of {n:,} bytes is longer than a store accepts ({MAX_KEY_BYTES:,} bytes); skipped", item.pos)


def _pos_int(pos: dict[str, Any], field_name: str, src: Source) -> int:
    value = pos.get(field_name) if isinstance(pos, dict) else None
    if not isinstance(value, int) or value < 0:
        raise InputError(f"the checkpoint of {src.path} is malformed (field {field_name!r}); pass --restart to ingest it from the start")
    return value


def _json_type(value: object) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", float: "a number", type(None): "null"}.get(
        type(value), type(value).__name__
    )


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

    ``options``: ``key_field``/``text_field`` (JSONL), ``key_prefix`` and ``follow_symlinks``
    (directory), ``max_bytes``.
    """
    if kind == "auto":
        kind = detect_kind(path)
    max_bytes = options.get("max_bytes", DEFAULT_MAX_BYTES)
    if kind != "dir" and not os.path.isfile(path):
        raise InputError(f"{path}: no such file" if not os.path.exists(path) else f"{path} is not a file")
    if kind == "dir" and not os.path.isdir(path):
        raise InputError(f"{path} is not a directory")
    if kind == "jsonl":
        return JsonlSource(path, key_field=options.get("key_field", "id"), text_field=options.get("text_field", "text"), max_bytes=max_bytes)
    if kind == "dir":
        return DirectorySource(path, key_prefix=options.get("key_prefix", ""), max_bytes=max_bytes,
                               follow_symlinks=bool(options.get("follow_symlinks", False)))
    if kind == "warc":
        _load_fastwarc()
        return WarcSource(path, max_bytes=max_bytes)
    raise InputError(f"unknown source format {kind!r} (expected auto, jsonl, dir or warc)")


# -- the driver ---------------------------------------------------------------------------------------


@dataclass
class SourceResult:
    """What one source's ingest did."""

    path: str
    kind: str
    resumed_from: str
    added: int = 0
    batches: int = 0
    problems: dict[str, int] = field(default_factory=dict)
    notes: dict[str, int] = field(default_factory=dict)
    position: dict[str, Any] | None = None
    done: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "resumed_from": self.resumed_from,
            "added": self.added,
            "batches": self.batches,
            "problems": dict(self.problems),
            "notes": dict(self.notes),
            "position": self.position,
            "done": self.done,
        }


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
    progress: Callable[[int, int], None] | None = None,
) -> IngestResult:
    """Read ``sources`` into ``store`` in batches, each committed with its source's checkpoint.

    ``on_error="skip"`` reports bad input through ``report`` and goes on; ``"stop"`` commits the
    documents before it and stops (``result.stopped_at``). Setting ``stop`` makes the ingest
    commit what it has read and return (``result.interrupted``). ``restart`` ignores the stored
    checkpoints. ``progress(docs_added, bytes_read)`` is called after each batch and every few
    hundred documents.
    """
    if on_error not in ("skip", "stop"):
        raise InputError(f"on_error must be 'skip' or 'stop', got {on_error!r}")
    if batch_size < 1:
        raise InputError(f"batch size must be >= 1, got {batch_size}")
    stop = stop or threading.Event()
    result = IngestResult()
    t0 = time.monotonic()
    done_bytes = 0  # bytes of sources finished before the current one
    total_added = 0

    for src in sources:
        pos = None if restart else store.checkpoint(src.name)
        if pos is not None and not isinstance(pos, dict):
            raise InputError(f"the checkpoint of {src.path} is malformed; pass --restart to ingest it from the start")
        res = SourceResult(src.path, src.kind, src.describe(pos), position=pos)
        result.sources.append(res)
        keys: list[str] = []
        texts: list[str] = []
        pending_bytes = 0
        last_pos = pos
        committed_pos = pos

        def flush() -> None:
            nonlocal keys, texts, pending_bytes, committed_pos, total_added
            if not keys and last_pos == committed_pos:
                return
            store.add_many(keys, texts=texts, checkpoint=(src.name, last_pos))
            res.added += len(keys)
            total_added += len(keys)
            res.batches += 1
            committed_pos = last_pos
            res.position = last_pos
            keys, texts, pending_bytes = [], [], 0
            if progress is not None:
                progress(total_added, done_bytes + src.consumed)

        n_seen = 0
        for ev in src.items(pos):
            if isinstance(ev, Item):
                ev = _check_key(src, ev)
            if isinstance(ev, Note):
                res.notes[ev.kind] = res.notes.get(ev.kind, 0) + 1
                if report is not None:
                    report(ev)
                if ev.pos is not None:
                    last_pos = ev.pos
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
                last_pos = ev.pos
            else:
                keys.append(ev.key)
                texts.append(ev.text)
                pending_bytes += ev.nbytes
                last_pos = ev.pos
                if len(keys) >= batch_size or pending_bytes >= batch_bytes:
                    flush()
            n_seen += 1
            if stop.is_set():
                flush()
                result.interrupted = True
                result.seconds = time.monotonic() - t0
                return result
            if progress is not None and n_seen % 256 == 0:
                progress(total_added + len(keys), done_bytes + src.consumed)
        else:
            res.done = True
        flush()
        if res.problems.get("truncated"):
            res.done = False
        done_bytes += src.size
        if progress is not None:
            progress(total_added, done_bytes)
    result.seconds = time.monotonic() - t0
    return result

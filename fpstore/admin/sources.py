"""The sources :mod:`fpstore.admin.ingest` reads: what they yield (:class:`Item`, :class:`Problem`,
:class:`Note`), the :class:`Source` base, JSON Lines files, directories of text files and the sample
corpus. WARC files are :mod:`fpstore.admin.warc`'s; positions are described in
:mod:`fpstore.admin.ingest`.
"""

from __future__ import annotations

import codecs
import errno
import fnmatch
import hashlib
import io
import json
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from fpstore.errors import InputError
from fpstore.limits import MAX_CHECKPOINT_NAME_BYTES, MAX_KEY_BYTES

DEFAULT_MAX_BYTES = 16 << 20  # larger documents (lines, files, payloads) are skipped with a note
_HEAD_BYTES = 4096  # bytes of a JSONL file hashed into its checkpoint, to notice a replaced file
SNIFF_BYTES = 8192  # a NUL byte in a file's first 8 KiB makes it binary (as git and grep decide)

JSONL_SUFFIXES = (".jsonl", ".ndjson", ".jsonlines")
WARC_SUFFIXES = (".warc", ".warc.gz", ".warc.lz4", ".warc.zst")


# -- what sources yield ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One document: its key, its text, and the source position just after it.

    An image source's item carries the encoded image in ``image`` (``text`` is then ""), and in
    ``where`` the place it was read from (a file path, ``path: record n``), for the note that
    names it when it does not decode.
    """

    key: str
    text: str
    pos: dict[str, Any]
    nbytes: int
    image: bytes | None = None
    where: str = ""


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
    kind: str  # "binary", "not-text", "invalid-utf8", "status", "too-large", "symlink", "not-image", "bad-image", ...
    message: str
    pos: dict[str, Any] | None = None

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


#: Text codecs Python knows that are not character sets: ``undefined`` fails on every input,
#: ``idna`` and ``punycode`` refuse ``errors="replace"``, the escape codecs are Python syntax.
_NOT_CHARSETS = frozenset({"undefined", "idna", "punycode", "unicode-escape", "raw-unicode-escape"})


def charset_codec(declared: str | None) -> str:
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


def decode(data: bytes, encoding: str = "utf-8") -> tuple[str, bool]:
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

    def options(self) -> dict[str, Any]:
        """The options that decide which documents this source yields and under which keys,
        recorded with its checkpoint (``max_bytes`` is not one: a rerun may raise it to read a
        record it skipped)."""
        return {}

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

    def options(self) -> dict[str, Any]:
        return {"key_field": self.key_field, "text_field": self.text_field}

    def items(self, pos: dict[str, Any] | None) -> Iterator[Item | Problem | Note]:
        with open(self.path, "rb") as fh:
            first = fh.read(_HEAD_BYTES)  # the head digest of a position hashes these
            line_no, offset = 0, 0
            if pos:
                line_no, offset = pos_int(pos, "line", self), pos_int(pos, "offset", self)
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
                text, clean = decode(raw)
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
                    yield Problem(
                        where, "bad-field", f"field {self.key_field!r} is {_json_type(key)}, expected a string or an integer", here
                    )
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

    def __init__(
        self,
        path: str,
        *,
        key_prefix: str = "",
        max_bytes: int = DEFAULT_MAX_BYTES,
        follow_symlinks: bool = False,
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
    ) -> None:
        super().__init__(path, max_bytes=max_bytes)
        self.key_prefix = key_prefix
        self.follow_symlinks = follow_symlinks
        #: Glob patterns (``fnmatch``, ``*`` crossing ``/``) on the path relative to the directory:
        #: a file is read when it matches some ``include`` (or there is none) and no ``exclude``.
        self.include, self.exclude = list(include), list(exclude)
        self._files: list[_File] | None = None

    def options(self) -> dict[str, Any]:
        return {"key_prefix": self.key_prefix, "follow_symlinks": self.follow_symlinks, "include": self.include, "exclude": self.exclude}

    def wanted(self, rel: str) -> bool:
        """Whether the file at relative path ``rel`` passes ``include`` and ``exclude``."""
        if self.include and not any(fnmatch.fnmatchcase(rel, g) for g in self.include):
            return False
        return not any(fnmatch.fnmatchcase(rel, g) for g in self.exclude)

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
                    if not self.wanted(rel):
                        continue
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
            count = pos_int(pos, "count", self)
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
                yield Note(
                    full,
                    "symlink",
                    "a symbolic link to a file outside the directory; skipped (follow_symlinks, --follow-symlinks, reads it)",
                    here,
                )
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
            yield from self._document(full, rel, data, here)

    def _document(self, full: str, rel: str, data: bytes, here: dict[str, Any]) -> Iterator[Item | Note]:
        """The document of one file's bytes (a text file), or the note that skips it."""
        if b"\x00" in data[:SNIFF_BYTES]:
            hint = " (ingest --images reads images into an image store)" if image_format(data) else ""
            yield Note(full, "binary", f"binary file (NUL bytes); skipped{hint}", here)
            return
        text, clean = decode(data)
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


class ImageDirectorySource(DirectorySource):
    """The image files under a directory (``ingest --images``), in the walk order and with the keys
    of :class:`DirectorySource`. A file is an image when its first bytes are those of an image
    format (:func:`image_format`) or its name ends in one's extension (:data:`IMAGE_SUFFIXES`);
    every other file is skipped with a ``not-image`` note. The bytes are decoded later, in the
    ingest's batches: one that does not decode is skipped with a ``bad-image`` note."""

    def options(self) -> dict[str, Any]:
        return {**super().options(), "images": True}

    def _document(self, full: str, rel: str, data: bytes, here: dict[str, Any]) -> Iterator[Item | Note]:
        if not image_format(data) and not rel.lower().endswith(IMAGE_SUFFIXES):
            yield Note(full, "not-image", "not an image file (no image format's signature or extension); skipped", here)
            return
        yield Item(self.key_prefix + rel, "", here, len(data), image=data, where=full)


#: Names of image files read by ``ingest --images`` even when their first bytes are not known.
IMAGE_SUFFIXES = (
    ".jpg",
    ".jpeg",
    ".jpe",
    ".jfif",
    ".png",
    ".apng",
    ".gif",
    ".webp",
    ".bmp",
    ".dib",
    ".tif",
    ".tiff",
    ".ico",
    ".avif",
)


def image_format(data: bytes) -> str | None:
    """The image format whose signature ``data`` starts with (``"jpeg"``, ``"png"``, ``"gif"``,
    ``"webp"``, ``"tiff"``, ``"bmp"``, ``"ico"``, ``"avif"``), or None."""
    head = data[:32]
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "gif"
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "webp"
    if head.startswith((b"II*\x00", b"MM\x00*")):
        return "tiff"
    if head.startswith(b"BM") and head[6:10] == b"\x00\x00\x00\x00" and len(head) >= 26:
        return "bmp"  # the four reserved bytes are zero: "BM" alone starts too many texts
    if head.startswith(b"\x00\x00\x01\x00") and len(head) >= 6 and head[4:6] != b"\x00\x00":
        return "ico"
    if head[4:12] in (b"ftypavif", b"ftypavis"):
        return "avif"
    return None


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
        start = pos_int(pos, "index", self) if pos else 0
        self.consumed = sum(len(t) for _, t in self._docs[:start])
        for i in range(start, len(self._docs)):
            name, text = self._docs[i]
            self.consumed += len(text)
            yield Item(name, text, {"index": i + 1, "name": name}, len(text))

    def describe(self, pos: dict[str, Any] | None) -> str:
        return "the start" if not pos else f"document {pos.get('index')}"


def check_key(src: Source, item: Item) -> Item | Problem:
    """``item``, or a ``too-large`` problem when its key is longer than the store accepts
    (:data:`fpstore.limits.MAX_KEY_BYTES`, measured as the store encodes the key): one such record
    must not fail its whole batch."""
    key = item.key
    n = len(key) if isinstance(key, (bytes, bytearray)) else len(key) if key.isascii() else len(key.encode("utf-8", "surrogatepass"))
    if n <= MAX_KEY_BYTES:
        return item
    return Problem(
        f"{src.path}: {src.describe(item.pos)}",
        "too-large",
        f"key of {n:,} bytes is longer than a store accepts ({MAX_KEY_BYTES:,} bytes); skipped",
        item.pos,
    )


def pos_int(pos: dict[str, Any], field_name: str, src: Source) -> int:
    value = pos.get(field_name) if isinstance(pos, dict) else None
    if not isinstance(value, int) or value < 0:
        raise InputError(f"the checkpoint of {src.path} is malformed (field {field_name!r}); pass --restart to ingest it from the start")
    return value


def _json_type(value: object) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", float: "a number", type(None): "null"}.get(
        type(value), type(value).__name__
    )

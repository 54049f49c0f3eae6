"""WARC files for :mod:`fpstore.admin.ingest`: ``response`` records with text or HTML payloads, read
with FastWARC (``pip install 'fpstore[ingest]'``, imported only when a WARC file is read), resumable
by record (see the positions in :mod:`fpstore.admin.ingest`).
"""

from __future__ import annotations

import io
import os
import zlib
from collections.abc import Iterator
from typing import Any

from fpstore.admin.sources import DEFAULT_MAX_BYTES, SNIFF_BYTES, Item, Note, Problem, Source, charset_codec, decode, image_format, pos_int
from fpstore.errors import InputError

_TEXT_TYPES = ("text/", "application/xhtml+xml", "application/xml", "application/json")


def load_fastwarc() -> Any:
    try:
        from fastwarc import warc
    except ImportError:
        raise InputError("reading WARC files needs the FastWARC library: pip install 'fpstore[ingest]'") from None
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

    With ``images=True`` (``ingest --images``) it reads the ``image/*`` responses instead (and
    responses without a content type whose payload starts with an image format's signature); the
    other payloads, and SVG (a vector format), are skipped with a ``not-image`` note. The images
    are decoded later, in the ingest's batches.
    """

    kind = "warc"

    def __init__(self, path: str, *, max_bytes: int = DEFAULT_MAX_BYTES, images: bool = False) -> None:
        super().__init__(path, max_bytes=max_bytes)
        self.images = images

    def options(self) -> dict[str, Any]:
        return {"images": True} if self.images else {}

    @property
    def header_limit(self) -> int:
        """The longest record header read (FastWARC's ``max_header_len``): ``max_bytes``, and at
        least FastWARC's default of 32 KiB. A longer header is skipped with its record."""
        return max(_MIN_HEADER_LIMIT, self.max_bytes)

    def items(self, pos: dict[str, Any] | None) -> Iterator[Item | Problem | Note]:
        warc = load_fastwarc()
        with open(self.path, "rb") as fh:
            index, last_offset = 0, None
            # Where the next record starts, when known without reading the one at last_offset:
            # the file's start, or the end of a record skipped by hand.
            next_start: int | None = 0
            if pos:
                index, last_offset = pos_int(pos, "record", self), pos_int(pos, "offset", self)
                if "next" in pos:  # the last record done was skipped by hand: resume after it
                    next_start = pos_int(pos, "next", self)
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
                        yield Problem(
                            f"{self.path}: record {index + 1}", "truncated", f"unreadable WARC data after record {index} ({exc})", None
                        )
                        return
                    # FastWARC cannot go past a header over its limit: find the record's end by
                    # hand and start a new iterator there.
                    try:
                        start = next_start if next_start is not None else self._record_end(fh, last_offset)[0]
                        end, rid = self._record_end(fh, start)
                    except EOFError:
                        yield Problem(
                            f"{self.path}: record {index + 1}",
                            "truncated",
                            f"truncated WARC record after record {index} (the file ends in it)",
                            None,
                        )
                        return
                    index += 1
                    where = f"{self.path}: record {index}" + ("" if start is None else f" at byte {start}")
                    if start is None or end is None:
                        yield Problem(
                            where,
                            "too-large",
                            f"a WARC record header longer than {self.header_limit:,} bytes, which this file's "
                            "compression does not let the reader skip alone; pass a --max-bytes larger "
                            "than the header to read it",
                            None,
                        )
                        return
                    yield Note(
                        where,
                        "too-large",
                        f"WARC record header longer than {self.header_limit:,} bytes; skipped",
                        {"record": index, "offset": start, "id": rid, "next": end},
                    )
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
                    yield Problem(
                        f"{self.path}: record {index + 1}",
                        "truncated",
                        "no whole WARC record could be read (a truncated record, or not a WARC file)",
                        None,
                    )
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
        if self.images:
            yield from self._image(rec, raw, ctype, uri, where, here)
            return
        if ctype and not ctype.startswith(_TEXT_TYPES):
            hint = " (ingest --images reads images into an image store)" if ctype.startswith("image/") else ""
            yield Note(where, "not-text", f"{ctype} payload; skipped{hint}", here)
            return
        data = self._decoded(rec, raw, where, here)
        if isinstance(data, Note):
            yield data
            return
        if not ctype and b"\x00" in data[:SNIFF_BYTES]:
            yield Note(where, "not-text", "binary payload; skipped", here)
            return
        charset = charset_codec(rec.http_charset if rec.is_http else None)
        try:
            text, clean = decode(data, charset)
        except (ValueError, LookupError):  # a text codec that cannot decode with errors="replace"
            charset = "utf-8"
            text, clean = decode(data)
        if not clean:
            yield Note(where, "invalid-utf8", f"invalid {charset} replaced by U+FFFD")
        yield Item(uri, text, here, len(raw))

    def _image(self, rec: Any, raw: bytes, ctype: str, uri: str, where: str, here: dict[str, Any]) -> Iterator[Item | Note]:
        """The image of a response (``images=True``), or the note that skips its payload."""
        if ctype and not ctype.startswith("image/"):
            yield Note(where, "not-image", f"{ctype} payload; skipped", here)
            return
        if ctype.startswith("image/svg"):
            yield Note(where, "not-image", f"{ctype} payload (a vector format); skipped", here)
            return
        data = self._decoded(rec, raw, where, here)
        if isinstance(data, Note):
            yield data
            return
        if not ctype and not image_format(data):
            yield Note(where, "not-image", "payload without a content type or an image format's signature; skipped", here)
            return
        yield Item(uri, "", here, len(raw), image=data, where=f"{where} ({uri})")

    def _decoded(self, rec: Any, raw: bytes, where: str, here: dict[str, Any]) -> bytes | Note:
        """The payload with its encodings undone, or the note that skips it."""
        try:
            data = self._undo_encodings(rec, raw)
        except (OSError, ValueError, zlib.error) as exc:
            return Note(where, "bad-encoding", f"payload does not decode ({exc}); skipped", here)
        if data is None:
            return Note(where, "too-large", f"decoded payload larger than {self.max_bytes:,} bytes; skipped", here)
        return data

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
            reader: stream_io.WarcReader
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
        return iter(warc.ArchiveIterator(fh, parse_http=True, auto_decode="none", strict_mode=False, max_header_len=header_limit))

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
            return Problem(
                f"{self.path}: record {index + 1}",
                "truncated",
                f"truncated WARC record after record {index} ({rest:,} bytes at the end hold no whole record)",
                None,
            )
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

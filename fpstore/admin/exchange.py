"""Export a store to a portable stream, and import one: the ``fpstore-export`` format, version 3.

The stream is one zstd frame (with its content checksum) holding a sequence of msgpack objects:

1. a header map: ``magic`` ("fpstore-export"), ``version`` (3, or 2), ``fpstore`` (the exporting
   version), ``created`` (Unix seconds), ``pipeline`` (the pipeline config), ``pipeline_id``,
   ``idf`` (the idf table's canonical bytes, or nil), ``design`` (the table design config), ``k``
   (the store's default radius), ``count`` (documents when the export began: an estimate) and
   (version 3) ``threshold`` (the verification threshold the store's header records, or nil);
2. the records, each an array ``[key, fingerprint, content_hash, flags, canonical]``:
   ``key`` a str, a bin (a bytes key), a uint64 (an int key) or ext type 1 (a str key holding lone surrogates, as UTF-8
   with surrogates passed); ``fingerprint`` a uint64; ``content_hash`` a 16-byte bin or nil;
   ``flags`` bit 0 = short text (matched only by content hash), bit 1 = added from text;
   ``canonical`` the key of the document this one is a variant of, or nil; (version 3) a sixth
   element ``sketch``: the document's verification sketch, a bin of W × 8 bytes (W = the header
   pipeline's ``sketch_bits`` / 64 little-endian uint64 words), nil when the pipeline has none;
3. (version 2) one map per checkpoint of the store, ``{"checkpoint": name, "position": position}``;
4. a trailer map: ``end`` (true), ``count`` (records), ``digest``: BLAKE2b-128 of the msgpack bytes
   of all records and checkpoint maps, in order, and (version 2) ``checkpoints``, their count.

Version 1 streams (no checkpoints) and version 2 streams (no sketches) still import. A store
without a sketch is exported as version 2 (what older fpstore reads); a store with one as version
3. A stream of version 1 or 2 whose pipeline has ``sketch_bits`` (an earlier fpstore exported a
store with a sketch without its sketches) is refused when its header is read: a store of that
pipeline needs every document's sketch.

``docs/cli.md`` documents every field and the compatibility policy. A stream is untrusted input:
decompression is bounded (window size, buffer per object), every field is type- and range-checked,
the counts and the digest must agree, and nothing is half-written: an import into a new store
builds it beside the target and renames it into place only once the whole stream checked out; an
import into an existing store checks the whole stream before its first write.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import IO, Any

import msgpack
import numpy as np
import zstandard

from fpstore._version import __version__
from fpstore.errors import DesignError, FormatError, InputError, PipelineMismatchError
from fpstore.fingerprint.kinds import AnyPipeline, pipeline_from_config
from fpstore.fingerprint.pipeline import Fingerprints, IdfTable, Pipeline
from fpstore.index.design import Design
from fpstore.limits import MAX_CHECKPOINT_BYTES, MAX_CHECKPOINT_NAME_BYTES
from fpstore.store.documents import documents_with_sketches, sketch_words
from fpstore.store.inputs import check_pipeline_id
from fpstore.store.keys import Key, typed_key

__all__ = ["EXPORT_MAGIC", "EXPORT_VERSION", "ImportResult", "StreamHeader", "export_store", "import_stream", "read_stream"]

EXPORT_MAGIC = "fpstore-export"
EXPORT_VERSION = 3
#: The version written for a store without a sketch: its streams need nothing of version 3, and
#: fpstore releases that predate sketches read them.
EXPORT_VERSION_NO_SKETCH = 2
# The stream's flag bits (see the module docstring): part of the export format, so defined here even
# though the store's record flags (fpstore.store.keys) have the same values today.
FLAG_SHORT, FLAG_TEXT = 1, 2
EXT_SURROGATE_STR = 1

_MAX_WINDOW = 1 << 27  # zstd decoder memory bound (128 MiB window); the writer uses far less
_MAX_OBJECT = 64 << 20  # one msgpack object (the header, with its idf table) at most 64 MiB
_MAX_KEY = 1 << 20
_READ_CHUNK = 1 << 16
_HEADER_FIELDS = {"magic", "version", "fpstore", "created", "pipeline", "pipeline_id", "idf", "design", "k", "count"}
_HEADER_FIELDS_V3 = _HEADER_FIELDS | {"threshold"}


def _encode_key(key: Key) -> Any:
    if isinstance(key, (bytes, int)):
        return key
    try:
        key.encode("utf-8")
        return key
    except UnicodeEncodeError:
        return msgpack.ExtType(EXT_SURROGATE_STR, key.encode("utf-8", "surrogatepass"))


def _decode_key(value: Any, what: str) -> Key:
    if isinstance(value, (str, bytes)):
        if len(value) > _MAX_KEY:
            raise FormatError(f"{what} is longer than {_MAX_KEY:,}")
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value < 1 << 64:
            raise FormatError(f"{what} is an integer outside 0..2**64-1")
        return value
    if isinstance(value, msgpack.ExtType) and value.code == EXT_SURROGATE_STR:
        try:
            return value.data.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError as exc:
            raise FormatError(f"{what} (ext type 1) is not UTF-8: {exc}") from None
    raise FormatError(f"{what} must be a str, a bin, a uint64 or ext type 1, got {type(value).__name__}")


# -- export --------------------------------------------------------------------------------------------


def export_store(store: Any, out: IO[bytes], *, level: int = 3, progress: Callable[[int, int | None], None] | None = None) -> int:
    """Write every document and checkpoint of ``store`` to ``out`` as an ``fpstore-export`` stream;
    returns the count of documents.

    Documents are read as :meth:`Store.documents` reads them (in id order, in batches, each with
    its sketch from the same snapshot: :func:`fpstore.store.documents.documents_with_sketches`),
    so a writer may go on meanwhile: a document deleted during the export may or may not
    be in it, one added may or may not be in it, and the header's ``count`` (taken at the start) is then only an estimate;
    the trailer's count is exact. ``out`` is not closed. ``progress(documents written, documents
    in the store)`` is called every 10,000 documents and at the end.
    """
    cctx = zstandard.ZstdCompressor(level=level, write_checksum=True)
    digest = hashlib.blake2b(digest_size=16)
    packer = msgpack.Packer(use_bin_type=True)
    idf = store.pipeline.idf.to_bytes() if store.pipeline.idf is not None else None
    sketched = sketch_words(store) > 0
    header = {
        "magic": EXPORT_MAGIC,
        "version": EXPORT_VERSION if sketched else EXPORT_VERSION_NO_SKETCH,
        "fpstore": __version__,
        "created": int(time.time()),
        "pipeline": store.pipeline.config,
        "pipeline_id": store.pipeline.id,
        "idf": idf,
        "design": store.design.config(),
        "k": store.k,
        "count": len(store),
    }
    if sketched:
        # The recorded threshold, not one this open may override for its own calls.
        header["threshold"] = store.header.get("threshold")
    # Taken before the documents are read: a checkpoint never claims more than the stream holds.
    checkpoints = store.checkpoints()
    n = 0
    with cctx.stream_writer(out, closefd=False, write_return_read=True) as zw:
        zw.write(packer.pack(header))
        for doc, sketch in documents_with_sketches(store):
            flags = (FLAG_SHORT if doc.short else 0) | (FLAG_TEXT if doc.content_hash is not None else 0)
            canonical = None if doc.canonical is None else _encode_key(doc.canonical)
            fields = [_encode_key(doc.key), doc.fingerprint, doc.content_hash, flags, canonical]
            if sketched:
                assert sketch is not None  # a store with a sketch keeps one for every document
                fields.append(sketch.astype("<u8").tobytes())
            rec = packer.pack(fields)
            digest.update(rec)
            zw.write(rec)
            n += 1
            if progress is not None and n % 10000 == 0:
                progress(n, header["count"])
        for name, position in sorted(checkpoints.items()):
            obj = packer.pack({"checkpoint": name, "position": position})
            digest.update(obj)
            zw.write(obj)
        zw.write(packer.pack({"end": True, "count": n, "digest": digest.digest(), "checkpoints": len(checkpoints)}))
        zw.flush(zstandard.FLUSH_FRAME)
    return n


# -- reading a stream ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamHeader:
    """The checked header of a stream: the pipeline and design it was made with, its count, and
    the verification threshold its store recorded (None: none, or a stream before version 3)."""

    pipeline: AnyPipeline
    design: Design
    k: int
    count: int
    raw: dict[str, Any]
    threshold: float | None = None


@dataclass(frozen=True)
class StreamRecord:
    key: Key
    fingerprint: int
    content_hash: bytes | None
    flags: int
    canonical: Key | None
    #: The verification sketch, uint64[W] (version 3 streams of a pipeline with ``sketch_bits``).
    sketch: np.ndarray | None = None


def _objects(fh: IO[bytes]) -> Iterator[Any]:
    """The msgpack objects of a zstd stream, with bounded memory; then a check for trailing bytes."""
    dctx = zstandard.ZstdDecompressor(max_window_size=_MAX_WINDOW)
    unpacker = msgpack.Unpacker(
        raw=False,
        strict_map_key=True,
        max_buffer_size=_MAX_OBJECT,
        max_str_len=_MAX_KEY,
        max_bin_len=_MAX_OBJECT,
        max_array_len=1 << 16,
        max_map_len=1 << 16,  # a checkpoint position may be a map as large as MAX_CHECKPOINT_BYTES allows
        max_ext_len=_MAX_KEY,
    )
    try:
        with dctx.stream_reader(fh, read_size=_READ_CHUNK, read_across_frames=False, closefd=False) as zr:
            while True:
                chunk = zr.read(_READ_CHUNK)
                if not chunk:
                    break
                unpacker.feed(chunk)
                yield from unpacker
    except zstandard.ZstdError as exc:
        raise FormatError(f"the stream does not decompress: {exc}") from None
    except msgpack.exceptions.BufferFull:
        raise FormatError(f"the stream holds an object larger than {_MAX_OBJECT:,} bytes") from None
    except (msgpack.exceptions.ExtraData, msgpack.exceptions.FormatError, msgpack.exceptions.StackError, ValueError) as exc:
        raise FormatError(f"the stream holds malformed msgpack: {exc}") from None


class StreamRecords:
    """The checked records of a stream, in order; ``digest`` is set once the trailer checked out,
    and ``checkpoints`` (name → position) holds the stream's checkpoints by then.

    Iterating raises :class:`FormatError` on any malformed record, a count or digest that does not
    agree, a missing trailer (a truncated stream) or bytes after the trailer.
    """

    def __init__(self, objects: Iterator[Any], header: StreamHeader, fh: IO[bytes]) -> None:
        self._objects = objects
        self._header = header
        self._fh = fh
        self.digest: bytes | None = None
        self.checkpoints: dict[str, Any] = {}

    def __iter__(self) -> Iterator[StreamRecord]:
        digest = hashlib.blake2b(digest_size=16)
        packer = msgpack.Packer(use_bin_type=True)
        count = self._header.count
        version = self._header.raw["version"]
        words = self._header.pipeline.sketch_bits // 64
        n = 0
        for obj in self._objects:
            if isinstance(obj, dict) and version >= 2 and "checkpoint" in obj:
                name, position = _check_checkpoint(obj, len(self.checkpoints) + 1)
                if name in self.checkpoints:
                    raise FormatError(f"the stream holds checkpoint {name!r} twice")
                self.checkpoints[name] = position
                digest.update(packer.pack(obj))
                continue
            if isinstance(obj, dict):
                _check_trailer(obj, n, len(self.checkpoints), digest.digest(), version)
                for _extra in self._objects:
                    raise FormatError("the stream has data after its trailer")
                if self._fh.read(1):
                    raise FormatError("the file has bytes after the stream's zstd frame")
                self.digest = digest.digest()
                return
            if self.checkpoints:
                raise FormatError("the stream has a record after its checkpoints")
            n += 1
            rec = _check_record(obj, n, version, words)
            digest.update(packer.pack(obj))
            yield rec
        raise FormatError(
            f"the stream ends after {n:,} records (its header announced about {count:,}) without its trailer: it is truncated"
        )


def read_stream(fh: IO[bytes]) -> tuple[StreamHeader, StreamRecords]:
    """Check a stream's header; return it with the (lazily checked) records that follow it."""
    objects = _objects(fh)
    try:
        first = next(objects)
    except StopIteration:
        raise FormatError("the stream ends before its header: it is empty or truncated") from None
    header = _check_header(first)
    return header, StreamRecords(objects, header, fh)


def _check_header(obj: Any) -> StreamHeader:
    if not isinstance(obj, dict) or obj.get("magic") != EXPORT_MAGIC:
        raise FormatError("not an fpstore export stream (bad magic)")
    version = obj.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise FormatError(f"the stream's version {version!r} is invalid")
    if version > EXPORT_VERSION:
        raise FormatError(
            f"the stream has format version {version}; this fpstore ({__version__}) reads versions 1..{EXPORT_VERSION}: upgrade fpstore"
        )
    missing = sorted((_HEADER_FIELDS_V3 if version >= 3 else _HEADER_FIELDS) - set(obj))
    if missing:
        raise FormatError(f"the stream header lacks {missing}")
    idf_raw = obj["idf"]
    if idf_raw is not None and not isinstance(idf_raw, bytes):
        raise FormatError("the stream header's idf must be bin or nil")
    idf = IdfTable.from_bytes(idf_raw) if idf_raw is not None else None
    pipeline = pipeline_from_config(obj["pipeline"], idf)
    if pipeline.id != obj["pipeline_id"]:
        raise FormatError(f"the stream header's pipeline id {obj['pipeline_id']!r} does not match its pipeline config ({pipeline.id})")
    if pipeline.sketch_bits and version < 3:
        raise FormatError(
            f"the stream (version {version}) carries no verification sketches, but its pipeline makes {pipeline.sketch_bits}-bit "
            "sketches and a store of that pipeline needs every document's sketch: export the store again with "
            f"fpstore {__version__} or later (stream version 3 carries them)"
        )
    try:
        design = Design.from_config(obj["design"])
    except DesignError as exc:
        raise FormatError(f"the stream header's design is invalid: {exc}") from None
    k, count = obj["k"], obj["count"]
    if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= design.k:
        raise FormatError(f"the stream header's k {k!r} is not in 0..{design.k}")
    if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count < 1 << 48:
        raise FormatError(f"the stream header's count {count!r} is invalid")
    threshold = obj.get("threshold") if version >= 3 else None
    if threshold is not None:
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
            raise FormatError(f"the stream header's threshold {threshold!r} is not a number in [0, 1] or nil")
        if not pipeline.sketch_bits:
            raise FormatError("the stream header has a verification threshold, but its pipeline has no sketch to verify with")
        threshold = float(threshold)
    return StreamHeader(pipeline, design, k, count, obj, threshold)


def _check_record(obj: Any, n: int, version: int, words: int) -> StreamRecord:
    """Record ``n`` of a stream of ``version`` whose pipeline makes sketches of ``words`` uint64
    words (0: none), checked field by field."""
    what = f"record {n:,}"
    size = 6 if version >= 3 else 5
    if not isinstance(obj, list) or len(obj) != size:
        raise FormatError(f"{what} is not a {size}-element array (stream version {version})")
    key, fp, content_hash, flags, canonical = obj[:5]
    key = _decode_key(key, f"{what}'s key")
    if not isinstance(fp, int) or isinstance(fp, bool) or not 0 <= fp < 1 << 64:
        raise FormatError(f"{what}'s fingerprint is not a uint64")
    if content_hash is not None and not (isinstance(content_hash, bytes) and len(content_hash) == 16):
        raise FormatError(f"{what}'s content hash is not 16 bytes or nil")
    if not isinstance(flags, int) or isinstance(flags, bool) or not 0 <= flags <= 3:
        raise FormatError(f"{what}'s flags {flags!r} are not in 0..3")
    if canonical is not None:
        canonical = _decode_key(canonical, f"{what}'s canonical key")
    sketch = None
    if size == 6:
        raw = obj[5]
        if words == 0:
            if raw is not None:
                raise FormatError(f"{what} holds a sketch, but the stream's pipeline has none (its sketch must be nil)")
        elif not (isinstance(raw, bytes) and len(raw) == 8 * words):
            got = f"{len(raw)} bytes" if isinstance(raw, bytes) else type(raw).__name__
            raise FormatError(f"{what}'s sketch must be {8 * words} bytes (the pipeline's {64 * words}-bit sketch), got {got}")
        else:
            sketch = np.frombuffer(raw, dtype="<u8").astype(np.uint64)
    return StreamRecord(key, fp, content_hash, flags, canonical, sketch)


def _check_checkpoint(obj: dict[str, Any], n: int) -> tuple[str, Any]:
    """A checkpoint map, held to the limits a store puts on checkpoints it records."""
    if set(obj) != {"checkpoint", "position"}:
        raise FormatError(f"checkpoint {n:,} of the stream is malformed")
    name = obj["checkpoint"]
    if not isinstance(name, str):
        raise FormatError(f"checkpoint {n:,} of the stream has a name that is not a str")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise FormatError(f"checkpoint {n:,} of the stream has a name that is not valid Unicode") from None
    if size > MAX_CHECKPOINT_NAME_BYTES:
        raise FormatError(f"checkpoint {n:,} of the stream has a name of {size:,} bytes; at most {MAX_CHECKPOINT_NAME_BYTES}")
    if len(msgpack.packb(obj["position"], use_bin_type=True)) > MAX_CHECKPOINT_BYTES:
        raise FormatError(f"checkpoint {name!r} of the stream has a position over {MAX_CHECKPOINT_BYTES:,} bytes")
    return name, obj["position"]


def _check_trailer(obj: dict[str, Any], n: int, checkpoints: int, digest: bytes, version: int) -> None:
    fields = {"end", "count", "digest"} | ({"checkpoints"} if version >= 2 else set())
    if obj.get("end") is not True or set(obj) != fields:
        raise FormatError("the stream's trailer is malformed")
    if obj["count"] != n:
        raise FormatError(f"the stream holds {n:,} records but its trailer says {obj['count']!r}")
    if version >= 2 and obj["checkpoints"] != checkpoints:
        raise FormatError(f"the stream holds {checkpoints:,} checkpoints but its trailer says {obj['checkpoints']!r}")
    if obj["digest"] != digest:
        raise FormatError("the stream's records do not match the trailer's digest: the stream is damaged")


# -- import ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImportResult:
    path: str
    created: bool
    records: int
    pipeline_id: str
    design: str


def _is_store(path: str) -> bool:
    from fpstore.store.storage import DATA_FILE

    return os.path.exists(os.path.join(path, DATA_FILE))


def _sketches(records: list[StreamRecord], words: int) -> np.ndarray | None:
    """The records' sketches, uint64[n, words], for a store that keeps them (``words`` > 0)."""
    if not words:
        return None
    out = np.empty((len(records), words), dtype=np.uint64)
    for i, r in enumerate(records):
        # Checked when the stream was read: a stream whose pipeline has a sketch has one per record
        # (version 3), or was refused at its header (versions 1 and 2).
        assert r.sketch is not None and len(r.sketch) == words
        out[i] = r.sketch
    return out


def _nothing(pipeline_id: str, words: int) -> Fingerprints:
    """An empty batch (for a write of a checkpoint alone), with an empty sketch column when needed."""
    return Fingerprints(np.zeros(0, np.uint64), pipeline_id, sketches=np.zeros((0, words), np.uint64) if words else None)


def _write(
    store: Any, records: list[StreamRecord], pipeline_id: str, canonicals: list[Key | None], checkpoint: tuple[str, Any] | None
) -> None:
    """One ``add_many`` of records that all carry a content hash, or all lack one (a
    :class:`Fingerprints` batch holds content hashes for all of its documents or for none), with
    their sketches when the store keeps them."""
    values = np.fromiter((r.fingerprint for r in records), dtype=np.uint64, count=len(records))
    short = np.fromiter((bool(r.flags & FLAG_SHORT) for r in records), dtype=bool, count=len(records))
    hashes = None
    if records and records[0].content_hash is not None:
        # The ignore: every record here has a content hash when the first has (see above); the field's type cannot say so.
        hashes = np.frombuffer(b"".join(r.content_hash for r in records), dtype=">u8").reshape(-1, 2).astype(np.uint64)  # type: ignore[misc]
    fps = Fingerprints(values, pipeline_id, None, short, hashes, _sketches(records, sketch_words(store)))
    store.add_many([r.key for r in records], fingerprints=fps, checkpoint=checkpoint, canonicals=canonicals)


def _add_batch(store: Any, records: list[StreamRecord], pipeline_id: str, checkpoint: tuple[str, Any] | None) -> None:
    """Add records with their fingerprints, content hashes, short flags and canonical keys.

    Records with and without a content hash go in separate writes; a canonical key that names a
    record of the other write, not yet stored, is set by a last write of those records (unchanged
    documents keep their ids, so only their canonical changes). The checkpoint rides the last write.
    """
    groups = [g for g in ([r for r in records if r.content_hash is not None], [r for r in records if r.content_hash is None]) if g]
    if not groups:
        store.add_many([], fingerprints=_nothing(pipeline_id, sketch_words(store)), checkpoint=checkpoint)
        return
    written: set[Any] = set()
    later: list[StreamRecord] = []
    for i, group in enumerate(groups):
        here = {r.key for r in group}
        other = {r.key for g in groups if g is not group for r in g} - written
        canonicals: list[Key | None] = []
        for r in group:
            if r.canonical is not None and r.canonical not in here and r.canonical in other:
                later.append(r)
                canonicals.append(None)
            else:
                canonicals.append(r.canonical)
        last = i == len(groups) - 1 and not later
        _write(store, group, pipeline_id, canonicals, checkpoint if last else None)
        written |= here
    if later:
        for group in ([r for r in later if r.content_hash is not None], [r for r in later if r.content_hash is None]):
            if group:
                _write(store, group, pipeline_id, [r.canonical for r in group], None)
        store.add_many([], fingerprints=_nothing(pipeline_id, sketch_words(store)), checkpoint=checkpoint)


def import_stream(
    fh: IO[bytes],
    path: str,
    *,
    batch_size: int = 10000,
    progress: Callable[[int, int | None], None] | None = None,
) -> ImportResult:
    """Import an ``fpstore-export`` stream into the store at ``path``.

    When ``path`` holds no store, a new store is made with the stream's pipeline, design, k and
    verification threshold, built in a sibling directory and renamed to ``path`` once the whole stream checked out. When it
    holds one, the stream's pipeline must be the store's, or for a store without a sketch the same
    pipeline with one, whose sketches are then dropped (else :class:`PipelineMismatchError`);
    the whole stream is checked first (a stream that cannot be read twice is spooled to a
    temporary file), then added in batches, each committed with a checkpoint, so a rerun after an
    interruption skips the batches already committed. Keys already in the store are replaced;
    the store keeps its own verification threshold.
    """
    import fpstore

    path = os.fspath(path)
    if _is_store(path):
        return _import_existing(fh, path, batch_size=batch_size, progress=progress)
    if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
        raise InputError(f"{path} exists and is neither an fpstore store nor an empty directory")
    header, records = read_stream(fh)
    parent = os.path.dirname(os.path.abspath(path)) or "."
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(path))}.importing-", dir=parent)
    try:
        # The header's k is the radius the exporting store was opened with; a new store's is its
        # design's (a smaller k is an open's choice, not the store's).
        store = fpstore.open(tmp, k=header.design.k, pipeline=header.pipeline, design=header.design, threshold=header.threshold)
        try:
            n = _feed(store, iter(records), header.pipeline.id, batch_size, None, 0, progress, header.count)
            _carry_checkpoints(store, records.checkpoints, replace=True)
        finally:
            store.close()
        _fsync_dir(tmp)
        if os.path.isdir(path):
            os.rmdir(path)  # empty (checked above); rename cannot replace a directory on every OS
        os.rename(tmp, path)
        _fsync_dir(parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ImportResult(path, True, n, header.pipeline.id, header.design.name)


def _feed(
    store: Any,
    records: Iterator[StreamRecord],
    pipeline_id: str,
    batch_size: int,
    checkpoint_name: str | None,
    skip: int,
    progress: Callable[[int, int | None], None] | None,
    total: int | None = None,
) -> int:
    """Add the records after the first ``skip`` in batches; returns the count of records
    (``progress(records read, total)`` after each batch).

    A record whose canonical key is neither stored nor read yet (the canonical was re-added after
    its variant, so it comes later in id order) is held back until its canonical has been added,
    and goes in with it. Each batch's checkpoint is the stream position before which every record is
    stored, so a held-back record is never skipped by a resumed import. A record whose canonical
    never comes (deleted while the export ran) goes in at the end as its own canonical, as a
    store reports a document whose canonical was deleted.
    """
    n = 0
    batch: list[StreamRecord] = []
    in_batch: set[Any] = set()
    held: dict[Any, list[tuple[int, StreamRecord]]] = {}

    def take(rec: StreamRecord) -> None:
        ready = [rec]
        while ready:
            r = ready.pop()
            batch.append(r)
            in_batch.add(r.key)
            ready.extend(r2 for _, r2 in held.pop(r.key, ()))

    def commit(position: int) -> None:
        if held:
            position = min(position, min(p for waiting in held.values() for p, _ in waiting) - 1)
        _add_batch(store, batch, pipeline_id, (checkpoint_name, position) if checkpoint_name else None)
        batch.clear()
        in_batch.clear()

    for rec in records:
        n += 1
        if n <= skip:
            continue
        c = rec.canonical
        if c is not None and c != rec.key and c not in in_batch and c not in store:
            held.setdefault(c, []).append((n, rec))
            continue
        take(rec)
        if len(batch) >= batch_size:
            commit(n)
            if progress is not None:
                progress(n, total)
    for waiting in held.values():
        for _, rec in waiting:
            batch.append(replace(rec, canonical=None))
    held.clear()
    if batch or (checkpoint_name and n > skip):
        commit(n)
    if progress is not None:
        progress(n, total)
    return n


def _carry_checkpoints(store: Any, checkpoints: dict[str, Any], *, replace: bool) -> None:
    """Record a stream's checkpoints in the store: all of them in a new store; in an existing one
    only those it lacks (its own checkpoints say where its own feeds stand)."""
    for name, position in sorted(checkpoints.items()):
        if replace or store.checkpoint(name) is None:
            store.set_checkpoint(name, position)


def _import_existing(fh: IO[bytes], path: str, *, batch_size: int, progress: Callable[[int, int | None], None] | None) -> ImportResult:
    import fpstore

    spool = None
    try:
        if not _seekable(fh):
            spool = tempfile.TemporaryFile(prefix="fpstore-import-")  # noqa: SIM115 - closed in finally
            shutil.copyfileobj(fh, spool, 1 << 20)
            spool.seek(0)  # read the copy from its start
            fh = spool
        start = fh.tell()
        header, records = read_stream(fh)
        n = 0
        for record in records:  # pass 1: the whole stream checks out before the first write
            n += 1
            _check_storable(record, n)
        with fpstore.open(path, create=False) as store:
            if not _takes(store.pipeline, header.pipeline.id):
                raise PipelineMismatchError(
                    f"the stream was made with pipeline {header.pipeline.id}, but {path} uses {store.pipeline.id} "
                    f"({_difference(store.pipeline, header.pipeline)}); fingerprints of different pipelines are not comparable: "
                    "import it into a new store path instead"
                )
            fh.seek(start)
            _, again = read_stream(fh)
            assert records.digest is not None  # pass 1 read the stream to its checked trailer
            name = f"import:{records.digest.hex()}"
            done = store.checkpoint(name)
            skip = done if isinstance(done, int) and 0 <= done <= n else 0
            _feed(store, iter(again), header.pipeline.id, batch_size, name, skip, progress, n)
            _carry_checkpoints(store, records.checkpoints, replace=False)
            return ImportResult(path, False, n - skip, store.pipeline.id, store.design.name)
    finally:
        if spool is not None:
            spool.close()


def _check_storable(record: StreamRecord, n: int) -> None:
    """What a store's writes would refuse in record ``n`` (a key over the store's limit, which the
    stream format allows), refused before an import into an existing store writes anything."""
    for what, key in (("key", record.key), ("canonical key", record.canonical)):
        if key is None:
            continue
        try:
            typed_key(key)
        except InputError as exc:
            raise InputError(f"record {n:,}'s {what}: {exc}; nothing was imported") from None


def _takes(pipeline: AnyPipeline, stream_pipeline_id: str) -> bool:
    """Whether a store of ``pipeline`` takes the fingerprints of a stream's pipeline: its own, or,
    for a store without a sketch, those of its pipeline with one (the sketches are dropped)."""
    try:
        check_pipeline_id(pipeline, stream_pipeline_id)
    except PipelineMismatchError:
        return False
    return True


def _difference(store: AnyPipeline, stream: AnyPipeline) -> str:
    """How a stream's pipeline differs from a store's, in words: the sketches when the store keeps
    them and the stream lacks or differs in them (its only obstacle), else the differing fields."""
    store_bits, stream_bits = getattr(store, "sketch_bits", 0), getattr(stream, "sketch_bits", 0)
    if not store_bits and isinstance(stream, Pipeline) and stream_bits:  # a store without a sketch drops the stream's
        stream = replace(stream, sketch_bits=0)
    fields = store.mismatch(stream)
    if store_bits and fields == f"sketch_bits: store has {store_bits!r}, given {stream_bits!r}":
        return f"the stream carries {_sketch_words_text(stream_bits)}, the store keeps {_sketch_words_text(store_bits)}"
    return fields


def _sketch_words_text(bits: int) -> str:
    return f"{bits}-bit verification sketches" if bits else "no verification sketch"


def _seekable(fh: IO[bytes]) -> bool:
    try:
        return fh.seekable()
    except (AttributeError, ValueError, OSError):
        return False


def _fsync_dir(path: str) -> None:
    """fsync a directory's files and the directory itself (an LMDB copy is not synced for us)."""
    for name in os.listdir(path):
        full = os.path.join(path, name)
        if os.path.isfile(full):
            fd = os.open(full, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

"""The immutable tier of a store: runs of permuted fingerprints and key segments.

A **run** holds, for every table of the design, a sorted multiset of permuted fingerprints in the
run codec of :mod:`fpstore.index.runs`, and the document id of every entry of table 0 (the identity
permutation, so table 0 is the sorted raw fingerprints). Ids are implicit (``base + position``)
for a run made by a bulk load, which numbers its documents in fingerprint order, and a bit-packed
column for a run made by compaction, which keeps every document's id.

A **key segment** holds the documents of one bulk load without a per-document LMDB record: their
keys in id order (zstd blocks), their fingerprints in id order (sorted, since ids follow
fingerprint order; shared with table 0 of the bulk load's run), and a key-hash index (sorted
64-bit key hashes and the positions they belong to) for key → id lookups.

Everything lives in the ``blobs`` sub-database under prefixes; the list of live runs and
segments is one msgpack value in ``meta`` (``state``), replaced in the same transaction as the
blobs it names; its typed records (:class:`State`, :class:`RunMeta`, :class:`SegmentMeta`,
:class:`PackedColumn`) and their one encoder and decoder live in :mod:`fpstore.index.meta`. Every value read back is untrusted: shapes, lengths and ranges are checked, and
zstd output is bounded, before anything is used.
"""

from __future__ import annotations

import functools
import hashlib
import struct
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Generic, TypeVar, cast

import lmdb
import msgpack
import numpy as np
import zstandard

from fpstore import _backend
from fpstore.errors import CorruptionError, InputError
from fpstore.index import runs
from fpstore.index.meta import KEY_BLOCK, PackedColumn, RunMeta, SegmentMeta, State
from fpstore.mixing import fmix64, fmix64_array

_search = _backend.load("search")

__all__ = [
    "Blobs",
    "KeySegment",
    "PackedColumn",
    "ReadPlan",
    "Run",
    "RunMeta",
    "SegmentMeta",
    "State",
    "TierCache",
    "key_hash",
    "key_hashes_int",
    "memoized",
    "run_ids",
]

STATE_KEY = b"state"
PACK_CHUNK = 1 << 16  # values per packed-column chunk: one probe unpacks at most this many bytes * width / 8
MAX_KEY_BLOCK_BYTES = 64 << 20  # bound on a decompressed key block (untrusted zstd frame)
_U32 = struct.Struct(">I")
_INT_KEY_SEED = 0x6A09E667F3BCC908


_local = threading.local()


def _decompressor() -> zstandard.ZstdDecompressor:
    """A zstd decompressor per thread: making one costs more than decompressing a key block."""
    d = getattr(_local, "zstd", None)
    if d is None:
        d = _local.zstd = zstandard.ZstdDecompressor()
    return d


def bounded_decompress(raw: bytes, limit: int, what: str) -> bytes:
    """zstd-decompress untrusted bytes into at most ``limit`` bytes, else CorruptionError.

    ``max_output_size`` alone is not a bound: zstandard ignores it when the frame header declares
    a content size, and allocates whatever the header claims (a fuzzed key block asked for 466 TB).
    """
    try:
        declared = zstandard.frame_content_size(raw)
    except zstandard.ZstdError as exc:
        raise CorruptionError(f"{what} is not a zstd frame: {exc}") from None
    if declared > limit:
        raise CorruptionError(f"{what} declares {declared} bytes of content, more than the {limit} allowed")
    try:
        return _decompressor().decompress(raw, max_output_size=limit)
    except zstandard.ZstdError as exc:
        raise CorruptionError(f"{what} does not decompress: {exc}") from None


# -- keys --------------------------------------------------------------------------------------------


def key_hash(typed: bytes) -> int:
    """64-bit hash of a typed key (see :func:`fpstore.store.keys.typed_key`): integer keys by a bijective mix (so
    bulk loads can hash arrays of them with numpy), others by BLAKE2b."""
    if typed[:1] == b"i" and len(typed) == 9:
        return fmix64(int.from_bytes(typed[1:], "big") ^ _INT_KEY_SEED)
    return int.from_bytes(hashlib.blake2b(typed, digest_size=8).digest(), "big")


def key_hashes(typed: list[bytes]) -> np.ndarray:
    """:func:`key_hash` of many typed keys (uint64); integer keys are mixed with numpy."""
    if all(len(t) == 9 and t[:1] == b"i" for t in typed):
        return key_hashes_int(np.frombuffer(b"".join(t[1:] for t in typed), dtype=">u8"))
    return np.fromiter((key_hash(t) for t in typed), dtype=np.uint64, count=len(typed))


def key_hashes_int(keys: np.ndarray) -> np.ndarray:
    """:func:`key_hash` of integer keys, vectorised (uint64 in, uint64 out)."""
    return fmix64_array(keys.astype(np.uint64) ^ np.uint64(_INT_KEY_SEED))


# -- blob names ---------------------------------------------------------------------------------------


def run_prefix(run_id: int, table: int) -> bytes:
    return b"r" + _U32.pack(run_id) + struct.pack(">H", table)


def seg_prefix(seg_id: int, part: bytes) -> bytes:
    return b"s" + _U32.pack(seg_id) + part


def _chunk_key(prefix: bytes, tag: bytes, n: int) -> bytes:
    return prefix + tag + _U32.pack(n)


# -- writing -------------------------------------------------------------------------------------------
# Encoders return (blob name, value) lists, computed outside any transaction, so that a write
# transaction retried after a map resize only repeats the puts.

Blobs = list[tuple[bytes, bytes]]


#: Bytes per run chunk (one LMDB value). Measured with py-lmdb 3.0: reading a 4 MiB value costs
#: ~11 µs (it spans ~1,000 overflow pages), a 256 KiB one ~0.7 µs; a probe reads one per table.
RUN_CHUNK_BYTES = 256 << 10


def codec_run_blobs(prefix: bytes, sorted_keys: np.ndarray) -> Blobs:
    """Sorted keys as a codec run under ``prefix``: its index and chunks."""
    index, chunks = runs.encode_run(sorted_keys, chunk_bytes=RUN_CHUNK_BYTES)
    out = [(prefix + b"I", index.to_bytes())]
    out += [(_chunk_key(prefix, b"C", c), data) for c, data in enumerate(chunks)]
    return out


class CodecRunWriter:
    """:func:`codec_run_blobs` of keys given in ascending pieces (:class:`runs.RunEncoder`):
    each chunk's blob as soon as it is complete, the index's at :meth:`finish`."""

    def __init__(self, prefix: bytes, batch_keys: int = 1 << 20) -> None:
        self.prefix = prefix
        self._encoder = runs.RunEncoder(chunk_bytes=RUN_CHUNK_BYTES, batch_keys=batch_keys)
        self._chunks = 0

    def add(self, sorted_keys: np.ndarray) -> Blobs:
        return self._named(self._encoder.add(sorted_keys))

    def finish(self) -> tuple[Blobs, int]:
        """The last blobs (the index's among them) and the run's count."""
        index, chunks = self._encoder.finish()
        return self._named(chunks) + [(self.prefix + b"I", index.to_bytes())], index.count

    def _named(self, chunks: list[bytes]) -> Blobs:
        first, self._chunks = self._chunks, self._chunks + len(chunks)
        return [(_chunk_key(self.prefix, b"C", first + i), data) for i, data in enumerate(chunks)]


def packed_blobs(prefix: bytes, values: np.ndarray) -> tuple[Blobs, PackedColumn]:
    """Bit-pack uint64 ``values`` (relative to their minimum) in chunks; returns blobs and the column record."""
    n = len(values)
    low = int(values.min()) if n else 0
    writer = PackedColumnWriter(prefix, n, low, int(values.max()) if n else 0)
    blobs = writer.add(values)
    return blobs + writer.finish(), writer.column


class PackedColumnWriter:
    """:func:`packed_blobs` of ``count`` values given in pieces, their least and largest value
    known beforehand: each chunk's blob as soon as it is full."""

    def __init__(self, prefix: bytes, count: int, low: int, high: int) -> None:
        self.prefix, self.count, self.low = prefix, count, low
        self.width = (high - low).bit_length()
        self._pending = np.zeros(0, np.uint64)
        self._given = self._chunks = 0

    @property
    def column(self) -> PackedColumn:
        return PackedColumn(self.prefix, self.count, self.low, self.width, PACK_CHUNK)

    def add(self, values: np.ndarray) -> Blobs:
        """Pack the next values (each within [low, high]); the blobs of the chunks now full."""
        self._given += len(values)
        if self._given > self.count:
            raise InputError(f"packed column {self.prefix!r}: more than the {self.count} values announced")
        rel = np.asarray(values, np.uint64) - np.uint64(self.low)
        if len(rel) and int(rel.max()).bit_length() > self.width:
            raise InputError(f"packed column {self.prefix!r}: a value outside the range announced")
        pending = np.concatenate((self._pending, rel)) if len(self._pending) else rel
        full = len(pending) - len(pending) % PACK_CHUNK
        out = [self._blob(pending[s : s + PACK_CHUNK]) for s in range(0, full, PACK_CHUNK)]
        self._pending = pending[full:].copy()
        return out

    def finish(self) -> Blobs:
        """The last chunk's blob; the values given must be as many as announced."""
        if self._given != self.count:
            raise InputError(f"packed column {self.prefix!r}: {self._given} values given, {self.count} announced")
        out = [self._blob(self._pending)] if len(self._pending) else []
        self._pending = np.zeros(0, np.uint64)
        return out

    def _blob(self, rel: np.ndarray) -> tuple[bytes, bytes]:
        name = _chunk_key(self.prefix, b"P", self._chunks)
        self._chunks += 1
        return name, _search.pack_bits(np.ascontiguousarray(rel), self.width)


def key_block_blobs(prefix: bytes, typed_keys: list[bytes] | None, int_keys: np.ndarray | None) -> Blobs:
    """Keys in id order in zstd blocks of :data:`KEY_BLOCK`.

    Integer keys are stored as raw uint64 arrays (tag ``I``), others as msgpack lists of typed
    keys (tag ``M``).
    """
    cctx = zstandard.ZstdCompressor(level=3)
    typed = typed_keys or []
    n = len(int_keys) if int_keys is not None else len(typed)
    out: Blobs = []
    for b, start in enumerate(range(0, n, KEY_BLOCK)):
        if int_keys is not None:
            raw = b"I" + np.ascontiguousarray(int_keys[start : start + KEY_BLOCK], dtype="<u8").tobytes()
        else:
            raw = b"M" + msgpack.packb(typed[start : start + KEY_BLOCK], use_bin_type=True)
        out.append((_chunk_key(prefix, b"K", b), cctx.compress(raw)))
    return out


def blobs_size(blobs: Blobs) -> int:
    return sum(len(k) + len(v) for k, v in blobs)


def delete_prefix(txn: lmdb.Transaction, db: Any, prefix: bytes) -> None:
    """Delete every blob whose name starts with ``prefix``."""
    cur = txn.cursor(db=db)
    try:
        if not cur.set_range(prefix):
            return
        while True:
            key = bytes(cur.key())
            if not key.startswith(prefix):
                return
            if not cur.delete():
                return
    except SystemError as exc:
        # py-lmdb raises SystemError (not lmdb.Error) from Cursor.delete on a corrupted page.
        raise CorruptionError(f"deleting blobs {prefix!r} hit a damaged page: {exc}") from None


# -- reading -------------------------------------------------------------------------------------------


def _nbytes(obj: Any) -> int:
    """A cache entry's size, roughly: its arrays and byte strings (a kernel probe table shares
    the arrays of the run index it was built from, and counts as a small object)."""
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, (bytes, bytearray)):
        return len(obj) + 33
    if isinstance(obj, (tuple, list)):
        return 56 + 8 * len(obj) + sum(_nbytes(o) for o in obj)
    owned = getattr(obj, "owned_nbytes", None)  # a compiled probe table or a run index: its own arrays
    if isinstance(owned, int):
        return 64 + owned
    fields = getattr(obj, "__dict__", None)
    if fields:
        return 64 + sum(_nbytes(v) for v in fields.values())
    return 64


def _key_block_size(decoded: tuple[bytes, Any]) -> int:
    """A decoded key block's size, roughly: its raw integers, or its keys and their objects."""
    tag, body = decoded
    return len(body) + 64 if tag == b"I" else sum(len(k) for k in body) + 64 * (len(body) + 1)


#: Run chunk names a :class:`TierCache` remembers as checked at most (~70 bytes each); beyond,
#: it forgets them all and checks chunks again as they are read.
MAX_CHECKED_CHUNKS = 1 << 18


class _BytesLru:
    """Least-recently-used entries bounded by their estimated bytes; the caller holds the lock."""

    def __init__(self, max_bytes: int) -> None:
        self._entries: OrderedDict[object, tuple[Any, int]] = OrderedDict()
        self._bytes, self._max = 0, max_bytes

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def get(self, key: object) -> Any:
        """The entry (None when absent), now the most recently used."""
        hit = self._entries.get(key)
        if hit is None:
            return None
        self._entries.move_to_end(key)
        return hit[0]

    def put(self, key: object, value: Any, size: int) -> Any:
        """Store ``value`` unless an entry is there already (another thread built it first);
        returns the entry kept, after evicting beyond the bound."""
        kept = self.get(key)
        if kept is None:
            kept = value
            self._entries[key] = (value, size)
            self._bytes += size
        while self._bytes > self._max and len(self._entries) > 1:
            self._bytes -= self._entries.popitem(last=False)[1][1]
        return kept

    def drop(self, key: object) -> None:
        """Forget ``key``'s entry, if any."""
        hit = self._entries.pop(key, None)
        if hit is not None:
            self._bytes -= hit[1]

    def grow(self, key: object, extra: int) -> None:
        """Count ``extra`` more bytes for ``key``'s entry, if it is there, evicting beyond the
        bound (never the entry itself)."""
        hit = self._entries.get(key)
        if hit is None:
            return
        self._entries[key] = (hit[0], hit[1] + extra)
        self._bytes += extra
        self._entries.move_to_end(key)
        while self._bytes > self._max and len(self._entries) > 1:
            self._bytes -= self._entries.popitem(last=False)[1][1]


class TierCache:
    """What reading a run costs to rebuild, kept per store: validated run indexes (with their chunk
    names) by blob prefix, and the kernel's probe tables by prefix and by run. Committed runs are
    immutable and their prefixes and ids never reused, so such an entry never goes stale; a write
    transaction that made and read a run and then aborted leaves its id to be given out again, so
    the store clears the cache on every abort (``Storage.on_abort``). The cache is bounded in bytes
    (512 MiB by default, least recently used out) so a reader's memory does not grow with the
    store beyond that. Threads share it: the
    table is locked, and an entry is built outside the lock (two threads may build the same one;
    the first stored wins, and both are equal)."""

    def __init__(self, max_bytes: int = 512 << 20, max_key_bytes: int = 32 << 20) -> None:
        # Bounded in bytes, not entries: a probe needs every table of every run, and a count that
        # fits 10 runs thrashes at 80 (indexes rebuilt at every add). The indexes of every run
        # take ~2 % of the runs' own bytes.
        self._entries = _BytesLru(max_bytes)
        # Decoded key blocks, apart: there are thousands, and they must not push out run indexes.
        self._key_blocks = _BytesLru(max_key_bytes)
        self._lock = threading.Lock()
        #: Counts the clears: what is built from entries of the cache (a :class:`ReadPlan`) is
        #: stale once it changes.
        self.generation = 0
        # Run chunks whose CRC-32 this cache has checked (see :meth:`checked`), by blob name.
        self._checked: set[bytes] = set()

    def clear(self) -> None:
        """Forget every entry (a write transaction that read runs it made was aborted)."""
        with self._lock:
            self._entries.clear()
            self._key_blocks.clear()
            self._checked = set()  # the aborted write's run ids are given out again
            self.generation += 1

    def forget_runs(self, run_ids: Iterable[int], prefixes: Iterable[bytes]) -> None:
        """Drop the entries of runs merged away (a merge's switch): their ids and the blob
        prefixes they own (a bulk load's table 0 is its key segment's, which stays live). A
        reader of an older snapshot that still reads them builds them again. Until evicted by
        bytes they would stay, tens of thousands of small objects after millions of adds, which
        every full pass of Python's cycle collector walks (115 ms a pass at 2e7 documents, with
        every thread stopped)."""
        with self._lock:
            for run_id in run_ids:
                self._entries.drop(("run", run_id))
            for prefix in prefixes:
                self._entries.drop(prefix)
                self._entries.drop(("table", prefix))

    def checked(self, txn: lmdb.Transaction, db: Any, name: bytes, raw: Any) -> Any:
        """``raw``, blob ``name`` as read in ``txn``, once its CRC-32 matches its run index when it
        is a run chunk this cache has not checked yet. A flipped bit the codec's structural checks
        cannot see (a remainder bit decodes to keys still sorted and inside their block's bounds)
        would otherwise give wrong keys silently; chunks are immutable, so one check per chunk
        read serves every later read (a run chunk's CRC costs ~50 µs, its first read alone)."""
        if raw is None or name in self._checked or len(name) < 5 or name[-5:-4] != b"C":
            return raw  # absent (the reader reports it), checked, or not a run chunk
        index = self.index(txn, db, name[:-5])
        c = _U32.unpack(name[-4:])[0]
        if c < index.nchunks:  # else the reader reports the chunk as one the run does not have
            if zlib.crc32(raw) != int(index.chunk_crc[c]):
                raise CorruptionError(f"run chunk {name!r} fails its CRC-32: the run is damaged")
            checked = self._checked
            if len(checked) >= MAX_CHECKED_CHUNKS:
                checked = self._checked = set()  # bounded: what is forgotten is checked again
            checked.add(name)
        return raw

    def fetcher(self, txn: lmdb.Transaction, db: Any) -> Callable[[bytes], Any]:
        """A blob getter for the kernel's probes (``fetch(name)``): run chunks :meth:`checked`."""
        get, checked = txn.get, self.checked

        def fetch(name: bytes) -> Any:
            return checked(txn, db, name, get(name, db=db))

        return fetch

    def key_block(self, prefix: bytes, block: int, decode: Callable[[], tuple[bytes, Any]]) -> tuple[bytes, Any]:
        """Key block ``block`` of the segment whose keys live under ``prefix``, decoded (a zstd
        frame costs ~10 µs a lookup); least recently used out beyond ``max_key_bytes``."""
        return self._lookup(self._key_blocks, (prefix, block), decode, _key_block_size)

    def _cached(self, key: object, make: Callable[[], Any]) -> Any:
        return self._lookup(self._entries, key, make, _nbytes)

    def _lookup(self, table: _BytesLru, key: object, make: Callable[[], Any], size: Callable[[Any], int]) -> Any:
        with self._lock:
            hit = table.get(key)
        if hit is not None:
            return hit
        made = make()  # outside the lock: two threads may build the same entry, the first kept
        nbytes = size(made)
        with self._lock:
            return table.put(key, made, nbytes)

    def get(self, txn: lmdb.Transaction, db: Any, prefix: bytes) -> tuple[runs.RunIndex, list[bytes]]:
        def load() -> tuple[runs.RunIndex, list[bytes]]:
            raw = txn.get(prefix + b"I", db=db)
            if raw is None:
                raise CorruptionError(f"run index {prefix!r} is missing")
            idx = runs.RunIndex.from_bytes(bytes(raw))
            return idx, [_chunk_key(prefix, b"C", c) for c in range(idx.nchunks)]

        return self._cached(prefix, load)

    def index(self, txn: lmdb.Transaction, db: Any, prefix: bytes) -> runs.RunIndex:
        return self.get(txn, db, prefix)[0]

    def probe_table(self, prefix: bytes, index: runs.RunIndex, names: list[bytes]) -> Any:
        """The kernel's probe table of one stored codec run, cached by its blob prefix."""
        return self._cached(("table", prefix), lambda: runs.probe_table(index, names))

    def probe_tables(self, run: Run) -> list[Any]:
        """The kernel's probe tables of every table of ``run``, cached by run id as one list (a
        single query asks for them all)."""

        def build() -> list[Any]:
            tables = (run.table(t) for t in range(len(run.meta.tables)))  # each checked against the run
            return [self.probe_table(tab.prefix, tab.index, tab._names) for tab in tables]

        return self._cached(("run", run.id), build)

    def build_cells(self, run: Run, prefix_bits: Sequence[int]) -> int:
        """Build the occupied cells of ``run``'s probe tables that take them (see
        ``ProbeTable.build_cells``: a small table's first probes build their own), table ``t``
        probed by ranges of ``prefix_bits[t]`` bits, its chunks read in ``run``'s transaction;
        returns how many tables have them. Their bytes are counted in the
        run's entry (the table's own entry, counted when it was made, is evicted with it)."""
        tables = self.probe_tables(run)
        fetch = run.chunk_reader()
        for t, pt in enumerate(tables):
            extra = pt.build_cells(fetch, prefix_bits[t])
            if extra:
                with self._lock:
                    self._entries.grow(("run", run.id), extra)
        return sum(1 for pt in tables if pt.filtered)

    def segment_hash_tables(self, segments: list[KeySegment]) -> list[Any]:
        """The kernel's probe tables of the key hashes of ``segments``, cached as one list."""
        return cast(
            list[Any],
            self._cached(("segments", tuple(seg.meta.hashes for seg in segments)), lambda: [seg.hash_table() for seg in segments]),
        )


#: :meth:`CodecRun.positions` looks up at most this many keys per chunk of the run one at a time;
#: more are merged with the chunks.
FEW_KEYS_PER_CHUNK = 8


def memoized(fetch: Callable[[bytes], Any], memo: dict[bytes, Any]) -> Callable[[bytes], Any]:
    """``fetch`` (a blob getter) looking in ``memo`` (a snapshot's chunk views, by name) first and
    keeping there what it reads (the kernels' ``_chunk_of`` does the same for their probes)."""

    def get(name: bytes) -> Any:
        view = memo.get(name)
        if view is None:
            view = fetch(name)
            if view is not None:
                memo[name] = view
        return view

    return get


class CodecRun:
    """One stored codec run (sorted uint64 keys), read inside a transaction."""

    __slots__ = ("prefix", "index", "_names", "_txn", "_db", "_cache")

    def __init__(self, txn: lmdb.Transaction, db: Any, cache: TierCache, prefix: bytes) -> None:
        self.prefix = prefix
        self.index, self._names = cache.get(txn, db, prefix)
        self._txn, self._db, self._cache = txn, db, cache

    def get(self, c: int) -> Any:
        """Chunk ``c``'s bytes (a view valid inside the transaction). A missing chunk reads as
        None, which the codec reports as damage."""
        return self._read(self._names[c])

    def _read(self, name: bytes) -> Any:
        return self._cache.checked(self._txn, self._db, name, self._txn.get(name, db=self._db))

    def views(self, memo: dict[bytes, Any] | None = None) -> list[Any]:
        """Every chunk, as :meth:`get` reads it: a getter over this list (``views.__getitem__``)
        reads the run from any thread while the transaction lasts. ``memo`` (a snapshot's chunk
        views by name, which hold only chunks :meth:`get` read, or ``Store.warm``) gives the
        chunks it holds without an LMDB lookup each (at 10^8, 7,940 lookups took 19-29 ms of a
        10^6-query batch's second, on the calling thread alone: docs/benchmarks.md) and keeps the
        others."""
        read = self._read if memo is None else memoized(self._read, memo)
        return [read(name) for name in self._names[: self.index.nchunks]]

    @property
    def count(self) -> int:
        return self.index.count

    def entry_starts(self) -> np.ndarray:
        """Position of each block's first entry, and the count at the end (int64[nblocks + 1])."""
        return self.index.entry_start

    def probe(self, lo: int, hi: int) -> np.ndarray:
        return runs.probe(self.get, self.index, lo, hi)

    def all(self) -> np.ndarray:
        return runs.decode_run(self.get, self.index)

    def check_backed(self) -> None:
        """CorruptionError unless every chunk is stored with the length the index gives it, so
        that :attr:`count` is backed by bytes that exist (see :func:`fpstore.index.runs.chunk_views`)."""
        runs.chunk_views(self.get, self.index)

    def positions(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For sorted unique uint64 ``keys``: (key index, position) of every stored copy of each.

        A few keys are looked up block by block; many are merged with the chunks that can hold
        them, each decoded once.
        """
        idx = self.index
        if idx.count == 0 or not len(keys):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        if len(keys) <= FEW_KEYS_PER_CHUNK * idx.nchunks:
            # Few keys for the run's size (a batch of new keys against a large key index): one
            # kernel call that finds each key's block, reads its chunk and decodes up to the key,
            # instead of a merge call per chunk.
            pt = self._cache.probe_table(self.prefix, idx, self._names)
            plain = keys.tolist()
            hits = runs.probe_tables([pt], self._cache.fetcher(self._txn, self._db), [(0, k, k, k) for k in plain], 0)
            where = {k: i for i, k in enumerate(plain)}
            out_k = [where[key] for _, key, _ in hits]
            out_p = [p for _, _, p in hits]
            return np.array(out_k, dtype=np.int64), np.array(out_p, dtype=np.int64)
        # The batch merge of the sorted keys with the run, decoding only the blocks that may hold
        # one of them (a batch of 1,000 keys in a 10^7 run touches 1,000 blocks, not every chunk).
        ki, pos, _ = runs.probe_batch_run(self.get, idx, keys, 64, 0, positions=True)
        order = np.lexsort((pos, ki))
        return ki[order].astype(np.int64), pos[order].astype(np.int64)

    def at(self, positions: np.ndarray) -> np.ndarray:
        """Keys at ``positions`` (int64, each in 0..count-1)."""
        starts = self.entry_starts()
        out = np.zeros(len(positions), np.uint64)
        if len(positions) and (positions.min() < 0 or positions.max() >= self.count):
            raise CorruptionError(f"position outside run {self.prefix!r}")
        blocks = np.searchsorted(starts, positions, side="right") - 1
        for b, sel in _groups_of(blocks):
            block = runs.decode_block(self.get(int(self.index.chunk[b])), self.index, b)
            out[sel] = block[positions[sel] - starts[b]]
        return out


def _groups_of(labels: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """``(label, the indices of labels holding it)`` for each distinct label, in ascending order:
    one stable sort, where a mask per label costs len(labels) times the labels (800,000 positions
    over the 1,526 chunks of a column of 10^8 took 0.6 s that way)."""
    order = np.argsort(labels, kind="stable")
    ordered = labels[order]
    for sel in np.split(order, np.flatnonzero(ordered[1:] != ordered[:-1]) + 1):
        if len(sel):
            yield int(labels[sel[0]]), sel


def read_packed(txn: lmdb.Transaction, db: Any, prefix: bytes, rec: PackedColumn, positions: np.ndarray) -> np.ndarray:
    """Values at ``positions`` of a packed column (see :func:`packed_blobs`)."""
    return unpack_column(lambda c: txn.get(_chunk_key(prefix, b"P", c), db=db), prefix, rec, positions)


def packed_chunks(txn: lmdb.Transaction, db: Any, rec: PackedColumn) -> list[Any]:
    """Every chunk of a packed column as read in ``txn`` (views valid inside it; None for a
    missing chunk, which :func:`unpack_column` reports as damage)."""
    return [txn.get(_chunk_key(rec.prefix, b"P", c), db=db) for c in range(-(-rec.count // rec.per_chunk))]


def unpack_column(get_chunk: Callable[[int], Any], prefix: bytes, rec: PackedColumn, positions: np.ndarray) -> np.ndarray:
    """Values at ``positions`` of a packed column whose chunk ``c`` is ``get_chunk(c)`` (None:
    missing). Every position and every chunk's length is checked before it is read."""
    count, per = rec.count, rec.per_chunk
    out = np.zeros(len(positions), np.uint64)
    if not len(positions):
        return out
    if positions.min() < 0 or positions.max() >= count:
        raise CorruptionError(f"position outside packed column {prefix!r}")
    for c, sel in _groups_of(positions // per):
        raw = get_chunk(c)
        if raw is None:
            raise CorruptionError(f"packed column {prefix!r} lacks chunk {c}")
        n_in = min(per, count - c * per)
        err, vals = _search.unpack_bits(np.frombuffer(raw, np.uint8), rec.width, n_in, positions[sel] - c * per)
        if err:
            raise CorruptionError(f"packed column {prefix!r} chunk {c} is too short")
        out[sel] = vals + np.uint64(rec.min)
    return out


def read_packed_list(
    txn: lmdb.Transaction, db: Any, prefix: bytes, rec: PackedColumn, positions: list[int], memo: dict[bytes, Any] | None = None
) -> list[int]:
    """:func:`read_packed_at` in plain ints."""
    return read_packed_at(txn, db, prefix, rec, positions, memo).tolist()


def read_packed_at(
    txn: lmdb.Transaction, db: Any, prefix: bytes, rec: PackedColumn, positions: Any, memo: dict[bytes, Any] | None = None
) -> np.ndarray:
    """:func:`read_packed` (uint64) read in place by the kernel, chunk by chunk as the positions
    (a list or an int64 array) reach them: sorted positions read each chunk once. ``memo`` (chunk
    views by blob name, valid in ``txn``) keeps the chunks read for later calls."""
    status, x, values = _search.unpack_at(
        {} if memo is None else memo,
        functools.partial(txn.get, db=db),
        prefix,
        rec.count,
        rec.per_chunk,
        rec.width,
        rec.min,
        np.asarray(positions, dtype=np.int64),
    )
    if status == 1:
        raise CorruptionError(f"position outside packed column {prefix!r}")
    if status == 2:
        raise CorruptionError(f"packed column {prefix!r} chunk {positions[x] // rec.per_chunk} is missing or too short")
    if status == 3:
        raise CorruptionError(f"packed column {prefix!r} holds a value above 2**64 - 1")
    return values


def packed_value(txn: lmdb.Transaction, db: Any, prefix: bytes, rec: PackedColumn, position: int, memo: dict[bytes, Any]) -> int:
    """The value at ``position`` of a packed column, its chunk kept in ``memo`` (see
    :func:`read_packed_list`)."""
    if not 0 <= position < rec.count:
        raise CorruptionError(f"position outside packed column {prefix!r}")
    per = rec.per_chunk
    c = position // per
    name = prefix + b"P" + _U32.pack(c)
    raw = memo.get(name)
    if raw is None:
        raw = txn.get(name, db=db)
        if raw is not None:
            memo[name] = raw
    in_chunk = rec.count - c * per  # values in chunk c: per, or fewer in the last
    value = None if raw is None else _search.unpack_one(raw, rec.width, in_chunk if in_chunk < per else per, position - c * per)
    if value is None:
        raise CorruptionError(f"packed column {prefix!r} chunk {c} is missing or too short")
    return value + rec.min


def column_key(txn: lmdb.Transaction, db: Any, meta: SegmentMeta, ordinal: int, memo: dict[bytes, Any]) -> int:
    """The integer key of ``ordinal`` in key segment ``meta``, which has an integer key column: a
    single query's match, read without a :class:`KeySegment` (see :meth:`KeySegment._column_keys`)."""
    column = meta.int_keys
    assert column is not None
    key = packed_value(txn, db, column.prefix, column, ordinal, memo)
    if key >> 64:
        raise CorruptionError(f"segment {meta.id}'s integer key column holds a value above 2**64 - 1")
    return key


def read_packed_all(txn: lmdb.Transaction, db: Any, prefix: bytes, rec: PackedColumn) -> np.ndarray:
    return read_packed(txn, db, prefix, rec, np.arange(rec.count, dtype=np.int64))


MetaT = TypeVar("MetaT", RunMeta, SegmentMeta)


class _Bound(Generic[MetaT]):
    """A run or a segment as the state record describes it, read through one transaction."""

    def __init__(self, txn: lmdb.Transaction, db: Any, cache: TierCache, meta: MetaT) -> None:
        self.meta: MetaT = meta
        self.count: int = meta.count
        self._txn, self._db, self._cache = txn, db, cache


class _ChunkMemo(dict[bytes, Any]):
    """Chunk views by name (None: absent), each read from the transaction on first use
    (``__getitem__`` is a C slot: a hit costs no Python frame)."""

    def __init__(self, txn: lmdb.Transaction, db: Any, cache: TierCache) -> None:
        super().__init__()
        self._fetch = cache.fetcher(txn, db)

    def __missing__(self, name: bytes) -> Any:
        view = self[name] = self._fetch(name)
        return view


class Run(_Bound[RunMeta]):
    """A run of the store (see the module docstring), bound to a transaction."""

    def __init__(self, txn: lmdb.Transaction, db: Any, cache: TierCache, meta: RunMeta) -> None:
        super().__init__(txn, db, cache, meta)
        self.id: int = meta.id
        self._tables: dict[int, CodecRun] = {}

    def table(self, t: int) -> CodecRun:
        tab = self._tables.get(t)
        if tab is None:
            tab = self._tables[t] = CodecRun(self._txn, self._db, self._cache, self.meta.tables[t])
            if tab.count != self.count:
                raise CorruptionError(f"run {self.id} table {t} holds {tab.count} entries, expected {self.count}")
        return tab

    def ids_at(self, positions: np.ndarray) -> np.ndarray:
        return run_ids_at(self._txn, self._db, self.meta, positions)

    def id_reader(self) -> Callable[[np.ndarray], np.ndarray]:
        """:meth:`ids_at` as a function that no longer needs this transaction's thread: the id
        column's chunks are read now (views, valid while the transaction lasts), so worker
        threads can map positions to ids. Positions and ids are checked as in :meth:`ids_at`."""
        rec, count, run_id = self.meta.ids, self.count, self.id
        base = self.meta.ids_base
        # The count sizes the list of chunks: trust it only once table 0's bytes back it.
        self.table(0).check_backed()
        views = packed_chunks(self._txn, self._db, rec) if rec is not None else []

        def ids(positions: np.ndarray) -> np.ndarray:
            if rec is None:
                if len(positions) and (positions.min() < 0 or positions.max() >= count):
                    raise CorruptionError(f"position outside run {run_id}")
                out = positions.astype(np.uint64) + np.uint64(base or 0)
            else:
                out = unpack_column(views.__getitem__, rec.prefix, rec, positions)
            if len(out) and (int(out.max()) >= 1 << 63 or int(out.min()) == 0):
                raise CorruptionError(f"run {run_id} names a document id outside any this store assigns")
            return out

        return ids

    def id_list(self, positions: list[int]) -> list[int]:
        """:meth:`ids_at` for a single query's few positions, in plain ints (numpy costs more here)."""
        return run_ids(self._txn, self._db, self.meta, positions)

    def all_ids(self) -> np.ndarray:
        # The count comes from the state record: allocate for it only once table 0 holds as many
        # entries (checked by table()) and its chunks are there to back them.
        self.table(0).check_backed()
        return self.ids_at(np.arange(self.count, dtype=np.int64))

    def probe_tables(self) -> list[Any]:
        """The kernel's probe tables of this run, one per table (cached)."""
        return self._cache.probe_tables(self)

    def chunk_reader(self) -> Callable[[bytes], Any]:
        """A chunk getter for :func:`fpstore.index.runs.probe_fingerprint` that reads each chunk
        of this run's transaction once (many queries in a row reach the same chunks; the chunks
        of every run of the transaction can be read through it)."""
        return _ChunkMemo(self._txn, self._db, self._cache).__getitem__

    def ids_of(self, fps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For sorted unique fingerprints: (fingerprint index, id) of every entry holding each."""
        ki, pos = self.table(0).positions(fps)
        return ki, self.ids_at(pos)


def run_ids_at(txn: lmdb.Transaction, db: Any, meta: RunMeta, positions: np.ndarray) -> np.ndarray:
    """Document ids (uint64) of run ``meta``'s entries at ``positions`` (int64, of its table 0),
    positions and ids checked (CorruptionError)."""
    ids = meta.ids
    if not len(positions):
        return np.zeros(0, np.uint64)
    if ids is None:
        # (A few positions: Python's min and max cost less than numpy's.)
        lo, hi = (positions.min(), positions.max()) if len(positions) > 64 else (min(pos := positions.tolist()), max(pos))
        if lo < 0 or hi >= meta.count:
            raise CorruptionError(f"position outside run {meta.id}")
        base: int = meta.ids_base  # type: ignore[assignment]  # RunMeta sets ids_base when ids is None
        # Ids are assigned from 1 upward; one past 2**63 can only come from damaged bytes.
        if base <= 0 or base + meta.count > 1 << 63:
            raise CorruptionError(f"run {meta.id} names a document id outside any this store assigns")
        return positions.astype(np.uint64) + np.uint64(base)
    out = read_packed(txn, db, ids.prefix, ids, positions)
    if int(out.max()) >= 1 << 63 or int(out.min()) == 0:
        raise CorruptionError(f"run {meta.id} names a document id outside any this store assigns")
    return out


def run_ids(txn: lmdb.Transaction, db: Any, meta: RunMeta, positions: list[int], memo: dict[bytes, Any] | None = None) -> list[int]:
    """Document ids of run ``meta``'s entries at ``positions`` (of its table 0), in plain ints: a
    single query's few hits (numpy's fixed costs exceed the work here). Positions and ids are
    checked (CorruptionError)."""
    count = meta.count
    for p in positions:
        if not 0 <= p < count:
            raise CorruptionError(f"position outside run {meta.id}")
    ids = meta.ids
    if ids is None:
        base: int = meta.ids_base  # type: ignore[assignment]  # RunMeta sets ids_base when ids is None
        out = [base + p for p in positions]
    else:
        out = read_packed_list(txn, db, ids.prefix, ids, positions, memo)
    for i in out:
        if not 0 < i < 1 << 63:
            raise CorruptionError(f"run {meta.id} names a document id outside any this store assigns")
    return out


class ReadPlan:
    """The runs and key segments of one state as a single query reads them, built once per state
    (runs and segments are immutable) and bound to no transaction: the kernel's probe tables of
    every table of every non-empty run in one list (:attr:`tables`, run r's table t at
    ``r * T + t``), those runs' records (:attr:`runs`) and table 0's chunks (:attr:`chunks0`), and the key segments in order of their
    first id (:attr:`segs`, with :attr:`bases` and :attr:`ends`, one past each last id).

    Built through :class:`Run`, so every check a run's tables get when read is made once here; a
    plan holds entries of a :class:`TierCache` and is stale once the cache is cleared
    (:attr:`TierCache.generation`)."""

    __slots__ = ("tables", "runs", "chunks0", "segs", "bases", "ends", "cache")

    def __init__(self, runs: list[Run], segs: tuple[SegmentMeta, ...], cache: TierCache) -> None:
        #: The cache the plan's entries come from, whose :meth:`TierCache.fetcher` reads its chunks.
        self.cache = cache
        live = [run for run in runs if run.count]
        self.tables: list[Any] = [pt for run in live for pt in run.probe_tables()]
        self.runs: list[RunMeta] = [run.meta for run in live]
        #: Chunks of the runs' table 0, all runs together (what sizes a batch probe's merge).
        self.chunks0: int = sum(run.table(0).index.nchunks for run in live)
        self.segs: list[SegmentMeta] = sorted(segs, key=lambda seg: seg.base)
        self.bases: list[int] = [seg.base for seg in self.segs]
        self.ends: list[int] = [seg.base + seg.count for seg in self.segs]


def find_in_segments(segments: list[KeySegment], typed: bytes) -> tuple[int, int] | None:
    """(index in ``segments``, id) of ``typed`` in the last segment holding it, or None: every
    segment's sorted key hashes are probed in one kernel call (a key no segment holds, a
    crawler's new page, costs a block search per segment, not a Python lookup per segment)."""
    return find_each_in_segments(segments, [typed])[0]


def find_each_in_segments(segments: list[KeySegment], typed: Sequence[bytes]) -> list[tuple[int, int] | None]:
    """:func:`find_in_segments` of each of a few keys, every key against every segment in one
    kernel call: a group commit's new keys, where a batch search's numpy calls (sorting,
    deduplicating, merging) cost more than the probes."""
    out: list[tuple[int, int] | None] = [None] * len(typed)
    if not segments or not typed:
        return out
    fetch = _ChunkMemo(segments[0]._txn, segments[0]._db, segments[0]._cache).__getitem__
    tables = segments[0]._cache.segment_hash_tables(segments)
    hashes = [key_hash(t) for t in typed]
    hits = runs.probe_tables(tables, fetch, [(i, h, h, h) for h in set(hashes) for i in range(len(segments))], 0)
    if not hits:  # the usual answer: new keys
        return out
    positions: dict[tuple[int, int], list[int]] = {}  # (segment, key hash) -> positions holding it
    for i, h, pos in hits:
        positions.setdefault((i, h), []).append(pos)
    for q, (t, h) in enumerate(zip(typed, hashes)):
        for i in range(len(segments) - 1, -1, -1):  # the newest segment holding the key decides
            at = positions.get((i, h))
            doc_id = segments[i].find_at(t, at) if at else None
            if doc_id is not None:
                out[q] = (i, doc_id)
                break
    return out


class KeySegment(_Bound[SegmentMeta]):
    """A bulk load's documents: keys, fingerprints and the key-hash index, bound to a transaction."""

    def __init__(self, txn: lmdb.Transaction, db: Any, cache: TierCache, meta: SegmentMeta) -> None:
        super().__init__(txn, db, cache, meta)
        self.base: int = meta.base

    def holds(self, doc_id: int) -> bool:
        return self.base <= doc_id < self.base + self.count

    def fps_at(self, ordinals: np.ndarray) -> np.ndarray:
        return CodecRun(self._txn, self._db, self._cache, self.meta.fps).at(ordinals)

    def key_at(self, ordinal: int) -> bytes:
        return self.keys_at([ordinal])[0]

    def keys_at(self, ordinals: list[int]) -> list[bytes]:
        """Typed keys of many ordinals, decoding each key block once."""
        if self.meta.int_keys is not None:
            return [b"i" + v.to_bytes(8, "big") for v in self._column_keys(ordinals)]
        out: list[bytes] = []
        blocks: dict[int, Any] = {}
        for ordinal in ordinals:
            block, offset = divmod(ordinal, KEY_BLOCK)
            decoded = blocks.get(block)
            if decoded is None:
                decoded = blocks[block] = self._key_block(block)
            tag, body = decoded
            if tag == b"I":
                if offset >= len(body) // 8:
                    raise CorruptionError(f"segment {self.meta.id} key block {block} is too short")
                out.append(b"i" + body[offset * 8 : offset * 8 + 8][::-1])
            else:
                if offset >= len(body) or not isinstance(body[offset], bytes):
                    raise CorruptionError(f"segment {self.meta.id} key block {block} is malformed")
                out.append(body[offset])
        return out

    def int_or_typed_key(self, ordinal: int, memo: dict[bytes, Any] | None = None) -> int | bytes:
        """The key of one ordinal (a single query's match): an integer key as the int, from its
        column (chunks kept in ``memo``, see :func:`read_packed_list`) or block; any other as its
        typed key."""
        if self.meta.int_keys is not None:
            return self._column_keys([ordinal], memo)[0]
        ints = self.int_keys_at([ordinal])
        return ints[0] if ints is not None else self.keys_at([ordinal])[0]

    def _key_block(self, block: int) -> tuple[bytes, Any]:
        return self._cache.key_block(self.meta.keys, block, lambda: self._decode_key_block(block))

    def int_keys_at(self, ordinals: list[int], memo: dict[bytes, Any] | None = None) -> list[int] | None:
        """The keys of ``ordinals`` when they are all integer keys (a bulk load of integer keys
        stores only those), else None: read straight from the decoded blocks, no typed key made."""
        if self.meta.int_keys is not None:
            return self._column_keys(ordinals, memo)
        out: list[int] = []
        blocks: dict[int, bytes] = {}
        for ordinal in ordinals:
            block, offset = divmod(ordinal, KEY_BLOCK)
            body = blocks.get(block)
            if body is None:
                tag, body = self._key_block(block)
                if tag != b"I":
                    return None
                blocks[block] = body
            if offset >= len(body) >> 3:
                raise CorruptionError(f"segment {self.meta.id} key block {block} is too short")
            out.append(int.from_bytes(body[offset * 8 : offset * 8 + 8], "little"))
        return out

    def _column_keys(self, ordinals: list[int], memo: dict[bytes, Any] | None = None) -> list[int]:
        """Integer keys of ``ordinals`` read in place from the packed key column: a lookup reads
        one chunk view and a few bytes of it, where a zstd block decodes 2 KiB."""
        column = self.meta.int_keys
        assert column is not None
        return read_packed_list(self._txn, self._db, column.prefix, column, ordinals, memo)

    def _decode_key_block(self, block: int) -> tuple[bytes, Any]:
        if not 0 <= block < self.meta.key_blocks:
            raise CorruptionError(f"segment {self.meta.id} has no key block {block}")
        raw = self._txn.get(_chunk_key(self.meta.keys, b"K", block), db=self._db)
        if raw is None:
            raise CorruptionError(f"segment {self.meta.id} lacks key block {block}")
        data = bounded_decompress(bytes(raw), MAX_KEY_BLOCK_BYTES, f"segment {self.meta.id} key block {block}")
        tag, body = data[:1], data[1:]
        if tag == b"I":
            if len(body) % 8:
                raise CorruptionError(f"segment {self.meta.id} key block {block} has a partial key")
            return tag, body
        if tag == b"M":
            try:
                keys = msgpack.unpackb(body, raw=False, max_bin_len=1 << 24, max_array_len=KEY_BLOCK)
            except Exception as exc:
                raise CorruptionError(f"segment {self.meta.id} key block {block} does not decode: {exc}") from None
            if not isinstance(keys, list) or not all(isinstance(k, bytes) for k in keys):
                raise CorruptionError(f"segment {self.meta.id} key block {block} is malformed")
            return tag, keys
        raise CorruptionError(f"segment {self.meta.id} key block {block} has unknown tag {tag!r}")

    def find_many(self, typed: Sequence[bytes], hashes: np.ndarray) -> dict[int, int]:
        """For keys (with their :func:`key_hash` values): key index -> id, for those stored here
        (dead or alive). Hash positions are found in one merge, keys checked a block at a time."""
        if not len(typed):
            return {}
        table = self._hash_run()
        if len(hashes) > 1 and bool(np.all(hashes[1:] >= hashes[:-1])):
            # Sorted already (a bulk load sorts its run's hashes once for every segment): the
            # distinct values without numpy's sort.
            first = np.empty(len(hashes), dtype=bool)
            first[0] = True
            np.not_equal(hashes[1:], hashes[:-1], out=first[1:])
            uniq, inverse = hashes[first], np.cumsum(first) - 1
        else:
            uniq, inverse = np.unique(hashes, return_inverse=True)
        hi, pos = table.positions(uniq)
        if not len(pos):
            return {}
        ordinals = read_packed(self._txn, self._db, self.meta.ordinals.prefix, self.meta.ordinals, pos)
        if len(ordinals) and int(ordinals.max()) >= self.count:
            raise CorruptionError(f"segment {self.meta.id} key index points past its keys")
        stored = self.keys_at(ordinals.tolist())
        by_hash: dict[int, list[tuple[bytes, int]]] = {}
        for h_index, key, ordinal in zip(hi.tolist(), stored, ordinals.tolist()):
            by_hash.setdefault(h_index, []).append((key, ordinal))
        out: dict[int, int] = {}
        for i, h_index in enumerate(inverse.tolist()):
            for key, ordinal in by_hash.get(h_index, ()):
                if key == typed[i]:
                    out[i] = self.base + ordinal
                    break
        return out

    def hash_table(self) -> Any:
        """The kernel's probe table of this segment's sorted key hashes (cached)."""
        hashes = self._hash_run()
        return self._cache.probe_table(hashes.prefix, hashes.index, hashes._names)

    def _hash_run(self) -> CodecRun:
        """The segment's sorted key hashes, one per document: a run of another length (a damaged
        or misplaced index) would lose keys or find keys that are not here."""
        hashes = CodecRun(self._txn, self._db, self._cache, self.meta.hashes)
        if hashes.index.count != self.count:
            raise CorruptionError(f"segment {self.meta.id} holds {self.count:,} documents but {hashes.index.count:,} key hashes")
        return hashes

    def find_at(self, typed: bytes, positions: list[int]) -> int | None:
        """Id of ``typed`` among the keys at ``positions`` of the sorted key hashes (the positions
        holding its hash), or None."""
        if not positions:
            return None
        # A key's hash is held by one position, rarely a few: plain ints, not numpy's fixed costs.
        for ordinal in read_packed_list(self._txn, self._db, self.meta.ordinals.prefix, self.meta.ordinals, positions):
            if ordinal >= self.count:
                raise CorruptionError(f"segment {self.meta.id} key index points past its keys")
            if self.key_at(ordinal) == typed:
                return self.base + ordinal
        return None

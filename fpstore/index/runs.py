"""Immutable sorted runs: one table's permuted fingerprints, sorted, Rice coded in blocks.

A run holds a sorted multiset of uint64 keys (duplicates allowed) for one permutation table. The
keys are cut into blocks of ``block_entries`` (256 by default) consecutive keys; each block stores
its gaps Rice coded (see :mod:`fpstore.index._runs_py` for the block format), and blocks are packed into
chunks of at most ``chunk_bytes`` (4 MiB by default, 256 KiB as the store writes them: see
:data:`fpstore.index.tiers.RUN_CHUNK_BYTES`; a block never spans two chunks), which the
store keeps as one LMDB value each. A :class:`RunIndex` (per block: first key, chunk, byte offset,
entry count; per chunk: length and CRC-32) lets a probe decode exactly the blocks it needs. The
byte layouts are in ``docs/format.md``.

Chunks come from disk and are untrusted: every decoder checks lengths and ranges and raises
:class:`~fpstore.errors.CorruptionError` instead of reading out of bounds; decoded keys always lie
within the range the index gives their block. Arrays returned never point into a caller's
buffer (an LMDB view must not outlive its transaction).

The loops run in the kernel ``fpstore._runs_c`` (or its twin ``fpstore.index._runs_py`` under
``FPSTORE_PUREPYTHON=1``); this module validates arguments, frames chunks and owns the index.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fpstore._backend import load
from fpstore.errors import CorruptionError, FormatError, InputError
from fpstore.index.arrays import int_in, sorted_u64_array, u64_array

__all__ = [
    "DEFAULT_BLOCK_ENTRIES",
    "DEFAULT_CHUNK_BYTES",
    "RUN_FORMAT_VERSION",
    "RunEncoder",
    "RunIndex",
    "chunk_views",
    "decode_block",
    "decode_chunk",
    "decode_run",
    "encode_run",
    "fill_restarts",
    "find_block",
    "max_block_bytes",
    "probe",
    "probe_batch",
    "probe_batch_run",
    "probe_design",
    "probe_fingerprint",
    "probe_fingerprints",
    "probe_positions",
    "probe_table",
    "probe_tables",
]

_kernel = load("runs")

#: Version of the run index and block format written by this build (the only one it reads).
RUN_FORMAT_VERSION = 1
#: Keys per block. Measured (docs/format.md): 256 costs 0.3 bit/key of index and header,
#: against 0.6 at 128; decoding one block still takes under 1 µs.
DEFAULT_BLOCK_ENTRIES = 256
#: Bytes per chunk (one LMDB value): big enough that per-value overhead vanishes, small enough
#: that compaction does not fragment the free list with huge overflow runs.
DEFAULT_CHUNK_BYTES = 4 << 20

_MAGIC = b"FPRI"
# magic, version, flags, block_entries, nchunks, nblocks, count, last_key
_HEADER = struct.Struct("<4sHHIIQQQ")
_CRC = struct.Struct("<I")
_BLOCK_RECORD = 8 + 4 + 2  # first key, offset, entry count
_CHUNK_RECORD = 4 + 4 + 4  # first block, length, CRC-32
_M64 = (1 << 64) - 1
_MAX_CHUNK_BYTES = (1 << 32) - 1
_U64 = np.uint64

_REASONS = {
    _kernel.ERR_COUNT: "entry count outside 1..65535",
    _kernel.ERR_BOUNDS: "block byte range outside its chunk",
    _kernel.ERR_RANGE: "a key falls outside the block's key range",
    _kernel.ERR_PARAM: "Rice parameter above 63",
    _kernel.ERR_SHORT: "the block is shorter than its entries need",
    _kernel.ERR_TRAILING: "bytes or bits after the block's last entry",
}

#: What each failed check of :meth:`RunIndex._check` says.
_INDEX_FAULTS = {
    _kernel.IX_ENTRIES: "a block's entry count is outside 1..{block_entries}",
    _kernel.IX_SUM: "block entry counts sum to {total}, not {count}",
    _kernel.IX_KEYS: "first keys are not ascending",
    _kernel.IX_LAST: "last key below the last block's first key",
    _kernel.IX_CHUNKS: "blocks do not fill chunks 0..nchunks-1 in order",
    _kernel.IX_FIRST: "a chunk's first block does not start at byte 0",
    _kernel.IX_ORDER: "block offsets within a chunk are not increasing",
    _kernel.IX_END: "a block starts at or beyond its chunk's end",
}

ChunkGetter = Callable[[int], Any]


def max_block_bytes(block_entries: int) -> int:
    """Upper bound on one encoded block's size for ``block_entries`` keys per block.

    The encoder's choice of Rice parameter keeps every block within ``1 + (66 m + 14) // 8`` bytes
    for ``m = block_entries - 1`` coded gaps, whatever the keys; a chunk must hold at least one.
    """
    return 1 + (66 * (block_entries - 1) + 14) // 8


def _frozen(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def _index_array(values: object, dtype: type, name: str) -> np.ndarray:
    """A 1-D copy of ``values`` as ``dtype``; CorruptionError for non-integers or values that do
    not fit (a plain cast would wrap them silently)."""
    if isinstance(values, np.ndarray) and values.ndim == 1 and values.dtype == dtype:
        return values.copy()  # (its dtype bounds its values: an index read from bytes)
    try:
        orig = np.asarray(values)
    except (TypeError, ValueError) as exc:
        raise CorruptionError(f"run index: {name} is not an array ({exc})") from exc
    if orig.ndim != 1 or (orig.size and orig.dtype.kind not in "ui"):
        raise CorruptionError(f"run index: {name} must be a 1-D integer array, got {orig.dtype} {orig.shape}")
    if orig.size and (int(orig.min()) < 0 or int(orig.max()) > int(np.iinfo(dtype).max)):
        raise CorruptionError(f"run index: {name} has values outside {np.dtype(dtype).name}")
    return orig.astype(dtype)  # always a copy


@dataclass(frozen=True, eq=False)
class RunIndex:
    """The block index of one run: enough to find, bound and decode any block.

    Arrays are read-only, native byte order, one entry per block (``first_keys`` uint64,
    ``chunk`` uint32, ``offset`` uint32 byte offset in its chunk, ``nentries`` uint16) or per
    chunk (``chunk_len`` uint32 bytes, ``chunk_crc`` uint32 CRC-32 of the chunk's bytes).
    ``last_key`` is the run's largest key (0 when empty); ``block_entries`` the block size the
    encoder used (every block but the last is full with the encoder of this module).

    Construction checks every invariant (counts, ordering, offsets) and raises
    :class:`CorruptionError` when one fails, so an index from :meth:`from_bytes` is consistent.
    """

    count: int
    block_entries: int
    last_key: int
    first_keys: np.ndarray
    chunk: np.ndarray
    offset: np.ndarray
    nentries: np.ndarray
    chunk_len: np.ndarray
    chunk_crc: np.ndarray
    # Derived once, for the kernels: int64 starts/ends/counts, uint64 bounds (first keys then
    # last_key: block b's keys lie in [bounds[b], bounds[b+1]]), entry and chunk starts.
    _starts: np.ndarray = field(init=False, repr=False)
    _ends: np.ndarray = field(init=False, repr=False)
    _counts: np.ndarray = field(init=False, repr=False)
    _bounds: np.ndarray = field(init=False, repr=False)
    _entry_start: np.ndarray = field(init=False, repr=False)
    _chunk_start: np.ndarray = field(init=False, repr=False)
    #: Bytes of its arrays (what a cache of indexes counts it as).
    owned_nbytes: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        put = object.__setattr__
        for name, dtype in (
            ("first_keys", np.uint64),
            ("chunk", np.uint32),
            ("offset", np.uint32),
            ("nentries", np.uint16),
            ("chunk_len", np.uint32),
            ("chunk_crc", np.uint32),
        ):
            put(self, name, _frozen(_index_array(getattr(self, name), dtype, name)))
        for name in ("count", "block_entries", "last_key"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise CorruptionError(f"run index: {name} must be an int, got {type(value).__name__}")
            put(self, name, int(value))
        derived = self._check()
        if derived is None:  # an empty run
            nc = self.nchunks
            derived = (np.zeros(0, np.int64),) * 3 + (
                np.array([self.last_key], np.uint64),
                np.zeros(1, np.int64),
                np.zeros(nc + 1, np.int64),
            )
        for name, a in zip(("_starts", "_ends", "_counts", "_bounds", "_entry_start", "_chunk_start"), derived):
            put(self, name, _frozen(a))
        arrays = (self.first_keys, self.chunk, self.offset, self.nentries, self.chunk_len, self.chunk_crc, *derived)
        put(self, "owned_nbytes", sum(a.nbytes for a in arrays))

    def _check(self) -> tuple[np.ndarray, ...] | None:
        """Every invariant of a well-formed index, CorruptionError naming the first that fails;
        then the arrays the kernels read (``_starts`` .. ``_chunk_start``), or None for an empty
        run."""

        def bad(what: str) -> CorruptionError:
            return CorruptionError(f"run index: {what}; the index is damaged (rebuild the run)")

        nb, nc = self.nblocks, self.nchunks
        if not 1 <= self.block_entries <= _kernel.MAX_BLOCK_ENTRIES:
            raise bad(f"block_entries {self.block_entries} outside 1..65535")
        if not 0 <= self.last_key <= _M64 or not 0 <= self.count <= _M64:
            raise bad("count or last_key outside 0..2**64-1")
        if len(self.chunk) != nb or len(self.offset) != nb or len(self.nentries) != nb:
            raise bad("per-block arrays differ in length")
        if len(self.chunk_crc) != nc:
            raise bad("per-chunk arrays differ in length")
        if nb == 0 or nc == 0 or self.count == 0:
            if nb or nc or self.count or self.last_key:
                raise bad(f"empty run with {nb} blocks, {nc} chunks, count {self.count}")
            return None
        code, detail, derived = _kernel.index_check(
            self.first_keys, self.chunk, self.offset, self.nentries, self.chunk_len, self.count, self.last_key, self.block_entries
        )
        if code == _kernel.IX_DENSE:
            b = detail
            same = b + 1 < nb and self.chunk[b + 1] == self.chunk[b]
            end = int(self.offset[b + 1]) if same else int(self.chunk_len[self.chunk[b]])
            raise CorruptionError(
                f"run index: block {b} claims {int(self.nentries[b])} entries in {end - int(self.offset[b])} bytes, more than "
                "those bytes can hold; the index is damaged (rebuild the run)"
            )
        if code:
            raise bad(_INDEX_FAULTS[code].format(block_entries=self.block_entries, total=detail, count=self.count))
        return derived

    @property
    def nblocks(self) -> int:
        """Number of blocks."""
        return len(self.first_keys)

    @property
    def nchunks(self) -> int:
        """Number of chunks."""
        return len(self.chunk_len)

    @property
    def entry_start(self) -> np.ndarray:
        """int64[nblocks + 1], read-only: position in the run of each block's first key, then count."""
        return self._entry_start

    def nbytes(self) -> int:
        """Bytes of :meth:`to_bytes`' output."""
        return _HEADER.size + _BLOCK_RECORD * self.nblocks + _CHUNK_RECORD * self.nchunks + _CRC.size

    def to_bytes(self) -> bytes:
        """The index's bytes: header, little-endian arrays, CRC-32 (layout in docs/format.md)."""
        header = _HEADER.pack(_MAGIC, RUN_FORMAT_VERSION, 0, self.block_entries, self.nchunks, self.nblocks, self.count, self.last_key)
        body = b"".join(
            (
                header,
                self.first_keys.astype("<u8").tobytes(),
                self.offset.astype("<u4").tobytes(),
                self.nentries.astype("<u2").tobytes(),
                self._chunk_start[:-1].astype("<u4").tobytes(),
                self.chunk_len.astype("<u4").tobytes(),
                self.chunk_crc.astype("<u4").tobytes(),
            )
        )
        return body + _CRC.pack(zlib.crc32(body))

    @classmethod
    def from_bytes(cls, buf: bytes | bytearray | memoryview) -> RunIndex:
        """Parse :meth:`to_bytes` output. The bytes are untrusted: every length, the checksum,
        the version and every invariant are checked. Raises :class:`CorruptionError` for damaged
        bytes and :class:`FormatError` for an index of a version or feature this build does not
        read. The result holds copies, never views of ``buf``."""
        try:
            data = bytes(memoryview(buf).cast("B"))
        except TypeError as exc:
            raise InputError(f"run index bytes must be a bytes-like object, got {type(buf).__name__}") from exc
        if data[:4] != _MAGIC:
            raise CorruptionError(f"not a run index: bytes start {data[:4]!r}, expected {_MAGIC!r}")
        if len(data) < 8:
            raise CorruptionError(f"run index truncated: {len(data)} bytes")
        (version,) = struct.unpack_from("<H", data, 4)
        if version != RUN_FORMAT_VERSION:
            raise FormatError(f"run index format version {version}; this build reads version {RUN_FORMAT_VERSION} (upgrade fpstore)")
        if len(data) < _HEADER.size + _CRC.size:
            raise CorruptionError(f"run index truncated: {len(data)} bytes")
        _, _, flags, block_entries, nchunks, nblocks, count, last_key = _HEADER.unpack_from(data)
        want = _HEADER.size + _BLOCK_RECORD * nblocks + _CHUNK_RECORD * nchunks + _CRC.size
        if len(data) != want:
            raise CorruptionError(f"run index is {len(data)} bytes; its header ({nblocks} blocks, {nchunks} chunks) says {want}")
        (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
        if zlib.crc32(memoryview(data)[: -_CRC.size]) != crc:
            raise CorruptionError("run index checksum mismatch: the index is damaged (rebuild the run)")
        if flags != 0:
            raise FormatError(f"run index requires features 0x{flags:04x} this build does not know (upgrade fpstore)")
        pos = _HEADER.size

        def take(dtype: str, n: int) -> np.ndarray:
            nonlocal pos
            a = np.frombuffer(data, dtype=dtype, count=n, offset=pos)  # the constructor copies
            pos += a.nbytes
            return a

        first_keys = take("<u8", nblocks)
        offset = take("<u4", nblocks)
        nentries = take("<u2", nblocks)
        chunk_first = take("<u4", nchunks).astype(np.int64)
        chunk_len = take("<u4", nchunks)
        chunk_crc = take("<u4", nchunks)
        if nchunks and (chunk_first[0] != 0 or np.any(np.diff(chunk_first) <= 0) or chunk_first[-1] >= nblocks):
            raise CorruptionError("run index: chunk first blocks are not increasing from 0 within the blocks")
        sizes = np.diff(np.append(chunk_first, nblocks))
        chunk = np.repeat(np.arange(nchunks, dtype=np.uint32), sizes)
        return cls(
            count=count,
            block_entries=block_entries,
            last_key=last_key,
            first_keys=first_keys,
            chunk=chunk,
            offset=offset,
            nentries=nentries,
            chunk_len=chunk_len,
            chunk_crc=chunk_crc,
        )


# ------------------------------------------------------------------------------------ validation


def _bytes_view(chunk: object, index: RunIndex, chunk_no: int) -> np.ndarray:
    """A zero-copy uint8 view of chunk ``chunk_no``'s bytes, after checking its length."""
    if chunk is None:  # what a getter over an LMDB lookup returns for an absent value
        raise CorruptionError(f"run chunk {chunk_no} is missing")
    try:
        buf = np.frombuffer(chunk, dtype=np.uint8)  # type: ignore[call-overload]  # any object: a TypeError is reported below
    except (TypeError, ValueError) as exc:
        raise InputError(f"chunk {chunk_no} must be a bytes-like object, got {type(chunk).__name__}") from exc
    want = int(index.chunk_len[chunk_no])
    if len(buf) != want:
        raise CorruptionError(f"run chunk {chunk_no} is {len(buf)} bytes; the index says {want} (truncated or damaged)")
    return buf


def _corrupt(index: RunIndex, err: int, block: int) -> CorruptionError:
    c = int(index.chunk[block])
    return CorruptionError(
        f"run block {block} (chunk {c}, bytes {int(index._starts[block])}..{int(index._ends[block])}): "
        f"{_REASONS.get(err, f'error {err}')}; the run is damaged (rebuild it, or restore a copy)"
    )


def _check_last(index: RunIndex, last_block: int, out: np.ndarray) -> None:
    if last_block == index.nblocks - 1 and int(out[-1]) != index.last_key:
        raise CorruptionError(f"run block {last_block} ends at key {int(out[-1])}, the index says the run ends at {index.last_key}")


def _decode_range(buf: np.ndarray, index: RunIndex, b0: int, b1: int, out: np.ndarray) -> None:
    """Decode blocks b0..b1-1 (all in one chunk, whose bytes are ``buf``) into ``out``."""
    err, j = _kernel.decode_blocks(buf, index._starts[b0:b1], index._ends[b0:b1], index._counts[b0:b1], index._bounds[b0 : b1 + 1], out)
    if err:
        raise _corrupt(index, err, b0 + j)
    _check_last(index, b1 - 1, out)


# ---------------------------------------------------------------------------------------- encode


def encode_run(
    sorted_keys: np.ndarray,
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    block_entries: int = DEFAULT_BLOCK_ENTRIES,
) -> tuple[RunIndex, list[bytes]]:
    """Encode sorted uint64 keys into a run: its index and its chunks' bytes.

    ``sorted_keys`` must be a 1-D numpy uint64 array sorted ascending (duplicates allowed);
    anything else raises :class:`InputError`. ``chunk_bytes`` (at most 2**32 - 1) must hold at least
    one block of the worst case, :func:`max_block_bytes` of ``block_entries`` (1..65535). The
    output is deterministic: the same keys and parameters give the same bytes. Memory beyond the
    input and the output is one chunk buffer. :class:`RunEncoder` makes the same run from keys
    given in pieces.
    """
    keys = u64_array(sorted_keys, "sorted_keys")
    encoder = RunEncoder(chunk_bytes=chunk_bytes, block_entries=block_entries, batch_keys=len(keys) + 1)
    encoder._take(keys)  # all of them pending, their order checked by the kernel as it encodes
    return encoder.finish()


def _encode_chunks(keys: np.ndarray, bsz: int, cap: int, final: bool) -> tuple[list[bytes], np.ndarray, np.ndarray]:
    """Chunks of ``keys`` as :func:`encode_run` packs them (each takes blocks while the next one
    fits), with each block's chunk and offset; without ``final`` only whole blocks are encoded."""
    usable = len(keys) if final else len(keys) - len(keys) % bsz
    nb = -(-usable // bsz)
    offsets = np.zeros(nb, np.uint32)
    chunk_of = np.zeros(nb, np.uint32)
    buf = np.empty(min(cap, nb * max_block_bytes(bsz)), np.uint8)
    view = keys[:usable]
    chunks: list[bytes] = []
    b = 0
    while b < nb:
        err, done, used = _kernel.encode_chunk(view, bsz, b, buf, offsets)
        if err == _kernel.ERR_UNSORTED:
            sorted_u64_array(view, "sorted_keys")  # raises, naming the first descent
            raise InputError("sorted_keys must be sorted ascending")  # pragma: no cover - raised above
        if err or done == 0:  # pragma: no cover - max_block_bytes guarantees progress
            raise RuntimeError(f"run encoder made no progress at block {b} (error {err})")
        chunk_of[b : b + done] = len(chunks)
        chunks.append(buf[:used].tobytes())
        b += done
    return chunks, chunk_of, offsets


class RunEncoder:
    """:func:`encode_run` of sorted keys given in ascending pieces, in bounded memory.

    :meth:`add` hands out each chunk once no later key can join it; :meth:`finish` the last
    chunks and the index. The bytes are those :func:`encode_run` makes of all the keys at once: a
    chunk takes blocks while the next one fits, so the chunk being filled when a piece runs out is
    kept back (its keys encoded again with the next piece). Memory: about ``batch_keys`` keys
    pending, a chunk's keys kept back, and the index.
    """

    def __init__(
        self, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES, block_entries: int = DEFAULT_BLOCK_ENTRIES, batch_keys: int = 1 << 20
    ) -> None:
        self._bsz = int_in(block_entries, "block_entries", 1, _kernel.MAX_BLOCK_ENTRIES)
        self._cap = int_in(chunk_bytes, "chunk_bytes", max_block_bytes(self._bsz), _MAX_CHUNK_BYTES)
        self._batch = int_in(batch_keys, "batch_keys", 1, 1 << 62)
        self._pending: list[np.ndarray] = []
        self._npending = 0
        self._last: int | None = None
        self._count = 0  # keys in the chunks handed out
        self._nchunks = 0
        self._first_keys: list[np.ndarray] = []
        self._chunk: list[np.ndarray] = []
        self._offset: list[np.ndarray] = []
        self._chunk_len: list[int] = []
        self._crc: list[int] = []
        self._finished = False

    def add(self, sorted_keys: np.ndarray) -> list[bytes]:
        """Take the next keys (sorted, none below the last key given); the chunks now complete."""
        return self._take(sorted_u64_array(sorted_keys, "sorted_keys"))

    def _take(self, keys: np.ndarray) -> list[bytes]:
        if self._finished:
            raise InputError("this run is finished: no keys can be added")
        if not len(keys):
            return []
        if self._last is not None and int(keys[0]) < self._last:
            raise InputError(f"keys must ascend across pieces: {int(keys[0])} follows {self._last}")
        self._last = int(keys[-1])
        self._pending.append(keys)
        self._npending += len(keys)
        return self._encode(final=False) if self._npending >= self._batch else []

    def finish(self) -> tuple[RunIndex, list[bytes]]:
        """The run's index, and the chunks not handed out yet."""
        if self._finished:
            raise InputError("this run is finished already")
        chunks = self._encode(final=True)
        self._finished = True
        bsz = self._bsz
        first_keys = np.concatenate(self._first_keys) if self._first_keys else np.zeros(0, np.uint64)
        nb = len(first_keys)
        nentries = np.full(nb, bsz, np.uint16)
        if nb:
            nentries[-1] = self._count - (nb - 1) * bsz
        index = RunIndex(
            count=self._count,
            block_entries=bsz,
            last_key=self._last if self._last is not None and self._count else 0,
            first_keys=first_keys,
            chunk=np.concatenate(self._chunk) if self._chunk else np.zeros(0, np.uint32),
            offset=np.concatenate(self._offset) if self._offset else np.zeros(0, np.uint32),
            nentries=nentries,
            chunk_len=np.array(self._chunk_len, np.uint32),
            chunk_crc=np.array(self._crc, np.uint32),
        )
        return index, chunks

    def _encode(self, final: bool) -> list[bytes]:
        if not self._pending:
            keys = np.zeros(0, np.uint64)
        else:
            keys = self._pending[0] if len(self._pending) == 1 else np.concatenate(self._pending)
        chunks, chunk_of, offsets = _encode_chunks(keys, self._bsz, self._cap, final)
        keep = len(chunks) if final else len(chunks) - 1  # the last chunk may take later blocks
        if keep <= 0:
            self._pending = [keys]
            return []
        blocks = len(chunk_of) if final else int(np.searchsorted(chunk_of, keep))
        nkeys = len(keys) if final else blocks * self._bsz
        self._first_keys.append(keys[: nkeys : self._bsz].copy())
        self._chunk.append(chunk_of[:blocks] + np.uint32(self._nchunks))
        self._offset.append(offsets[:blocks])
        self._chunk_len += [len(c) for c in chunks[:keep]]
        self._crc += [zlib.crc32(c) for c in chunks[:keep]]
        self._nchunks += keep
        self._count += nkeys
        rest = keys[nkeys:].copy()  # a copy: the pieces given are not kept alive by a view
        self._pending, self._npending = ([rest] if len(rest) else []), len(rest)
        return chunks[:keep]


# ---------------------------------------------------------------------------------------- decode


def decode_block(chunk: object, index: RunIndex, block: int) -> np.ndarray:
    """The keys (uint64, sorted) of block ``block``, given its chunk's bytes.

    Raises :class:`InputError` for a block number outside the index, :class:`CorruptionError`
    when the chunk's length or the block's bytes disagree with the index.
    """
    b = int_in(block, "block", 0, index.nblocks - 1)
    buf = _bytes_view(chunk, index, int(index.chunk[b]))
    out = np.empty(int(index._counts[b]), np.uint64)
    _decode_range(buf, index, b, b + 1, out)
    return out


def decode_chunk(chunk: object, index: RunIndex, chunk_no: int, *, checksum: bool = False) -> np.ndarray:
    """All keys (uint64, sorted) of chunk ``chunk_no``. With ``checksum=True`` the chunk's CRC-32
    is checked first (a full read of the chunk; not done on probes, nor by the store's checks)."""
    c = int_in(chunk_no, "chunk_no", 0, index.nchunks - 1)
    buf = _bytes_view(chunk, index, c)
    if checksum and zlib.crc32(buf.data) != int(index.chunk_crc[c]):
        raise CorruptionError(f"run chunk {c} checksum mismatch: the chunk is damaged")
    b0, b1 = int(index._chunk_start[c]), int(index._chunk_start[c + 1])
    out = np.empty(int(index._entry_start[b1] - index._entry_start[b0]), np.uint64)
    _decode_range(buf, index, b0, b1, out)
    return out


def chunk_views(chunks_getter: ChunkGetter, index: RunIndex) -> list[np.ndarray]:
    """Every chunk's bytes as a zero-copy uint8 view, each checked to have the length the index
    gives it (CorruptionError for a missing or short chunk). After this, ``index.count`` is
    backed by bytes that exist: an index bounds each block's entries by its bytes, so a count
    can be trusted to size an allocation only once the chunks behind it are known to be there."""
    return [_bytes_view(chunks_getter(c), index, c) for c in range(index.nchunks)]


def decode_run(chunks_getter: ChunkGetter, index: RunIndex, *, checksum: bool = False) -> np.ndarray:
    """Every key of the run (uint64, sorted), reading chunk ``i`` with ``chunks_getter(i)`` (once).

    The chunks' lengths are checked before the output is allocated (see :func:`chunk_views`):
    an index claiming billions of entries over a few real bytes raises CorruptionError, not
    MemoryError.
    """
    views = chunk_views(chunks_getter, index)
    out = np.empty(index.count, np.uint64)
    for c, buf in enumerate(views):
        if checksum and zlib.crc32(buf.data) != int(index.chunk_crc[c]):
            raise CorruptionError(f"run chunk {c} checksum mismatch: the chunk is damaged")
        b0, b1 = int(index._chunk_start[c]), int(index._chunk_start[c + 1])
        _decode_range(buf, index, b0, b1, out[index._entry_start[b0] : index._entry_start[b1]])
    return out


# ----------------------------------------------------------------------------------------- probe


def find_block(index: RunIndex, key: int) -> int:
    """The first block that may hold ``key``, or -1 when none can (empty run, or ``key`` outside
    ``[first_keys[0], last_key]``). Equal keys may continue into the following blocks."""
    v = int_in(key, "key", 0, _M64)
    if index.count == 0 or v < int(index.first_keys[0]) or v > index.last_key:
        return -1
    # Block b holds keys in [bounds[b], bounds[b+1]]: the first b whose upper bound reaches key.
    return int(index._bounds[1:].searchsorted(_U64(v), side="left"))


def probe(chunks_getter: ChunkGetter, index: RunIndex, lo: int, hi: int) -> np.ndarray:
    """All stored keys in ``[lo, hi]`` (inclusive), sorted, duplicates kept.

    Decodes only the blocks whose key range meets ``[lo, hi]``; ``chunks_getter(i)`` returns chunk
    ``i``'s bytes and is called once per chunk needed (the caller owns the I/O).
    """
    return probe_positions(chunks_getter, index, lo, hi)[1]


def probe_positions(chunks_getter: ChunkGetter, index: RunIndex, lo: int, hi: int) -> tuple[int, np.ndarray]:
    """:func:`probe`, and the position in the run of the first key returned (the keys are the
    run's entries ``first .. first + len(keys) - 1``; 0 when none is returned)."""
    lo_v = int_in(lo, "lo", 0, _M64)
    hi_v = int_in(hi, "hi", 0, _M64)
    empty = np.zeros(0, np.uint64)
    if index.count == 0 or lo_v > hi_v or hi_v < int(index.first_keys[0]) or lo_v > index.last_key:
        return 0, empty
    bounds = index._bounds
    # Scalar searches use the method with a numpy scalar: np.searchsorted(arr, int) costs 5x more.
    lo_u, hi_u = _U64(lo_v), _U64(hi_v)
    b0 = int(bounds[1:].searchsorted(lo_u, side="left"))
    b1 = int(bounds[:-1].searchsorted(hi_u, side="right"))  # one past the last block
    first = int(index._entry_start[b0]) if b0 < b1 else 0
    parts = []
    while b0 < b1:
        c = int(index.chunk[b0])
        end = min(b1, int(index._chunk_start[c + 1]))
        buf = _bytes_view(chunks_getter(c), index, c)
        out = np.empty(int(index._entry_start[end] - index._entry_start[b0]), np.uint64)
        _decode_range(buf, index, b0, end, out)
        parts.append(out)
        b0 = end
    if not parts:
        return 0, empty
    keys = np.concatenate(parts) if len(parts) > 1 else parts[0]
    a = int(keys.searchsorted(lo_u, side="left"))
    z = int(keys.searchsorted(hi_u, side="right"))
    if a == z:
        return 0, empty
    return first + a, (keys[a:z].copy() if (a, z) != (0, len(keys)) else keys)


def probe_table(index: RunIndex, names: list[bytes]) -> Any:
    """The kernel's view of one run table (``ProbeTable``) for :func:`probe_tables`; build it once
    per table and keep it (the index is immutable)."""
    return _kernel.ProbeTable(
        index._bounds,
        index._starts,
        index._ends,
        index._counts,
        index.chunk,
        index._chunk_start,
        index.chunk_len,
        index._entry_start,
        names,
    )


def probe_tables(
    tables: list[Any], fetch: Callable[[bytes], Any], ranges: list[tuple[int, int, int, int]], k: int
) -> list[tuple[int, int, int]]:
    """The single-query probe: for each ``(i, lo, hi, query)`` of ``ranges``, the keys of
    ``tables[i]`` in ``[lo, hi]`` within ``k`` bits of ``query``, as ``(i, key, position)``.

    One kernel call for all the tables of a run; ``fetch(name)`` reads a chunk (None: absent).
    Damage raises :class:`CorruptionError`.
    """
    err, i, where, hits = _kernel.probe_tables(tables, fetch, ranges, k)
    if err:
        raise _probe_error(err, i, where)
    return hits


def fill_restarts(table: Any, fetch: Callable[[bytes], Any], what: int = 0) -> None:
    """Decode every block of a kernel probe table once, so that later probes restart inside
    blocks (the compiled kernel records restart points; the Python twin only checks). Damage
    raises :class:`CorruptionError` (``what`` names the table in its message)."""
    err, where = _kernel.fill_restarts(table, fetch)
    if err:
        raise _probe_error(err, what, where)


def probe_design(moves: list[Any], prefix_bits: list[int], flip_masks: list[Any]) -> Any:
    """The kernel's view of a table design (``ProbeDesign``) for :func:`probe_fingerprint`."""
    return _kernel.ProbeDesign(list(moves), list(prefix_bits), [list(m) for m in flip_masks])


def probe_fingerprint(
    design: Any, tables: list[Any], fetch: Callable[[bytes], Any], fp: int, k: int, memo: dict[bytes, Any] | None = None
) -> list[tuple[int, int, int]]:
    """The single query over runs, in one kernel call: ``(run, fingerprint, position)`` of every
    entry within ``k`` of ``fp``, each once (see ``fpstore.index._runs_py.probe_fingerprint``).
    ``fetch(name)`` reads a chunk once per call, or once for every call given the same ``memo``
    (a dict the kernel fills; its buffers are valid while the transaction they came from is)."""
    err, i, where, hits = _kernel.probe_fingerprint(design, tables, fetch, fp, k, memo)
    if err:
        raise _probe_error(err, i, where)
    return hits


def probe_fingerprints(
    design: Any, tables: list[Any], fetch: Callable[[bytes], Any], fps: np.ndarray, k: int, memo: dict[bytes, Any] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`probe_fingerprint` of each of ``fps`` (uint64) in one kernel call: ``(query index,
    run, fingerprint, position)`` arrays, a small batch's answer with no Python object per hit."""
    err, i, where, rows = _kernel.probe_fingerprints(design, tables, fetch, np.ascontiguousarray(fps, dtype=np.uint64), k, memo)
    if err:
        raise _probe_error(err, i, where)
    return rows


def _probe_error(err: int, i: int, where: int) -> CorruptionError:
    if err == _kernel.ERR_MISSING:
        return CorruptionError(f"run table {i}: chunk {where} is missing; the run is damaged")
    if err == _kernel.ERR_LENGTH:
        return CorruptionError(f"run table {i}: chunk {where} has the wrong length (truncated or damaged)")
    if err == _kernel.ERR_UNMATCHED:
        return CorruptionError(f"run table {i}: a fingerprint the run's other tables hold is missing from its table 0; the run is damaged")
    return CorruptionError(f"run table {i}, block {where}: {_REASONS.get(err, f'error {err}')}; the run is damaged")


def _prefix_mask(prefix_bits: int) -> int:
    p = int_in(prefix_bits, "prefix_bits", 0, 64)
    return (_M64 << (64 - p)) & _M64


def _query_slices(index: RunIndex, queries: np.ndarray, mask: int, chunks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each chunk, the slice of sorted queries whose prefix range meets the chunk's key range.

    Chunk c's keys lie in [bounds[first block of c], bounds[first block of c+1]]; a query's range
    is [q & mask, q | ~mask], and both ends grow with q's prefix, so the queries meeting it are
    contiguous (with queries sorted by prefix only, a search for a prefix-aligned bound is exact).
    """
    lo = index._bounds[index._chunk_start[chunks]] & _U64(mask)
    hi = index._bounds[index._chunk_start[chunks + 1]] | _U64(~mask & _M64)
    return np.searchsorted(queries, lo, side="left"), np.searchsorted(queries, hi, side="right")


def probe_batch(
    chunk: object, index: RunIndex, chunk_no: int, queries_sorted: np.ndarray, prefix_bits: int, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Batch probe of one chunk (Manku's batch mode): the merge of sorted queries with its keys.

    For every query ``q`` (uint64 permuted key; ``queries_sorted`` ascending by its top
    ``prefix_bits`` bits, the order within a prefix free: a full sort qualifies) and every stored key
    ``s`` of chunk ``chunk_no`` with the same top ``prefix_bits`` bits (0..64) and
    ``popcount(q ^ s) <= k``, one row: ``(query position, s, distance)`` as three arrays (int64,
    uint64, uint8), ordered by stored key, then query position. A duplicated stored key gives one
    row per copy. Each stored key lives in exactly one chunk, so calling this for every chunk and
    concatenating gives each pair exactly once (see :func:`probe_batch_run`).
    """
    mask = _prefix_mask(prefix_bits)
    queries = sorted_u64_array(queries_sorted, "queries_sorted", int_in(prefix_bits, "prefix_bits", 0, 64))
    kk = int_in(k, "k", 0, 64)
    c = int_in(chunk_no, "chunk_no", 0, index.nchunks - 1)
    buf = _bytes_view(chunk, index, c)
    (qa,), (qb,) = _query_slices(index, queries, mask, np.array([c]))
    b0, b1 = int(index._chunk_start[c]), int(index._chunk_start[c + 1])
    err, j, qpos, keys, dist = _kernel.probe_chunk(
        buf, index._starts[b0:b1], index._ends[b0:b1], index._counts[b0:b1], index._bounds[b0 : b1 + 1], queries[qa:qb], mask, kk
    )
    if err:
        raise _corrupt(index, err, b0 + j)
    return qpos + qa, keys, dist


def probe_run_chunks(
    chunks_getter: ChunkGetter,
    index: RunIndex,
    queries_sorted: np.ndarray,
    prefix_bits: int,
    k: int,
    lookups: np.ndarray | None = None,
    chunks: tuple[int, int] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`probe_batch_run` over chunks ``chunks`` (``(c0, c1)``, all by default) in one
    kernel call, and a lookup of the sorted ``lookups`` (uint64) in the same pass: each block
    that a query's range or a lookup may reach is decoded once.

    Returns ``(qpos, keys, positions, dist, lookup_index, lookup_positions)``: the pairs of
    :func:`probe_batch_run`, each with its stored key and that key's position in the run, then a
    row per stored copy of each lookup found (its index in ``lookups``, its position). Only the
    chunks either reaches are read, on the calling thread.
    """
    mask = _prefix_mask(prefix_bits)
    queries = sorted_u64_array(queries_sorted, "queries_sorted", int_in(prefix_bits, "prefix_bits", 0, 64))
    keys = sorted_u64_array(np.zeros(0, _U64) if lookups is None else lookups, "lookups", 64)
    kk = int_in(k, "k", 0, 64)
    nc = index.nchunks
    c0, c1 = (0, nc) if chunks is None else chunks
    if not 0 <= c0 <= c1 <= nc:
        raise InputError(f"chunks must lie in 0..{nc}, got {chunks}")
    every = np.arange(nc)
    qa, qb = _query_slices(index, queries, mask, every)
    la, lb = _query_slices(index, keys, _M64, every)
    bufs: list[Any] = [None] * nc
    for c in np.flatnonzero((qb[c0:c1] > qa[c0:c1]) | (lb[c0:c1] > la[c0:c1])).tolist():
        bufs[c0 + c] = chunks_getter(c0 + c)
    try:
        err, where, *rows = _kernel.probe_chunks(
            bufs, index.chunk_len, index._chunk_start, index._starts, index._ends, index._counts, index._bounds,
            index._entry_start, c0, c1, queries, qa, qb, mask, kk, keys, la, lb,
        )  # fmt: skip
    except (TypeError, BufferError) as exc:
        raise InputError(f"run chunks must be bytes-like objects: {exc}") from exc
    if err == _kernel.ERR_MISSING:
        raise CorruptionError(f"run chunk {where} is missing")
    if err == _kernel.ERR_LENGTH:
        raise CorruptionError(f"run chunk {where} has a length other than the index's (truncated or damaged)")
    if err:
        raise _corrupt(index, err, where)
    return tuple(rows)


def probe_batch_run(
    chunks_getter: ChunkGetter,
    index: RunIndex,
    queries_sorted: np.ndarray,
    prefix_bits: int,
    k: int,
    *,
    positions: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`probe_batch` over the whole run: reads only the chunks some query's prefix reaches.

    Rows are ordered by stored key, then query position; each (query, stored copy) pair once.
    With ``positions`` the second array holds each stored copy's position in the run (int64)
    instead of its key: ``prefix_bits=64, k=0`` then looks up many keys at once, decoding only
    the blocks that may hold one.
    """
    qpos, keys, at, dist, _, _ = probe_run_chunks(chunks_getter, index, queries_sorted, prefix_bits, k)
    return qpos, at if positions else keys, dist

"""Fuzz targets: every decoder of on-disk bytes, fed untrusted input.

``fuzz_one(target, data)`` runs one decoder on ``data`` and returns "ok" or the name of the
FpstoreError it raised. Anything else (another exception, a result that breaks the decoder's
promise, and of course a crash of the interpreter) is a finding. Used by the hypothesis tests in
tests/test_reliability.py, by the ``fuzz`` worker and by ``tools/torture.py fuzz`` (atheris,
coverage-guided) and ``tools/asan_fuzz.py``."""

from __future__ import annotations

import msgpack
import numpy as np

from tests.support.oracle import SEED

FUZZ_TARGETS = ("run_index", "run_index_crc", "run_chunk", "state", "header", "record", "key_block", "idf", "packed")
_fuzz_cache: dict = {}


def _fuzz_samples() -> list:
    """A few encoded runs (index, chunks, keys) of different shapes, made once per process."""
    if "runs" not in _fuzz_cache:
        from fpstore.index import runs

        rng = np.random.default_rng([SEED, 99])
        out = []
        for n, be, spread in ((1, 16, 64), (7, 4, 8), (300, 16, 20), (700, 64, 64), (260, 32, 3)):
            keys = np.sort(rng.integers(0, 1 << spread, size=n, dtype=np.uint64))
            index, chunks = runs.encode_run(
                keys, block_entries=be, chunk_bytes=max(runs.max_block_bytes(be), 3 * runs.max_block_bytes(be) // 2)
            )
            out.append((index, chunks, keys))
        _fuzz_cache["runs"] = out
    return _fuzz_cache["runs"]


class _FakeTxn:
    """Just enough of an lmdb transaction for the tier readers: ``get`` from a dict."""

    def __init__(self, values: dict) -> None:
        self.values = values

    def get(self, key, db=None):  # noqa: ANN001 - mirrors lmdb.Transaction.get
        return self.values.get(bytes(key))


def fuzz_seeds() -> dict[str, list[bytes]]:
    """Valid inputs for each target (a fuzzer mutates from these)."""
    import zstandard

    from fpstore.fingerprint.pipeline import IdfTable, Pipeline
    from fpstore.store.keys import pack_record
    from fpstore.index.tiers import State

    seeds: dict[str, list[bytes]] = {t: [] for t in FUZZ_TARGETS}
    for n, (index, chunks, _) in enumerate(_fuzz_samples()):
        raw = index.to_bytes()
        seeds["run_index"].append(raw)
        seeds["run_index_crc"].append(raw[6:-4])
        for c, chunk in enumerate(chunks[:3]):
            seeds["run_chunk"].append(bytes([n, c, 0, 0]) + chunk)

    # Records without their CRC-32 (as stores before it wrote them): mutations then reach the
    # decoder's checks instead of the checksum's.
    def without_crc(raw: bytes) -> bytes:
        obj = msgpack.unpackb(raw, raw=False)
        del obj["crc"]
        return msgpack.packb(obj, use_bin_type=True)

    seeds["state"].append(without_crc(State([], []).to_bytes()))
    seeds["state"].append(
        without_crc(
            State(
                [
                    {"id": 1, "count": 5, "tables": [b"s\0\0\0\1f", b"r1", b"r2", b"r3"], "ids": {"base": 1}},
                    {
                        "id": 2,
                        "count": 3,
                        "tables": [b"a", b"b", b"c", b"d"],
                        "ids": {"prefix": b"p", "count": 3, "min": 4, "width": 3, "per_chunk": 65536},
                    },
                ],
                [
                    {
                        "id": 1,
                        "base": 1,
                        "count": 5,
                        "fps": b"f",
                        "hashes": b"h",
                        "keys": b"k",
                        "key_blocks": 1,
                        "ordinals": {"prefix": b"o", "count": 5, "min": 0, "width": 3, "per_chunk": 65536},
                    }
                ],
                3,
                2,
            ).to_bytes()
        )
    )
    pipe = Pipeline()
    from fpstore.index.design import design_for

    header = {
        "magic": "fpstore",
        "format": 1,
        "features": [],
        "pipeline": pipe.config,
        "pipeline_id": pipe.id,
        "design": design_for(3, None, "auto").config(),
        "created": {"fpstore": "x", "time": 0},
    }
    seeds["header"].append(msgpack.packb(header, use_bin_type=True))
    seeds["record"] += [pack_record(b"sdoc-1", 12345, None, 0, 0), pack_record(b"i" + bytes(8), (1 << 64) - 1, bytes(16), 7, 3)]
    cctx = zstandard.ZstdCompressor(level=3)
    seeds["key_block"] += [
        b"\0" + cctx.compress(b"M" + msgpack.packb([b"sa", b"sb", b"i" + bytes(8)], use_bin_type=True)),
        b"\0" + cctx.compress(b"I" + np.arange(5, dtype="<u8").tobytes()),
        b"\1" + b"M" + msgpack.packb([b"sa"], use_bin_type=True),
    ]
    seeds["idf"].append(IdfTable({"the": 1, "cat": 200}, 9).to_bytes())
    seeds["packed"].append(bytes([5, 3, 0, 0]) + bytes(range(16)))
    return seeds


def fuzz_one(target: str, data: bytes) -> str:
    """Run decoder ``target`` on ``data``: "ok" or the FpstoreError class name; anything else is raised."""
    import zlib

    from fpstore.errors import FpstoreError

    try:
        _FUZZ[target](data, zlib)
    except FpstoreError as exc:
        return type(exc).__name__
    return "ok"


def _fz_run_index(data: bytes, zlib) -> None:
    from fpstore.index import runs

    runs.RunIndex.from_bytes(data)


def _fz_run_index_crc(data: bytes, zlib) -> None:
    """Magic, version and checksum made right, so that the structural checks see the rest."""
    from fpstore.index import runs

    body = b"FPRI\x01\x00" + data
    idx = runs.RunIndex.from_bytes(body + zlib.crc32(body).to_bytes(4, "little"))
    # An index that parsed is consistent: decoding all-zero chunks of the right lengths either
    # works or raises CorruptionError (never reads out of bounds).
    if idx.nchunks and int(idx.chunk_len.max()) <= 1 << 16:
        chunks = [bytes(int(n)) for n in idx.chunk_len]
        runs.decode_run(lambda c: chunks[c], idx)


def _fz_run_chunk(data: bytes, zlib) -> None:
    """A sample run's index with fuzzed bytes for one chunk, through every chunk decoder."""
    from fpstore.index import runs

    if len(data) < 4:
        return
    samples = _fuzz_samples()
    index, chunks, _keys = samples[data[0] % len(samples)]
    c = data[1] % index.nchunks
    op = data[2]
    chunk = data[4:]
    if op & 1:  # make the length right so the block decoders run
        want = int(index.chunk_len[c])
        chunk = (chunk + bytes(want))[:want]
    getter = lambda i: chunk if i == c else chunks[i]  # noqa: E731
    b0, b1 = int(index._chunk_start[c]), int(index._chunk_start[c + 1])
    lo_key, hi_key = int(index._bounds[b0]), int(index._bounds[b1])
    try:
        got = runs.decode_chunk(chunk, index, c)
    except runs.CorruptionError:
        pass
    else:
        # The module's promise: decoded keys are sorted and lie within their blocks' bounds.
        if len(got) != int(index._entry_start[b1] - index._entry_start[b0]):
            raise AssertionError("decode_chunk returned the wrong number of keys")
        if len(got) and (np.any(got[1:] < got[:-1]) or int(got[0]) < lo_key or int(got[-1]) > hi_key):
            raise AssertionError("decode_chunk returned keys out of order or outside the chunk's bounds")
    damage = None
    for b in range(b0, b1):
        try:
            runs.decode_block(chunk, index, b)
        except runs.CorruptionError as exc:
            damage = damage or exc
    lo = lo_key + (op >> 1) % 7
    hi = max(lo, hi_key - (op >> 4))
    for fn in (
        lambda: runs.probe(getter, index, lo, hi),
        # The single-query kernel, chunk names being chunk numbers: a range probe (decoding
        # stops past hi) and an exact lookup.
        lambda: runs.probe_tables([runs.probe_table(index, list(range(index.nchunks)))], getter, [(0, lo, hi, lo)], 64),
        lambda: runs.probe_tables([runs.probe_table(index, list(range(index.nchunks)))], getter, [(0, lo, lo, lo)], 0),
        # The batch merge: one chunk through probe_chunk, the run through probe_chunks.
        lambda: runs.probe_batch(chunk, index, c, np.array([lo, hi], np.uint64), 8, 64),
        lambda: runs.probe_batch_run(getter, index, np.array([lo, hi], np.uint64), 8, 64),
        lambda: runs.decode_run(getter, index, checksum=bool(op & 2)),
    ):
        try:
            fn()
        except runs.CorruptionError as exc:
            damage = damage or exc
    if damage is not None:
        raise damage


def _fz_state(data: bytes, zlib) -> None:
    from fpstore.index.tiers import State

    State.from_bytes(data, 4)


def _fz_header(data: bytes, zlib) -> None:
    """The store header as an opening store decodes it: header, design, pipeline."""
    from fpstore.index.design import Design
    from fpstore.errors import DesignError, FormatError
    from fpstore.fingerprint.pipeline import Pipeline
    from fpstore.store.header import decode_header

    header = decode_header(data, "fuzz")
    try:
        Design.from_config(header["design"])
    except DesignError:
        pass
    try:
        pipe = Pipeline.from_config(header["pipeline"], None)
    except FormatError:
        return
    if pipe.id != header["pipeline_id"]:
        return


def _fz_record(data: bytes, zlib) -> None:
    from fpstore.store.keys import unpack_record, untyped_key

    typed, *_ = unpack_record(data)
    untyped_key(typed)


def _fz_key_block(data: bytes, zlib) -> None:
    """A segment's key block (zstd-compressed when the first byte is even) read as a lookup would."""
    import zstandard

    from fpstore.index.tiers import KEY_BLOCK, KeySegment, PackedColumn, SegmentMeta, TierCache

    if not data:
        return
    body = data[1:]
    if data[0] % 2 == 1:
        body = zstandard.ZstdCompressor(level=1).compress(body)
    seg = KeySegment(
        _FakeTxn({b"kK" + bytes(4): body}),
        None,
        TierCache(),
        SegmentMeta(1, 1, KEY_BLOCK, b"f", b"h", PackedColumn(b"o", KEY_BLOCK, 0, 0, 1), b"k", 1),
    )
    seg.keys_at([0, 1, 2, KEY_BLOCK - 1][: 1 + data[0] % 4])


def _fz_idf(data: bytes, zlib) -> None:
    from fpstore.fingerprint.pipeline import IdfTable

    IdfTable.from_bytes(data)


def _fz_packed(data: bytes, zlib) -> None:
    """A packed column chunk (width and count from the first bytes) read at a few positions, by
    the numpy reader, the in-place one (``unpack_at``) and the single-value one (``unpack_one``),
    which must agree."""
    from fpstore.errors import CorruptionError
    from fpstore.index.tiers import PackedColumn, packed_value, read_packed, read_packed_at

    if len(data) < 4:
        return
    width, count = data[0] % 65, 1 + data[1] * 3
    rec = PackedColumn(b"p", count, data[2], width, 1 << 16)
    pos = np.array(sorted({0, count - 1, data[3] % count}), np.int64)
    txn = _FakeTxn({b"pP" + bytes(4): data[4:]})
    try:
        whole = read_packed(txn, None, b"p", rec, pos)
    except CorruptionError:
        whole = None
    try:
        in_place = read_packed_at(txn, None, b"p", rec, pos, {})
    except CorruptionError:
        in_place = None
    try:
        single = [packed_value(txn, None, b"p", rec, int(p), {}) for p in pos]
    except CorruptionError:
        single = None
    # The numpy reader adds the minimum modulo 2**64, where the others refuse a value above it.
    if in_place is not None and (whole is None or in_place.tolist() != whole.tolist() or single != in_place.tolist()):
        raise AssertionError(f"packed readers disagree: {whole!r} {in_place!r} {single!r}")
    if whole is None:
        raise CorruptionError("packed column chunk damaged")


_FUZZ = {name: globals()[f"_fz_{name}"] for name in FUZZ_TARGETS}

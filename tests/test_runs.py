"""Sorted-run codec: twin equality, round trips, probes against brute force, hostile bytes, size."""

from __future__ import annotations

import contextlib
import math
import os
import struct
import tracemalloc
import zlib
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fpstore import _backend

from fpstore.index import runs
from fpstore.errors import CorruptionError, FormatError, InputError
from tests.conftest import expected_kernel, load_twins
from tests.support.kernels import kernel_setting

C, PY = load_twins("runs")
TWINS = (C, PY)
U64MAX = (1 << 64) - 1
# 1025 and 1026: a block of 1024 gaps is the most the compiled whole-block decoder's fast loop
# takes (FPS_RICE_MAX_GAPS); one more goes through its checking loop.
BLOCK_SIZES = (1, 2, 3, 5, 8, 16, 64, 256, 1025, 1026)
#: Examples for the hostile-bytes fuzz test (about 10 s on 2 cores); raise it for long runs.
FUZZ_EXAMPLES = int(os.environ.get("FPSTORE_FUZZ_EXAMPLES", "1500"))


@contextlib.contextmanager
def kernel(mod):
    """Run fpstore.index.runs on kernel twin ``mod`` inside the block."""
    old = runs._kernel
    runs._kernel = mod
    try:
        yield
    finally:
        runs._kernel = old


def outcome(fn, *args, **kw):
    """('ok', result) or ('error', type, message): comparable across twins."""
    try:
        return ("ok", fn(*args, **kw))
    except (CorruptionError, FormatError) as exc:
        return ("error", type(exc).__name__, str(exc))


def same(a, b):
    """Equal results, with numpy arrays (or tuples of them) compared by dtype and value."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b))
    return a == b


@st.composite
def key_arrays(draw, max_size=600):
    """Sorted uint64 arrays: empty, single, all equal, near 2**64-1, huge gaps, clustered, random."""
    kind = draw(st.sampled_from(["explicit", "random", "clustered", "equal", "top", "extremes", "dups"]))
    if kind == "explicit":
        return np.array(sorted(draw(st.lists(st.integers(0, U64MAX), max_size=20))), np.uint64)
    n = draw(st.integers(0, max_size))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if kind == "random":
        a = rng.integers(0, U64MAX, n, dtype=np.uint64, endpoint=True)
    elif kind == "clustered":
        centres = rng.integers(0, U64MAX, 1 + n // 40, dtype=np.uint64, endpoint=True)
        spread = np.uint64(1) << rng.integers(0, 40, n).astype(np.uint64)
        base = centres[rng.integers(0, len(centres), n)]
        off = rng.integers(0, U64MAX, n, dtype=np.uint64, endpoint=True) % spread
        a = np.where(base > np.uint64(U64MAX) - off, np.uint64(U64MAX), base + off)
    elif kind == "equal":
        a = np.full(n, draw(st.sampled_from([0, 1, 2**63, U64MAX])), np.uint64)
    elif kind == "top":
        a = np.uint64(U64MAX) - rng.integers(0, 1000, n).astype(np.uint64)
    elif kind == "extremes":
        a = rng.choice(np.array([0, 1, 2**32, 2**63, U64MAX - 1, U64MAX], np.uint64), n)
    else:
        a = rng.integers(0, 4, n).astype(np.uint64)
    return np.sort(a)


@st.composite
def layouts(draw):
    """(block_entries, chunk_bytes): tiny chunks to force many, or the default."""
    bsz = draw(st.sampled_from(BLOCK_SIZES))
    least = runs.max_block_bytes(bsz)
    if draw(st.booleans()):
        return bsz, runs.DEFAULT_CHUNK_BYTES
    return bsz, least + draw(st.integers(0, 3 * least))


def encode_both(keys, bsz, chunk_bytes):
    """encode_run with each twin; asserts identical bytes and returns (index, chunks)."""
    results = []
    for mod in TWINS:
        with kernel(mod):
            results.append(runs.encode_run(keys, block_entries=bsz, chunk_bytes=chunk_bytes))
    (ic, cc), (ip, cp) = results
    assert ic.to_bytes() == ip.to_bytes()
    assert cc == cp
    return ic, cc


def brute_pairs(keys, queries, prefix_bits, k):
    """Brute-force probe_batch rows, ordered by stored key position then query position."""
    if len(keys) == 0 or len(queries) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.uint64), np.zeros(0, np.uint8)
    mask = np.uint64((U64MAX << (64 - prefix_bits)) & U64MAX)
    x = queries[:, None] ^ keys[None, :]
    dist = np.bitwise_count(x)
    qi, ki = np.nonzero(((x & mask) == 0) & (dist <= k))
    order = np.lexsort((qi, ki))
    qi, ki = qi[order], ki[order]
    return qi.astype(np.int64), keys[ki], dist[qi, ki].astype(np.uint8)


def boundary_queries(index, keys, rng, extra):
    """Sorted queries at block and chunk first keys, one off them, near-copies and random keys."""
    pts = [int(x) for x in index.first_keys] + [index.last_key]
    qs = []
    for v in pts:
        qs += [v, max(v - 1, 0), min(v + 1, U64MAX), v ^ (1 << int(rng.integers(0, 64)))]
    if len(keys):
        qs += [int(x) ^ (1 << int(rng.integers(0, 64))) for x in rng.choice(keys, min(len(keys), 20))]
    qs += [int(x) for x in rng.integers(0, U64MAX, extra, dtype=np.uint64, endpoint=True)]
    qs += [0, U64MAX]
    return np.sort(np.array(qs, np.uint64))


# -------------------------------------------------------------------------------- backend, twins


def test_selected_twin_is_loaded():
    """The compiled kernel runs, or its twin under FPSTORE_PUREPYTHON=1."""
    assert _backend.load("runs").__name__ == expected_kernel("runs")
    assert runs._kernel.__name__ == expected_kernel("runs")


def test_twins_share_error_codes():
    """Both twins export the same error-code numbers and block-size limit."""
    names = ["OK", "ERR_COUNT", "ERR_BOUNDS", "ERR_RANGE", "ERR_PARAM", "ERR_SHORT", "ERR_TRAILING", "ERR_UNSORTED"]
    for name in names + ["MAX_BLOCK_ENTRIES"]:
        assert getattr(C, name) == getattr(PY, name), name
    assert len({getattr(PY, n) for n in names}) == len(names)


@pytest.mark.slow
@settings(max_examples=250)
@given(keys=key_arrays(), layout=layouts())
def test_twins_encode_identical_bytes_and_round_trip(keys, layout):
    """Both twins encode any sorted array to the same bytes, within the size bounds, and back."""
    bsz, chunk_bytes = layout
    index, chunks = encode_both(keys, bsz, chunk_bytes)
    assert index.count == len(keys) and index.nchunks == len(chunks)
    assert index.entry_start[-1] == len(keys)
    assert same(index.entry_start[:-1], np.arange(index.nblocks, dtype=np.int64) * bsz)
    assert all(0 < len(c) <= chunk_bytes for c in chunks)
    sizes = index._ends - index._starts
    assert np.all(sizes >= 1) and np.all(sizes <= runs.max_block_bytes(bsz))
    parsed = runs.RunIndex.from_bytes(index.to_bytes())
    assert parsed.to_bytes() == index.to_bytes()
    for mod in TWINS:
        with kernel(mod):
            assert same(runs.decode_run(chunks.__getitem__, parsed, checksum=True), keys)
            parts = [runs.decode_chunk(memoryview(c), parsed, i) for i, c in enumerate(chunks)]
            assert same(np.concatenate(parts) if parts else np.zeros(0, np.uint64), keys)
            if index.nblocks:
                b = index.nblocks // 2
                got = runs.decode_block(chunks[int(index.chunk[b])], parsed, b)
                assert same(got, keys[b * bsz : (b + 1) * bsz])


def test_round_trip_examples():
    """Hand-picked arrays round-trip: empty, one key, 2**64-1, 0 and max in one block, all equal."""
    cases = [[], [0], [U64MAX], [0, U64MAX], [U64MAX] * 300, [5] * 1000, list(range(600)), [0, 1, U64MAX - 1, U64MAX]]
    for bsz in (1, 2, 256):
        for values in cases:
            keys = np.array(values, np.uint64)
            index, chunks = encode_both(keys, bsz, runs.max_block_bytes(bsz))
            for mod in TWINS:
                with kernel(mod):
                    assert same(runs.decode_run(chunks.__getitem__, index), keys)


# ---------------------------------------------------------------------------------------- probes


@pytest.mark.slow
@settings(max_examples=150)
@given(keys=key_arrays(), layout=layouts(), data=st.data())
def test_probe_matches_brute_force(keys, layout, data):
    """probe(lo, hi) returns exactly the stored keys in [lo, hi], duplicates kept, in both twins."""
    index, chunks = encode_both(keys, *layout)
    edges = [0, U64MAX] + [int(x) for x in index.first_keys] + [int(x) for x in keys[:50]]
    after_edge = st.sampled_from(edges).map(lambda v: min(v + 1, U64MAX))
    point = st.one_of(st.sampled_from(edges), st.integers(0, U64MAX), after_edge)
    for _ in range(4):
        lo, hi = sorted((data.draw(point), data.draw(point)))
        want = keys[(keys >= np.uint64(lo)) & (keys <= np.uint64(hi))]
        for mod in TWINS:
            with kernel(mod):
                calls = []
                got = runs.probe(lambda i: calls.append(i) or chunks[i], index, lo, hi)
                assert same(got, want)
                assert len(calls) == len(set(calls))  # each chunk read at most once


@pytest.mark.slow
@settings(max_examples=200)
@given(
    keys=key_arrays(max_size=300),
    layout=layouts(),
    prefix_bits=st.one_of(st.sampled_from([0, 1, 2, 8, 25, 32, 63, 64]), st.integers(0, 64)),
    k=st.integers(0, 10),
    seed=st.integers(0, 2**32 - 1),
)
def test_probe_batch_matches_brute_force(keys, layout, prefix_bits, k, seed):
    """probe_batch per chunk, and over the run, equal brute force, with queries at block and chunk edges."""
    index, chunks = encode_both(keys, *layout)
    queries = boundary_queries(index, keys, np.random.default_rng(seed), extra=10)
    want = brute_pairs(keys, queries, prefix_bits, k)
    results = []
    for mod in TWINS:
        with kernel(mod):
            parts = [runs.probe_batch(c, index, i, queries, prefix_bits, k) for i, c in enumerate(chunks)]
            per_chunk = tuple(np.concatenate(x) for x in zip(*parts)) if parts else want
            assert same(per_chunk, want), mod.__name__
            whole = runs.probe_batch_run(chunks.__getitem__, index, queries, prefix_bits, k)
            assert same(whole, want), mod.__name__
            results.append(whole)
    assert same(results[0], results[1])


def brute_run_rows(keys, queries, prefix_bits, k, lookups, c0, c1, index):
    """Brute-force probe_run_chunks rows over chunks c0..c1-1: the pairs (query position, key,
    position, distance) by position then query, then (lookup index, position) of every stored
    copy of each lookup, by position."""
    first = int(index._entry_start[index._chunk_start[c0]]) if index.nchunks else 0
    last = int(index._entry_start[index._chunk_start[c1]]) if index.nchunks else 0
    part = keys[first:last]
    qi, found, dist = brute_pairs(part, queries, prefix_bits, k)
    # brute_pairs orders by key position; recover each row's position among equal keys in turn.
    pos = np.zeros(len(qi), np.int64)
    if len(qi):
        x = queries[:, None] ^ part[None, :]
        mask = np.uint64((U64MAX << (64 - prefix_bits)) & U64MAX)
        q2, k2 = np.nonzero(((x & mask) == 0) & (np.bitwise_count(x) <= k))
        order = np.lexsort((q2, k2))
        pos = k2[order].astype(np.int64) + first
    li, lp = np.nonzero(lookups[:, None] == part[None, :]) if len(part) and len(lookups) else (np.zeros(0, int), np.zeros(0, int))
    order = np.lexsort((li, lp))
    return qi, found, pos, dist, li[order].astype(np.int64), lp[order].astype(np.int64) + first


def check_probe_run_chunks(keys, layout, prefix_bits, k, rng):
    index, chunks = encode_both(keys, *layout)
    queries = boundary_queries(index, keys, rng, extra=5)
    queries = queries[np.argsort(queries >> np.uint64(64 - prefix_bits) if prefix_bits else np.zeros(len(queries), np.uint64), kind="stable")]
    lookups = np.sort(np.concatenate([rng.choice(keys, min(len(keys), 7)) if len(keys) else [], rng.integers(0, U64MAX, 3, dtype=np.uint64)]).astype(np.uint64))
    nc = index.nchunks
    spans = [None, (0, nc)] + [tuple(sorted(rng.integers(0, nc + 1, 2).tolist())) for _ in range(2)]
    for span in spans:
        c0, c1 = span or (0, nc)
        want = brute_run_rows(keys, queries, prefix_bits, k, lookups, c0, c1, index) if nc else None
        results = []
        for mod in TWINS:
            with kernel(mod):
                calls = []
                got = runs.probe_run_chunks(lambda i: calls.append(i) or chunks[i], index, queries, prefix_bits, k, lookups, span)
            assert all(c0 <= c < c1 for c in calls) and len(calls) == len(set(calls))
            if want is not None:
                assert same(got, want), (mod.__name__, span)
            results.append(got)
        assert same(results[0], results[1])


@pytest.mark.slow
@settings(max_examples=200)
@given(
    keys=key_arrays(max_size=300),
    layout=layouts(),
    prefix_bits=st.one_of(st.sampled_from([0, 1, 8, 25, 32, 64]), st.integers(0, 64)),
    k=st.integers(0, 10),
    seed=st.integers(0, 2**32 - 1),
)
def test_probe_run_chunks_matches_brute_force(keys, layout, prefix_bits, k, seed):
    """probe_run_chunks (queries and lookups in one pass, over any span of chunks) equals brute force in both twins."""
    check_probe_run_chunks(keys, layout, prefix_bits, k, np.random.default_rng(seed))


@pytest.mark.parametrize("seed", range(6))
def test_probe_run_chunks_examples(seed):
    """The brute-force comparison above on a few fixed runs, so that the quick suite has it too."""
    rng = np.random.default_rng(seed)
    keys = np.sort(np.concatenate([rng.integers(0, 1 << 44, 400).astype(np.uint64) << np.uint64(20), np.full(5, 7 << 40, np.uint64)]))
    check_probe_run_chunks(keys, (16, runs.max_block_bytes(16) * 3), [0, 20, 24, 30, 44, 64][seed], 3, rng)


def test_probe_run_chunks_on_damaged_chunk_agrees_across_twins():
    """Garbage in a chunk gives the same CorruptionError, or the same rows, in both twins; a
    missing chunk or one of the wrong length is named."""
    keys, index, chunks = small_run(400, bsz=16, seed=4)
    rng = np.random.default_rng(12)
    queries = np.sort(keys[::3].copy())
    lookups = np.sort(keys[1::5].copy())
    for trial, bad in enumerate(damaged_copies(chunks, rng, 60)):
        got = []
        for mod in TWINS:
            with kernel(mod):
                got.append(outcome(runs.probe_run_chunks, bad.__getitem__, index, queries, 30, 3, lookups))
        assert same(got[0], got[1]), trial
    for mod in TWINS:
        with kernel(mod):
            with pytest.raises(CorruptionError, match="chunk 1 is missing"):
                runs.probe_run_chunks(lambda i: None if i == 1 else chunks[i], index, queries, 30, 3)
            with pytest.raises(CorruptionError, match="chunk 2 has a length"):
                runs.probe_run_chunks(lambda i: chunks[i][:-1] if i == 2 else chunks[i], index, queries, 30, 3)
            with pytest.raises(InputError):
                runs.probe_run_chunks(lambda i: 12345, index, queries, 30, 3)
            with pytest.raises(InputError):
                runs.probe_run_chunks(chunks.__getitem__, index, queries, 30, 3, chunks=(0, index.nchunks + 1))


def test_probe_batch_prefix_group_spanning_chunks():
    """A prefix group spread over many chunks gives each (query, stored copy) pair exactly once."""
    rng = np.random.default_rng(7)
    prefix = np.uint64(0xABCDE) << np.uint64(44)
    low = rng.integers(0, 1 << 44, 3000).astype(np.uint64)
    keys = np.sort(np.concatenate([prefix | low, prefix | low[:200]]))  # with duplicates
    index, chunks = encode_both(keys, 16, runs.max_block_bytes(16))
    assert index.nchunks > 20
    queries = np.sort(np.concatenate([keys[[0, 15, 16, 17, 500, -1]], [prefix, prefix | np.uint64(2**44 - 1)]]))
    for k in (0, 3, 64):
        want = brute_pairs(keys, queries, 20, k)
        for mod in TWINS:
            with kernel(mod):
                assert same(runs.probe_batch_run(chunks.__getitem__, index, queries, 20, k), want)
    with kernel(C):
        qpos, got, _ = runs.probe_batch_run(chunks.__getitem__, index, queries[:1], 20, 64)
    assert same(got, keys)  # every stored copy once, nothing doubled at chunk edges


def test_probe_batch_reads_only_chunks_it_needs():
    """probe_batch_run asks only for chunks some query's prefix range reaches."""
    keys = np.arange(0, 1 << 20, 4, dtype=np.uint64) << np.uint64(40)
    index, chunks = runs.encode_run(keys, block_entries=64, chunk_bytes=runs.max_block_bytes(64))
    assert index.nchunks > 10
    calls = []
    runs.probe_batch_run(lambda i: calls.append(i) or chunks[i], index, keys[[5]], 40, 3)
    assert calls == [int(index.chunk[0])]


def test_find_block():
    """find_block returns the first block whose key range may hold the key, -1 outside the run."""
    keys = np.array([10] * 5 + [20] * 3 + [30, 40], np.uint64)
    index, _ = runs.encode_run(keys, block_entries=2, chunk_bytes=runs.max_block_bytes(2))
    assert [int(x) for x in index.first_keys] == [10, 10, 10, 20, 30]
    assert runs.find_block(index, 9) == -1
    assert runs.find_block(index, 10) == 0
    assert runs.find_block(index, 15) == 2
    assert runs.find_block(index, 20) == 2  # a 20 may sit at the end of block 2
    assert runs.find_block(index, 35) == 4
    assert runs.find_block(index, 40) == 4
    assert runs.find_block(index, 41) == -1
    empty, _ = runs.encode_run(np.zeros(0, np.uint64))
    assert runs.find_block(empty, 0) == -1


# ----------------------------------------------------------------------------------- validation


def test_encode_rejects_bad_input():
    """encode_run raises InputError for wrong dtype, shape, unsorted keys and bad sizes."""
    good = np.arange(10, dtype=np.uint64)
    bad_args = [
        (good.astype(np.int64), {}),
        (good.astype(np.float64), {}),
        (list(range(10)), {}),
        (good.reshape(2, 5), {}),
        (good[::-1].copy(), {}),
        (good, {"block_entries": 0}),
        (good, {"block_entries": 65536}),
        (good, {"block_entries": 256, "chunk_bytes": runs.max_block_bytes(256) - 1}),
        (good, {"chunk_bytes": 1 << 32}),
    ]
    for keys, kw in bad_args:
        with pytest.raises(InputError):
            runs.encode_run(keys, **kw)
    late = np.arange(100_000, dtype=np.uint64)
    late[77_777] = 0
    with pytest.raises(InputError, match="element 77777 is below element 77776"):
        runs.encode_run(late, block_entries=64, chunk_bytes=runs.max_block_bytes(64))
    index, _ = runs.encode_run(good[::2])  # a strided view is accepted (copied)
    assert index.count == 5


def test_probe_arguments_are_checked():
    """probe and probe_batch reject unsorted queries, prefix_bits outside 0..64, k < 0, bad ids."""
    keys = np.arange(100, dtype=np.uint64)
    index, chunks = runs.encode_run(keys)
    q = np.array([1 << 60, 3], np.uint64)  # out of order by their top 10 bits
    with pytest.raises(InputError):
        runs.probe_batch(chunks[0], index, 0, q, 10, 3)
    # Grouped by the prefix is enough: 5 and 3 share their top 10 bits.
    assert runs.probe_batch(chunks[0], index, 0, np.array([5, 3], np.uint64), 10, 0)[0].tolist() == [1, 0]
    for p, k in ((65, 3), (-1, 3), (10, -1)):
        with pytest.raises(InputError):
            runs.probe_batch_run(chunks.__getitem__, index, np.sort(q), p, k)
    with pytest.raises(InputError):
        runs.probe_batch(chunks[0], index, 1, np.sort(q), 10, 3)
    with pytest.raises(InputError):
        runs.probe(chunks.__getitem__, index, -1, 5)
    with pytest.raises(InputError):
        runs.decode_block(chunks[0], index, index.nblocks)
    with pytest.raises(InputError):
        runs.decode_chunk("not bytes", index, 0)
    with pytest.raises(CorruptionError, match="missing"):
        runs.probe(lambda i: None, index, 0, U64MAX)


def test_results_never_alias_the_callers_buffers():
    """Decoded keys and parsed indexes are copies: changing the source bytes changes nothing."""
    keys = np.arange(0, 5000, 3, dtype=np.uint64)
    index, chunks = runs.encode_run(keys)
    raw = bytearray(index.to_bytes())
    parsed = runs.RunIndex.from_bytes(raw)
    buf = bytearray(chunks[0])
    got = runs.decode_chunk(buf, parsed, 0)
    raw[:] = bytes(len(raw))
    buf[:] = bytes(len(buf))
    assert same(got, keys) and same(parsed.first_keys, index.first_keys)
    with pytest.raises(ValueError):
        parsed.first_keys[0] = 1  # read-only


# -------------------------------------------------------------------------------- hostile index


def damaged_copies(chunks, rng, trials):
    """``trials`` copies of a run's chunks (bytes), each with one to five bytes of one chunk
    overwritten at random."""
    for _ in range(trials):
        bad = [bytearray(c) for c in chunks]
        c = int(rng.integers(0, len(bad)))
        for _ in range(int(rng.integers(1, 6))):
            bad[c][int(rng.integers(0, len(bad[c])))] = int(rng.integers(0, 256))
        yield [bytes(b) for b in bad]


def small_run(n=300, bsz=8, seed=0):
    keys = np.sort(np.random.default_rng(seed).integers(0, 1 << 40, n).astype(np.uint64))
    index, chunks = runs.encode_run(keys, block_entries=bsz, chunk_bytes=runs.max_block_bytes(bsz) * 2)
    return keys, index, chunks


def reseal(body: bytes) -> bytes:
    """Index bytes with a fresh CRC, to get forged fields past the checksum."""
    return body[:-4] + struct.pack("<I", zlib.crc32(body[:-4]))


def test_index_truncations_and_flips_raise():
    """Every truncation and every single-byte flip of an index raises CorruptionError or FormatError."""
    _, index, _ = small_run(120)
    raw = index.to_bytes()
    for cut in range(len(raw)):
        with pytest.raises(CorruptionError):
            runs.RunIndex.from_bytes(raw[:cut])
    for i in range(len(raw)):
        for x in (0x01, 0x80, 0xFF):
            bad = bytearray(raw)
            bad[i] ^= x
            with pytest.raises(CorruptionError if i not in (4, 5) else FormatError):
                runs.RunIndex.from_bytes(bytes(bad))
    with pytest.raises(CorruptionError, match="not a run index"):
        runs.RunIndex.from_bytes(b"PK\x03\x04" + raw[4:])


def test_forged_index_fields_raise():
    """An index with a valid checksum but inconsistent fields raises CorruptionError (or FormatError)."""
    _, index, _ = small_run(120)
    raw = index.to_bytes()
    nb, nc = index.nblocks, index.nchunks
    fk, off, cnt = 40, 40 + 8 * nb, 40 + 12 * nb
    cf, cl = 40 + 14 * nb, 40 + 14 * nb + 4 * nc

    def patch(pos, fmt, value):
        b = bytearray(raw)
        struct.pack_into(fmt, b, pos, value)
        return reseal(bytes(b))

    cases = [
        (patch(fk + 8, "<Q", U64MAX), CorruptionError),  # first keys not ascending
        (patch(cnt, "<H", 9), CorruptionError),  # more entries than block_entries and count
        (patch(cnt, "<H", 0), CorruptionError),  # empty block
        (patch(24, "<Q", 121), CorruptionError),  # count disagrees with the blocks
        (patch(off + 4, "<I", 0), CorruptionError),  # offsets not increasing
        (patch(off, "<I", 3), CorruptionError),  # chunk's first block not at byte 0
        (patch(cf + 4, "<I", 0), CorruptionError),  # chunk first blocks not increasing
        (patch(cl, "<I", 1), CorruptionError),  # block beyond its chunk's end
        (patch(32, "<Q", 0), CorruptionError),  # last key below the last first key
        (patch(8, "<I", 0), CorruptionError),  # block_entries 0
        (patch(16, "<Q", nb + 1), CorruptionError),  # more blocks than the bytes hold
        (patch(12, "<I", 10**9), CorruptionError),  # absurd chunk count, no allocation
        (patch(6, "<H", 1), FormatError),  # unknown required feature
        (patch(4, "<H", 2), FormatError),  # newer format version
    ]
    for bad, exc in cases:
        with pytest.raises(exc):
            runs.RunIndex.from_bytes(bad)


def test_hand_built_index_refuses_values_that_do_not_fit():
    """RunIndex refuses fields that a plain cast would wrap (70000 entries as uint16) or that are not ints."""
    _, index, _ = small_run(40)
    ne = index.nentries.astype(np.uint32)
    ne[0] += 65536
    assert forge_index(index, nentries=ne) is None
    assert forge_index(index, first_keys=index.first_keys.astype(np.float64)) is None
    assert forge_index(index, count=float(index.count)) is None
    assert forge_index(index, first_keys=[int(x) for x in index.first_keys]) is not None


# ------------------------------------------------------------------------------- hostile chunks


def forge_index(index, **changes):
    """A copy of ``index`` with fields replaced (None when the result fails its own checks)."""
    names = ("count", "block_entries", "last_key", "first_keys", "chunk", "offset", "nentries", "chunk_len", "chunk_crc")
    fields = {f: getattr(index, f) for f in names}
    fields.update(changes)
    try:
        return runs.RunIndex(**fields)
    except CorruptionError:
        return None


def decode_outcome(index, raw, c):
    """Outcome of decode_chunk(raw) as chunk ``c`` in both twins, asserted equal."""
    got = []
    for mod in TWINS:
        with kernel(mod):
            got.append(outcome(runs.decode_chunk, raw, index, c))
    assert same(got[0], got[1]), (c, got)
    return got[0]


def assert_bounded(index, c, keys):
    """Decoded keys are sorted and inside the chunk's key range from the index."""
    b0, b1 = int(index._chunk_start[c]), int(index._chunk_start[c + 1])
    assert np.all(keys[1:] >= keys[:-1])
    assert int(keys[0]) == int(index._bounds[b0]) and int(keys[-1]) <= int(index._bounds[b1])


@pytest.mark.slow
def test_every_bit_flip_in_a_chunk_is_caught_or_bounded():
    """Each single-bit flip of a chunk: both twins agree; an error, or sorted keys in range, and the CRC sees it."""
    keys, index, chunks = small_run(200, bsz=8)
    caught = 0
    for c in range(min(index.nchunks, 4)):
        raw = chunks[c]
        for bit in range(len(raw) * 8):
            bad = bytearray(raw)
            bad[bit // 8] ^= 1 << (bit % 8)
            res = decode_outcome(index, bytes(bad), c)
            if res[0] == "error":
                caught += 1
            else:
                assert_bounded(index, c, res[1])
            with pytest.raises(CorruptionError, match="checksum"):
                runs.decode_chunk(bytes(bad), index, c, checksum=True)
    assert caught > 0


def test_truncated_and_padded_chunks_raise():
    """A chunk shorter or longer than the index says raises, even when the index is forged to match."""
    keys, index, chunks = small_run(200, bsz=8)
    for c, raw in enumerate(chunks):
        for cut in (0, 1, len(raw) // 2, len(raw) - 1):
            with pytest.raises(CorruptionError):
                runs.decode_chunk(raw[:cut], index, c)
            lens = index.chunk_len.copy()
            lens[c] = cut
            forged = forge_index(index, chunk_len=lens)
            if forged is not None:  # the kernel itself must notice the missing bytes
                for mod in TWINS:
                    with kernel(mod), pytest.raises(CorruptionError):
                        runs.decode_chunk(raw[:cut], forged, c)
        lens = index.chunk_len.copy()
        lens[c] += 3
        forged = forge_index(index, chunk_len=lens)
        for mod in TWINS:
            with kernel(mod), pytest.raises(CorruptionError, match="after the block's last entry"):
                runs.decode_chunk(raw + b"\0\0\0", forged, c)


def test_index_claiming_more_than_the_bytes_hold_raises():
    """More entries, tighter key bounds or a later last key than the chunk encodes raise CorruptionError."""
    keys, index, chunks = small_run(64, bsz=8)
    ne = index.nentries.copy()
    ne[-1] = 8 if ne[-1] < 8 else 7
    more = forge_index(index, nentries=ne, count=int(ne.sum()))
    fk = index.first_keys.copy()
    fk[3] = fk[2]  # block 2's keys now exceed its upper bound
    tighter = forge_index(index, first_keys=fk)
    later = forge_index(index, last_key=index.last_key + 1)
    for forged in (more, tighter, later):
        assert forged is not None
        for mod in TWINS:
            with kernel(mod), pytest.raises(CorruptionError):
                runs.decode_run(chunks.__getitem__, forged)
            with kernel(mod), pytest.raises(CorruptionError):
                runs.probe(chunks.__getitem__, forged, 0, U64MAX)


def test_probe_batch_on_damaged_chunk_agrees_across_twins():
    """probe_batch over garbage chunks raises the same CorruptionError in both twins, or the same rows."""
    keys, index, chunks = small_run(400, bsz=16, seed=4)
    rng = np.random.default_rng(11)
    queries = np.sort(keys[::3].copy())
    for trial, bad in enumerate(damaged_copies(chunks, rng, 60)):
        got = []
        for mod in TWINS:
            with kernel(mod):
                got.append(outcome(runs.probe_batch_run, bad.__getitem__, index, queries, 30, 3))
        assert same(got[0], got[1]), trial


def test_garbage_chunks_never_crash():
    """Random bytes of the right length decode to the same error (or bounded keys) in both twins."""
    _, index, chunks = small_run(300, bsz=16, seed=2)
    rng = np.random.default_rng(5)
    for _ in range(100):
        garbage = [rng.integers(0, 256, len(c)).astype(np.uint8).tobytes() for c in chunks]
        for c, raw in enumerate(garbage):
            res = decode_outcome(index, raw, c)
            if res[0] == "ok":
                assert_bounded(index, c, res[1])


# Blocks of 16 and 64 entries hold gaps whose sum the compiled decoder checks once per block (its
# fast loop, for blocks whose remainders' sum fits in 64 bits): a mutation there must still give
# the specification's error.
REAL = [small_run(60, bsz, seed) for bsz in (1, 4, 8) for seed in range(3)] + [
    small_run(n, bsz, seed) for n, bsz in ((300, 16), (400, 64)) for seed in range(2)
]


@st.composite
def hostile_blocks(draw):
    """A real chunk with its true block descriptors, or random bytes and descriptors, then
    mutated: bytes overwritten, starts/ends/counts nudged, bounds redrawn (kept ascending)."""
    if draw(st.booleans()):
        keys, index, chunks = draw(st.sampled_from(REAL))
        c = draw(st.integers(0, index.nchunks - 1))
        b0, b1 = int(index._chunk_start[c]), int(index._chunk_start[c + 1])
        buf = chunks[c]
        starts, ends = index._starts[b0:b1].copy(), index._ends[b0:b1].copy()
        counts, bounds = index._counts[b0:b1].copy(), index._bounds[b0 : b1 + 1].copy()
    else:
        buf = draw(st.binary(max_size=400))
        nb = draw(st.integers(0, 5))
        edge = st.integers(-3, len(buf) + 3)
        starts = np.array([draw(edge) for _ in range(nb)], np.int64)
        ends = np.array([draw(edge) for _ in range(nb)], np.int64)
        counts = np.array([draw(st.one_of(st.integers(1, 16), st.integers(-2, 70_000))) for _ in range(nb)], np.int64)
        bounds = np.array([draw(st.integers(0, U64MAX)) for _ in range(nb + 1)], np.uint64)
    if buf and draw(st.booleans()):
        b = bytearray(buf)
        for _ in range(draw(st.integers(1, 4))):
            b[draw(st.integers(0, len(b) - 1))] = draw(st.integers(0, 255))
        buf = bytes(b)
    if len(starts) and draw(st.booleans()):
        j = draw(st.integers(0, len(starts) - 1))
        arr = draw(st.sampled_from([starts, ends, counts]))
        arr[j] += draw(st.integers(-3, 3))
    if draw(st.booleans()):
        j = draw(st.integers(0, len(bounds) - 1))
        bounds[j] = draw(st.one_of(st.integers(0, U64MAX), st.just(int(bounds[j]) ^ 1)))
    return buf, starts, ends, counts, np.sort(bounds)


@pytest.mark.slow
@settings(max_examples=FUZZ_EXAMPLES)
@given(case=hostile_blocks(), out_len=st.one_of(st.none(), st.integers(0, 300)), seed=st.integers(0, 2**32 - 1))
def test_fuzz_kernels_on_hostile_bytes(case, out_len, seed):
    """Hostile bytes and descriptors: both kernels return the same codes and keys, keys always bounded."""
    buf, starts, ends, counts, bounds = case
    if out_len is None:  # room for exactly the claimed entries
        out_len = int(np.clip(counts, 0, 70_000).sum())
    results = []
    for mod in TWINS:
        out = np.zeros(out_len, np.uint64)
        err, j = mod.decode_blocks(buf, starts, ends, counts, bounds, out)
        results.append((err, j, out.copy() if err == 0 else None))
    (e1, j1, o1), (e2, j2, o2) = results
    assert (e1, j1) == (e2, j2)
    if e1 == 0:
        assert same(o1[: counts.sum()], o2[: counts.sum()])
        pos = 0
        for j, n in enumerate(counts):
            part = o1[pos : pos + n]
            assert part[0] == bounds[j] and np.all(part[1:] >= part[:-1]) and part[-1] <= bounds[j + 1]
            pos += n
    rng = np.random.default_rng(seed)
    flips = np.uint64(1) << rng.integers(0, 64, 6).astype(np.uint64)
    queries = np.sort(rng.choice(np.append(bounds, np.uint64(seed)), 6) ^ flips)
    mask = (U64MAX << (64 - int(rng.integers(0, 65)))) & U64MAX
    probe = [mod.probe_chunk(buf, starts, ends, counts, bounds, queries, mask, int(seed % 11)) for mod in TWINS]
    assert same(tuple(probe[0]), tuple(probe[1]))
    where = [mod.probe_chunk(buf, starts, ends, counts, bounds, queries, mask, int(seed % 11), True) for mod in TWINS]
    assert same(tuple(where[0]), tuple(where[1]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**16), min_size=1, max_size=3000), st.lists(st.integers(0, 2**16), max_size=200),
       st.sampled_from([1, 3, 64]), st.sampled_from([1 << 10, 1 << 12]))
def test_batch_positions_equal_searchsorted(stored, probes, block, chunk_bytes):
    """probe_batch_run(..., positions=True) with a 64-bit prefix and k = 0 finds every stored copy
    of every probed key at its position, across block and chunk boundaries and repeated keys."""
    keys = np.sort(np.array(stored, np.uint64) * np.uint64(0x9E3779B97F4A7C15 >> 16))
    index, chunks = runs.encode_run(keys, block_entries=block, chunk_bytes=chunk_bytes)
    q = np.unique(np.concatenate([np.array(probes, np.uint64) * np.uint64(0x9E3779B97F4A7C15 >> 16), keys[::7]]))
    ki, pos, dist = runs.probe_batch_run(chunks.__getitem__, index, q, 64, 0, positions=True)
    got = sorted(zip(ki.tolist(), pos.tolist()))
    lo, hi = np.searchsorted(keys, q, "left"), np.searchsorted(keys, q, "right")
    want = sorted((i, p) for i in range(len(q)) for p in range(int(lo[i]), int(hi[i])))
    assert got == want and not dist.any()


# ------------------------------------------------------------------------------- size and memory


def test_size_within_ten_percent_of_entropy_floor():
    """At 10**6 uniform random keys, payload plus index stay within 1.10 x the entropy floor."""
    n = 10**6
    keys = np.sort(np.random.default_rng(42).integers(0, U64MAX, n, dtype=np.uint64, endpoint=True))
    index, chunks = runs.encode_run(keys)
    bits = 8 * (sum(len(c) for c in chunks) + len(index.to_bytes())) / n
    floor = 64 - math.log2(n) + 1.44
    assert bits <= 1.10 * floor, (bits, floor)
    assert bits <= 1.03 * floor, (bits, floor)  # what the default layout measures (about 1.01)


def test_encode_streams_in_bounded_memory():
    """encode_run allocates its output plus about one chunk buffer, not a copy of the input."""
    n = 10**6
    keys = np.sort(np.random.default_rng(1).integers(0, U64MAX, n, dtype=np.uint64, endpoint=True))
    chunk_bytes = 1 << 20
    tracemalloc.start()
    try:
        index, chunks = runs.encode_run(keys, chunk_bytes=chunk_bytes)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The output (chunks, index and its derived per-block arrays) plus one chunk buffer: a copy
    # of the input (8 MB) or even a bool temporary over it (1 MB) would break this.
    output = sum(len(c) for c in chunks) + index.nbytes()
    assert peak <= output + chunk_bytes + 80 * index.nblocks + (128 << 10), (peak, output)


@settings(max_examples=200, deadline=None)
@given(keys=key_arrays(max_size=3000), layout=layouts(), cuts=st.lists(st.integers(0, 3000), max_size=12), batch=st.integers(1, 700))
def test_run_encoder_in_pieces_makes_the_bytes_of_encode_run(keys, layout, cuts, batch):
    """Keys given in any pieces (empty ones too), handed on at any batch size: the chunks handed
    out, in order, and the index are those encode_run makes of all the keys at once."""
    bsz, chunk_bytes = layout
    index, chunks = runs.encode_run(keys, block_entries=bsz, chunk_bytes=chunk_bytes)
    encoder = runs.RunEncoder(block_entries=bsz, chunk_bytes=chunk_bytes, batch_keys=batch)
    streamed = []
    bounds = [0, *sorted(min(c, len(keys)) for c in cuts), len(keys)]
    for a, b in zip(bounds, bounds[1:]):
        streamed += encoder.add(keys[a:b])
    last_index, last_chunks = encoder.finish()
    assert streamed + last_chunks == chunks
    assert last_index.to_bytes() == index.to_bytes()


def test_run_encoder_refuses_pieces_out_of_order_and_use_after_finish():
    encoder = runs.RunEncoder(block_entries=4, chunk_bytes=runs.max_block_bytes(4), batch_keys=2)
    encoder.add(np.array([1, 5, 9], np.uint64))
    with pytest.raises(InputError, match="ascend across pieces"):
        encoder.add(np.array([8, 10], np.uint64))
    with pytest.raises(InputError, match="sorted"):
        encoder.add(np.array([12, 11], np.uint64))
    encoder = runs.RunEncoder(block_entries=4)
    encoder.add(np.array([3], np.uint64))
    index, chunks = encoder.finish()
    assert runs.decode_run(chunks.__getitem__, index).tolist() == [3]
    with pytest.raises(InputError, match="finished"):
        encoder.add(np.array([4], np.uint64))
    with pytest.raises(InputError, match="finished"):
        encoder.finish()


def test_run_encoder_memory_does_not_grow_with_the_run():
    """Given 4 * 10^6 keys in pieces of 10^5, the encoder holds a batch of keys, a chunk kept
    back and the index, not the keys given nor the chunks it handed out."""
    rng = np.random.default_rng(2)
    chunk_bytes = 256 << 10
    encoder = runs.RunEncoder(chunk_bytes=chunk_bytes, batch_keys=1 << 18)
    step = 1 << 40
    tracemalloc.start()
    try:
        handed = 0
        for i in range(40):
            piece = np.sort(rng.integers(i * step, (i + 1) * step, 100_000, dtype=np.uint64))
            handed += sum(len(c) for c in encoder.add(piece))
            del piece
        _, peak = tracemalloc.get_traced_memory()
        index, last = encoder.finish()
    finally:
        tracemalloc.stop()
    assert index.count == 4_000_000
    # One batch of keys (2 MB) and its concatenation, a chunk's keys kept back, the piece being
    # given and the index so far: far below the 32 MB of keys or the ~20 MB of chunks.
    assert peak <= 6 * (1 << 18) * 8 + 3 * chunk_bytes + 100_000 * 8 + 80 * index.nblocks, peak
    assert handed > 10 * chunk_bytes


def _probe_tables_of(mod, index, names):
    return mod.ProbeTable(index._bounds, index._starts, index._ends, index._counts, index.chunk,
                          index._chunk_start, index.chunk_len, index._entry_start, names)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=2000), st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=4),
       st.integers(0, 64), st.integers(0, 6), st.sampled_from([1, 7, 256]), st.integers(0, 3))
def test_probe_tables_equals_filtered_brute_force(stored, queries, prefix_bits, k, block, damage):
    """The single-query kernel (both twins) returns exactly the stored keys in each range within k
    of the query, with their positions; a missing or truncated chunk is reported, not read."""
    keys = np.sort(np.array(stored, np.uint64))
    index, chunks = runs.encode_run(keys, block_entries=block, chunk_bytes=max(1 << 10, runs.max_block_bytes(block)))
    names = [b"c%d" % c for c in range(index.nchunks)]
    store = dict(zip(names, chunks))
    low = (1 << (64 - prefix_bits)) - 1 if prefix_bits < 64 else 0
    ranges = [(0, q & ~low, q | low, q) for q in queries]
    want = sorted((0, int(s), p) for q in queries for p, s in enumerate(keys.tolist())
                  if q & ~low <= s <= q | low and (s ^ q).bit_count() <= k)
    for mod in TWINS:
        tables = [_probe_tables_of(mod, index, names)]
        err, i, where, hits = mod.probe_tables(tables, store.get, ranges, k)
        assert err == 0 and sorted(hits) == want
    if damage and want:
        c = int(index.chunk[np.searchsorted(index._entry_start, want[0][2], side="right") - 1])
        broken = dict(store)
        if damage == 1:
            del broken[names[c]]
        else:
            broken[names[c]] = broken[names[c]][:-1]
        results = [mod.probe_tables([_probe_tables_of(mod, index, names)], broken.get, ranges, k)[:3] for mod in TWINS]
        assert results[0] == results[1] and results[0][0] == (C.ERR_MISSING if damage == 1 else C.ERR_LENGTH)
        with pytest.raises(CorruptionError):
            runs.probe_tables([runs.probe_table(index, names)], broken.get, ranges, k)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3000), st.sampled_from([2, 8, 20, 40]), st.sampled_from([31, 32, 33, 64, 65, 128, 200, 256, 1000]), st.integers(0, 2**32 - 1))
def test_probes_restarting_inside_blocks_equal_brute_force(n, key_bits, block, seed):
    """A probe restarts inside a block at a point an earlier probe of that block recorded (every
    32nd entry up to 224): many ranges probed one after another through one table (so later ones restart),
    over keys with many repeats (narrow keys) or none, answer exactly as brute force, in both twins."""
    rng = np.random.default_rng(seed)
    keys = np.sort(rng.integers(0, 2**key_bits, n, dtype=np.uint64) << np.uint64(64 - key_bits))
    index, chunks = runs.encode_run(keys, block_entries=block, chunk_bytes=max(1 << 12, runs.max_block_bytes(block)))
    names = [b"c%d" % c for c in range(index.nchunks)]
    store = dict(zip(names, chunks))
    stored = keys.tolist()
    tables = {mod: [_probe_tables_of(mod, index, names)] for mod in TWINS}
    if seed % 2:  # every restart point recorded up front, as Store.warm does
        assert [mod.fill_restarts(tables[mod][0], store.get) for mod in TWINS] == [(0, -1)] * 2
    for _ in range(300):
        a = stored[int(rng.integers(0, n))]
        span = int(rng.integers(0, 2**64 >> int(rng.integers(1, 64))))
        lo = max(0, a - int(rng.integers(0, 2)) * span // 2) if rng.random() < 0.5 else a
        hi = min(2**64 - 1, lo + span)
        query = int(rng.integers(0, 2**64, dtype=np.uint64))
        k = 64 if rng.random() < 0.7 else int(rng.integers(0, 40))
        want = sorted((0, s, p) for p, s in enumerate(stored) if lo <= s <= hi and (s ^ query).bit_count() <= k)
        for mod in TWINS:
            err, _, _, hits = mod.probe_tables(tables[mod], store.get, [(0, lo, hi, query)], k)
            assert err == 0 and sorted(hits) == want, (mod, lo, hi)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 6000), st.integers(4, 40), st.sampled_from([7, 64, 256]), st.integers(0, 2**32 - 1))
def test_probes_of_a_table_with_occupied_cells_equal_brute_force(n, prefix_bits, block, seed):
    """After its first probes, a compiled table of few keys for its prefix width tests which cells
    of the key space hold a key before it reads a block. Every probe still answers exactly as
    brute force: prefix ranges of stored keys, of their neighbours (mostly empty), of random
    queries, and unaligned ranges over one cell, two words of cells or more than 64 cells."""
    rng = np.random.default_rng(seed)
    keys = np.sort(np.concatenate([rng.integers(0, 2**64, n, dtype=np.uint64), rng.integers(0, 2**64, 1, dtype=np.uint64).repeat(n % 3)]))
    index, chunks = runs.encode_run(keys, block_entries=block, chunk_bytes=max(1 << 12, runs.max_block_bytes(block)))
    names = [b"c%d" % c for c in range(index.nchunks)]
    store = dict(zip(names, chunks))
    stored = keys.tolist()
    low = (1 << (64 - prefix_bits)) - 1
    tables = {mod: [_probe_tables_of(mod, index, names)] for mod in TWINS}

    def check(lo, hi, query, k):
        want = sorted((0, s, p) for p, s in enumerate(stored) if lo <= s <= hi and (s ^ query).bit_count() <= k)
        for mod in TWINS:
            err, _, _, hits = mod.probe_tables(tables[mod], store.get, [(0, lo, hi, query)], k)
            assert err == 0 and sorted(hits) == want, (mod, lo, hi, query, k)

    for j in range(240):
        s = stored[int(rng.integers(0, len(stored)))]
        kind = j % 6 if j >= 16 else j % 3  # the first 16 probes, which decide the cells, are prefix ranges
        if kind == 0:  # a stored key's own range, the query a few bits away
            q = s ^ int(rng.integers(0, 2**64, dtype=np.uint64)) & int(rng.integers(0, 2**64, dtype=np.uint64)) & low
        elif kind == 1:  # the range next to a stored key's
            q = (s + (low + 1) * (1 if rng.random() < 0.5 else -1)) % 2**64
        elif kind == 2:
            q = int(rng.integers(0, 2**64, dtype=np.uint64))
        if kind <= 2:
            check(q & ~low, q | low, q, int(rng.integers(0, 8)) if rng.random() < 0.5 else 64)
            continue
        lo = max(0, s - int(rng.integers(0, 2**64 >> int(rng.integers(1, 64)), dtype=np.uint64))) if kind == 3 else int(rng.integers(0, 2**64, dtype=np.uint64))
        hi = min(2**64 - 1, lo + int(rng.integers(0, 2**64 >> int(rng.integers(1, 64)), dtype=np.uint64)))
        check(lo, hi, int(rng.integers(0, 2**64, dtype=np.uint64)), 64)
    # Built where a prefix range holds less than one key on average, for small tables only.
    assert tables[C][0].filtered == (len(stored) * (low + 1) < 2**64 and len(stored) <= C._OCC_MAX_ENTRIES)


@pytest.mark.parametrize("seed", range(6))
def test_cells_at_word_edges_and_the_ends_of_the_key_space(seed):
    """32 keys: 128 cells of 2**57 in two words, the keys in random cells (0 and 2**64 - 1 among
    them in some cases); every range from a cell's start to another's end, over up to 70 cells,
    and the same shifted inside the cells, answers as brute force once the cells are built."""
    rng = np.random.default_rng(seed)
    width = 1 << 57
    cells = rng.choice(128, 32 - 2 * (seed % 2), replace=False)
    keys = cells.astype(np.uint64) * np.uint64(width) + rng.integers(0, width, len(cells), dtype=np.uint64)
    if seed % 2:
        keys = np.concatenate([keys, np.array([0, 2**64 - 1], dtype=np.uint64)])
    keys = np.sort(keys)
    index, chunks = runs.encode_run(keys, block_entries=8, chunk_bytes=1 << 12)
    names = [b"c%d" % c for c in range(index.nchunks)]
    store = dict(zip(names, chunks))
    table = [_probe_tables_of(C, index, names)]
    for c in range(16):  # narrow ranges: the 16th builds the cells
        C.probe_tables(table, store.get, [(0, c * width, c * width + 1, 0)], 64)
    assert table[0].filtered
    stored = keys.tolist()
    for c0 in range(128):
        for c1 in range(c0, min(128, c0 + 70)):
            for lo, hi in ((c0 * width, (c1 + 1) * width - 1), (c0 * width + width // 2, c1 * width + width // 2)):
                a, z = int(np.searchsorted(keys, np.uint64(lo))), int(np.searchsorted(keys, np.uint64(hi), side="right"))
                err, _, _, hits = C.probe_tables(table, store.get, [(0, lo, hi, 0)], 64)
                assert err == 0 and sorted(hits) == [(0, stored[p], p) for p in range(a, z)], (c0, c1, lo, hi)


def test_a_range_over_more_than_64_cells_reads_the_blocks():
    """Cells are tested for ranges over at most 64 of them: a wider range whose two end words of
    cells are empty still finds the keys of the cells between them."""
    rng = np.random.default_rng(11)
    cell_bits = 10  # 200 keys: 1,024 cells of 2**54, the kernel's 4 cells a key and more
    keys = np.sort((np.uint64(500) + rng.integers(0, 20, 200, dtype=np.uint64)) << np.uint64(64 - cell_bits)
                   | rng.integers(0, 2**40, 200, dtype=np.uint64))
    index, chunks = runs.encode_run(keys, block_entries=64, chunk_bytes=1 << 12)
    names = [b"c%d" % c for c in range(index.nchunks)]
    store = dict(zip(names, chunks))
    table = [_probe_tables_of(C, index, names)]
    low = (1 << 44) - 1
    for q in rng.integers(0, 2**64, 20, dtype=np.uint64).tolist():  # narrow probes: the cells get built
        C.probe_tables(table, store.get, [(0, q & ~low, q | low, q)], 64)
    assert table[0].filtered
    lo, hi = 400 << (64 - cell_bits), (600 << (64 - cell_bits)) - 1
    err, _, _, hits = C.probe_tables(table, store.get, [(0, lo, hi, 0)], 64)
    assert err == 0 and sorted(h[1] for h in hits) == keys.tolist()


@pytest.mark.parametrize("n, prefix_bits, built", [(300_000, 26, True), (300_000, 18, False), (1, 0, False), (2**16 - 1, 16, True)])
def test_cells_built_on_request_for_a_table_too_large_to_build_them_at_a_probe(n, prefix_bits, built):
    """``build_cells`` (a merge's thread, ``Store.warm``) builds them for tables of up to 2**23
    keys whose ranges hold less than a key on average, counts their bytes, and the table's probes
    still equal brute force."""
    rng = np.random.default_rng(n + prefix_bits)
    keys = np.sort(rng.integers(0, 2**64, n, dtype=np.uint64))
    index, chunks = runs.encode_run(keys, block_entries=256, chunk_bytes=256 << 10)
    names = [b"c%d" % c for c in range(index.nchunks)]
    store = dict(zip(names, chunks))
    table = _probe_tables_of(C, index, names)
    before = table.owned_nbytes
    added = table.build_cells(store.get, prefix_bits)
    assert table.filtered is built
    assert added == table.owned_nbytes - before and (added > 0) is (built and n > C._OCC_MAX_ENTRIES)
    assert table.build_cells(store.get, prefix_bits) == 0 and table.owned_nbytes == before + added  # counted once
    low = (1 << (64 - prefix_bits)) - 1 if prefix_bits else 2**64 - 1
    stored = keys.tolist()
    queries = [stored[int(i)] ^ int(rng.integers(0, 8)) for i in rng.integers(0, n, 50)] + rng.integers(0, 2**64, 50, dtype=np.uint64).tolist()
    for q in queries:
        lo, hi = q & ~low, q | low
        a, z = int(np.searchsorted(keys, np.uint64(lo))), int(np.searchsorted(keys, np.uint64(hi), side="right"))
        want = sorted((0, stored[p], p) for p in range(a, z) if (stored[p] ^ q).bit_count() <= 3)
        err, _, _, hits = C.probe_tables([table], store.get, [(0, lo, hi, q)], 3)
        assert err == 0 and sorted(hits) == want


def test_a_table_whose_cells_cannot_be_built_reports_damage_as_before():
    """A table whose chunk is missing or truncated when its cells would be built has none, and
    its probes report the damage they reach, as the twin's do."""
    rng = np.random.default_rng(5)
    keys = np.sort(rng.integers(0, 2**64, 3000, dtype=np.uint64))
    index, chunks = runs.encode_run(keys, block_entries=64, chunk_bytes=1 << 12)
    names = [b"c%d" % c for c in range(index.nchunks)]
    assert index.nchunks > 2
    for damage in ("missing", "truncated", "fails its read"):
        broken = dict(zip(names, chunks))
        fetch = broken.get
        if damage == "missing":
            del broken[names[1]]
        elif damage == "truncated":
            broken[names[1]] = broken[names[1]][:-1]
        else:  # the store's reader raises on a chunk whose CRC does not match

            def fetch(name, _get=broken.get):
                if name == names[1]:
                    raise CorruptionError("chunk 1 fails its CRC-32")
                return _get(name)

        tables = {mod: [_probe_tables_of(mod, index, names)] for mod in TWINS}
        low = (1 << 48) - 1
        answered = 0
        # The first probes (the 16th builds the cells) in chunk 0's keys: they answer, and a
        # build that failed on chunk 1 must not make the 16th one fail.
        in_chunk0 = keys[: int(index._entry_start[index._chunk_start[1]])].tolist()
        for q in in_chunk0[1:-1:max(1, len(in_chunk0) // 20)][:18] + rng.integers(0, 2**64, 200, dtype=np.uint64).tolist():
            results = [outcome(mod.probe_tables, tables[mod], fetch, [(0, q & ~low, q | low, q)], 64) for mod in TWINS]
            assert same(results[0], results[1]), (damage, q)
            answered += results[0][0] == "ok" and results[0][1][0] == 0
        assert 18 <= answered < 218  # probes of the other chunks answer
        assert not tables[C][0].filtered
        if damage == "fails its read":  # asked for (warm(), a merge's thread), the error is the caller's
            with pytest.raises(CorruptionError):
                _probe_tables_of(C, index, names).build_cells(fetch, 48)
        else:
            assert _probe_tables_of(C, index, names).build_cells(fetch, 48) == 0


@pytest.mark.parametrize("key_bits", [6, 20, 41, 52, 57, 64])
@pytest.mark.parametrize("block", [2, 8, 9, 17, 256, 1025])
def test_wide_and_narrow_decoders_agree(key_bits, block):
    """The whole-block decoder eight remainders at a time (AVX-512, where the CPU has it) and one
    at a time give the same keys, and the same error on damaged bytes, as the specification:
    remainder widths from 0 to 56 and above (the checking loop's), groups of eight and tails."""
    rng = np.random.default_rng(key_bits * 7919 + block)
    keys = np.sort(rng.integers(0, 2**key_bits - 1, 1500, dtype=np.uint64, endpoint=True))
    index, chunks = runs.encode_run(keys, block_entries=block, chunk_bytes=max(1 << 12, runs.max_block_bytes(block)))
    for trial in range(12):
        c = int(rng.integers(0, len(chunks)))
        raw = bytearray(chunks[c])
        for _ in range(trial % 4):  # intact first, then one to three bytes overwritten
            raw[int(rng.integers(0, len(raw)))] = int(rng.integers(0, 256))
        b0, b1 = int(index._chunk_start[c]), int(index._chunk_start[c + 1])
        desc = (index._starts[b0:b1], index._ends[b0:b1], index._counts[b0:b1], index._bounds[b0 : b1 + 1])
        decoded = []
        for mod, wide in ((C, True), (C, False), (PY, True)):
            out = np.zeros(int(desc[2].sum()), np.uint64)
            with kernel_setting(C.use_wide_decode, wide):
                err, j = mod.decode_blocks(bytes(raw), *desc, out)
            decoded.append((err, j, out.tobytes() if err == 0 else None))
        assert decoded[0] == decoded[1] == decoded[2], trial
        if trial == 0:
            assert decoded[0][0] == 0 and np.frombuffer(decoded[0][2], np.uint64).tolist() == keys[index._entry_start[b0] : index._entry_start[b1]].tolist()


def _cpu_flags():
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            return next((set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags")), set())
    except OSError:
        return set()


def _rice_sections(gaps, k):
    """A block's remainder and unary sections for ``gaps`` (the encoder's layout: remainders of
    k bits LSB first, then each quotient in unary, LSB first)."""
    rem = 0
    for i, g in enumerate(gaps):
        rem |= (g & ((1 << k) - 1)) << (i * k)
    unary, p = 0, 0
    for g in gaps:
        p += g >> k
        unary |= 1 << p
        p += 1
    nrem, nun = (len(gaps) * k + 7) // 8, (p + 7) // 8
    return np.frombuffer(rem.to_bytes(nrem, "little"), np.uint8), np.frombuffer(unary.to_bytes(nun, "little"), np.uint8)


@pytest.mark.parametrize("k", [1, 7, 8, 13, 40, 41, 56])
def test_wide_decoder_accepts_and_equals_the_narrow_one(k):
    """Both whole-block decoders called directly (``_rice_forms``) on blocks of every length class
    (groups of eight and tails): the AVX-512 form runs wherever the CPU has F, BW and VBMI, accepts
    every valid block and gives the narrow form's keys and sums, and the same verdict on damaged
    unary bytes. (Through decode_blocks a wide form that refused every block would pass unseen:
    the checking loop decodes again.)"""
    rng = np.random.default_rng(k)
    flags = _cpu_flags()
    for m in (1, 7, 8, 9, 63, 64, 255, 1024):
        q = rng.integers(0, 4, m)
        q[rng.integers(0, m)] = 9
        gaps = [(int(a) << k) | int(r) for a, r in zip(q, rng.integers(0, 1 << k, m, dtype=np.uint64))]
        rem, unary = _rice_sections(gaps, k)
        first = int(rng.integers(0, 1 << 20))
        # The decoders' sums wrap at 2**64 (the caller's checks refuse such a block); so does this.
        want = np.array([int(x) % 2**64 for x in np.cumsum(np.array([first] + gaps, dtype=object))], np.uint64)
        available, narrow, wide = C._rice_forms(rem, unary, m, k, first)
        if {"avx512f", "avx512bw", "avx512vbmi"} <= flags:
            assert available
        assert narrow[0] and narrow[1].tolist() == want.tolist()
        assert narrow[2] == sum(int(x) for x in q) and narrow[3] == sum(g & ((1 << k) - 1) for g in gaps) % 2**64
        if available:
            assert wide[0] and wide[1].tolist() == want.tolist() and wide[2:] == narrow[2:]
        for _ in range(20):
            bad = unary.copy()
            bad[int(rng.integers(0, len(bad)))] = int(rng.integers(0, 256))
            available, narrow, wide = C._rice_forms(rem, bad, m, k, first)
            if available:
                assert wide[0] == narrow[0]
                if narrow[0]:
                    assert wide[1].tolist() == narrow[1].tolist() and wide[2:] == narrow[2:]


@pytest.mark.parametrize("key_bits", [12, 20, 41, 52, 60])
def test_vector_scan_accepts_every_valid_block(key_bits):
    """The probe's scan of a block eight entries at a time runs wherever the CPU has AVX-512 F,
    BW, VBMI and VPOPCNTDQ, accepts every valid block of every length class (groups of eight and
    tails, up to its limit of 1,024 gaps) and stops where the keys pass the range's end. (Through
    the probes, a vector scan that refused every block would pass unseen: the scalar loops decode
    again.)"""
    rng = np.random.default_rng(key_bits)
    usable = {"avx512f", "avx512bw", "avx512vbmi", "avx512_vpopcntdq"} <= _cpu_flags()
    scanned = 0
    for block in (1, 7, 8, 9, 63, 64, 255, 256, 1025):
        keys = np.sort(rng.integers(0, 2**key_bits - 1, 3 * block, dtype=np.uint64, endpoint=True))
        index, chunks = runs.encode_run(keys, block_entries=block, chunk_bytes=max(1 << 12, runs.max_block_bytes(block)))
        c = 0
        raw = chunks[c]
        for b in range(int(index._chunk_start[c]), int(index._chunk_start[c + 1])):
            desc = (int(index._starts[b]), int(index._ends[b]), int(index._counts[b]), int(index._bounds[b]), int(index._bounds[b + 1]))
            block_keys = keys[index._entry_start[b] : index._entry_start[b + 1]]
            ok, done = C._vector_scan(np.frombuffer(raw, np.uint8), *desc, 0, 2**64 - 1, 0, -1)
            # (A block of one key has nothing to scan; remainders of 0 or more than 56 bits go to
            # the checking loop.)
            if not usable or desc[2] == 1 or not 1 <= raw[desc[0]] <= 56:
                assert not ok
                continue
            assert ok and done == desc[2], (block, b)
            stop = int(block_keys[len(block_keys) // 2])
            want = int(np.searchsorted(block_keys, stop, side="right")) + 1
            ok, done = C._vector_scan(np.frombuffer(raw, np.uint8), *desc, 0, stop, 0, -1)
            assert ok and done == min(want, desc[2]), (block, b)
            scanned += 1
    assert scanned > 0 or not usable


@pytest.mark.parametrize("block", [8, 64, 256, 1025])
def test_vector_and_scalar_probes_agree(block):
    """Probes of a run's table scanning eight entries at a time and one at a time: the same hits
    and errors, probe after probe (restart points recorded as probes go, so later probes start
    from them), on intact and damaged chunks, and the same fill_restarts verdict."""
    rng = np.random.default_rng(block)
    for key_bits in (24, 44, 58, 64):
        keys = np.sort(rng.integers(0, 2**key_bits - 1, 4000, dtype=np.uint64, endpoint=True))
        index, chunks = runs.encode_run(keys, block_entries=block, chunk_bytes=max(1 << 12, runs.max_block_bytes(block)))
        names = [b"c%d" % c for c in range(index.nchunks)]
        for damaged in (False, True):
            bad = [bytearray(c) for c in chunks]
            if damaged:
                c = int(rng.integers(0, len(bad)))
                for _ in range(3):
                    bad[c][int(rng.integers(0, len(bad[c])))] = int(rng.integers(0, 256))
            store = dict(zip(names, (bytes(b) for b in bad)))
            tables = {on: _probe_tables_of(C, index, names) for on in (True, False)}
            filled = {}
            for on in (True, False):
                with kernel_setting(C.use_vector_probe, on):
                    filled[on] = C.fill_restarts(_probe_tables_of(C, index, names), store.get)
            assert filled[True] == filled[False]
            stored = keys.tolist()
            for _ in range(150):
                a = stored[int(rng.integers(0, len(stored)))]
                lo = max(0, a - int(rng.integers(0, 2 ** max(1, key_bits - 8))))
                hi = min(2**64 - 1, a + int(rng.integers(0, 2 ** max(1, key_bits - 6))))
                query = a ^ int(rng.integers(0, 8)) if rng.random() < 0.7 else int(rng.integers(0, 2**64, dtype=np.uint64))
                k = int(rng.integers(0, 6)) if rng.random() < 0.8 else 64
                got = {}
                for on in (True, False):
                    with kernel_setting(C.use_vector_probe, on):
                        got[on] = C.probe_tables([tables[on]], store.get, [(0, lo, hi, query)], k)
                assert got[True] == got[False], (key_bits, damaged, lo, hi)
                if not damaged:
                    want = sorted((0, key, p) for p, key in enumerate(stored) if lo <= key <= hi and bin(key ^ query).count("1") <= k)
                    assert got[True][0] == 0 and sorted(got[True][3]) == want


def test_negative_k_matches_nothing_at_every_compare_level():
    """The kernels' int k below 0 finds no pair in every compare form (the AVX-512 compare is a
    signed one, as the others), as in the specification twin."""
    keys = np.sort(np.random.default_rng(3).integers(0, 2**64 - 1, 400, dtype=np.uint64, endpoint=True))
    index, chunks = runs.encode_run(keys, block_entries=64, chunk_bytes=1 << 14)
    b1 = int(index._chunk_start[1])
    desc = (index._starts[:b1], index._ends[:b1], index._counts[:b1], index._bounds[: b1 + 1])
    for level in (2, 1, 0):
        with kernel_setting(C.use_vector_compare, level):
            assert len(C.probe_chunk(chunks[0], *desc, keys[:50], 0, -1)[2]) == 0
    assert len(PY.probe_chunk(chunks[0], *desc, keys[:50], 0, -1)[2]) == 0


def checked_loops_only():
    """The compiled kernel with only its loops that check each gap (see use_unchecked_loops)."""
    return kernel_setting(C.use_unchecked_loops, False)


@pytest.mark.slow
@settings(max_examples=FUZZ_EXAMPLES // 5, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([40, 52, 58, 64]), st.sampled_from([64, 256, 1025, 1026]), st.integers(0, 4), st.booleans())
def test_unchecked_loops_change_nothing_on_damaged_blocks(seed, key_bits, block, nflips, warm):
    """The compiled decoders' loops that check the sum of a block's gaps once, against their loops
    that check each gap, on blocks with bytes overwritten: the same errors, keys, hits and
    restart points, probe after probe (restart points recorded as probes go, or all up front),
    and the specification twin's answer wherever the compiled probe decodes as far as it does
    (the compiled probe stops after the first key above its range, so damage past it may go
    unreported there)."""
    rng = np.random.default_rng(seed)
    # Keys below 2**key_bits: gaps of about 2**(key_bits - 11.5), so blocks of 28..52 remainder
    # bits, on both sides of the unchecked loops' limit of 47 (a store of 10^7 keys has ~41).
    keys = np.sort(rng.integers(0, 2**key_bits - 1, 3000, dtype=np.uint64, endpoint=True))
    index, chunks = runs.encode_run(keys, block_entries=block, chunk_bytes=max(1 << 12, runs.max_block_bytes(block)))
    names = [b"c%d" % c for c in range(index.nchunks)]
    bad = [bytearray(c) for c in chunks]
    c = int(rng.integers(0, len(bad)))
    for _ in range(nflips):
        bad[c][int(rng.integers(0, len(bad[c])))] = int(rng.integers(0, 256))
    store = dict(zip(names, (bytes(b) for b in bad)))
    b0, b1 = int(index._chunk_start[c]), int(index._chunk_start[c + 1])
    desc = (index._starts[b0:b1], index._ends[b0:b1], index._counts[b0:b1], index._bounds[b0 : b1 + 1])
    decoded = []
    for mod, checked, wide in ((C, False, True), (C, False, False), (C, True, True), (PY, False, True)):
        out = np.zeros(int(desc[2].sum()), np.uint64)
        with checked_loops_only() if checked else contextlib.nullcontext(), kernel_setting(C.use_wide_decode, wide):
            err, j = mod.decode_blocks(store[names[c]], *desc, out)
        decoded.append((err, j, out.tobytes() if err == 0 else None))
    assert decoded[0] == decoded[1] == decoded[2] == decoded[3]
    fast, slow, spec = (_probe_tables_of(mod, index, names) for mod in (C, C, PY))
    if warm:
        with checked_loops_only():
            filled = C.fill_restarts(slow, store.get)
        assert C.fill_restarts(fast, store.get) == filled == PY.fill_restarts(spec, store.get)
    stored = keys.tolist()
    for _ in range(40):
        a = stored[int(rng.integers(0, len(stored)))]
        lo = max(0, a - int(rng.integers(0, 2 ** (key_bits - 6))))
        hi = min(2**64 - 1, a + int(rng.integers(0, 2 ** (key_bits - 4))))
        query = int(rng.integers(0, 2**64, dtype=np.uint64))
        k = 64 if rng.random() < 0.5 else int(rng.integers(0, 40))
        got = C.probe_tables([fast], store.get, [(0, lo, hi, query)], k)
        with checked_loops_only():
            assert C.probe_tables([slow], store.get, [(0, lo, hi, query)], k) == got, (lo, hi)
        want = PY.probe_tables([spec], store.get, [(0, lo, hi, query)], k)
        if got[0] or not want[0]:
            assert got[0] == want[0] and sorted(got[3]) == sorted(want[3]), (lo, hi)


def test_fill_restarts_reports_damage_as_the_probes_do():
    """Decoding every block up front (Store.warm) reports a missing or truncated chunk and a
    damaged block with the same codes in both twins, and runs.fill_restarts raises CorruptionError."""
    keys = np.sort(np.random.default_rng(5).integers(0, 2**64, 5000, dtype=np.uint64))
    index, chunks = runs.encode_run(keys, block_entries=256, chunk_bytes=4096)
    names = [b"c%d" % c for c in range(index.nchunks)]
    intact = dict(zip(names, chunks))
    cases = {"missing": {**intact, names[1]: None}, "truncated": {**intact, names[1]: intact[names[1]][:-3]}}
    flipped = bytearray(intact[names[2]])
    flipped[len(flipped) // 2] ^= 0xFF
    cases["flipped"] = {**intact, names[2]: bytes(flipped)}
    for name, store in cases.items():
        got = [mod.fill_restarts(_probe_tables_of(mod, index, names), store.get) for mod in TWINS]
        assert got[0] == got[1] and got[0][0] != 0, (name, got)
        with pytest.raises(CorruptionError):
            runs.fill_restarts(runs.probe_table(index, names), store.get)
    assert runs.fill_restarts(runs.probe_table(index, names), intact.get) is None


@pytest.mark.slow
def test_a_restart_point_past_two_to_the_31_bits_is_not_recorded():
    """A forged block (half a gigabyte: k = 0, a first gap of 2**32) puts entry 64's unary bit past
    what a restart point holds (int32); the compiled kernel once recorded it truncated and a later
    probe restarted from the wrong bit (ERR_RANGE). It records nothing there now."""
    big = 1 << 32
    nbits = big + 1 + 2 * 64
    buf = np.zeros(1 + (nbits + 7) // 8, np.uint8)  # byte 0: k = 0; then the unary section

    def setbit(b: int) -> None:
        buf[1 + (b >> 3)] |= np.uint8(1 << (b & 7))

    for b in [big] + [big + 2 * (j - 1) for j in range(2, 66)]:
        setbit(b)
    keys = [0] + [big + j - 1 for j in range(1, 66)]
    table = C.ProbeTable(np.array([0, keys[-1]], np.uint64), np.array([0], np.int64), np.array([len(buf)], np.int64),
                         np.array([66], np.int64), np.array([0], np.uint32), np.array([0, 1], np.int64),
                         np.array([len(buf)], np.uint32), np.array([0, 66], np.int64), [b"c"])
    store = {b"c": buf}
    assert C.probe_tables([table], store.get, [(0, keys[64], keys[64], 0)], 64) == (0, -1, -1, [(0, keys[64], 64)])
    assert C.probe_tables([table], store.get, [(0, keys[65], keys[65], 0)], 64) == (0, -1, -1, [(0, keys[65], 65)])


_PROBE_DESIGNS = [(k, d) for k in (0, 2, 3, 4) for d in __import__("fpstore.index.design", fromlist=["x"]).designs_for_k(k)[:6]]


@pytest.mark.slow
@settings(max_examples=120, deadline=None)
@given(st.sampled_from(_PROBE_DESIGNS), st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=300),
       st.integers(1, 3), st.integers(0, 2**64 - 1), st.lists(st.integers(0, 63), max_size=5), st.integers(0, 2**32))
def test_probe_fingerprint_equals_brute_force(kd, base, nruns, far, flips, seed):
    """The single-query kernel over several runs (both twins) finds exactly the stored entries
    within k, each once with its table-0 position, for designs with and without flipped prefixes;
    stored values cluster around the query so every table and the table-0 lookups are exercised."""
    from fpstore.index import search

    k, design = kd
    rng = np.random.default_rng(seed)
    query = far
    for b in flips:
        query ^= 1 << b
    # Runs of fingerprints near the query (a few bits flipped), random ones and exact repeats.
    near = [query ^ int(sum(1 << int(b) for b in rng.choice(64, int(rng.integers(0, k + 3)), replace=False))) for _ in range(40)]
    values = base + near + near[:3]
    parts = np.array_split(rng.permutation(np.array(values, dtype=np.uint64)), nruns)
    store: dict[bytes, bytes] = {}
    per_mod = {mod: [] for mod in TWINS}
    want = []
    for r, part in enumerate(parts):
        fps = np.sort(part)
        for t in range(len(design.tables)):
            keys = fps if t == 0 else np.sort(design.permute(fps, t))
            index, chunks = runs.encode_run(keys, block_entries=7, chunk_bytes=max(1 << 10, runs.max_block_bytes(7)))
            names = [b"r%d t%d c%d" % (r, t, c) for c in range(index.nchunks)]
            store.update(zip(names, chunks))
            for mod in TWINS:
                per_mod[mod].append(_probe_tables_of(mod, index, names))
        want += [(r, int(f), p) for p, f in enumerate(fps.tolist()) if (f ^ query).bit_count() <= k]
    pd = search.probe_design(design)  # the compiled form; the twin gets the same lists
    spec = ([design.moves(t) for t in range(len(design.tables))], [t.prefix_bits for t in design.tables],
            [list(design.flip_masks(t)) for t in range(len(design.tables))])
    for mod in TWINS:
        d = pd if mod is C else PY.ProbeDesign(*spec)
        err, _, _, hits = mod.probe_fingerprint(d, per_mod[mod], store.get, query, k)
        assert err == 0 and sorted(hits) == sorted(want)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(_PROBE_DESIGNS), st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=200),
       st.integers(1, 3), st.lists(st.integers(0, 2**64 - 1), min_size=0, max_size=12), st.integers(0, 2**32))
def test_probe_fingerprints_equals_one_probe_per_query(kd, base, nruns, queries, seed):
    """The batch entry point gives, query after query, what probe_fingerprint gives each query
    alone (both twins, the same rows in the same order), over several runs, with queries that
    match stored entries (near copies) and queries that match nothing."""
    from fpstore.index import search

    k, design = kd
    rng = np.random.default_rng(seed)
    near = [int(v) ^ (1 << int(rng.integers(0, 64))) for v in base[: len(queries)]]
    values = np.array(base + near, dtype=np.uint64)
    parts = np.array_split(rng.permutation(values), nruns)
    store: dict[bytes, bytes] = {}
    per_mod = {mod: [] for mod in TWINS}
    for r, part in enumerate(parts):
        fps = np.sort(part)
        for t in range(len(design.tables)):
            keys = fps if t == 0 else np.sort(design.permute(fps, t))
            index, chunks = runs.encode_run(keys, block_entries=7, chunk_bytes=max(1 << 10, runs.max_block_bytes(7)))
            names = [b"r%d t%d c%d" % (r, t, c) for c in range(index.nchunks)]
            store.update(zip(names, chunks))
            for mod in TWINS:
                per_mod[mod].append(_probe_tables_of(mod, index, names))
    spec = ([design.moves(t) for t in range(len(design.tables))], [t.prefix_bits for t in design.tables],
            [list(design.flip_masks(t)) for t in range(len(design.tables))])
    qs = np.array(queries + near[:3], dtype=np.uint64)
    got = {}
    for mod in TWINS:
        d = search.probe_design(design) if mod is C else PY.ProbeDesign(*spec)
        if mod is C and type(d).__module__ != C.__name__:
            d = C.ProbeDesign(*spec)
        rows = []
        for q, fp in enumerate(qs.tolist()):
            err, _, _, hits = mod.probe_fingerprint(d, per_mod[mod], store.get, fp, k)
            assert err == 0
            rows += [(q, r, f, p) for r, f, p in hits]
        err, _, _, (qi, ri, f, p) = mod.probe_fingerprints(d, per_mod[mod], store.get, qs, k, {})
        assert err == 0
        assert list(zip(qi.tolist(), ri.tolist(), f.tolist(), p.tolist())) == rows
        got[mod] = rows
    assert got[C] == got[PY]


def _design_tables(design, table_keys, block_entries, chunk_bytes):
    """One run of ``design`` whose table t holds ``table_keys(t)`` (sorted), encoded: the chunk
    store (name -> bytes) and each twin's probe tables of it."""
    store: dict[bytes, bytes] = {}
    per_mod = {mod: [] for mod in TWINS}
    for t in range(len(design.tables)):
        index, chunks = runs.encode_run(table_keys(t), block_entries=block_entries,
                                        chunk_bytes=max(chunk_bytes, runs.max_block_bytes(block_entries)))
        names = [b"t%d c%d" % (t, c) for c in range(index.nchunks)]
        store.update(zip(names, chunks))
        for mod in TWINS:
            per_mod[mod].append(_probe_tables_of(mod, index, names))
    return store, per_mod


def _probe_designs(design):
    """Each twin's probe design of ``design`` (the compiled one as the store builds it)."""
    from fpstore.index import search

    spec = ([design.moves(t) for t in range(len(design.tables))], [t.prefix_bits for t in design.tables],
            [list(design.flip_masks(t)) for t in range(len(design.tables))])
    compiled = search.probe_design(design)
    if type(compiled).__module__ != C.__name__:
        compiled = C.ProbeDesign(*spec)
    return {C: compiled, PY: PY.ProbeDesign(*spec)}


def test_a_query_inside_a_large_cluster_of_near_duplicates_is_answered_exactly():
    """Thousands of stored entries within k of one query, many of them repeated (templated pages):
    every table finds thousands of hits, most found again in table 0; both twins answer exactly,
    each entry once, by position. (The compiled kernel once scanned its found keys linearly per
    hit: seconds for such a query.)"""
    from fpstore.index import search
    from fpstore.index.design import designs_for_k

    k, design = 3, designs_for_k(3)[0]
    rng = np.random.default_rng(7)
    query = int(rng.integers(0, 2**63))
    near = {query ^ int(sum(1 << int(b) for b in rng.choice(64, int(rng.integers(1, 4)), replace=False))) for _ in range(3000)}
    fps = np.sort(np.repeat(np.array(sorted(near), dtype=np.uint64), 3))
    store, per_mod = _design_tables(design, lambda t: fps if t == 0 else np.sort(design.permute(fps, t)), 256, 1 << 16)
    want = [(0, int(f), p) for p, f in enumerate(fps.tolist()) if (f ^ query).bit_count() <= k]
    for mod, d in _probe_designs(design).items():
        err, _, _, hits = mod.probe_fingerprint(d, per_mod[mod], store.get, query, k)
        assert err == 0 and hits == want


def test_a_probe_reads_the_chunks_of_the_memo_it_is_given():
    """The compiled probe keeps, per table, where the chunks of the memo it was last given lie (a
    snapshot's chunk views, one dict lookup saved per range). Given another memo, it reads that
    memo's chunks: a truncated or damaged chunk there is reported as a table that never saw a
    memo reports it, and the first memo, given again, still reads intact. (Reading the addresses
    kept for the first memo would answer the damaged snapshot from the intact bytes.)"""
    rng = np.random.default_rng(17)
    stored = np.sort(rng.integers(0, 2**64, 3000, dtype=np.uint64))
    index, chunks = runs.encode_run(stored, block_entries=64, chunk_bytes=max(1 << 11, runs.max_block_bytes(64)))
    assert index.nchunks >= 3
    names = [b"c%d" % c for c in range(index.nchunks)]
    intact = dict(zip(names, chunks))
    truncated = {**intact, names[1]: intact[names[1]][:-5]}
    flipped = bytearray(intact[names[2]])
    flipped[len(flipped) // 2] ^= 0x5A
    damaged = {**intact, names[2]: bytes(flipped)}
    identity = C.ProbeDesign([[(0, 2**64 - 1, 0)]], [12], [[0]])
    queries = np.concatenate([stored[::7] ^ np.uint64(3), rng.integers(0, 2**64, 200, dtype=np.uint64)])

    def probe(table, chunks_of, memo):
        return C.probe_fingerprints(identity, [table], chunks_of.get, queries, 4, memo)

    def rows(outcome):
        err, i, where, found = outcome
        return (err, i, where) if err else (0, [a.tolist() for a in found])

    want = [(q, int(f)) for q, x in enumerate(queries.tolist()) for f in stored.tolist() if (f ^ x).bit_count() <= 4]
    table = _probe_tables_of(C, index, names)
    first = {}
    err, _, _, (qi, _, found, _) = probe(table, intact, first)
    assert err == 0 and sorted(zip(qi.tolist(), found.tolist())) == sorted(want)
    for other in (truncated, damaged):
        expected = rows(probe(_probe_tables_of(C, index, names), other, {}))
        assert expected != rows(probe(table, intact, first))  # the damage changes the answer
        assert rows(probe(table, other, {})) == expected
        assert rows(probe(table, intact, first)) == rows(probe(_probe_tables_of(C, index, names), intact, {}))


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 12), st.integers(1, 40), st.integers(0, 64))
def test_vector_and_scalar_compares_equal_brute_force(seed, prefix_bits, group, k):
    """The merge's group compare, eight queries per step (AVX-512), four (AVX2) and one at a time,
    against brute force: groups of 1..40 queries sharing a prefix (matches at every lane and in
    the tails), queries equal to or a few bits from stored keys, every k. (A level the CPU lacks
    runs the widest form below it.)"""
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 2**64 - 1, 600, dtype=np.uint64, endpoint=True)
    keys = np.sort(np.concatenate([keys, keys[:: 1 + seed % 40]]))  # stored twice: equal keys side by side
    near = keys[rng.integers(0, len(keys), group)] ^ (np.uint64(1) << rng.integers(prefix_bits, 64, group).astype(np.uint64))
    queries = np.sort(np.concatenate([near, rng.integers(0, 2**64 - 1, group, dtype=np.uint64, endpoint=True)]))
    index, chunks = runs.encode_run(keys, block_entries=64, chunk_bytes=1 << 12)
    chunk0 = chunks[0]
    b1 = int(index._chunk_start[1])
    desc = (index._starts[:b1], index._ends[:b1], index._counts[:b1], index._bounds[: b1 + 1])
    mask = (U64MAX << (64 - prefix_bits)) & U64MAX if prefix_bits else 0
    got = []
    rows = []
    for level in (2, 1, 0):
        with kernel_setting(C.use_vector_compare, level):
            qpos, found, dist = runs.probe_batch_run(chunks.__getitem__, index, queries, prefix_bits, k)
            # One chunk's rows in the kernel's own order (by stored key position, then query),
            # which the twin specifies, with keys and with positions.
            rows.append([tuple(x.tolist()) for x in C.probe_chunk(chunk0, *desc, queries, mask, k)[2:]])
            rows.append([tuple(x.tolist()) for x in C.probe_chunk(chunk0, *desc, queries, mask, k, True)[2:]])
        got.append(sorted(zip(qpos.tolist(), found.tolist(), dist.tolist())))
    spec = [[tuple(x.tolist()) for x in PY.probe_chunk(chunk0, *desc, queries, mask, k, pos)[2:]] for pos in (False, True)]
    assert rows == spec * 3
    shared = (queries[:, None] & np.uint64(mask)) == (keys[None, :] & np.uint64(mask))
    d = np.bitwise_count(queries[:, None] ^ keys[None, :])
    qi, ki = np.nonzero(shared & (d <= k))
    want = sorted(zip(qi.tolist(), keys[ki].tolist(), d[qi, ki].tolist()))
    assert got[0] == got[1] == got[2] == want


def _mismatched_run(design, query):
    """One run whose table 0 lacks a fingerprint (``lost``, one bit from ``query`` inside table
    0's prefix, so only the other tables reach it) that its other tables hold: damage, since every
    table of a run holds the same fingerprints."""
    rng = np.random.default_rng(5)
    lost = query ^ (1 << 63)  # the top bit lies in table 0's prefix
    assert design.tables[0].prefix_bits >= 1
    others = [int(v) for v in rng.integers(0, 2**63, 200, dtype=np.uint64)]
    with_lost = np.sort(np.array(others + [lost], dtype=np.uint64))
    without = np.sort(np.array(others + [others[0]], dtype=np.uint64))  # same count, lost replaced
    store, per_mod = _design_tables(design, lambda t: without if t == 0 else np.sort(design.permute(with_lost, t)), 7, 1 << 10)
    return store, per_mod, lost


def test_a_fingerprint_missing_from_table_0_is_reported_not_dropped():
    """A key another table reaches is looked up in table 0 for its position (its document). When
    table 0 lacks it, the run is damaged: both twins and both entry points report it (the compiled
    kernel and the twin once dropped the match silently, a query answering less than the store
    holds), and the store's batch merge raises CorruptionError."""
    from fpstore.index import search
    from fpstore.index.design import designs_for_k

    k, design = 3, designs_for_k(3)[0]
    query = 0x0123456789ABCDEF
    store, per_mod, _ = _mismatched_run(design, query)
    for mod, d in _probe_designs(design).items():
        err, table, _, hits = mod.probe_fingerprint(d, per_mod[mod], store.get, query, k)
        assert (err, table, hits) == (mod.ERR_UNMATCHED, 0, []), mod
        err, table, _, rows = mod.probe_fingerprints(d, per_mod[mod], store.get, np.array([query], np.uint64), k, {})
        assert (err, table, rows) == (mod.ERR_UNMATCHED, 0, None), mod
    with pytest.raises(CorruptionError, match="table 0"):  # the backend in use, compiled or not
        runs.probe_fingerprint(search.probe_design(design), per_mod[runs._kernel], store.get, query, k)


def test_a_batch_makes_its_table_0_look_ups_together_and_reports_damage_as_one_query_would():
    """probe_fingerprints puts off the table-0 look-ups of its queries and makes them together at
    the end: over a run whose table 0 lacks one fingerprint, a batch whose queries reach stored
    fingerprints through the other tables only gives, query after query, what each query alone
    gives; with the damaged query among them, the error each query alone reports, in both twins."""
    from fpstore.index.design import designs_for_k

    k, design = 3, designs_for_k(3)[0]
    query = 0x0123456789ABCDEF
    store, per_mod, _ = _mismatched_run(design, query)
    stored = [int(v) for v in np.random.default_rng(5).integers(0, 2**63, 200, dtype=np.uint64)]  # as _mismatched_run draws them
    rng = np.random.default_rng(9)
    near = [v ^ (1 << 62) ^ (1 << int(rng.integers(0, 40))) for v in stored[:12]]  # table 0's prefix differs
    for mod, d in _probe_designs(design).items():
        rows = []
        for q, fp in enumerate(near):
            err, _, _, hits = mod.probe_fingerprint(d, per_mod[mod], store.get, fp, k)
            assert err == 0
            rows += [(q, r, f, p) for r, f, p in hits]
        assert len(rows) >= 12
        err, _, _, (qi, ri, f, p) = mod.probe_fingerprints(d, per_mod[mod], store.get, np.array(near, np.uint64), k, {})
        assert err == 0 and list(zip(qi.tolist(), ri.tolist(), f.tolist(), p.tolist())) == rows, mod
        err, table, _, rows = mod.probe_fingerprints(d, per_mod[mod], store.get, np.array(near[:5] + [query] + near[5:], np.uint64), k, {})
        assert (err, table, rows) == (mod.ERR_UNMATCHED, 0, None), mod


def test_a_batch_reports_a_missing_look_up_chunk_before_a_later_runs_failed_read():
    """A batch's table-0 look-ups are put off, but a failure they meet is still reported before
    what a later run of the same query (or a later query) meets: here run 0's look-up finds its
    chunk of table 0 missing (ERR_MISSING), and every chunk of run 1 fails its read (fetch raises,
    as a CRC mismatch does). The specification twin returns ERR_MISSING; the compiled batch once
    raised, having probed run 1 before making run 0's look-up."""
    from fpstore.index.design import designs_for_k

    k, design = 3, designs_for_k(3)[0]
    rng = np.random.default_rng(11)
    values = np.sort(rng.integers(0, 2**63, 400, dtype=np.uint64))
    lost = int(values[200])
    query = lost ^ (1 << 63)  # table 0's prefix differs: only the other tables reach `lost`
    store: dict[bytes, bytes] = {}
    per_mod = {mod: [] for mod in TWINS}
    lost_chunk = None
    for r in range(2):
        for t in range(len(design.tables)):
            keys = values if t == 0 else np.sort(design.permute(values, t))
            index, chunks = runs.encode_run(keys, block_entries=7, chunk_bytes=max(1 << 10, runs.max_block_bytes(7)))
            names = [b"r%d t%d c%d" % (r, t, c) for c in range(index.nchunks)]
            store.update(zip(names, chunks))
            if r == 0 and t == 0:
                at = int(np.searchsorted(index._bounds, np.uint64(lost), side="right")) - 1
                lost_chunk = names[int(index.chunk[at])]
            for mod in TWINS:
                per_mod[mod].append(_probe_tables_of(mod, index, names))
    del store[lost_chunk]

    def fetch(name):
        if name.startswith(b"r1 "):
            raise CorruptionError("chunk failed its checksum")
        return store.get(name)

    for mod, d in _probe_designs(design).items():
        err, table, _, rows = mod.probe_fingerprints(d, per_mod[mod], fetch, np.array([query], np.uint64), k, {})
        assert (err, table, rows) == (mod.ERR_MISSING, 0, None), mod


def test_a_store_whose_table_0_lacks_a_fingerprint_raises_on_every_query_path(tmp_path):
    """The store's paths over damaged runs: table 0 of the run (copied from a store whose one
    document has another fingerprint) lacks a fingerprint the other tables hold. A single query,
    a small batch (a probe per query) and a large one (the merge of every table, table 0 last,
    looking up what the others found) all raise CorruptionError instead of answering without
    that document (the merge once dropped it silently)."""
    import lmdb

    import fpstore
    from fpstore.store.storage import MAX_DBS

    rng = np.random.default_rng(3)
    fps = rng.integers(0, 2**63, 3000, dtype=np.uint64)
    lost = int(fps[0])
    other = fps.copy()
    other[0] = fps[1]
    paths = [str(tmp_path / "a"), str(tmp_path / "b")]
    for path, values in zip(paths, (fps, other)):
        with fpstore.open(path, k=3) as store:
            store.bulk_load(np.arange(1, 3001), values, pipeline_id=store.pipeline.id)
            with store._storage.read() as txn:
                (run,) = store._cat.state(txn).runs
    prefix = run.tables[0]  # (a bulk load's table 0 is its key segment's fingerprints)
    envs = [lmdb.open(p, subdir=True, lib_version=0, max_dbs=MAX_DBS, map_size=0) for p in paths]
    try:
        src_blobs, blobs = envs[1].open_db(b"blobs"), envs[0].open_db(b"blobs")
        with envs[1].begin() as src:
            table0 = [(bytes(k), bytes(v)) for k, v in src.cursor(db=src_blobs) if bytes(k).startswith(prefix)]
        assert table0
        with envs[0].begin(write=True) as txn:
            for name in [bytes(k) for k, _ in txn.cursor(db=blobs) if bytes(k).startswith(prefix)]:
                txn.delete(name, db=blobs)
            for name, value in table0:
                txn.put(name, value, db=blobs)
    finally:
        for env in envs:
            env.close()
    query = lost ^ (1 << 63)  # table 0's prefix differs: only the other tables reach `lost`
    with fpstore.open(paths[0], readonly=True) as store:
        pid = store.pipeline.id
        with pytest.raises(CorruptionError, match="table 0"):
            store.query(fingerprint=query, pipeline_id=pid)
        for size in (10, 20_000):
            batch = np.concatenate([[query], rng.integers(0, 2**63, size - 1, dtype=np.uint64)])
            with pytest.raises(CorruptionError, match="table 0"):
                store.query_many(batch, pipeline_id=pid)


_INDEX_FIELDS = ("first_keys", "chunk", "offset", "nentries", "chunk_len")


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 3000), st.sampled_from([1, 3, 64, 256]), st.sampled_from([0, 1 << 9, 1 << 12]),
       st.sampled_from(_INDEX_FIELDS + ("count", "last_key", None)), st.integers(0, 10**6), st.integers(0, 2**64 - 1),
       st.integers(0, 2**32))
def test_index_check_twins_agree_on_intact_and_forged_indexes(n, block, chunk_bytes, field, where, value, seed):
    """The compiled run-index check and its numpy twin give the same verdict (code and detail)
    and, on an intact index, the same derived arrays, for indexes from the encoder with one field
    forged (a value of its type at one place, or the run's count or last key)."""
    keys = np.sort(np.random.default_rng(seed).integers(0, 2**64, n, dtype=np.uint64))
    index, _ = runs.encode_run(keys, block_entries=block, chunk_bytes=max(chunk_bytes, runs.max_block_bytes(block)))
    arrays = {name: np.array(getattr(index, name)) for name in _INDEX_FIELDS}
    count, last_key = index.count, index.last_key
    if field == "count":
        count = value
    elif field == "last_key":
        last_key = value
    elif field is not None:
        a = arrays[field]
        a[where % len(a)] = value % (int(np.iinfo(a.dtype).max) + 1)
    got = [mod.index_check(*(arrays[name] for name in _INDEX_FIELDS), count, last_key, block) for mod in TWINS]
    (code_c, detail_c, derived_c), (code_p, detail_p, derived_p) = got
    assert (code_c, detail_c) == (code_p, detail_p)
    if field is None:
        assert code_c == 0
    if code_c == 0:
        for a, b in zip(derived_c, derived_p):
            assert a.dtype == b.dtype and np.array_equal(a, b)
        assert np.array_equal(derived_c[0], index._starts) or field is not None

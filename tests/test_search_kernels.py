"""The search kernels (self-join, bit packing, union-find, radix sort) equal their Python twins."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from fpstore import _backend
from tests.conftest import expected_kernel, load_twins
from tests.support.kernels import kernel_setting

C, PY = load_twins("search")

u64_arrays = hnp.arrays(
    np.uint64,
    st.integers(0, 400),
    elements=st.one_of(st.integers(0, 2**64 - 1), st.integers(0, 7), st.sampled_from([0, 2**63, 2**64 - 1])),
)


def test_selected_search_kernel_is_loaded():
    """The compiled search kernel runs, or its twin under FPSTORE_PUREPYTHON=1."""
    assert _backend.load("search").__name__ == expected_kernel("search")


@given(u64_arrays, st.booleans())
@settings(max_examples=200)
def test_radix_sort_equals_stable_numpy_sort(keys, with_order):
    """radix_sort gives numpy's sorted order and stable argsort, on random, tiny and extreme values."""
    got = C.radix_sort(keys, with_order)
    want = PY.radix_sort(keys, with_order)
    if with_order:
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    else:
        assert np.array_equal(got, want)


@given(u64_arrays, st.integers(0, 64))
@settings(max_examples=200)
def test_radix_sort_by_top_bits_is_a_stable_sort_of_the_prefix(keys, top_bits):
    """radix_sort(..., top_bits=b) equals a stable argsort of keys >> (64 - b), in both twins."""
    prefix = keys >> np.uint64(64 - top_bits) if top_bits < 64 else keys
    want = np.argsort(prefix if top_bits else np.zeros(len(keys), np.uint64), kind="stable")
    for mod in (C, PY):
        s, o = mod.radix_sort(keys, True, top_bits)
        assert np.array_equal(o, want) and np.array_equal(s, keys[want])


@given(u64_arrays, st.booleans())
@settings(max_examples=200)
def test_radix_sort_split_by_top_bits_first_equals_stable_numpy_sort(keys, with_order):
    """The full sort that first splits by the top 11 bits (used from MSD_MIN keys up; forced here
    with msd_min=0) gives numpy's sorted order and stable argsort, on random, tiny and extreme values."""
    got = C.radix_sort(keys, with_order, 64, 0)
    if with_order:
        assert np.array_equal(got[0], np.sort(keys)) and np.array_equal(got[1], np.argsort(keys, kind="stable"))
    else:
        assert np.array_equal(got, np.sort(keys))


def test_radix_sort_large_and_skipped_passes():
    """Large arrays, and arrays whose high or low digits are all equal (passes skipped), sort right."""
    rng = np.random.default_rng(1)
    for keys in (
        rng.integers(0, 2**64, 300_000, dtype=np.uint64),
        rng.integers(0, 2**16, 300_000).astype(np.uint64),
        rng.integers(0, 2**16, 300_000).astype(np.uint64) << np.uint64(48),
    ):
        for msd_min in (1 << 62, 0):  # LSD only, and split by the top bits first
            s, o = C.radix_sort(keys, True, 64, msd_min)
            assert np.array_equal(s, np.sort(keys)) and np.array_equal(o, np.argsort(keys, kind="stable"))
            assert np.array_equal(C.radix_sort(keys, False, 64, msd_min), s)


@pytest.mark.slow
@given(u64_arrays, st.integers(0, 64), st.integers(0, 12))
@settings(max_examples=150)
def test_self_join_equals_twin_and_brute_force(keys, prefix_bits, k):
    """self_join returns exactly the brute-force pairs sharing the prefix within k."""
    keys = np.sort(keys)
    got = C.self_join(keys, prefix_bits, k)
    want = PY.self_join(keys, prefix_bits, k)
    assert all(np.array_equal(a, b) for a, b in zip(got, want))
    shift = 64 - prefix_bits
    brute = {
        (i, j)
        for i in range(len(keys))
        for j in range(i + 1, len(keys))
        if (int(keys[i]) >> shift if shift < 64 else 0) == (int(keys[j]) >> shift if shift < 64 else 0)
        and (int(keys[i]) ^ int(keys[j])).bit_count() <= k
    }
    assert set(zip(got[0].tolist(), got[1].tolist())) == brute


@given(u64_arrays, st.integers(0, 64))
def test_pack_unpack_round_trip(values, width):
    """pack_bits/unpack_bits round-trip any values fitting the width, equal to the twin, and refuse short buffers."""
    mask = np.uint64((1 << width) - 1) if width < 64 else np.uint64(2**64 - 1)
    values = values & mask
    packed = C.pack_bits(values, width)
    assert packed == PY.pack_bits(values, width)
    pos = np.arange(len(values), dtype=np.int64)
    err, out = C.unpack_bits(np.frombuffer(packed, np.uint8), width, len(values), pos)
    assert err == 0 and np.array_equal(out, values)
    if width and len(values):
        assert C.unpack_bits(np.frombuffer(packed[:-8], np.uint8), width, len(values), pos)[0] == 1
        assert C.unpack_bits(np.frombuffer(packed, np.uint8), width, len(values), np.array([len(values)], np.int64))[0] == 1


@given(st.integers(1, 60).flatmap(lambda n: st.tuples(st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=80))))
def test_components_equal_twin(case):
    """Union-find labels equal the twin's: each node labelled by its component's smallest node."""
    n, edges = case
    a = np.array([e[0] for e in edges], np.int64)
    b = np.array([e[1] for e in edges], np.int64)
    assert np.array_equal(C.components(n, a, b), PY.components(n, a, b))



@given(u64_arrays, st.integers(0, 64), st.integers(-3, 420), st.sampled_from(["bytes", "memoryview"]))
def test_unpack_one_reads_one_value_and_refuses_what_unpack_bits_refuses(values, width, position, kind):
    """unpack_one gives the value at a position (as both twins do), and None for a position
    outside the array or a buffer too short for its count: never a read past the buffer."""
    mask = np.uint64((1 << width) - 1) if width < 64 else np.uint64(2**64 - 1)
    values = values & mask
    packed = C.pack_bits(values, width)
    buf = packed if kind == "bytes" else memoryview(packed)
    want = int(values[position]) if 0 <= position < len(values) else None
    assert C.unpack_one(buf, width, len(values), position) == want
    assert PY.unpack_one(buf, width, len(values), position) == want
    if width and len(values) and want is not None:
        short = packed[:-8]
        assert C.unpack_one(short, width, len(values), position) is None
        assert PY.unpack_one(short, width, len(values), position) is None
    for twin in (C, PY):
        with pytest.raises(ValueError):
            twin.unpack_one(packed, 65, len(values), 0)


def test_unpack_at_reports_the_first_bad_position_whatever_its_kind():
    """Both twins report the first position with anything wrong, position by position: a value
    that overflows with ``low`` before a position outside the column, or before a chunk that is
    missing or fails its read (the compiled kernel finds chunks in a first pass and once reported
    the later position, or raised)."""
    count, per, width = 40, 16, 8
    packed = {b"cP" + c.to_bytes(4, "big"): np.full(per * width // 8, 0xFF, np.uint8).tobytes() for c in range(3)}
    low = 2**64 - 100  # every value (255) overflows
    cases = [
        (packed.get, [0, 99], (3, 0)),
        (packed.get, [99, 0], (1, 0)),
        ({k: v for k, v in packed.items() if not k.endswith(b"\0\0\0\1")}.get, [0, 20], (3, 0)),
    ]

    def failing(name):
        if name.endswith(b"\0\0\0\2"):
            raise OSError("chunk failed its read")
        return packed.get(name)

    for twin in (C, PY):
        for fetch, positions, want in cases:
            assert twin.unpack_at({}, fetch, b"c", count, per, width, low, np.array(positions, np.int64))[:2] == want, (twin, positions)
        assert twin.unpack_at({}, failing, b"c", count, per, width, low, np.array([0, 35], np.int64))[:2] == (3, 0)
        with pytest.raises(OSError):
            twin.unpack_at({}, failing, b"c", count, per, width, 0, np.array([0, 35], np.int64))


@given(u64_arrays, st.integers(0, 64), st.integers(1, 9), st.integers(0, 2**64 - 1), st.lists(st.integers(-2, 450), max_size=30))
def test_unpack_at_reads_a_chunked_column_and_reports_damage(values, width, per, low, positions):
    """unpack_at reads a column cut into chunks of ``per`` values (as both twins do), fetching
    each chunk through the memo once; a position outside the column (1), a chunk missing or
    short (2) and a value past 2**64 - 1 once ``low`` is added (3) are reported at their index."""
    mask = np.uint64((1 << width) - 1) if width < 64 else np.uint64(2**64 - 1)
    values = values & mask
    count = len(values)
    chunks = {b"c" + b"P" + c.to_bytes(4, "big"): C.pack_bits(values[c * per : (c + 1) * per], width) for c in range(-(-count // per))}
    pos = np.array(positions, np.int64)
    want_status, want_index, want = 0, -1, []
    for x, p in enumerate(positions):
        if not 0 <= p < count:
            want_status, want_index = 1, x
            break
        if int(values[p]) + low >= 2**64:
            want_status, want_index = 3, x
            break
        want.append(int(values[p]) + low)
    for twin in (C, PY):
        fetched: list[bytes] = []

        def fetch(name, fetched=fetched):
            fetched.append(name)
            return chunks.get(name)

        memo: dict = {}
        status, index, got = twin.unpack_at(memo, fetch, b"c", count, per, width, low, pos)
        assert (status, index) == (want_status, want_index)
        assert (got.tolist() if status == 0 else got) == (want if status == 0 else None)
        assert len(fetched) == len(set(fetched))  # each chunk fetched once, then from the memo
    if count and width:
        broken = dict(chunks)
        first = b"c" + b"P" + (0).to_bytes(4, "big")
        broken[first] = broken[first][:-8]
        for twin in (C, PY):
            assert twin.unpack_at({}, broken.get, b"c", count, per, width, 0, np.array([0], np.int64))[:2] == (2, 0)
            assert twin.unpack_at({}, {}.get, b"c", count, per, width, 0, np.array([0], np.int64))[:2] == (2, 0)


def test_packed_readers_refuse_shapes_no_buffer_can_hold():
    """Counts whose packed size overflows 64 bits, and chunk numbers past 32 bits, are refused as a
    buffer too short (None, status 2) by both twins: the compiled kernel once wrapped the size
    and read far past an 8-byte buffer."""
    pos = np.array([2**40], np.int64)
    for twin in (C, PY):
        assert twin.unpack_one(b"\0" * 8, 64, 2**58, 2**40) is None
        assert twin.unpack_one(b"\0" * 8, 64, 2**63 - 1, 2**62) is None
        assert twin.unpack_at({}, lambda name: b"\0" * 8, b"x", 2**58, 2**58, 64, 0, pos)[:2] == (2, 0)
        assert twin.unpack_at({}, lambda name: b"\0" * 8, b"x", 2**40 + 1, 1, 1, 0, pos)[:2] == (2, 0)  # chunk 2**40
        assert twin.unpack_bits(np.zeros(8, np.uint8), 64, 2**58, pos)[0] == 1


@settings(max_examples=60, deadline=None)
@given(
    queries=hnp.arrays(np.uint64, st.integers(0, 20)),
    fps=hnp.arrays(np.uint64, st.integers(0, 300)),
    k=st.integers(0, 64),
    flips=st.integers(0, 3),
)
def test_compare_all_and_compare_pairs_equal_brute_force(queries, fps, k, flips):
    """search.compare_all (each query against every fingerprint) and compare_pairs (every pair of
    one batch): the rows numpy's broadcast finds, in the same order (query or i, then index)."""
    from fpstore.index import search

    near = min(len(queries) // 2, len(fps))  # some queries near stored fingerprints
    queries[:near] = fps[:near] ^ np.uint64((1 << flips) - 1)
    dist = np.bitwise_count(queries[:, None] ^ fps[None, :])
    qi, j = np.nonzero(dist <= k)
    got = search.compare_all(queries, fps, k)
    assert [a.tolist() for a in got] == [qi.tolist(), j.tolist(), dist[qi, j].tolist()]
    assert [a.dtype for a in got] == [np.int64, np.int64, np.uint8]
    pd = np.bitwise_count(fps[:, None] ^ fps[None, :])
    lo, hi = np.nonzero(np.triu(pd <= k, 1))
    got = search.compare_pairs(fps, k)
    assert [a.tolist() for a in got] == [lo.tolist(), hi.tolist(), pd[lo, hi].tolist()]


@given(st.integers(0, 2**32 - 1), st.integers(0, 10), st.integers(0, 64), st.booleans())
@settings(max_examples=150, deadline=None)
def test_joins_compare_alike_four_at_a_time_and_one_at_a_time(seed, prefix_bits, k, same):
    """prefix_join's group compares, eight keys per step (AVX-512), four (AVX2) and one at a
    time, give the same rows in the same order, equal to brute force (groups of tens of keys,
    near pairs planted)."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2**64 - 1, 300, dtype=np.uint64, endpoint=True)
    a[::3] = a[1::3][: len(a[::3])] ^ (np.uint64(1) << rng.integers(0, 64, len(a[::3])).astype(np.uint64))
    a = np.sort(a)
    b = a if same else np.sort(a ^ (np.uint64(1) << rng.integers(0, 64, len(a)).astype(np.uint64)))
    masks = np.zeros(1, np.uint64)
    got = []
    for level in (2, 1, 0):
        with kernel_setting(C.use_vector_compare, level):
            got.append(tuple(x.tolist() for x in C.prefix_join(a, b, prefix_bits, masks, k, same)))
    assert got[0] == got[1] == got[2]
    shift = np.uint64(64 - prefix_bits) if prefix_bits else None
    pa = a >> shift if shift is not None and prefix_bits < 64 else np.zeros(len(a), np.uint64)
    pb = b >> shift if shift is not None and prefix_bits < 64 else np.zeros(len(b), np.uint64)
    d = np.bitwise_count(a[:, None] ^ b[None, :])
    ok = (pa[:, None] == pb[None, :]) & (d <= k)
    if same:
        ok &= np.triu(np.ones_like(ok), 1).astype(bool)
    i, j = np.nonzero(ok)
    assert sorted(zip(got[0][0], got[0][1], got[0][2])) == sorted(zip(i.tolist(), j.tolist(), d[i, j].tolist()))


@given(st.integers(0, 2**32 - 1), st.integers(1, 3000), st.sampled_from([2, 1000, 10**6]), st.sampled_from([2, 2**20, 2**40, 2**63 - 1]))
@settings(max_examples=60, deadline=None)
def test_order_rows_is_lexsort(seed, n, nq, id_bound):
    """search.order_rows orders rows by (query, distance, id) exactly as np.lexsort: with the
    three packed in one key where they fit in 64 bits, and by two passes where they do not
    (ids near 2**63)."""
    from fpstore.index import search

    rng = np.random.default_rng(seed)
    q = rng.integers(0, nq, n).astype(np.int64)
    d = rng.integers(0, 65, n).astype(np.uint8)
    ids = rng.integers(1, id_bound, n, dtype=np.int64, endpoint=True)
    ids[rng.integers(0, n, n // 3)] = ids[0]  # equal ids: ties broken by nothing else
    order = search.order_rows(q, d, ids)
    want = np.lexsort((ids, d, q))
    assert [(q[i], d[i], ids[i]) for i in order] == [(q[i], d[i], ids[i]) for i in want]
    assert sorted(order.tolist()) == list(range(n))

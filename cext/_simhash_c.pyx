# cython: language_level=3
"""Compiled fingerprint kernel: SimHash scheme 1 and MinHash1 scheme 1 (``kind`` 0 and 1).
The specification is ``fpstore/fingerprint/_simhash_py.py``.

Reads a str's code points in place (PEP 393 storage, 1, 2 or 4 bytes per code point), folds them
through the tokenizer table, hashes each token once, combines token hashes per shingle and counts
bit votes. With ``nfkc`` set it first puts the text in NFKC form, stretch by stretch (see
``nfkc``), so that the normalisation runs without the GIL too. No I/O, no validation beyond what
memory safety needs; the GIL is released while texts are scanned.
"""

from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

from _nfkc cimport NF_DEFERRED, NF_LEN_SHIFT, NF_NOMEM, NF_OFF_SHIFT, NfkcTables, U32Buf, buf_room, nf_decompose, nf_finish

cdef extern from "Python.h":
    int PyUnicode_READY(object o) except -1
    int PyUnicode_KIND(object o)
    int PyUnicode_IS_ASCII(object o)
    void* PyUnicode_DATA(object o)
    Py_ssize_t PyUnicode_GET_LENGTH(object o)
    object PyUnicode_FromKindAndData(int kind, const void* buffer, Py_ssize_t size)

cdef enum:
    MAX_SHINGLE = 16
    SCAN_BLOCK = 256                # characters hashed per pass of scan(); at most as many tokens end
    MAX_SKETCH_WORDS = 8
    IDF_EMPTY = 0xFFFF
    # 16-bit lanes take shingle weights up to 16 * 255; flush well before a lane can overflow.
    LANE16_LIMIT = 65535 - 16 * 255

# The pipeline's constants, as C constants: module-level cdef globals would be reloaded from memory
# after every store through the accumulator (the kernels build with -fno-strict-aliasing).
cdef extern from *:
    """
    #define FPK_FNV_OFFSET 0xCBF29CE484222325ULL
    #define FPK_FNV_PRIME 0x100000001B3ULL
    #define FPK_FNV_OFFSET_OVER_PRIME 0x1D10331A6B696BC7ULL
    #define FPK_GOLDEN 0x9E3779B97F4A7C15ULL
    #define FPK_SHINGLE_MUL 0xD6E8FEB86659FD93ULL
    #define FPK_DIGEST_A0 0x243F6A8885A308D3ULL
    #define FPK_DIGEST_B0 0x13198A2E03707344ULL
    #define FPK_DIGEST_MUL_A 0xFF51AFD7ED558CCDULL
    #define FPK_DIGEST_MUL_B 0xC4CEB9FE1A85EC53ULL
    #define FPK_DENSIFY 0x5851F42D4C957F2DULL
    #define FPK_SKETCH_SALT 0xA0761D6478BD642FULL
    #define FPK_SKETCH_MUL 0xE7037ED1A0B428DBULL
    """
    const uint64_t FNV_OFFSET "FPK_FNV_OFFSET"
    const uint64_t FNV_PRIME "FPK_FNV_PRIME"
    const uint64_t FNV_OFFSET_OVER_PRIME "FPK_FNV_OFFSET_OVER_PRIME"  # times FNV_PRIME is FNV_OFFSET
    const uint64_t GOLDEN "FPK_GOLDEN"
    const uint64_t SHINGLE_MUL "FPK_SHINGLE_MUL"
    const uint64_t DIGEST_A0 "FPK_DIGEST_A0"
    const uint64_t DIGEST_B0 "FPK_DIGEST_B0"
    const uint64_t DIGEST_MUL_A "FPK_DIGEST_MUL_A"
    const uint64_t DIGEST_MUL_B "FPK_DIGEST_MUL_B"
    const uint64_t DENSIFY "FPK_DENSIFY"
    const uint64_t SKETCH_SALT "FPK_SKETCH_SALT"
    const uint64_t SKETCH_MUL "FPK_SKETCH_MUL"

KIND_SIMHASH64 = 0
KIND_MINHASH1 = 1

# SPREAD8[v] puts bit l of byte v into byte lane l (0 or 1): adding it counts 8 bits at once.
# SPREAD16[v] does the same for a nibble into four 16-bit lanes.
cdef uint64_t SPREAD8[256]
cdef uint64_t SPREAD16[16]


cdef void _init_spread():
    cdef int v, l
    for v in range(256):
        SPREAD8[v] = 0
        for l in range(8):
            if (v >> l) & 1:
                SPREAD8[v] |= (<uint64_t>1) << (8 * l)
    for v in range(16):
        SPREAD16[v] = 0
        for l in range(4):
            if (v >> l) & 1:
                SPREAD16[v] |= (<uint64_t>1) << (16 * l)


_init_spread()

cdef const uint32_t* _FOLD = NULL
cdef object _fold_keepalive = None


def set_fold_table(fold):
    """Install the uint32[0x110000] fold table (0 = separator) used by every later call."""
    global _FOLD, _fold_keepalive
    cdef const uint32_t[::1] view = fold
    if view.shape[0] != 0x110000:
        raise ValueError("fold table must have 0x110000 entries")
    _fold_keepalive = view
    _FOLD = &view[0]


cdef inline uint64_t fmix64(uint64_t x) noexcept nogil:
    x ^= x >> 30
    x *= 0xBF58476D1CE4E5B9ULL
    x ^= x >> 27
    x *= 0x94D049BB133111EBULL
    return x ^ (x >> 31)


cdef inline uint64_t rotl(uint64_t x, int r) noexcept nogil:
    return (x << r) | (x >> (64 - r))


cdef struct Acc:
    uint64_t seed
    uint64_t start
    int shingle
    int kind                        # 0 SimHash, 1 MinHash1
    int weighted
    Py_ssize_t ntok
    # The last `shingle` token hashes, oldest first, are ring[pos:pos + shingle]: each token is
    # written twice, at pos and pos + shingle, so the window is contiguous without shifting.
    uint64_t ring[2 * MAX_SHINGLE]
    uint32_t wring[2 * MAX_SHINGLE] # their idf weights (weighted SimHash only)
    int pos
    uint64_t lanes8[8]
    int pending8
    uint64_t lanes16[16]
    int64_t pending16
    int64_t ones[64]
    int64_t total
    uint64_t shingle_sum            # order-independent tie-breaker (see the spec)
    uint64_t mins[64]               # MinHash1: smallest shingle hash per bin (all ones when empty)
    uint64_t filled                 # MinHash1: bit b set when bin b has a minimum
    int sketch_words                # MinHash1: words of the verification sketch (0..MAX_SKETCH_WORDS)
    uint64_t salts[MAX_SKETCH_WORDS]
    uint64_t sfilled[MAX_SKETCH_WORDS]
    uint64_t da
    uint64_t db
    uint64_t h                      # FNV state of the token being read (a text may come in pieces)
    bint in_token
    const uint64_t* idf_keys
    const uint16_t* idf_weights
    uint64_t idf_mask
    uint32_t idf_default
    uint32_t smins[MAX_SKETCH_WORDS + 1][64]   # last: acc_init clears only what is used of it


cdef inline uint32_t idf_lookup(Acc* acc, uint64_t h) noexcept nogil:
    cdef uint64_t slot = h & acc.idf_mask
    cdef uint16_t w
    while True:
        w = acc.idf_weights[slot]
        if w == IDF_EMPTY:
            return acc.idf_default
        if acc.idf_keys[slot] == h:
            return w
        slot = (slot + 1) & acc.idf_mask


cdef inline void spill(int64_t* ones, uint64_t* lanes, int n_lanes, int width) noexcept nogil:
    """Add the counters packed `width` bits apiece in each lane to `ones`, then clear the lanes."""
    cdef int per_lane = 64 // width
    cdef uint64_t mask = ((<uint64_t>1) << width) - 1
    cdef int j, l
    for j in range(n_lanes):
        for l in range(per_lane):
            ones[per_lane * j + l] += (lanes[j] >> (width * l)) & mask
        lanes[j] = 0


cdef inline void flush8(Acc* acc) noexcept nogil:
    spill(acc.ones, acc.lanes8, 8, 8)
    acc.pending8 = 0


cdef inline void flush16(Acc* acc) noexcept nogil:
    spill(acc.ones, acc.lanes16, 16, 16)
    acc.pending16 = 0


cdef inline void add_shingle(Acc* acc, Py_ssize_t first, Py_ssize_t count) noexcept nogil:
    """Vote with the shingle made of ring[first:first + count]."""
    cdef uint64_t a = acc.start
    cdef uint32_t weight = 0
    cdef Py_ssize_t j
    for j in range(first, first + count):
        a = (a ^ acc.ring[j]) * SHINGLE_MUL
    cdef uint64_t sh = fmix64(a)
    cdef uint64_t b, v
    cdef uint32_t lo32, m
    cdef uint32_t* mins32
    cdef int w
    if acc.kind == 1:
        # One-permutation MinHash: the top 6 bits pick the bin, the bin keeps its minimum.
        # Without a branch: a new minimum is a coin flip early in a text (an empty bin holds all
        # ones, so its first shingle always lands).
        b = sh >> 58
        v = acc.mins[b]
        acc.mins[b] = sh if sh < v else v
        acc.filled |= (<uint64_t>1) << b
        # Sketch words come in pairs: one rehash of the shingle hash per pair, its high and low
        # 32 bits each a word's value (bin: the value's top 6 bits). The minima are kept without a
        # branch: a new minimum is a coin flip early in a text, and a mispredicted branch costs
        # more than the store.
        mins32 = &acc.smins[0][0]
        for w in range(0, acc.sketch_words, 2):
            v = (sh ^ acc.salts[w >> 1]) * SKETCH_MUL
            v ^= v >> 29
            b = v >> 58
            lo32 = <uint32_t>(v >> 32)
            m = mins32[w * 64 + b]
            mins32[w * 64 + b] = lo32 if lo32 < m else m
            acc.sfilled[w] |= (<uint64_t>1) << b
            lo32 = <uint32_t>v
            b = lo32 >> 26
            m = mins32[w * 64 + 64 + b]
            mins32[w * 64 + 64 + b] = lo32 if lo32 < m else m
            acc.sfilled[w + 1] |= (<uint64_t>1) << b
        return
    acc.shingle_sum += sh
    if not acc.weighted:
        acc.total += 1
        for j in range(8):
            acc.lanes8[j] += SPREAD8[(sh >> (8 * j)) & 0xFF]
        acc.pending8 += 1
        if acc.pending8 == 255:
            flush8(acc)
    else:
        for j in range(first, first + count):
            weight += acc.wring[j]
        acc.total += weight
        for j in range(16):
            acc.lanes16[j] += SPREAD16[(sh >> (4 * j)) & 0xF] * weight
        acc.pending16 += weight
        if acc.pending16 > LANE16_LIMIT:
            flush16(acc)


cdef inline void push_token(Acc* acc, uint64_t t) noexcept nogil:
    cdef int w = acc.shingle
    cdef int pos = acc.pos
    cdef uint32_t weight
    acc.ring[pos] = t
    acc.ring[pos + w] = t
    if acc.weighted:
        weight = idf_lookup(acc, t)
        acc.wring[pos] = weight
        acc.wring[pos + w] = weight
    pos += 1
    if pos == w:
        pos = 0
    acc.pos = pos
    acc.ntok += 1
    acc.da = (rotl(acc.da, 23) ^ t) * DIGEST_MUL_A
    acc.db = (acc.db + t) * DIGEST_MUL_B
    acc.db ^= acc.db >> 29
    if acc.ntok >= w:
        add_shingle(acc, pos, w)


ctypedef fused char_t:
    uint8_t
    uint16_t
    uint32_t


cdef const uint8_t* _ACTIVE = NULL
cdef object _active_keepalive = None


def set_active_table(bits):
    """Install the uint8[0x110000 // 8] bitset of NFKC-active code points (bit cp & 7 of byte cp >> 3)."""
    global _ACTIVE, _active_keepalive
    cdef const uint8_t[::1] view = bits
    if view.shape[0] != 0x110000 // 8:
        raise ValueError("active table must have 0x110000 // 8 bytes")
    _active_keepalive = view
    _ACTIVE = &view[0]


cdef inline bint is_active(uint32_t cp) noexcept nogil:
    # Code points above U+10FFFF never occur in a CPython str; treated as active, never looked up.
    return cp > 0x10FFFF or (_ACTIVE[cp >> 3] >> (cp & 7)) & 1


cdef Py_ssize_t active_runs(const char_t* data, Py_ssize_t n, Py_ssize_t* out, Py_ssize_t cap) noexcept nogil:
    # Writes start, end pairs of maximal active runs into out (up to cap pairs); returns the
    # number of runs found, which may exceed cap (the caller then asks again with room for all).
    cdef Py_ssize_t i = 0, runs = 0, start
    while i < n:
        if not is_active(data[i]):
            i += 1
            continue
        start = i
        i += 1
        while i < n and is_active(data[i]):
            i += 1
        if runs < cap:
            out[2 * runs] = start
            out[2 * runs + 1] = i
        runs += 1
    return runs


def nfkc_active_runs(str text):
    """Flat list ``[start0, end0, start1, end1, ...]`` of the maximal runs of NFKC-active code
    points in ``text`` (see ``fpstore.fingerprint.text.nfkc``); empty for ASCII text."""
    if _ACTIVE == NULL:
        raise RuntimeError("set_active_table() first")
    PyUnicode_READY(text)
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text)
    cdef int kind = PyUnicode_KIND(text)
    cdef const void* data = PyUnicode_DATA(text)
    cdef Py_ssize_t cap = 16, runs, i
    cdef Py_ssize_t* buf
    if text.isascii():
        return []
    while True:
        buf = <Py_ssize_t*>malloc(2 * cap * sizeof(Py_ssize_t))
        if buf == NULL:
            raise MemoryError()
        with nogil:
            if kind == 1:
                runs = active_runs(<const uint8_t*>data, n, buf, cap)
            elif kind == 2:
                runs = active_runs(<const uint16_t*>data, n, buf, cap)
            else:
                runs = active_runs(<const uint32_t*>data, n, buf, cap)
        if runs <= cap:
            out = [buf[i] for i in range(2 * runs)]
            free(buf)
            return out
        free(buf)
        cap = runs


cdef void scan(const char_t* data, Py_ssize_t n, Acc* acc) noexcept nogil:
    # Token state lives in acc between calls, so a text can be scanned in pieces (see scan_nfkc).
    # Two passes per block of SCAN_BLOCK characters. The first hashes characters without a branch:
    # every character stores the running hash in toks[k] and only the end of a token advances k,
    # so the word boundaries (about one character in six, at random) cost no mispredicted branch.
    # The second pass feeds the finished tokens to the shingles.
    cdef uint64_t toks[SCAN_BLOCK]
    cdef uint64_t h = acc.h
    cdef uint64_t seed = acc.seed
    cdef uint64_t in_token = acc.in_token
    cdef uint64_t is_char, keep
    cdef uint32_t cp, folded
    cdef Py_ssize_t i, j, k, end
    cdef Py_ssize_t block = 0
    while block < n:
        end = min(n, block + SCAN_BLOCK)
        k = 0
        for i in range(block, end):
            cp = data[i]
            if char_t is uint32_t:
                if cp > 0x10FFFF:  # CPython never stores these; a corrupt str must not read past FOLD
                    cp = 0
            folded = _FOLD[cp]
            is_char = folded != 0
            toks[k] = h
            k += in_token & (is_char ^ 1)
            in_token = is_char
            # FNV-1a step for a token character; FNV_OFFSET for any other, as (0 ^ X) * PRIME
            # with X = FNV_OFFSET / PRIME (mod 2**64). A mask, not a select, so the compiler
            # cannot turn it back into a branch.
            keep = <uint64_t>0 - is_char
            h = ((h & keep) ^ (folded | (FNV_OFFSET_OVER_PRIME & ~keep))) * FNV_PRIME
        for j in range(k):
            push_token(acc, fmix64(toks[j] ^ seed))
        block = end
    acc.h = h
    acc.in_token = in_token != 0


cdef inline void scan_end(Acc* acc) noexcept nogil:
    if acc.in_token:
        push_token(acc, fmix64(acc.h ^ acc.seed))
        acc.h = FNV_OFFSET
        acc.in_token = False


# -- NFKC without the GIL -------------------------------------------------------------------------

cdef NfkcTables _NF
cdef bint _NF_READY = False
cdef object _nf_keepalive = None
cdef object _nf_fallback = None


def set_nfkc_tables(stage1, stage2, pool, comp, fallback=None):
    """Install the NFKC tables of ``fpstore.fingerprint._nfkc_pack`` (its docstring has the layout).

    ``fallback``: None, or a function str -> str applied to a whole text that holds a code point
    the tables call unassigned (set it when ``unicodedata`` is of a newer Unicode version, which
    may map such code points). Every index the tables imply is checked here, once, so that the
    kernel can read them without checks and without the GIL. Like ``set_fold_table``, not to be
    called while another thread runs the kernel (``fpstore.fingerprint.text`` calls it on import)."""
    global _NF_READY, _nf_keepalive, _nf_fallback
    cdef const uint16_t[::1] s1 = stage1
    cdef const uint32_t[::1] s2 = stage2
    cdef const uint32_t[::1] pl = pool
    cdef const uint64_t[::1] cp = comp
    cdef Py_ssize_t i, nblocks, length, off, bits = 0, empty = 0
    cdef uint32_t r
    if fallback is not None and not callable(fallback):
        raise TypeError("fallback must be None or a function str -> str")
    if s1.shape[0] != 0x110000 >> 7:
        raise ValueError("stage1 must have 0x110000 >> 7 entries")
    nblocks = s2.shape[0] >> 7
    if nblocks == 0 or s2.shape[0] & 127:
        raise ValueError("stage2 must hold whole blocks of 128 records")
    for i in range(s1.shape[0]):
        if s1[i] >= nblocks:
            raise ValueError(f"stage1[{i}] names block {s1[i]} of {nblocks}")
    for i in range(s2.shape[0]):
        r = s2[i]
        length = (r >> NF_LEN_SHIFT) & 31
        off = r >> NF_OFF_SHIFT
        if length and off + length > pl.shape[0]:
            raise ValueError(f"stage2[{i}] points past the end of pool")
    for i in range(pl.shape[0]):
        if pl[i] > 0x10FFFF:
            raise ValueError(f"pool[{i}] is not a code point")
    if cp.shape[0] < 2 or cp.shape[0] & (cp.shape[0] - 1):
        raise ValueError("comp must have a power-of-two number of slots")
    while (<Py_ssize_t>1 << bits) < cp.shape[0]:
        bits += 1
    for i in range(cp.shape[0]):
        if cp[i] == 0:
            empty += 1
        elif (cp[i] & 0x1FFFFF) == 0 or (cp[i] & 0x1FFFFF) > 0x10FFFF:
            raise ValueError(f"comp[{i}] does not hold a code point")
    if empty == 0:
        raise ValueError("comp must have an empty slot (a lookup stops at one)")
    _NF_READY = False
    _nf_keepalive = (s1, s2, pl, cp)
    _nf_fallback = fallback
    _NF.stage1 = &s1[0]
    _NF.stage2 = &s2[0]
    _NF.pool = &pl[0] if pl.shape[0] else NULL
    _NF.comp = &cp[0]
    _NF.comp_mask = cp.shape[0] - 1
    _NF.comp_shift = 64 - bits
    _NF.defer_unassigned = fallback is not None
    _NF_READY = True


cdef int nfkc_stretch(const char_t* data, Py_ssize_t lo, Py_ssize_t hi, U32Buf* out, U32Buf* tmp) noexcept nogil:
    """Append NFKC(data[lo:hi]) to out: 0, NF_NOMEM or NF_DEFERRED (out unchanged then)."""
    cdef Py_ssize_t base = out.n, i
    cdef int rc
    for i in range(lo, hi):
        rc = nf_decompose(&_NF, data[i], out)
        if rc < 0:
            out.n = base
            return rc
    return nf_finish(&_NF, out, base, tmp)


cdef inline Py_ssize_t skip_ascii(const char_t* data, Py_ssize_t n, Py_ssize_t j) noexcept nogil:
    """The first index from j on that is not ASCII (n if none), a word at a time: ASCII is never
    active, and most non-ASCII text is mostly ASCII, so this keeps the search for runs cheap."""
    cdef uint64_t w, mask
    if char_t is uint8_t:
        mask = 0x8080808080808080ULL
    elif char_t is uint16_t:
        mask = 0xFF80FF80FF80FF80ULL
    else:
        mask = 0xFFFFFF80FFFFFF80ULL
    while j + <Py_ssize_t>(8 // sizeof(char_t)) <= n:
        memcpy(&w, data + j, 8)
        if w & mask:
            break
        j += 8 // sizeof(char_t)
    while j < n and data[j] < 0x80:
        j += 1
    return j


cdef inline Py_ssize_t next_run(const char_t* data, Py_ssize_t n, Py_ssize_t* i) noexcept nogil:
    """Advance i[0] past the next maximal run of active code points; returns its start (n: none).

    UAX #15: text splits into independently normalised stretches before every inert code point,
    so each active run is normalised with the inert code point before it (a mark in the run may
    compose with it) and everything else is already in NFKC form."""
    cdef Py_ssize_t j = i[0], start
    while j < n:
        j = skip_ascii(data, n, j)
        if j == n or is_active(data[j]):
            break
        j += 1
    start = j
    while j < n and is_active(data[j]):
        j += 1
    i[0] = j
    return start


cdef int scan_nfkc(const char_t* data, Py_ssize_t n, Acc* acc, U32Buf* seg, U32Buf* tmp) noexcept nogil:
    """scan() of NFKC(data[0:n]): inert stretches in place, each active run through seg."""
    cdef Py_ssize_t pos = 0, i = 0, start, lo
    cdef int rc
    while True:
        start = next_run(data, n, &i)
        if start == n:
            break
        lo = start - 1 if start > 0 else 0
        scan(data + pos, lo - pos, acc)
        seg.n = 0
        rc = nfkc_stretch(data, lo, i, seg, tmp)
        if rc < 0:
            return rc
        scan(<const uint32_t*>seg.p, seg.n, acc)
        pos = i
    scan(data + pos, n - pos, acc)
    return 0


cdef int scan_nfkc_any(int kind, const void* data, Py_ssize_t n, Acc* acc, U32Buf* seg, U32Buf* tmp) noexcept nogil:
    if kind == 1:
        return scan_nfkc(<const uint8_t*>data, n, acc, seg, tmp)
    elif kind == 2:
        return scan_nfkc(<const uint16_t*>data, n, acc, seg, tmp)
    return scan_nfkc(<const uint32_t*>data, n, acc, seg, tmp)


cdef Py_ssize_t nfkc_into(const char_t* data, Py_ssize_t n, U32Buf* out, U32Buf* tmp) noexcept nogil:
    """NFKC(data[0:n]) into out (as code points); returns the number of active runs (0: the text
    is its own NFKC form and out is left empty), NF_NOMEM or NF_DEFERRED."""
    cdef Py_ssize_t pos = 0, i = 0, start, lo, j, runs = 0
    cdef int rc
    while True:
        start = next_run(data, n, &i)
        if start == n:
            break
        runs += 1
        lo = start - 1 if start > 0 else 0
        if buf_room(out, lo - pos) < 0:
            return NF_NOMEM
        for j in range(pos, lo):
            out.p[out.n + j - pos] = data[j]
        out.n += lo - pos
        rc = nfkc_stretch(data, lo, i, out, tmp)
        if rc < 0:
            return rc
        pos = i
    if runs == 0:
        return 0
    if buf_room(out, n - pos) < 0:
        return NF_NOMEM
    for j in range(pos, n):
        out.p[out.n + j - pos] = data[j]
    out.n += n - pos
    return runs


cdef Py_ssize_t nfkc_into_any(int kind, const void* data, Py_ssize_t n, U32Buf* out, U32Buf* tmp) noexcept nogil:
    if kind == 1:
        return nfkc_into(<const uint8_t*>data, n, out, tmp)
    elif kind == 2:
        return nfkc_into(<const uint16_t*>data, n, out, tmp)
    return nfkc_into(<const uint32_t*>data, n, out, tmp)


cdef int _check_nfkc() except -1:
    if _ACTIVE == NULL or not _NF_READY:
        raise RuntimeError("set_active_table() and set_nfkc_tables() first")
    return 0


def nfkc(str text):
    """``unicodedata.normalize("NFKC", text)`` for the tables' Unicode version, computed here (the
    GIL released for long texts); ``text`` itself when it is its own NFKC form by the active-run
    test. A text with a code point the tables call unassigned goes to the installed fallback."""
    _check_nfkc()
    PyUnicode_READY(text)
    if PyUnicode_IS_ASCII(text):
        return text
    cdef int kind = PyUnicode_KIND(text)
    cdef const void* data = PyUnicode_DATA(text)
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text), rc
    cdef U32Buf out, tmp
    memset(&out, 0, sizeof(U32Buf))
    memset(&tmp, 0, sizeof(U32Buf))
    try:
        if n > 4096:
            with nogil:
                rc = nfkc_into_any(kind, data, n, &out, &tmp)
        else:
            rc = nfkc_into_any(kind, data, n, &out, &tmp)
        if rc == NF_NOMEM:
            raise MemoryError()
        if rc == NF_DEFERRED:
            return _fallback(text)
        if rc == 0:
            return text
        return PyUnicode_FromKindAndData(4, out.p, out.n)
    finally:
        free(out.p)
        free(tmp.p)


cdef str _fallback(str text):
    result = _nf_fallback(text)
    if type(result) is not str:
        raise TypeError(f"the NFKC fallback returned {type(result).__name__}, not str")
    return result


cdef void acc_init(Acc* acc, uint64_t seed, int shingle, const uint64_t* idf_keys,
                   const uint16_t* idf_weights, uint64_t idf_mask, uint32_t idf_default, int kind,
                   int sketch_words=0) noexcept nogil:
    memset(acc, 0, <size_t>(<char*>&acc.smins[0][0] - <char*>acc))
    memset(&acc.mins[0], 0xFF, sizeof(acc.mins))
    cdef int w
    acc.sketch_words = sketch_words if kind == 1 else 0
    # An odd word count still fills a pair: the unused word's minima are computed and dropped.
    memset(&acc.smins[0][0], 0xFF, <size_t>(acc.sketch_words + 1) * 64 * sizeof(uint32_t))
    for w in range(0, acc.sketch_words, 2):
        acc.salts[w >> 1] = sketch_salt(seed, w >> 1)
    acc.seed = seed
    acc.start = fmix64(seed + GOLDEN)
    acc.shingle = shingle
    acc.kind = kind
    acc.weighted = idf_keys != NULL and kind == 0
    acc.idf_keys = idf_keys
    acc.idf_weights = idf_weights
    acc.idf_mask = idf_mask
    acc.idf_default = idf_default
    acc.da = DIGEST_A0 ^ seed
    acc.db = DIGEST_B0 ^ seed
    acc.h = FNV_OFFSET


cdef inline uint64_t sketch_salt(uint64_t seed, int w) noexcept nogil:
    """The salt of sketch word w (0-based): every shingle hash is rehashed with it."""
    return fmix64(seed ^ (SKETCH_SALT * <uint64_t>(w + 1)))


cdef inline int densified_bin(uint64_t filled, uint64_t seed, int i) noexcept nogil:
    """Bin i if it has a minimum, else the bin optimal densification copies into it (see the
    spec): probe bins in an order fixed by (i, seed). ``filled`` must not be 0."""
    cdef uint64_t p
    cdef int a, j
    if (filled >> i) & 1:
        return i
    for a in range(64):
        p = fmix64(DENSIFY ^ seed ^ <uint64_t>((i << 8) | a)) & 63
        if (filled >> p) & 1:
            return <int>p
    j = (i + 1) & 63
    while not ((filled >> j) & 1):
        j = (j + 1) & 63
    return j


ctypedef fused minimum_t:
    uint64_t    # the fingerprint's bins
    uint32_t    # a sketch word's bins


cdef uint64_t minhash1_bits(const minimum_t* mins, uint64_t filled, uint64_t seed) noexcept nogil:
    """A 64-bit one-bit MinHash word from per-bin minima: bit i is the salted lowest bit of the
    minimum of bin i, or of the bin densification copies into it; 0 when no bin has one."""
    cdef uint64_t out = 0
    cdef int i
    if filled == 0:
        return 0
    for i in range(64):
        out |= (fmix64(<uint64_t>mins[densified_bin(filled, seed, i)] + <uint64_t>(i + 1) * GOLDEN) & 1) << i
    return out


cdef void acc_finish(Acc* acc, uint64_t* fp, int64_t* ntok, uint64_t* da, uint64_t* db,
                     uint64_t* sketch=NULL) noexcept nogil:
    cdef int w = acc.shingle
    cdef int b
    scan_end(acc)
    if 0 < acc.ntok < w:
        # A short text is one shingle of all its tokens, the last ntok of the window.
        add_shingle(acc, acc.pos + w - acc.ntok, acc.ntok)
    ntok[0] = acc.ntok
    da[0] = fmix64(acc.da ^ <uint64_t>acc.ntok)
    db[0] = fmix64(acc.db + <uint64_t>acc.ntok * GOLDEN)
    if acc.kind == 1:
        fp[0] = minhash1_bits(<const uint64_t*>acc.mins, acc.filled, acc.seed)
        for b in range(acc.sketch_words):
            sketch[b] = minhash1_bits(<const uint32_t*>acc.smins[b], acc.sfilled[b], acc.salts[b >> 1] + <uint64_t>(b & 1))
        return
    flush8(acc)
    flush16(acc)
    cdef uint64_t out = 0
    cdef uint64_t tie_break = fmix64(acc.shingle_sum)
    for b in range(64):
        if 2 * acc.ones[b] > acc.total or (2 * acc.ones[b] == acc.total and (tie_break >> b) & 1):
            out |= (<uint64_t>1) << b
    fp[0] = out


cdef void scan_any(int kind, const void* data, Py_ssize_t n, Acc* acc) noexcept nogil:
    if kind == 1:
        scan(<const uint8_t*>data, n, acc)
    elif kind == 2:
        scan(<const uint16_t*>data, n, acc)
    else:
        scan(<const uint32_t*>data, n, acc)


cdef class _Idf:
    """Borrowed views of an idf table ``(keys uint64[cap], weights uint16[cap], default)``."""
    cdef const uint64_t[::1] keys
    cdef const uint16_t[::1] weights
    cdef uint32_t default

    def __init__(self, idf):
        keys, weights, default = idf
        self.keys = keys
        self.weights = weights
        self.default = default
        cap = self.keys.shape[0]
        if cap == 0 or cap & (cap - 1) or self.weights.shape[0] != cap:
            raise ValueError("idf table capacity must be a power of two, keys and weights alike")


cdef void _idf_pointers(_Idf idf, const uint64_t** keys, const uint16_t** weights,
                        uint64_t* mask, uint32_t* default):
    if idf is None:
        keys[0] = NULL
        weights[0] = NULL
        mask[0] = 0
        default[0] = 0
    else:
        keys[0] = &idf.keys[0]
        weights[0] = &idf.weights[0]
        mask[0] = idf.keys.shape[0] - 1
        default[0] = idf.default


def _check(int shingle, int kind):
    if _FOLD == NULL:
        raise RuntimeError("set_fold_table() first")
    if not 1 <= shingle <= MAX_SHINGLE:
        raise ValueError(f"shingle must be in 1..{MAX_SHINGLE}")
    if kind != 0 and kind != 1:
        raise ValueError(f"unknown fingerprint kind {kind}")


cdef int _sketch_width(Py_ssize_t width, int kind) except -1:
    if width and kind != 1:
        raise ValueError("a sketch is made by kind 1 (MinHash1) only")
    if width > MAX_SKETCH_WORDS:
        raise ValueError(f"a sketch has at most {MAX_SKETCH_WORDS} words")
    return <int>width


def fingerprint(str text, uint64_t seed, int shingle, idf, int kind=0, bint nfkc=False, uint64_t[::1] sketch=None):
    """Return ``(fingerprint, token_count, digest_a, digest_b)`` of a normalised text, or with
    ``nfkc`` of a text normalised here (see ``nfkc``); with ``sketch`` (kind 1), fill its words
    with the verification sketch."""
    _check(shingle, kind)
    cdef int words = _sketch_width(0 if sketch is None else sketch.shape[0], kind)
    cdef uint64_t* sketch_out = NULL if words == 0 else &sketch[0]
    if nfkc:
        _check_nfkc()
    cdef _Idf table = None if idf is None or kind != 0 else _Idf(idf)
    cdef const uint64_t* keys
    cdef const uint16_t* weights
    cdef uint64_t mask, fp, da, db
    cdef uint32_t default
    cdef int64_t ntok
    cdef Acc acc
    cdef int rc = 0
    cdef U32Buf seg, tmp
    _idf_pointers(table, &keys, &weights, &mask, &default)
    PyUnicode_READY(text)
    cdef int ukind = PyUnicode_KIND(text)
    cdef const void* data = PyUnicode_DATA(text)
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text)
    cdef bint normalise = nfkc and not PyUnicode_IS_ASCII(text)
    acc_init(&acc, seed, shingle, keys, weights, mask, default, kind, words)
    if normalise:
        memset(&seg, 0, sizeof(U32Buf))
        memset(&tmp, 0, sizeof(U32Buf))
        if n > 4096:
            with nogil:
                rc = scan_nfkc_any(ukind, data, n, &acc, &seg, &tmp)
        else:
            rc = scan_nfkc_any(ukind, data, n, &acc, &seg, &tmp)
        free(seg.p)
        free(tmp.p)
        if rc == NF_NOMEM:
            raise MemoryError()
        if rc == NF_DEFERRED:
            text = _fallback(text)
            PyUnicode_READY(text)
            ukind = PyUnicode_KIND(text)
            data = PyUnicode_DATA(text)
            n = PyUnicode_GET_LENGTH(text)
            acc_init(&acc, seed, shingle, keys, weights, mask, default, kind, words)
            normalise = False
    if not normalise:
        if n > 4096:
            with nogil:
                scan_any(ukind, data, n, &acc)
        else:
            scan_any(ukind, data, n, &acc)
    acc_finish(&acc, &fp, &ntok, &da, &db, sketch_out)
    return fp, ntok, da, db


def fingerprint_batch(list texts, Py_ssize_t lo, Py_ssize_t hi, uint64_t seed, int shingle, idf,
                      uint64_t[::1] out_fp, int64_t[::1] out_tokens, uint64_t[:, ::1] out_digest, int kind=0,
                      bint nfkc=False, uint64_t[:, ::1] out_sketch=None):
    """Fill ``out_fp[i]``, ``out_tokens[i]`` and ``out_digest[i, 0:2]`` for ``texts[lo:hi]``, with
    ``nfkc`` normalising each text first (see ``nfkc``), and with ``out_sketch`` (kind 1) its
    row i with text i's verification sketch.

    Pointers into the strs are gathered with the GIL held (``texts`` keeps them alive), then every
    text is normalised and scanned with the GIL released, so several threads can run batches at
    once. A text sent to the NFKC fallback is done after that, with the GIL.
    """
    _check(shingle, kind)
    if nfkc:
        _check_nfkc()
    if lo < 0 or hi > len(texts) or lo > hi:
        raise IndexError("bad batch bounds")
    if out_fp.shape[0] < hi or out_tokens.shape[0] < hi or out_digest.shape[0] < hi or out_digest.shape[1] != 2:
        raise ValueError("output arrays too small")
    cdef int words = _sketch_width(0 if out_sketch is None else out_sketch.shape[1], kind)
    if words and out_sketch.shape[0] < hi:
        raise ValueError("output arrays too small")
    cdef _Idf table = None if idf is None or kind != 0 else _Idf(idf)
    cdef const uint64_t* keys
    cdef const uint16_t* weights
    cdef uint64_t mask
    cdef uint32_t default
    _idf_pointers(table, &keys, &weights, &mask, &default)
    cdef Py_ssize_t count = hi - lo
    cdef const void** datas = <const void**>malloc(max(count, 1) * sizeof(void*))
    cdef Py_ssize_t* lengths = <Py_ssize_t*>malloc(max(count, 1) * sizeof(Py_ssize_t))
    cdef int* kinds = <int*>malloc(max(count, 1) * sizeof(int))
    cdef Py_ssize_t* deferred = <Py_ssize_t*>malloc(max(count, 1) * sizeof(Py_ssize_t))
    cdef Py_ssize_t i, j, ndeferred = 0
    cdef int rc = 0
    cdef Acc acc
    cdef U32Buf seg, tmp
    memset(&seg, 0, sizeof(U32Buf))
    memset(&tmp, 0, sizeof(U32Buf))
    if datas == NULL or lengths == NULL or kinds == NULL or deferred == NULL:
        free(datas); free(lengths); free(kinds); free(deferred)
        raise MemoryError()
    try:
        for i in range(count):
            text = texts[lo + i]
            if type(text) is not str:
                raise TypeError(f"text at index {lo + i} must be str, not {type(text).__name__}")
            PyUnicode_READY(text)
            datas[i] = PyUnicode_DATA(text)
            lengths[i] = PyUnicode_GET_LENGTH(text)
            # A negative kind marks a text scanned as it is: ASCII (its own NFKC form), or nfkc off.
            kinds[i] = PyUnicode_KIND(text) if nfkc and not PyUnicode_IS_ASCII(text) else -PyUnicode_KIND(text)
        with nogil:
            for i in range(count):
                acc_init(&acc, seed, shingle, keys, weights, mask, default, kind, words)
                if kinds[i] > 0:
                    rc = scan_nfkc_any(kinds[i], datas[i], lengths[i], &acc, &seg, &tmp)
                    if rc == NF_NOMEM:
                        break
                    if rc == NF_DEFERRED:
                        deferred[ndeferred] = i
                        ndeferred += 1
                        rc = 0
                        continue
                else:
                    scan_any(-kinds[i], datas[i], lengths[i], &acc)
                acc_finish(&acc, &out_fp[lo + i], &out_tokens[lo + i],
                           &out_digest[lo + i, 0], &out_digest[lo + i, 1], NULL if words == 0 else &out_sketch[lo + i, 0])
        if rc == NF_NOMEM:
            raise MemoryError()
        for j in range(ndeferred):
            i = deferred[j]
            text = _fallback(texts[lo + i])
            PyUnicode_READY(text)
            acc_init(&acc, seed, shingle, keys, weights, mask, default, kind, words)
            scan_any(PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text), &acc)
            acc_finish(&acc, &out_fp[lo + i], &out_tokens[lo + i],
                       &out_digest[lo + i, 0], &out_digest[lo + i, 1], NULL if words == 0 else &out_sketch[lo + i, 0])
    finally:
        free(datas)
        free(lengths)
        free(kinds)
        free(deferred)
        free(seg.p)
        free(tmp.p)

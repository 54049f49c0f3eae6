# cython: language_level=3
"""NFKC of one stretch of text without the GIL, cimported by ``_simhash_c.pyx``.

Unicode's algorithm (UAX #15): full compatibility decomposition, canonical ordering of each run of
non-starters (a stable sort by combining class), canonical composition; Hangul syllables decompose
and compose arithmetically. The tables are those of ``fpstore/fingerprint/_nfkc_pack.py``, whose
docstring gives their layout; ``_simhash_c.set_nfkc_tables`` checks every index they can produce
before installing them, so nothing here checks bounds again. Only ``inline`` functions: each
kernel that cimports this compiles its own copy.
"""

from libc.stdint cimport uint16_t, uint32_t, uint64_t
from libc.stdlib cimport realloc
from libc.string cimport memcpy

cdef enum:
    NF_CCC_MASK = 0xFF
    NF_UNASSIGNED = 1 << 8
    NF_SECOND = 1 << 9
    NF_LEN_SHIFT = 10
    NF_OFF_SHIFT = 15
    NF_MAX_FORM = 31                # the longest NFKD form a record can describe
    NF_NOMEM = -1
    NF_DEFERRED = -2                # an unassigned code point met with defer_unassigned set
    S_BASE = 0xAC00
    L_BASE = 0x1100
    V_BASE = 0x1161
    T_BASE = 0x11A7
    L_COUNT = 19
    V_COUNT = 21
    T_COUNT = 28
    N_COUNT = 588                   # V_COUNT * T_COUNT
    S_COUNT = 11172                 # L_COUNT * N_COUNT
    SORT_INSERTION_MAX = 16         # runs of non-starters up to this long: insertion sort

cdef extern from *:
    """
    /* Multiplier of the composition table's hash; fpstore/fingerprint/_nfkc_pack.py uses the same. */
    #define NF_HASH_MUL 0x9E3779B97F4A7C15ULL
    """
    const uint64_t NF_HASH_MUL


cdef struct NfkcTables:
    const uint16_t* stage1
    const uint32_t* stage2
    const uint32_t* pool
    const uint64_t* comp
    uint64_t comp_mask
    int comp_shift                  # 64 - log2(comp slots)
    # Set when Python's unicodedata is of another Unicode version than the tables: a code point
    # the tables call unassigned may have a mapping there, and unicodedata decides (NF_DEFERRED).
    bint defer_unassigned


cdef struct U32Buf:
    uint32_t* p
    Py_ssize_t n
    Py_ssize_t cap


cdef inline int buf_room(U32Buf* b, Py_ssize_t extra) noexcept nogil:
    """Make room for ``extra`` more code points: 0, or NF_NOMEM (the contents stay valid)."""
    cdef Py_ssize_t cap
    cdef void* p
    if b.cap - b.n >= extra:
        return 0
    cap = b.cap * 2 if b.cap else 256
    while cap - b.n < extra:
        if cap > (<Py_ssize_t>1 << 58):
            return NF_NOMEM
        cap *= 2
    p = realloc(b.p, cap * sizeof(uint32_t))
    if p == NULL:
        return NF_NOMEM
    b.p = <uint32_t*>p
    b.cap = cap
    return 0


cdef inline uint32_t nf_record(const NfkcTables* t, uint32_t cp) noexcept nogil:
    if cp > 0x10FFFF:  # never in a CPython str; a corrupt one must not read past stage1
        return 0
    return t.stage2[(<Py_ssize_t>t.stage1[cp >> 7] << 7) | (cp & 127)]


cdef inline uint32_t nf_ccc(const NfkcTables* t, uint32_t cp) noexcept nogil:
    return nf_record(t, cp) & NF_CCC_MASK


cdef inline uint32_t nf_compose(const NfkcTables* t, uint32_t a, uint32_t b) noexcept nogil:
    """The primary composite of ``a`` and ``b`` (``b`` has NF_SECOND), or 0 when they do not compose."""
    cdef uint64_t key, e, slot
    if L_BASE <= a < L_BASE + L_COUNT:
        if V_BASE <= b < V_BASE + V_COUNT:
            return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT
        return 0
    if S_BASE <= a < S_BASE + S_COUNT:
        if (a - S_BASE) % T_COUNT == 0 and T_BASE < b < T_BASE + T_COUNT:
            return a + (b - T_BASE)
        return 0
    key = (<uint64_t>a << 21) | b
    slot = (key * NF_HASH_MUL) >> t.comp_shift
    while True:
        e = t.comp[slot]
        if e == 0:
            return 0
        if (e >> 21) == key:
            return <uint32_t>(e & 0x1FFFFF)
        slot = (slot + 1) & t.comp_mask


cdef inline int nf_decompose(const NfkcTables* t, uint32_t cp, U32Buf* out) noexcept nogil:
    """Append the NFKD form of ``cp``: 0, NF_NOMEM or NF_DEFERRED."""
    cdef uint32_t r, s
    cdef Py_ssize_t n
    if out.cap - out.n < NF_MAX_FORM and buf_room(out, NF_MAX_FORM) < 0:
        return NF_NOMEM
    if S_BASE <= cp < S_BASE + S_COUNT:
        s = cp - S_BASE
        out.p[out.n] = L_BASE + s // N_COUNT
        out.p[out.n + 1] = V_BASE + (s % N_COUNT) // T_COUNT
        out.n += 2
        if s % T_COUNT:
            out.p[out.n] = T_BASE + s % T_COUNT
            out.n += 1
        return 0
    r = nf_record(t, cp)
    if r & NF_UNASSIGNED and t.defer_unassigned:
        return NF_DEFERRED
    n = (r >> NF_LEN_SHIFT) & 31
    if n:
        memcpy(out.p + out.n, t.pool + (r >> NF_OFF_SHIFT), n * sizeof(uint32_t))
        out.n += n
    else:
        out.p[out.n] = cp
        out.n += 1
    return 0


cdef inline int nf_sort_run(const NfkcTables* t, uint32_t* s, Py_ssize_t n, U32Buf* tmp) noexcept nogil:
    """Stable sort of the non-starters s[0:n] by combining class: 0 or NF_NOMEM.

    Short runs (all real text) by insertion; longer ones by counting sort, so that a hostile run
    of a million alternating marks costs linear time, not quadratic."""
    cdef Py_ssize_t i, j, pos
    cdef Py_ssize_t count[256]
    cdef uint32_t c, cc
    if n <= SORT_INSERTION_MAX:
        for i in range(1, n):
            c = s[i]
            cc = nf_ccc(t, c)
            j = i
            while j > 0 and nf_ccc(t, s[j - 1]) > cc:
                s[j] = s[j - 1]
                j -= 1
            s[j] = c
        return 0
    tmp.n = 0
    if buf_room(tmp, n) < 0:
        return NF_NOMEM
    for i in range(256):
        count[i] = 0
    for i in range(n):
        count[nf_ccc(t, s[i])] += 1
    pos = 0
    for i in range(256):
        pos, count[i] = pos + count[i], pos
    for i in range(n):
        cc = nf_ccc(t, s[i])
        tmp.p[count[cc]] = s[i]
        count[cc] += 1
    memcpy(s, tmp.p, n * sizeof(uint32_t))
    return 0


cdef inline int nf_reorder(const NfkcTables* t, uint32_t* s, Py_ssize_t n, U32Buf* tmp) noexcept nogil:
    """Canonical ordering of s[0:n]: each maximal run of non-starters sorted by class."""
    cdef Py_ssize_t i = 0, j
    while i < n:
        if nf_ccc(t, s[i]) == 0:
            i += 1
            continue
        j = i + 1
        while j < n and nf_ccc(t, s[j]) != 0:
            j += 1
        if j - i > 1 and nf_sort_run(t, s + i, j - i, tmp) < 0:
            return NF_NOMEM
        i = j
    return 0


cdef inline Py_ssize_t nf_compose_all(const NfkcTables* t, uint32_t* s, Py_ssize_t n) noexcept nogil:
    """Canonical composition of the decomposed, ordered s[0:n] in place; returns the new length.

    A character composes with the last starter when nothing between them blocks it: in ordered
    text that is when the last character kept after the starter has a lower class (or there is
    none, which lets two starters such as Hangul L and V compose)."""
    cdef Py_ssize_t i, out = 0, starter = -1
    cdef int last_cc = -1
    cdef uint32_t c, r, k
    cdef int cc
    for i in range(n):
        c = s[i]
        r = nf_record(t, c)
        cc = r & NF_CCC_MASK
        if starter >= 0 and last_cc < cc and r & NF_SECOND:
            k = nf_compose(t, s[starter], c)
            if k:
                s[starter] = k
                continue
        if cc == 0:
            starter = out
            last_cc = -1
        else:
            last_cc = cc
        s[out] = c
        out += 1
    return out


cdef inline int nf_finish(const NfkcTables* t, U32Buf* out, Py_ssize_t base, U32Buf* tmp) noexcept nogil:
    """Order and compose out.p[base:out.n], the decomposed stretch just appended: 0 or NF_NOMEM."""
    if nf_reorder(t, out.p + base, out.n - base, tmp) < 0:
        return NF_NOMEM
    out.n = base + nf_compose_all(t, out.p + base, out.n - base)
    return 0

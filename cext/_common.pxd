# cython: language_level=3
"""What the kernels share, cimported by ``_runs_c.pyx`` and ``_search_c.pyx``: a 64-bit popcount
and a growable buffer of ``(int64, uint64, uint8)`` triples (a probe's hits, a join's pairs).

Declarations and ``inline`` functions only: no module is built from this file, each kernel
compiles its own copy, and the hot loops inline these calls.
"""

from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy

cdef extern from *:
    """
    #include <stdint.h>
    /* Population count; the candidate checks are popcounts, so setup.py adds -mpopcnt on x86-64. */
    static inline int fps_popcount64(uint64_t x) {
    #if defined(__GNUC__)
        return __builtin_popcountll(x);
    #else
        x = x - ((x >> 1) & 0x5555555555555555ULL);
        x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
        x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0FULL;
        return (int)((x * 0x0101010101010101ULL) >> 56);
    #endif
    }
    """
    int fps_popcount64(uint64_t x) noexcept nogil


cdef struct Triples:
    # Three parallel arrays of n entries (cap allocated), grown by doubling from 1024.
    int64_t* a
    uint64_t* b
    uint8_t* c
    Py_ssize_t n
    Py_ssize_t cap


cdef inline void triples_init(Triples* t) noexcept nogil:
    t.a = NULL
    t.b = NULL
    t.c = NULL
    t.n = 0
    t.cap = 0


cdef inline int triples_push(Triples* t, int64_t a, uint64_t b, uint8_t c) noexcept nogil:
    """Append one entry: 0, or -1 when out of memory (the entries so far stay valid)."""
    cdef Py_ssize_t cap
    cdef void* p
    if t.n == t.cap:
        cap = t.cap * 2 if t.cap else 1024
        p = realloc(t.a, cap * sizeof(int64_t))
        if p == NULL:
            return -1
        t.a = <int64_t*>p
        p = realloc(t.b, cap * sizeof(uint64_t))
        if p == NULL:
            return -1
        t.b = <uint64_t*>p
        p = realloc(t.c, cap * sizeof(uint8_t))
        if p == NULL:
            return -1
        t.c = <uint8_t*>p
        t.cap = cap
    t.a[t.n] = a
    t.b[t.n] = b
    t.c[t.n] = c
    t.n += 1
    return 0


cdef inline void triples_copy(const Triples* t, void* a, void* b, void* c) noexcept nogil:
    """The n entries into caller arrays of 8, 8 and 1 bytes per entry (b's bits as they are:
    a uint64 or, for non-negative values, an int64 array)."""
    memcpy(a, t.a, t.n * sizeof(int64_t))
    memcpy(b, t.b, t.n * sizeof(uint64_t))
    memcpy(c, t.c, t.n * sizeof(uint8_t))


cdef inline void triples_free(Triples* t) noexcept nogil:
    free(t.a)
    free(t.b)
    free(t.c)
    triples_init(t)

# cython: language_level=3
"""What the kernels share, cimported by ``_runs_c.pyx`` and ``_search_c.pyx``: a 64-bit popcount,
a prefetch hint and a growable buffer of ``(int64, uint64, uint8)`` triples (a probe's hits, a join's pairs).

Declarations and ``inline`` functions only: no module is built from this file, each kernel
compiles its own copy, and the hot loops inline these calls.
"""

from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy

cdef extern from *:
    """
    #include <stdint.h>
    /* A hint to bring p's cache line in (no effect where the compiler has no such builtin). */
    static inline void fps_prefetch(const void *p) {
    #if defined(__GNUC__)
        __builtin_prefetch(p);
    #else
        (void)p;
    #endif
    }
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

    /* The first t in [t, end) with popcount(s ^ q[t]) <= k, or end: one key against a group of
       queries sharing a prefix (or one query against a run of keys). Most groups hold no match,
       so the vector forms compare many words per step: the AVX2 form four (popcount by nibble
       lookup, one mask tested per eight), the AVX-512 form eight (the CPU's own popcount,
       VPOPCNTDQ; one mask per thirty-two; a signed compare, as the others make, so that a
       negative k matches nothing). The widest the CPU has is chosen at run time, up to
       fps_vector_compare: 0 one word at a time, 1 AVX2, 2 AVX-512 (the tests compare all). */
    static int fps_vector_compare = 2;
    static inline int64_t fps_next_within_scalar(uint64_t s, const uint64_t *q, int64_t t, int64_t end, int k) {
        for (; t < end; t++)
            if (fps_popcount64(s ^ q[t]) <= k) return t;
        return end;
    }
    #if defined(__GNUC__) && defined(__x86_64__)
    #include <immintrin.h>
    #define FPS_HAVE_AVX2_FORM 1
    __attribute__((target("avx2,popcnt")))
    static inline __m256i fps_popcount256(__m256i v) {
        const __m256i lut = _mm256_setr_epi8(0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4,
                                             0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4);
        const __m256i low = _mm256_set1_epi8(0x0f);
        __m256i n = _mm256_add_epi8(_mm256_shuffle_epi8(lut, _mm256_and_si256(v, low)),
                                    _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), low)));
        return _mm256_sad_epu8(n, _mm256_setzero_si256());
    }
    __attribute__((target("avx2,popcnt")))
    static int64_t fps_next_within_avx2(uint64_t s, const uint64_t *q, int64_t t, int64_t end, int k) {
        const __m256i sv = _mm256_set1_epi64x((long long)s);
        const __m256i kv = _mm256_set1_epi64x((long long)k);
        for (; t + 8 <= end; t += 8) {
            __m256i a = _mm256_cmpgt_epi64(fps_popcount256(_mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(q + t)), sv)), kv);
            __m256i b = _mm256_cmpgt_epi64(fps_popcount256(_mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(q + t + 4)), sv)), kv);
            if (!_mm256_testc_si256(_mm256_and_si256(a, b), _mm256_set1_epi64x(-1))) {
                int m = _mm256_movemask_pd(_mm256_castsi256_pd(a)) | (_mm256_movemask_pd(_mm256_castsi256_pd(b)) << 4);
                return t + __builtin_ctz(~m & 0xff);
            }
        }
        for (; t < end; t++)
            if (__builtin_popcountll(s ^ q[t]) <= k) return t;
        return end;
    }
    #define FPS_HAVE_AVX512_FORM 1
    __attribute__((target("avx512f,avx512vpopcntdq,popcnt")))
    static int64_t fps_next_within_avx512(uint64_t s, const uint64_t *q, int64_t t, int64_t end, int k) {
        const __m512i sv = _mm512_set1_epi64((long long)s);
        const __m512i kv = _mm512_set1_epi64((long long)k);
        for (; t + 32 <= end; t += 32) {
            __mmask8 a = _mm512_cmple_epi64_mask(_mm512_popcnt_epi64(_mm512_xor_si512(_mm512_loadu_si512(q + t), sv)), kv);
            __mmask8 b = _mm512_cmple_epi64_mask(_mm512_popcnt_epi64(_mm512_xor_si512(_mm512_loadu_si512(q + t + 8), sv)), kv);
            __mmask8 c = _mm512_cmple_epi64_mask(_mm512_popcnt_epi64(_mm512_xor_si512(_mm512_loadu_si512(q + t + 16), sv)), kv);
            __mmask8 d = _mm512_cmple_epi64_mask(_mm512_popcnt_epi64(_mm512_xor_si512(_mm512_loadu_si512(q + t + 24), sv)), kv);
            if (a | b | c | d)
                return t + __builtin_ctz((unsigned)a | ((unsigned)b << 8) | ((unsigned)c << 16) | ((unsigned)d << 24));
        }
        for (; t + 16 <= end; t += 16) {
            __mmask8 a = _mm512_cmple_epi64_mask(_mm512_popcnt_epi64(_mm512_xor_si512(_mm512_loadu_si512(q + t), sv)), kv);
            __mmask8 b = _mm512_cmple_epi64_mask(_mm512_popcnt_epi64(_mm512_xor_si512(_mm512_loadu_si512(q + t + 8), sv)), kv);
            if (a | b) return t + __builtin_ctz((unsigned)a | ((unsigned)b << 8));
        }
        for (; t < end; t += 8) {
            /* The tail, eight words at most per step: a masked load reads only the words before end. */
            const __mmask8 live = end - t >= 8 ? (__mmask8)0xff : (__mmask8)((1u << (end - t)) - 1);
            __mmask8 a = _mm512_mask_cmple_epi64_mask(live, _mm512_popcnt_epi64(_mm512_xor_si512(_mm512_maskz_loadu_epi64(live, q + t), sv)), kv);
            if (a) return t + __builtin_ctz((unsigned)a);
        }
        return end;
    }
    #endif
    typedef int64_t (*fps_next_within_fn)(uint64_t, const uint64_t *, int64_t, int64_t, int);
    static inline fps_next_within_fn fps_next_within_form(void) {
    #ifdef FPS_HAVE_AVX512_FORM
        if (fps_vector_compare >= 2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vpopcntdq"))
            return fps_next_within_avx512;
    #endif
    #ifdef FPS_HAVE_AVX2_FORM
        if (fps_vector_compare >= 1 && __builtin_cpu_supports("avx2")) return fps_next_within_avx2;
    #endif
        return fps_next_within_scalar;
    }
    """
    int fps_popcount64(uint64_t x) noexcept nogil
    void fps_prefetch(const void *p) noexcept nogil
    ctypedef int64_t (*fps_next_within_fn)(uint64_t, const uint64_t*, int64_t, int64_t, int) noexcept nogil
    fps_next_within_fn fps_next_within_form() noexcept nogil
    int64_t fps_next_within_scalar(uint64_t s, const uint64_t* q, int64_t t, int64_t end, int k) noexcept nogil
    int fps_vector_compare


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

# cython: language_level=3
"""Compiled run block codec. The specification is ``fpstore/index/_runs_py.py`` (format, error codes and
the order of the checks); this module must give the same results, bit for bit.

Loops only: encode blocks into a chunk buffer, decode blocks, batch-probe a chunk. No I/O and no
validation beyond memory safety: every read of a chunk is checked against the buffer's length,
because the bytes come from disk and may be anything. The GIL is released in every loop.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport free, malloc, qsort, realloc
from libc.string cimport memcpy, memset
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer

from _common cimport (Triples, fps_next_within_fn, fps_next_within_form, fps_popcount64, fps_prefetch, fps_vector_compare,
                     triples_copy, triples_free, triples_init, triples_push)

import numpy as np

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    #if defined(_MSC_VER)
    #include <intrin.h>
    #endif
    /* Little-endian 64-bit load and store, any alignment (memcpy compiles to one mov). */
    static inline uint64_t fps_load64(const uint8_t *p) {
        uint64_t v; memcpy(&v, p, 8);
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        v = __builtin_bswap64(v);
    #endif
        return v;
    }
    static inline void fps_store64(uint8_t *p, uint64_t v) {
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        v = __builtin_bswap64(v);
    #endif
        memcpy(p, &v, 8);
    }
    /* Count trailing / leading zeros; x != 0. */
    static inline int fps_ctz64(uint64_t x) {
    #if defined(_MSC_VER)
        unsigned long i; _BitScanForward64(&i, x); return (int)i;
    #else
        return __builtin_ctzll(x);
    #endif
    }
    static inline int fps_clz64(uint64_t x) {
    #if defined(_MSC_VER)
        unsigned long i; _BitScanReverse64(&i, x); return 63 - (int)i;
    #else
        return __builtin_clzll(x);
    #endif
    }

    /* The whole-block decoder's unary tables: for a byte b of the unary section, its one bits
       (fps_unary_ones[b]) and the zeros before each of them inside the byte (entry j of
       fps_unary_zeros[b], j < that count; the rest are 0). Filled once, at import. */
    enum { FPS_RICE_MAX_GAPS = 1024 };
    static uint64_t fps_unary_zeros[256][8];
    static uint8_t fps_unary_ones[256];
    static void fps_init_unary_tables(void) {
        for (int b = 0; b < 256; b++) {
            int j = 0;
            for (int bit = 0; bit < 8; bit++)
                if ((b >> bit) & 1) { fps_unary_zeros[b][j] = (uint64_t)(bit - j); j++; }
            fps_unary_ones[b] = (uint8_t)j;
        }
    }

    /* The keys of a block of m gaps (1..FPS_RICE_MAX_GAPS) of remainder width k (1..56), without
       checking their sizes: out[0] = first, out[i] = first + (zeros before the i-th one bit << k)
       + the first i remainders' sum. Two passes, neither waiting on the key before: the unary
       bytes, each giving the zeros before its one bits from a table (eight slots written at once,
       those past its ones overwritten by the next byte's), then the remainders, eight loads at a
       time at byte offsets and shifts fixed for the block (eight remainders span k bytes),
       each key formed as its remainder is read.
       Returns 0 unless the unary section up[0..ub) holds exactly m one bits, the last in its
       last byte; then *zsum is the quotients' sum and *rsum the remainders'. Reads: up[0..ub),
       and 8 bytes at each remainder's first byte from rp, which the caller knows to be readable. */
    /* The unary pass of both whole-block decoders: h[i] = the zeros before the i-th one bit of
       up[0..ub). 1 when the section holds exactly m one bits, the last in its last byte (m >= 1);
       0 otherwise. Inlined into each decoder, so that the AVX-512 one gets its own code. */
    __attribute__((always_inline))
    static inline int fps_rice_unary(const uint8_t *up, int64_t ub, int64_t m, uint64_t *h) {
        int64_t i = 0, t;
        for (t = 0; t < ub; t++) {
            if (i > m) return 0;  /* so h[i + 7] stays inside h */
            const uint8_t b = up[t];
            const uint64_t *zeros = fps_unary_zeros[b];
            const uint64_t z = (uint64_t)(8 * t - i);  /* the zeros before this byte */
            uint64_t *hp = h + i;
            for (int j = 0; j < 8; j++) hp[j] = z + zeros[j];
            i += fps_unary_ones[b];
        }
        return i == m && up[ub - 1] != 0;  /* i == m >= 1: ub >= 1 */
    }
    /* Both decoders' end: the gaps e..m-1 one at a time (rp at gap e's remainder, s the sum so
       far, first included), then the sums; returns 1. */
    __attribute__((always_inline))
    static inline int fps_rice_tail(const uint8_t *rp, const uint64_t *h, int64_t e, int64_t m, int k, uint64_t s,
                                    uint64_t first, uint64_t *out, uint64_t *zsum, uint64_t *rsum) {
        const uint64_t mask = (((uint64_t)1) << k) - 1;
        for (int64_t bit = 0; e < m; e++, bit += k) {
            s += (fps_load64(rp + (bit >> 3)) >> (bit & 7)) & mask;
            out[e + 1] = s + (h[e] << k);
        }
        *zsum = h[m - 1];
        *rsum = s - first;  /* exact: the sum fits in 64 bits (the caller checked m and k) */
        return 1;
    }
    static int fps_rice_keys(const uint8_t *rp, const uint8_t *up, int64_t ub, int64_t m, int k,
                             uint64_t first, uint64_t *out, uint64_t *zsum, uint64_t *rsum) {
        uint64_t h[FPS_RICE_MAX_GAPS + 8];
        int64_t e = 0;
        if (!fps_rice_unary(up, ub, m, h)) return 0;
        const uint64_t mask = (((uint64_t)1) << k) - 1;
        const int o1 = k >> 3, o2 = (2 * k) >> 3, o3 = (3 * k) >> 3, o4 = (4 * k) >> 3,
                  o5 = (5 * k) >> 3, o6 = (6 * k) >> 3, o7 = (7 * k) >> 3;
        const int s1 = k & 7, s2 = (2 * k) & 7, s3 = (3 * k) & 7, s4 = (4 * k) & 7,
                  s5 = (5 * k) & 7, s6 = (6 * k) & 7, s7 = (7 * k) & 7;
        uint64_t s = first;
        out[0] = first;
        for (; e + 8 <= m; e += 8, rp += k) {
            const uint64_t *hh = h + e;
            uint64_t *o = out + e + 1;
            s += fps_load64(rp) & mask;              o[0] = s + (hh[0] << k);
            s += (fps_load64(rp + o1) >> s1) & mask; o[1] = s + (hh[1] << k);
            s += (fps_load64(rp + o2) >> s2) & mask; o[2] = s + (hh[2] << k);
            s += (fps_load64(rp + o3) >> s3) & mask; o[3] = s + (hh[3] << k);
            s += (fps_load64(rp + o4) >> s4) & mask; o[4] = s + (hh[4] << k);
            s += (fps_load64(rp + o5) >> s5) & mask; o[5] = s + (hh[5] << k);
            s += (fps_load64(rp + o6) >> s6) & mask; o[6] = s + (hh[6] << k);
            s += (fps_load64(rp + o7) >> s7) & mask; o[7] = s + (hh[7] << k);
        }
        return fps_rice_tail(rp, h, e, m, k, s, first, out, zsum, rsum);
    }

    /* fps_rice_keys with AVX-512 (F, BW, VBMI), same arguments, same results: the unary pass
       compiled for AVX-512, and the remainders' pass eight at a time: the k bytes that hold
       them loaded at once (a masked load reads no byte after them), each remainder's eight
       bytes moved into its lane (VPERMB), shifted and masked; then their running sum by three
       shifted adds, carried from one group to the next. */
    #if defined(__GNUC__) && defined(__x86_64__)
    #include <immintrin.h>
    #define FPS_HAVE_AVX512_RICE 1
    __attribute__((target("avx512f,avx512bw,avx512vbmi")))
    static int fps_rice_keys_avx512(const uint8_t *rp, const uint8_t *up, int64_t ub, int64_t m, int k,
                                    uint64_t first, uint64_t *out, uint64_t *zsum, uint64_t *rsum) {
        uint64_t h[FPS_RICE_MAX_GAPS + 8];
        int64_t e = 0;
        if (!fps_rice_unary(up, ub, m, h)) return 0;
        const uint64_t mask = (((uint64_t)1) << k) - 1;
        uint8_t perm[64];
        uint64_t shifts[8];
        for (int lane = 0; lane < 8; lane++) {
            for (int j = 0; j < 8; j++) perm[8 * lane + j] = (uint8_t)(((lane * k) >> 3) + j);
            shifts[lane] = (uint64_t)((lane * k) & 7);
        }
        const __m512i pv = _mm512_loadu_si512((const void *)perm);
        const __m512i sv = _mm512_loadu_si512((const void *)shifts);
        const __m512i mv = _mm512_set1_epi64((long long)mask);
        const __m128i kc = _mm_cvtsi32_si128(k);
        const __m512i back1 = _mm512_set_epi64(6, 5, 4, 3, 2, 1, 0, 0);
        const __m512i back2 = _mm512_set_epi64(5, 4, 3, 2, 1, 0, 0, 0);
        const __m512i back4 = _mm512_set_epi64(3, 2, 1, 0, 0, 0, 0, 0);
        const __m512i last = _mm512_set1_epi64(7);
        const __mmask64 bytes = (((__mmask64)1) << k) - 1;  /* k <= 56: the group's k bytes */
        __m512i carry = _mm512_set1_epi64((long long)first);
        out[0] = first;
        for (; e + 8 <= m; e += 8, rp += k) {
            __m512i r = _mm512_and_si512(_mm512_srlv_epi64(_mm512_permutexvar_epi8(pv, _mm512_maskz_loadu_epi8(bytes, rp)), sv), mv);
            r = _mm512_add_epi64(r, _mm512_maskz_permutexvar_epi64(0xFE, back1, r));
            r = _mm512_add_epi64(r, _mm512_maskz_permutexvar_epi64(0xFC, back2, r));
            r = _mm512_add_epi64(r, _mm512_maskz_permutexvar_epi64(0xF0, back4, r));
            r = _mm512_add_epi64(r, carry);
            const __m512i q = _mm512_sll_epi64(_mm512_loadu_si512((const void *)(h + e)), kc);
            _mm512_storeu_si512((void *)(out + e + 1), _mm512_add_epi64(r, q));
            carry = _mm512_permutexvar_epi64(last, r);
        }
        return fps_rice_tail(rp, h, e, m, k, (uint64_t)_mm_cvtsi128_si64(_mm512_castsi512_si128(carry)), first, out,
                             zsum, rsum);
    }

    /* A probe's scan of one block from entry j0 (0, or a restart point: a multiple of 32) with
       AVX-512 (F, BW, VBMI, VPOPCNTDQ), eight entries at a time: the keys of the entries after
       j0 as the whole-block decoder forms them (the unary bytes from the bit after entry j0's
       through its table, in bursts ahead of the keys; the remainders' k bytes moved into their
       lanes and summed with a carry), each group tested against the query (popcount of
       the XOR, and the range [lo, stop]) in one step, until the first key above stop or entry m.
       The sizes of the gaps are not checked (the caller checks their sums, as after the scalar
       scan): returns 0 when the unary section runs out or holds more one bits than entries
       (the checked loop then says what is wrong), else 1 with *t_out the entries decoded after
       j0, the last one's key, unary bit and remainders' sum, whether a key above stop ended the
       scan, the hits (key, entry - j0), and the unary bit and key of each restart entry
       (32 c, c = 1..7) decoded (seen[c - 1], -1 when not). Reads: [rbyte, us) for remainders
       (masked loads: no byte past the group's remainders), [us, end) for the unary section. */
    static uint8_t fps_perm_k[57][64];
    static uint64_t fps_shift_k[57][8];
    static void fps_init_probe_tables(void) {
        for (int k = 1; k <= 56; k++)
            for (int lane = 0; lane < 8; lane++) {
                for (int j = 0; j < 8; j++) fps_perm_k[k][8 * lane + j] = (uint8_t)(((lane * k) >> 3) + j);
                fps_shift_k[k][lane] = (uint64_t)((lane * k) & 7);
            }
    }
    __attribute__((target("avx512f,avx512bw,avx512vbmi,avx512vpopcntdq")))
    static int fps_probe_scan_avx512(const uint8_t *buf, int64_t end, int k, int64_t m, int64_t j0, int64_t last0,
                                     int64_t rbyte, int64_t us, uint64_t key0, uint64_t lo, uint64_t stop,
                                     uint64_t query, int kq, uint64_t *hit_key, int64_t *hit_at, int64_t *nhits,
                                     int64_t *t_out, uint64_t *key_out, int64_t *last_out, uint64_t *rsum_out,
                                     int *stopped_out, int64_t *seen, uint64_t *seen_key) {
        uint64_t h[FPS_RICE_MAX_GAPS + 16];
        uint64_t kk[8];
        const int64_t n = m - j0;
        if (k < 1 || k > 56 || n <= 0 || n > FPS_RICE_MAX_GAPS || j0 % 8 != 0) return 0;
        const uint8_t *up = buf + us;
        const int64_t ub = end - us;
        const int64_t u0 = last0 + 1;          /* the unary bit after entry j0's */
        const int64_t b0 = u0 >> 3;
        const int s0 = (int)(u0 & 7);          /* bits of byte b0 before u0: counted as zeros */
        int64_t tb = b0, filled = 0, t = 0, nh = *nhits;
        const uint8_t *rp = buf + rbyte;
        const __m512i pv = _mm512_loadu_si512((const void *)fps_perm_k[k]);
        const __m512i sv = _mm512_loadu_si512((const void *)fps_shift_k[k]);
        const __m512i mv = _mm512_set1_epi64((long long)((((uint64_t)1) << k) - 1));
        const __m128i kc = _mm_cvtsi32_si128(k);
        const __m512i back1 = _mm512_set_epi64(6, 5, 4, 3, 2, 1, 0, 0);
        const __m512i back2 = _mm512_set_epi64(5, 4, 3, 2, 1, 0, 0, 0);
        const __m512i back4 = _mm512_set_epi64(3, 2, 1, 0, 0, 0, 0, 0);
        const __m512i qv = _mm512_set1_epi64((long long)query);
        const __m512i lov = _mm512_set1_epi64((long long)lo);
        const __m512i stopv = _mm512_set1_epi64((long long)stop);
        const __m512i kqv = _mm512_set1_epi64((long long)kq);
        /* key = key0 + ((h - s0) << k) + remainders' sum, h counting the s0 masked bits */
        const __m512i base = _mm512_set1_epi64((long long)(key0 - (((uint64_t)s0) << k)));
        __m512i carry = _mm512_setzero_si512(), r = carry;
        int take = 0, stopped = 0;
        for (int c = 0; c < 7; c++) seen[c] = -1;
        while (t < n) {
            const int lanes = n - t < 8 ? (int)(n - t) : 8;
            /* The unary bytes in bursts, two groups or more ahead of the keys: a group's load of h
               right after the stores that wrote it would wait for them (no forwarding from
               several overlapping stores). */
            if (filled < t + 16) {
                while (filled < t + 48 && tb < ub) {
                    if (filled > n) return 0;
                    uint8_t b = up[tb];
                    if (tb == b0) b &= (uint8_t)(0xFF << s0);
                    const __m512i z = _mm512_set1_epi64((long long)(8 * (tb - b0) - filled));
                    _mm512_storeu_si512((void *)(h + filled), _mm512_add_epi64(z, _mm512_loadu_si512((const void *)fps_unary_zeros[b])));
                    filled += fps_unary_ones[b];
                    tb++;
                }
                if (filled < t + lanes) return 0;
            }
            const __mmask8 valid = (__mmask8)((1u << lanes) - 1);
            const int nbytes = (lanes * k + 7) >> 3;
            r = _mm512_and_si512(_mm512_srlv_epi64(_mm512_permutexvar_epi8(pv, _mm512_maskz_loadu_epi8((((__mmask64)1) << nbytes) - 1, rp)), sv), mv);
            r = _mm512_add_epi64(r, _mm512_maskz_permutexvar_epi64(0xFE, back1, r));
            r = _mm512_add_epi64(r, _mm512_maskz_permutexvar_epi64(0xFC, back2, r));
            r = _mm512_add_epi64(r, _mm512_maskz_permutexvar_epi64(0xF0, back4, r));
            r = _mm512_add_epi64(r, carry);
            const __m512i keys = _mm512_add_epi64(_mm512_add_epi64(r, _mm512_sll_epi64(_mm512_loadu_si512((const void *)(h + t)), kc)), base);
            const __mmask8 gt = _mm512_mask_cmpgt_epu64_mask(valid, keys, stopv);
            take = lanes;
            if (gt) { take = __builtin_ctz((unsigned)gt) + 1; stopped = 1; }
            const __mmask8 upto = (__mmask8)((1u << take) - 1);
            __mmask8 hit = _mm512_mask_cmple_epi64_mask(upto, _mm512_popcnt_epi64(_mm512_xor_si512(keys, qv)), kqv);
            _mm512_storeu_si512((void *)kk, keys);
            if (hit) {
                hit &= _mm512_mask_cmpge_epu64_mask(hit, keys, lov) & _mm512_mask_cmple_epu64_mask(hit, keys, stopv);
                while (hit) {
                    const int l = __builtin_ctz((unsigned)hit);
                    hit_key[nh] = kk[l];
                    hit_at[nh] = t + l + 1;
                    nh++;
                    hit &= (__mmask8)(hit - 1);
                }
            }
            carry = _mm512_permutexvar_epi64(_mm512_set1_epi64(take - 1), r);
            t += take;
            if (take == 8 && ((j0 + t) & 31) == 0 && j0 + t <= 7 * 32) {
                seen[(j0 + t) / 32 - 1] = 8 * b0 + (int64_t)h[t - 1] + t - 1;
                seen_key[(j0 + t) / 32 - 1] = kk[7];
            }
            if (stopped) break;
            rp += k;
        }
        *nhits = nh;
        *t_out = t;
        *key_out = kk[take - 1];
        *last_out = 8 * b0 + (int64_t)h[t - 1] + t - 1;
        *rsum_out = (uint64_t)_mm_cvtsi128_si64(_mm512_castsi512_si128(carry));
        *stopped_out = stopped;
        return 1;
    }
    static int fps_probe_scan_usable(void) {
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
            && __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vpopcntdq");
    }
    #else
    static void fps_init_probe_tables(void) {}
    static int fps_probe_scan_usable(void) { return 0; }
    static int fps_probe_scan_avx512(const uint8_t *buf, int64_t end, int k, int64_t m, int64_t j0, int64_t last0,
                                     int64_t rbyte, int64_t us, uint64_t key0, uint64_t lo, uint64_t stop,
                                     uint64_t query, int kq, uint64_t *hit_key, int64_t *hit_at, int64_t *nhits,
                                     int64_t *t_out, uint64_t *key_out, int64_t *last_out, uint64_t *rsum_out,
                                     int *stopped_out, int64_t *seen, uint64_t *seen_key) { return 0; }
    #endif
    typedef int (*fps_rice_keys_fn)(const uint8_t *, const uint8_t *, int64_t, int64_t, int, uint64_t, uint64_t *,
                                    uint64_t *, uint64_t *);
    /* The whole-block decoder: the AVX-512 form where the CPU has it, unless fps_wide_decode is 0
       (the tests compare both). */
    static int fps_wide_decode = 1;
    static fps_rice_keys_fn fps_rice_keys_form(void) {
    #ifdef FPS_HAVE_AVX512_RICE
        if (fps_wide_decode && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
                && __builtin_cpu_supports("avx512vbmi"))
            return fps_rice_keys_avx512;
    #endif
        return fps_rice_keys;
    }
    """
    uint64_t fps_load64(const uint8_t *p) noexcept nogil
    void fps_store64(uint8_t *p, uint64_t v) noexcept nogil
    int fps_ctz64(uint64_t x) noexcept nogil
    int fps_clz64(uint64_t x) noexcept nogil
    enum: FPS_RICE_MAX_GAPS
    void fps_init_unary_tables() noexcept nogil
    int fps_rice_keys(const uint8_t *rp, const uint8_t *up, int64_t ub, int64_t m, int k,
                      uint64_t first, uint64_t *out, uint64_t *zsum, uint64_t *rsum) noexcept nogil
    ctypedef int (*fps_rice_keys_fn)(const uint8_t*, const uint8_t*, int64_t, int64_t, int, uint64_t, uint64_t*,
                                     uint64_t*, uint64_t*) noexcept nogil
    fps_rice_keys_fn fps_rice_keys_form() noexcept nogil
    int fps_wide_decode
    void fps_init_probe_tables() noexcept nogil
    int fps_probe_scan_usable() noexcept nogil
    int fps_probe_scan_avx512(const uint8_t *buf, int64_t end, int k, int64_t m, int64_t j0, int64_t last0,
                              int64_t rbyte, int64_t us, uint64_t key0, uint64_t lo, uint64_t stop,
                              uint64_t query, int kq, uint64_t *hit_key, int64_t *hit_at, int64_t *nhits,
                              int64_t *t_out, uint64_t *key_out, int64_t *last_out, uint64_t *rsum_out,
                              int *stopped_out, int64_t *seen, uint64_t *seen_key) noexcept nogil

fps_init_unary_tables()
fps_init_probe_tables()

# Whether a probe's scan of a block runs eight entries at a time (see fps_probe_scan_avx512 and
# use_vector_probe).
cdef bint _vector_probe = fps_probe_scan_usable() != 0

# The whole-block decoder in use (see fps_rice_keys_form and use_wide_decode).
cdef fps_rice_keys_fn _rice_keys = fps_rice_keys_form()

# Error codes: the same numbers as fpstore.index._runs_py.
OK = 0
ERR_COUNT = 1
ERR_BOUNDS = 2
ERR_RANGE = 3
ERR_PARAM = 4
ERR_SHORT = 5
ERR_TRAILING = 6
ERR_UNSORTED = 7
MAX_BLOCK_ENTRIES = 65535

cdef enum:
    C_OK = 0
    C_ERR_COUNT = 1
    C_ERR_BOUNDS = 2
    C_ERR_RANGE = 3
    C_ERR_PARAM = 4
    C_ERR_SHORT = 5
    C_ERR_TRAILING = 6
    C_ERR_UNSORTED = 7
    C_ERR_NOMEM = -1
    C_AGAIN = -2  # an unchecked loop saw something wrong: decode again, checking each step
    C_MAX_ENTRIES = 65535


# ------------------------------------------------------------------------------------------ encode


cdef inline uint64_t _sum_shifted(const uint64_t* g, Py_ssize_t m, int k) noexcept nogil:
    cdef uint64_t s = 0
    cdef Py_ssize_t i
    for i in range(m):
        s += g[i] >> k
    return s


cdef Py_ssize_t _write_remainders(uint8_t* dst, const uint64_t* g, Py_ssize_t m, int k) noexcept nogil:
    """Pack the low k bits of each gap, LSB first; returns the bytes written, ceil(m * k / 8)."""
    cdef uint64_t acc = 0, mask = ((<uint64_t>1) << k) - 1, r
    cdef int nbits = 0
    cdef Py_ssize_t i, w = 0
    for i in range(m):
        r = g[i] & mask
        acc |= r << nbits
        nbits += k
        if nbits >= 64:
            fps_store64(dst + w, acc)
            w += 8
            nbits -= 64
            # The top nbits bits of r did not fit; nbits < k here, so the shift is in 1..63.
            acc = (r >> (k - nbits)) if nbits > 0 else 0
    while nbits > 0:
        dst[w] = <uint8_t>(acc & 0xFF)
        acc >>= 8
        w += 1
        nbits -= 8
    return w


cdef int _encode(const uint64_t* keys, Py_ssize_t n, Py_ssize_t bsz, Py_ssize_t first_block,
                 uint8_t* out, Py_ssize_t cap, uint32_t* offsets, uint64_t* gaps,
                 Py_ssize_t* blocks_done, Py_ssize_t* bytes_used) noexcept nogil:
    cdef Py_ssize_t nblocks = (n + bsz - 1) // bsz
    cdef Py_ssize_t b = first_block, pos = 0, s, e, m, i, rb, ub, size
    cdef uint64_t span, mean, sq, best_sq, cost, best_cost, p
    cdef int k0, k, klo, khi, best_k
    cdef int err = C_OK
    cdef uint8_t* dst
    while b < nblocks:
        s = b * bsz
        e = s + bsz
        if e > n:
            e = n
        m = e - s - 1
        if s > 0 and keys[s - 1] > keys[s]:
            err = C_ERR_UNSORTED
            break
        for i in range(m):
            if keys[s + 1 + i] < keys[s + i]:
                err = C_ERR_UNSORTED
                break
            gaps[i] = keys[s + 1 + i] - keys[s + i]
        if err:
            break
        if m == 0:
            best_k = 0
            rb = 0
            ub = 0
            best_sq = 0
        else:
            span = keys[e - 1] - keys[s]
            mean = span // <uint64_t>m
            k0 = (63 - fps_clz64(mean)) if mean else 0
            klo = k0 - 2 if k0 >= 2 else 0
            khi = k0 + 1 if k0 < 63 else 63
            best_k = -1
            best_cost = 0
            best_sq = 0
            for k in range(klo, khi + 1):
                # sum(g >> k) <= span >> k: no overflow for sorted keys.
                sq = _sum_shifted(gaps, m, k)
                cost = <uint64_t>m * <uint64_t>(k + 1) + sq
                if best_k < 0 or cost < best_cost:
                    best_k = k
                    best_cost = cost
                    best_sq = sq
            rb = (m * best_k + 7) >> 3
            ub = <Py_ssize_t>((<uint64_t>m + best_sq + 7) >> 3)
        size = 1 + rb + ub
        if size > cap - pos:
            break
        dst = out + pos
        dst[0] = <uint8_t>best_k
        if best_k:
            _write_remainders(dst + 1, gaps, m, best_k)
        dst += 1 + rb
        memset(dst, 0, ub)
        p = 0
        for i in range(m):
            p += gaps[i] >> best_k
            dst[p >> 3] |= <uint8_t>(1 << (p & 7))
            p += 1
        offsets[b] = <uint32_t>pos
        pos += size
        b += 1
    blocks_done[0] = b - first_block
    bytes_used[0] = pos
    return err


def encode_chunk(const uint64_t[::1] keys, Py_ssize_t block_entries, Py_ssize_t first_block,
                 uint8_t[::1] out, uint32_t[::1] offsets):
    """Encode whole blocks from ``first_block`` into ``out``: see ``fpstore.index._runs_py.encode_chunk``."""
    cdef Py_ssize_t n = keys.shape[0], bsz = block_entries
    if bsz < 1 or bsz > C_MAX_ENTRIES:
        raise ValueError("block_entries must be in 1..65535")
    cdef Py_ssize_t nblocks = (n + bsz - 1) // bsz
    if first_block < 0 or offsets.shape[0] < nblocks:
        raise ValueError("first_block negative or offsets too short")
    if first_block >= nblocks:
        return OK, 0, 0
    cdef uint64_t* gaps = <uint64_t*>malloc(bsz * sizeof(uint64_t))
    if gaps == NULL:
        raise MemoryError()
    cdef Py_ssize_t done = 0, used = 0
    cdef int err
    cdef uint8_t* outp = &out[0] if out.shape[0] > 0 else NULL
    with nogil:
        err = _encode(&keys[0], n, bsz, first_block, outp, out.shape[0], &offsets[0], gaps,
                      &done, &used)
    free(gaps)
    return err, done, used


# ------------------------------------------------------------------------------------------ decode


# Whether whole blocks and probes take the loops that check the sum of a block's gaps once (on)
# or only the loops that check each gap (off). Tests switch it off to compare: the answers, the
# errors and the restart points recorded must not change.
cdef bint _unchecked_loops = True


def use_unchecked_loops(bint on):
    """Switch the decoders' unchecked loops on or off (for tests); returns the previous setting."""
    global _unchecked_loops
    was = _unchecked_loops
    _unchecked_loops = on
    return was


def _rice_forms(const uint8_t[::1] remainders, const uint8_t[::1] unary, Py_ssize_t m, int k, uint64_t first):
    """For tests: one block's remainder and unary sections through both whole-block decoders.
    Returns (whether the AVX-512 form runs on this CPU, then (accepted, keys, quotient sum,
    remainder sum) of the one-at-a-time form and of the AVX-512 form, None where it does not
    run). m gaps (1..1024) of k bits (1..56); the sections are copied with the 8 bytes of
    room the decoders may read past the remainders."""
    global fps_wide_decode
    if not 1 <= m <= FPS_RICE_MAX_GAPS or not 1 <= k <= 56:
        raise ValueError("m must be in 1..1024 and k in 1..56")
    if remainders.shape[0] < (m * k + 7) // 8 or unary.shape[0] < 1:
        raise ValueError("the remainder section is shorter than m gaps of k bits, or the unary one is empty")
    cdef uint8_t[::1] rem = np.zeros(remainders.shape[0] + 8, np.uint8)
    rem[: remainders.shape[0]] = remainders
    cdef uint64_t[::1] out = np.zeros(m + 1, np.uint64)
    cdef uint64_t zsum = 0, rsum = 0
    cdef int ok = fps_rice_keys(&rem[0], &unary[0], unary.shape[0], m, k, first, &out[0], &zsum, &rsum)
    narrow = (bool(ok), np.asarray(out).copy(), zsum, rsum)
    cdef bint was = fps_wide_decode != 0
    fps_wide_decode = 1
    cdef fps_rice_keys_fn wide = fps_rice_keys_form()
    fps_wide_decode = 1 if was else 0
    if wide == <fps_rice_keys_fn>fps_rice_keys:
        return False, narrow, None
    out[:] = 0
    zsum = rsum = 0
    ok = wide(&rem[0], &unary[0], unary.shape[0], m, k, first, &out[0], &zsum, &rsum)
    return True, narrow, (bool(ok), np.asarray(out).copy(), zsum, rsum)


def use_wide_decode(bint on):
    """Whether whole blocks are decoded eight remainders at a time (AVX-512, where the CPU has
    it) or one at a time; for tests, which compare both. Returns the previous setting."""
    global fps_wide_decode, _rice_keys
    cdef bint was = fps_wide_decode != 0
    fps_wide_decode = 1 if on else 0
    _rice_keys = fps_rice_keys_form()
    return was


def use_vector_compare(int level):
    """How the merge compares a key with a group of queries (for tests, which compare them all):
    0 one at a time, 1 four at a time (AVX2), 2 eight at a time (AVX-512 with VPOPCNTDQ), each
    where the CPU has it, else the widest below that it has. Returns the previous level."""
    global fps_vector_compare
    if not 0 <= level <= 2:
        raise ValueError("level must be 0, 1 or 2")
    cdef int was = fps_vector_compare
    fps_vector_compare = level
    return was


cdef inline uint64_t _read_bits(const uint8_t* buf, int64_t buflen, int64_t bitpos, int k) noexcept nogil:
    """k (1..63) bits at bit bitpos of buf; the caller knows they lie inside buf."""
    cdef int64_t byte = bitpos >> 3
    cdef int sh = <int>(bitpos & 7)
    cdef uint64_t v
    cdef int t, nbytes
    if byte + 8 <= buflen:
        v = fps_load64(buf + byte) >> sh
        if sh + k > 64:
            v |= (<uint64_t>buf[byte + 8]) << (64 - sh)
    else:
        # Near the end of the buffer: only the bytes that hold the value (at most 8 here, since
        # the value ends inside buf and byte + 8 > buflen).
        nbytes = (sh + k + 7) >> 3
        v = 0
        for t in range(nbytes):
            v |= (<uint64_t>buf[byte + t]) << (8 * t)
        v >>= sh
    return v & (((<uint64_t>1) << k) - 1)


cdef enum:
    CK_STEP = 32     # a probe's restart points: entries CK_STEP, 2 CK_STEP, ... 7 CK_STEP of a block
    CK_PER_BLOCK = 7


cdef inline uint64_t _unary_word(const uint8_t* buf, int64_t pos, int64_t end) noexcept nogil:
    """The 64 unary bits at byte ``pos`` (< ``end``), those past ``end`` read as 0."""
    cdef uint64_t w
    cdef int64_t t, avail = end - pos
    if avail >= 8:
        return fps_load64(buf + pos)
    w = 0
    for t in range(avail):
        w |= (<uint64_t>buf[pos + t]) << (8 * t)
    return w


cdef inline bint _sums_fit(int k, int64_t m) noexcept nogil:
    """Whether a block of ``m`` gaps with ``k`` remainder bits (1..56) can be decoded by the
    loops that check the gaps' sum once: the sum of its remainders must fit in 64 bits, which
    ``m < 2**(63 - k)`` ensures (every block when k <= 47; the small runs of a large store's
    flushes have k near 50, and blocks of a few hundred entries)."""
    return 1 <= k <= 56 and (m >> (63 - k)) == 0


cdef inline bint _gaps_fit(uint64_t span, uint64_t qsum, uint64_t rsum, int k) noexcept nogil:
    """Whether gaps whose quotients sum to ``qsum`` and remainders to ``rsum`` (k bits each) sum
    to at most ``span``: the one check the unchecked loops make. Each gap is then at most the
    sum, so no ``q << k`` nor partial sum overflowed, and each key is the one that checking every
    gap against the room left would have given."""
    return qsum <= (span >> k) and rsum <= span - (qsum << k)


cdef inline int _decode_block_checked(const uint8_t* buf, int64_t buflen, int64_t start, int64_t end, int64_t n,
                                      uint64_t first, uint64_t limit, uint64_t* out) noexcept nogil:
    """A whole block through the probe's decoder (which checks in the specification's order)."""
    cdef int64_t ndone, skip
    return _decode_block_probe(buf, buflen, start, end, n, first, limit, out, 0, 0xFFFFFFFFFFFFFFFFULL,
                               &ndone, &skip, NULL, NULL)


cdef int _decode_block(const uint8_t* buf, int64_t buflen, int64_t start, int64_t end, int64_t n,
                       uint64_t first, uint64_t limit, uint64_t* out) noexcept nogil:
    """Checks 2..9 of the specification; writes n keys to out when it returns C_OK.

    A whole block of at most FPS_RICE_MAX_GAPS gaps whose remainders' sum fits in 64 bits
    (:func:`_sums_fit`) and 8 readable bytes after its remainders (every block of a store) is
    decoded by ``_rice_keys`` (``fps_rice_keys``, or its AVX-512 form where the CPU has it),
    which checks the sum of its gaps once, at the end, instead of each gap against the room left: every gap is at most the sum (q << k fits when the sum of
    the quotients does), so the keys are those that checking each gap would have given. Whenever
    something is wrong, the block is decoded again by :func:`_decode_block_probe`, which checks
    in the specification's order and so returns the same error. Every read stays inside
    ``[start, end)`` and the 8 bytes after the remainders, as there."""
    cdef int k
    cdef int64_t m, rs, us
    cdef uint64_t zsum, rsum
    k = buf[start] if 0 <= start < end <= buflen else 0
    m = n - 1
    rs = start + 1
    us = rs + ((m * k + 7) >> 3)
    if (_sums_fit(k, m) and first <= limit and 0 < m <= FPS_RICE_MAX_GAPS and m <= 8 * (end - start - 1)
            and us <= end and us + 8 <= buflen and _unchecked_loops
            and _rice_keys(buf + rs, buf + us, end - us, m, k, first, out, &zsum, &rsum)
            and _gaps_fit(limit - first, zsum, rsum, k)):
        return C_OK
    return _decode_block_checked(buf, buflen, start, end, n, first, limit, out)


cdef inline void _prefetch_range(const uint8_t* buf, int64_t buflen, int64_t start, int64_t end) noexcept nogil:
    """Ask for the cache lines of ``buf[start:end]`` (a block about to be decoded), when that lies
    inside ``buf`` (the index may be damaged): a merge walks a run's blocks in order, one block's
    decode being about the time its successor's bytes take to arrive from memory. A hint: nothing
    is read."""
    cdef int64_t p = start
    if not (0 <= start <= end <= buflen):
        return
    while p < end:
        fps_prefetch(buf + p)
        p += 64


cdef struct BlockStart:
    # Where a probe's decode of one block starts (see _probe_start): the remainder width k, the
    # entries after the first (m), the unary section's length in bytes (ub), the entry decoding
    # resumes after (j0, 0 at the block's start), that entry's unary bit (last, -1 at the start),
    # the next remainder's bit (bitpos), the unary word holding the next entry (its first bit
    # base, its byte pos), and whether every remainder is one unaligned load inside the buffer.
    int k
    int64_t m, ub, j0, last, bitpos, base, pos
    bint fast


cdef int _probe_start(const uint8_t* buf, int64_t buflen, int64_t start, int64_t end, int64_t n,
                      uint64_t first, uint64_t limit, uint64_t* out, uint64_t lo, uint64_t stop,
                      int64_t* ndone, int64_t* skip, const uint64_t* ck_key, const int32_t* ck_bit,
                      BlockStart* st) noexcept nogil:
    """The checks and the starting state of :func:`_decode_block_probe` (and of the scan of
    :func:`_scan_block_probe`): an error code, C_OK when the block's first key already ends the
    probe (``ndone`` set), or C_AGAIN with ``out[0]`` (the key decoding resumes after), ``skip``
    and ``st`` set."""
    cdef int k, c
    cdef int64_t m, rs, us, ub, j0, last
    skip[0] = 0
    if start < 0 or start >= end or end > buflen:
        return C_ERR_BOUNDS
    if first > limit:
        return C_ERR_RANGE
    k = buf[start]
    if k > 63:
        return C_ERR_PARAM
    m = n - 1
    if m > 8 * (end - start - 1):
        return C_ERR_SHORT
    rs = start + 1
    us = rs + ((m * k + 7) >> 3)
    if us > end:
        return C_ERR_SHORT
    ub = end - us
    j0 = 0
    for c in range(CK_PER_BLOCK if ck_bit != NULL else 0, 0, -1):
        if c * CK_STEP < m and ck_bit[c - 1] >= 0 and ck_key[c - 1] < lo:  # an entry left to decode
            j0 = c * CK_STEP
            break
    if j0:
        # Resume after entry j0: its key, its unary 1-bit, and j0 remainders consumed.
        out[0] = ck_key[j0 // CK_STEP - 1]
        last = ck_bit[j0 // CK_STEP - 1]
        if last >= 8 * ub or out[0] > limit:
            return C_ERR_SHORT
    else:
        out[0] = first
        if first > stop:
            ndone[0] = 1
            return C_OK
        if m == 0:
            ndone[0] = 1
            return C_OK if us == end else C_ERR_TRAILING
        last = -1
    skip[0] = j0
    st.k, st.m, st.ub, st.j0, st.last = k, m, ub, j0, last
    # With k <= 56 and 8 readable bytes after the remainder section, every remainder is one
    # unaligned load that stays inside buf.
    st.fast = k <= 56 and us + 8 <= buflen
    st.bitpos = rs * 8 + j0 * k
    st.base = ((last + 1) >> 6) << 6
    st.pos = us + (st.base >> 3)
    return C_AGAIN


cdef int _decode_block_probe(const uint8_t* buf, int64_t buflen, int64_t start, int64_t end, int64_t n,
                             uint64_t first, uint64_t limit, uint64_t* out, uint64_t lo, uint64_t stop,
                             int64_t* ndone, int64_t* skip, uint64_t* ck_key, int32_t* ck_bit) noexcept nogil:
    """:func:`_decode_block` for a probe of ``[lo, stop]``: decoding stops after the first key
    above ``stop`` (a probe needs the keys up to its range's end only; the checks of the part not
    decoded, trailing bits, are then skipped, the reads stay bounded), and restarts at the last
    restart point whose key is below ``lo`` when one is known: ``out`` receives the keys of entries
    ``skip[0]`` .. ``skip[0] + ndone[0] - 1``. Without restart points (``ck_key``/``ck_bit`` NULL) the
    block is decoded from its start and nothing is recorded. A restart point is entry j = c * CK_STEP (c = 1..CK_PER_BLOCK) with its key
    (``ck_key[c - 1]``) and the bit of its unary code (``ck_bit[c - 1]``, -1 when not yet known);
    decoding records each one it passes. Entries before j hold keys <= ck_key[c - 1] < lo (keys
    are sorted), so nothing the probe wants is skipped; j's remainder sits at bit j * k of the
    remainder section, so no other state is needed. The bytes are the same as when the point was
    recorded (run chunks are immutable), and every read stays inside ``[start, end)`` as in the
    full decode."""
    cdef BlockStart st
    cdef int k, c
    cdef int64_t m, ub, pos, base, last, p, i, bitpos, j0
    cdef uint64_t rem, q, r, g, w, mask
    cdef bint fast
    c = _probe_start(buf, buflen, start, end, n, first, limit, out, lo, stop, ndone, skip, ck_key, ck_bit, &st)
    if c != C_AGAIN:
        return c
    k, m, ub, j0, last, bitpos, base, pos, fast = st.k, st.m, st.ub, st.j0, st.last, st.bitpos, st.base, st.pos, st.fast
    rem = limit - out[0]
    mask = ((<uint64_t>1) << k) - 1
    i = j0
    while True:
        if pos >= end:
            return C_ERR_SHORT
        w = _unary_word(buf, pos, end)
        if base <= last:  # the restart point's word: its bits up to the point's are consumed
            w &= ~((((<uint64_t>1) << (last - base + 1))) - 1)
        while w != 0:
            p = base + fps_ctz64(w)
            q = <uint64_t>(p - last - 1)
            last = p
            if k == 0:
                r = 0
            elif fast:
                r = (fps_load64(buf + (bitpos >> 3)) >> (bitpos & 7)) & mask
            else:
                r = _read_bits(buf, buflen, bitpos, k)
            bitpos += k
            # The gap must keep the key at or below limit: rem = limit - previous key.
            if q > (rem >> k):
                return C_ERR_RANGE
            g = (q << k) | r
            if g > rem:
                return C_ERR_RANGE
            rem -= g
            i += 1
            out[i - j0] = limit - rem
            # (A unary section past 2**31 bits, which only a forged block has, records nothing.)
            if ((i & (CK_STEP - 1)) == 0 and i <= CK_PER_BLOCK * CK_STEP and ck_bit != NULL
                    and ck_bit[i // CK_STEP - 1] < 0 and last <= 0x7FFFFFFF):
                ck_key[i // CK_STEP - 1] = out[i - j0]
                ck_bit[i // CK_STEP - 1] = <int32_t>last
            if out[i - j0] > stop:
                ndone[0] = i - j0 + 1
                return C_OK
            w &= w - 1
            if i == m:
                if w != 0 or (last >> 3) != ub - 1:
                    return C_ERR_TRAILING
                ndone[0] = i - j0 + 1
                return C_OK
        pos += 8
        base += 64


cdef inline int _scan_done(const int64_t* seen, const uint64_t* seen_key, uint64_t* ck_key, int32_t* ck_bit,
                           int64_t done, int64_t nh, uint64_t key, int64_t* ndone, int64_t* nhits,
                           uint64_t* last_key) noexcept nogil:
    # The end of a scan whose keys passed its checks: the restart points it passed recorded (where
    # not known yet), its counts and last key returned; C_OK.
    cdef int c
    if ck_bit != NULL:
        for c in range(CK_PER_BLOCK):
            # (A unary section past 2**31 bits, which only a forged block has, records nothing.)
            if seen[c] >= 0 and ck_bit[c] < 0 and seen[c] <= 0x7FFFFFFF:
                ck_key[c] = seen_key[c]
                ck_bit[c] = <int32_t>seen[c]
    ndone[0] = done
    nhits[0] = nh
    last_key[0] = key
    return C_OK


cdef int _scan_unchecked(const uint8_t* buf, int64_t end, const BlockStart* st, uint64_t key0, uint64_t limit,
                         uint64_t lo, uint64_t stop, uint64_t query, int kq, uint64_t* hit_key, int64_t* hit_at,
                         int64_t* nhits, int64_t* ndone, uint64_t* last_key, uint64_t* ck_key,
                         int32_t* ck_bit) noexcept nogil:
    # _decode_block_probe's loop from the state _probe_start set up, with the sizes of the gaps
    # checked once, when it stops (as in _decode_block), fused with the probe's test of each key:
    # the keys in [lo, stop] within kq of query go to hit_key / hit_at (entry - j0), and no
    # decoded key is stored. C_OK with the same keys, ndone and restart points as the checking
    # loop, or C_AGAIN when anything is wrong, for that loop to find it in the specification's
    # order (hits discarded); restart points are recorded only once the keys are known right.
    # A counted loop runs to the next mark (the next restart entry, or the block's last), so
    # that no entry asks whether it is one.
    cdef uint64_t key = key0, rsum = 0, r, w
    cdef int k = st.k
    cdef uint64_t mask = ((<uint64_t>1) << k) - 1, unit = (<uint64_t>1) << k
    cdef int64_t m = st.m, j0 = st.j0, last = st.last, bitpos = st.bitpos, base = st.base, pos = st.pos
    cdef int64_t last0 = last, i = j0, mark, nh = 0, take, j, t, d
    cdef int64_t seen[CK_PER_BLOCK]  # the unary bit of each restart entry decoded, -1 if none
    cdef uint64_t seen_key[CK_PER_BLOCK]
    cdef int c
    cdef bint stopped = False
    for c in range(CK_PER_BLOCK):
        seen[c] = -1
    if lo <= key <= stop and fps_popcount64(key ^ query) <= kq:
        hit_key[0], hit_at[0], nh = key, 0, 1
    mark = (j0 // CK_STEP + 1) * CK_STEP
    if mark > CK_PER_BLOCK * CK_STEP or mark > m:
        mark = m
    if pos >= end:
        return C_AGAIN
    w = _unary_word(buf, pos, end)
    if base <= last:  # the restart point's word: its bits up to the point's are consumed
        w &= ~((((<uint64_t>1) << (last - base + 1))) - 1)
    while True:
        take = fps_popcount64(w)
        if take > mark - i:
            take = mark - i
        # Entry e = i + 1 + j's key is key0 + ((its quotients' sum) << k) + (its remainders'
        # sum), and its quotients' sum is t + d - j (t: its bit in the word): no entry needs the
        # one before it but through the remainders' sum.
        d = base - last0 + j0 - i - 1
        t = 0
        for j in range(take):
            t = fps_ctz64(w)
            w &= w - 1
            r = (fps_load64(buf + (bitpos >> 3)) >> (bitpos & 7)) & mask
            bitpos += k
            rsum += r
            key = key0 + <uint64_t>(t + d) * unit + rsum
            d -= 1
            if fps_popcount64(key ^ query) <= kq and lo <= key <= stop:
                hit_key[nh], hit_at[nh] = key, i + j + 1 - j0
                nh += 1
            if key > stop:
                stopped = True
                take = j + 1
                break
        if take:
            last = base + t
        i += take
        if i == mark:
            if (i & (CK_STEP - 1)) == 0 and i <= CK_PER_BLOCK * CK_STEP:
                seen[i // CK_STEP - 1] = last
                seen_key[i // CK_STEP - 1] = key
            if i == m:
                break
            mark = i + CK_STEP if i + CK_STEP <= CK_PER_BLOCK * CK_STEP else m
            if mark > m:
                mark = m
        if stopped:
            break
        if w == 0:  # the word's entries are done: the next word
            pos += 8
            base += 64
            if pos >= end:
                return C_AGAIN
            w = _unary_word(buf, pos, end)
    if not _gaps_fit(limit - key0, <uint64_t>((last - last0) - (i - j0)), rsum, k):
        return C_AGAIN
    if not stopped and (w != 0 or (last >> 3) != st.ub - 1):
        return C_AGAIN
    return _scan_done(seen, seen_key, ck_key, ck_bit, i - j0 + 1, nh, key, ndone, nhits, last_key)


cdef int _scan_vector(const uint8_t* buf, int64_t end, const BlockStart* st, uint64_t key0, uint64_t limit,
                      uint64_t lo, uint64_t stop, uint64_t query, int kq, uint64_t* hit_key, int64_t* hit_at,
                      int64_t* nhits, int64_t* ndone, uint64_t* last_key, uint64_t* ck_key,
                      int32_t* ck_bit) noexcept nogil:
    # _scan_unchecked, eight entries at a time (fps_probe_scan_avx512), then the same checks of
    # the gaps' sums and the block's end: the same results, or C_AGAIN.
    cdef int64_t t, last
    cdef int64_t seen[CK_PER_BLOCK]
    cdef uint64_t key, rsum
    cdef uint64_t seen_key[CK_PER_BLOCK]
    cdef int stopped
    cdef int64_t nh = 0
    cdef int64_t us = end - st.ub
    if lo <= key0 <= stop and fps_popcount64(key0 ^ query) <= kq:
        hit_key[0], hit_at[0], nh = key0, 0, 1
    if not fps_probe_scan_avx512(buf, end, st.k, st.m, st.j0, st.last, st.bitpos >> 3, us, key0, lo, stop, query,
                                 kq, hit_key, hit_at, &nh, &t, &key, &last, &rsum, &stopped, seen, seen_key):
        return C_AGAIN
    if not _gaps_fit(limit - key0, <uint64_t>((last - st.last) - t), rsum, st.k):
        return C_AGAIN
    # At the block's end, its last one bit must be the unary section's last, in its last byte.
    if not stopped and ((last >> 3) != st.ub - 1 or (buf[us + st.ub - 1] >> ((last & 7) + 1)) != 0):
        return C_AGAIN
    return _scan_done(seen, seen_key, ck_key, ck_bit, t + 1, nh, key, ndone, nhits, last_key)


def _vector_scan(const uint8_t[::1] buf, int64_t start, int64_t end, int64_t n, uint64_t first, uint64_t limit,
                 uint64_t lo, uint64_t stop, uint64_t query, int k):
    """For tests: whether the eight-at-a-time scan of a block probed for [lo, stop] (from its
    start) runs where the CPU can and accepts the block, and how many entries it decodes:
    (False, 0) where it cannot run or hands the block to the checking loop."""
    cdef BlockStart st
    cdef int64_t ndone = 0, skip, nhits = 0
    cdef uint64_t last_key
    cdef uint64_t* tmp
    cdef int64_t* hit_at
    cdef int c
    if not fps_probe_scan_usable() or n < 1 or n > FPS_RICE_MAX_GAPS + 1 or buf.shape[0] == 0:
        return False, 0
    tmp = <uint64_t*>malloc(n * sizeof(uint64_t))
    hit_at = <int64_t*>malloc(n * sizeof(int64_t))
    try:
        if tmp == NULL or hit_at == NULL:
            raise MemoryError()
        c = _probe_start(&buf[0], buf.shape[0], start, end, n, first, limit, tmp, lo, stop, &ndone, &skip, NULL,
                         NULL, &st)
        if c != C_AGAIN or not _sums_fit(st.k, st.m):
            return False, 0
        c = _scan_vector(&buf[0], end, &st, tmp[0], limit, lo, stop, query, k, tmp, hit_at, &nhits, &ndone,
                         &last_key, NULL, NULL)
        return c == C_OK, ndone if c == C_OK else 0
    finally:
        free(tmp)
        free(hit_at)


def use_vector_probe(bint on):
    """Whether a probe scans a block eight entries at a time where the CPU can (AVX-512 with
    VBMI and VPOPCNTDQ), or one at a time (for tests, which compare both). Returns the previous
    setting."""
    global _vector_probe
    cdef bint was = _vector_probe
    _vector_probe = on and fps_probe_scan_usable() != 0
    return was


cdef int _scan_block_probe(const uint8_t* buf, int64_t buflen, int64_t start, int64_t end, int64_t n,
                           uint64_t first, uint64_t limit, uint64_t* tmp, int64_t* hit_at, uint64_t lo,
                           uint64_t stop, uint64_t query, int kq, int64_t* ndone, int64_t* skip,
                           int64_t* nhits, uint64_t* last_key, uint64_t* ck_key, int32_t* ck_bit) noexcept nogil:
    """A probe of one block: :func:`_decode_block_probe`'s decode of the entries from ``skip[0]``
    (``ndone[0]`` of them, the last one's key in ``last_key[0]``), of which the ``nhits[0]`` with
    keys in ``[lo, stop]`` within ``kq`` bits of ``query`` are returned, in entry order, as their
    keys (``tmp``) and entries after ``skip[0]`` (``hit_at``); both hold ``n`` values. The same
    errors, keys and restart points as decoding, then testing each key."""
    cdef BlockStart st
    cdef int c
    cdef int64_t j, nh
    cdef uint64_t key
    nhits[0] = 0
    c = _probe_start(buf, buflen, start, end, n, first, limit, tmp, lo, stop, ndone, skip, ck_key, ck_bit, &st)
    if c == C_AGAIN and _sums_fit(st.k, st.m) and _unchecked_loops:
        # (The vector scan's loads are masked to the block's bytes: it needs no bytes after them.)
        if _vector_probe and st.m - st.j0 <= FPS_RICE_MAX_GAPS:
            c = _scan_vector(buf, end, &st, tmp[0], limit, lo, stop, query, kq, tmp, hit_at, nhits, ndone,
                             last_key, ck_key, ck_bit)
        elif st.fast:
            c = _scan_unchecked(buf, end, &st, tmp[0], limit, lo, stop, query, kq, tmp, hit_at, nhits, ndone,
                                last_key, ck_key, ck_bit)
        if c != C_AGAIN:
            return c
    if c == C_AGAIN:
        c = _decode_block_probe(buf, buflen, start, end, n, first, limit, tmp, lo, stop, ndone, skip, ck_key, ck_bit)
    if c != C_OK:
        return c
    # The keys are in tmp: keep the hits, in place (a hit's slot is never past its key's).
    last_key[0] = tmp[ndone[0] - 1]
    nh = 0
    for j in range(ndone[0]):
        key = tmp[j]
        if lo <= key <= stop and fps_popcount64(key ^ query) <= kq:
            tmp[nh], hit_at[nh] = key, j
            nh += 1
    nhits[0] = nh
    return C_OK


def decode_blocks(const uint8_t[::1] buf, const int64_t[::1] starts, const int64_t[::1] ends,
                  const int64_t[::1] counts, const uint64_t[::1] bounds, uint64_t[::1] out):
    """Decode blocks back to back into ``out``: see ``fpstore.index._runs_py.decode_blocks``."""
    cdef Py_ssize_t nb = starts.shape[0], j, outlen = out.shape[0]
    if ends.shape[0] != nb or counts.shape[0] != nb or bounds.shape[0] != nb + 1:
        raise ValueError("starts, ends, counts and bounds disagree in length")
    cdef const uint8_t* bp = &buf[0] if buf.shape[0] > 0 else NULL
    cdef int64_t buflen = buf.shape[0], pos = 0, n
    cdef int err = C_OK
    cdef Py_ssize_t failed = -1
    with nogil:
        for j in range(nb):
            n = counts[j]
            if j + 1 < nb:
                _prefetch_range(bp, buflen, starts[j + 1], ends[j + 1])
            if n < 1 or n > C_MAX_ENTRIES or n > outlen - pos:
                err = C_ERR_COUNT
            else:
                err = _decode_block(bp, buflen, starts[j], ends[j], n, bounds[j], bounds[j + 1],
                                    &out[pos])
            if err:
                failed = j
                break
            pos += n
    return err, failed


# ------------------------------------------------------------------------------------- batch probe


cdef int _cmp_u64(const void* a, const void* b) noexcept nogil:
    cdef uint64_t x = (<const uint64_t*>a)[0], y = (<const uint64_t*>b)[0]
    return (x > y) - (x < y)


cdef struct Found:
    # A growable uint64 array: a group's hits found query by query, as (key offset << 48 | query
    # offset), sorted before they are pushed, so that they come in the merge's order (by key,
    # then by query); or the positions of the keys a merge reports, beside the keys.
    uint64_t* v
    Py_ssize_t n
    Py_ssize_t cap


cdef int _found_push(Found* f, uint64_t x) noexcept nogil:
    cdef Py_ssize_t cap
    cdef void* p
    if f.n == f.cap:
        cap = f.cap * 2 if f.cap else 256
        p = realloc(f.v, cap * sizeof(uint64_t))
        if p == NULL:
            return -1
        f.v = <uint64_t*>p
        f.cap = cap
    f.v[f.n] = x
    f.n += 1
    return 0


cdef struct Stream:
    # Sorted queries [a, b) merged with a chunk's blocks: a query q pairs with a key s when they
    # share the top bits of ``mask_hi`` and popcount(q ^ s) <= k. Pairs go to ``hits`` as
    # (query position, key or, with ``positions``, the key's position in the run, distance), and,
    # when ``also`` is not NULL, the key's position there too.
    const uint64_t* q
    Py_ssize_t a
    Py_ssize_t b
    uint64_t mask_hi
    int k
    bint positions
    Triples* hits
    Found* also


cdef inline bint _stream_reaches(const Stream* st, Py_ssize_t qi, uint64_t hi_b) noexcept nogil:
    """Whether query qi (the first whose range is not below the block) starts at or below hi_b."""
    return qi < st.b and (st.q[qi] & st.mask_hi) <= hi_b


cdef inline Py_ssize_t _stream_skip(const Stream* st, Py_ssize_t qi, uint64_t lo_b) noexcept nogil:
    """The first query from qi whose prefix range [lo, hi] does not end below lo_b."""
    while qi < st.b and ((st.q[qi] & st.mask_hi) | ~st.mask_hi) < lo_b:
        qi += 1
    return qi


cdef int _stream_join(const Stream* st, Py_ssize_t qi, const uint64_t* block, int64_t n, uint64_t hi_b,
                      int64_t first, fps_next_within_fn next_within, Found* found) noexcept nogil:
    """Join one decoded block (n keys, the last at most hi_b) with the stream's queries from qi
    whose ranges start at or below hi_b: group by group (queries sharing a prefix), each from the
    key after the previous group's range, since ranges ascend and do not overlap."""
    cdef int64_t jj = 0
    cdef Py_ssize_t qe
    cdef uint64_t lo
    while qi < st.b and jj < n:
        lo = st.q[qi] & st.mask_hi
        if lo > hi_b:
            break
        qe = qi + 1
        while qe < st.b and (st.q[qe] & st.mask_hi) == lo:
            qe += 1
        jj = _join_range(block, jj, n, lo, lo | ~st.mask_hi, st.q, qi, qe, st.k, first, st.positions, st.hits,
                         st.also, next_within, found)
        if jj < 0:
            return C_ERR_NOMEM
        qi = qe
    return C_OK


cdef inline bint _all_done(const Stream* streams, const Py_ssize_t* qi, int nstreams) noexcept nogil:
    cdef int s
    for s in range(nstreams):
        if qi[s] < streams[s].b:
            return False
    return True


cdef int _merge_blocks(const uint8_t* buf, int64_t buflen, const int64_t* starts, const int64_t* ends,
                       const int64_t* counts, const uint64_t* bounds, const int64_t* estart,
                       Py_ssize_t b0, Py_ssize_t b1, Stream* streams, int nstreams, uint64_t* block,
                       Py_ssize_t* failed, Found* found) noexcept nogil:
    # Merge of sorted streams with the blocks b0..b1-1 of one chunk (Manku section 3.3): a block is
    # decoded once, into ``block``, when some stream's query range meets its key range
    # [bounds[b], bounds[b + 1]], then joined with each stream. A stream's first query that may
    # still meet a block (qi) only moves forward: a range that reaches past a block is joined
    # again with the next.
    cdef Py_ssize_t b
    cdef Py_ssize_t qi[2]
    cdef int s, err
    cdef bint needed
    cdef fps_next_within_fn next_within = fps_next_within_form()
    for s in range(nstreams):
        qi[s] = streams[s].a
    for b in range(b0, b1):
        needed = False
        for s in range(nstreams):
            qi[s] = _stream_skip(&streams[s], qi[s], bounds[b])
            needed = needed or _stream_reaches(&streams[s], qi[s], bounds[b + 1])
        if not needed:
            if _all_done(streams, qi, nstreams):
                break
            continue
        if b + 1 < b1:
            _prefetch_range(buf, buflen, starts[b + 1], ends[b + 1])
        err = _decode_block(buf, buflen, starts[b], ends[b], counts[b], bounds[b], bounds[b + 1], block)
        if err:
            failed[0] = b
            return err
        for s in range(nstreams):
            err = _stream_join(&streams[s], qi[s], block, counts[b], bounds[b + 1], estart[b], next_within, found)
            if err:
                return err
    return C_OK


cdef inline int64_t _first_above(const uint64_t* keys, int64_t lo_j, int64_t hi_j, uint64_t x) noexcept nogil:
    """The first position in [lo_j, hi_j) of sorted ``keys`` holding a key above ``x`` (hi_j when none)."""
    cdef int64_t mid
    while lo_j < hi_j:
        mid = (lo_j + hi_j) >> 1
        if keys[mid] <= x:
            lo_j = mid + 1
        else:
            hi_j = mid
    return lo_j


cdef inline int64_t _gallop_above(const uint64_t* keys, int64_t j, int64_t n, uint64_t x) noexcept nogil:
    """:func:`_first_above` of ``[j, n)``, searching forward from ``j`` in steps of 1, 2, 4, ...
    before the binary search: the merge's keys and ranges advance together, so the answer is
    usually a few keys on (none or a few keys per range of a long prefix; about 150, in a
    few steps more than a binary search of the block, for a 16-bit prefix at 10^7)."""
    cdef int64_t lo_j = j, step = 1
    while j < n and keys[j] <= x:
        lo_j = j + 1
        j += step
        step <<= 1
    return _first_above(keys, lo_j, j if j < n else n, x)


cdef int64_t _join_range(const uint64_t* keys, int64_t jj, int64_t n, uint64_t lo, uint64_t hi,
                         const uint64_t* queries, Py_ssize_t qi, Py_ssize_t qe, int k, int64_t first,
                         bint positions, Triples* hits, Found* also, fps_next_within_fn next_within,
                         Found* found) noexcept nogil:
    # One block's keys in [lo, hi] (keys[jj:n], sorted; n <= C_MAX_ENTRIES) against
    # queries[qi:qe]: the pairs within k pushed in key order, then query order (each key's
    # position, first + its offset, to ``also`` as well when that is not NULL). Returns the
    # position of the first key above hi (n when none), -1 when out of memory. The range's ends
    # are found by galloping searches, then each query scans the whole range with the vector compare,
    # and the group's few hits are sorted into the merge's order. Comparing key by key as the keys
    # were read cost 1.3 times more for groups of one query (10^5 queries against 10^7 keys,
    # k = 3) and 2-3 times more for groups of 15.
    cdef Py_ssize_t t, x
    cdef uint64_t s, q
    cdef int64_t j, end
    if lo:
        jj = _gallop_above(keys, jj, n, lo - 1)
    if jj == n or keys[jj] > hi:  # no key in the range (most ranges of a long prefix)
        return jj
    end = _gallop_above(keys, jj + 1, n, hi)
    found.n = 0
    for t in range(qi, qe):
        q = queries[t]
        j = next_within(q, keys, jj, end, k)
        while j < end:
            # A key offset fits 16 bits (a block holds at most 65,535 keys), a query offset 48.
            if _found_push(found, (<uint64_t>(j - jj) << 48) | <uint64_t>(t - qi)):
                return -1
            j = next_within(q, keys, j + 1, end, k)
    if found.n > 1 and qe - qi > 1:  # one query's hits come in key order already
        qsort(found.v, found.n, sizeof(uint64_t), _cmp_u64)
    for x in range(found.n):
        j = jj + <int64_t>(found.v[x] >> 48)
        t = qi + <Py_ssize_t>((found.v[x] << 16) >> 16)
        s = keys[j]
        if triples_push(hits, t, <uint64_t>(first + j) if positions else s, <uint8_t>fps_popcount64(s ^ queries[t])):
            return -1
        if also != NULL and _found_push(also, <uint64_t>(first + j)):
            return -1
    return end


def probe_chunk(const uint8_t[::1] buf, const int64_t[::1] starts, const int64_t[::1] ends,
                const int64_t[::1] counts, const uint64_t[::1] bounds,
                const uint64_t[::1] queries, uint64_t mask_hi, int k, bint positions=False):
    """Batch probe of one chunk: see ``fpstore.index._runs_py.probe_chunk``."""
    cdef Py_ssize_t nb = starts.shape[0], nq = queries.shape[0], j
    if ends.shape[0] != nb or counts.shape[0] != nb or bounds.shape[0] != nb + 1:
        raise ValueError("starts, ends, counts and bounds disagree in length")
    cdef int64_t[::1] estart = np.zeros(nb + 1, np.int64)
    for j in range(nb):
        if counts[j] < 1 or counts[j] > C_MAX_ENTRIES:
            return ERR_COUNT, j, np.zeros(0, np.int64), np.zeros(0, np.uint64), np.zeros(0, np.uint8)
        estart[j + 1] = estart[j] + counts[j]
    if nb == 0 or nq == 0:
        return OK, -1, np.zeros(0, np.int64), np.zeros(0, np.uint64), np.zeros(0, np.uint8)
    cdef uint64_t[::1] block = np.empty(C_MAX_ENTRIES, np.uint64)
    cdef Triples hits
    triples_init(&hits)
    cdef Stream st = Stream(&queries[0], 0, nq, mask_hi, k, positions, &hits, NULL)
    cdef Found found = Found(NULL, 0, 0)
    cdef Py_ssize_t failed = -1
    cdef int err
    cdef const uint8_t* bp = &buf[0] if buf.shape[0] > 0 else NULL
    try:
        with nogil:
            err = _merge_blocks(bp, buf.shape[0], &starts[0], &ends[0], &counts[0], &bounds[0], &estart[0],
                                0, nb, &st, 1, &block[0], &failed, &found)
        if err == C_ERR_NOMEM:
            raise MemoryError("probe_chunk: out of memory for results")
        if err:
            return err, failed, np.zeros(0, np.int64), np.zeros(0, np.uint64), np.zeros(0, np.uint8)
        return (OK, -1, *_hit_arrays(&hits))
    finally:
        triples_free(&hits)
        free(found.v)


cdef tuple _hit_arrays(Triples* h):
    qpos = np.empty(h.n, np.int64)
    key = np.empty(h.n, np.uint64)
    dist = np.empty(h.n, np.uint8)
    if h.n:
        _copy_hits(h, qpos, key, dist)
    return qpos, key, dist


def probe_chunks(list bufs, const uint32_t[::1] chunk_len, const int64_t[::1] chunk_start,
                 const int64_t[::1] starts, const int64_t[::1] ends, const int64_t[::1] counts,
                 const uint64_t[::1] bounds, const int64_t[::1] entry_start, Py_ssize_t c0, Py_ssize_t c1,
                 const uint64_t[::1] queries, const int64_t[::1] qa, const int64_t[::1] qb, uint64_t mask_hi, int k,
                 const uint64_t[::1] lookups, const int64_t[::1] la, const int64_t[::1] lb):
    """Batch probe and key lookup over chunks c0..c1-1 of a run: see ``fpstore.index._runs_py.probe_chunks``."""
    cdef Py_ssize_t nc = chunk_len.shape[0], nb = starts.shape[0], nq = queries.shape[0], nl = lookups.shape[0]
    cdef Py_ssize_t c, b, nused = 0
    if (len(bufs) != nc or chunk_start.shape[0] != nc + 1 or ends.shape[0] != nb or counts.shape[0] != nb
            or bounds.shape[0] != nb + 1 or entry_start.shape[0] != nb + 1 or qa.shape[0] != nc or qb.shape[0] != nc
            or la.shape[0] != nc or lb.shape[0] != nc):
        raise ValueError("probe_chunks: arrays disagree in length")
    if not 0 <= c0 <= c1 <= nc:
        raise ValueError("probe_chunks: chunk range outside the run")
    for c in range(c0, c1):
        if not (0 <= chunk_start[c] <= chunk_start[c + 1] <= nb and 0 <= qa[c] <= qb[c] <= nq
                and 0 <= la[c] <= lb[c] <= nl):
            raise ValueError(f"probe_chunks: chunk {c}'s blocks or slices are outside their arrays")
        if qa[c] < qb[c] or la[c] < lb[c]:
            for b in range(chunk_start[c], chunk_start[c + 1]):
                if counts[b] < 1 or counts[b] > C_MAX_ENTRIES:
                    return (ERR_COUNT, b, *_no_rows())
    cdef uint64_t[::1] block = np.empty(C_MAX_ENTRIES, np.uint64)  # before the mallocs: it may raise
    cdef Py_buffer* views = <Py_buffer*>malloc(max(c1 - c0, 1) * sizeof(Py_buffer))
    cdef const uint8_t** at = <const uint8_t**>malloc(max(c1 - c0, 1) * sizeof(uint8_t*))
    cdef Triples hits, lhits
    cdef Found pos = Found(NULL, 0, 0)
    cdef Found found = Found(NULL, 0, 0)
    cdef Stream st[2]
    cdef const uint64_t* qp = NULL
    cdef const uint64_t* lp = NULL
    if nq:
        qp = &queries[0]
    if nl:
        lp = &lookups[0]
    cdef Py_ssize_t failed = -1
    cdef int err = C_OK
    triples_init(&hits)
    triples_init(&lhits)
    try:
        if views == NULL or at == NULL:
            raise MemoryError()
        # The buffers are taken with the GIL held, then the whole merge runs without it.
        for c in range(c0, c1):
            at[c - c0] = NULL
            if qa[c] == qb[c] and la[c] == lb[c]:
                continue
            buf = bufs[c]
            if buf is None:
                return (ERR_MISSING, c, *_no_rows())
            PyObject_GetBuffer(buf, &views[nused], PyBUF_SIMPLE)
            nused += 1
            if views[nused - 1].len != <Py_ssize_t>chunk_len[c]:
                return (ERR_LENGTH, c, *_no_rows())
            at[c - c0] = <const uint8_t*>views[nused - 1].buf if views[nused - 1].len else <const uint8_t*>""
        with nogil:
            for c in range(c0, c1):
                if at[c - c0] == NULL:
                    continue
                st[0] = Stream(qp, qa[c], qb[c], mask_hi, k, False, &hits, &pos)
                st[1] = Stream(lp, la[c], lb[c], 0xFFFFFFFFFFFFFFFFULL, 0, True, &lhits, NULL)
                err = _merge_blocks(at[c - c0], chunk_len[c], &starts[0], &ends[0], &counts[0], &bounds[0],
                                    &entry_start[0], chunk_start[c], chunk_start[c + 1], st, 2, &block[0], &failed,
                                    &found)
                if err:
                    break
        if err == C_ERR_NOMEM:
            raise MemoryError("probe_chunks: out of memory for results")
        if err:
            return (err, failed, *_no_rows())
        qpos, key, dist = _hit_arrays(&hits)
        positions = np.empty(pos.n, np.int64)
        if pos.n:
            _copy_positions(&pos, positions)
        li, lpos, _ = _hit_arrays(&lhits)
        return OK, -1, qpos, key, positions, dist, li, lpos.view(np.int64)
    finally:
        for c in range(nused):
            PyBuffer_Release(&views[c])
        free(views)
        free(at)
        triples_free(&hits)
        triples_free(&lhits)
        free(pos.v)
        free(found.v)


cdef void _copy_positions(Found* p, int64_t[::1] out):
    memcpy(&out[0], p.v, p.n * sizeof(int64_t))  # positions are below 2**63: the same bits


cdef tuple _no_rows():
    return (np.zeros(0, np.int64), np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.uint8),
            np.zeros(0, np.int64), np.zeros(0, np.int64))


cdef void _copy_hits(Triples* h, int64_t[::1] qpos, uint64_t[::1] key, uint8_t[::1] dist):
    triples_copy(h, &qpos[0], &key[0], &dist[0])


IX_ENTRIES = 1
IX_SUM = 2
IX_KEYS = 3
IX_LAST = 4
IX_CHUNKS = 5
IX_FIRST = 6
IX_ORDER = 7
IX_END = 8
IX_DENSE = 9


def index_check(const uint64_t[::1] first_keys, const uint32_t[::1] chunk, const uint32_t[::1] offset,
                const uint16_t[::1] nentries, const uint32_t[::1] chunk_len, uint64_t count, uint64_t last_key,
                Py_ssize_t block_entries):
    """The checks of a run index and what the kernels derive from it, in one pass each: see the
    twin ``fpstore.index._runs_py.index_check`` (the same codes, details and arrays). A small
    run's index is checked in microseconds where numpy's calls cost a hundred: the first query
    after every flush or merge builds the new run's indexes."""
    cdef Py_ssize_t nb = first_keys.shape[0], nc = chunk_len.shape[0], b, c
    cdef uint64_t total = 0
    cdef int64_t e
    if nb < 1 or nc < 1 or chunk.shape[0] != nb or offset.shape[0] != nb or nentries.shape[0] != nb:
        raise ValueError("index_check needs one entry per block in each per-block array, and a block and a chunk")
    for b in range(nb):
        if nentries[b] < 1 or nentries[b] > block_entries:
            return IX_ENTRIES, 0, None
    for b in range(nb):
        total += nentries[b]
    if total != count:
        return IX_SUM, total, None
    for b in range(1, nb):
        if first_keys[b] < first_keys[b - 1]:
            return IX_KEYS, 0, None
    if last_key < first_keys[nb - 1]:
        return IX_LAST, 0, None
    if chunk[0] != 0 or chunk[nb - 1] != nc - 1:
        return IX_CHUNKS, 0, None
    for b in range(1, nb):
        if chunk[b] != chunk[b - 1] and chunk[b] != chunk[b - 1] + 1:
            return IX_CHUNKS, 0, None
    for b in range(nb):
        if (b == 0 or chunk[b] != chunk[b - 1]) and offset[b] != 0:
            return IX_FIRST, 0, None
    for b in range(1, nb):
        if chunk[b] == chunk[b - 1] and offset[b] <= offset[b - 1]:
            return IX_ORDER, 0, None
    for b in range(nb):
        if (b == nb - 1 or chunk[b + 1] != chunk[b]) and offset[b] >= chunk_len[chunk[b]]:
            return IX_END, 0, None
    starts_a = np.empty(nb, np.int64)
    ends_a = np.empty(nb, np.int64)
    counts_a = np.empty(nb, np.int64)
    bounds_a = np.empty(nb + 1, np.uint64)
    entry_a = np.empty(nb + 1, np.int64)
    chunk_a = np.empty(nc + 1, np.int64)
    cdef int64_t[::1] starts = starts_a, ends = ends_a, counts = counts_a, entry_start = entry_a, chunk_start = chunk_a
    cdef uint64_t[::1] bounds = bounds_a
    chunk_start[0] = 0
    for b in range(1, nb):
        if chunk[b] != chunk[b - 1]:
            chunk_start[chunk[b]] = b
    chunk_start[nc] = nb
    entry_start[0] = 0
    for b in range(nb):
        starts[b] = offset[b]
        ends[b] = offset[b + 1] if b + 1 < nb and chunk[b + 1] == chunk[b] else chunk_len[chunk[b]]
        counts[b] = nentries[b]
        if counts[b] - 1 > 8 * (ends[b] - starts[b] - 1):
            return IX_DENSE, b, None
        entry_start[b + 1] = entry_start[b] + counts[b]
        bounds[b] = first_keys[b]
    bounds[nb] = last_key
    return 0, 0, (starts_a, ends_a, counts_a, bounds_a, entry_a, chunk_a)


ERR_MISSING = 8
ERR_LENGTH = 9
ERR_UNMATCHED = 10  # a key another table of the run reached is not in its table 0


cdef struct BlockRec:
    # What a probe reads of one block, in two adjacent cache lines (ProbeTable.rec): the first
    # line its descriptors (first key, limit, first entry, byte range in its chunk, entries,
    # chunk) and three restart keys, the second the rest of the restart points. Kept apart, as
    # nine arrays, these were nine lines on nine pages a range, the misses a probe of a large
    # table waits on.
    uint64_t first
    uint64_t limit
    int64_t entry_start
    uint32_t start
    uint32_t end
    uint32_t count
    uint32_t chunk
    uint64_t ck_key[CK_PER_BLOCK]
    int32_t ck_bit[CK_PER_BLOCK]
    uint32_t width  # the block's remainder width plus one once a probe has read it, 0 before


cdef class ProbeTable:
    """One run table's block index, held as raw pointers for :func:`probe_tables` (see the twin
    ``fpstore.index._runs_py.ProbeTable``). Built once per run table and cached: the arrays are kept
    alive here, so probes pay no per-call buffer acquisition."""
    cdef const uint64_t* bounds
    cdef const int64_t* starts
    cdef const int64_t* ends
    cdef const int64_t* counts
    cdef const uint32_t* chunk
    cdef const int64_t* chunk_start
    cdef const uint32_t* chunk_len
    cdef const int64_t* entry_start
    cdef Py_ssize_t nb, nc
    cdef object _keep
    cdef readonly list names
    # Every COARSE-th bound, a few KiB that stay in cache: a search reads it, then one stretch of
    # COARSE bounds, instead of jumping through the whole array (a cache or TLB miss per step at 10^7).
    cdef const uint64_t* coarse
    cdef Py_ssize_t ncoarse
    # Each block's BlockRec, 64-byte aligned. Its restart points are filled as probes decode
    # (see _decode_block_probe), a bit of -1 meaning not yet known: a probe then starts on average
    # 16 entries before its range, where it started 128 without them (and 32 with points every
    # 64 entries, measured 5-15 % slower). Written only with the GIL held (probe_tables and
    # fill_restarts never release it), so no probe sees a point's key without its bit. A block
    # whose byte range does not fit the record's 32 bits (only a damaged index has one) gets an
    # empty range (start 1, end 0), which its decode reports as out of bounds.
    cdef BlockRec* rec
    # Where each chunk's bytes are, as the memo (a snapshot's chunk views) last given holds them:
    # a probe of a range then makes no dict lookup. The memo itself is kept referenced, so that
    # no other dict can come to its address; a different memo starts the table over. Only with
    # the GIL held, as the restart points.
    cdef object memo_seen
    cdef const uint8_t** chunk_at
    cdef Py_ssize_t* chunk_at_len
    # chunk_at[c] belongs to memo_seen when chunk_gen[c] == memo_gen: another memo is one
    # increment, not a clearing of every chunk's entry (a table of a 10^8 store has ~100 chunks,
    # and a caller that passes no memo gives a new one each call).
    cdef uint32_t* chunk_gen
    cdef uint32_t memo_gen
    cdef readonly Py_ssize_t owned_nbytes  # the arrays built here (the rest are the run index's)
    cdef object _occ_keep
    # Which cells of the key space hold a key: bit c of occ is set when some key has its top bits
    # equal to c (c = key >> occ_shift), about four cells a key. A table of a small run (a flush's,
    # a first merge's) leaves most probe ranges empty; the cells answer that in one word, where
    # locating the range's block and decoding up to it cost ~100 ns a table. Built from the keys
    # at the table's C_OCC_AFTER-th probe (most tables a process opens are probed often, and the
    # first probes of a one-off table pay nothing), only for tables of at most C_OCC_MAX_ENTRIES
    # keys whose ranges hold less than a key on average; occ_state 0 until then, 1 built, 2 being
    # built (probes in other threads read the blocks meanwhile), -1 none (too large, ranges too
    # wide, or a chunk could not be read whole: the probes then find what is wrong, as before).
    # Changed only with the GIL held. occ_counted: their bytes are in owned_nbytes.
    cdef const uint64_t* occ
    cdef int occ_shift, occ_state, occ_probes
    cdef bint occ_counted

    def __init__(self, const uint64_t[::1] bounds, const int64_t[::1] starts, const int64_t[::1] ends,
                 const int64_t[::1] counts, const uint32_t[::1] chunk, const int64_t[::1] chunk_start,
                 const uint32_t[::1] chunk_len, const int64_t[::1] entry_start, list names):
        cdef Py_ssize_t nb = starts.shape[0], nc = chunk_len.shape[0], b
        if (bounds.shape[0] != nb + 1 or ends.shape[0] != nb or counts.shape[0] != nb or chunk.shape[0] != nb
                or entry_start.shape[0] != nb + 1 or chunk_start.shape[0] != nc + 1 or len(names) != nc):
            raise ValueError("probe table arrays disagree in length")
        for b in range(nb):
            if chunk[b] >= nc or counts[b] < 1 or counts[b] > C_MAX_ENTRIES:
                raise ValueError("probe table block descriptors out of range")
        self.nb, self.nc = nb, nc
        self._keep = (bounds, starts, ends, counts, chunk, chunk_start, chunk_len, entry_start)
        self.names = names
        if nb:
            self.bounds, self.starts, self.ends, self.counts = &bounds[0], &starts[0], &ends[0], &counts[0]
            self.chunk, self.chunk_start, self.entry_start = &chunk[0], &chunk_start[0], &entry_start[0]
        if nc:
            self.chunk_len = &chunk_len[0]
        cdef const uint64_t[::1] coarse = np.ascontiguousarray(np.asarray(bounds)[::COARSE], dtype=np.uint64)
        cdef uint8_t[::1] rec_bytes = np.zeros(max(nb, 1) * sizeof(BlockRec) + 64, dtype=np.uint8)
        cdef BlockRec* rec = <BlockRec*>((<uintptr_t>&rec_bytes[0] + 63) & ~(<uintptr_t>63))
        cdef int c
        for b in range(nb):
            rec[b].first, rec[b].limit, rec[b].entry_start = bounds[b], bounds[b + 1], entry_start[b]
            rec[b].count, rec[b].chunk = <uint32_t>counts[b], chunk[b]
            if 0 <= starts[b] <= 0xFFFFFFFF and 0 <= ends[b] <= 0xFFFFFFFF:
                rec[b].start, rec[b].end = <uint32_t>starts[b], <uint32_t>ends[b]
            else:
                rec[b].start, rec[b].end = 1, 0
            for c in range(CK_PER_BLOCK):
                rec[b].ck_bit[c] = -1
        self._keep = self._keep + (coarse, rec_bytes)
        self.ncoarse = coarse.shape[0]
        self.coarse = &coarse[0]
        self.rec = rec
        cdef uintptr_t[::1] chunk_at = np.zeros(max(nc, 1), dtype=np.uintp)
        cdef Py_ssize_t[::1] chunk_at_len = np.zeros(max(nc, 1), dtype=np.intp)
        cdef uint32_t[::1] chunk_gen = np.zeros(max(nc, 1), dtype=np.uint32)
        self._keep = self._keep + (chunk_at, chunk_at_len, chunk_gen)
        self.chunk_at = <const uint8_t**>&chunk_at[0]
        self.chunk_at_len = &chunk_at_len[0]
        self.chunk_gen = &chunk_gen[0]
        self.memo_gen = 1
        self.memo_seen = None
        self.owned_nbytes = coarse.shape[0] * 8 + rec_bytes.shape[0] + chunk_at.shape[0] * 20
        self.occ, self.occ_shift, self.occ_probes = NULL, 64, 0
        self.occ_state = 0 if 0 < entry_start[nb] <= C_OCC_MAX_ENTRIES else -1
        # The cells a probe may build are counted from the start (a cache bounds its memory by
        # this figure, read when the table is cached): the most they can take, 4 bits a key.
        self.occ_counted = self.occ_state == 0
        if self.occ_counted:
            self.owned_nbytes += _occ_words(entry_start[nb]) * 8

    @property
    def filtered(self):
        """Whether the probes of this table test the occupied cells first."""
        return self.occ_state == 1

    def build_cells(self, fetch, int prefix_bits):
        """Build the occupied cells now, decoding without the GIL (a merge's thread, or
        ``Store.warm``, for a table too large to build them at a probe): for a table of at most
        C_CELLS_MAX_ENTRIES keys whose ranges of ``prefix_bits`` bits hold less than a key on
        average, unless they are being built. Returns the bytes this call added to owned_nbytes
        (the cells of a table too large to have been counted when it was made), 0 if none; the
        table has them when ``filtered``."""
        cdef int64_t n = self.entry_start[self.nb] if self.nb else 0
        if self.occ_state in (1, 2):
            return 0
        if not 0 <= prefix_bits <= 64 or n == 0 or n > C_CELLS_MAX_ENTRIES or not _cells_pay(n, 0xFFFFFFFFFFFFFFFF >> prefix_bits if prefix_bits < 64 else 0):
            return 0
        if not _occ_build(self, fetch, None, True) or self.occ_counted:
            return 0
        self.occ_counted = True
        self.owned_nbytes += _occ_words(n) * 8
        return _occ_words(n) * 8


cdef enum:
    # A table's occupied cells are built at its C_OCC_AFTER-th probe, for tables of at most
    # C_OCC_MAX_ENTRIES keys (decoding them costs ~0.4 ms at the limit; cells of 128 KiB).
    C_OCC_AFTER = 16
    C_OCC_MAX_ENTRIES = 262144
    # build_cells (a merge's thread, Store.warm) builds them for tables of up to 2**23 keys:
    # decoding them takes ~10 ms without the GIL, the cells 4 MiB.
    C_CELLS_MAX_ENTRIES = 8388608

_OCC_MAX_ENTRIES = C_OCC_MAX_ENTRIES  # (for tests)


cdef inline Py_ssize_t _occ_bits(int64_t n) noexcept nogil:
    # log2 of the cells for n keys: at least 4 a key, and at least one word's worth.
    cdef Py_ssize_t b = 6
    while b < 62 and ((<int64_t>1) << b) < 4 * n:
        b += 1
    return b


cdef inline Py_ssize_t _occ_words(int64_t n) noexcept nogil:
    return (<Py_ssize_t>1) << (_occ_bits(n) - 6)


cdef inline bint _cells_pay(int64_t n, uint64_t span) noexcept nogil:
    # Whether ranges of span + 1 keys' width hold less than a key on average among n keys: where
    # one does, most ranges are not empty and the cells would only cost their test.
    return <double>n * (<double>span + 1.0) < 18446744073709551616.0


cdef int _occ_fill(ProbeTable pt, const uint8_t** at, const Py_ssize_t* length, uint64_t* occ, int shift,
                   uint64_t* tmp) noexcept nogil:
    # Set the cell of every key of pt, its chunks at ``at`` / ``length``; C_OK, or the first
    # decode error (a wrong chunk length is C_ERR_SHORT here).
    cdef Py_ssize_t c, b, j
    cdef int err
    cdef uint64_t cell
    for c in range(pt.nc):
        if length[c] != pt.chunk_len[c]:
            return C_ERR_SHORT
        for b in range(pt.chunk_start[c], pt.chunk_start[c + 1]):
            err = _decode_block(at[c], length[c], pt.starts[b], pt.ends[b], pt.counts[b], pt.bounds[b], pt.bounds[b + 1], tmp)
            if err:
                return err
            for j in range(pt.counts[b]):
                cell = tmp[j] >> shift
                occ[cell >> 6] |= (<uint64_t>1) << (cell & 63)
    return C_OK


cdef bint _occ_build(ProbeTable pt, fetch, dict memo, bint release) except -1:
    """Set ``pt``'s occupied cells from its keys (every block decoded once, without the GIL when
    ``release``); True when built. On a chunk that is missing, of the wrong length or does not
    decode, or that fails its read (raised), none (``occ_state`` -1): the probes report what is
    wrong when they reach it."""
    pt.occ_state = 2  # (a build in another thread, while this one reads chunks, leaves it alone)
    try:
        return _occ_build_now(pt, fetch, memo, release)
    finally:
        if pt.occ_state == 2:
            pt.occ_state = -1


cdef bint _occ_build_now(ProbeTable pt, fetch, dict memo, bint release) except -1:
    cdef Py_ssize_t c, b, maxn = 1
    cdef int64_t n = pt.entry_start[pt.nb]
    cdef int err = C_OK, shift = 64 - _occ_bits(n)
    cdef Py_buffer view
    cdef uint64_t* tmp
    cdef uint64_t[::1] occ = np.zeros(_occ_words(n), dtype=np.uint64)
    cdef uintptr_t[::1] at = np.zeros(max(pt.nc, 1), dtype=np.uintp)
    cdef Py_ssize_t[::1] length = np.zeros(max(pt.nc, 1), dtype=np.intp)
    held = []  # the chunks' objects, kept while their bytes are read
    for c in range(pt.nc):
        buf = _chunk_of(pt, c, fetch, memo)
        if buf is None:
            return False
        held.append(buf)
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        at[c], length[c] = <uintptr_t>view.buf, view.len
        PyBuffer_Release(&view)  # (bytes and LMDB buffers stay where they are while referenced)
    for b in range(pt.nb):
        if pt.counts[b] > maxn:
            maxn = pt.counts[b]
    tmp = <uint64_t*>malloc(maxn * sizeof(uint64_t))
    if tmp == NULL:
        raise MemoryError()
    try:
        if release:
            with nogil:
                err = _occ_fill(pt, <const uint8_t**>&at[0], &length[0], &occ[0], shift, tmp)
        else:
            err = _occ_fill(pt, <const uint8_t**>&at[0], &length[0], &occ[0], shift, tmp)
    finally:
        free(tmp)
    if err:
        return False
    pt._occ_keep = occ
    pt.occ, pt.occ_shift, pt.occ_state = &occ[0], shift, 1
    return True


cdef inline bint _occ_empty(ProbeTable pt, uint64_t lo, uint64_t hi) noexcept nogil:
    # Whether no key can lie in [lo, hi]: every cell the range meets is empty. Ranges over more
    # than 64 cells are not tested (a probe of them reads the blocks).
    cdef uint64_t c0 = lo >> pt.occ_shift, c1 = hi >> pt.occ_shift, w0, w1
    cdef uint64_t every = 0xFFFFFFFFFFFFFFFF
    if hi < lo or c1 - c0 >= 64:
        return False
    w0, w1 = c0 >> 6, c1 >> 6
    if w0 == w1:  # cells c0 .. c1 of one word
        return (pt.occ[w0] & ((every >> (63 - (c1 - c0))) << (c0 & 63))) == 0
    return (pt.occ[w0] & (every << (c0 & 63))) == 0 and (pt.occ[w1] & (every >> (63 - (c1 & 63)))) == 0


cdef enum:
    COARSE = 64


cdef inline Py_ssize_t _first_reaching_in(const uint64_t* a, Py_ssize_t lo, Py_ssize_t n, uint64_t x,
                                          bint strict) noexcept nogil:
    # First i in [lo, lo + n) with a[i] >= x (a[i] > x when strict), lo + n if none; a sorted.
    # Without a branch on the data (the steps are coin flips): halve the window, moving its base
    # past the half that does not reach x (Khuong and Morin's branch-free binary search).
    cdef const uint64_t* base = a + lo
    cdef Py_ssize_t half
    if n <= 0:
        return lo
    while n > 1:
        half = n >> 1
        base = base + half if ((base[half] <= x) if strict else (base[half] < x)) else base
        n -= half
    return (base - a) + ((base[0] <= x) if strict else (base[0] < x))


cdef inline Py_ssize_t _first_reaching(const uint64_t* a, Py_ssize_t m, const uint64_t* coarse,
                                       Py_ssize_t nc, uint64_t x, bint strict) noexcept nogil:
    # First i in [0, m) with a[i] >= x (a[i] > x when strict), m if none; a sorted ascending and
    # coarse[j] == a[j * COARSE].
    cdef Py_ssize_t lo, hi, mid
    lo = _first_reaching_in(coarse, 0, nc, x, strict)  # first coarse entry reaching x
    # The answer lies after the previous coarse entry (which does not reach x), up to this one.
    hi = lo * COARSE if lo * COARSE < m else m
    lo = (lo - 1) * COARSE + 1 if lo > 0 else 0
    # Ask for the stretch's cache lines at once: the search's steps would otherwise each wait
    # for a miss of their own (at 10^7 a table's bounds are far from the cache).
    for mid in range(lo, hi, 8):
        fps_prefetch(a + mid)
    return _first_reaching_in(a, lo, hi - lo, x, strict)


cdef inline void _locate(ProbeTable pt, uint64_t lo, uint64_t hi, Py_ssize_t* b0, Py_ssize_t* b1) noexcept:
    # Blocks b0 .. b1-1 meeting [lo, hi]: block b holds keys in [bounds[b], bounds[b + 1]].
    cdef Py_ssize_t nb = pt.nb, i, j
    # b0: the first b with bounds[b + 1] >= lo.
    i = _first_reaching(pt.bounds, nb + 1, pt.coarse, pt.ncoarse, lo, False)
    b0[0] = (i - 1 if i > 0 else 0) if i <= nb else nb
    # b1: the first b with bounds[b] > hi, at or after i (hi >= lo). A probe's range spans a
    # block or two, so the few bounds after i (in the lines the search just read) usually hold
    # it; past them, a search.
    j = i
    while j <= nb and j < i + 4 and pt.bounds[j] <= hi:
        j += 1
    if j <= nb and j == i + 4:
        j = _first_reaching_in(pt.bounds, j, nb + 1 - j, hi, True)
    b1[0] = j if j < nb else nb


cdef struct PRange:
    # A key range of one table to probe: tables[table]'s keys in [lo, hi] within k of query.
    Py_ssize_t table
    uint64_t lo
    uint64_t hi
    uint64_t query


cdef struct PHits:
    # What a probe found: (table, key, position in the table), grown by doubling.
    Py_ssize_t* table
    uint64_t* key
    int64_t* pos
    Py_ssize_t n
    Py_ssize_t cap


cdef int _phits_push(PHits* h, Py_ssize_t table, uint64_t key, int64_t pos) noexcept nogil:
    cdef Py_ssize_t cap
    cdef Py_ssize_t* t
    cdef uint64_t* kk
    cdef int64_t* p
    if h.n == h.cap:
        cap = 2 * h.cap if h.cap else 16
        t = <Py_ssize_t*>realloc(h.table, cap * sizeof(Py_ssize_t))
        if t == NULL:
            return -1
        h.table = t
        kk = <uint64_t*>realloc(h.key, cap * sizeof(uint64_t))
        if kk == NULL:
            return -1
        h.key = kk
        p = <int64_t*>realloc(h.pos, cap * sizeof(int64_t))
        if p == NULL:
            return -1
        h.pos = p
        h.cap = cap
    h.table[h.n] = table
    h.key[h.n] = key
    h.pos[h.n] = pos
    h.n += 1
    return 0


cdef void _phits_free(PHits* h) noexcept nogil:
    free(h.table)
    free(h.key)
    free(h.pos)
    h.table = NULL
    h.key = NULL
    h.pos = NULL
    h.n = h.cap = 0


cdef struct ProbeScratch:
    # What one probe call reuses from range to range (and from query to query in a batch).
    uint64_t* tmp                   # a decoded block, or its hits' keys
    int64_t* hit_at                 # its hits' entries (tmp_cap of each)
    Py_ssize_t tmp_cap
    Py_ssize_t* located             # b0, b1 of each range
    Py_ssize_t located_cap
    Py_ssize_t err_table            # where an error was found: the range's table, and the
    Py_ssize_t err_where            # chunk (ERR_MISSING, ERR_LENGTH) or block (decode errors)


cdef void _scratch_free(ProbeScratch* s) noexcept nogil:
    free(s.tmp)
    free(s.hit_at)
    free(s.located)
    s.tmp = NULL
    s.hit_at = NULL
    s.located = NULL
    s.tmp_cap = s.located_cap = 0


cdef object _chunk_of(ProbeTable pt, Py_ssize_t c, fetch, dict memo):
    """Chunk c of pt's run table: from ``memo`` when it holds it, else ``fetch`` (kept in memo)."""
    name = pt.names[c]
    if memo is None:
        return fetch(name)
    buf = memo.get(name)
    if buf is None:
        buf = fetch(name)
        if buf is not None:
            memo[name] = buf
    return buf


cdef bint _memo_chunk(ProbeTable pt, Py_ssize_t c, dict memo, const uint8_t** at, Py_ssize_t* length) except -1:
    """Chunk c of pt's run table as ``memo`` holds it: True with ``at`` / ``length`` set, False
    when ``memo`` does not hold it. The bytes stay where they are while ``memo`` holds their
    object (memos only grow; a snapshot that moves gets a new memo), so pt keeps the address."""
    cdef Py_buffer view
    if pt.memo_seen is not memo:
        pt.memo_gen += 1
        if pt.memo_gen == 0:  # wrapped: no entry may look current
            memset(pt.chunk_gen, 0, pt.nc * sizeof(uint32_t))
            pt.memo_gen = 1
        pt.memo_seen = memo
    if pt.chunk_gen[c] != pt.memo_gen:
        buf = memo.get(pt.names[c])
        if buf is None:
            return False
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        at[0], length[0] = <const uint8_t*>view.buf, view.len
        PyBuffer_Release(&view)
        if at[0] == NULL:  # an empty buffer may have no address
            at[0] = <const uint8_t*>""
        elif pt.memo_seen is memo:  # (no other thread's probe has taken the table over meanwhile)
            pt.chunk_at[c], pt.chunk_at_len[c], pt.chunk_gen[c] = at[0], length[0], pt.memo_gen
        return True
    at[0], length[0] = pt.chunk_at[c], pt.chunk_at_len[c]
    return True


cdef inline int _prefetch_block(list tables, const PRange* ranges, const Py_ssize_t* located, Py_ssize_t ri,
                                dict memo) except -1:
    # Ask for the bytes range ri's probe reads, block by block (a range of a large table often
    # ends in the block after its first), where the memo holds the chunk.
    cdef Py_ssize_t b0 = located[2 * ri], b1 = located[2 * ri + 1], b, j, blen, c = -1
    cdef int64_t w[4]
    cdef const uint8_t* bp = NULL
    cdef BlockRec* rec
    cdef ProbeTable pt
    if b0 >= b1:
        return 0
    pt = <ProbeTable>tables[ranges[ri].table]
    for b in range(b0, b1 if b1 - b0 <= 2 else b0 + 2):
        rec = pt.rec + b
        if rec.chunk != c:
            c = rec.chunk
            if not _memo_chunk(pt, c, memo, &bp, &blen):
                return 0
        if not (rec.end <= blen and rec.start < rec.end):
            return 0
        if rec.width:
            _window(rec, ranges[ri].lo, ranges[ri].hi, w)
            fps_prefetch(bp + rec.start)
            for j in range(w[0], w[1], 64):
                fps_prefetch(bp + j)
            fps_prefetch(bp + w[1] - 1)
            for j in range(w[2], w[3], 64):
                fps_prefetch(bp + j)
            fps_prefetch(bp + w[3] - 1)
            continue
        # The whole block (about 1.4 KiB at 10^7): where a restart point sends the decode
        # depends on bits not read yet.
        for j in range(rec.start, rec.end, 64):
            fps_prefetch(bp + j)
        fps_prefetch(bp + rec.end - 1)
    return 0


cdef inline void _window(const BlockRec* rec, uint64_t lo, uint64_t hi, int64_t* w) noexcept nogil:
    # The bytes a probe of [lo, hi] reads in a block whose remainder width a probe has already
    # read, besides its first byte: the remainders (w[0] .. w[1]) and unary bits (w[2] .. w[3])
    # of the entries from the last known restart point below lo to the first known one above hi
    # (the rest of the block where none is known). Clamped to the block: a hint, so a damaged
    # record asks for wrong lines at worst.
    cdef int64_t k = rec.width - 1, m = <int64_t>rec.count - 1, j0 = 0, j1 = m, bit0 = 0, bit1, rs, us
    cdef int c
    for c in range(CK_PER_BLOCK, 0, -1):
        if c * CK_STEP < m and rec.ck_bit[c - 1] >= 0 and rec.ck_key[c - 1] < lo:
            j0, bit0 = c * CK_STEP, rec.ck_bit[c - 1]
            break
    rs = <int64_t>rec.start + 1
    us = rs + ((m * k + 7) >> 3)
    bit1 = 8 * (<int64_t>rec.end - us)
    for c in range(1, CK_PER_BLOCK + 1):
        if c * CK_STEP > j0 and c * CK_STEP < m and rec.ck_bit[c - 1] >= 0 and rec.ck_key[c - 1] > hi:
            j1, bit1 = c * CK_STEP, rec.ck_bit[c - 1] + 1
            break
    w[0] = rs + ((j0 * k) >> 3)
    w[1] = rs + ((j1 * k + 7) >> 3) + 8
    w[2] = us + (bit0 >> 3)
    w[3] = us + (bit1 >> 3) + 8
    for c in range(4):
        if w[c] > rec.end:
            w[c] = rec.end
        if w[c] < rec.start:
            w[c] = rec.start


cdef int _probe_ranges(list tables, fetch, const PRange* ranges, Py_ssize_t nr, int k, dict memo,
                       PHits* hits, ProbeScratch* s) except -1:
    """Probe ``ranges`` of ``tables`` (ProbeTable objects), appending to ``hits``; returns OK or
    an error code, with ``s.err_table`` / ``s.err_where`` saying where."""
    cdef ProbeTable pt
    cdef Py_ssize_t ri, b0, b1, b, end, c, j, n, maxn, blen
    cdef int64_t ndone, skip, nhits
    cdef uint64_t lo, hi, query, key
    cdef Py_buffer view
    cdef const uint8_t* bp
    cdef uint64_t* grown
    cdef int64_t* grown_at
    cdef Py_ssize_t* located
    cdef int err
    cdef bint past, viewed
    cdef BlockRec* rec
    if nr > s.located_cap:
        located = <Py_ssize_t*>realloc(s.located, 2 * nr * sizeof(Py_ssize_t))
        if located == NULL:
            raise MemoryError()
        s.located = located
        s.located_cap = nr
    located = s.located
    # First every range's blocks, asking for the lines its decode reads first; then the
    # decodes. A probe's tables lie far apart in the map (at 10^7, hundreds of MB), so each
    # table's first reads miss the cache: asked for together, the misses overlap.
    for ri in range(nr):
        pt = <ProbeTable?>tables[ranges[ri].table]
        b0 = b1 = 0
        if pt.occ_state == 0:
            pt.occ_probes += 1
            if pt.occ_probes >= C_OCC_AFTER:
                # A table's ranges are all as wide as this one (its prefix).
                if not _cells_pay(pt.entry_start[pt.nb], ranges[ri].hi - ranges[ri].lo):
                    pt.occ_state = -1
                else:
                    try:
                        _occ_build(pt, fetch, memo, False)
                    except Exception:  # a chunk this probe may not need failed its read (a CRC):
                        pass  # no cells; the probes that reach it report it, as before
        if pt.nb and not (pt.occ_state == 1 and _occ_empty(pt, ranges[ri].lo, ranges[ri].hi)):
            _locate(pt, ranges[ri].lo, ranges[ri].hi, &b0, &b1)
        located[2 * ri] = b0
        located[2 * ri + 1] = b1
        if b0 < b1:
            fps_prefetch(pt.rec + b0)
            fps_prefetch(<const uint8_t*>(pt.rec + b0) + 64)
            if b1 - b0 > 1:
                fps_prefetch(pt.rec + b0 + 1)
                fps_prefetch(<const uint8_t*>(pt.rec + b0 + 1) + 64)
    if memo is not None:
        for ri in range(nr):
            _prefetch_block(tables, ranges, located, ri, memo)
    for ri in range(nr):
        lo, hi, query = ranges[ri].lo, ranges[ri].hi, ranges[ri].query
        pt = <ProbeTable>tables[ranges[ri].table]
        b0 = located[2 * ri]
        b1 = located[2 * ri + 1]
        past = False
        while b0 < b1 and not past:
            c = pt.rec[b0].chunk
            end = b1 if b1 < pt.chunk_start[c + 1] else pt.chunk_start[c + 1]
            viewed = False
            if memo is None or not _memo_chunk(pt, c, memo, &bp, &blen):
                buf = _chunk_of(pt, c, fetch, memo)
                if buf is None:
                    s.err_table, s.err_where = ranges[ri].table, c
                    return ERR_MISSING
                if memo is None or not _memo_chunk(pt, c, memo, &bp, &blen):
                    # No memo to keep it: the raw buffer protocol for this chunk's decodes (a typed
                    # memoryview costs a microsecond per chunk here).
                    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
                    viewed = True
                    bp, blen = <const uint8_t*>view.buf, view.len
            try:
                if blen != pt.chunk_len[c]:
                    s.err_table, s.err_where = ranges[ri].table, c
                    return ERR_LENGTH
                maxn = 0
                for b in range(b0, end):
                    if pt.rec[b].count > maxn:
                        maxn = pt.rec[b].count
                if maxn > s.tmp_cap:
                    grown = <uint64_t*>realloc(s.tmp, maxn * sizeof(uint64_t))
                    if grown == NULL:
                        raise MemoryError()
                    s.tmp = grown
                    grown_at = <int64_t*>realloc(s.hit_at, maxn * sizeof(int64_t))
                    if grown_at == NULL:
                        raise MemoryError()
                    s.hit_at = grown_at
                    s.tmp_cap = maxn
                for b in range(b0, end):
                    rec = pt.rec + b
                    n = rec.count
                    # Keys are sorted: decoding stops after the first key above the range.
                    err = _scan_block_probe(bp, blen, rec.start, rec.end, n, rec.first, rec.limit, s.tmp, s.hit_at,
                                            lo, hi, query, k, &ndone, &skip, &nhits, &key, rec.ck_key, rec.ck_bit)
                    if err:
                        s.err_table, s.err_where = ranges[ri].table, b
                        return err
                    if not rec.width:
                        rec.width = bp[rec.start] + 1
                    for j in range(nhits):
                        if _phits_push(hits, ranges[ri].table, s.tmp[j], rec.entry_start + skip + s.hit_at[j]):
                            raise MemoryError()
                    if skip + ndone < n or key > hi:
                        past = True
                        break
            finally:
                if viewed:
                    PyBuffer_Release(&view)
            b0 = end
    return OK


def probe_tables(list tables, fetch, list ranges, int k):
    """Single-query probe of several tables of one run: see ``fpstore.index._runs_py.probe_tables``."""
    cdef Py_ssize_t nr = len(ranges), ri
    cdef PRange* rs = <PRange*>malloc((nr if nr else 1) * sizeof(PRange))
    cdef PHits hits
    cdef ProbeScratch s
    cdef int err
    if rs == NULL:
        raise MemoryError()
    memset(&hits, 0, sizeof(PHits))
    memset(&s, 0, sizeof(ProbeScratch))
    try:
        for ri in range(nr):
            i, lo, hi, query = ranges[ri]
            if not 0 <= i < len(tables):
                raise IndexError("range names no table")
            rs[ri].table, rs[ri].lo, rs[ri].hi, rs[ri].query = i, lo, hi, query
        err = _probe_ranges(tables, fetch, rs, nr, k, None, &hits, &s)
        if err:
            return err, s.err_table, s.err_where, []
        return OK, -1, -1, [(hits.table[ri], hits.key[ri], hits.pos[ri]) for ri in range(hits.n)]
    finally:
        free(rs)
        _phits_free(&hits)
        _scratch_free(&s)


def fill_restarts(ProbeTable pt, fetch):
    """Decode every block of ``pt`` once, recording its restart points: see
    ``fpstore.index._runs_py.fill_restarts``."""
    cdef Py_ssize_t c, b, maxn = 1
    cdef int64_t ndone, skip, nhits
    cdef int err
    cdef uint64_t last_key
    cdef uint64_t* tmp
    cdef int64_t* hit_at
    cdef Py_buffer view
    cdef const uint8_t* bp
    cdef BlockRec* rec
    for b in range(pt.nb):
        if pt.counts[b] > maxn:
            maxn = pt.counts[b]
    tmp = <uint64_t*>malloc(maxn * sizeof(uint64_t))
    hit_at = <int64_t*>malloc(maxn * sizeof(int64_t))
    if tmp == NULL or hit_at == NULL:
        free(tmp)
        free(hit_at)
        raise MemoryError()
    try:
        for c in range(pt.nc):
            buf = fetch(pt.names[c])
            if buf is None:
                return ERR_MISSING, c
            PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
            try:
                if view.len != pt.chunk_len[c]:
                    return ERR_LENGTH, c
                bp = <const uint8_t*>view.buf
                for b in range(pt.chunk_start[c], pt.chunk_start[c + 1]):
                    # A probe of the whole block that wants no key (lo = 0: no restart point lies
                    # below it, so every block is decoded whole; kq = -1: no key is within).
                    rec = pt.rec + b
                    err = _scan_block_probe(bp, view.len, rec.start, rec.end, rec.count, rec.first, rec.limit, tmp,
                                            hit_at, 0, 0xFFFFFFFFFFFFFFFF, 0, -1, &ndone, &skip, &nhits, &last_key,
                                            rec.ck_key, rec.ck_bit)
                    if err:
                        return err, b
                    if not rec.width:
                        rec.width = bp[rec.start] + 1
            finally:
                PyBuffer_Release(&view)
        return OK, -1
    finally:
        free(tmp)
        free(hit_at)


cdef class ProbeDesign:
    """A table design as the single-fingerprint probe needs it (see the twin
    ``fpstore.index._runs_py.ProbeDesign``): per table, the permutation as (src, mask, dst) moves, the
    prefix length and the XOR masks of its flipped prefixes. Built once per store."""
    cdef uint64_t[:, ::1] moves      # rows (table, src, mask, dst), in table order
    cdef int64_t[::1] move_start     # table t's moves are rows move_start[t] .. move_start[t+1]-1
    cdef int64_t[::1] prefix_bits
    cdef uint64_t[::1] flips         # table t's prefix XOR masks: flips[flip_start[t] .. flip_start[t+1]-1]
    cdef int64_t[::1] flip_start
    cdef readonly Py_ssize_t ntab

    def __init__(self, list moves, list prefix_bits, list flip_masks):
        ntab = len(moves)
        if ntab == 0 or len(prefix_bits) != ntab or len(flip_masks) != ntab:
            raise ValueError("moves, prefix_bits and flip_masks must have one entry per table")
        rows = np.array([[src, mask, dst] for ms in moves for src, mask, dst in ms], dtype=np.uint64).reshape(-1, 3)
        if len(rows) and (int(rows[:, 0].max()) > 63 or int(rows[:, 2].max()) > 63):
            raise ValueError("move shifts must be in 0..63")
        bits = np.array(prefix_bits, dtype=np.int64)
        if bits.min() < 0 or bits.max() > 64:
            raise ValueError("prefix_bits must be in 0..64")
        if any(len(fm) == 0 for fm in flip_masks):
            raise ValueError("every table has at least the zero flip mask")
        self.moves = rows
        self.move_start = np.cumsum([0] + [len(ms) for ms in moves]).astype(np.int64)
        self.prefix_bits = bits
        self.flips = np.array([m for fm in flip_masks for m in fm], dtype=np.uint64)
        self.flip_start = np.cumsum([0] + [len(fm) for fm in flip_masks]).astype(np.int64)
        self.ntab = ntab


cdef inline uint64_t _permute(ProbeDesign d, Py_ssize_t t, uint64_t fp, bint inverse) noexcept:
    cdef uint64_t out = 0
    cdef Py_ssize_t r
    for r in range(d.move_start[t], d.move_start[t + 1]):
        if inverse:
            out |= ((fp >> d.moves[r, 2]) & d.moves[r, 1]) << d.moves[r, 0]
        else:
            out |= ((fp >> d.moves[r, 0]) & d.moves[r, 1]) << d.moves[r, 2]
    return out


cdef struct PosKey:
    int64_t pos
    uint64_t key


cdef struct FpProbe:
    # One fingerprint's probe over every run, what it reuses from query to query.
    PRange* ranges
    Py_ssize_t ranges_cap
    PHits hits                      # one run's hits, then its table-0 look-ups
    PHits found                     # (run, fingerprint, position) of the answer, by run then position
    uint64_t* seen                  # fingerprints found in this run's table 0 (sorted), then the others'
    Py_ssize_t seen_cap
    PosKey* order                   # a run's answer, sorted by position
    Py_ssize_t order_cap
    ProbeScratch scratch


cdef int _cmp_pos(const void* a, const void* b) noexcept nogil:
    cdef int64_t x = (<const PosKey*>a).pos, y = (<const PosKey*>b).pos
    return (x > y) - (x < y)


cdef bint _sorted_has(const uint64_t* a, Py_ssize_t n, uint64_t x) noexcept nogil:
    cdef Py_ssize_t i = _first_reaching_in(a, 0, n, x, False)
    return i < n and a[i] == x


cdef void _fp_free(FpProbe* p) noexcept nogil:
    free(p.ranges)
    free(p.seen)
    free(p.order)
    p.ranges = NULL
    p.seen = NULL
    p.order = NULL
    p.ranges_cap = p.seen_cap = p.order_cap = 0
    _phits_free(&p.hits)
    _phits_free(&p.found)
    _scratch_free(&p.scratch)


cdef int _ranges_room(FpProbe* p, Py_ssize_t need) except -1:
    # Room for ``need`` ranges in p.ranges.
    cdef PRange* grown
    if need > p.ranges_cap:
        grown = <PRange*>realloc(p.ranges, need * sizeof(PRange))
        if grown == NULL:
            raise MemoryError()
        p.ranges = grown
        p.ranges_cap = need
    return 0


cdef int _probe_fp(ProbeDesign d, list tables, fetch, uint64_t fp, int k, dict memo, FpProbe* p,
                   PHits* defer=NULL, Py_ssize_t q=0) except -1:
    """Every run entry within ``k`` of ``fp`` into ``p.found`` (emptied first), as
    ``fpstore.index._runs_py.probe_fingerprint`` specifies; returns OK or an error code, with
    ``p.scratch.err_table`` / ``err_where`` saying where. With ``defer``, the look-ups in table 0
    of keys only the other tables found are not made but appended to it as (``q``, key, run),
    run by run, keys ascending (see :func:`_resolve_deferred`); ``p.found`` then holds the rest."""
    cdef Py_ssize_t ntab = d.ntab, nruns = len(tables) // ntab, r, t, f, j, nr, nseen, ncand, nmiss, first, x, y
    cdef Py_ssize_t need = 0
    cdef uint64_t perm, lo, low, key
    cdef int shift, pbits, err
    cdef uint64_t* grown_seen
    cdef PosKey* grown_order
    p.found.n = 0
    for t in range(ntab):
        need += d.flip_start[t + 1] - d.flip_start[t]
    _ranges_room(p, need)
    for r in range(nruns):
        nr = 0
        for t in range(ntab):
            perm = _permute(d, t, fp, False)
            pbits = <int>d.prefix_bits[t]
            if pbits == 0:
                p.ranges[nr].table, p.ranges[nr].lo, p.ranges[nr].hi, p.ranges[nr].query = r * ntab + t, 0, 0xFFFFFFFFFFFFFFFF, perm
                nr += 1
                continue
            shift = 64 - pbits
            low = ((<uint64_t>1) << shift) - 1 if shift < 64 else 0xFFFFFFFFFFFFFFFF
            for f in range(d.flip_start[t], d.flip_start[t + 1]):
                lo = (((perm >> shift) ^ d.flips[f]) << shift) if shift < 64 else 0
                p.ranges[nr].table, p.ranges[nr].lo, p.ranges[nr].hi, p.ranges[nr].query = r * ntab + t, lo, lo | low, perm
                nr += 1
        p.hits.n = 0
        err = _probe_ranges(tables, fetch, p.ranges, nr, k, memo, &p.hits, &p.scratch)
        if err:
            return err
        # Table 0 (the identity) names the entries by position; a key found only in another
        # table is unpermuted and looked up there. Sorted arrays, not scans: a query inside a
        # cluster of thousands of near duplicates has thousands of hits.
        if 2 * p.hits.n > p.seen_cap:
            grown_seen = <uint64_t*>realloc(p.seen, 2 * p.hits.n * sizeof(uint64_t))
            if grown_seen == NULL:
                raise MemoryError()
            p.seen = grown_seen
            p.seen_cap = 2 * p.hits.n
        first = p.found.n
        nseen = 0
        for j in range(p.hits.n):
            if p.hits.table[j] == r * ntab:
                if _phits_push(&p.found, r, p.hits.key[j], p.hits.pos[j]):
                    raise MemoryError()
                p.seen[nseen] = p.hits.key[j]
                nseen += 1
        qsort(p.seen, nseen, sizeof(uint64_t), _cmp_u64)
        ncand = 0  # the other tables' keys, unpermuted, after the seen ones
        for j in range(p.hits.n):
            if p.hits.table[j] != r * ntab:
                p.seen[nseen + ncand] = _permute(d, p.hits.table[j] - r * ntab, p.hits.key[j], True)
                ncand += 1
        qsort(p.seen + nseen, ncand, sizeof(uint64_t), _cmp_u64)
        nmiss = 0
        for x in range(nseen, nseen + ncand):
            key = p.seen[x]
            if (x > nseen and key == p.seen[x - 1]) or _sorted_has(p.seen, nseen, key):
                continue
            # Reuse the range array: each missing key is one range.
            if nmiss == p.ranges_cap:
                _ranges_room(p, 2 * p.ranges_cap)
            p.ranges[nmiss].table, p.ranges[nmiss].lo, p.ranges[nmiss].hi, p.ranges[nmiss].query = r * ntab, key, key, key
            nmiss += 1
        if nmiss and defer != NULL:
            for x in range(nmiss):
                if _phits_push(defer, q, p.ranges[x].lo, r):
                    raise MemoryError()
        elif nmiss:
            p.hits.n = 0
            err = _probe_ranges(tables, fetch, p.ranges, nmiss, 0, memo, &p.hits, &p.scratch)
            if err:
                return err
            # Each look-up's hits follow the one before's, copies of one key together: as many
            # distinct keys as look-ups, or table 0 lacks what another table holds (damage).
            x = 0
            for j in range(p.hits.n):
                if j == 0 or p.hits.key[j] != p.hits.key[j - 1]:
                    x += 1
                if _phits_push(&p.found, r, p.hits.key[j], p.hits.pos[j]):
                    raise MemoryError()
            if x != nmiss:
                p.scratch.err_table, p.scratch.err_where = r * ntab, -1
                return ERR_UNMATCHED
        # This run's entries by position, each once.
        if p.found.n - first > p.order_cap:
            grown_order = <PosKey*>realloc(p.order, (p.found.n - first) * sizeof(PosKey))
            if grown_order == NULL:
                raise MemoryError()
            p.order = grown_order
            p.order_cap = p.found.n - first
        for x in range(first, p.found.n):
            p.order[x - first].pos = p.found.pos[x]
            p.order[x - first].key = p.found.key[x]
        qsort(p.order, p.found.n - first, sizeof(PosKey), _cmp_pos)
        for x in range(first, p.found.n):
            p.found.pos[x] = p.order[x - first].pos
            p.found.key[x] = p.order[x - first].key
        y = first
        for x in range(first, p.found.n):
            if x == first or p.found.pos[x] != p.found.pos[y - 1]:
                p.found.key[y], p.found.pos[y] = p.found.key[x], p.found.pos[x]
                y += 1
        p.found.n = y
    return OK


cdef int _check_fp_args(ProbeDesign d, list tables) except -1:
    if len(tables) % d.ntab:
        raise ValueError("tables must hold every table of every run")
    return 0


def probe_fingerprint(ProbeDesign d, list tables, fetch, uint64_t fp, int k, dict memo=None):
    """Every run entry within ``k`` of ``fp``: see ``fpstore.index._runs_py.probe_fingerprint``."""
    cdef FpProbe p
    cdef Py_ssize_t j
    cdef int err
    _check_fp_args(d, tables)
    memset(&p, 0, sizeof(FpProbe))
    try:
        err = _probe_fp(d, tables, fetch, fp, k, {} if memo is None else memo, &p)
        if err:
            return err, p.scratch.err_table, p.scratch.err_where, []
        return OK, -1, -1, [(p.found.table[j], p.found.key[j], p.found.pos[j]) for j in range(p.found.n)]
    finally:
        _fp_free(&p)


cdef struct RunKey:
    int64_t run
    uint64_t key
    Py_ssize_t i


cdef int _cmp_run_key(const void* a, const void* b) noexcept nogil:
    cdef const RunKey* x = <const RunKey*>a
    cdef const RunKey* y = <const RunKey*>b
    if x.run != y.run:
        return (x.run > y.run) - (x.run < y.run)
    return (x.key > y.key) - (x.key < y.key)


cdef int _resolve_deferred(ProbeDesign d, list tables, fetch, dict memo, FpProbe* p, PHits* defer, PHits* extra,
                           PHits* extra_runs) except -1:
    """The table-0 look-ups a batch put off (``defer``: query, key, run), made together: each
    distinct (run, key) once, every range located and its block asked for before any is decoded,
    so that their misses overlap (one query at a time, each waited for its own). Their rows go to
    ``extra`` (query, key, position) and ``extra_runs`` (run), in ``defer``'s order. OK, or the
    first error in (run, key) order (the caller then probes the batch again without putting off
    anything, which reports the error one query at a time would)."""
    cdef Py_ssize_t n = defer.n, nu = 0, i, u, j, h, ntab = d.ntab
    cdef RunKey* rk = <RunKey*>malloc((n if n else 1) * sizeof(RunKey))
    cdef Py_ssize_t* u_of = <Py_ssize_t*>malloc((n if n else 1) * sizeof(Py_ssize_t))
    cdef Py_ssize_t* hs = <Py_ssize_t*>malloc((n + 1) * sizeof(Py_ssize_t))
    cdef int err
    try:
        if rk == NULL or u_of == NULL or hs == NULL:
            raise MemoryError()
        for i in range(n):
            rk[i].run, rk[i].key, rk[i].i = defer.pos[i], defer.key[i], i
        qsort(rk, n, sizeof(RunKey), _cmp_run_key)
        _ranges_room(p, n)
        for i in range(n):
            if i == 0 or rk[i].run != rk[i - 1].run or rk[i].key != rk[i - 1].key:
                p.ranges[nu].table = rk[i].run * ntab
                p.ranges[nu].lo = p.ranges[nu].hi = p.ranges[nu].query = rk[i].key
                nu += 1
            u_of[rk[i].i] = nu - 1
        p.hits.n = 0
        err = _probe_ranges(tables, fetch, p.ranges, nu, 0, memo, &p.hits, &p.scratch)
        if err:
            return err
        # Each range's hits follow the one before's: copies of its key, at least one, or table 0
        # lacks what another table holds (damage).
        j = 0
        for u in range(nu):
            hs[u] = j
            while j < p.hits.n and p.hits.table[j] == p.ranges[u].table and p.hits.key[j] == p.ranges[u].lo:
                j += 1
            if j == hs[u]:
                p.scratch.err_table, p.scratch.err_where = p.ranges[u].table, -1
                return ERR_UNMATCHED
        hs[nu] = j
        for i in range(n):
            u = u_of[i]
            for h in range(hs[u], hs[u + 1]):
                if _phits_push(extra, defer.table[i], p.hits.key[h], p.hits.pos[h]) or _phits_push(extra_runs, defer.pos[i], 0, 0):
                    raise MemoryError()
        return OK
    finally:
        free(rk)
        free(u_of)
        free(hs)


cdef int _probe_batch(ProbeDesign d, list tables, fetch, const uint64_t[::1] fps, int k, dict memo, FpProbe* p,
                      PHits* out, PHits* runs, PHits* defer, PHits* extra, PHits* extra_runs, bint deferring) except -1:
    cdef Py_ssize_t q, j
    cdef int err
    for q in range(fps.shape[0]):
        err = _probe_fp(d, tables, fetch, fps[q], k, memo, p, defer if deferring else NULL, q)
        if err:
            return err
        for j in range(p.found.n):
            if _phits_push(out, q, p.found.key[j], p.found.pos[j]) or _phits_push(runs, p.found.table[j], 0, 0):
                raise MemoryError()
    if deferring and defer.n:
        return _resolve_deferred(d, tables, fetch, memo, p, defer, extra, extra_runs)
    return OK


def probe_fingerprints(ProbeDesign d, list tables, fetch, const uint64_t[::1] fps, int k, dict memo=None):
    """:func:`probe_fingerprint` of every fingerprint of ``fps``, as arrays: see
    ``fpstore.index._runs_py.probe_fingerprints``. The look-ups in table 0 of what only the other
    tables found are made together at the end (:func:`_resolve_deferred`), then each query's rows
    merged back in order; on an error, or an exception from ``fetch``, the batch is probed again
    one query at a time, so the error is the one the specification reports."""
    cdef FpProbe p
    cdef PHits out, runs, defer, extra, extra_runs
    cdef Py_ssize_t a, b, x
    cdef int err
    cdef int64_t[::1] qi_v, ri_v, pos_v
    cdef uint64_t[::1] keys_v
    cdef bint take_a
    _check_fp_args(d, tables)
    memset(&p, 0, sizeof(FpProbe))
    memset(&out, 0, sizeof(PHits))
    memset(&runs, 0, sizeof(PHits))
    memset(&defer, 0, sizeof(PHits))
    memset(&extra, 0, sizeof(PHits))
    memset(&extra_runs, 0, sizeof(PHits))
    if memo is None:
        memo = {}
    try:
        try:
            err = _probe_batch(d, tables, fetch, fps, k, memo, &p, &out, &runs, &defer, &extra, &extra_runs, True)
        except Exception:  # (a chunk's read failed: one query at a time may meet another error first)
            err = -1
        if err:
            out.n = runs.n = defer.n = extra.n = extra_runs.n = 0
            err = _probe_batch(d, tables, fetch, fps, k, memo, &p, &out, &runs, &defer, &extra, &extra_runs, False)
            if err:
                return err, p.scratch.err_table, p.scratch.err_where, None
        qi = np.empty(out.n + extra.n, np.int64)
        ri = np.empty(out.n + extra.n, np.int64)
        keys = np.empty(out.n + extra.n, np.uint64)
        pos = np.empty(out.n + extra.n, np.int64)
        qi_v, ri_v, keys_v, pos_v = qi, ri, keys, pos
        # Both lists hold each query's rows by run, then position: merge them.
        a = b = 0
        for x in range(out.n + extra.n):
            if a == out.n:
                take_a = False
            elif b == extra.n:
                take_a = True
            elif out.table[a] != extra.table[b]:
                take_a = out.table[a] < extra.table[b]
            elif runs.table[a] != extra_runs.table[b]:
                take_a = runs.table[a] < extra_runs.table[b]
            else:
                take_a = out.pos[a] < extra.pos[b]
            if take_a:
                qi_v[x], ri_v[x], keys_v[x], pos_v[x] = out.table[a], runs.table[a], out.key[a], out.pos[a]
                a += 1
            else:
                qi_v[x], ri_v[x], keys_v[x], pos_v[x] = extra.table[b], extra_runs.table[b], extra.key[b], extra.pos[b]
                b += 1
        return OK, -1, -1, (qi, ri, keys, pos)
    finally:
        _fp_free(&p)
        _phits_free(&out)
        _phits_free(&runs)
        _phits_free(&defer)
        _phits_free(&extra)
        _phits_free(&extra_runs)



// 16-lane vectors for memloop's CPU kernels (qmatmul.cc, paged_attention.cc), on AVX-512 or AVX2.
//
// The kernels are written against 16 f32 lanes (`V16`), 16 int32 lanes (`V16i`), 8 f64 lanes (`V8d`,
// only reinterpreted) and 16-bit lane masks (`Mask16`) with the operations below, named after the
// AVX-512 intrinsics they stand for (`v16_add_ps` is `_mm512_add_ps`). With AVX-512 (F, BW, VL) each
// is that intrinsic itself. Without it (AVX2 + FMA + F16C: AMD Zen 1-3, Intel before Skylake-SP, and
// most cloud hosts of those) a vector is a pair of 256-bit halves and every operation keeps the
// AVX-512 lane semantics exactly -- the same lanes, the same rounding, the same reduction trees -- so
// a kernel gives bit-identical results on either instruction set, and its batch invariance holds
// unchanged. Only speed differs (two instructions per operation, half the vector registers), which
// the kernels' tile sizes account for (`kV16Native`).
//
// The library is built with -ffp-contract=off (engine/kernels/__init__.py): GCC writes several of
// these intrinsics as plain vector arithmetic, which it would otherwise fuse into FMAs differently in
// the two builds (e.g. a multiply feeding the AVX2 reduction's first add); only explicit FMAs fuse.
// The reduction trees are GCC's; clang's AVX-512 reductions may differ in their NaN handling.
#pragma once

#include <immintrin.h>

#include <cstdint>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)

constexpr bool kV16Native = true;
using V16 = __m512;
using V16i = __m512i;
using V8d = __m512d;
using Mask16 = __mmask16;

#define v16_set1_ps _mm512_set1_ps
#define v16_setzero_ps _mm512_setzero_ps
#define v16_setr_ps _mm512_setr_ps
#define v16_loadu_ps _mm512_loadu_ps
#define v16_load_ps _mm512_load_ps
#define v16_storeu_ps _mm512_storeu_ps
#define v16_add_ps _mm512_add_ps
#define v16_sub_ps _mm512_sub_ps
#define v16_mul_ps _mm512_mul_ps
#define v16_max_ps _mm512_max_ps
#define v16_fmadd_ps _mm512_fmadd_ps
#define v16_fnmadd_ps _mm512_fnmadd_ps
#define v16_reduce_add_ps _mm512_reduce_add_ps
#define v16_reduce_max_ps _mm512_reduce_max_ps
#define v16_shuffle_f32x4 _mm512_shuffle_f32x4
#define v16_unpacklo_ps _mm512_unpacklo_ps
#define v16_unpackhi_ps _mm512_unpackhi_ps
#define v16_unpacklo_pd _mm512_unpacklo_pd
#define v16_unpackhi_pd _mm512_unpackhi_pd
#define v16_castps_pd _mm512_castps_pd
#define v16_castpd_ps _mm512_castpd_ps
#define v16_permutexvar_ps _mm512_permutexvar_ps
#define v16_permutex2var_ps _mm512_permutex2var_ps
#define v16_roundscale_ps _mm512_roundscale_ps
#define v16_scalef_ps _mm512_scalef_ps
#define v16_mask_mov_ps _mm512_mask_mov_ps
#define v16_maskz_mov_ps _mm512_maskz_mov_ps
#define v16_maskz_mul_ps _mm512_maskz_mul_ps
#define v16_cvtph_ps _mm512_cvtph_ps
#define v16_cvtepi32_ps _mm512_cvtepi32_ps
#define v16_cvtepi8_epi32 _mm512_cvtepi8_epi32
#define v16_cvtepu8_epi32 _mm512_cvtepu8_epi32
#define v16_set1_epi32 _mm512_set1_epi32
#define v16_setr_epi32 _mm512_setr_epi32
#define v16_add_epi32 _mm512_add_epi32
#define v16_and_si512 _mm512_and_si512
#define v16_or_si512 _mm512_or_si512
#define v16_srli_epi32 _mm512_srli_epi32
#define v16_slli_epi32 _mm512_slli_epi32
#define v16_srlv_epi32 _mm512_srlv_epi32

#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

constexpr bool kV16Native = false;

// Lanes 0-7 in `lo`, 8-15 in `hi`.
struct V16 {
  __m256 lo, hi;
};
struct V16i {
  __m256i lo, hi;
};
struct V8d {
  __m256d lo, hi;
};
using Mask16 = uint16_t;

#define V16_INLINE inline __attribute__((always_inline))

namespace v16_detail {
// Lane i of the result is all ones where bit i of `bits` is set (lanes 0-7 of an 8-bit mask).
V16_INLINE __m256 LaneMask(uint32_t bits) {
  const __m256i each = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256i b = _mm256_set1_epi32(static_cast<int>(bits));
  return _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(b, each), each));
}
// a[idx & 15] per lane, from the 16 lanes of a (lanes chosen by idx's low 4 bits).
V16_INLINE __m256 Lookup16(const V16& a, __m256i idx) {
  const __m256 from_lo = _mm256_permutevar8x32_ps(a.lo, idx);
  const __m256 from_hi = _mm256_permutevar8x32_ps(a.hi, idx);
  return _mm256_blendv_ps(from_lo, from_hi, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));  // bit 3 -> sign
}
}  // namespace v16_detail

V16_INLINE V16 v16_set1_ps(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
V16_INLINE V16 v16_setzero_ps() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
V16_INLINE V16 v16_setr_ps(float a0, float a1, float a2, float a3, float a4, float a5, float a6, float a7, float a8,
                           float a9, float a10, float a11, float a12, float a13, float a14, float a15) {
  return {_mm256_setr_ps(a0, a1, a2, a3, a4, a5, a6, a7), _mm256_setr_ps(a8, a9, a10, a11, a12, a13, a14, a15)};
}
V16_INLINE V16 v16_loadu_ps(const void* p) {
  const float* f = static_cast<const float*>(p);
  return {_mm256_loadu_ps(f), _mm256_loadu_ps(f + 8)};
}
V16_INLINE V16 v16_load_ps(const void* p) { return v16_loadu_ps(p); }
V16_INLINE void v16_storeu_ps(void* p, V16 a) {
  float* f = static_cast<float*>(p);
  _mm256_storeu_ps(f, a.lo);
  _mm256_storeu_ps(f + 8, a.hi);
}
V16_INLINE V16 v16_add_ps(V16 a, V16 b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
V16_INLINE V16 v16_sub_ps(V16 a, V16 b) { return {_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)}; }
V16_INLINE V16 v16_mul_ps(V16 a, V16 b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
V16_INLINE V16 v16_max_ps(V16 a, V16 b) { return {_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)}; }
V16_INLINE V16 v16_fmadd_ps(V16 a, V16 b, V16 c) {
  return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
V16_INLINE V16 v16_fnmadd_ps(V16 a, V16 b, V16 c) {
  return {_mm256_fnmadd_ps(a.lo, b.lo, c.lo), _mm256_fnmadd_ps(a.hi, b.hi, c.hi)};
}

// The reduction trees of GCC's _mm512_reduce_add_ps / _mm512_reduce_max_ps: halves, quarters,
// then pairs within the last 128 bits.
#define V16_REDUCE(name, op256, op128, op1)                              \
  V16_INLINE float name(V16 a) {                                        \
    const __m256 t3 = op256(a.hi, a.lo);                                \
    const __m128 t6 = op128(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3)); \
    const __m128 t8 = op128(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2))); \
    return op1(t8[0], t8[1]);                                           \
  }
V16_INLINE float V16Add1(float a, float b) { return a + b; }
V16_INLINE float V16Max1(float a, float b) { return a > b ? a : b; }
V16_REDUCE(v16_reduce_add_ps, _mm256_add_ps, _mm_add_ps, V16Add1)
V16_REDUCE(v16_reduce_max_ps, _mm256_max_ps, _mm_max_ps, V16Max1)
#undef V16_REDUCE

// 128-bit lanes (imm & 3, imm >> 2 & 3) of a, then (imm >> 4 & 3, imm >> 6 & 3) of b.
template <int imm>
V16_INLINE V16 V16ShuffleF32x4(V16 a, V16 b) {
  return {_mm256_permute2f128_ps(a.lo, a.hi, (imm & 3) | (((imm >> 2) & 3) << 4)),
          _mm256_permute2f128_ps(b.lo, b.hi, ((imm >> 4) & 3) | (((imm >> 6) & 3) << 4))};
}
#define v16_shuffle_f32x4(a, b, imm) V16ShuffleF32x4<(imm)>((a), (b))

// The in-lane unpacks act within each 128-bit lane, as AVX2's own.
V16_INLINE V16 v16_unpacklo_ps(V16 a, V16 b) { return {_mm256_unpacklo_ps(a.lo, b.lo), _mm256_unpacklo_ps(a.hi, b.hi)}; }
V16_INLINE V16 v16_unpackhi_ps(V16 a, V16 b) { return {_mm256_unpackhi_ps(a.lo, b.lo), _mm256_unpackhi_ps(a.hi, b.hi)}; }
V16_INLINE V8d v16_unpacklo_pd(V8d a, V8d b) { return {_mm256_unpacklo_pd(a.lo, b.lo), _mm256_unpacklo_pd(a.hi, b.hi)}; }
V16_INLINE V8d v16_unpackhi_pd(V8d a, V8d b) { return {_mm256_unpackhi_pd(a.lo, b.lo), _mm256_unpackhi_pd(a.hi, b.hi)}; }
V16_INLINE V8d v16_castps_pd(V16 a) { return {_mm256_castps_pd(a.lo), _mm256_castps_pd(a.hi)}; }
V16_INLINE V16 v16_castpd_ps(V8d a) { return {_mm256_castpd_ps(a.lo), _mm256_castpd_ps(a.hi)}; }

// result[i] = a[idx[i] & 15]
V16_INLINE V16 v16_permutexvar_ps(V16i idx, V16 a) {
  return {v16_detail::Lookup16(a, idx.lo), v16_detail::Lookup16(a, idx.hi)};
}
// result[i] = (idx[i] & 16 ? b : a)[idx[i] & 15]
V16_INLINE V16 v16_permutex2var_ps(V16 a, V16i idx, V16 b) {
  auto pick = [&](__m256i i) {
    return _mm256_blendv_ps(v16_detail::Lookup16(a, i), v16_detail::Lookup16(b, i),
                            _mm256_castsi256_ps(_mm256_slli_epi32(i, 27)));  // bit 4 -> sign
  };
  return {pick(idx.lo), pick(idx.hi)};
}

// Rounding to an integer in the mode of imm's low bits (a roundscale with scale 0, all the kernels use).
template <int imm>
V16_INLINE V16 V16Roundscale(V16 a) {
  static_assert((imm & 0xF0) == 0, "only a scale of 0 (round to an integer) is emulated");
  return {_mm256_round_ps(a.lo, imm & 0x0F), _mm256_round_ps(a.hi, imm & 0x0F)};
}
#define v16_roundscale_ps(a, imm) V16Roundscale<(imm)>(a)

// a * 2^b for integral b (the kernels' one use, Exp, gives b in [-126, 0]), rounded once as vscalefps
// rounds it: b (clamped to [-252, 254], beyond which the result is 0 or inf either way) is split in
// two halves whose powers of two are normal floats; scaling by the first is exact, so only the second
// multiply rounds (to a subnormal, or to inf where a * 2^b overflows).
V16_INLINE V16 v16_scalef_ps(V16 a, V16 b) {
  auto scale = [](__m256 x, __m256 n) {
    const __m256i e = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(n, _mm256_set1_ps(-252.0f)), _mm256_set1_ps(254.0f)));
    const __m256i h = _mm256_srai_epi32(e, 1);
    auto pow2 = [](__m256i k) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23)); };
    return _mm256_mul_ps(_mm256_mul_ps(x, pow2(h)), pow2(_mm256_sub_epi32(e, h)));
  };
  return {scale(a.lo, b.lo), scale(a.hi, b.hi)};
}

V16_INLINE V16 v16_mask_mov_ps(V16 src, Mask16 k, V16 a) {
  return {_mm256_blendv_ps(src.lo, a.lo, v16_detail::LaneMask(k & 0xFF)),
          _mm256_blendv_ps(src.hi, a.hi, v16_detail::LaneMask(k >> 8))};
}
V16_INLINE V16 v16_maskz_mov_ps(Mask16 k, V16 a) {
  return {_mm256_and_ps(a.lo, v16_detail::LaneMask(k & 0xFF)), _mm256_and_ps(a.hi, v16_detail::LaneMask(k >> 8))};
}
V16_INLINE V16 v16_maskz_mul_ps(Mask16 k, V16 a, V16 b) { return v16_maskz_mov_ps(k, v16_mul_ps(a, b)); }

V16_INLINE V16 v16_cvtph_ps(__m256i h) {
  return {_mm256_cvtph_ps(_mm256_castsi256_si128(h)), _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1))};
}
V16_INLINE V16 v16_cvtepi32_ps(V16i a) { return {_mm256_cvtepi32_ps(a.lo), _mm256_cvtepi32_ps(a.hi)}; }
V16_INLINE V16i v16_cvtepi8_epi32(__m128i a) { return {_mm256_cvtepi8_epi32(a), _mm256_cvtepi8_epi32(_mm_srli_si128(a, 8))}; }
V16_INLINE V16i v16_cvtepu8_epi32(__m128i a) { return {_mm256_cvtepu8_epi32(a), _mm256_cvtepu8_epi32(_mm_srli_si128(a, 8))}; }

V16_INLINE V16i v16_set1_epi32(int x) { return {_mm256_set1_epi32(x), _mm256_set1_epi32(x)}; }
V16_INLINE V16i v16_setr_epi32(int a0, int a1, int a2, int a3, int a4, int a5, int a6, int a7, int a8, int a9,
                               int a10, int a11, int a12, int a13, int a14, int a15) {
  return {_mm256_setr_epi32(a0, a1, a2, a3, a4, a5, a6, a7), _mm256_setr_epi32(a8, a9, a10, a11, a12, a13, a14, a15)};
}
V16_INLINE V16i v16_add_epi32(V16i a, V16i b) { return {_mm256_add_epi32(a.lo, b.lo), _mm256_add_epi32(a.hi, b.hi)}; }
V16_INLINE V16i v16_and_si512(V16i a, V16i b) { return {_mm256_and_si256(a.lo, b.lo), _mm256_and_si256(a.hi, b.hi)}; }
V16_INLINE V16i v16_or_si512(V16i a, V16i b) { return {_mm256_or_si256(a.lo, b.lo), _mm256_or_si256(a.hi, b.hi)}; }
V16_INLINE V16i v16_srli_epi32(V16i a, int n) { return {_mm256_srli_epi32(a.lo, n), _mm256_srli_epi32(a.hi, n)}; }
V16_INLINE V16i v16_slli_epi32(V16i a, int n) { return {_mm256_slli_epi32(a.lo, n), _mm256_slli_epi32(a.hi, n)}; }
V16_INLINE V16i v16_srlv_epi32(V16i a, V16i n) { return {_mm256_srlv_epi32(a.lo, n.lo), _mm256_srlv_epi32(a.hi, n.hi)}; }

#undef V16_INLINE

#else
#error "memloop's CPU kernels need x86-64 with AVX-512 (F, BW, VL) or AVX2 with FMA and F16C"
#endif

// y[R, out] = x[R, in] . W^T for a weight matrix W [out, in] kept in its GGUF block form, as an
// XLA:CPU FFI custom call. Block types:
//   Q4_0, Q4_1, Q5_0, Q8_0: 32 weights per block, an f16 scale (Q4_1: an f16 offset; Q5_0: a 32-bit
//     word of fifth bits);
//   Q4_K, Q5_K, Q6_K ("k-quants"): 256-weight super-blocks with an f16 scale (Q4_K/Q5_K: and an f16
//     min) and 8 (Q4_K/Q5_K: 6-bit scale and min) or 16 (Q6_K: int8 scale) sub-block scales.
// Either way the kernel walks a row in groups of 32 weights (a k-quant super-block is 8 groups).
//
// Why: at small batch the decoder is bound by the bytes of weights it reads. f32 weights are
// 4 bytes per weight; the GGUF blocks are 0.56-1.06. XLA cannot consume them without first writing
// an f32 copy, so this kernel de-quantises each block in registers and multiplies it at once.
//
// Exactness: every weight is rebuilt to the very f32 value the `gguf` package's de-quantiser gives
// (d*q is exact in f32 for 4-, 5- and 8-bit codes, so fma(q, d, m) == (d*q)+m rounded once; for the
// k-quants d*sc (11-bit f16 mantissa x 6- or 8-bit scale) and then *q stay within f32's 24 bits,
// so (d*sc)*q - dmin*m is also rounded once, by the subtraction, as numpy does it).
// Batch invariance: the sum for one (row, output) pair is the same sequence of vector FMAs and the
// same final reduction whatever the number of rows or the tiling, so a request's numbers do not
// depend on what shares its batch.
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "crew.h"
#include "vec16.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

enum QType : int32_t { kQ4_0 = 0, kQ4_1 = 1, kQ8_0 = 2, kQ5_0 = 3, kQ4_K = 4, kQ5_K = 5, kQ6_K = 6 };

constexpr int kBlock = 32;    // weights per group: one step of the multiply loop
constexpr int kSuper = 256;   // weights per k-quant super-block

constexpr bool IsK(int32_t qtype) { return qtype >= kQ4_K; }

// Bytes of one block (k-quants: one super-block).
constexpr int BlockBytes(int32_t qtype) {
  switch (qtype) {
    case kQ4_0: return 18;
    case kQ4_1: return 20;
    case kQ5_0: return 22;
    case kQ8_0: return 34;
    case kQ4_K: return 144;
    case kQ5_K: return 176;
    default: return 210;  // kQ6_K
  }
}

constexpr int BlockWeights(int32_t qtype) { return IsK(qtype) ? kSuper : kBlock; }

inline int64_t RowBytes(int32_t qtype, int64_t in) { return in / BlockWeights(qtype) * BlockBytes(qtype); }

inline float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// The 6-bit scale and min of sub-block t (0-7) of a Q4_K/Q5_K super-block, packed in 12 bytes
// (ggml's get_scale_min_k4): sub-blocks 0-3 in the low 6 bits of bytes t and t+4; 4-7 split
// between bytes t+4 (low 4 bits each) and the top 2 bits of bytes t-4 and t.
inline void ScaleMinK4(const uint8_t* q, int t, int& sc, int& m) {
  if (t < 4) {
    sc = q[t] & 63;
    m = q[t + 4] & 63;
  } else {
    sc = (q[t + 4] & 0xF) | ((q[t - 4] >> 6) << 4);
    m = (q[t + 4] >> 4) | ((q[t] >> 6) << 4);
  }
}

// Group t (32 weights) of one k-quant super-block `b` as two vectors. The codes are assembled on
// the 32 bytes at once (one 256-bit register) and widened only at the end: the decoding, not the
// memory, bounds these types at batch 1.
template <int32_t Q>
inline void DequantK(const uint8_t* b, int t, V16& lo, V16& hi) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  if constexpr (Q == kQ6_K) {
    // Layout: 128 bytes ql (low 4 bits), 64 bytes qh (high 2 bits), 16 int8 scales (one per 16
    // weights), f16 d. Weight 32t+l: half h = t/4, s = t%4; low bits in the s/2-th nibble of
    // ql[64h + 32(s%2) + l], high bits at bit 2s of qh[32h + l]; value d*scale*(code - 32).
    const int h = t >> 2, s = t & 3;
    const float d = Half(b + 208);
    const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
    const __m256i ql = _mm256_loadu_si256((const __m256i*)(b + 64 * h + 32 * (s & 1)));
    const __m256i qh = _mm256_loadu_si256((const __m256i*)(b + 128 + 32 * h));
    // 16-bit shifts move bits across byte borders; the masks keep each byte's own.
    const __m256i l = _mm256_and_si256(s >> 1 ? _mm256_srli_epi16(ql, 4) : ql, low4);
    const __m256i hb = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * s)), _mm256_set1_epi8(3));
    const __m256i code = _mm256_sub_epi8(_mm256_or_si256(l, _mm256_slli_epi16(hb, 4)), _mm256_set1_epi8(32));
    lo = v16_mul_ps(v16_cvtepi32_ps(v16_cvtepi8_epi32(_mm256_castsi256_si128(code))),
                       v16_set1_ps(d * (float)scales[2 * t]));
    hi = v16_mul_ps(v16_cvtepi32_ps(v16_cvtepi8_epi32(_mm256_extracti128_si256(code, 1))),
                       v16_set1_ps(d * (float)scales[2 * t + 1]));
  } else {
    // Q4_K layout: f16 d, f16 dmin, 12 bytes of scales/mins, 128 bytes of nibbles (group t: the
    // low (t even) or high (t odd) nibbles of bytes 32(t/2)..+31). Q5_K puts 32 bytes of fifth bits
    // before the nibbles: bit t of byte l is the fifth bit of weight 32t+l. The value
    // d*sc*code - dmin*m comes from a table of the group's 16 (32) possible values.
    int sc, m;
    ScaleMinK4(b + 4, t, sc, m);
    const V16 dsc = v16_set1_ps(Half(b) * (float)sc);
    const V16 neg_min = v16_set1_ps(-(Half(b + 2) * (float)m));
    const V16 codes = v16_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const V16 t0 = v16_fmadd_ps(codes, dsc, neg_min);
    const __m256i qs = _mm256_loadu_si256((const __m256i*)(b + (Q == kQ5_K ? 48 : 16) + 32 * (t >> 1)));
    __m256i code = _mm256_and_si256(t & 1 ? _mm256_srli_epi16(qs, 4) : qs, low4);
    if constexpr (Q == kQ4_K) {
      lo = v16_permutexvar_ps(v16_cvtepu8_epi32(_mm256_castsi256_si128(code)), t0);
      hi = v16_permutexvar_ps(v16_cvtepu8_epi32(_mm256_extracti128_si256(code, 1)), t0);
    } else {
      const V16 t1 = v16_fmadd_ps(v16_add_ps(codes, v16_set1_ps(16.0f)), dsc, neg_min);
      const __m256i qh = _mm256_loadu_si256((const __m256i*)(b + 16));
      const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << t));
      // 16 where the byte's bit t is set: (qh & bit) == bit, as 0xFF, masked to 0x10.
      code = _mm256_or_si256(code, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit),
                                                    _mm256_set1_epi8(16)));
      lo = v16_permutex2var_ps(t0, v16_cvtepu8_epi32(_mm256_castsi256_si128(code)), t1);
      hi = v16_permutex2var_ps(t0, v16_cvtepu8_epi32(_mm256_extracti128_si256(code, 1)), t1);
    }
  }
}

// The 32 weights of one block as two vectors (elements 0-15 and 16-31).
// A Q4_0/Q4_1/Q8_0 block de-quantised with its scale (and Q4_1's offset) `dm` already in f32 (`Dequant`
// converts them here; the AVX-512 decode tile converts them ahead, `ConvertScales`): the same bits.
template <int32_t Q>
inline void DequantScaled(const uint8_t* b, const float* dm, V16& lo, V16& hi) {
  const V16 d = v16_set1_ps(dm[0]);
  if constexpr (Q == kQ8_0) {
    lo = v16_mul_ps(v16_cvtepi32_ps(v16_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(b + 2)))), d);
    hi = v16_mul_ps(v16_cvtepi32_ps(v16_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(b + 18)))), d);
  } else {
    // A 16-entry table of the block's possible values, looked up by nibble (vpermps reads the low
    // 4 bits of each index): byte i holds element i in its low nibble and element i+16 in its high.
    // (The AVX2 tile decodes these types directly instead: GroupHalf.)
    const V16 codes = v16_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const V16 table = Q == kQ4_1 ? v16_fmadd_ps(codes, d, v16_set1_ps(dm[1]))
                                 : v16_mul_ps(v16_sub_ps(codes, v16_set1_ps(8.0f)), d);
    const V16i v = v16_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(b + (Q == kQ4_1 ? 4 : 2))));
    lo = v16_permutexvar_ps(v, table);
    hi = v16_permutexvar_ps(v16_srli_epi32(v, 4), table);
  }
}

template <int32_t Q>
inline void Dequant(const uint8_t* b, V16& lo, V16& hi) {
  if constexpr (Q == kQ5_0) {
    // Layout: f16 d, u32 qh (bit i = fifth bit of element i), 16 bytes of nibbles as in Q4_0.
    // The 5-bit code indexes a 32-entry table (two vectors, vpermt2ps) of d * (code - 16).
    const V16 d = v16_set1_ps(Half(b));
    const V16 codes = v16_setr_ps(-16, -15, -14, -13, -12, -11, -10, -9, -8, -7, -6, -5, -4, -3, -2, -1);
    const V16 t0 = v16_mul_ps(codes, d);
    const V16 t1 = v16_mul_ps(v16_add_ps(codes, v16_set1_ps(16.0f)), d);
    uint32_t qh;
    std::memcpy(&qh, b + 2, 4);
    const V16i lanes = v16_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const V16i bits = v16_set1_epi32((int)qh);
    const V16i one = v16_set1_epi32(1), nib = v16_set1_epi32(15);
    const V16i v = v16_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(b + 6)));
    const V16i h0 = v16_slli_epi32(v16_and_si512(v16_srlv_epi32(bits, lanes), one), 4);
    const V16i h1 = v16_slli_epi32(
        v16_and_si512(v16_srlv_epi32(bits, v16_add_epi32(lanes, v16_set1_epi32(16))), one), 4);
    lo = v16_permutex2var_ps(t0, v16_or_si512(v16_and_si512(v, nib), h0), t1);
    hi = v16_permutex2var_ps(t0, v16_or_si512(v16_srli_epi32(v, 4), h1), t1);
  } else {  // Q4_0, Q4_1, Q8_0
    const float dm[2] = {Half(b), Q == kQ4_1 ? Half(b + 2) : 0.0f};
    DequantScaled<Q>(b, dm, lo, hi);
  }
}

// Group j (weights 32j..32j+31) of the block row starting at `row`.
template <int32_t Q>
inline void Group(const uint8_t* row, int64_t j, V16& lo, V16& hi) {
  if constexpr (IsK(Q)) {
    DequantK<Q>(row + (j >> 3) * BlockBytes(Q), static_cast<int>(j & 7), lo, hi);
  } else {
    Dequant<Q>(row + j * BlockBytes(Q), lo, hi);
  }
}

// RT rows x OT outputs: accumulators stay in registers across all blocks of the row.
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__)
// AVX2 (vec16.h): a 16-lane accumulator is two 256-bit registers, and 16 registers do not hold a
// tile's worth (one row alone is the exception: TileRow). Every lane of an accumulator is its own FMA
// chain, so the multi-row tile runs in two passes over
// the row, lanes 0-7 of every accumulator and then lanes 8-15 (the de-quantised half a pass does not
// use is dead code), each pass with one register per accumulator. Each lane sees the same FMAs in the
// same order as in the one-pass form, and the two halves meet for the same final reduction, so the
// results are those of the AVX-512 tile.

// The f16 scale and offset of a Q4_1 block (Q4_0/Q8_0: the scale twice) as broadcast f32 vectors:
// one 32-bit load and one conversion for both (the same values as `Half`).
template <int32_t Q>
inline void Scales(const uint8_t* b, __m256& d, __m256& m) {
  uint32_t dm;
  std::memcpy(&dm, b, 4);
  const __m128 s = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dm)));
  d = _mm256_broadcastss_ps(s);
  m = Q == kQ4_1 ? _mm256_broadcastss_ps(_mm_movehdup_ps(s)) : d;
}

// Lanes 8*HALF .. 8*HALF+7 of Group's two vectors (weights 8h..8h+7 and 16+8h..16+8h+7), each the
// same f32 as Group's: the 32-weight types decoded directly, the k-quants through Group.
template <int32_t Q, int HALF>
inline void GroupHalf(const uint8_t* row, int64_t j, __m256& wl, __m256& wh) {
  if constexpr (Q == kQ4_0 || Q == kQ4_1) {
    const uint8_t* b = row + j * BlockBytes(Q);
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(b + (Q == kQ4_1 ? 4 : 2) + 8 * HALF)));
    const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(15)));
    const __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4));
    __m256 d, m;
    Scales<Q>(b, d, m);
    if constexpr (Q == kQ4_1) {
      wl = _mm256_fmadd_ps(lo, d, m);
      wh = _mm256_fmadd_ps(hi, d, m);
    } else {
      wl = _mm256_mul_ps(_mm256_sub_ps(lo, _mm256_set1_ps(8.0f)), d);
      wh = _mm256_mul_ps(_mm256_sub_ps(hi, _mm256_set1_ps(8.0f)), d);
    }
  } else if constexpr (Q == kQ8_0) {
    const uint8_t* b = row + j * BlockBytes(Q);
    const __m256 d = _mm256_set1_ps(Half(b));
    wl = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(b + 2 + 8 * HALF)))), d);
    wh = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(b + 18 + 8 * HALF)))), d);
  } else {
    V16 lo, hi;
    Group<Q>(row, j, lo, hi);
    wl = HALF ? lo.hi : lo.lo;
    wh = HALF ? hi.hi : hi.lo;
  }
}

// All 32 weights of group j as four vectors (weights 0-7, 8-15, 16-23, 24-31), for the one-row tile:
// the same f32 values as Group's. Q4_0/Q4_1 codes reach their 32-bit lanes by an in-lane byte
// shuffle of the 16 code bytes held in both halves of a register (one uop per 8 codes, where the
// zero-extension `vpmovzxbd` of 8 bytes costs two).
template <int32_t Q>
inline void GroupQuad(const uint8_t* row, int64_t j, __m256 (&w)[4]) {
  if constexpr (Q == kQ4_0 || Q == kQ4_1) {
    const uint8_t* b = row + j * BlockBytes(Q);
    const __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)(b + (Q == kQ4_1 ? 4 : 2))));
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i codes[2] = {_mm256_and_si256(q, low4), _mm256_and_si256(_mm256_srli_epi16(q, 4), low4)};
    // byte i of each half to the low byte of lane i (bytes 0-7), or of lane i-8 (bytes 8-15); -1 zeroes
    const __m256i first = _mm256_setr_epi8(0, -1, -1, -1, 1, -1, -1, -1, 2, -1, -1, -1, 3, -1, -1, -1,
                                           4, -1, -1, -1, 5, -1, -1, -1, 6, -1, -1, -1, 7, -1, -1, -1);
    const __m256i second = _mm256_add_epi32(first, _mm256_set1_epi32(8));
    __m256 d, m;
    Scales<Q>(b, d, m);
    for (int k = 0; k < 4; ++k) {
      const __m256 c = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(codes[k >> 1], k & 1 ? second : first));
      w[k] = Q == kQ4_1 ? _mm256_fmadd_ps(c, d, m) : _mm256_mul_ps(_mm256_sub_ps(c, _mm256_set1_ps(8.0f)), d);
    }
  } else if constexpr (Q == kQ8_0) {
    GroupHalf<Q, 0>(row, j, w[0], w[2]);
    GroupHalf<Q, 1>(row, j, w[1], w[3]);
  } else {
    V16 lo, hi;
    Group<Q>(row, j, lo, hi);
    w[0] = lo.lo, w[1] = lo.hi, w[2] = hi.lo, w[3] = hi.hi;
  }
}

// One row, OT outputs, both lane halves in one pass (2*OT accumulators fit the 16 registers when the
// row is alone): a group is decoded once and its scales converted once. Lane l of the two halves
// sees fma(x[l], w[l]) then fma(x[16+l], w[16+l]) (l = 0-15), the order of every other tile.
template <int32_t Q, int OT>
inline void TileRow(const float* x, int64_t in, const uint8_t* w, int64_t row_bytes, float* y) {
  const int64_t nb = in / kBlock;
  __m256 a0[OT], a1[OT];
  for (int o = 0; o < OT; ++o) a0[o] = a1[o] = _mm256_setzero_ps();
  const uint8_t* next = w + OT * row_bytes;  // the next tile's rows, prefetched over the blocks
  const int64_t span = OT * row_bytes;
  const int64_t step = (span + nb - 1) / nb;
  for (int64_t j = 0; j < nb; ++j) {
    for (int64_t b = j * step; b < (j + 1) * step && b < span; b += 64) _mm_prefetch((const char*)(next + b), _MM_HINT_T0);
    const float* xj = x + j * kBlock;
    for (int o = 0; o < OT; ++o) {
      __m256 q[4];
      GroupQuad<Q>(w + o * row_bytes, j, q);
      a0[o] = _mm256_fmadd_ps(_mm256_loadu_ps(xj), q[0], a0[o]);
      a0[o] = _mm256_fmadd_ps(_mm256_loadu_ps(xj + 16), q[2], a0[o]);
      a1[o] = _mm256_fmadd_ps(_mm256_loadu_ps(xj + 8), q[1], a1[o]);
      a1[o] = _mm256_fmadd_ps(_mm256_loadu_ps(xj + 24), q[3], a1[o]);
    }
  }
  for (int o = 0; o < OT; ++o) y[o] = v16_reduce_add_ps(V16{a0[o], a1[o]});
}

template <int32_t Q, int RT, int OT, int HALF>
inline void TilePass(const float* x, int64_t in, const uint8_t* w, int64_t row_bytes, V16 (&acc)[RT][OT]) {
  const int64_t nb = in / kBlock;
  __m256 a[RT][OT];
  for (int r = 0; r < RT; ++r)
    for (int o = 0; o < OT; ++o) a[r][o] = _mm256_setzero_ps();
  const uint8_t* next = w + OT * row_bytes;  // the next tile's rows, prefetched during the second pass
  const int64_t span = OT * row_bytes;
  const int64_t step = (span + nb - 1) / nb;
  const float* xh = x + 8 * HALF;
  for (int64_t j = 0; j < nb; ++j) {
    if constexpr (HALF == 1)
      for (int64_t b = j * step; b < (j + 1) * step && b < span; b += 64) _mm_prefetch((const char*)(next + b), _MM_HINT_T0);
    for (int o = 0; o < OT; ++o) {
      __m256 wl, wh;
      GroupHalf<Q, HALF>(w + o * row_bytes, j, wl, wh);
      for (int r = 0; r < RT; ++r) {
        a[r][o] = _mm256_fmadd_ps(_mm256_loadu_ps(xh + r * in + j * kBlock), wl, a[r][o]);
        a[r][o] = _mm256_fmadd_ps(_mm256_loadu_ps(xh + r * in + j * kBlock + 16), wh, a[r][o]);
      }
    }
  }
  for (int r = 0; r < RT; ++r)
    for (int o = 0; o < OT; ++o) (HALF ? acc[r][o].hi : acc[r][o].lo) = a[r][o];
}

// Six rows or more (PanelOutputs): a slice of outputs is de-quantised once into an f32 panel (about
// 24 KB, in L1) and every row meets it in tiles of 3 rows x 3 outputs, each x vector and panel vector
// held in a register for the 3 FMAs that use it (the 8 x 1 tile above loads x for every FMA and
// re-decodes each block per pass). Wide inputs are taken in parts of at most kPanelDepth weights, so
// a part's panel and 3 rows of x stay in L1 together; the accumulators carry over from part to part.
// The FMAs per lane are those of Tile, in the same order, and the reduction is the same, so the
// results are identical to it bit for bit.
constexpr int kPanelRows = 6;  // fewer rows: the panel's fill is not paid back (measured, 2-5 rows)
constexpr int kPanelR = 3, kPanelO = 3;
constexpr int64_t kPanelBytes = 24 << 10;
constexpr int64_t kPanelDepth = 768;  // weights of a row per part: `w_down`'s 1536 in two (1.75x -> 2.3x)
constexpr bool kPanelBlockMajor = false;  // the panel holds each output's row of weights in one run

// Groups [j0, j1) of outputs [0, n) of the block rows at `w` as n rows of 32 * (j1 - j0) f32 weights.
template <int32_t Q>
inline void PanelFill(const uint8_t* w, int64_t row_bytes, int64_t j0, int64_t j1, int64_t n, float* panel) {
  const int64_t width = (j1 - j0) * kBlock;
  for (int64_t o = 0; o < n; ++o)
    for (int64_t j = j0; j < j1; ++j) {
      __m256 q[4];
      GroupQuad<Q>(w + o * row_bytes, j, q);
      float* p = panel + o * width + (j - j0) * kBlock;
      for (int k = 0; k < 4; ++k) _mm256_store_ps(p + 8 * k, q[k]);
    }
}

// Pins a value to a register: without it GCC folds the panel's (or x's) loads into each FMA as a
// memory operand, one load per FMA instead of one per three, and the tile runs at half the speed.
#define MEMLOOP_IN_REGISTER(v) asm("" : "+x"(v))

// Groups [0, nj) of x (row stride `in`) and of the panel (row stride `width`), lanes 8*HALF..+7 of
// each accumulator, continuing the FMA chains held in `acc`.
template <int R, int O, int HALF>
inline void PanelPass(const float* x, int64_t in, const float* p, int64_t width, int64_t nj, V16 (&acc)[R][O]) {
  __m256 a[R][O];
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) a[r][o] = HALF ? acc[r][o].hi : acc[r][o].lo;
  for (int64_t j = 0; j < nj; ++j) {
    const float* xj = x + j * kBlock + 8 * HALF;
    const float* pj = p + j * kBlock + 8 * HALF;
    for (int c = 0; c < 32; c += 16) {  // weights 8h..8h+7 of the block, then 16+8h..16+8h+7
      __m256 wv[O];
      for (int o = 0; o < O; ++o) {
        wv[o] = _mm256_load_ps(pj + o * width + c);
        MEMLOOP_IN_REGISTER(wv[o]);
      }
      for (int r = 0; r < R; ++r) {
        __m256 xv = _mm256_loadu_ps(xj + r * in + c);
        MEMLOOP_IN_REGISTER(xv);
        for (int o = 0; o < O; ++o) a[r][o] = _mm256_fmadd_ps(xv, wv[o], a[r][o]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) (HALF ? acc[r][o].hi : acc[r][o].lo) = a[r][o];
}

// One part of an R x O tile; `y` (not null on the last part) gets the finished sums. Not inlined:
// inlined into its caller, GCC's register allocation spilled accumulators (measured: 20 against
// 34 GMAC/s on one Zen 3 core).
template <int R, int O>
__attribute__((noinline)) void PanelTile(const float* x, int64_t in, const float* p, int64_t width,
                                         int64_t /* block stride: kBlock in this layout */, int64_t nj,
                                         V16* chains, bool fresh, float* y, int64_t out) {
  V16(&acc)[R][O] = *reinterpret_cast<V16(*)[R][O]>(chains);
  if (fresh)
    for (int r = 0; r < R; ++r)
      for (int o = 0; o < O; ++o) acc[r][o] = v16_setzero_ps();
  PanelPass<R, O, 0>(x, in, p, width, nj, acc);
  PanelPass<R, O, 1>(x, in, p, width, nj, acc);
  if (y != nullptr)
    for (int r = 0; r < R; ++r)
      for (int o = 0; o < O; ++o) y[r * out + o] = v16_reduce_add_ps(acc[r][o]);
}


template <int32_t Q, int RT, int OT>
inline void Tile(const float* x, int64_t in, const uint8_t* w, int64_t row_bytes, float* y, int64_t out) {
  if constexpr (RT == 1) {
    TileRow<Q, OT>(x, in, w, row_bytes, y);
    return;
  }
  V16 acc[RT][OT];
  TilePass<Q, RT, OT, 0>(x, in, w, row_bytes, acc);
  TilePass<Q, RT, OT, 1>(x, in, w, row_bytes, acc);
  for (int r = 0; r < RT; ++r)
    for (int o = 0; o < OT; ++o) y[r * out + o] = v16_reduce_add_ps(acc[r][o]);
}
#else
// The 32-weight types whose block opens with its f16 scale (Q4_1: then its f16 offset).
template <int32_t Q>
constexpr bool kScalesAhead = Q == kQ4_0 || Q == kQ4_1 || Q == kQ8_0;

// Blocks whose scales a tile converts at a time (OT outputs x 2 floats each: 4 KB at 8 outputs).
constexpr int64_t kScaleBlocks = 64;

// The scale (and offset) of blocks [j0, j1) of OT output rows as f32, block-major, so the tile's
// block loop broadcasts them straight from memory: a load, where converting and broadcasting each
// one in the loop took three shuffle-port uops of the Q4_1 tile's seven (the port that bounds it).
template <int32_t Q, int OT>
inline void ConvertScales(const uint8_t* w, int64_t row_bytes, int64_t j0, int64_t j1, float (*scales)[OT][2]) {
  for (int64_t j = j0; j < j1; ++j)
    for (int o = 0; o < OT; ++o) {
      uint32_t dm;
      std::memcpy(&dm, w + o * row_bytes + j * BlockBytes(Q), 4);  // Q4_0/Q8_0: the scale and two code bytes
      _mm_storel_pi((__m64*)scales[j - j0][o], _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dm))));
    }
}

template <int32_t Q, int RT, int OT>
inline void Tile(const float* x, int64_t in, const uint8_t* w, int64_t row_bytes, float* y, int64_t out) {
  const int64_t nb = in / kBlock;
  V16 acc[RT][OT];
  for (int r = 0; r < RT; ++r)
    for (int o = 0; o < OT; ++o) acc[r][o] = v16_setzero_ps();
  // Prefetch the next tile's weight rows while this one computes, spread over the blocks: one row's
  // weights are read once from memory, and the hardware prefetchers alone left the core waiting
  // (measured: single-thread batch-1 layers 12 -> 7.4 ms).
  const uint8_t* next = w + OT * row_bytes;
  const int64_t span = OT * row_bytes;
  const int64_t step = (span + nb - 1) / nb;
  alignas(64) float scales[kScalesAhead<Q> ? kScaleBlocks : 1][OT][2];
  for (int64_t j0 = 0; j0 < nb; j0 += kScaleBlocks) {
    const int64_t j1 = std::min(nb, j0 + kScaleBlocks);
    if constexpr (kScalesAhead<Q>) ConvertScales<Q, OT>(w, row_bytes, j0, j1, scales);
    for (int64_t j = j0; j < j1; ++j) {
      for (int64_t a = j * step; a < (j + 1) * step && a < span; a += 64) _mm_prefetch((const char*)(next + a), _MM_HINT_T0);
      V16 lo[OT], hi[OT];
      for (int o = 0; o < OT; ++o) {
        if constexpr (kScalesAhead<Q>) {
          DequantScaled<Q>(w + o * row_bytes + j * BlockBytes(Q), scales[j - j0][o], lo[o], hi[o]);
        } else {
          Group<Q>(w + o * row_bytes, j, lo[o], hi[o]);
        }
      }
      for (int r = 0; r < RT; ++r) {
        const V16 xl = v16_loadu_ps(x + r * in + j * kBlock);
        const V16 xh = v16_loadu_ps(x + r * in + j * kBlock + 16);
        for (int o = 0; o < OT; ++o) {
          acc[r][o] = v16_fmadd_ps(xl, lo[o], acc[r][o]);
          acc[r][o] = v16_fmadd_ps(xh, hi[o], acc[r][o]);
        }
      }
    }
  }
  for (int r = 0; r < RT; ++r)
    for (int o = 0; o < OT; ++o) y[r * out + o] = v16_reduce_add_ps(acc[r][o]);
}

// AVX-512 panel (PanelOutputs, below): the idea of the AVX2 panel above with 32 registers of 16
// lanes, so one pass over the row. A slice of outputs is de-quantised once into an f32 panel and
// every row meets it in tiles of kPanelR rows x kPanelO outputs: kPanelR * kPanelO accumulators,
// kPanelO panel vectors and one x vector held in registers, each loaded vector feeding several FMAs.
// Each accumulator lane sees fma(x[32j+l], w[32j+l]) then fma(x[32j+16+l], w[32j+16+l]) block by
// block, the order of Tile above and of the AVX2 tiles, and the same final reduction, so every
// output is bit-identical to theirs. The tile shape was chosen by a profile on an AMD EPYC (Zen 5)
// core (docs/bench-log.md, 2026-11-28): 2 x 8 (16 accumulators, 8 panel vectors, one x vector) ran
// 1.07x 3 x 6 and 4 x 6, 1.08x 2 x 9, 1.1x 2 x 10, 1.3x 2 x 12 (spills) at 32 and 512 rows.
#ifndef MEMLOOP_PANEL_R  // the build may override the shape (profiling only)
#define MEMLOOP_PANEL_R 2
#define MEMLOOP_PANEL_O 8
#endif
#ifndef MEMLOOP_PANEL_ROWS
#define MEMLOOP_PANEL_ROWS 9
#endif
#ifndef MEMLOOP_PANEL_KB
#define MEMLOOP_PANEL_KB 24
#endif
// Fewer rows keep the 8 x 2 tile above, which holds its 2-8 rows of x in L1: with x 64-byte aligned, as
// XLA hands it over, the panel ran 0.90-0.96x of it at 6 rows, 0.94-1.06x at 8, 1.1-1.3x at 10-16,
// 1.6-1.7x at 32 and 250 (one Zen 5 core, Q4_1 576/1536 inputs and the Q8_0 head).
constexpr int kPanelRows = MEMLOOP_PANEL_ROWS;
constexpr int kPanelR = MEMLOOP_PANEL_R, kPanelO = MEMLOOP_PANEL_O;
constexpr int64_t kPanelBytes = int64_t{MEMLOOP_PANEL_KB} << 10;
constexpr int64_t kPanelDepth = 768;
// The panel block by block: group j of outputs 0..n-1 side by side, so a tile reads its outputs'
// vectors at fixed offsets from one pointer (with one pointer per output row, as on AVX2, GCC ran
// out of general registers and moved addresses through vector registers inside the loop).
constexpr bool kPanelBlockMajor = true;

template <int32_t Q>
__attribute__((noinline)) void PanelFill(const uint8_t* w, int64_t row_bytes, int64_t j0, int64_t j1, int64_t n, float* panel) {
  for (int64_t o = 0; o < n; ++o)
    for (int64_t j = j0; j < j1; ++j) {
      V16 lo, hi;
      Group<Q>(w + o * row_bytes, j, lo, hi);
      float* p = panel + ((j - j0) * n + o) * kBlock;
      _mm512_store_ps(p, lo);
      _mm512_store_ps(p + 16, hi);
    }
}

// "v": any of the 32 vector registers ("x" would allow only the first 16).
#define MEMLOOP_IN_REGISTER(v) asm("" : "+v"(v))

// v16_reduce_add_ps (GCC's _mm512_reduce_add_ps) of 16 vectors at once, bit for bit: that tree adds
// s_i = a[i] + a[8+i], then t_i = s_i + s_(4+i), u_i = t_i + t_(2+i) and returns u_0 + u_1. The same
// pairs are added here across 16 vectors (a pair's order is free: IEEE addition commutes), each step
// halving the vectors, 15 adds and 30 shuffles where 16 reductions take about 130 instructions. The
// sum of a[m] lands in t[(m % 4) * 4 + m / 4].
inline void Reduce16(const V16* a, float* t) {
  __m512 x[8], y[4], z[2];
  for (int k = 0; k < 8; ++k)  // [a.lo256, b.lo256] + [a.hi256, b.hi256]: s of a[2k] | s of a[2k+1]
    x[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0x44),
                         _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0xEE));
  for (int k = 0; k < 4; ++k)  // 128-bit lane j: t of a[4k + j]
    y[k] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * k], x[2 * k + 1], 0x88),
                         _mm512_shuffle_f32x4(x[2 * k], x[2 * k + 1], 0xDD));
  for (int k = 0; k < 2; ++k) {  // lane j: u_0, u_1 of a[8k + j], then of a[8k + 4 + j]
    const __m512d p = _mm512_castps_pd(y[2 * k]), q = _mm512_castps_pd(y[2 * k + 1]);
    z[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(p, q)), _mm512_castpd_ps(_mm512_unpackhi_pd(p, q)));
  }
  // lane j: the sums of a[j], a[4 + j], a[8 + j], a[12 + j]
  _mm512_store_ps(t, _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(z[0], z[1], _MM_SHUFFLE(3, 1, 3, 1))));
}

template <int R, int O>
__attribute__((noinline)) void PanelTile(const float* x, int64_t in, const float* p, int64_t /* output stride: kBlock */,
                                         int64_t jstride, int64_t nj, V16* chains, bool fresh, float* y,
                                         int64_t out) {
  V16 a[R][O];
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) a[r][o] = fresh ? v16_setzero_ps() : chains[r * O + o];
  for (int64_t j = 0; j < nj; ++j) {
    const float* xj = x + j * kBlock;
    const float* pj = p + j * jstride;
    for (int c = 0; c < 32; c += 16) {  // weights 0-15 of the block, then 16-31
      V16 wv[O];
      for (int o = 0; o < O; ++o) {
        wv[o] = _mm512_load_ps(pj + o * kBlock + c);
        MEMLOOP_IN_REGISTER(wv[o]);
      }
      for (int r = 0; r < R; ++r) {
        V16 xv = _mm512_loadu_ps(xj + r * in + c);
        MEMLOOP_IN_REGISTER(xv);
        for (int o = 0; o < O; ++o) a[r][o] = _mm512_fmadd_ps(xv, wv[o], a[r][o]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) chains[r * O + o] = a[r][o];
  if (y == nullptr) return;
  // The finished sums: 16 chains at a time through one transposed tree, the rest one by one.
  constexpr int N = R * O;
  int i = 0;
  for (; i + 16 <= N; i += 16) {
    alignas(64) float t[16];
    Reduce16(chains + i, t);
    for (int m = 0; m < 16; ++m) y[(i + m) / O * out + (i + m) % O] = t[(m % 4) * 4 + m / 4];
  }
  for (; i < N; ++i) y[i / O * out + i % O] = v16_reduce_add_ps(chains[i]);
}
#endif

// The panel (both instruction sets): the outputs [o0, o1) of every row, in slices of outputs whose
// de-quantised panel (about kPanelBytes) stays in L1, wide inputs in parts of at most kPanelDepth
// weights, and many rows (a direct call; the engine sends calls above its row limit, prefill chunks,
// to XLA's GEMM: engine/model/blocks.py) in parts of kPanelRowPart rows,
// so a part's rows of x stay in L2 while every slice of the call's outputs meets them (512 rows of x
// at 576 inputs are 1.2 MB; read again for each slice from L3 they halved the tile's rate). The
// panel is filled again for each part of rows. None of this changes any (row, output) pair's FMAs.
#ifndef MEMLOOP_PANEL_ROW_PART
#define MEMLOOP_PANEL_ROW_PART 120
#endif
constexpr int64_t kPanelRowPart = MEMLOOP_PANEL_ROW_PART;  // a multiple of 2 and 3 (AVX-512's and AVX2's row tiles)

// Tiles of R rows (R <= kPanelR) against the remaining n outputs of the panel: full kPanelO tiles,
// then one tile of the n % kPanelO left; each tile's chains at chains[R * kPanelO * tile].
template <int R, int O>
inline void PanelRest(const float* x, int64_t in, const float* panel, int64_t ostride, int64_t jstride, int64_t nj,
                      int64_t rest, V16* chains, bool fresh, float* y, int64_t out) {
  if constexpr (O >= 1) {
    if (rest == O) PanelTile<R, O>(x, in, panel, ostride, jstride, nj, chains, fresh, y, out);
    else PanelRest<R, O - 1>(x, in, panel, ostride, jstride, nj, rest, chains, fresh, y, out);
  }
}

// The panel's n outputs: output o's group j at panel + o * ostride + j * jstride.
template <int R>
void PanelRows(const float* x, int64_t in, const float* panel, int64_t width, int64_t nj, int64_t n, V16* chains,
               bool fresh, float* y, int64_t out) {
  const int64_t ostride = kPanelBlockMajor ? kBlock : width, jstride = kPanelBlockMajor ? n * kBlock : kBlock;
  int64_t o = 0;
  for (; o + kPanelO <= n; o += kPanelO, chains += kPanelR * kPanelO)
    PanelTile<R, kPanelO>(x, in, panel + o * ostride, ostride, jstride, nj, chains, fresh, y ? y + o : y, out);
  if (n > o)
    PanelRest<R, kPanelO - 1>(x, in, panel + o * ostride, ostride, jstride, nj, n - o, chains, fresh, y ? y + o : y,
                              out);
}

template <int R>
inline void PanelRowsOf(int64_t count, const float* x, int64_t in, const float* panel, int64_t width, int64_t nj,
                        int64_t n, V16* chains, bool fresh, float* y, int64_t out) {
  if constexpr (R >= 1) {
    if (count == R) PanelRows<R>(x, in, panel, width, nj, n, chains, fresh, y, out);
    else PanelRowsOf<R - 1>(count, x, in, panel, width, nj, n, chains, fresh, y, out);
  }
}

// Fetches groups [j0, j1) of weight rows [o0, o1) into L1 ahead of their fill: without it the fill
// stalled on each output row's first cache lines (a third of the tiles' time at 32 rows,
// docs/bench-log.md, 2026-11-28).
template <int32_t Q>
inline void PrefetchFill(const uint8_t* w, int64_t row_bytes, int64_t o0, int64_t o1, int64_t j0, int64_t j1) {
  constexpr int64_t g = BlockWeights(Q) / kBlock;  // groups a block
  const int64_t from = j0 / g * BlockBytes(Q) & ~int64_t{63}, to = ((j1 - 1) / g + 1) * BlockBytes(Q);
  for (int64_t o = o0; o < o1; ++o) {
    const char* row = reinterpret_cast<const char*>(w + o * row_bytes);
    for (int64_t b = from; b < to + 63; b += 64) _mm_prefetch(row + b, _MM_HINT_T0);  // a row need not start a line
  }
}

template <int32_t Q>
void PanelOutputs(const float* x, int64_t rows, int64_t in, const uint8_t* w, float* y, int64_t out, int64_t o0,
                  int64_t o1) {
  const int64_t row_bytes = RowBytes(Q, in), blocks = in / kBlock;
  const int64_t parts = (in + kPanelDepth - 1) / kPanelDepth;
  const int64_t depth = (blocks + parts - 1) / parts;  // groups a part
  const int64_t slice = std::max<int64_t>(kPanelO, kPanelBytes / (4 * kBlock * depth) / kPanelO * kPanelO);
  const int64_t part_rows = std::min(rows, kPanelRowPart);
  const int64_t per_rows = (slice + kPanelO - 1) / kPanelO * kPanelR * kPanelO;  // chains of a row tile
  const int64_t chain_count = (part_rows + kPanelR - 1) / kPanelR * per_rows;
  struct alignas(64) Sixteen {
    float f[16];
  };
  // per thread: XLA's pool and the crew run chunks at once
  static thread_local std::vector<Sixteen> panel_buffer;
  static thread_local std::vector<Sixteen> chain_buffer;  // one V16 each (a vector of V16 would drop its alignment)
  static_assert(sizeof(Sixteen) == sizeof(V16), "a chain is one V16");
  if (static_cast<int64_t>(panel_buffer.size()) < slice * depth * 2) panel_buffer.resize(slice * depth * 2);
  if (static_cast<int64_t>(chain_buffer.size()) < chain_count) chain_buffer.resize(chain_count);
  float* panel = panel_buffer.data()->f;
  V16* const chain_base = reinterpret_cast<V16*>(chain_buffer.data());
  PrefetchFill<Q>(w, row_bytes, o0, std::min(o1, o0 + slice), 0, std::min(blocks, depth));  // the first fill's, all at once
  for (int64_t r0 = 0; r0 < rows; r0 += kPanelRowPart) {
    const int64_t r1 = std::min(rows, r0 + kPanelRowPart);
    for (int64_t s0 = o0; s0 < o1; s0 += slice) {
      const int64_t n = std::min(o1, s0 + slice) - s0;
      for (int64_t j0 = 0; j0 < blocks; j0 += depth) {
        const int64_t j1 = std::min(blocks, j0 + depth), width = (j1 - j0) * kBlock;
        PanelFill<Q>(w + s0 * row_bytes, row_bytes, j0, j1, n, panel);
        const bool last = j1 == blocks;
        // The next fill's weights (this slice's next part of the row, or the next slice's), fetched
        // while the tiles below run.
        if (last) PrefetchFill<Q>(w, row_bytes, s0 + slice, std::min(o1, s0 + 2 * slice), 0, std::min(blocks, depth));
        else PrefetchFill<Q>(w, row_bytes, s0, s0 + n, j1, std::min(blocks, j1 + depth));
        for (int64_t r = r0; r < r1; r += kPanelR) {
          const float* xr = x + r * in + j0 * kBlock;
          float* yr = last ? y + r * out + s0 : nullptr;
          V16* chains = chain_base + (r - r0) / kPanelR * per_rows;
          PanelRowsOf<kPanelR>(std::min<int64_t>(kPanelR, r1 - r), xr, in, panel, width, j1 - j0, n, chains, j0 == 0, yr,
                               out);
        }
      }
    }
  }
}


// Tiles: one row reads each weight once and is bound by memory, so it takes 8 outputs at a time for
// independent FMA chains; 2-8 rows share each de-quantised block across 8 rows x 2 outputs
// (16 accumulators + 4 weight vectors fit the 32 vector registers without spilling), nine or more
// run the 2 x 8 panel tiles (PanelOutputs, kPanelRows).
// AVX2 (16 registers of 8 lanes): one row takes 2 outputs in one pass (TileRow: 4 accumulators);
// two to five rows run the two-pass tile on 8 rows x 1 output (8 accumulators a pass, each decoded
// half shared by 8 rows), six or more the panel tiles (PanelOutputs). Measured on a Zen 3 core
// against 1 row x 8 and 4 rows x 2 two-pass tiles, same results: one row 16-20% less time, 32 rows
// 5-15% more MACs/s (bench notes in docs/engine-serving.md).
constexpr int kRowTile = 8;
constexpr int kPairTile = kV16Native ? 2 : 1;
constexpr int kSingleTile = kV16Native ? 8 : 2;

template <int32_t Q, int OT>
void RowsTile(const float* x, int64_t rows, int64_t in, const uint8_t* w, int64_t row_bytes, float* y,
              int64_t out) {
  int64_t r = 0;
  for (; r + kRowTile <= rows; r += kRowTile) Tile<Q, kRowTile, OT>(x + r * in, in, w, row_bytes, y + r * out, out);
  const float* xr = x + r * in;
  float* yr = y + r * out;
  switch (rows - r) {  // the same per-pair sequence as the full tile, on the remaining rows
    case 7: Tile<Q, 7, OT>(xr, in, w, row_bytes, yr, out); break;
    case 6: Tile<Q, 6, OT>(xr, in, w, row_bytes, yr, out); break;
    case 5: Tile<Q, 5, OT>(xr, in, w, row_bytes, yr, out); break;
    case 4: Tile<Q, 4, OT>(xr, in, w, row_bytes, yr, out); break;
    case 3: Tile<Q, 3, OT>(xr, in, w, row_bytes, yr, out); break;
    case 2: Tile<Q, 2, OT>(xr, in, w, row_bytes, yr, out); break;
    case 1: Tile<Q, 1, OT>(xr, in, w, row_bytes, yr, out); break;
    default: break;
  }
}

template <int32_t Q, int OT>
void OutputsTiled(const float* x, int64_t rows, int64_t in, const uint8_t* w, float* y, int64_t out, int64_t o0,
                  int64_t o1) {
  const int64_t row_bytes = RowBytes(Q, in);
  if (!kV16Native && rows > 1) {
    // Row tiles outermost: a tile's rows of x (8 x 4*in bytes, several times a row of weights) stay
    // in L1 while they meet every output of a slice of about 16 KB of weights, which the next row
    // tile reads again from L1/L2. Output tiles outermost re-read all of x per output from L2, which
    // bound the AVX2 tile (it reads x twice, once per pass).
    const int64_t slice = std::max<int64_t>(OT, ((int64_t{1} << 14) / row_bytes) / OT * OT);
    for (int64_t s0 = o0; s0 < o1; s0 += slice) {
      const int64_t s1 = std::min(o1, s0 + slice);
      for (int64_t r = 0; r < rows; r += kRowTile) {
        const int64_t rr = std::min<int64_t>(kRowTile, rows - r);
        int64_t o = s0;
        for (; o + OT <= s1; o += OT) RowsTile<Q, OT>(x + r * in, rr, in, w + o * row_bytes, row_bytes, y + r * out + o, out);
        for (; o < s1; ++o) RowsTile<Q, 1>(x + r * in, rr, in, w + o * row_bytes, row_bytes, y + r * out + o, out);
      }
    }
    return;
  }
  int64_t o = o0;
  for (; o + OT <= o1; o += OT) RowsTile<Q, OT>(x, rows, in, w + o * row_bytes, row_bytes, y + o, out);
  for (; o < o1; ++o) RowsTile<Q, 1>(x, rows, in, w + o * row_bytes, row_bytes, y + o, out);
}

// Outputs [o0, o1) for every row.
template <int32_t Q>
void Outputs(const float* x, int64_t rows, int64_t in, const uint8_t* w, float* y, int64_t out, int64_t o0,
             int64_t o1) {
  if (rows == 1) {
    OutputsTiled<Q, kSingleTile>(x, rows, in, w, y, out, o0, o1);
  } else if (rows >= kPanelRows) {
    PanelOutputs<Q>(x, rows, in, w, y, out, o0, o1);
  } else {
    OutputsTiled<Q, kPairTile>(x, rows, in, w, y, out, o0, o1);
  }
}

using OutputsFn = void (*)(const float*, int64_t, int64_t, const uint8_t*, float*, int64_t, int64_t, int64_t);

OutputsFn Select(int32_t qtype) {
  switch (qtype) {
    case kQ4_0: return Outputs<kQ4_0>;
    case kQ4_1: return Outputs<kQ4_1>;
    case kQ8_0: return Outputs<kQ8_0>;
    case kQ5_0: return Outputs<kQ5_0>;
    case kQ4_K: return Outputs<kQ4_K>;
    case kQ5_K: return Outputs<kQ5_K>;
    case kQ6_K: return Outputs<kQ6_K>;
    default: return nullptr;
  }
}

// AMX (Intel Sapphire Rapids and later): many rows through the tile unit. TDPBF16PS multiplies a
// 16 x 32 bf16 tile by a 32 x 16 one into 16 x 16 f32 sums, 8192 MACs in one instruction (about
// 16 cycles), where the AVX-512 panel above does 32 MACs a cycle at best.
// Accuracy: bf16 keeps 8 bits of a value's 24, far outside the engine's 1e-4 against transformers, so
// x and the weights are each split into three bf16 pieces (head, middle, low: together the f32 value
// exactly, bar values near f32's range limits), and the six products whose pieces' orders add up to
// at most 2 are summed (head.head; head.middle both ways; head.low both ways and middle.middle); the
// terms left out are below 2^-24 of a product. The sums are f32 in the tile, in another order than
// the AVX-512 path's, so the results agree with it to about f32's rounding, not bit for bit
// (measured on SmolLM2's layer matrices: 1.7e-7 of sum |x||w| against a float64 product, the
// AVX-512 path 6e-8; two pieces each and three products: 1.3e-6, and the logits moved 9e-4).
// Layout: the weights are the left-hand tile (16 outputs x 32 weights of one group, a run of 64
// bytes per output, so a group de-quantised by `Group` is stored as it comes), the rows of x the
// right-hand one in the tile unit's pair-interleaved form (row 16 kk of pairs (x[r][2kk], x[r][2kk+1])
// for the tile's 16 rows), converted once per call; each 16 x 16 result is [outputs][rows] and is
// transposed into y once per output tile.
// Linux gives a process the tile state only after arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA):
// `AmxReady` asks once and the path is used only where the CPU has the units and the kernel agreed.
#if defined(__AVX512F__) && defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__)
#define MEMLOOP_AMX 1
#endif

#ifdef MEMLOOP_AMX
constexpr int kAmxTile = 16;       // rows of x, and outputs, a tile
constexpr int kAmxBlockRows = 32;  // two row tiles and two output tiles: four accumulators
// Rows a part: about 320 KB of converted x (three pieces, 6 bytes a value: 64 rows at 576 inputs, 32 at
// 1536) that meets every packed panel of the chunk before the next part. Measured on one core at 512 rows
// since the panels are packed once a call: 320 KB 1.09-1.18x 1.25 MB, 1.0-1.04x 640 KB and 256 KB.
constexpr int64_t kAmxPartBytes = int64_t{5} << 16;
// Packed panels a chunk at most (6 bytes a weight): they stay in L2 while every part of x passes them.
constexpr int64_t kAmxChunkBytes = int64_t{5} << 18;

struct alignas(64) Line {  // a tile's row; vectors of them are 64-byte aligned (a vector of __m512i would not be)
  uint8_t b[64];
};

bool AmxReady() {
  static const bool ready = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!(d & (1u << 24)) || !(d & (1u << 22))) return false;  // AMX-TILE, AMX-BF16
    constexpr long kReqXcompPerm = 0x1023, kXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtiledata) == 0;
  }();
  return ready;
}

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Every tile 16 rows of 64 bytes. Loaded on each chunk: the thread may have run other tile code.
inline void AmxConfigure() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) c.rows[t] = 16, c.colsb[t] = 64;
  _tile_loadconfig(&c);
}

// The bf16 nearest 32 f32 values (a: 0-15, b: 16-31, in order), and in a and b what it leaves (exact).
inline __m512i Bf16Piece(V16& a, V16& b) {
  const __m512i p = (__m512i)_mm512_cvtne2ps_pbh(b, a);
  a = _mm512_sub_ps(a, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(p)), 16)));
  b = _mm512_sub_ps(b, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(p, 1)), 16)));
  return p;
}

// x [rows, in] f32 -> for each block of 32 rows (zero past `rows`) and group j of 32 weights, six
// 1 KB tiles: the heads of rows 0-15 and 16-31, then their middles, then their low pieces; in each,
// 16 lines kk of 16 pairs (x[r][2kk], x[r][2kk+1]).
constexpr int kXPieces = 3, kWPieces = 3;
constexpr int64_t kXGroupBytes = kXPieces * 2048, kWGroupBytes = kWPieces * 2048;
inline int64_t AmxXBytes(int64_t rows, int64_t in) {
  return (rows + kAmxBlockRows - 1) / kAmxBlockRows * (in / kBlock) * kXGroupBytes;
}

// Rows become columns: r[i] holds 16 dwords of row i; afterwards r[k] holds dword k of rows 0-15.
inline void Transpose16(__m512i (&r)[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // u[4i + c], 128-bit lane L: dword 4L + c of rows 4i..4i+3
    u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512i a0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x88), a1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xDD);
    const __m512i b0 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x88), b1 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xDD);
    r[c] = _mm512_shuffle_i32x4(a0, b0, 0x88);
    r[4 + c] = _mm512_shuffle_i32x4(a1, b1, 0x88);
    r[8 + c] = _mm512_shuffle_i32x4(a0, b0, 0xDD);
    r[12 + c] = _mm512_shuffle_i32x4(a1, b1, 0xDD);
  }
}

void AmxConvertRows(const float* x, int64_t rows, int64_t in, int64_t block, uint32_t* out) {
  const int64_t nj = in / kBlock;
  char* base = reinterpret_cast<char*>(out) + block * nj * kXGroupBytes;
  for (int64_t j = 0; j < nj; ++j) {
    for (int half = 0; half < 2; ++half) {
      __m512i piece[kXPieces][16];
      for (int r = 0; r < kAmxTile; ++r) {
        const int64_t row = block * kAmxBlockRows + half * kAmxTile + r;
        V16 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
        if (row < rows) {
          a = _mm512_loadu_ps(x + row * in + j * kBlock);
          b = _mm512_loadu_ps(x + row * in + j * kBlock + 16);
        }
        for (int p = 0; p < kXPieces; ++p) piece[p][r] = Bf16Piece(a, b);
      }
      char* g = base + j * kXGroupBytes + half * 1024;
      for (int p = 0; p < kXPieces; ++p) {
        Transpose16(piece[p]);  // line kk: the pair (2kk, 2kk + 1) of each of the 16 rows
        for (int kk = 0; kk < 16; ++kk) _mm512_store_si512(g + p * 2048 + kk * 64, piece[p][kk]);
      }
    }
  }
}

// Panel p of a chunk: outputs s .. s + 31 (zero past `n`) de-quantised, split into three bf16 pieces and laid
// out as tiles (group j: heads of outputs 0-15, 16-31, then middles, then low pieces). Returns whether any
// low piece is non-zero: weights that two bf16 pieces hold exactly (4- and 5-bit codes times an f16 scale,
// every SmolLM2 Q4_1 weight) leave them all zero, and their products are skipped, which changes no sum.
template <int32_t Q>
bool AmxPackPanel(const uint8_t* w, int64_t row_bytes, int64_t nj, int64_t s, int64_t n, char* panel) {
  __m512i low_pieces = _mm512_setzero_si512();
  // group by group, so the panel is written in order (output by output, each output's 64-byte lines
  // lie 4 KB apart, all in one L1 set)
  for (int64_t j = 0; j < nj; ++j) {
    for (int64_t o = 0; o < kAmxBlockRows; ++o) {
      const int half = static_cast<int>(o / kAmxTile), oo = static_cast<int>(o % kAmxTile);
      V16 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
      if (o < n) Group<Q>(w + (s + o) * row_bytes, j, lo, hi);
      char* g = panel + j * kWGroupBytes + half * 1024 + oo * 64;
      for (int p = 0; p < kWPieces; ++p) {
        const __m512i piece = Bf16Piece(lo, hi);
        _mm512_store_si512(g + p * 2048, piece);
        if (p == kWPieces - 1) low_pieces = _mm512_or_si512(low_pieces, piece);
      }
    }
  }
  return _mm512_test_epi32_mask(low_pieces, low_pieces) != 0;
}

// One 32-row block of x against one packed panel: 2 x 2 sum tiles, each loaded operand tile used twice.
// (Loading each tile a product or two ahead of its first reader measured no faster: 0.97-1.02x.)
inline void AmxBlock(const char* xb, const char* pg0, int64_t nj, bool has_low, float (&c)[4][kAmxTile * kAmxTile]) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  // tiles: 0-3 sums (outputs 0-15 | 16-31) x (rows 0-15 | 16-31), 4-5 weights, 6-7 rows of x
#define MEMLOOP_AMX_FOUR() \
  _tile_dpbf16ps(0, 4, 6);  \
  _tile_dpbf16ps(1, 4, 7);  \
  _tile_dpbf16ps(2, 5, 6);  \
  _tile_dpbf16ps(3, 5, 7)
  for (int64_t j = 0; j < nj; ++j) {
    const char* pg = pg0 + j * kWGroupBytes;
    const char* xg = xb + j * kXGroupBytes;
    _tile_loadd(4, pg, 64);  // weight heads, by x's low pieces, middles and heads
    _tile_loadd(5, pg + 1024, 64);
    _tile_loadd(6, xg + 4096, 64);
    _tile_loadd(7, xg + 5120, 64);
    MEMLOOP_AMX_FOUR();
    _tile_loadd(6, xg + 2048, 64);
    _tile_loadd(7, xg + 3072, 64);
    MEMLOOP_AMX_FOUR();
    _tile_loadd(6, xg, 64);
    _tile_loadd(7, xg + 1024, 64);
    MEMLOOP_AMX_FOUR();
    _tile_loadd(4, pg + 2048, 64);  // weight middles, by x's heads and middles
    _tile_loadd(5, pg + 3072, 64);
    MEMLOOP_AMX_FOUR();
    _tile_loadd(6, xg + 2048, 64);
    _tile_loadd(7, xg + 3072, 64);
    MEMLOOP_AMX_FOUR();
    if (has_low) {
      _tile_loadd(4, pg + 4096, 64);  // weight low pieces, by x's heads
      _tile_loadd(5, pg + 5120, 64);
      _tile_loadd(6, xg, 64);
      _tile_loadd(7, xg + 1024, 64);
      MEMLOOP_AMX_FOUR();
    }
  }
#undef MEMLOOP_AMX_FOUR
  _tile_stored(0, c[0], 64);
  _tile_stored(1, c[1], 64);
  _tile_stored(2, c[2], 64);
  _tile_stored(3, c[3], 64);
}

// Outputs [o0, o1) of every row; `xt` from AmxConvertRows. Every 32-output panel of the chunk is packed
// once (AmxPackPanel) into this thread's buffer, then met by each part of the rows in turn: a part's
// converted x and the chunk's panels stay in L2 together (MultiplyAmx bounds the chunk's panels).
template <int32_t Q>
void AmxOutputs(const uint32_t* xt, int64_t rows, int64_t in, const uint8_t* w, float* y, int64_t out, int64_t o0,
                int64_t o1) {
  const int64_t row_bytes = RowBytes(Q, in), nj = in / kBlock;
  const int64_t blocks = (rows + kAmxBlockRows - 1) / kAmxBlockRows;
  const int64_t panels = (o1 - o0 + kAmxBlockRows - 1) / kAmxBlockRows;
  static thread_local std::vector<Line> panel_buffer;
  static thread_local std::vector<uint8_t> low_buffer;
  if (static_cast<int64_t>(panel_buffer.size()) < panels * nj * kWGroupBytes / 64)
    panel_buffer.resize(panels * nj * kWGroupBytes / 64);
  if (static_cast<int64_t>(low_buffer.size()) < panels) low_buffer.resize(panels);
  char* panel = reinterpret_cast<char*>(panel_buffer.data());
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t s = o0 + p * kAmxBlockRows;
    low_buffer[p] = AmxPackPanel<Q>(w, row_bytes, nj, s, std::min<int64_t>(kAmxBlockRows, o1 - s),
                                    panel + p * nj * kWGroupBytes);
  }
  AmxConfigure();
  alignas(64) float c[4][kAmxTile * kAmxTile];
  const int64_t part_blocks = std::max<int64_t>(1, kAmxPartBytes / (in * 2 * kXPieces * kAmxBlockRows));
  for (int64_t b0 = 0; b0 < blocks; b0 += part_blocks) {
    const int64_t b1 = std::min(blocks, b0 + part_blocks);
    for (int64_t p = 0; p < panels; ++p) {
      const int64_t s = o0 + p * kAmxBlockRows, n = std::min<int64_t>(kAmxBlockRows, o1 - s);
      const char* pg = panel + p * nj * kWGroupBytes;
      for (int64_t bl = b0; bl < b1; ++bl) {
        AmxBlock(reinterpret_cast<const char*>(xt) + bl * nj * kXGroupBytes, pg, nj, low_buffer[p] != 0, c);
        for (int t = 0; t < 4; ++t) {  // c[t][output][row], transposed in registers (scalar moves cost a quarter)
          const int64_t r0 = bl * kAmxBlockRows + (t & 1) * kAmxTile, oo0 = (t >> 1) * kAmxTile;
          const int64_t nr = std::min<int64_t>(kAmxTile, rows - r0), no = std::min<int64_t>(kAmxTile, n - oo0);
          if (nr <= 0 || no <= 0) continue;
          __m512i v[16];
          for (int o = 0; o < 16; ++o) v[o] = _mm512_load_si512(c[t] + o * kAmxTile);
          Transpose16(v);  // v[r]: row r's 16 outputs
          const __mmask16 keep = static_cast<__mmask16>((1u << no) - 1);
          for (int64_t r = 0; r < nr; ++r)
            _mm512_mask_storeu_ps(y + (r0 + r) * out + s + oo0, keep, _mm512_castsi512_ps(v[r]));
        }
      }
    }
  }
  _tile_release();
}

using AmxOutputsFn = void (*)(const uint32_t*, int64_t, int64_t, const uint8_t*, float*, int64_t, int64_t, int64_t);

AmxOutputsFn AmxSelect(int32_t qtype) {
  switch (qtype) {
    case kQ4_0: return AmxOutputs<kQ4_0>;
    case kQ4_1: return AmxOutputs<kQ4_1>;
    case kQ8_0: return AmxOutputs<kQ8_0>;
    case kQ5_0: return AmxOutputs<kQ5_0>;
    case kQ4_K: return AmxOutputs<kQ4_K>;
    case kQ5_K: return AmxOutputs<kQ5_K>;
    case kQ6_K: return AmxOutputs<kQ6_K>;
    default: return nullptr;
  }
}
#else
bool AmxReady() { return false; }
#endif

// One matrix of a call: y [rows, out] = x . w^T.
struct Matrix {
  const uint8_t* w;
  float* y;
  int64_t out;
};

// A chunk of work: outputs [o0, o1) of matrix m.
struct Chunk {
  int32_t m;
  int64_t o0, o1;
};

constexpr int kMaxMatrices = 8;

#ifdef MEMLOOP_AMX
// The tile path of `Multiply`: x converted once (blocks of 32 rows shared out), then chunks of whole
// 32-output panels, at least one per thread.
ffi::Error MultiplyAmx(ffi::ThreadPool& pool, int32_t qtype, const float* xp, int64_t rows, int64_t in,
                       const Matrix* mats, int nmats) {
  AmxOutputsFn fn = AmxSelect(qtype);
  const int64_t blocks = (rows + kAmxBlockRows - 1) / kAmxBlockRows;
  static thread_local std::vector<Line> x_buffer;
  if (static_cast<int64_t>(x_buffer.size()) * 64 < AmxXBytes(rows, in)) x_buffer.resize(AmxXBytes(rows, in) / 64);
  uint32_t* xt = reinterpret_cast<uint32_t*>(x_buffer.data());
  memloop_kernels::Parallel(pool, blocks, memloop_kernels::Helpers::kAny,
                            [=](int64_t b) { AmxConvertRows(xp, rows, in, b, xt); });
  const int64_t threads = std::max<int64_t>(1, pool.num_threads());
  int64_t total = 0;
  for (int i = 0; i < nmats; ++i) total += mats[i].out;
  // Chunks of whole panels as large as L2 holds beside a part of x (each part of x is read once per chunk:
  // on one core at 512 rows, 1536 inputs, 128 outputs a chunk ran 1.45x 32), the same number for every thread.
  const int64_t packed = total * (in / kBlock) * kWGroupBytes / kAmxBlockRows, per_bytes = threads * kAmxChunkBytes;
  const int64_t per_thread = (packed + per_bytes - 1) / per_bytes;
  const int64_t nchunks = threads * std::max<int64_t>(1, per_thread);
  const int64_t per_chunk = nchunks * kAmxBlockRows;
  const int64_t chunk = std::max<int64_t>(1, (total + per_chunk - 1) / per_chunk) * kAmxBlockRows;
  std::vector<Chunk> chunks;
  for (int i = 0; i < nmats; ++i)
    for (int64_t o = 0; o < mats[i].out; o += chunk) chunks.push_back({i, o, std::min(mats[i].out, o + chunk)});
  const Chunk* ck = chunks.data();
  const uint32_t* xc = xt;
  memloop_kernels::Parallel(pool, static_cast<int64_t>(chunks.size()), memloop_kernels::Helpers::kAny, [=](int64_t c) {
    const Chunk& k = ck[c];
    fn(xc, rows, in, mats[k.m].w, mats[k.m].y, mats[k.m].out, k.o0, k.o1);
  });
  return ffi::Error::Success();
}
#endif

// Multiplies x by every matrix in one call: the matrices of a layer that share their input (q, k
// and v; gate and up) cost one call and one hand-off to the helper threads instead of one each, and their
// chunks balance over the threads together. Each (row, output) sum is computed exactly as a call
// on its matrix alone would, so results do not depend on the grouping.
ffi::Error Multiply(ffi::ThreadPool& pool, int32_t qtype, bool amx, OutputsFn fn, const float* xp, int64_t rows,
                    int64_t in, const Matrix* mats, int nmats) {
#ifdef MEMLOOP_AMX
  if (amx && AmxReady()) return MultiplyAmx(pool, qtype, xp, rows, in, mats, nmats);
#endif

  // Chunks of about 64k weights x rows of work, a multiple of the output tile, at least one per thread.
  // Several rows take at least 32 outputs (AVX-512: 8) a chunk: each chunk reads its rows of x again,
  // which on AVX2 outweigh a few outputs' weights many times (OutputsTiled).
  // AVX-512 panel calls take whole tiles of kPanelO outputs, at least 4 a chunk (the fill of a panel
  // slice and its remainder tiles are paid per chunk).
  const bool panel = kV16Native && rows >= kPanelRows;
  const int64_t tile = panel ? kPanelO : kSingleTile;
  const int64_t least = rows > 1 && !kV16Native ? 32 : (panel ? 4 * kPanelO : tile);
  const int64_t per_out = std::max<int64_t>(1, in * rows);
  int64_t total = 0;
  for (int i = 0; i < nmats; ++i) total += mats[i].out;
  int64_t chunk = std::max<int64_t>(least, ((int64_t{1} << 16) / per_out) / tile * tile);
  const int64_t threads = std::max<int64_t>(1, pool.num_threads());
  chunk = std::min(chunk, std::max<int64_t>(tile, (total / threads) / tile * tile));
  std::vector<Chunk> chunks;
  for (int i = 0; i < nmats; ++i)
    for (int64_t o = 0; o < mats[i].out; o += chunk) chunks.push_back({i, o, std::min(mats[i].out, o + chunk)});
  const Chunk* ck = chunks.data();
  memloop_kernels::Parallel(pool, static_cast<int64_t>(chunks.size()), memloop_kernels::Helpers::kAny, [=](int64_t c) {
    const Chunk& k = ck[c];
    fn(xp, rows, in, mats[k.m].w, mats[k.m].y, mats[k.m].out, k.o0, k.o1);
  });
  return ffi::Error::Success();
}

// amx: take the AMX tile path where it can run (AmxReady), else the vector FMAs.
ffi::Error QMatmul(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::U8> w,
                   ffi::ResultBuffer<ffi::F32> y, int32_t qtype, int32_t amx) {
  OutputsFn fn = Select(qtype);
  if (fn == nullptr) return ffi::Error::InvalidArgument("memloop_qmatmul: unknown block type");
  auto xd = x.dimensions();
  auto wd = w.dimensions();
  if (xd.size() != 2 || wd.size() != 2) return ffi::Error::InvalidArgument("memloop_qmatmul: x and w must be 2-D");
  const int64_t rows = xd[0], in = xd[1];
  if (in < 1 || in % BlockWeights(qtype) != 0 || wd[1] != RowBytes(qtype, in))
    return ffi::Error::InvalidArgument("memloop_qmatmul: w's row bytes do not match x's width and the block type");
  const Matrix m{w.typed_data(), y->typed_data(), wd[0]};
  return Multiply(pool, qtype, amx != 0, fn, x.typed_data(), rows, in, &m, 1);
}

// x times each of the weight matrices (all of one block type and width): one result per matrix.
ffi::Error QMatmulMany(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::RemainingArgs ws, ffi::RemainingRets ys,
                       int32_t qtype, int32_t amx) {
  OutputsFn fn = Select(qtype);
  if (fn == nullptr) return ffi::Error::InvalidArgument("memloop_qmatmul_many: unknown block type");
  auto xd = x.dimensions();
  if (xd.size() != 2) return ffi::Error::InvalidArgument("memloop_qmatmul_many: x must be 2-D");
  const int64_t rows = xd[0], in = xd[1];
  const int n = static_cast<int>(ws.size());
  if (n < 1 || n > kMaxMatrices || ys.size() != ws.size())
    return ffi::Error::InvalidArgument("memloop_qmatmul_many: 1-8 matrices, one result each");
  if (in < 1 || in % BlockWeights(qtype) != 0)
    return ffi::Error::InvalidArgument("memloop_qmatmul_many: x's width is not a whole number of blocks");
  std::array<Matrix, kMaxMatrices> mats{};
  for (int i = 0; i < n; ++i) {
    auto w = ws.get<ffi::Buffer<ffi::U8>>(i);
    auto y = ys.get<ffi::Buffer<ffi::F32>>(i);
    if (!w.has_value() || !y.has_value()) return ffi::Error::InvalidArgument("memloop_qmatmul_many: u8 matrices, f32 results");
    auto wd = w->dimensions();
    if (wd.size() != 2 || wd[1] != RowBytes(qtype, in))
      return ffi::Error::InvalidArgument("memloop_qmatmul_many: w's row bytes do not match x's width and the block type");
    mats[i] = Matrix{w->typed_data(), (*y)->typed_data(), wd[0]};
  }
  return Multiply(pool, qtype, amx != 0, fn, x.typed_data(), rows, in, mats.data(), n);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(MemloopQMatmul, QMatmul,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::U8>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int32_t>("qtype")
                                  .Attr<int32_t>("amx"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(MemloopQMatmulMany, QMatmulMany,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<int32_t>("qtype")
                                  .Attr<int32_t>("amx"));

extern "C" int memloop_kernels_abi() { return 1; }

// The tile unit's own rate on the calling thread: `rounds` rounds of four TDPBF16PS on resident tiles
// (four independent sums, no loads), in bf16 multiply-adds per second; 0 where the tile path cannot run.
// Benchmarks take the ceiling of the AMX path from it (with one caller per core).
extern "C" double memloop_kernel_amx_peak(int64_t rounds) {
#ifdef MEMLOOP_AMX
  if (!AmxReady()) return 0;
  AmxConfigure();
  alignas(64) static const uint16_t ones[512] = {};
  _tile_loadd(4, ones, 64);
  _tile_loadd(5, ones, 64);
  _tile_loadd(6, ones, 64);
  _tile_loadd(7, ones, 64);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < rounds; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float sink[256];
  _tile_stored(0, sink, 64);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  _tile_release();
  return s > 0 ? 4.0 * 16 * 16 * 32 * static_cast<double>(rounds) / s : 0;
#else
  (void)rounds;
  return 0;
#endif
}

// Whether the tile path can run here: built with AMX (the compiler targets a CPU that has it), the CPU has
// AMX-TILE and AMX-BF16, and Linux granted the tile state.
extern "C" int32_t memloop_kernel_amx_ready() { return AmxReady() ? 1 : 0; }

// How the calls that had work to split were split so far: [by the crew, by XLA's pool, alone because
// the crew was in use] (crew.h); for tests and diagnostics.
extern "C" void memloop_kernel_splits(int64_t* out) {
  for (int i = 0; i < 3; ++i) out[i] = memloop_kernels::split_calls[i].load(std::memory_order_relaxed);
}

// Holds the process's crew until flags[1] is set (flags[0] is set once it is held), so that kernel calls
// made meanwhile take the busy-crew paths (XLA's pool, or alone) whatever the timing; for tests. Blocks:
// call it from a thread of its own (ctypes releases the GIL). A crew not created yet is created with
// one helper.
extern "C" void memloop_kernel_hold_crew(int32_t* flags) { memloop_kernels::Crew::Get(1).Hold(flags, flags + 1); }

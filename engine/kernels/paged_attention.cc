// Attention over a paged KV cache, read in place: out[B,T,H,hd] for queries q[B,T,H,hd] against
// each row's keys/values in the pools k, v [KVH, pages, page_size, hd] (f32; f16 widened to f32
// in registers: half the bytes per step, as llama.cpp's default cache; or int8 codes with an f32
// scale per (token, KV head) in k_scale, v_scale [KVH, pages, page_size]: a quarter of the bytes,
// as llama.cpp's q8_0 cache) through its block table
// [B, table_pages], causal by position (and within a sliding window when `window` > 0), as an
// XLA:CPU FFI custom call.
//
// Why: the XLA path gathers every page of a row into a dense copy per layer per step and then reads
// the copy, so at 3-4k tokens of context a decode step spends about as long copying keys and values
// as multiplying weights. Here each key and value is read once, from its page.
//
// Calls of several query tokens per row (prefill chunks) take the tiled form further down
// (WideItem); what follows to there is the one-token form (decode steps).
//
// How (flash-decoding): the keys of a row are cut into fixed chunks of kChunk absolute positions;
// one work item is (row, KV head, chunk) and computes, for each of its query rows (the KV head's G
// query heads x T tokens), the chunk's scores, their max m, sum of exponentials l and the weighted
// sum of values (one softmax per chunk, no rescaling inside it). The chunks of a query are then
// merged in chunk order (the online softmax across chunks). Work items spread over XLA's
// intra-op thread pool, so a single long row still uses every core.
//
// Batch invariance: the numbers of one query depend only on its own vector, position, keys and
// values: chunk and tile boundaries are absolute positions, each chunk is one thread's fixed
// sequence of operations, and the merge runs in chunk order. Neither the batch, the other rows,
// the number of query rows nor the block table's width changes a query's result.
#include <immintrin.h>

#include "crew.h"
#include "vec16.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int64_t kChunk = 256;  // keys per work item (a multiple of kTile)
constexpr int64_t kTile = 16;    // keys per score vector and per block of shared key/value loads
constexpr int64_t kMaxHeadDim = 256;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// e^x for x <= 0 (lanes below -87.3 give ~0 and are masked by the callers): x = n ln2 + r, e^r by
// Cephes' degree-6 polynomial, scaled by 2^n.
inline V16 Exp(V16 x) {
  x = v16_max_ps(x, v16_set1_ps(-87.3f));
  const V16 n = v16_roundscale_ps(v16_mul_ps(x, v16_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  V16 r = v16_fnmadd_ps(n, v16_set1_ps(0.693359375f), x);
  r = v16_fnmadd_ps(n, v16_set1_ps(-2.12194440e-4f), r);
  V16 p = v16_set1_ps(1.9875691500e-4f);
  p = v16_fmadd_ps(p, r, v16_set1_ps(1.3981999507e-3f));
  p = v16_fmadd_ps(p, r, v16_set1_ps(8.3334519073e-3f));
  p = v16_fmadd_ps(p, r, v16_set1_ps(4.1665795894e-2f));
  p = v16_fmadd_ps(p, r, v16_set1_ps(1.6666665459e-1f));
  p = v16_fmadd_ps(p, r, v16_set1_ps(5.0000001201e-1f));
  p = v16_fmadd_ps(p, v16_mul_ps(r, r), v16_add_ps(r, v16_set1_ps(1.0f)));
  return v16_scalef_ps(p, n);
}

// 16 cache elements as f32 (int8: the codes; their scale is applied per key, to the score and to
// the value's weight, so the widening is exact and costs no multiply per element).
inline V16 Load16(const float* p) { return v16_loadu_ps(p); }
inline V16 Load16(const uint16_t* p) { return v16_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline V16 Load16(const int8_t* p) {
  return v16_cvtepi32_ps(v16_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
template <typename KV>
constexpr bool kScaled = std::is_same_v<KV, int8_t>;

template <typename KV>
struct Problem {
  const float* q;
  const KV* k;
  const KV* v;
  const float* k_scale;  // int8 pools only: [KVH, pages, page_size]
  const float* v_scale;
  const int32_t* tables;
  const int32_t* pos;
  float* out;
  int64_t batch, tokens, heads, kv_heads, pages, page_size, hd, table_pages, group, rows, max_chunks;
  int32_t window;
  float scale;
  // Per (row, KV head, chunk, query row): running max, sum and weighted values.
  float* part_m;
  float* part_l;
  float* part_acc;

  int64_t Part(int64_t b, int64_t kvh, int64_t c) const { return ((b * kv_heads + kvh) * max_chunks + c) * rows; }
  const float* Query(int64_t b, int64_t r, int64_t kvh) const {
    return q + ((b * tokens + r / group) * heads + kvh * group + r % group) * hd;
  }
  // Keys a query at `p` may see: [Low(p), p].
  int64_t Low(int64_t p) const { return window > 0 ? std::max<int64_t>(0, p - window + 1) : 0; }
};

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__)
// AVX2 (vec16.h: a 16-lane vector is two 256-bit halves, 16 registers). The AVX-512 form (after
// #else), a sum tree over 16 keys at once, keeps 4 x N 16-lane partial sums live, twice the
// register file here. Here each key's 16 dot-product lanes are reduced as soon as they are done,
// in the very order of that tree:
// for lanes d0..d15 (each lane's FMA chain over the head dimension unchanged), the score is
// (t0 + t2) + (t1 + t3) with t_m = (d_m + d_{8+m}) + (d_{4+m} + d_{12+m}), so the results are those
// of the AVX-512 build bit for bit (tests/engine/test_engine_kernel_isa.py).

// 8 cache elements as f32, the halves of Load16.
inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 Load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256 Load8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// Lane j: the score of key j from u[j] (u_m = d_m + d_{8+m}): t = u's 128-bit halves added, then
// (t0 + t2) + (t1 + t3), for 8 keys at once by transposing adds.
inline __m256 Finish8(const __m256* u) {
  __m256 t[4], v[2];
  for (int p = 0; p < 4; ++p)  // [t of key 2p | t of key 2p+1]
    t[p] = _mm256_add_ps(_mm256_permute2f128_ps(u[2 * p], u[2 * p + 1], 0x20),
                         _mm256_permute2f128_ps(u[2 * p], u[2 * p + 1], 0x31));
  for (int p = 0; p < 2; ++p)  // [t0+t2, t1+t3 of keys 4p, 4p+2 interleaved | of keys 4p+1, 4p+3]
    v[p] = _mm256_add_ps(_mm256_unpacklo_ps(t[2 * p], t[2 * p + 1]), _mm256_unpackhi_ps(t[2 * p], t[2 * p + 1]));
  const __m256d a = _mm256_castps_pd(v[0]), b = _mm256_castps_pd(v[1]);
  const __m256 s = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(a, b)), _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)));
  // s holds keys 0, 2, 4, 6 | 1, 3, 5, 7
  return _mm256_permutevar8x32_ps(s, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

template <typename KV, int N>
inline void Scores(const KV* const* kp, const float* const* qr, int64_t nv, V16* out) {
  __m256 u[N][kTile];
  for (int j = 0; j < kTile; ++j) {
    const KV* k = kp[j];
    __m256 lo[N], hi[N];
    const __m256 k0 = Load8(k), k1 = Load8(k + 8);
#pragma GCC unroll 4
    for (int i = 0; i < N; ++i) {
      lo[i] = _mm256_mul_ps(k0, _mm256_loadu_ps(qr[i]));
      hi[i] = _mm256_mul_ps(k1, _mm256_loadu_ps(qr[i] + 8));
    }
    for (int64_t x = 1; x < nv; ++x) {
      const __m256 kx0 = Load8(k + 16 * x), kx1 = Load8(k + 16 * x + 8);
#pragma GCC unroll 4
      for (int i = 0; i < N; ++i) {
        lo[i] = _mm256_fmadd_ps(kx0, _mm256_loadu_ps(qr[i] + 16 * x), lo[i]);
        hi[i] = _mm256_fmadd_ps(kx1, _mm256_loadu_ps(qr[i] + 16 * x + 8), hi[i]);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < N; ++i) u[i][j] = _mm256_add_ps(lo[i], hi[i]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < N; ++i) out[i] = V16{Finish8(u[i]), Finish8(u[i] + 8)};
}
#else
// The last three levels of a 16-vector horizontal sum: from b[0..3], where b[p] holds the first two
// levels' pairwise sums of d[4p..4p+3] (see Scores), to one vector whose lane j is the sum of the
// lanes of d[j] (46 shuffles and adds for 16 sums instead of 16 horizontal sums).
inline V16 Finish16(const V16* b) {
  V16 c[2];
  for (int i = 0; i < 2; ++i)
    c[i] = v16_add_ps(v16_unpacklo_ps(b[2 * i], b[2 * i + 1]), v16_unpackhi_ps(b[2 * i], b[2 * i + 1]));
  const V16 x = v16_add_ps(v16_castpd_ps(v16_unpacklo_pd(v16_castps_pd(c[0]), v16_castps_pd(c[1]))),
                                 v16_castpd_ps(v16_unpackhi_pd(v16_castps_pd(c[0]), v16_castps_pd(c[1]))));
  // x's lane 4k + m holds d[4m + k].
  return v16_permutexvar_ps(v16_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), x);
}

// out[i] lane j = q_i . k_j for the tile's 16 keys and N query rows. The sum tree's first two
// levels are built as the keys are read (pairs, then quads), so only N x 4 partial vectors stay
// live and every accumulator is a register (N is a compile-time count: a runtime row count kept
// the 16 x N dot accumulators on the stack, a store per multiply-add).
template <typename KV, int N>
inline void Scores(const KV* const* kp, const float* const* qr, int64_t nv, V16* out) {
  // Every loop over a compile-time count is unrolled so that the arrays below become registers.
  V16 b[N][4];
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) {
    V16 a[N][2];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      V16 d[2][N];
#pragma GCC unroll 2
      for (int e = 0; e < 2; ++e) {
        const KV* k = kp[4 * p + 2 * h + e];
        const V16 k0 = Load16(k);
#pragma GCC unroll 4
        for (int i = 0; i < N; ++i) d[e][i] = v16_mul_ps(k0, v16_loadu_ps(qr[i]));
        for (int64_t x = 1; x < nv; ++x) {
          const V16 kx = Load16(k + 16 * x);
#pragma GCC unroll 4
          for (int i = 0; i < N; ++i) d[e][i] = v16_fmadd_ps(kx, v16_loadu_ps(qr[i] + 16 * x), d[e][i]);
        }
      }
#pragma GCC unroll 4
      for (int i = 0; i < N; ++i)
        a[i][h] = v16_add_ps(v16_shuffle_f32x4(d[0][i], d[1][i], 0x44), v16_shuffle_f32x4(d[0][i], d[1][i], 0xEE));
    }
#pragma GCC unroll 4
    for (int i = 0; i < N; ++i)
      b[i][p] = v16_add_ps(v16_shuffle_f32x4(a[i][0], a[i][1], 0x88), v16_shuffle_f32x4(a[i][0], a[i][1], 0xDD));
  }
#pragma GCC unroll 4
  for (int i = 0; i < N; ++i) out[i] = Finish16(b[i]);
}
#endif

constexpr int64_t kRowBlock = 4;  // query rows that share each key and value load

// The keys and values of one tile: where each slot's vectors are (and, int8, their scales).
template <typename KV>
struct Tile {
  const KV* kp[kTile];
  const KV* vp[kTile];
  alignas(64) float ks[kTile];
  alignas(64) float vs[kTile];
};

constexpr int64_t kTiles = kChunk / kTile;

// Which of the 16 keys from j0 a query at `p` (seeing [lo, p]) sees.
inline Mask16 Visible(int64_t p, int64_t lo, int64_t j0) {
  if (p < j0 || lo >= j0 + kTile) return 0;
  return static_cast<Mask16>(((p - j0 >= kTile - 1) ? 0xFFFFu : ((1u << (p - j0 + 1)) - 1u)) &
                             ((lo <= j0) ? 0xFFFFu : static_cast<uint32_t>(0xFFFFu << (lo - j0))));
}


// Scores of one tile against a block of N query rows (rows rs, with their visible keys), scaled
// (and, int8, by each key's scale), -inf where a row does not see the key, into w[row][key of chunk].
template <typename KV, int N>
void ScoreBlock(const Problem<KV>& pr, const Tile<KV>& tile, const int64_t* rs, const Mask16* visible,
                const float* const* qr, float* w, int64_t t) {
  V16 dots[N];
  Scores<KV, N>(tile.kp, qr, pr.hd / 16, dots);
#pragma GCC unroll 4
  for (int i = 0; i < N; ++i) {
    V16 raw = v16_mul_ps(dots[i], v16_set1_ps(pr.scale));
    if constexpr (kScaled<KV>) raw = v16_mul_ps(raw, v16_load_ps(tile.ks));
    v16_storeu_ps(w + rs[i] * kChunk + t * kTile, v16_mask_mov_ps(v16_set1_ps(kNegInf), visible[i], raw));
  }
}

// acc[row][16x0 ..] += the tile's values weighted by w[row][key] in X 16-lane spans from 16x0, for N rows.
// Each key's X spans are read one after another (AVX-512: a whole 64-wide key, 256 contiguous bytes),
// a stream the cache's prefetcher follows; one span across 16 keys 256 bytes apart stalled on every
// load (0.37 of the attention kernel's profile at batch 32). Every accumulator lane still sees its
// keys in order, so the sums are those of one span at a time.
template <typename KV, int N, int X>
inline void ValueSpans(const Tile<KV>& tile, const float* const* pw, Mask16 any, float* const* acc, int64_t x0) {
  V16 o[N][X];
#pragma GCC unroll 4
  for (int i = 0; i < N; ++i)
#pragma GCC unroll 4
    for (int x = 0; x < X; ++x) o[i][x] = v16_loadu_ps(acc[i] + 16 * (x0 + x));
  for (int64_t j = 0; j < kTile; ++j) {
    if (!((any >> j) & 1)) continue;
    V16 vx[X];
#pragma GCC unroll 4
    for (int x = 0; x < X; ++x) vx[x] = Load16(tile.vp[j] + 16 * (x0 + x));
#pragma GCC unroll 4
    for (int i = 0; i < N; ++i) {
      const V16 wi = v16_set1_ps(pw[i][j]);
#pragma GCC unroll 4
      for (int x = 0; x < X; ++x) o[i][x] = v16_fmadd_ps(wi, vx[x], o[i][x]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < N; ++i)
#pragma GCC unroll 4
    for (int x = 0; x < X; ++x) v16_storeu_ps(acc[i] + 16 * (x0 + x), o[i][x]);
}

// Spans a value pass holds at once: N x X accumulators and X value vectors in registers (AVX2's 16
// registers of half width hold one span).
constexpr int kValueSpans = kV16Native ? 4 : 1;

// acc[row] += the tile's values weighted by w[row][key] (0 where the row does not see the key), for
// a block of N rows; `any`: the keys some row of the block sees (no other slot is read).
template <typename KV, int N>
void ValueBlock(const Problem<KV>& pr, const Tile<KV>& tile, const int64_t* rs, Mask16 any, const float* w,
                int64_t t, float* acc) {
  const int64_t hd = pr.hd, nv = hd / 16;
  const float* pw[N];
  float* ar[N];
#pragma GCC unroll 4
  for (int i = 0; i < N; ++i) pw[i] = w + rs[i] * kChunk + t * kTile, ar[i] = acc + rs[i] * hd;
  int64_t x = 0;
  for (; x + kValueSpans <= nv; x += kValueSpans) ValueSpans<KV, N, kValueSpans>(tile, pw, any, ar, x);
  for (; x < nv; ++x) ValueSpans<KV, N, 1>(tile, pw, any, ar, x);
}

// The largest score of a row's chunk among the keys it sees (`seen`: a mask per tile), -inf if none.
inline float SeenMax(const float* w, const Mask16* seen, int64_t tiles) {
  V16 top = v16_set1_ps(kNegInf);
  for (int64_t t = 0; t < tiles; ++t)
    if (seen[t]) top = v16_max_ps(top, v16_loadu_ps(w + t * kTile));
  return v16_reduce_max_ps(top);
}

// A row's softmax weights in place of its scores, in the tiles where `touch` is set: e^(score - m)
// on the keys it sees, +0 on the others (int8: times each value's scale; vs(t): a tile's 16 scales).
// Returns the sum of the exponentials, added tile by tile in order.
template <typename KV, typename Scales>
inline float Weights(float* w, const Mask16* seen, const Mask16* touch, int64_t tiles, float m, Scales vs) {
  const V16 mv = v16_set1_ps(m);
  V16 sum = v16_setzero_ps();
  for (int64_t t = 0; t < tiles; ++t) {
    if (!touch[t]) continue;
    const V16 pv = v16_maskz_mov_ps(seen[t], Exp(v16_sub_ps(v16_loadu_ps(w + t * kTile), mv)));
    sum = v16_add_ps(sum, pv);
    v16_storeu_ps(w + t * kTile, kScaled<KV> ? v16_maskz_mul_ps(seen[t], pv, v16_load_ps(vs(t))) : pv);
  }
  return v16_reduce_add_ps(sum);
}

// Per-thread scratch: a row's scores, then weights, over one chunk; and which keys of each tile it sees.
struct Scratch {
  std::vector<float> w;
  std::vector<Mask16> vis;
};
thread_local Scratch scratch;

// One chunk of one row's keys for one KV head, against all of the head's query rows, in three
// passes: every tile's scores (each block of up to kRowBlock rows sharing the key loads), then each
// row's softmax over the whole chunk at once (one max, one exponential per key, one sum; no
// rescaling between tiles), then the weighted values. Each query row's arithmetic is the same
// whichever rows share its block.
template <typename KV>
void Chunk(const Problem<KV>& pr, int64_t b, int64_t kvh, int64_t c) {
  const int64_t hd = pr.hd, rows = pr.rows, base = pr.Part(b, kvh, c);
  float* m = pr.part_m + base;
  float* l = pr.part_l + base;
  float* acc = pr.part_acc + base * hd;
  std::fill(acc, acc + rows * hd, 0.0f);
  scratch.w.resize(rows * kChunk);
  scratch.vis.assign(rows * kTiles, 0);
  float* w = scratch.w.data();
  Mask16* vis = scratch.vis.data();
  const int64_t c0 = c * kChunk;
  const int64_t head_slots = kvh * pr.pages * pr.page_size;  // this KV head's first slot in the pools
  const int32_t* table = pr.tables + b * pr.table_pages;
  const int64_t last_slot = pr.table_pages * pr.page_size - 1;
  Tile<KV> tiles[kTiles];
  bool located[kTiles] = {};

  // Pass 1: scores.
  for (int64_t t = 0; t < kTiles; ++t) {
    const int64_t j0 = c0 + t * kTile;
    for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
      // The block's rows that see a key of this tile, and which keys.
      int64_t rs[kRowBlock];
      Mask16 visible[kRowBlock];
      int64_t n = 0;
      for (int64_t r = r0; r < std::min(rows, r0 + kRowBlock); ++r) {
        const int64_t p = pr.pos[b * pr.tokens + r / pr.group], lo = pr.Low(p);
        const Mask16 seen = Visible(p, lo, j0);
        if (!seen) continue;
        rs[n] = r;
        visible[n] = seen;
        vis[r * kTiles + t] = visible[n++];
      }
      if (n == 0) continue;
      Tile<KV>& tile = tiles[t];
      if (!located[t]) {
        // Walk the tile's slots page by page (one division per tile). j0 <= last_slot, since a row
        // sees a key of this tile; slots past the table repeat the last one (masked).
        int64_t page = j0 / pr.page_size, off = j0 % pr.page_size;
        for (int64_t j = 0; j < kTile; ++j) {
          if (j0 + j <= last_slot) {
            const int64_t at = head_slots + int64_t{table[page]} * pr.page_size + off;  // in slots
            tile.kp[j] = pr.k + at * hd;
            tile.vp[j] = pr.v + at * hd;
            if constexpr (kScaled<KV>) {
              tile.ks[j] = pr.k_scale[at];
              tile.vs[j] = pr.v_scale[at];
            }
            if (++off == pr.page_size) off = 0, ++page;
          } else {
            tile.kp[j] = tile.kp[j - 1];
            tile.vp[j] = tile.vp[j - 1];
            tile.ks[j] = tile.ks[j - 1];
            tile.vs[j] = tile.vs[j - 1];
          }
        }
        located[t] = true;
      }
      const float* qr[kRowBlock];
      for (int64_t i = 0; i < n; ++i) qr[i] = pr.Query(b, rs[i], kvh);
      switch (n) {
        case 1: ScoreBlock<KV, 1>(pr, tile, rs, visible, qr, w, t); break;
        case 2: ScoreBlock<KV, 2>(pr, tile, rs, visible, qr, w, t); break;
        case 3: ScoreBlock<KV, 3>(pr, tile, rs, visible, qr, w, t); break;
        default: ScoreBlock<KV, kRowBlock>(pr, tile, rs, visible, qr, w, t); break;
      }
    }
  }

  // Pass 2: each row's softmax over the chunk (m: its max score, l: its sum of exponentials); the
  // weights replace the scores (int8: times each value's scale).
  for (int64_t r = 0; r < rows; ++r) {
    const Mask16* rv = vis + r * kTiles;
    float* rw = w + r * kChunk;
    m[r] = SeenMax(rw, rv, kTiles);
    l[r] = m[r] == kNegInf ? 0.0f : Weights<KV>(rw, rv, rv, kTiles, m[r], [&](int64_t t) { return tiles[t].vs; });
  }

  // Pass 3: the weighted values.
  for (int64_t t = 0; t < kTiles; ++t) {
    for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
      int64_t rs[kRowBlock];
      int64_t n = 0;
      Mask16 any = 0;
      for (int64_t r = r0; r < std::min(rows, r0 + kRowBlock); ++r) {
        if (!vis[r * kTiles + t]) continue;
        rs[n++] = r;
        any |= vis[r * kTiles + t];
      }
      switch (n) {
        case 0: break;
        case 1: ValueBlock<KV, 1>(pr, tiles[t], rs, any, w, t, acc); break;
        case 2: ValueBlock<KV, 2>(pr, tiles[t], rs, any, w, t, acc); break;
        case 3: ValueBlock<KV, 3>(pr, tiles[t], rs, any, w, t, acc); break;
        default: ValueBlock<KV, kRowBlock>(pr, tiles[t], rs, any, w, t, acc); break;
      }
    }
  }
}

// The chunks of one query (row b, token t, head h) merged in chunk order into its output.
template <typename KV>
void Merge(const Problem<KV>& pr, int64_t b, int64_t t, int64_t h, int64_t chunks) {
  const int64_t kvh = h / pr.group, r = t * pr.group + h % pr.group, hd = pr.hd, nv = hd / 16;
  float top = kNegInf;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t at = pr.Part(b, kvh, c) + r;
    if (pr.part_l[at] > 0.0f) top = std::max(top, pr.part_m[at]);
  }
  V16 o[kMaxHeadDim / 16];
  for (int64_t i = 0; i < nv; ++i) o[i] = v16_setzero_ps();
  float total = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t at = pr.Part(b, kvh, c) + r;
    if (!(pr.part_l[at] > 0.0f)) continue;
    const float w = std::exp(pr.part_m[at] - top);
    total += pr.part_l[at] * w;
    const V16 wv = v16_set1_ps(w);
    const float* a = pr.part_acc + at * hd;
    for (int64_t i = 0; i < nv; ++i) o[i] = v16_fmadd_ps(v16_loadu_ps(a + 16 * i), wv, o[i]);
  }
  float* dst = pr.out + ((b * pr.tokens + t) * pr.heads + h) * hd;
  const V16 inv = v16_set1_ps(total > 0.0f ? 1.0f / total : 0.0f);
  for (int64_t i = 0; i < nv; ++i) v16_storeu_ps(dst + 16 * i, v16_mul_ps(o[i], inv));
}

// ---- Calls of several query tokens per row (prefill chunks): a tiled form ------------------------
//
// A prefill chunk of 512 tokens puts 512 x G query rows against each key, so the keys are worth
// widening (and transposing) once per chunk and sharing among many rows, the way a GEMM shares a
// panel: one work item is (row, KV head, kWideTokens query tokens). For each kChunk of keys it
// widens the keys to f32 as kt[tile][hd][16] (a key per lane; a tile's 4 KB contiguous, where rows
// of a [hd][kChunk] layout 1 KB apart fell into a few L1 sets) and the values as vf[kChunk][hd], then
// takes the item's query rows kWideRows at a time: their scores (each lane one key, its FMA chain
// over the head dimension in order), an online-softmax update of each row's running max, sum and
// weighted values, and the weighted values of the chunk. Nothing of the size of the scores ever
// leaves the L1/L2 caches, unlike the gather path's [tokens, keys] score matrices.
//
// Batch invariance, as in the one-token form: a query's arithmetic depends only on its own vector,
// position, keys and values. Key chunks are absolute positions and are visited in order; a row
// skips a chunk it sees no key of; a key another row of the block sees but this one does not gets
// weight +0 (an exact no-op). Neither the batch, the other tokens of the call, their number (when
// more than one) nor the table's width changes a query's bits. One-token calls (decode) keep the
// form above, whose sums run in another order: a query's bits differ between the two forms by f32
// rounding only.
constexpr int64_t kWideTokens = 32;  // query tokens of a row per work item
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
constexpr int kWideRows = 12;  // query rows sharing each key load: one 16-lane register each
#else
constexpr int kWideRows = 6;  // two 8-lane halves each: 12 of the 16 registers
#endif

struct WideScratch {
  std::vector<float> kt, vf, acc, m, l;
  alignas(64) float ks[kChunk];
  alignas(64) float vs[kChunk];
  alignas(64) float w[kWideRows][kChunk];
  alignas(64) float dummy[kMaxHeadDim];  // the accumulator of a padding row of the last block
};
thread_local WideScratch wide;

// out[i] lane j = q_i . k_j for the 16 keys of one tile of kt ([hd][16]) and kWideRows rows.
inline void WideScores(const float* kt, const float* const* qr, int64_t hd, V16* out) {
  V16 a[kWideRows];
#pragma GCC unroll 12
  for (int i = 0; i < kWideRows; ++i) a[i] = v16_setzero_ps();
  for (int64_t d = 0; d < hd; ++d) {
    const V16 k = v16_loadu_ps(kt + d * 16);
#pragma GCC unroll 12
    for (int i = 0; i < kWideRows; ++i) a[i] = v16_fmadd_ps(v16_set1_ps(qr[i][d]), k, a[i]);
  }
#pragma GCC unroll 12
  for (int i = 0; i < kWideRows; ++i) out[i] = a[i];
}

// acc_i[16x .. 16x+15] += sum over the keys in `any` of w_i[key] * vf[key][16x ..], for kWideRows rows.
inline void WideValues(const float* vf, const float* const* w, float* const* acc, const Mask16* any,
                       int64_t tiles, int64_t hd) {
  for (int64_t x = 0; x < hd / 16; ++x) {
    V16 o[kWideRows];
#pragma GCC unroll 12
    for (int i = 0; i < kWideRows; ++i) o[i] = v16_loadu_ps(acc[i] + 16 * x);
    for (int64_t t = 0; t < tiles; ++t) {
      for (int64_t e = 0; e < kTile; ++e) {
        if (!((any[t] >> e) & 1)) continue;
        const int64_t j = t * kTile + e;
        const V16 vx = v16_loadu_ps(vf + j * hd + 16 * x);
#pragma GCC unroll 12
        for (int i = 0; i < kWideRows; ++i) o[i] = v16_fmadd_ps(v16_set1_ps(w[i][j]), vx, o[i]);
      }
    }
#pragma GCC unroll 12
    for (int i = 0; i < kWideRows; ++i) v16_storeu_ps(acc[i] + 16 * x, o[i]);
  }
}

// Keys [c0, c0 + n) of row b's KV head kvh widened to f32 in s (keys transposed; int8: their scales).
// Slots past the table repeat its last slot (no query sees them).
template <typename KV>
void WidenChunk(const Problem<KV>& pr, int64_t b, int64_t kvh, int64_t c0, int64_t n, WideScratch& s) {
  const int64_t hd = pr.hd, last_slot = pr.table_pages * pr.page_size - 1;
  const int64_t head_slots = kvh * pr.pages * pr.page_size;
  const int32_t* table = pr.tables + b * pr.table_pages;
  alignas(64) float lane[16];
  for (int64_t j = 0; j < n; ++j) {
    const int64_t slot = std::min(c0 + j, last_slot);
    const int64_t at = head_slots + int64_t{table[slot / pr.page_size]} * pr.page_size + slot % pr.page_size;
    for (int64_t x = 0; x < hd / 16; ++x) {
      v16_storeu_ps(lane, Load16(pr.k + at * hd + 16 * x));
      float* kt = s.kt.data() + ((j / kTile) * hd + 16 * x) * kTile + j % kTile;
      for (int64_t e = 0; e < 16; ++e) kt[e * kTile] = lane[e];
      v16_storeu_ps(s.vf.data() + j * hd + 16 * x, Load16(pr.v + at * hd + 16 * x));
    }
    if constexpr (kScaled<KV>) {
      s.ks[j] = pr.k_scale[at];
      s.vs[j] = pr.v_scale[at];
    }
  }
}

// Tokens [tb * kWideTokens, +kWideTokens) of row b against KV head kvh's keys: their G query heads each.
template <typename KV>
void WideItem(const Problem<KV>& pr, int64_t b, int64_t kvh, int64_t tb) {
  const int64_t hd = pr.hd, g = pr.group, t0 = tb * kWideTokens;
  const int64_t n = (std::min(pr.tokens, t0 + kWideTokens) - t0) * g;  // query rows, token-major
  WideScratch& s = wide;
  s.kt.resize(hd * kChunk);
  s.vf.resize(kChunk * hd);
  s.m.assign(n, kNegInf);
  s.l.assign(n, 0.0f);
  s.acc.assign(n * hd, 0.0f);
  int64_t near = std::numeric_limits<int64_t>::max(), far = 0;
  for (int64_t i = 0; i < n; i += g) {
    const int64_t p = pr.pos[b * pr.tokens + t0 + i / g];
    near = std::min(near, pr.Low(p));
    far = std::max(far, p);
  }
  for (int64_t c = near / kChunk; c <= far / kChunk; ++c) {
    const int64_t c0 = c * kChunk, tiles = (std::min(kChunk, far + 1 - c0) + kTile - 1) / kTile;
    WidenChunk(pr, b, kvh, c0, tiles * kTile, s);
    for (int64_t r0 = 0; r0 < n; r0 += kWideRows) {
      const int64_t rr = std::min<int64_t>(kWideRows, n - r0);
      Mask16 vis[kWideRows][kTiles] = {}, any[kTiles] = {};
      bool sees[kWideRows] = {};
      const float* qr[kWideRows];
      const float* wr[kWideRows];
      float* acc[kWideRows];
      for (int64_t i = 0; i < kWideRows; ++i) {
        const bool real = i < rr;
        const int64_t r = t0 * g + r0 + (real ? i : 0);
        qr[i] = pr.Query(b, r, kvh);
        wr[i] = s.w[i];
        acc[i] = real ? s.acc.data() + (r0 + i) * hd : s.dummy;
        if (!real) {
          std::fill(s.w[i], s.w[i] + tiles * kTile, 0.0f);
          continue;
        }
        const int64_t p = pr.pos[b * pr.tokens + t0 + (r0 + i) / g], lo = pr.Low(p);
        for (int64_t t = 0; t < tiles; ++t) {
          vis[i][t] = Visible(p, lo, c0 + t * kTile);
          any[t] |= vis[i][t];
          sees[i] = sees[i] || vis[i][t];
        }
      }
      // Scores (scaled; int8: by each key's scale), -inf where the row does not see the key.
      for (int64_t t = 0; t < tiles; ++t) {
        if (!any[t]) continue;
        V16 dots[kWideRows];
        WideScores(s.kt.data() + t * hd * kTile, qr, hd, dots);
        for (int64_t i = 0; i < rr; ++i) {
          V16 raw = v16_mul_ps(dots[i], v16_set1_ps(pr.scale));
          if constexpr (kScaled<KV>) raw = v16_mul_ps(raw, v16_load_ps(s.ks + t * kTile));
          v16_storeu_ps(s.w[i] + t * kTile, v16_mask_mov_ps(v16_set1_ps(kNegInf), vis[i][t], raw));
        }
      }
      // Each row's online-softmax update; the weights replace the scores (int8: times each value's scale).
      for (int64_t i = 0; i < rr; ++i) {
        float* w = s.w[i];
        if (!sees[i]) {  // this chunk is not the row's: weight +0 on the keys its block reads
          for (int64_t t = 0; t < tiles; ++t)
            if (any[t]) v16_storeu_ps(w + t * kTile, v16_setzero_ps());
          continue;
        }
        const int64_t r = r0 + i;
        const float m = std::max(s.m[r], SeenMax(w, vis[i], tiles)), f = std::exp(s.m[r] - m);
        const float sum = Weights<KV>(w, vis[i], any, tiles, m, [&](int64_t t) { return s.vs + t * kTile; });
        s.m[r] = m;
        s.l[r] = s.l[r] * f + sum;
        if (f != 1.0f) {
          const V16 fv = v16_set1_ps(f);
          for (int64_t x = 0; x < hd / 16; ++x)
            v16_storeu_ps(acc[i] + 16 * x, v16_mul_ps(v16_loadu_ps(acc[i] + 16 * x), fv));
        }
      }
      WideValues(s.vf.data(), wr, acc, any, tiles, hd);
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t token = t0 + i / g, h = kvh * g + i % g;
    float* dst = pr.out + ((b * pr.tokens + token) * pr.heads + h) * hd;
    const V16 inv = v16_set1_ps(s.l[i] > 0.0f ? 1.0f / s.l[i] : 0.0f);
    for (int64_t x = 0; x < hd / 16; ++x) v16_storeu_ps(dst + 16 * x, v16_mul_ps(v16_loadu_ps(s.acc.data() + i * hd + 16 * x), inv));
  }
}

// Below this many (key, query row) pairs in a call only the kernels' own spinning threads help
// (crew.h): waking a sleeping XLA pool thread costs more than it saves (measured: batch-1 decode
// after a short prompt went from 85 to 73 tok/s when every layer's few dozen keys were split over
// two threads that way). The crew sees a call within a microsecond, and splitting even these
// small calls over it cut a batch-1 step's attention from about 1.2 to 0.75 ms on a Zen 3 host.
constexpr int64_t kInlineKeyRows = 8192;

using memloop_kernels::Helpers;
using memloop_kernels::Parallel;

template <ffi::DataType D>
ffi::Error Attend(ffi::ThreadPool& pool, ffi::Buffer<ffi::F32>& q, ffi::Buffer<D>& k, ffi::Buffer<D>& v,
                  const float* k_scale, const float* v_scale, ffi::Buffer<ffi::S32>& tables,
                  ffi::Buffer<ffi::S32>& positions, ffi::ResultBuffer<ffi::F32>& out, int32_t window) {
  using KV = ffi::NativeType<D>;
  auto qd = q.dimensions(), kd = k.dimensions(), vd = v.dimensions(), td = tables.dimensions(),
       pd = positions.dimensions();
  if (qd.size() != 4 || kd.size() != 4 || vd.size() != 4 || td.size() != 2 || pd.size() != 2)
    return ffi::Error::InvalidArgument("memloop_paged_attention: q [B,T,H,hd], k/v [KVH,pages,page_size,hd], "
                                       "tables [B,pages], positions [B,T]");
  Problem<KV> pr{};
  pr.batch = qd[0];
  pr.tokens = qd[1];
  pr.heads = qd[2];
  pr.hd = qd[3];
  pr.kv_heads = kd[0];
  pr.pages = kd[1];
  pr.page_size = kd[2];
  pr.table_pages = td[1];
  for (int i = 0; i < 4; ++i)
    if (kd[i] != vd[i]) return ffi::Error::InvalidArgument("memloop_paged_attention: k and v pools differ in shape");
  if (kd[3] != pr.hd || pr.hd % 16 != 0 || pr.hd > kMaxHeadDim)
    return ffi::Error::InvalidArgument("memloop_paged_attention: head_dim must match and be a multiple of 16, <= 256");
  if (pr.kv_heads < 1 || pr.heads % pr.kv_heads != 0)
    return ffi::Error::InvalidArgument("memloop_paged_attention: query heads must be a multiple of KV heads");
  if (td[0] != pr.batch || pd[0] != pr.batch || pd[1] != pr.tokens || pr.table_pages < 1)
    return ffi::Error::InvalidArgument("memloop_paged_attention: tables/positions do not match q's batch and tokens");
  pr.k_scale = k_scale;
  pr.v_scale = v_scale;
  pr.q = q.typed_data();
  pr.k = k.typed_data();
  pr.v = v.typed_data();
  pr.tables = tables.typed_data();
  pr.pos = positions.typed_data();
  pr.out = out->typed_data();
  pr.group = pr.heads / pr.kv_heads;
  pr.rows = pr.group * pr.tokens;
  pr.window = window;
  pr.scale = 1.0f / std::sqrt(static_cast<float>(pr.hd));

  // Chunks per batch row: up to its furthest query position (clamped to its table, which bounds it).
  std::vector<int64_t> chunks(pr.batch);
  const int64_t slots = pr.table_pages * pr.page_size;
  int64_t key_rows = 0;  // the call's work: keys up to each row's furthest query, times query rows
  for (int64_t b = 0; b < pr.batch; ++b) {
    int64_t far = 0;
    for (int64_t t = 0; t < pr.tokens; ++t) {
      const int64_t p = pr.pos[b * pr.tokens + t];
      if (p < 0 || p >= slots)
        return ffi::Error::InvalidArgument("memloop_paged_attention: a position lies outside its row's block table");
      far = std::max(far, p);
    }
    chunks[b] = far / kChunk + 1;
    key_rows += (far + 1) * pr.kv_heads * pr.rows;
    pr.max_chunks = std::max(pr.max_chunks, chunks[b]);
  }
  for (int64_t i = 0; i < pr.batch * pr.table_pages; ++i)
    if (pr.tables[i] < 0 || pr.tables[i] >= pr.pages)
      return ffi::Error::InvalidArgument("memloop_paged_attention: a block table names a page outside the pool");
  const Problem<KV>* p = &pr;
  if (pr.tokens > 1) {  // prefill chunks: the tiled form, work items of kWideTokens tokens
    const int64_t blocks = (pr.tokens + kWideTokens - 1) / kWideTokens;
    const Helpers helpers = key_rows < kInlineKeyRows ? Helpers::kCrew : Helpers::kAny;
    Parallel(pool, pr.batch * pr.kv_heads * blocks, helpers, [p, blocks](int64_t i) {
      WideItem(*p, i / blocks / p->kv_heads, i / blocks % p->kv_heads, i % blocks);
    });
    return ffi::Error::Success();
  }
  const int64_t parts = pr.batch * pr.kv_heads * pr.max_chunks * pr.rows;
  std::vector<float> part_m(parts), part_l(parts), part_acc(parts * pr.hd);
  pr.part_m = part_m.data();
  pr.part_l = part_l.data();
  pr.part_acc = part_acc.data();

  std::vector<int64_t> items;  // (b, kvh, c) packed; every chunk of every row and KV head
  for (int64_t b = 0; b < pr.batch; ++b)
    for (int64_t h = 0; h < pr.kv_heads; ++h)
      for (int64_t c = 0; c < chunks[b]; ++c) items.push_back((b * pr.kv_heads + h) * pr.max_chunks + c);
  const int64_t* it = items.data();
  const Helpers helpers = key_rows < kInlineKeyRows ? Helpers::kCrew : Helpers::kAny;
  Parallel(pool, static_cast<int64_t>(items.size()), helpers, [p, it](int64_t i) {
    const int64_t x = it[i], c = x % p->max_chunks, bh = x / p->max_chunks;
    Chunk(*p, bh / p->kv_heads, bh % p->kv_heads, c);
  });
  const int64_t* nc = chunks.data();
  Parallel(pool, pr.batch * pr.tokens, helpers, [p, nc](int64_t i) {
    const int64_t b = i / p->tokens, t = i % p->tokens;
    for (int64_t h = 0; h < p->heads; ++h) Merge(*p, b, t, h, nc[b]);
  });
  return ffi::Error::Success();
}

template <ffi::DataType D>
ffi::Error PagedAttention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<D> k, ffi::Buffer<D> v,
                          ffi::Buffer<ffi::S32> tables, ffi::Buffer<ffi::S32> positions,
                          ffi::ResultBuffer<ffi::F32> out, int32_t window) {
  return Attend<D>(pool, q, k, v, nullptr, nullptr, tables, positions, out, window);
}

ffi::Error PagedAttentionQ8(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::S8> k,
                            ffi::Buffer<ffi::S8> v, ffi::Buffer<ffi::F32> k_scale, ffi::Buffer<ffi::F32> v_scale,
                            ffi::Buffer<ffi::S32> tables, ffi::Buffer<ffi::S32> positions,
                            ffi::ResultBuffer<ffi::F32> out, int32_t window) {
  auto kd = k.dimensions(), ksd = k_scale.dimensions(), vsd = v_scale.dimensions();
  if (kd.size() != 4 || ksd.size() != 3 || vsd.size() != 3 || ksd[0] != kd[0] || ksd[1] != kd[1] ||
      ksd[2] != kd[2] || vsd[0] != kd[0] || vsd[1] != kd[1] || vsd[2] != kd[2])
    return ffi::Error::InvalidArgument("memloop_paged_attention: int8 pools need scales [KVH, pages, page_size] "
                                       "matching the pools");
  return Attend<ffi::S8>(pool, q, k, v, k_scale.typed_data(), v_scale.typed_data(), tables, positions, out, window);
}

}  // namespace

#define MEMLOOP_PAGED_ATTENTION(name, dtype)                                 \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(name, PagedAttention<dtype>,                 \
                                ffi::Ffi::Bind()                             \
                                    .Ctx<ffi::ThreadPool>()                  \
                                    .Arg<ffi::Buffer<ffi::F32>>()            \
                                    .Arg<ffi::Buffer<dtype>>()               \
                                    .Arg<ffi::Buffer<dtype>>()               \
                                    .Arg<ffi::Buffer<ffi::S32>>()            \
                                    .Arg<ffi::Buffer<ffi::S32>>()            \
                                    .Ret<ffi::Buffer<ffi::F32>>()            \
                                    .Attr<int32_t>("window"));

MEMLOOP_PAGED_ATTENTION(MemloopPagedAttention, ffi::F32)
MEMLOOP_PAGED_ATTENTION(MemloopPagedAttentionF16, ffi::F16)

XLA_FFI_DEFINE_HANDLER_SYMBOL(MemloopPagedAttentionQ8, PagedAttentionQ8,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S8>>()
                                  .Arg<ffi::Buffer<ffi::S8>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int32_t>("window"));

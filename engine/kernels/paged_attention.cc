// Attention over a paged KV cache, read in place: out[B,T,H,hd] for queries q[B,T,H,hd] against
// each row's keys/values in the pools k, v [KVH, pages, page_size, hd] (f32, or f16 widened to f32
// in registers: half the bytes per step, as llama.cpp's default cache) through its block table
// [B, table_pages], causal by position (and within a sliding window when `window` > 0), as an
// XLA:CPU FFI custom call.
//
// Why: the XLA path gathers every page of a row into a dense copy per layer per step and then reads
// the copy, so at 3-4k tokens of context a decode step spends about as long copying keys and values
// as multiplying weights. Here each key and value is read once, from its page.
//
// How (flash-decoding): the keys of a row are cut into fixed chunks of kChunk absolute positions;
// one work item is (row, KV head, chunk) and keeps, for each of its query rows (the KV head's G query
// heads x T tokens), an online softmax over 16-key tiles: running max m, sum l and the weighted sum
// of values. The chunks of a query are then merged in chunk order. Work items spread over XLA's
// intra-op thread pool, so a single long row still uses every core.
//
// Batch invariance: the numbers of one query depend only on its own vector, position, keys and
// values: chunk and tile boundaries are absolute positions, each chunk is one thread's fixed
// sequence of operations, and the merge runs in chunk order. Neither the batch, the other rows,
// the number of query tokens nor the block table's width changes a query's result.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int64_t kChunk = 256;  // keys per work item (a multiple of kTile)
constexpr int64_t kTile = 16;    // keys per online-softmax update (one vector of scores)
constexpr int64_t kMaxHeadDim = 256;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// e^x for x <= 0 (lanes below -87.3 give ~0 and are masked by the callers): x = n ln2 + r, e^r by
// Cephes' degree-6 polynomial, scaled by 2^n.
inline __m512 Exp(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// 16 cache elements as f32.
inline __m512 Load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 Load16(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }

template <typename KV>
struct Problem {
  const float* q;
  const KV* k;
  const KV* v;
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

// Lane j = the sum of the lanes of d[j], for 16 vectors at once: halves, then quarters, then
// within 128-bit lanes, added pairwise (46 shuffles and adds instead of 16 horizontal sums).
inline __m512 Sum16(const __m512* d) {
  __m512 a[8], b[4], c[2];
  for (int i = 0; i < 8; ++i)
    a[i] = _mm512_add_ps(_mm512_shuffle_f32x4(d[2 * i], d[2 * i + 1], 0x44), _mm512_shuffle_f32x4(d[2 * i], d[2 * i + 1], 0xEE));
  for (int i = 0; i < 4; ++i)
    b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x88), _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xDD));
  for (int i = 0; i < 2; ++i)
    c[i] = _mm512_add_ps(_mm512_unpacklo_ps(b[2 * i], b[2 * i + 1]), _mm512_unpackhi_ps(b[2 * i], b[2 * i + 1]));
  const __m512 x = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(c[0]), _mm512_castps_pd(c[1]))),
                                 _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(c[0]), _mm512_castps_pd(c[1]))));
  // x's lane 4k + m holds d[4m + k].
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), x);
}

constexpr int64_t kRowBlock = 4;  // query rows that share each key and value load

// One chunk of one row's keys for one KV head, against all of the head's query rows. Each query
// row's arithmetic is the same whichever rows share its block.
template <typename KV>
void Chunk(const Problem<KV>& pr, int64_t b, int64_t kvh, int64_t c) {
  const int64_t hd = pr.hd, nv = hd / 16, base = pr.Part(b, kvh, c);
  float* m = pr.part_m + base;
  float* l = pr.part_l + base;
  float* acc = pr.part_acc + base * hd;
  for (int64_t r = 0; r < pr.rows; ++r) {
    m[r] = kNegInf;
    l[r] = 0.0f;
  }
  std::fill(acc, acc + pr.rows * hd, 0.0f);
  const int64_t c0 = c * kChunk, c1 = c0 + kChunk;
  const int64_t pool_head = kvh * pr.pages * pr.page_size * hd;
  const int32_t* table = pr.tables + b * pr.table_pages;
  const int64_t last_slot = pr.table_pages * pr.page_size - 1;
  const KV* kp[kTile];
  const KV* vp[kTile];
  __m512 dots[kRowBlock][kTile];
  alignas(64) float pw[kRowBlock][kTile];
  for (int64_t j0 = c0; j0 < c1; j0 += kTile) {
    bool located = false;
    for (int64_t r0 = 0; r0 < pr.rows; r0 += kRowBlock) {
      // The block's rows that see a key of this tile, and which keys.
      int64_t rs[kRowBlock];
      __mmask16 visible[kRowBlock];
      int64_t n = 0;
      for (int64_t r = r0; r < std::min(pr.rows, r0 + kRowBlock); ++r) {
        const int64_t p = pr.pos[b * pr.tokens + r / pr.group], lo = pr.Low(p);
        if (p < j0 || lo >= j0 + kTile) continue;
        rs[n] = r;
        visible[n++] = static_cast<__mmask16>(
            ((p - j0 >= kTile - 1) ? 0xFFFFu : ((1u << (p - j0 + 1)) - 1u)) &
            ((lo <= j0) ? 0xFFFFu : static_cast<uint32_t>(0xFFFFu << (lo - j0))));
      }
      if (n == 0) continue;
      if (!located) {
        for (int64_t j = 0; j < kTile; ++j) {
          const int64_t slot = std::min(j0 + j, last_slot);  // slots past the table are masked
          const int64_t at = pool_head + (int64_t{table[slot / pr.page_size]} * pr.page_size + slot % pr.page_size) * hd;
          kp[j] = pr.k + at;
          vp[j] = pr.v + at;
        }
        located = true;
      }
      const float* qr[kRowBlock];
      for (int64_t i = 0; i < n; ++i) qr[i] = pr.Query(b, rs[i], kvh);
      for (int64_t j = 0; j < kTile; ++j) {
        for (int64_t i = 0; i < n; ++i) dots[i][j] = _mm512_mul_ps(Load16(kp[j]), _mm512_loadu_ps(qr[i]));
        for (int64_t x = 1; x < nv; ++x) {
          const __m512 kx = Load16(kp[j] + 16 * x);
          for (int64_t i = 0; i < n; ++i) dots[i][j] = _mm512_fmadd_ps(kx, _mm512_loadu_ps(qr[i] + 16 * x), dots[i][j]);
        }
      }
      float alpha[kRowBlock];
      for (int64_t i = 0; i < n; ++i) {
        const int64_t r = rs[i];
        const __m512 sv = _mm512_mask_mov_ps(_mm512_set1_ps(kNegInf), visible[i],
                                             _mm512_mul_ps(Sum16(dots[i]), _mm512_set1_ps(pr.scale)));
        const float m_new = std::max(m[r], _mm512_mask_reduce_max_ps(visible[i], sv));
        alpha[i] = std::exp(m[r] - m_new);  // 0 on the first visible tile (m = -inf)
        const __m512 pv = _mm512_maskz_mov_ps(visible[i], Exp(_mm512_sub_ps(sv, _mm512_set1_ps(m_new))));
        l[r] = l[r] * alpha[i] + _mm512_reduce_add_ps(pv);
        m[r] = m_new;
        _mm512_store_ps(pw[i], pv);
      }
      __mmask16 any = 0;
      for (int64_t i = 0; i < n; ++i) any |= visible[i];
      for (int64_t x = 0; x < nv; ++x) {
        __m512 o[kRowBlock];
        for (int64_t i = 0; i < n; ++i) o[i] = _mm512_mul_ps(_mm512_loadu_ps(acc + rs[i] * hd + 16 * x), _mm512_set1_ps(alpha[i]));
        for (int64_t j = 0; j < kTile; ++j) {
          if (!((any >> j) & 1)) continue;  // never read a slot no row sees
          const __m512 vx = Load16(vp[j] + 16 * x);
          for (int64_t i = 0; i < n; ++i) o[i] = _mm512_fmadd_ps(_mm512_set1_ps(pw[i][j]), vx, o[i]);
        }
        for (int64_t i = 0; i < n; ++i) _mm512_storeu_ps(acc + rs[i] * hd + 16 * x, o[i]);
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
  __m512 o[kMaxHeadDim / 16];
  for (int64_t i = 0; i < nv; ++i) o[i] = _mm512_setzero_ps();
  float total = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t at = pr.Part(b, kvh, c) + r;
    if (!(pr.part_l[at] > 0.0f)) continue;
    const float w = std::exp(pr.part_m[at] - top);
    total += pr.part_l[at] * w;
    const __m512 wv = _mm512_set1_ps(w);
    const float* a = pr.part_acc + at * hd;
    for (int64_t i = 0; i < nv; ++i) o[i] = _mm512_fmadd_ps(_mm512_loadu_ps(a + 16 * i), wv, o[i]);
  }
  float* dst = pr.out + ((b * pr.tokens + t) * pr.heads + h) * hd;
  const __m512 inv = _mm512_set1_ps(total > 0.0f ? 1.0f / total : 0.0f);
  for (int64_t i = 0; i < nv; ++i) _mm512_storeu_ps(dst + 16 * i, _mm512_mul_ps(o[i], inv));
}

// Runs work(0 .. n-1) on the calling thread and the pool; returns when all are done. The calling
// thread takes work too and waits only for items other threads have started.
template <typename F>
void Parallel(ffi::ThreadPool& pool, int64_t n, F work) {
  struct Shared {
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
  };
  auto shared = std::make_shared<Shared>();
  auto run = [shared, n, work] {
    for (int64_t i; (i = shared->next.fetch_add(1)) < n;) {
      work(i);
      shared->done.fetch_add(1, std::memory_order_release);
    }
  };
  const int64_t helpers = std::min<int64_t>(std::max<int64_t>(1, pool.num_threads()), n) - 1;
  for (int64_t t = 0; t < helpers; ++t) pool.Schedule([run] { run(); });
  run();
  while (shared->done.load(std::memory_order_acquire) < n) _mm_pause();
}

template <ffi::DataType D>
ffi::Error PagedAttention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<D> k, ffi::Buffer<D> v,
                          ffi::Buffer<ffi::S32> tables, ffi::Buffer<ffi::S32> positions,
                          ffi::ResultBuffer<ffi::F32> out, int32_t window) {
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
  for (int64_t b = 0; b < pr.batch; ++b) {
    int64_t far = 0;
    for (int64_t t = 0; t < pr.tokens; ++t) {
      const int64_t p = pr.pos[b * pr.tokens + t];
      if (p < 0 || p >= slots)
        return ffi::Error::InvalidArgument("memloop_paged_attention: a position lies outside its row's block table");
      far = std::max(far, p);
    }
    chunks[b] = far / kChunk + 1;
    pr.max_chunks = std::max(pr.max_chunks, chunks[b]);
  }
  for (int64_t i = 0; i < pr.batch * pr.table_pages; ++i)
    if (pr.tables[i] < 0 || pr.tables[i] >= pr.pages)
      return ffi::Error::InvalidArgument("memloop_paged_attention: a block table names a page outside the pool");
  const int64_t parts = pr.batch * pr.kv_heads * pr.max_chunks * pr.rows;
  std::vector<float> part_m(parts), part_l(parts), part_acc(parts * pr.hd);
  pr.part_m = part_m.data();
  pr.part_l = part_l.data();
  pr.part_acc = part_acc.data();

  std::vector<int64_t> items;  // (b, kvh, c) packed; every chunk of every row and KV head
  for (int64_t b = 0; b < pr.batch; ++b)
    for (int64_t h = 0; h < pr.kv_heads; ++h)
      for (int64_t c = 0; c < chunks[b]; ++c) items.push_back((b * pr.kv_heads + h) * pr.max_chunks + c);
  const Problem<KV>* p = &pr;
  const int64_t* it = items.data();
  Parallel(pool, static_cast<int64_t>(items.size()), [p, it](int64_t i) {
    const int64_t x = it[i], c = x % p->max_chunks, bh = x / p->max_chunks;
    Chunk(*p, bh / p->kv_heads, bh % p->kv_heads, c);
  });
  const int64_t* nc = chunks.data();
  Parallel(pool, pr.batch * pr.tokens, [p, nc](int64_t i) {
    const int64_t b = i / p->tokens, t = i % p->tokens;
    for (int64_t h = 0; h < p->heads; ++h) Merge(*p, b, t, h, nc[b]);
  });
  return ffi::Error::Success();
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

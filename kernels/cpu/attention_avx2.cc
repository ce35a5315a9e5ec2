// AVX2 paged attention over (token, q head) items, exact two-pass softmax.
//
// Fixed order per item (depends only on the item's own q, keys and values, so it is
// batch-invariant and thread-count-invariant):
//   s_j  = dot(q, k_j): one 8-lane FMA accumulator over head_dim, Hsum tree, scalar
//          FMA tail (4 keys at a time via Hsum4, leftovers one by one: same value);
//   s_j *= scale;  m = max_j s_j;  e_j = Exp(s_j - m);  sum = 8-lane sum over j, Hsum;
//   with sinks: m = max(m, S_h), then sum += Exp(S_h - m);
//   out[d] = (sum_j e_j * v_j[d], FMA in increasing j) / sum.
// Cost per item ~ 2 * keys * head_dim FMAs; K/V rows are read through the block table.
#include <immintrin.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/simd_avx2.h"

namespace tessera::kernels::cpu::internal {
namespace {

using avx2::Fma;

thread_local std::vector<float> t_scores;
thread_local std::vector<int64_t> t_slots;

// Raw dots of H query heads (rows hd apart) with 4 key rows, into s[h * lds + i].
// Each key row is loaded once per 8 dims for all H heads (register blocking).
template <int H>
void Dots4(const float* q, const float* base, const int64_t* slots, int64_t hd, float* s,
           int64_t lds) {
  const float* k[4];
  for (int i = 0; i < 4; ++i) k[i] = base + slots[i];
  __m256 acc[H][4];
#pragma GCC unroll 3
  for (int h = 0; h < H; ++h)
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) acc[h][i] = _mm256_setzero_ps();
  const int64_t hd8 = hd & ~int64_t{7};
  for (int64_t d = 0; d < hd8; d += 8) {
    __m256 qv[H];
#pragma GCC unroll 3
    for (int h = 0; h < H; ++h) qv[h] = _mm256_loadu_ps(q + h * hd + d);
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      const __m256 kv = _mm256_loadu_ps(k[i] + d);
#pragma GCC unroll 3
      for (int h = 0; h < H; ++h) acc[h][i] = _mm256_fmadd_ps(qv[h], kv, acc[h][i]);
    }
  }
#pragma GCC unroll 3
  for (int h = 0; h < H; ++h) {
    float* sh = s + h * lds;
    _mm_storeu_ps(sh, avx2::Hsum4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]));
    const float* qh = q + h * hd;
    for (int i = 0; i < 4; ++i) {
      for (int64_t d = hd8; d < hd; ++d) sh[i] = Fma(qh[d], k[i][d], sh[i]);
    }
  }
}

float Dot1(const float* q, const float* k, int64_t hd) {
  __m256 acc = _mm256_setzero_ps();
  const int64_t hd8 = hd & ~int64_t{7};
  for (int64_t d = 0; d < hd8; d += 8) {
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d), acc);
  }
  float s = avx2::Hsum(acc);
  for (int64_t d = hd8; d < hd; ++d) s = Fma(q[d], k[d], s);
  return s;
}

// Raw scores -> softmax numerators in place: s *= scale (its own pass, so it cannot
// be contracted into an FMA with the max subtraction); with softcap > 0,
// s = softcap * Tanh(s / softcap) (the [n, npad) padding lanes run through it too and
// are then overwritten); m = max; e = Exp(s - m) with the padding up to npad at
// -inf -> 0; returns sum(e) (8 lanes over j, Hsum tree).
float Softmax(float* sc, int64_t n, int64_t npad, float scale, float softcap, const float* sink) {
  const __m256 sv = _mm256_set1_ps(scale);
  const int64_t n8 = n & ~int64_t{7};
  int64_t j = 0;
  for (; j < n8; j += 8) _mm256_storeu_ps(sc + j, _mm256_mul_ps(_mm256_loadu_ps(sc + j), sv));
  for (; j < n; ++j) sc[j] = sc[j] * scale;
  if (softcap > 0.0f) {
    const __m256 cv = _mm256_set1_ps(softcap);
    for (j = n; j < npad; ++j) sc[j] = 0.0f;
    for (j = 0; j < npad; j += 8) {
      const __m256 s = _mm256_loadu_ps(sc + j);
      _mm256_storeu_ps(sc + j, _mm256_mul_ps(cv, avx2::Tanh(_mm256_div_ps(s, cv))));
    }
  }
  for (j = n; j < npad; ++j) sc[j] = -std::numeric_limits<float>::infinity();
  __m256 mv = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  for (j = 0; j < npad; j += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(sc + j));
  const float mx = avx2::HmaxPs(mv);
  const __m256 m = _mm256_set1_ps(sink != nullptr ? std::max(mx, *sink) : mx);
  __m256 sum = _mm256_setzero_ps();
  for (j = 0; j < npad; j += 8) {
    const __m256 e = avx2::Exp(_mm256_sub_ps(_mm256_loadu_ps(sc + j), m));
    _mm256_storeu_ps(sc + j, e);
    sum = _mm256_add_ps(sum, e);
  }
  const float keys = avx2::Hsum(sum);
  if (sink == nullptr) return keys;
  // The sink's e^(S - m), through the same vector Exp as the keys, after their sum.
  return keys + _mm256_cvtss_f32(avx2::Exp(_mm256_sub_ps(_mm256_set1_ps(*sink), m)));
}

// For H heads (scores lde apart, running sums ldacc apart): acc_h[d0 .. d0 + 8*NV) +=
// e_h[j] * v_j[...] for j in [j0, j1), FMA in increasing j. Each V vector is loaded
// once for the H heads. The sums round-trip through memory between calls (exact).
template <int H, int NV>
void AccumulateV(const float* e, int64_t lde, int64_t j0, int64_t j1, const float* base,
                 const int64_t* slots, int64_t d0, float* acc_mem, int64_t ldacc) {
  __m256 acc[H][NV];
#pragma GCC unroll 3
  for (int h = 0; h < H; ++h)
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) acc[h][c] = _mm256_loadu_ps(acc_mem + h * ldacc + d0 + 8 * c);
  for (int64_t j = j0; j < j1; ++j) {
    __m256 ev[H];
#pragma GCC unroll 3
    for (int h = 0; h < H; ++h) ev[h] = _mm256_broadcast_ss(e + h * lde + j);
    const float* v = base + slots[j] + d0;
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) {
      const __m256 vv = _mm256_loadu_ps(v + 8 * c);
#pragma GCC unroll 3
      for (int h = 0; h < H; ++h) acc[h][c] = _mm256_fmadd_ps(ev[h], vv, acc[h][c]);
    }
  }
#pragma GCC unroll 3
  for (int h = 0; h < H; ++h)
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) _mm256_storeu_ps(acc_mem + h * ldacc + d0 + 8 * c, acc[h][c]);
}

using AccumulateVFn = void (*)(const float*, int64_t, int64_t, int64_t, const float*,
                               const int64_t*, int64_t, float*, int64_t);
constexpr AccumulateVFn kAccumulateV[3][4] = {
    {&AccumulateV<1, 1>, &AccumulateV<1, 2>, &AccumulateV<1, 3>, &AccumulateV<1, 4>},
    {&AccumulateV<2, 1>, &AccumulateV<2, 2>, &AccumulateV<2, 3>, &AccumulateV<2, 4>},
    {&AccumulateV<3, 1>, &AccumulateV<3, 2>, &AccumulateV<3, 3>, &AccumulateV<3, 4>}};

using DotsFn = void (*)(const float*, const float*, const int64_t*, int64_t, float*, int64_t);
constexpr DotsFn kDots4[3] = {&Dots4<1>, &Dots4<2>, &Dots4<3>};

constexpr int64_t kKeyBlock = 32;  // V rows of one block stay in L1 across a GQA group

thread_local std::vector<float> t_acc;   // running P.V sums, g_count x head_dim
thread_local std::vector<float> t_sums;  // softmax denominators, g_count

}  // namespace

// Items run in groups: the consecutive q heads of one token that share a kv head
// (GQA) walk the keys together, so each K/V row is read from memory once per group
// and then from L1. Grouping only changes the loop order across heads, never the
// per-head order of operations, so results do not depend on the item range.
void AttentionItemsAvx2(const PagedAttentionArgs& a, int64_t begin, int64_t end) {
  const int64_t hd = a.head_dim, bs = a.block_size, qh = a.num_q_heads;
  const int64_t group = qh / a.num_kv_heads;
  const int64_t row = a.num_kv_heads * hd;  // floats per cache slot
  const int64_t hd8 = hd & ~int64_t{7};
  int64_t slots_token = -1;  // token whose key slots are in t_slots
  int64_t lo = 0, n = 0;
  for (int64_t item = begin; item < end;) {
    const int64_t t = item / qh, h0 = item % qh, kvh = h0 / group;
    const int64_t g_count = std::min({(kvh + 1) * group, qh, h0 + (end - item)}) - h0;
    float* out = a.out + item * hd;
    item += g_count;
    const int64_t p = a.positions[t];
    if (p < 0) {
      std::fill(out, out + g_count * hd, 0.0f);
      continue;
    }
    if (t != slots_token) {  // slot offsets of this token's keys, shared by its heads
      slots_token = t;
      lo = FirstKey(p, a.sliding_window);
      n = p - lo + 1;
      const int32_t* table = a.block_tables + a.token_to_seq[t] * a.max_blocks_per_seq;
      if (t_slots.size() < static_cast<size_t>(n)) t_slots.resize(n);
      for (int64_t j = 0; j < n; ++j) {
        const int64_t pos = lo + j;
        t_slots[j] = (static_cast<int64_t>(table[pos / bs]) * bs + pos % bs) * row;
      }
    }
    const int64_t* slots = t_slots.data();
    const float* kb = a.k_cache + kvh * hd;
    const float* vb = a.v_cache + kvh * hd;
    const float* q = a.q + t * a.q_stride + h0 * hd;
    const int64_t npad = (n + 7) & ~int64_t{7};
    if (t_scores.size() < static_cast<size_t>(g_count * npad)) t_scores.resize(g_count * npad);
    if (t_acc.size() < static_cast<size_t>(g_count * hd)) t_acc.resize(g_count * hd);
    float* sc = t_scores.data();
    float* acc = t_acc.data();

    // Heads in register-blocked sub-groups of up to 3 (each K/V vector loaded once per
    // sub-group); keys 4 at a time for the dots, kKeyBlock at a time for the values.
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
      for (int64_t g = 0; g < g_count; g += 3) {
        const int64_t hn = std::min<int64_t>(3, g_count - g);
        kDots4[hn - 1](q + g * hd, kb, slots + j, hd, sc + g * npad + j, npad);
      }
    }
    for (; j < n; ++j) {
      for (int64_t g = 0; g < g_count; ++g) sc[g * npad + j] = Dot1(q + g * hd, kb + slots[j], hd);
    }
    if (t_sums.size() < static_cast<size_t>(g_count)) t_sums.resize(g_count);
    float* sum = t_sums.data();
    for (int64_t g = 0; g < g_count; ++g) {
      sum[g] = Softmax(sc + g * npad, n, npad, a.scale, a.softcap, a.sinks ? a.sinks + h0 + g : nullptr);
    }

    std::fill(acc, acc + g_count * hd, 0.0f);
    for (int64_t j0 = 0; j0 < n; j0 += kKeyBlock) {
      const int64_t j1 = std::min(n, j0 + kKeyBlock);
      for (int64_t g = 0; g < g_count; g += 3) {
        const int64_t hn = std::min<int64_t>(3, g_count - g);
        for (int64_t d0 = 0; d0 < hd8; d0 += 32) {
          const int64_t nv = std::min<int64_t>(4, (hd8 - d0) / 8);
          kAccumulateV[hn - 1][nv - 1](sc + g * npad, npad, j0, j1, vb, slots, d0, acc + g * hd,
                                       hd);
        }
      }
      for (int64_t g = 0; g < g_count; ++g) {
        const float* e = sc + g * npad;
        float* ag = acc + g * hd;
        for (int64_t d = hd8; d < hd; ++d) {
          float s = ag[d];
          for (j = j0; j < j1; ++j) s = Fma(e[j], vb[slots[j] + d], s);
          ag[d] = s;
        }
      }
    }
    for (int64_t g = 0; g < g_count; ++g) {
      const __m256 sv = _mm256_set1_ps(sum[g]);
      const float* ag = acc + g * hd;
      float* og = out + g * hd;
      int64_t d = 0;
      for (; d < hd8; d += 8) _mm256_storeu_ps(og + d, _mm256_div_ps(_mm256_loadu_ps(ag + d), sv));
      for (; d < hd; ++d) og[d] = ag[d] / sum[g];
    }
  }
}

}  // namespace tessera::kernels::cpu::internal

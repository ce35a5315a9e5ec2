#include "kernels/cpu/mla_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/ops.h"

namespace tessera::kernels::cpu {

void RopeInterleaved(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t offset,
                     int64_t x_stride, int64_t rot_dim, const int32_t* positions, const float* cos_sin) {
  const int64_t half = rot_dim / 2;
  for (int64_t t = 0; t < tokens; ++t) {
    if (positions[t] < 0) continue;
    const float* cs = cos_sin + static_cast<int64_t>(positions[t]) * rot_dim;
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + t * x_stride + h * head_dim + offset;
      for (int64_t i = 0; i < half; ++i) {
        const float x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = x0 * cs[i] - x1 * cs[half + i];
        v[2 * i + 1] = x1 * cs[i] + x0 * cs[half + i];
      }
    }
  }
}

namespace {

// One (token, head): softmax over the causal latent rows of its sequence, then the
// probability-weighted sum of their first r values into o (r floats).
void LatentItem(const MlaAttentionArgs& a, int64_t t, int64_t h, std::vector<float>* scores, float* o) {
  const int64_t row = a.r + a.rope;
  std::fill(o, o + a.r, 0.0f);
  const int64_t pos = a.positions[t];
  if (pos < 0) return;
  const float* q = a.q_hat + (t * a.num_heads + h) * row;
  const int32_t* table = a.block_tables + static_cast<int64_t>(a.token_to_seq[t]) * a.max_blocks_per_seq;
  auto key = [&](int64_t j) {
    return a.cache + (static_cast<int64_t>(table[j / a.block_size]) * a.block_size + j % a.block_size) * row;
  };
  scores->resize(static_cast<size_t>(pos + 1));
  float mx = -INFINITY;
  for (int64_t j = 0; j <= pos; ++j) {
    const float* k = key(j);
    float s = 0.0f;
    for (int64_t i = 0; i < row; ++i) s += q[i] * k[i];
    s *= a.scale;
    (*scores)[j] = s;
    mx = std::max(mx, s);
  }
  float sum = 0.0f;
  for (int64_t j = 0; j <= pos; ++j) {
    (*scores)[j] = std::exp((*scores)[j] - mx);
    sum += (*scores)[j];
  }
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j <= pos; ++j) {
    const float p = (*scores)[j] * inv;
    const float* c = key(j);
    for (int64_t i = 0; i < a.r; ++i) o[i] += p * c[i];
  }
}

}  // namespace

void MlaAttention(const MlaAttentionArgs& a, ThreadPool* pool) {
  const int64_t T = a.num_tokens, H = a.num_heads, qd = a.nope + a.rope, row = a.r + a.rope;
  if (T <= 0) return;
  RopeInterleaved(a.q, T, H, qd, a.nope, H * qd, a.rope, a.positions, a.cos_sin);
  RopeInterleaved(a.latent, T, 1, row, a.r, row, a.rope, a.positions, a.cos_sin);
  for (int64_t t = 0; t < T; ++t) {
    if (a.slot_mapping[t] >= 0) std::memcpy(a.cache + a.slot_mapping[t] * row, a.latent + t * row, row * 4);
  }
  // q_hat[t, h] = [k_b[h] q_nope[t, h] | q_rope[t, h]]: one Linear per head over
  // that head's contiguous nope rows.
  for (int64_t h = 0; h < H; ++h) {
    float* qn = a.q_nope + h * T * a.nope;
    for (int64_t t = 0; t < T; ++t) std::memcpy(qn + t * a.nope, a.q + t * H * qd + h * qd, a.nope * 4);
    Linear(qn, T, a.nope, a.k_b[h], a.k_b_type, a.r, nullptr, a.q_hat + h * row, H * row, pool);
    for (int64_t t = 0; t < T; ++t) {
      std::memcpy(a.q_hat + (t * H + h) * row + a.r, a.q + t * H * qd + h * qd + a.nope, a.rope * 4);
    }
  }
  auto items = [&](int64_t b, int64_t e) {
    std::vector<float> scores;
    for (int64_t it = b; it < e; ++it) {
      const int64_t t = it / H, h = it % H;
      LatentItem(a, t, h, &scores, a.o_hat + (h * T + t) * a.r);
    }
  };
  if (pool != nullptr && pool->num_threads() > 1 && T * H > 1) {
    pool->ParallelFor(T * H, 1, items);
  } else {
    items(0, T * H);
  }
  for (int64_t h = 0; h < H; ++h) {
    Linear(a.o_hat + h * T * a.r, T, a.r, a.v_b[h], a.v_b_type, a.v_dim, nullptr, a.out + h * a.v_dim,
           H * a.v_dim, pool);
  }
}

}  // namespace tessera::kernels::cpu

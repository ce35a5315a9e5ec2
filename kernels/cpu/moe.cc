// CPU MoE kernels (see moe.h). Plain C++: the arithmetic that matters runs in
// Linear/SiluMul (ops.h), which dispatch to the AVX2/AVX-512 paths themselves.
#include "kernels/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "kernels/cpu/ops.h"

namespace tessera::kernels::cpu {
namespace {

// Column tile of one expert matrix handed to one thread: a multiple of the
// Linear kernels' register tiles (3, 8) and VNNI groups (16, 32).
constexpr int64_t kTileRows = 96;
// Below this much work (~ weight bytes + MACs / 4) a call runs on the caller alone.
constexpr int64_t kMinParallelUnits = int64_t{1} << 17;

template <class Fn>
void ForRange(ThreadPool* pool, int64_t n, bool parallel, const Fn& fn) {
  if (n <= 0) return;
  if (pool == nullptr || pool->num_threads() <= 1 || !parallel) {
    fn(int64_t{0}, n);
    return;
  }
  pool->ParallelFor(n, 1, [&](int64_t b, int64_t e) { fn(b, e); });
}

// One tile: rows [r0, r1) of matrix `which` of expert `e`.
struct Tile {
  int32_t e, which;
  int64_t r0, r1;
};

// The k largest of v[0..n) in descending order to id/w, ties to the lower index;
// `taken` is n bytes of scratch. Strictly greater wins, so NaN never does and a NaN
// row still yields k distinct ids (the lowest untaken ones).
void SelectTopK(const float* v, int64_t n, int64_t k, std::vector<char>* taken, int32_t* id, float* w) {
  std::fill(taken->begin(), taken->end(), 0);
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    for (int64_t e = 0; e < n; ++e) {
      if (!(*taken)[e] && (best < 0 || v[e] > v[best])) best = e;
    }
    (*taken)[best] = 1;
    id[j] = static_cast<int32_t>(best);
    w[j] = v[best];
  }
}

}  // namespace

void MoeRoute(const float* logits, int64_t tokens, const MoeRouteArgs& a, int32_t* ids, float* weights) {
  const int64_t n = a.num_experts, k = a.top_k;
  const bool grouped = a.groups != MoeGroupScore::kNone;
  const int64_t group_size = grouped ? n / a.n_group : n;
  std::vector<float> p(static_cast<size_t>(n)), s(static_cast<size_t>(n)), chosen(static_cast<size_t>(k));
  std::vector<char> taken(static_cast<size_t>(n)), group_taken(static_cast<size_t>(a.n_group));
  std::vector<float> group_score(static_cast<size_t>(a.n_group)), best_groups(static_cast<size_t>(a.topk_group));
  std::vector<int32_t> group_ids(static_cast<size_t>(a.topk_group));
  int32_t two_ids[2];
  float two[2];
  std::vector<char> two_taken(static_cast<size_t>(group_size));
  for (int64_t t = 0; t < tokens; ++t) {
    const float* l = logits + t * n;
    if (a.sigmoid) {
      for (int64_t e = 0; e < n; ++e) p[e] = 1.0f / (1.0f + std::exp(-l[e]));
    } else {
      float mx = l[0];
      for (int64_t e = 1; e < n; ++e) mx = std::max(mx, l[e]);
      float sum = 0.0f;
      for (int64_t e = 0; e < n; ++e) {
        p[e] = std::exp(l[e] - mx);
        sum += p[e];
      }
      for (int64_t e = 0; e < n; ++e) p[e] /= sum;
    }
    for (int64_t e = 0; e < n; ++e) s[e] = a.selection_bias ? p[e] + a.selection_bias[e] : p[e];
    if (grouped) {
      for (int64_t g = 0; g < a.n_group; ++g) {
        const float* sg = s.data() + g * group_size;
        if (a.groups == MoeGroupScore::kMax) {
          float m = sg[0];
          for (int64_t e = 1; e < group_size; ++e) m = std::max(m, sg[e]);
          group_score[g] = m;
        } else {  // the two largest, the larger first (group_size >= 2, checked at load)
          SelectTopK(sg, group_size, 2, &two_taken, two_ids, two);
          group_score[g] = two[0] + two[1];
        }
      }
      SelectTopK(group_score.data(), a.n_group, a.topk_group, &group_taken, group_ids.data(), best_groups.data());
      std::fill(group_taken.begin(), group_taken.end(), 0);
      for (int32_t g : group_ids) group_taken[g] = 1;
      for (int64_t e = 0; e < n; ++e) {
        if (!group_taken[e / group_size]) s[e] = -std::numeric_limits<float>::infinity();
      }
    }
    int32_t* id = ids + t * k;
    float* w = weights + t * k;
    SelectTopK(s.data(), n, k, &taken, id, chosen.data());
    for (int64_t j = 0; j < k; ++j) w[j] = p[id[j]];
    if (a.renormalize) {
      float sum = 0.0f;
      for (int64_t j = 0; j < k; ++j) sum += w[j];
      sum += 1e-20f;  // DeepSeek's guard; below the last bit of any softmax sum
      for (int64_t j = 0; j < k; ++j) w[j] /= sum;
    }
  }
}

void MoeRoute(const float* logits, int64_t tokens, int64_t num_experts, int64_t top_k, bool renormalize,
              int32_t* ids, float* weights) {
  MoeRouteArgs a;
  a.num_experts = num_experts;
  a.top_k = top_k;
  a.renormalize = renormalize;
  MoeRoute(logits, tokens, a, ids, weights);
}

void MoeRouteSoftmaxTopK(const float* logits, int64_t tokens, int64_t num_experts, int64_t top_k, int32_t* ids,
                         float* weights) {
  std::vector<char> taken(static_cast<size_t>(num_experts));
  for (int64_t t = 0; t < tokens; ++t) {
    float* w = weights + t * top_k;
    SelectTopK(logits + t * num_experts, num_experts, top_k, &taken, ids + t * top_k, w);
    const float mx = w[0];  // the largest selected logit
    float sum = 0.0f;
    for (int64_t j = 0; j < top_k; ++j) {
      w[j] = std::exp(w[j] - mx);
      sum += w[j];
    }
    for (int64_t j = 0; j < top_k; ++j) w[j] /= sum;
  }
}

void AddTo(float* out, const float* x, int64_t n, ThreadPool* pool) {
  ForRange(pool, (n + 4095) / 4096, n >= kMinParallelUnits, [&](int64_t b, int64_t e) {
    for (int64_t i = b * 4096; i < std::min(n, e * 4096); ++i) out[i] += x[i];
  });
}

void SwigluOaiMul(const float* gate_up, int64_t rows, int64_t inter, float alpha, float limit, float* out,
                  ThreadPool* pool) {
  ForRange(pool, rows, rows * inter >= kMinParallelUnits, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* gr = gate_up + r * 2 * inter;
      const float* ur = gr + inter;
      float* o = out + r * inter;
      for (int64_t i = 0; i < inter; ++i) {
        const float g = std::min(gr[i], limit);
        const float u = std::clamp(ur[i], -limit, limit);
        const float glu = g * (1.0f / (1.0f + std::exp(-(alpha * g))));
        o[i] = (u + 1.0f) * glu;
      }
    }
  });
}

void MoeCountExperts(const int32_t* ids, int64_t n, int64_t num_experts, int64_t* counts) {
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] >= 0 && ids[i] < num_experts) ++counts[ids[i]];
  }
}

void SigmoidGateAdd(float* out, const float* shared, const float* gate_logits, int64_t rows, int64_t dim,
                    ThreadPool* pool) {
  ForRange(pool, rows, rows * dim >= kMinParallelUnits, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float g = 1.0f / (1.0f + std::exp(-gate_logits[r]));
      float* o = out + r * dim;
      const float* s = shared + r * dim;
      for (int64_t i = 0; i < dim; ++i) o[i] += g * s[i];
    }
  });
}

void MoeExperts(const MoeExpertsArgs& a, MoeScratch* s, ThreadPool* pool) {
  const int64_t n = a.tokens * a.top_k, h = a.hidden, inter = a.inter, num_e = a.num_experts;
  if (a.tokens <= 0) return;
  // Group (token, slot) pairs by expert, in pair order within an expert.
  s->offsets.assign(static_cast<size_t>(num_e + 1), 0);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t e = a.topk_ids[i];
    if (e < 0 || e >= num_e) {
      std::fprintf(stderr, "tessera kernels: MoeExperts: expert id %d out of range [0, %lld)\n", e,
                   static_cast<long long>(num_e));
      std::abort();
    }
    ++s->offsets[e + 1];
  }
  for (int64_t e = 0; e < num_e; ++e) s->offsets[e + 1] += s->offsets[e];
  s->order.resize(static_cast<size_t>(n));
  s->pos.resize(static_cast<size_t>(n));
  {
    std::vector<int32_t> fill(s->offsets.begin(), s->offsets.end() - 1);
    for (int64_t i = 0; i < n; ++i) {
      const int32_t p = fill[a.topk_ids[i]]++;
      s->order[p] = static_cast<int32_t>(i);
      s->pos[i] = p;
    }
  }
  s->xg.resize(static_cast<size_t>(n * h));
  s->gate_up.resize(static_cast<size_t>(n * 2 * inter));
  s->act.resize(static_cast<size_t>(n * inter));
  s->y.resize(static_cast<size_t>(n * h));
  float* xg = s->xg.data();
  float* gu = s->gate_up.data();
  float* act = s->act.data();
  float* y = s->y.data();
  const bool big = n * h * 4 >= kMinParallelUnits;
  ForRange(pool, n, big, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      std::memcpy(xg + p * h, a.x + (s->order[p] / a.top_k) * h, static_cast<size_t>(h) * sizeof(float));
    }
  });

  // Gate and up projections: tiles of every active expert's two matrices.
  std::vector<Tile> tiles;
  int64_t units = 0;
  for (int64_t e = 0; e < num_e; ++e) {
    const int64_t m = s->offsets[e + 1] - s->offsets[e];
    if (m == 0) continue;
    for (int32_t which = 0; which < 2; ++which) {
      for (int64_t r0 = 0; r0 < inter; r0 += kTileRows) {
        tiles.push_back({static_cast<int32_t>(e), which, r0, std::min(inter, r0 + kTileRows)});
      }
    }
    units += inter * (DTypeRowBytes(a.gate_dtype, h) + DTypeRowBytes(a.up_dtype, h) + 2 * m * h / 4);
  }
  const int64_t gate_row_bytes = DTypeRowBytes(a.gate_dtype, h), up_row_bytes = DTypeRowBytes(a.up_dtype, h);
  ForRange(pool, static_cast<int64_t>(tiles.size()), units >= kMinParallelUnits, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const Tile& t = tiles[i];
      const int64_t off = s->offsets[t.e], m = s->offsets[t.e + 1] - off;
      const bool gate = t.which == 0;
      const auto* w = static_cast<const uint8_t*>(gate ? a.gate[t.e] : a.up[t.e]);
      const DType type = gate ? a.gate_dtype : a.up_dtype;
      const float* const* biases = gate ? a.gate_bias : a.up_bias;
      const float* bias = biases != nullptr ? biases[t.e] + t.r0 : nullptr;
      Linear(xg + off * h, m, h, w + t.r0 * (gate ? gate_row_bytes : up_row_bytes), type, t.r1 - t.r0, bias,
             gu + off * 2 * inter + t.which * inter + t.r0, 2 * inter, nullptr);
    }
  });
  if (a.swiglu_oai) {
    SwigluOaiMul(gu, n, inter, a.swiglu_alpha, a.swiglu_limit, act, pool);
  } else {
    SiluMul(gu, n, inter, act, pool);
  }

  // Down projections: tiles of each active expert's [hidden, inter] matrix.
  tiles.clear();
  units = 0;
  for (int64_t e = 0; e < num_e; ++e) {
    const int64_t m = s->offsets[e + 1] - s->offsets[e];
    if (m == 0) continue;
    for (int64_t r0 = 0; r0 < h; r0 += kTileRows) {
      tiles.push_back({static_cast<int32_t>(e), 2, r0, std::min(h, r0 + kTileRows)});
    }
    units += h * (DTypeRowBytes(a.down_dtype, inter) + m * inter / 4);
  }
  const int64_t down_row_bytes = DTypeRowBytes(a.down_dtype, inter);
  ForRange(pool, static_cast<int64_t>(tiles.size()), units >= kMinParallelUnits, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const Tile& t = tiles[i];
      const int64_t off = s->offsets[t.e], m = s->offsets[t.e + 1] - off;
      const auto* w = static_cast<const uint8_t*>(a.down[t.e]);
      const float* bias = a.down_bias != nullptr ? a.down_bias[t.e] + t.r0 : nullptr;
      Linear(act + off * inter, m, inter, w + t.r0 * down_row_bytes, a.down_dtype, t.r1 - t.r0, bias,
             y + off * h + t.r0, h, nullptr);
    }
  });

  MoeCombine(y, s->pos.data(), a.topk_weights, a.tokens, a.top_k, h, a.out, big ? pool : nullptr);
}

void MoeCombine(const float* y, const int32_t* pos, const float* topk_weights, int64_t tokens, int64_t top_k,
                int64_t h, float* out, ThreadPool* pool) {
  ForRange(pool, tokens, pool != nullptr, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* o = out + t * h;
      const float* w = topk_weights + t * top_k;
      const float* y0 = y + static_cast<int64_t>(pos[t * top_k]) * h;
      for (int64_t i = 0; i < h; ++i) o[i] = w[0] * y0[i];
      for (int64_t j = 1; j < top_k; ++j) {
        const float* yj = y + static_cast<int64_t>(pos[t * top_k + j]) * h;
        for (int64_t i = 0; i < h; ++i) o[i] += w[j] * yj[i];
      }
    }
  });
}

}  // namespace tessera::kernels::cpu

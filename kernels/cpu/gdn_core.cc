// The Gated DeltaNet delta rule in grid-chunked (GC) form (gdn.h, README.md "Gated DeltaNet").
//
// Exactness argument. A call is cut into segments that never cross a chunk boundary
// (multiples of kGdnChunk in absolute positions). For each segment:
//  1. per row: k̂ (into the open-chunk buffer), q̂ and β (scratch), g (libm, one scalar
//     call per row and v-head) and Γ_r = Γ_{r-1} + g_r, with Γ_{r-1} read back from the
//     open buffer, so Γ has the same bits whichever call computed row r - 1;
//  2. per (sequence, v-head, column tile): RowStep for each row in order, then, when the
//     segment ends the chunk, ChunkEnd. RowStep reads only S at the chunk start and open
//     rows 0..r of this chunk, and every value it produces is one reduction in an order
//     fixed by (dk, r) alone (Dot's 8-lane tree, then ascending m; S sums in ascending i).
// Decode is a 1-row segment through the same two steps, so every split of a sequence into
// calls, any batch around it and any column tiling (thread count) give the same bits.
// The column loops run on the path UseAvx2() picks (gdn_internal.h): each path is
// self-consistent in this sense; the two agree to rounding.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/gdn.h"
#include "kernels/cpu/gdn_internal.h"
#include "kernels/cpu/ops.h"

namespace tessera::kernels::cpu {

void gdn::StateDotsScalar(const float* S, int64_t ld, int64_t dk, const float* k, const float* q, int64_t width,
                          float* sk, float* sq) {
  std::fill(sk, sk + width, 0.0f);
  std::fill(sq, sq + width, 0.0f);
  for (int64_t j = 0; j < dk; ++j) {
    const float* s = S + j * ld;
    for (int64_t c = 0; c < width; ++c) {
      sk[c] += s[c] * k[j];
      sq[c] += s[c] * q[j];
    }
  }
}

void gdn::LinCombScalar(float* y, const float* base, float s, const float* t, const float* coef,
                        const float* const* xs, int64_t nm, float post, int64_t width) {
  for (int64_t c = 0; c < width; ++c) {
    float acc = base ? base[c] + s * t[c] : s * t[c];
    for (int64_t m = 0; m < nm; ++m) acc += coef[m] * xs[m][c];
    y[c] = post * acc;
  }
}

namespace {

constexpr float kL2Eps = 1e-6f;  // HF's l2norm eps (llama.cpp's rms_norm_eps: the same value)

// Σ a[i] b[i] as 8 strided partial sums (lane j takes i ≡ j mod 8, ascending), reduced by
// the tree ((s0+s1)+(s2+s3)) + ((s4+s5)+(s6+s7)) of simd_avx2.h, so an 8-lane SIMD
// version can give the same bits; the tail (n mod 8) is added to the lanes the same way.
float Dot(const float* a, const float* b, int64_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < n; ++i) s[i & 7] += a[i] * b[i];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }  // torch's threshold

// Views of one open-chunk row.
struct OpenRow {
  float* khat;   // [Hk * dk]
  float* gamma;  // [Hv]
  float* u;      // [Hv * dv]
};

OpenRow Row(const GdnDims& d, float* open, int64_t position) {
  float* r = open + (position % kGdnChunk) * d.open_row_floats();
  return {r, r + d.k_heads * d.k_dim, r + d.k_heads * d.k_dim + d.v_heads};
}

// One call's segment of one sequence: positions pos0 .. pos0 + n - 1 inside one chunk,
// rows t0 .. t0 + n - 1 of the call.
struct Segment {
  const GdnSeq* seq;
  int64_t t0, pos0, n;
  float* qhat;  // [n, Hk * dk]
  float* beta;  // [n, Hv]
};

int64_t KHead(const GdnDims& d, int64_t h) {
  return d.v_heads_tiled ? h % d.k_heads : h / (d.v_heads / d.k_heads);
}

// Step 1 for row i of a segment: norms and gates, Γ as g for now (CumulateGamma adds).
void PrepareRow(const GdnDims& d, const GdnParams& p, const Segment& sg, int64_t i) {
  const int64_t kd = d.k_heads * d.k_dim, t = sg.t0 + i;
  const float* qkv = sg.seq->qkv + t * d.conv_channels();
  OpenRow row = Row(d, sg.seq->open, sg.pos0 + i);
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(d.k_dim));
  for (int64_t h = 0; h < d.k_heads; ++h) {
    const float* q = qkv + h * d.k_dim;
    const float* k = qkv + kd + h * d.k_dim;
    const float qinv = 1.0f / std::sqrt(Dot(q, q, d.k_dim) + kL2Eps);
    const float kinv = 1.0f / std::sqrt(Dot(k, k, d.k_dim) + kL2Eps);
    float* qh = sg.qhat + i * kd + h * d.k_dim;
    float* kh = row.khat + h * d.k_dim;
    for (int64_t j = 0; j < d.k_dim; ++j) {
      qh[j] = q[j] * qinv * q_scale;
      kh[j] = k[j] * kinv;
    }
  }
  const float* a = sg.seq->a + t * d.v_heads;
  const float* b = sg.seq->b + t * d.v_heads;
  for (int64_t h = 0; h < d.v_heads; ++h) {
    row.gamma[h] = -std::exp(p.a_log[h]) * Softplus(a[h] + p.dt_bias[h]);
    sg.beta[i * d.v_heads + h] = 1.0f / (1.0f + std::exp(-b[h]));
  }
}

// Γ_r = Γ_{r-1} + g_r in row order (row 0 of a chunk: Γ_0 = g_0).
void CumulateGamma(const GdnDims& d, const Segment& sg) {
  for (int64_t i = 0; i < sg.n; ++i) {
    const int64_t pos = sg.pos0 + i;
    if (pos % kGdnChunk == 0) continue;
    const float* prev = Row(d, sg.seq->open, pos - 1).gamma;
    float* cur = Row(d, sg.seq->open, pos).gamma;
    for (int64_t h = 0; h < d.v_heads; ++h) cur[h] = prev[h] + cur[h];
  }
}

// Per-item temporaries, sized for one column tile and one chunk.
struct Work {
  std::vector<float> sk, sq, ck, cq;
};

// The column loops of one call: scalar or AVX2, chosen once per call.
struct ColumnOps {
  decltype(&gdn::StateDotsScalar) state_dots;
  decltype(&gdn::LinCombScalar) lin_comb;
};

// Step 2 for the row at `pos` (chunk row r), v-head h, columns [c0, c1): u_r and o_r.
void RowStep(const GdnDims& d, const ColumnOps& ops, const Segment& sg, int64_t i, int64_t h, int64_t c0,
             int64_t c1, Work* w) {
  const int64_t pos = sg.pos0 + i, r = pos % kGdnChunk, base = pos - r, dk = d.k_dim, dv = d.v_dim;
  const int64_t kh = KHead(d, h), width = c1 - c0;
  float* open = sg.seq->open;
  const OpenRow cur = Row(d, open, pos);
  const float* khat = cur.khat + kh * dk;
  const float* qhat = sg.qhat + i * d.k_heads * dk + kh * dk;
  const float gamma = cur.gamma[h];
  // S_sᵀ k̂_r and S_sᵀ q̂_r over this tile, each a sum in ascending k index.
  float* sk = w->sk.data();
  float* sq = w->sq.data();
  ops.state_dots(sg.seq->state + h * dk * dv + c0, dv, dk, khat, qhat, width, sk, sq);
  // The coefficients of the earlier rows (negated for u) and of row r itself (for o).
  float* ck = w->ck.data();
  float* cq = w->cq.data();
  const float* um[kGdnChunk];
  for (int64_t m = 0; m < r; ++m) {
    const OpenRow prev = Row(d, open, base + m);
    const float* km = prev.khat + kh * dk;
    const float decay = std::exp(gamma - prev.gamma[h]);
    ck[m] = -(decay * Dot(khat, km, dk));
    cq[m] = decay * Dot(qhat, km, dk);
    um[m] = prev.u + h * dv + c0;
  }
  cq[r] = Dot(qhat, khat, dk);
  um[r] = cur.u + h * dv + c0;
  // u_r = β (v - e^Γ S_sᵀ k̂ - Σ_{m<r} (e^{Γ_r-Γ_m} k̂_r·k̂_m) u_m), then
  // o_r = e^Γ S_sᵀ q̂ + Σ_{m<=r} (e^{Γ_r-Γ_m} q̂_r·k̂_m) u_m; per column, m ascending.
  const float eg = std::exp(gamma);
  const float beta = sg.beta[i * d.v_heads + h];
  const float* v = sg.seq->qkv + (sg.t0 + i) * d.conv_channels() + 2 * d.k_heads * dk + h * dv + c0;
  ops.lin_comb(cur.u + h * dv + c0, v, -eg, sk, ck, um, r, beta, width);
  float* out = sg.seq->out + (sg.t0 + i) * d.v_heads * dv + h * dv + c0;
  ops.lin_comb(out, nullptr, eg, sq, cq, um, r + 1, 1.0f, width);
}

// S_{s+16} = e^{Γ_15} S_s + Σ_{m ascending} (e^{Γ_15 - Γ_m} k̂_m[j]) u_m over columns [c0, c1).
void ChunkEnd(const GdnDims& d, const ColumnOps& ops, const Segment& sg, int64_t h, int64_t c0, int64_t c1,
              Work* w) {
  const int64_t base = sg.pos0 + sg.n - kGdnChunk, dk = d.k_dim, dv = d.v_dim, kh = KHead(d, h);
  float* open = sg.seq->open;
  const float last = Row(d, open, base + kGdnChunk - 1).gamma[h];
  float decay[kGdnChunk];
  const float* khat[kGdnChunk];
  const float* um[kGdnChunk];
  for (int64_t m = 0; m < kGdnChunk; ++m) {
    const OpenRow row = Row(d, open, base + m);
    decay[m] = std::exp(last - row.gamma[h]);
    khat[m] = row.khat + kh * dk;
    um[m] = row.u + h * dv + c0;
  }
  const float el = std::exp(last);
  float* coef = w->ck.data();
  float* S = sg.seq->state + h * dk * dv + c0;
  for (int64_t j = 0; j < dk; ++j) {
    for (int64_t m = 0; m < kGdnChunk; ++m) coef[m] = decay[m] * khat[m][j];
    ops.lin_comb(S + j * dv, nullptr, el, S + j * dv, coef, um, kGdnChunk, 1.0f, c1 - c0);
  }
}

}  // namespace

void GdnCore(const GdnDims& d, const GdnParams& p, const GdnSeq* seqs, int64_t num_seqs,
             GdnScratch* scratch, ThreadPool* pool) {
  const int64_t kd = d.k_heads * d.k_dim;
  std::vector<int64_t> done(num_seqs, 0);
  std::vector<Segment> segs;
  const int threads = pool == nullptr ? 1 : pool->num_threads();
  const ColumnOps ops = UseAvx2() ? ColumnOps{gdn::StateDotsAvx2, gdn::LinCombAvx2}
                                  : ColumnOps{gdn::StateDotsScalar, gdn::LinCombScalar};
  for (;;) {
    // This round's segments: each sequence's rows up to its next chunk boundary.
    segs.clear();
    int64_t rows = 0;
    for (int64_t s = 0; s < num_seqs; ++s) {
      const int64_t left = seqs[s].rows - done[s];
      if (left <= 0) continue;
      const int64_t pos = seqs[s].start + done[s];
      const int64_t n = std::min(left, kGdnChunk - pos % kGdnChunk);
      segs.push_back({&seqs[s], done[s], pos, n, nullptr, nullptr});
      done[s] += n;
      rows += n;
    }
    if (segs.empty()) return;
    scratch->qhat.resize(rows * kd);
    scratch->beta.resize(rows * d.v_heads);
    int64_t off = 0;
    std::vector<int64_t> first_row;  // flattened (segment, row) index of each segment's row 0
    for (Segment& sg : segs) {
      sg.qhat = scratch->qhat.data() + off * kd;
      sg.beta = scratch->beta.data() + off * d.v_heads;
      first_row.push_back(off);
      off += sg.n;
    }
    const auto nseg = static_cast<int64_t>(segs.size());
    auto prepare = [&](int64_t f0, int64_t f1) {
      int64_t s = std::upper_bound(first_row.begin(), first_row.end(), f0) - first_row.begin() - 1;
      for (int64_t f = f0; f < f1; ++f) {
        while (s + 1 < nseg && first_row[s + 1] <= f) ++s;
        PrepareRow(d, p, segs[s], f - first_row[s]);
      }
    };
    if (pool == nullptr) {
      prepare(0, rows);
    } else {
      pool->ParallelFor(rows, 1, prepare);
    }
    for (const Segment& sg : segs) CumulateGamma(d, sg);

    // Column tiles: enough items for the pool (any tiling gives the same bits).
    const int64_t heads = nseg * d.v_heads;
    int64_t tiles = std::clamp<int64_t>((4 * threads + heads - 1) / heads, 1, std::max<int64_t>(1, d.v_dim / 16));
    const int64_t width = ((d.v_dim + tiles - 1) / tiles + 7) / 8 * 8;  // whole vectors where possible
    tiles = (d.v_dim + width - 1) / width;
    auto step = [&](int64_t i0, int64_t i1) {
      Work w;
      w.sk.resize(width);
      w.sq.resize(width);
      w.ck.resize(kGdnChunk);
      w.cq.resize(kGdnChunk);
      for (int64_t item = i0; item < i1; ++item) {
        const Segment& sg = segs[item / (d.v_heads * tiles)];
        const int64_t h = item / tiles % d.v_heads, c0 = item % tiles * width;
        const int64_t c1 = std::min(d.v_dim, c0 + width);
        for (int64_t i = 0; i < sg.n; ++i) RowStep(d, ops, sg, i, h, c0, c1, &w);
        if ((sg.pos0 + sg.n) % kGdnChunk == 0) ChunkEnd(d, ops, sg, h, c0, c1, &w);
      }
    };
    if (pool == nullptr) {
      step(0, heads * tiles);
    } else {
      pool->ParallelFor(heads * tiles, 1, step);
    }
  }
}

}  // namespace tessera::kernels::cpu

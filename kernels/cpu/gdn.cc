// Gated DeltaNet: dimension checks, the causal conv1d with its input ring, the gated
// RMSNorm. The delta-rule core is gdn_core.cc.
#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cpu/gdn.h"

namespace tessera::kernels::cpu {

Status CheckGdnDims(const GdnDims& d) {
  auto bad = [](const char* field, int64_t v, const char* why) {
    return InvalidArgument(std::string("gated deltanet: ") + field + " = " + std::to_string(v) + " " + why);
  };
  if (d.k_heads <= 0) return bad("linear_num_key_heads", d.k_heads, "must be positive");
  if (d.v_heads <= 0 || d.v_heads % d.k_heads != 0) {
    return bad("linear_num_value_heads", d.v_heads, "must be a positive multiple of linear_num_key_heads");
  }
  if (d.k_dim <= 0) return bad("linear_key_head_dim", d.k_dim, "must be positive");
  if (d.v_dim <= 0) return bad("linear_value_head_dim", d.v_dim, "must be positive");
  if (d.conv_kernel <= 0) return bad("linear_conv_kernel_dim", d.conv_kernel, "must be positive");
  return Status::Ok();
}

namespace {

// The input at position p of channel c: this call's rows from `start` on, the ring
// before, zero before position 0.
inline float ConvInput(const GdnConvSeq& s, int64_t channels, int64_t p, int64_t c) {
  if (p >= s.start) return s.x[(p - s.start) * channels + c];
  if (p < 0) return 0.0f;
  return s.ring[(p % s.ring_rows) * channels + c];
}

}  // namespace

void GdnConv(const GdnDims& d, const float* weight, const GdnConvSeq* seqs, int64_t num_seqs,
             ThreadPool* pool) {
  const int64_t channels = d.conv_channels(), K = d.conv_kernel;
  auto run = [&](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < num_seqs; ++i) {
      const GdnConvSeq& s = seqs[i];
      for (int64_t c = c0; c < c1; ++c) {
        const float* w = weight + c * K;
        for (int64_t t = 0; t < s.rows; ++t) {
          const int64_t first = s.start + t - K + 1;
          float acc = 0.0f;
          for (int64_t j = 0; j < K; ++j) acc += w[j] * ConvInput(s, channels, first + j, c);
          s.out[t * channels + c] = acc / (1.0f + std::exp(-acc));
        }
        // Only after every row of the channel read its taps: the writes reuse ring rows
        // of positions before `start`.
        if (s.ring_rows > 0) {
          const int64_t end = s.start + s.rows;
          for (int64_t p = std::max(s.start, end - s.ring_rows); p < end; ++p) {
            s.ring[(p % s.ring_rows) * channels + c] = s.x[(p - s.start) * channels + c];
          }
        }
      }
    }
  };
  if (pool == nullptr) {
    run(0, channels);
  } else {
    pool->ParallelFor(channels, 64, run);
  }
}

void GatedRmsNorm(const float* o, const float* z, const float* weight, int64_t rows, int64_t heads,
                  int64_t dim, float eps, float* y, ThreadPool* pool) {
  auto run = [&](int64_t v0, int64_t v1) {
    for (int64_t v = v0; v < v1; ++v) {
      const float* ov = o + v * dim;
      const float* zv = z + v * dim;
      float* yv = y + v * dim;
      double ss = 0.0;
      for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(ov[i]) * ov[i];
      const float scale = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(dim)) + eps);
      for (int64_t i = 0; i < dim; ++i) {
        const float gate = zv[i] / (1.0f + std::exp(-zv[i]));
        yv[i] = ov[i] * scale * weight[i] * gate;
      }
    }
  };
  if (pool == nullptr) {
    run(0, rows * heads);
  } else {
    pool->ParallelFor(rows * heads, 16, run);
  }
}

}  // namespace tessera::kernels::cpu

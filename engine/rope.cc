#include "engine/rope.h"

#include <algorithm>
#include <cmath>

namespace tessera {
namespace {

double YarnMscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// Dimension index at which a wavelength completes `rotations` turns within max_pos.
double YarnCorrectionDim(double rotations, double dim, double base, double max_pos) {
  return dim * std::log(max_pos / (rotations * 2.0 * M_PI)) / (2.0 * std::log(base));
}

}  // namespace

bool UseLongRopeFactors(const ModelConfig& c, int64_t max_model_len) {
  if (c.rope_scaling.type != RopeScalingType::kLongRope) return false;
  const int64_t len = max_model_len > 0 ? max_model_len : c.max_position_embeddings;
  return len > c.rope_scaling.original_max_position_embeddings;
}

RopeFrequencies ComputeRopeFrequencies(const ModelConfig& c, int64_t max_model_len) {
  const int64_t dim = c.rotary_dim > 0 ? c.rotary_dim : c.head_dim;
  const int64_t half = dim / 2;
  const double base = c.rope_theta;
  const RopeScaling& s = c.rope_scaling;
  RopeFrequencies f;
  f.inv_freq.resize(half);
  for (int64_t i = 0; i < half; ++i) {
    f.inv_freq[i] = 1.0 / std::pow(base, static_cast<double>(2 * i) / static_cast<double>(dim));
  }
  switch (s.type) {
    case RopeScalingType::kNone:
      break;
    case RopeScalingType::kLinear:
      for (double& x : f.inv_freq) x /= s.factor;
      break;
    case RopeScalingType::kLlama3: {
      const double old_ctx = static_cast<double>(s.original_max_position_embeddings);
      const double low_wavelen = old_ctx / s.low_freq_factor;
      const double high_wavelen = old_ctx / s.high_freq_factor;
      for (double& x : f.inv_freq) {
        const double wavelen = 2.0 * M_PI / x;
        if (wavelen > low_wavelen) {
          x /= s.factor;
        } else if (wavelen >= high_wavelen) {  // medium band: smooth blend
          const double smooth = (old_ctx / wavelen - s.low_freq_factor) /
                                (s.high_freq_factor - s.low_freq_factor);
          x = (1.0 - smooth) * x / s.factor + smooth * x;
        }
      }
      break;
    }
    case RopeScalingType::kYarn: {
      const double orig = static_cast<double>(s.original_max_position_embeddings);
      double low = YarnCorrectionDim(s.beta_fast, dim, base, orig);
      double high = YarnCorrectionDim(s.beta_slow, dim, base, orig);
      if (s.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, static_cast<double>(dim - 1));
      if (low == high) high += 0.001;
      for (int64_t i = 0; i < half; ++i) {
        const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
        const double extrapolation_weight = 1.0 - ramp;
        const double extrap = f.inv_freq[i];
        const double interp = extrap / s.factor;
        f.inv_freq[i] = interp * (1.0 - extrapolation_weight) + extrap * extrapolation_weight;
      }
      if (s.attention_factor > 0) {
        f.attention_factor = s.attention_factor;
      } else if (s.mscale > 0 && s.mscale_all_dim > 0) {
        f.attention_factor = YarnMscale(s.factor, s.mscale) / YarnMscale(s.factor, s.mscale_all_dim);
      } else {
        f.attention_factor = YarnMscale(s.factor, 1.0);
      }
      break;
    }
    case RopeScalingType::kLongRope: {
      // HF _compute_longrope_parameters: inv_freq_i = 1 / (ext_i * base^(2i/dim));
      // cos and sin scaled by sqrt(1 + ln(factor) / ln(original)) (1 when factor <= 1)
      // unless the config sets attention_factor, for both factor sets alike.
      const std::vector<double>& ext = UseLongRopeFactors(c, max_model_len) ? s.long_factor : s.short_factor;
      for (int64_t i = 0; i < half; ++i) f.inv_freq[i] /= ext[i];
      const double orig = static_cast<double>(s.original_max_position_embeddings);
      if (s.attention_factor > 0) {
        f.attention_factor = s.attention_factor;
      } else if (s.factor > 1.0) {
        f.attention_factor = std::sqrt(1.0 + std::log(s.factor) / std::log(orig));
      }
      break;
    }
  }
  return f;
}

RopeTable::RopeTable(const ModelConfig& config, int64_t max_model_len)
    : freqs_(ComputeRopeFrequencies(config, max_model_len)),
      rot_dim_(config.rotary_dim > 0 ? config.rotary_dim : config.head_dim) {}

void RopeTable::EnsurePositions(int64_t n) {
  if (n <= num_positions_) return;
  n = std::max(n, std::min<int64_t>(2 * num_positions_, n + 4096));
  const int64_t half = rot_dim_ / 2;
  table_.resize(static_cast<size_t>(n * rot_dim_));
  for (int64_t p = num_positions_; p < n; ++p) {
    float* row = table_.data() + p * rot_dim_;
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * freqs_.inv_freq[i];
      row[i] = static_cast<float>(std::cos(angle) * freqs_.attention_factor);
      row[half + i] = static_cast<float>(std::sin(angle) * freqs_.attention_factor);
    }
  }
  num_positions_ = n;
}

}  // namespace tessera

#include "engine/gguf_recipe.h"

#include <cctype>
#include <string>

namespace tessera {
namespace {

using D = DType;

// llama.h's enum llama_ftype (removed ids 4-6 and 33-35 are absent).
const LlamaFileType kFileTypes[] = {
    {0, "ALL_F32", "F32", "all F32", D::kF32},
    {1, "MOSTLY_F16", "F16", "F16", D::kF16},
    {2, "MOSTLY_Q4_0", "Q4_0", "Q4_0", D::kQ4_0},
    {3, "MOSTLY_Q4_1", "Q4_1", "Q4_1", D::kQ4_1},
    {7, "MOSTLY_Q8_0", "Q8_0", "Q8_0", D::kQ8_0},
    {8, "MOSTLY_Q5_0", "Q5_0", "Q5_0", D::kQ5_0},
    {9, "MOSTLY_Q5_1", "Q5_1", "Q5_1", D::kQ5_1},
    {10, "MOSTLY_Q2_K", "Q2_K", "Q2_K - Medium", D::kQ2_K},
    {11, "MOSTLY_Q3_K_S", "Q3_K_S", "Q3_K - Small", D::kQ3_K},
    {12, "MOSTLY_Q3_K_M", "Q3_K_M", "Q3_K - Medium", D::kQ3_K},
    {13, "MOSTLY_Q3_K_L", "Q3_K_L", "Q3_K - Large", D::kQ3_K},
    {14, "MOSTLY_Q4_K_S", "Q4_K_S", "Q4_K - Small", D::kQ4_K},
    {15, "MOSTLY_Q4_K_M", "Q4_K_M", "Q4_K - Medium", D::kQ4_K},
    {16, "MOSTLY_Q5_K_S", "Q5_K_S", "Q5_K - Small", D::kQ5_K},
    {17, "MOSTLY_Q5_K_M", "Q5_K_M", "Q5_K - Medium", D::kQ5_K},
    {18, "MOSTLY_Q6_K", "Q6_K", "Q6_K", D::kQ6_K},
    {19, "MOSTLY_IQ2_XXS", "IQ2_XXS", "IQ2_XXS - 2.0625 bpw", std::nullopt},
    {20, "MOSTLY_IQ2_XS", "IQ2_XS", "IQ2_XS - 2.3125 bpw", std::nullopt},
    {21, "MOSTLY_Q2_K_S", "Q2_K_S", "Q2_K - Small", D::kQ2_K},
    {22, "MOSTLY_IQ3_XS", "IQ3_XS", "IQ3_XS - 3.3 bpw", std::nullopt},
    {23, "MOSTLY_IQ3_XXS", "IQ3_XXS", "IQ3_XXS - 3.0625 bpw", std::nullopt},
    {24, "MOSTLY_IQ1_S", "IQ1_S", "IQ1_S - 1.5625 bpw", std::nullopt},
    {25, "MOSTLY_IQ4_NL", "IQ4_NL", "IQ4_NL - 4.5 bpw", D::kIQ4_NL},
    {26, "MOSTLY_IQ3_S", "IQ3_S", "IQ3_S - 3.4375 bpw", std::nullopt},
    {27, "MOSTLY_IQ3_M", "IQ3_M", "IQ3_S mix - 3.66 bpw", std::nullopt},
    {28, "MOSTLY_IQ2_S", "IQ2_S", "IQ2_S - 2.5 bpw", std::nullopt},
    {29, "MOSTLY_IQ2_M", "IQ2_M", "IQ2_M - 2.7 bpw", std::nullopt},
    {30, "MOSTLY_IQ4_XS", "IQ4_XS", "IQ4_XS - 4.25 bpw", D::kIQ4_XS},
    {31, "MOSTLY_IQ1_M", "IQ1_M", "IQ1_M - 1.75 bpw", std::nullopt},
    {32, "MOSTLY_BF16", "BF16", "BF16", D::kBF16},
    {36, "MOSTLY_TQ1_0", "TQ1_0", "TQ1_0 - 1.69 bpw ternary", std::nullopt},
    {37, "MOSTLY_TQ2_0", "TQ2_0", "TQ2_0 - 2.06 bpw ternary", std::nullopt},
    {38, "MOSTLY_MXFP4_MOE", "MXFP4_MOE", "MXFP4 MoE", D::kMXFP4},
    {39, "MOSTLY_NVFP4", "NVFP4", "NVFP4", std::nullopt},
    {40, "MOSTLY_Q1_0", "Q1_0", "Q1_0", std::nullopt},
    {41, "MOSTLY_Q2_0", "Q2_0", "Q2_0", std::nullopt},
};

bool EqualNoCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

enum class Cat { kOutput, kTokenEmbd, kAttnV, kAttnK, kAttnOutput, kFfnDown, kOther };

// llama-quant.cpp's tensor_get_category, for the names Tessera writes. attn_qkv counts as
// attn_v there (category_is_attn_v), and so here.
Cat Category(std::string_view name) {
  const auto has = [&](std::string_view s) { return name.find(s) != std::string_view::npos; };
  if (name == "output.weight") return Cat::kOutput;
  if (name == "token_embd.weight") return Cat::kTokenEmbd;
  if (has("attn_qkv.weight") || has("attn_v.weight")) return Cat::kAttnV;
  if (has("attn_k.weight")) return Cat::kAttnK;
  if (has("attn_output.weight")) return Cat::kAttnOutput;
  if (has("ffn_up") || has("ffn_gate")) return Cat::kOther;  // no rule for the recipes below
  if (has("ffn_down")) return Cat::kFfnDown;
  return Cat::kOther;
}

// llama.cpp: a few more bits in the first and last eighth and every third layer between.
bool UseMoreBits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

DType MixType(uint32_t ft, D base, const RecipeModel& m, Cat cat, int64_t layer, int64_t cols) {
  const int64_t n = m.n_layers, i = layer < 0 ? 0 : layer;
  switch (cat) {
    case Cat::kOutput:
    case Cat::kTokenEmbd:
      if (cat == Cat::kTokenEmbd && !m.tied_embeddings) return base;
      if (ft == 38 || cols % DTypeBlockElems(base) != 0) return D::kQ8_0;
      return base == D::kQ8_0 ? base : D::kQ6_K;
    default: break;
  }
  switch (cat) {
    case Cat::kAttnV: {
      D t = base;
      if (ft == 10) t = m.n_gqa >= 4 ? D::kQ4_K : D::kQ3_K;
      else if (ft == 21 && m.n_gqa >= 4) t = D::kQ4_K;
      else if (ft == 12) t = i < 2 ? D::kQ5_K : D::kQ4_K;
      else if (ft == 13) t = D::kQ5_K;
      else if ((ft == 25 || ft == 30) && m.n_gqa >= 4) t = D::kQ5_K;
      else if ((ft == 15 || ft == 17) && UseMoreBits(i, n)) t = D::kQ6_K;
      else if (ft == 14 && i < 4) t = D::kQ5_K;
      return m.n_expert == 8 ? D::kQ8_0 : t;
    }
    case Cat::kAttnK: return m.n_expert == 8 ? D::kQ8_0 : base;
    case Cat::kFfnDown:
      if (ft == 10) return D::kQ3_K;
      if (ft == 21) return i < n / 8 ? D::kQ4_K : base;
      if (ft == 12) return i < n / 16 ? D::kQ5_K : D::kQ4_K;
      if (ft == 13) return D::kQ5_K;
      if (ft == 15) return UseMoreBits(i, n) ? D::kQ6_K : base;
      if ((ft == 25 || ft == 30) && i < n / 8) return D::kQ5_K;
      if (ft == 17) return UseMoreBits(i, n) ? D::kQ6_K : base;
      if (ft == 14 && i < n / 8) return D::kQ5_K;
      return base;
    case Cat::kAttnOutput:
      if (m.n_expert == 8) {
        const bool bump = ft == 10 || ft == 11 || ft == 12 || ft == 25 || ft == 14 || ft == 15 || ft == 30;
        return bump ? D::kQ5_K : base;
      }
      if (ft == 10) return D::kQ3_K;
      if (ft == 12) return D::kQ4_K;
      if (ft == 13) return D::kQ5_K;
      return base;
    default: return base;
  }
}

}  // namespace

const LlamaFileType* FindLlamaFileType(uint32_t id) {
  for (const auto& f : kFileTypes) {
    if (f.id == id) return &f;
  }
  return nullptr;
}

const LlamaFileType* FindLlamaFileTypeByName(std::string_view name) {
  for (const auto& f : kFileTypes) {
    if (EqualNoCase(name, f.recipe) || EqualNoCase(name, f.enum_name)) return &f;
  }
  return nullptr;
}

uint32_t LlamaFileTypeForDType(DType t) {
  switch (t) {
    case D::kQ4_K: return 15;
    case D::kQ5_K: return 17;
    case D::kQ3_K: return 12;
    default: break;
  }
  for (const auto& f : kFileTypes) {
    if (f.base == t) return f.id;  // the first (pure) file type of each base
  }
  return 32;
}

DType RecipeFallback(DType t, int64_t cols) {
  if (cols % DTypeBlockElems(t) == 0) return t;
  switch (t) {
    case D::kIQ4_XS: t = D::kIQ4_NL; break;
    case D::kQ2_K:
    case D::kQ3_K: t = D::kQ4_0; break;
    case D::kQ4_K: t = D::kQ5_0; break;
    case D::kQ5_K: t = D::kQ5_1; break;
    case D::kQ6_K: t = D::kQ8_0; break;
    default: break;
  }
  return cols % DTypeBlockElems(t) == 0 ? t : D::kF16;
}

DType RecipeTensorType(const LlamaFileType& ft, const RecipeModel& m, const RecipeTensor& t, bool* fell_back) {
  if (fell_back) *fell_back = false;
  const std::string_view n = t.name;
  const bool quantizable = t.n_dims >= 2 && n.size() >= 6 && n.substr(n.size() - 6) == "weight" &&
                           n.find("_norm.weight") == std::string_view::npos &&
                           n.find("ffn_gate_inp.weight") == std::string_view::npos;
  const DType base = ft.base.value_or(D::kF32);
  if (!quantizable) return D::kF32;
  if (!IsQuantized(base)) return base;
  DType want;
  if (ft.id == 38 && t.n_dims == 3 && Category(n) != Cat::kOutput) {
    want = D::kMXFP4;  // MXFP4_MOE: the stacked experts MXFP4, every other matrix Q8_0
  } else if (ft.id == 38) {
    want = D::kQ8_0;
  } else {
    want = MixType(ft.id, base, m, Category(n), t.layer, t.cols);
  }
  const DType got = RecipeFallback(want, t.cols);
  if (fell_back) *fell_back = got != want;
  return got;
}

}  // namespace tessera

// llama.cpp's file types (general.file_type, LLAMA_FTYPE_*) and llama-quantize's recipes:
// which GGML type each tensor of a "Q4_K_M", "Q5_K_M", "IQ4_XS", ... file gets.
//
// The recipe follows llama.cpp's src/llama-quant.cpp (llama_tensor_get_type) for the
// tensor categories Tessera's models have (token_embd, output, attn_q/k/v/output/qkv,
// ffn_gate/up/down and their _exps/_shexp forms), without an importance matrix and
// without the per-model-size tweaks (70B, Falcon). It is an approximation of what
// llama-quantize writes, good for synthetic files that look like downloaded ones; the
// loader never relies on it (every tensor carries its own type).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "common/dtype.h"

namespace tessera {

struct LlamaFileType {
  uint32_t id;                   // LLAMA_FTYPE_* value, as stored in general.file_type
  const char* enum_name;         // gguf-py's LlamaFileType name: "MOSTLY_Q4_K_M", "ALL_F32", ...
  const char* recipe;            // llama-quantize's name: "Q4_K_M", "IQ4_XS", "F16", ...
  const char* description;       // llama.cpp's llama_ftype_name: "Q4_K - Medium", ...
  std::optional<DType> base;     // the type most matrices get; nullopt when Tessera cannot load it
};

// nullptr for ids llama.cpp does not define.
const LlamaFileType* FindLlamaFileType(uint32_t id);
// By llama-quantize's recipe name or gguf-py's enum name, any case ("q4_k_m", "MOSTLY_Q4_K_M").
const LlamaFileType* FindLlamaFileTypeByName(std::string_view name);
// The file type a file whose matrices are all `t` declares (a K-quant without a pure
// file type takes its "_M" mix: Q4_K -> Q4_K_M).
uint32_t LlamaFileTypeForDType(DType t);

// What the recipe needs to know about the model.
struct RecipeModel {
  int64_t n_layers = 1;
  int64_t n_gqa = 1;      // query heads per KV head
  int64_t n_expert = 0;   // routed experts (0: dense)
  bool tied_embeddings = false;
};

// One tensor by its GGUF name ("blk.3.attn_v.weight"), dims and row length.
struct RecipeTensor {
  std::string_view name;
  int n_dims = 2;
  int64_t cols = 0;     // ne[0]
  int64_t layer = -1;   // block index, -1 outside the blocks
};

// The type llama-quantize gives the tensor in a file of `ft` (ft.base must be set),
// including llama.cpp's fallback for rows that are not whole blocks (Q4_K -> Q5_0,
// Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K -> Q4_0, IQ4_XS -> IQ4_NL, then F16). 1-D tensors,
// norms and routers stay F32. `fell_back` (optional) is set when the fallback applied.
DType RecipeTensorType(const LlamaFileType& ft, const RecipeModel& m, const RecipeTensor& t,
                       bool* fell_back = nullptr);

// llama.cpp's fallback alone: `t` when cols is a multiple of its block, else as above.
DType RecipeFallback(DType t, int64_t cols);

}  // namespace tessera

#include "engine/gguf_recipe.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "engine/gguf.h"
#include "engine/synth.h"
#include "tests/unit/engine/test_model_util.h"

namespace tessera {
namespace {

// The cases below are read off llama.cpp's src/llama-quant.cpp (llama_tensor_get_type).
DType TypeOf(uint32_t ftype, const RecipeModel& m, const std::string& name, int64_t layer, int64_t cols = 4096,
             int n_dims = 2) {
  const LlamaFileType* ft = FindLlamaFileType(ftype);
  EXPECT_NE(ft, nullptr);
  return RecipeTensorType(*ft, m, {name, n_dims, cols, layer});
}

TEST(GgufRecipe, NamesAreLlamaCpps) {
  EXPECT_STREQ(FindLlamaFileType(15)->recipe, "Q4_K_M");
  EXPECT_STREQ(FindLlamaFileType(15)->description, "Q4_K - Medium");
  EXPECT_STREQ(FindLlamaFileType(18)->enum_name, "MOSTLY_Q6_K");
  EXPECT_STREQ(FindLlamaFileType(30)->recipe, "IQ4_XS");
  EXPECT_STREQ(FindLlamaFileType(0)->recipe, "F32");
  EXPECT_EQ(FindLlamaFileType(4), nullptr);  // removed from llama.cpp
  EXPECT_EQ(FindLlamaFileTypeByName("q5_k_m")->id, 17u);
  EXPECT_EQ(FindLlamaFileTypeByName("MOSTLY_MXFP4_MOE")->id, 38u);
  EXPECT_EQ(FindLlamaFileTypeByName("q4_k_x"), nullptr);
  EXPECT_FALSE(FindLlamaFileTypeByName("IQ2_XXS")->base.has_value());  // named, not writable
  EXPECT_EQ(LlamaFileTypeForDType(DType::kQ6_K), 18u);
  EXPECT_EQ(LlamaFileTypeForDType(DType::kQ4_K), 15u);
  EXPECT_EQ(LlamaFileTypeForDType(DType::kIQ4_NL), 25u);
  EXPECT_EQ(LlamaFileTypeForDType(DType::kBF16), 32u);
}

TEST(GgufRecipe, Q4KMGivesAttnVAndFfnDownMoreBitsInSomeLayers) {
  const RecipeModel m{32, 4, 0, false};
  EXPECT_EQ(TypeOf(15, m, "output.weight", -1), DType::kQ6_K);
  EXPECT_EQ(TypeOf(15, m, "token_embd.weight", -1), DType::kQ4_K);  // untied: the base type
  EXPECT_EQ(TypeOf(15, m, "blk.0.attn_q.weight", 0), DType::kQ4_K);
  // use_more_bits(i, 32): i < 4, i >= 28, or (i - 4) % 3 == 2.
  for (int64_t i : {0, 3, 6, 9, 28, 31}) {
    EXPECT_EQ(TypeOf(15, m, "blk." + std::to_string(i) + ".attn_v.weight", i), DType::kQ6_K) << i;
    EXPECT_EQ(TypeOf(15, m, "blk." + std::to_string(i) + ".ffn_down.weight", i), DType::kQ6_K) << i;
  }
  for (int64_t i : {4, 5, 7, 26}) {
    EXPECT_EQ(TypeOf(15, m, "blk." + std::to_string(i) + ".attn_v.weight", i), DType::kQ4_K) << i;
    EXPECT_EQ(TypeOf(15, m, "blk." + std::to_string(i) + ".ffn_down.weight", i), DType::kQ4_K) << i;
  }
  EXPECT_EQ(TypeOf(15, m, "blk.0.attn_norm.weight", 0, 4096, 1), DType::kF32);
  // Tied embeddings take the output's type.
  EXPECT_EQ(TypeOf(15, {32, 4, 0, true}, "token_embd.weight", -1), DType::kQ6_K);
}

TEST(GgufRecipe, OtherMixes) {
  const RecipeModel m{32, 4, 0, false};
  EXPECT_EQ(TypeOf(30, m, "blk.10.attn_v.weight", 10), DType::kQ5_K);          // IQ4_XS, GQA >= 4
  EXPECT_EQ(TypeOf(30, {32, 2, 0, false}, "blk.10.attn_v.weight", 10), DType::kIQ4_XS);
  EXPECT_EQ(TypeOf(30, m, "blk.1.ffn_down.weight", 1), DType::kQ5_K);          // first eighth
  EXPECT_EQ(TypeOf(30, m, "blk.10.ffn_down.weight", 10), DType::kIQ4_XS);
  EXPECT_EQ(TypeOf(12, m, "blk.1.attn_v.weight", 1), DType::kQ5_K);            // Q3_K_M
  EXPECT_EQ(TypeOf(12, m, "blk.5.attn_v.weight", 5), DType::kQ4_K);
  EXPECT_EQ(TypeOf(12, m, "blk.5.attn_output.weight", 5), DType::kQ4_K);
  EXPECT_EQ(TypeOf(12, m, "blk.5.ffn_up.weight", 5), DType::kQ3_K);
  EXPECT_EQ(TypeOf(10, m, "blk.5.ffn_down.weight", 5), DType::kQ3_K);          // Q2_K
  EXPECT_EQ(TypeOf(10, m, "blk.5.attn_v.weight", 5), DType::kQ4_K);
  EXPECT_EQ(TypeOf(18, m, "blk.5.ffn_up.weight", 5), DType::kQ6_K);            // Q6_K
  EXPECT_EQ(TypeOf(2, m, "output.weight", -1), DType::kQ6_K);                  // even Q4_0's output
  EXPECT_EQ(TypeOf(7, m, "output.weight", -1), DType::kQ8_0);
  EXPECT_EQ(TypeOf(1, m, "blk.0.ffn_up.weight", 0), DType::kF16);
  // MXFP4_MOE: stacked experts MXFP4, every other matrix Q8_0; routers stay F32.
  const RecipeModel moe{24, 8, 32, false};
  EXPECT_EQ(TypeOf(38, moe, "blk.0.ffn_down_exps.weight", 0, 2880, 3), DType::kMXFP4);
  EXPECT_EQ(TypeOf(38, moe, "blk.0.attn_q.weight", 0, 2880), DType::kQ8_0);
  EXPECT_EQ(TypeOf(38, moe, "output.weight", -1, 2880), DType::kQ8_0);
  EXPECT_EQ(TypeOf(38, moe, "blk.0.ffn_gate_inp.weight", 0, 2880), DType::kF32);
  // Mixtral-like (8 experts): attn_v and attn_k Q8_0.
  EXPECT_EQ(TypeOf(15, {32, 4, 8, false}, "blk.3.attn_k.weight", 3), DType::kQ8_0);
}

TEST(GgufRecipe, RowsThatAreNotWholeBlocksFallBackAsLlamaCpps) {
  const RecipeModel m{4, 1, 0, false};
  bool fell = false;
  const LlamaFileType& q4km = *FindLlamaFileType(15);
  EXPECT_EQ(RecipeTensorType(q4km, m, {"blk.2.ffn_up.weight", 2, 4096, 2}, &fell), DType::kQ4_K);
  EXPECT_FALSE(fell);
  EXPECT_EQ(RecipeTensorType(q4km, m, {"blk.2.ffn_up.weight", 2, 896, 2}, &fell), DType::kQ5_0);
  EXPECT_TRUE(fell);
  EXPECT_EQ(RecipeTensorType(q4km, m, {"blk.3.ffn_down.weight", 2, 896, 3}, &fell), DType::kQ8_0);  // Q6_K's
  EXPECT_EQ(RecipeFallback(DType::kQ5_K, 96), DType::kQ5_1);
  EXPECT_EQ(RecipeFallback(DType::kIQ4_XS, 96), DType::kIQ4_NL);
  EXPECT_EQ(RecipeFallback(DType::kQ3_K, 64), DType::kQ4_0);
  EXPECT_EQ(RecipeFallback(DType::kQ2_K, 40), DType::kF16);
  EXPECT_EQ(RecipeFallback(DType::kQ8_0, 40), DType::kF16);
  EXPECT_EQ(RecipeFallback(DType::kQ8_0, 64), DType::kQ8_0);
}

// End to end: `synth` writes the mix and the file type, and the file parses. The tiny
// llama (2 layers, rows of 64 and 128) exercises the fallbacks too.
TEST(GgufRecipe, SynthWritesTheMix) {
  if (FindNpmDir().empty()) GTEST_SKIP() << "no tokenizer packages (scripts/bootstrap)";
  testing::TempDir tmp;
  SynthOptions o;
  o.arch = "llama";
  o.format = "gguf";
  o.out_dir = tmp.path() + "/m.gguf";
  o.dtype = DType::kQ4_K;
  o.llama_ftype = 15;
  ASSERT_TRUE(WriteSyntheticCheckpoint(o).ok());
  auto f = GgufFile::Open(o.out_dir);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const GgufContents& c = (*f)->contents();
  EXPECT_EQ(c.Find("general.file_type")->AsInt(), 15);
  std::map<std::string, DType> types;
  for (const GgufTensor& t : c.tensors) types[t.name] = t.dtype;
  EXPECT_EQ(types["blk.0.attn_v.weight"], DType::kQ5_0);    // Q4_K, rows of 64: Q5_0
  EXPECT_EQ(types["blk.1.attn_v.weight"], DType::kQ8_0);    // use_more_bits(1, 2): Q6_K, then Q8_0
  EXPECT_EQ(types["blk.1.ffn_down.weight"], DType::kQ8_0);
  EXPECT_EQ(types["blk.0.ffn_down.weight"], DType::kQ5_0);
  EXPECT_EQ(types["blk.0.attn_norm.weight"], DType::kF32);
  EXPECT_EQ(types["output.weight"], DType::kQ8_0);          // rows not whole Q4_K blocks
  EXPECT_EQ(types["token_embd.weight"], DType::kQ5_0);      // untied: the base type, fallen back
  o.llama_ftype = 19;                                       // IQ2_XXS: named but not writable
  EXPECT_EQ(WriteSyntheticCheckpoint(o).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera

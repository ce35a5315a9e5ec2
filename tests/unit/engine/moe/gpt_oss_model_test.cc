// gpt-oss in the engine: the HF checkpoint (bf16 stacked experts or MXFP4 blocks/scales)
// and its GGUF twin load to the same logits; bad checkpoints are refused naming the
// tensor; a backend without the ops gpt-oss needs refuses it naming the op.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <numeric>
#include <sstream>

#include "engine/batch_builder.h"
#include "engine/model.h"
#include "engine/synth.h"
#include "tests/unit/engine/test_model_util.h"

namespace tessera {
namespace {

using testing::TempDir;

std::string Synth(const std::string& dir, DType dtype, const std::string& format) {
  SynthOptions o;
  o.arch = "gpt_oss";
  o.dtype = dtype;
  o.format = format;
  o.out_dir = dir;
  o.overrides = {"vocab_size=32768"};  // the 201k head proves nothing here
  Status s = WriteSyntheticCheckpoint(o);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return dir;
}

std::vector<float> Prefill(const std::string& path, int threads = 1) {
  auto backend = MakeCpuBackend({threads});
  auto m = Model::Load(path, backend.get());
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  auto cache = (*m)->CreateKvCache(8, 16);
  EXPECT_TRUE(cache.ok());
  BatchBuilder bb(8, 16);
  BatchBuilder::Chunk c;
  c.seq = bb.AddSequence();
  c.tokens = {1, 500, 20000, 77, 9, 4242, 31, 100, 7, 3000, 12, 5, 6, 8, 10, 11, 13, 14, 15, 16, 17};
  c.logits_at.resize(c.tokens.size());
  std::iota(c.logits_at.begin(), c.logits_at.end(), 0);
  auto batch = bb.Build({c});
  EXPECT_TRUE(batch.ok());
  std::vector<float> logits;
  EXPECT_TRUE((*m)->Forward(*batch, cache->get(), &logits).ok());
  return logits;
}

std::string LoadError(const std::string& path) {
  auto backend = MakeCpuBackend({1});
  auto m = Model::Load(path, backend.get());
  return m.ok() ? "loaded" : m.status().ToString();
}

// Replaces the first occurrence of `from` (same length as `to`) in the file.
void Patch(const std::string& path, const std::string& from, const std::string& to) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string b = ss.str();
  const size_t at = b.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  b.replace(at, from.size(), to);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << b;
}

class GptOssModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (FindNpmDir().empty()) GTEST_SKIP() << "no tokenizer packages (scripts/bootstrap)";
  }
  TempDir tmp_;
};

// MXFP4 experts: the HF blocks/scales repacked at load and the GGUF's ggml blocks (llama.cpp's
// split ffn_{gate,up,down}_exps and their biases, post_attention_norm, attn_sinks), one kernel;
// the bf16 rest. (The f32 HF layout is checked against the NumPy reference.)
TEST_F(GptOssModelTest, SafetensorsAndGgufTwinsGiveIdenticalLogits) {
  const std::string dir = Synth(tmp_.path() + "/m", DType::kMXFP4, "both");
  const std::vector<float> a = Prefill(dir), b = Prefill(SynthGgufPath(dir), 2);
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b);
}

TEST_F(GptOssModelTest, BadCheckpointsNameTheTensor) {
  const std::string dir = Synth(tmp_.path() + "/m", DType::kMXFP4, "safetensors");
  const std::string file = dir + "/model.safetensors";
  std::ifstream in(file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string original = ss.str();
  // Down scales [E, hidden, inter / 32] = [8, 64, 2] -> [8, 32, 4]: same bytes, wrong shape.
  Patch(file, R"("shape":[8,64,2])", R"("shape":[8,32,4])");
  std::string e = LoadError(dir);
  EXPECT_NE(e.find("'model.layers.0.mlp.experts.down_proj_scales' has shape [8, 32, 4], expected [8, 64, 2]"),
            std::string::npos) << e;
  std::ofstream(file, std::ios::binary | std::ios::trunc) << original;
  Patch(file, "model.layers.0.self_attn.sinks", "model.layers.0.self_attn.sinkz");
  e = LoadError(dir);
  EXPECT_NE(e.find("missing tensor 'model.layers.0.self_attn.sinks'"), std::string::npos) << e;
}

}  // namespace
}  // namespace tessera

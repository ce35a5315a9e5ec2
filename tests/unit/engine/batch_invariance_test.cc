// Batch invariance (docs/architecture.md): a sequence's logits are bitwise identical alone,
// inside a batch of other sequences, with its prompt chunked at arbitrary
// boundaries, with shuffled KV blocks, with 1 or 2 threads, and recomputed after a
// preemption or from a cached prefix.
#include <algorithm>
#include <cstring>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "engine/batch_builder.h"
#include "engine/model.h"
#include "tests/unit/engine/test_model_util.h"

namespace tessera {
namespace {

using testing::MakeTinyModel;
using testing::RandomTokens;
using testing::TempDir;

constexpr int64_t kBlockSize = 16;
constexpr int64_t kNumBlocks = 256;

int32_t Argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

// One sequence's script: prompt split into chunks, then greedy decode steps.
struct Script {
  std::vector<int32_t> prompt;
  std::vector<int> chunks;  // sizes summing to prompt.size()
  int start_step = 0;       // step at which it joins the batch
  int decode_steps = 4;
};

// Per sequence: logits at the last prompt token, then at each decoded token.
using Trace = std::vector<std::vector<float>>;

std::vector<Trace> RunScripts(Model& model, const std::vector<Script>& scripts, std::vector<int32_t> block_order = {}) {
  auto cache = model.CreateKvCache(kNumBlocks, kBlockSize);
  EXPECT_TRUE(cache.ok());
  BatchBuilder builder(kNumBlocks, kBlockSize, block_order);
  const int64_t vocab = model.config().vocab_size;
  const size_t n = scripts.size();
  std::vector<int> ids(n), next_chunk(n, 0), decoded(n, 0);
  std::vector<size_t> fed(n, 0);
  std::vector<int32_t> last_token(n, -1);
  std::vector<Trace> traces(n);
  for (size_t i = 0; i < n; ++i) ids[i] = builder.AddSequence();
  for (int step = 0;; ++step) {
    std::vector<BatchBuilder::Chunk> chunks;
    std::vector<size_t> owners;
    bool pending = false;
    for (size_t i = 0; i < n; ++i) {
      const Script& s = scripts[i];
      if (decoded[i] == s.decode_steps) continue;
      pending = true;
      if (step < s.start_step) continue;
      BatchBuilder::Chunk c;
      c.seq = ids[i];
      if (fed[i] < s.prompt.size()) {
        const int size = s.chunks[next_chunk[i]++];
        c.tokens.assign(s.prompt.begin() + fed[i], s.prompt.begin() + fed[i] + size);
        fed[i] += size;
        if (fed[i] == s.prompt.size()) c.logits_at = {size - 1};
      } else {
        c.tokens = {last_token[i]};
        c.logits_at = {0};
        ++decoded[i];
      }
      chunks.push_back(std::move(c));
      owners.push_back(i);
    }
    if (!pending) break;
    if (chunks.empty()) continue;
    auto batch = builder.Build(chunks);
    EXPECT_TRUE(batch.ok()) << batch.status().ToString();
    std::vector<float> logits;
    Status st = model.Forward(*batch, cache->get(), &logits);
    EXPECT_TRUE(st.ok()) << st.ToString();
    size_t row = 0;
    for (size_t c = 0; c < chunks.size(); ++c) {
      if (chunks[c].logits_at.empty()) continue;
      const float* r = logits.data() + row * vocab;
      traces[owners[c]].emplace_back(r, r + vocab);
      last_token[owners[c]] = Argmax(r, vocab);
      ++row;
    }
  }
  return traces;
}

void ExpectBitwiseEqual(const Trace& a, const Trace& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size()) << what;
    EXPECT_EQ(0, std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)))
        << what << ": logits differ at step " << i;
  }
}

class BatchInvarianceTest : public ::testing::TestWithParam<std::tuple<std::string, DType>> {
 protected:
  void SetUp() override {
    // Mistral and Mixtral run with a sliding window shorter than the prompts.
    const std::string arch = std::get<0>(GetParam());
    const bool window = arch == "mistral" || arch == "mixtral";
    std::vector<std::string> sets;
    if (window) sets = {"sliding_window=8"};
    // Phi-3: fused projections, a window, partial rotary and LongRoPE (long factors).
    if (arch == "phi3") {
      sets = {"sliding_window=8", "partial_rotary_factor=0.5", "original_max_position_embeddings=32",
              R"(rope_scaling={"type":"longrope","short_factor":[1,1.5,2,3],"long_factor":[1,3,5,9]})"};
    }
    // Gemma: a 32k vocabulary instead of Gemma 3's 262k (the head is the same Linear as
    // every arch's; at 262k it was half of this test's time).
    if (arch == "gemma2" || arch == "gemma3") sets = {"vocab_size=32768"};
    // gpt-oss: HF MXFP4 experts with biases, sinks, an 8-token window on even layers.
    if (arch == "gpt_oss") sets = {"vocab_size=32768", "sliding_window=8"};
    // DeepSeek-V2-Lite layout: multi-head latent attention (absorbed for every token) on a
    // latent cache, q_lora, and a dense then an MoE layer; likewise a 32k head.
    if (arch == "deepseek_v2_lite") sets = {"vocab_size=32768", "q_lora_rank=24"};
    // DeepSeek-V3 layout: sigmoid scores, the correction bias, expert groups, a shared expert.
    if (arch == "deepseek_v3") sets = {"vocab_size=32768"};
    MakeTinyModel(dir_.path(), arch, std::get<1>(GetParam()), sets);
    backend1_ = MakeCpuBackend({1});
    backend2_ = MakeCpuBackend({2});
    auto m1 = Model::Load(dir_.path(), backend1_.get());
    auto m2 = Model::Load(dir_.path(), backend2_.get());
    ASSERT_TRUE(m1.ok()) << m1.status().ToString();
    ASSERT_TRUE(m2.ok()) << m2.status().ToString();
    model1_ = std::move(m1).value();
    model2_ = std::move(m2).value();
  }
  TempDir dir_;
  std::unique_ptr<Backend> backend1_, backend2_;
  std::unique_ptr<Model> model1_, model2_;
};

TEST_P(BatchInvarianceTest, AloneBatchedChunkedShuffledThreads) {
  std::mt19937 rng(1234);
  const int vocab = static_cast<int>(model1_->config().vocab_size);
  Script target{RandomTokens(rng, 37, vocab), {37}, 0, 5};
  const Trace alone = RunScripts(*model2_, {target})[0];
  ASSERT_EQ(alone.size(), 6u);

  // Inside a batch of 32 with others joining at different steps and chunking
  // (for MoE: other tokens share and shift the target's experts' groups).
  std::vector<Script> batch = {target};
  for (int i = 0; i < 31; ++i) {
    const int len = 1 + static_cast<int>(rng() % 60);
    std::vector<int> chunks;
    for (int left = len; left > 0;) {
      const int c = std::min(left, 1 + static_cast<int>(rng() % 20));
      chunks.push_back(c);
      left -= c;
    }
    batch.push_back({RandomTokens(rng, len, vocab), chunks, static_cast<int>(rng() % 4), 3 + i % 3});
  }
  ExpectBitwiseEqual(alone, RunScripts(*model2_, batch)[0], "batched");
  batch[0].start_step = 2;
  ExpectBitwiseEqual(alone, RunScripts(*model2_, batch)[0], "joins a running batch");

  // Prompt chunked at arbitrary boundaries, including 1-token chunks and
  // chunks that cross block boundaries.
  for (const std::vector<int>& chunks : std::vector<std::vector<int>>{
           {1, 36}, {16, 16, 5}, {15, 2, 20}, {1, 1, 1, 34}, {7, 7, 7, 7, 9}}) {
    Script s = target;
    s.chunks = chunks;
    ExpectBitwiseEqual(alone, RunScripts(*model2_, {s})[0], "chunked");
    batch[0] = s;
    ExpectBitwiseEqual(alone, RunScripts(*model2_, batch)[0], "chunked in batch");
  }

  // Non-contiguous, shuffled KV blocks.
  std::vector<int32_t> order(kNumBlocks);
  for (int i = 0; i < kNumBlocks; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  ExpectBitwiseEqual(alone, RunScripts(*model2_, {target}, order)[0], "shuffled blocks");

  // One thread vs two threads.
  ExpectBitwiseEqual(alone, RunScripts(*model1_, {target})[0], "1 thread vs 2 threads");

  // Preempted: recomputed as one prefill of prompt + generated tokens, it continues
  // with the same logits; likewise in two chunks, as after a prefix-cache hit.
  Script re = target;
  for (int k = 0; k < 3; ++k) re.prompt.push_back(Argmax(alone[k].data(), vocab));
  re.decode_steps = 1;
  const int len = static_cast<int>(re.prompt.size());
  const Trace rest = {alone[3], alone[4]};
  re.chunks = {len};
  ExpectBitwiseEqual(rest, RunScripts(*model2_, {re})[0], "recomputed after preemption");
  re.chunks = {32, len - 32};
  ExpectBitwiseEqual(rest, RunScripts(*model2_, {re})[0], "continued from a cached prefix");
}

INSTANTIATE_TEST_SUITE_P(Archs, BatchInvarianceTest,
                         ::testing::Values(std::make_tuple("qwen3", DType::kF32),
                                           std::make_tuple("llama", DType::kBF16),
                                           std::make_tuple("qwen2", DType::kF16),
                                           std::make_tuple("mistral", DType::kBF16),
                                           std::make_tuple("mixtral", DType::kBF16),
                                           std::make_tuple("qwen2_moe", DType::kF32),
                                           std::make_tuple("qwen3_moe", DType::kBF16),
                                           std::make_tuple("phi3", DType::kBF16),
                                           std::make_tuple("gpt_oss", DType::kMXFP4),
                                           // Gemma tiny: 16-token windows (sliding and global
                                           // layers, two RoPE tables for gemma3), soft-capping.
                                           std::make_tuple("gemma2", DType::kBF16),
                                           std::make_tuple("gemma3", DType::kF32),
                                           std::make_tuple("deepseek_v2_lite", DType::kBF16),
                                           std::make_tuple("deepseek_v3", DType::kBF16)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::string(DTypeName(std::get<1>(info.param)));
                         });

}  // namespace
}  // namespace tessera

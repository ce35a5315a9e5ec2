// End-to-end agreement of the CUDA backend with the CPU backend on synthetic
// checkpoints (engine/synth.h; tiny qwen3 and llama, f32 and bf16 weights; gemma2/3 f32):
//  - teacher-forced greedy decoding: the CPU picks each next token (argmax); the
//    CUDA model runs the same steps and we count how often its argmax agrees
//    (top-1 agreement, printed). Differences come from bf16 KV (both dtypes),
//    activations rounded to bf16 before bf16 GEMMs (cuBLAS mode), and f32
//    summation order; random-weight models have flat logits, so near-ties flip.
//  - deterministic mode: a sequence's logits are bitwise the same alone,
//    batched with others and with its prompt chunked;
//  - graph replay gives the eager logits (bitwise in deterministic mode).
// Needs the npm tokenizers (synth writes a real tokenizer); skips without them.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/batch_builder.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/model.h"
#include "engine/synth.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/unit/engine/test_model_util.h"

namespace tessera {
namespace {

constexpr int64_t kBlockSize = 16;

// Checkpoints are written once per (arch, dtype) for the whole binary.
const std::string& Checkpoint(const std::string& arch, DType dtype) {
  static std::map<std::string, std::string> paths;
  static std::vector<std::unique_ptr<testing::TempDir>> dirs;
  const std::string key = arch + "/" + std::string(DTypeName(dtype));
  auto it = paths.find(key);
  if (it != paths.end()) return it->second;
  dirs.push_back(std::make_unique<testing::TempDir>());
  // head_dim 32: the CUDA attention kernels take multiples of 32.
  std::vector<std::string> overrides;
  if (arch == "llama" || arch == "mixtral" || arch == "qwen2_moe") overrides.push_back("head_dim=32");
  // Phi-3: fused projections, half the head rotating (partial rotary), LongRoPE long factors.
  if (arch == "phi3") {
    overrides = {"head_dim=32", "partial_rotary_factor=0.5", "original_max_position_embeddings=32",
                 R"(rope_scaling={"type":"longrope","short_factor":[1,1,1,1,1,1,1,1],)"
                 R"("long_factor":[1,1.5,2,3,4,6,8,12]})"};
  }
  // Gemma: a 32k vocabulary, not Gemma 3's 262k (the emulated head GEMM would be most of the time).
  if (arch == "gemma2" || arch == "gemma3") overrides.push_back("vocab_size=32768");
  testing::MakeTinyModel(dirs.back()->path(), arch, dtype, overrides);
  return paths[key] = dirs.back()->path();
}

struct Loaded {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
  std::unique_ptr<KvCache> cache;
};

Loaded Load(const std::string& dir, bool cuda, bool deterministic = false, bool graphs = false) {
  Loaded l;
  if (cuda) {
    CudaBackendOptions o;
    o.deterministic = deterministic;
    o.cuda_graphs = graphs;
    StatusOr<std::unique_ptr<Backend>> b = MakeCudaBackend(o);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    if (!b.ok()) return l;
    l.backend = std::move(*b);
  } else {
    l.backend = MakeCpuBackend({2, false});
  }
  StatusOr<std::unique_ptr<Model>> m = Model::Load(dir, l.backend.get());
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return l;
  l.model = std::move(*m);
  StatusOr<std::unique_ptr<KvCache>> c = l.model->CreateKvCache(64, kBlockSize);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (c.ok()) l.cache = std::move(*c);
  return l;
}

int32_t Argmax(const float* v, int64_t n) { return static_cast<int32_t>(std::max_element(v, v + n) - v); }

// Prefill every prompt in one step, then `steps` decode steps of all sequences.
// forced (optional): the tokens to feed at each decode step, per sequence;
// otherwise each sequence's own argmax. Returns each step's argmax per sequence
// and, in *logits, each step's logits rows (concatenated).
std::vector<std::vector<int32_t>> Generate(Loaded& l, const std::vector<std::vector<int32_t>>& prompts, int steps,
                                           const std::vector<std::vector<int32_t>>* forced,
                                           std::vector<std::vector<float>>* logits) {
  const int64_t vocab = l.model->config().vocab_size;
  BatchBuilder bb(l.cache->num_blocks(), kBlockSize);
  std::vector<int> seqs;
  std::vector<BatchBuilder::Chunk> chunks;
  for (const auto& p : prompts) {
    seqs.push_back(bb.AddSequence());
    chunks.push_back({seqs.back(), p, {static_cast<int32_t>(p.size()) - 1}});
  }
  std::vector<std::vector<int32_t>> picks(prompts.size());
  for (int step = 0; step <= steps; ++step) {
    StatusOr<ForwardBatch> b = bb.Build(chunks);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    if (!b.ok()) return picks;
    std::vector<float> out;
    Status s = l.model->Forward(*b, l.cache.get(), &out);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok()) return picks;
    if (logits != nullptr) logits->push_back(out);
    chunks.clear();
    for (size_t i = 0; i < prompts.size(); ++i) {
      picks[i].push_back(Argmax(out.data() + i * vocab, vocab));
      const int32_t next = forced != nullptr ? (*forced)[i][step] : picks[i].back();
      chunks.push_back({seqs[i], {next}, {0}});
    }
  }
  return picks;
}

std::vector<std::vector<int32_t>> Prompts(int vocab) {
  std::mt19937 rng(2024);
  return {testing::RandomTokens(rng, 7, vocab), testing::RandomTokens(rng, 23, vocab),
          testing::RandomTokens(rng, 1, vocab), testing::RandomTokens(rng, 40, vocab)};
}

class ModelAgreementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TESSERA_REQUIRE_CUDA_DEVICE();
    if (FindNpmDir().empty()) GTEST_SKIP() << "npm tokenizers not found (set TESSERA_NPM_DIR); synth needs them";
  }
};

TEST_F(ModelAgreementTest, GreedyTop1AgreesWithCpu) {
  constexpr int kSteps = 5;
  struct Case {
    std::string arch;
    DType dtype;
    bool deterministic;
    double min_rate;
  };
  // Thresholds: f32 weights still differ by the bf16 KV cache; bf16 weights add
  // bf16-rounded activations in the cuBLAS GEMMs. Both stay well above chance.
  // (The deterministic mode's LinearTiled is slow under the emulator: one case.)
  // Gemma: GeGLU, sandwich norms, soft-capping (gemma2), two RoPE tables (gemma3).
  const Case cases[] = {{"qwen3", DType::kF32, true, 0.9},   {"qwen3", DType::kBF16, false, 0.75},
                        {"llama", DType::kF32, false, 0.9},  {"llama", DType::kBF16, false, 0.75},
                        {"phi3", DType::kF32, false, 0.9},   {"gemma2", DType::kF32, false, 0.9},
                        {"gemma3", DType::kF32, false, 0.9}};
  for (const Case& c : cases) {
    const std::string& dir = Checkpoint(c.arch, c.dtype);
    Loaded cpu = Load(dir, false);
    Loaded gpu = Load(dir, true, c.deterministic);
    ASSERT_TRUE(cpu.cache && gpu.cache);
    const auto prompts = Prompts(static_cast<int>(cpu.model->config().vocab_size));
    std::vector<std::vector<float>> cl, gl;
    const auto want = Generate(cpu, prompts, kSteps, nullptr, &cl);
    const auto got = Generate(gpu, prompts, kSteps, &want, &gl);
    int agree = 0, total = 0;
    double max_err = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      for (size_t s = 0; s < want[i].size() && s < got[i].size(); ++s, ++total) agree += want[i][s] == got[i][s];
    }
    for (size_t s = 0; s < cl.size() && s < gl.size(); ++s) {
      double scale = 1e-6, err = 0;
      for (size_t j = 0; j < cl[s].size(); ++j) {
        scale = std::max(scale, static_cast<double>(std::fabs(cl[s][j])));
        err = std::max(err, static_cast<double>(std::fabs(cl[s][j] - gl[s][j])));
      }
      max_err = std::max(max_err, err / scale);
    }
    const double rate = total > 0 ? static_cast<double>(agree) / total : 0;
    std::printf("  %-6s %-4s %-13s top-1 agreement %d/%d = %.3f (min %.2f), max logit rel error %.3g\n",
                c.arch.c_str(), std::string(DTypeName(c.dtype)).c_str(), c.deterministic ? "deterministic" : "cublas",
                agree, total, rate, c.min_rate, max_err);
    EXPECT_GE(rate, c.min_rate) << c.arch << " " << DTypeName(c.dtype);
  }
}

// Last-token logits of one prompt run (a) alone, (b) in a batch with others,
// (c) chunked into pieces of 5 tokens, all in deterministic mode: bitwise equal.
TEST_F(ModelAgreementTest, DeterministicModeIsBatchAndChunkInvariant) {
  const std::string& dir = Checkpoint("qwen3", DType::kBF16);
  Loaded gpu = Load(dir, true, /*deterministic=*/true);
  ASSERT_TRUE(gpu.cache);
  const int64_t vocab = gpu.model->config().vocab_size;
  const auto prompts = Prompts(static_cast<int>(vocab));
  const std::vector<int32_t>& target = prompts[1];
  auto run = [&](const std::vector<std::vector<int32_t>>& others, int64_t chunk) {
    BatchBuilder bb(gpu.cache->num_blocks(), kBlockSize);
    const int t = bb.AddSequence();
    std::vector<int> os;
    for (size_t i = 0; i < others.size(); ++i) os.push_back(bb.AddSequence());
    std::vector<float> last;
    for (size_t done = 0; done < target.size();) {
      const size_t take = std::min<size_t>(chunk, target.size() - done);
      std::vector<BatchBuilder::Chunk> chunks;
      for (size_t i = 0; i < others.size() && done == 0; ++i) chunks.push_back({os[i], others[i], {}});
      const bool end = done + take == target.size();
      chunks.push_back({t, std::vector<int32_t>(target.begin() + done, target.begin() + done + take),
                        end ? std::vector<int32_t>{static_cast<int32_t>(take) - 1} : std::vector<int32_t>{}});
      StatusOr<ForwardBatch> b = bb.Build(chunks);
      EXPECT_TRUE(b.ok());
      if (!b.ok()) return last;
      std::vector<float> out;
      Status s = gpu.model->Forward(*b, gpu.cache.get(), &out);
      EXPECT_TRUE(s.ok()) << s.ToString();
      if (end) last = out;
      done += take;
    }
    return last;
  };
  const std::vector<float> alone = run({}, 1000);
  const std::vector<float> batched = run({prompts[0], prompts[3], prompts[2]}, 1000);
  const std::vector<float> chunked = run({}, 5);
  ASSERT_EQ(alone.size(), static_cast<size_t>(vocab));
  ASSERT_EQ(batched.size(), alone.size());
  ASSERT_EQ(chunked.size(), alone.size());
  EXPECT_TRUE(cuda_test::BitwiseEqual(alone.data(), batched.data(), alone.size())) << "alone vs batched";
  EXPECT_TRUE(cuda_test::BitwiseEqual(alone.data(), chunked.data(), alone.size())) << "alone vs chunked";
}

// Decode steps through captured graphs (3 sequences padded to the captured size
// 4) give the eager logits: bitwise in deterministic mode, within f32 noise with
// cuBLAS (whose algorithm may change with the padded row count).
TEST_F(ModelAgreementTest, GraphReplayMatchesEager) {
  const std::string& dir = Checkpoint("qwen3", DType::kBF16);
  for (bool det : {true, false}) {
    Loaded eager = Load(dir, true, det, /*graphs=*/false);
    Loaded graph = Load(dir, true, det, /*graphs=*/true);
    ASSERT_TRUE(eager.cache && graph.cache);
    ASSERT_TRUE(graph.backend->SupportsGraphs());
    Status s = graph.model->EnableGraphs(/*max_num_seqs=*/4, /*max_model_len=*/256, kBlockSize);
    ASSERT_TRUE(s.ok()) << s.ToString();
    auto prompts = Prompts(static_cast<int>(eager.model->config().vocab_size));
    prompts.pop_back();  // 3 sequences: decode batches padded to 4
    std::vector<std::vector<float>> el, gl;
    const auto want = Generate(eager, prompts, 3, nullptr, &el);  // capture at step 1, replays at 2 and 3
    Generate(graph, prompts, 3, &want, &gl);
    EXPECT_EQ(graph.model->num_captured_graphs(), 1);
    ASSERT_EQ(el.size(), gl.size());
    for (size_t step = 0; step < el.size(); ++step) {
      ASSERT_EQ(el[step].size(), gl[step].size());
      if (det) {
        EXPECT_TRUE(cuda_test::BitwiseEqual(el[step].data(), gl[step].data(), el[step].size())) << "step " << step;
      } else {
        for (size_t j = 0; j < el[step].size(); ++j) {
          ASSERT_NEAR(el[step][j], gl[step][j], 1e-4f * (1.0f + std::fabs(el[step][j]))) << "step " << step;
        }
      }
    }
  }
}

// MoE models (engine/moe/ on the CUDA MoE ops): teacher-forced greedy top-1
// agreement with the CPU for each architecture, and in deterministic mode a
// decode graph replays the eager logits bitwise.
TEST_F(ModelAgreementTest, MoeGreedyTop1AgreesWithCpuAndGraphsReplay) {
  for (const char* arch : {"mixtral", "qwen2_moe", "qwen3_moe"}) {
    const std::string& dir = Checkpoint(arch, DType::kF32);
    Loaded cpu = Load(dir, false);
    Loaded gpu = Load(dir, true);
    ASSERT_TRUE(cpu.cache && gpu.cache) << arch;
    const auto prompts = Prompts(static_cast<int>(cpu.model->config().vocab_size));
    const auto want = Generate(cpu, prompts, 4, nullptr, nullptr);
    const auto got = Generate(gpu, prompts, 4, &want, nullptr);
    int agree = 0, total = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      for (size_t s = 0; s < want[i].size() && s < got[i].size(); ++s, ++total) agree += want[i][s] == got[i][s];
    }
    const double rate = total > 0 ? static_cast<double>(agree) / total : 0;
    std::printf("  %-9s f32 cublas top-1 agreement %d/%d = %.3f\n", arch, agree, total, rate);
    // Routing decisions near a tie may flip between backends (bf16 KV), moving
    // those tokens further than in dense models; still far above chance.
    EXPECT_GE(rate, 0.75) << arch;
    // The expert counters agree: both backends routed the same number of pairs.
    auto cl = cpu.model->ReadExpertLoad(), gl = gpu.model->ReadExpertLoad();
    ASSERT_TRUE(cl.ok() && gl.ok());
    int64_t ct = 0, gt = 0;
    for (int64_t c : cl->counts) ct += c;
    for (int64_t c : gl->counts) gt += c;
    EXPECT_EQ(ct, gt) << arch;
    EXPECT_GT(ct, 0) << arch;
  }
  const std::string& dir = Checkpoint("qwen3_moe", DType::kBF16);
  Loaded eager = Load(dir, true, /*deterministic=*/true, /*graphs=*/false);
  Loaded graph = Load(dir, true, /*deterministic=*/true, /*graphs=*/true);
  ASSERT_TRUE(eager.cache && graph.cache);
  ASSERT_TRUE(graph.model->EnableGraphs(/*max_num_seqs=*/4, /*max_model_len=*/256, kBlockSize).ok());
  auto prompts = Prompts(static_cast<int>(eager.model->config().vocab_size));
  prompts.pop_back();
  std::vector<std::vector<float>> el, gl;
  const auto want = Generate(eager, prompts, 3, nullptr, &el);
  Generate(graph, prompts, 3, &want, &gl);
  EXPECT_EQ(graph.model->num_captured_graphs(), 1);
  ASSERT_EQ(el.size(), gl.size());
  for (size_t step = 0; step < el.size(); ++step) {
    ASSERT_EQ(el[step].size(), gl[step].size());
    EXPECT_TRUE(cuda_test::BitwiseEqual(el[step].data(), gl[step].data(), el[step].size())) << "step " << step;
  }
}

TEST_F(ModelAgreementTest, UnsupportedHeadDimIsRefusedAtLoad) {
  testing::TempDir dir;
  testing::MakeTinyModel(dir.path(), "llama", DType::kF32, {"head_dim=16"});
  StatusOr<std::unique_ptr<Backend>> b = MakeCudaBackend(CudaBackendOptions{});
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  StatusOr<std::unique_ptr<Model>> m = Model::Load(dir.path(), b->get());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().ToString().find("head_dim 16"), std::string::npos) << m.status().ToString();
}

// gpt-oss needs ops without CUDA kernels yet (attention sinks first): refused by name, never
// run without them.
TEST_F(ModelAgreementTest, GptOssIsRefusedNamingTheMissingOp) {
  testing::TempDir dir;
  testing::MakeTinyModel(dir.path(), "gpt_oss", DType::kBF16, {"vocab_size=32768", "head_dim=64"});
  StatusOr<std::unique_ptr<Backend>> b = MakeCudaBackend(CudaBackendOptions{});
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  StatusOr<std::unique_ptr<Model>> m = Model::Load(dir.path(), b->get());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().ToString().find("GptOssForCausalLM needs the attention sinks op"), std::string::npos)
      << m.status().ToString();
}

TEST(GraphBatchSizesTest, CappedByMaxNumSeqsWhichIsAlwaysCaptured) {
  EXPECT_EQ(Model::GraphBatchSizes(1), (std::vector<int64_t>{1}));
  EXPECT_EQ(Model::GraphBatchSizes(5), (std::vector<int64_t>{1, 2, 4, 5}));
  EXPECT_EQ(Model::GraphBatchSizes(64), (std::vector<int64_t>{1, 2, 4, 8, 16, 24, 32, 48, 64}));
  const std::vector<int64_t> big = Model::GraphBatchSizes(1000);
  EXPECT_EQ(big.size(), 15u);
  EXPECT_EQ(big.back(), 256);
}

// The KV-pool sizing input: a profiled forward grows the workspace to the
// largest step (device memory in use goes up) and leaves the model usable.
TEST_F(ModelAgreementTest, ProfileForwardReachesThePeakWorkspace) {
  const std::string& dir = Checkpoint("qwen3", DType::kBF16);
  Loaded gpu = Load(dir, true);
  ASSERT_TRUE(gpu.cache);
  int64_t total = 0, free_before = 0, free_after = 0;
  ASSERT_TRUE(gpu.backend->MemoryInfo(&total, &free_before));
  Status s = gpu.model->ProfileForward(/*tokens=*/96, /*max_num_seqs=*/4, /*max_model_len=*/40, kBlockSize);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(gpu.backend->MemoryInfo(&total, &free_after));
  // 96 tokens of activations plus 4 rows of logits (vocab 151936) stay allocated.
  EXPECT_GE(free_before - free_after, 4 * 151936 * 4) << "total " << total;
  const auto prompts = Prompts(static_cast<int>(gpu.model->config().vocab_size));
  const auto picks = Generate(gpu, {prompts[0]}, 1, nullptr, nullptr);
  EXPECT_EQ(picks[0].size(), 2u);
  EXPECT_FALSE(MakeCpuBackend({1, false})->MemoryInfo(&total, &free_after)) << "host backends report no device memory";
  Loaded cpu = Load(dir, false);
  ASSERT_TRUE(cpu.model);
  EXPECT_EQ(cpu.model->EnableGraphs(4, 64, kBlockSize).code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace tessera

// Tensor and expert parallelism on in-process ranks (threads), against the same
// model on one rank: TP=2/4 logits within the dense tolerance and bitwise
// equal alone vs batched at the same TP size; EP=2/4 (data-parallel attention)
// logits bitwise equal to one rank for every MoE arch; a rank reads only its
// slices of the checkpoint.
#include "engine/parallel/shard/sharded_forward.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "engine/batch_builder.h"
#include "engine/parallel/inproc.h"
#include "tests/unit/engine/parallel/model_steps.h"
#include "tests/unit/engine/test_model_util.h"

namespace tessera::parallel {
namespace {

using testing::MakeTinyModel;
using testing::TempDir;

using steps::BatchedSteps;
using steps::kBlocks;
using steps::kBlockSize;

struct RunResult {
  std::vector<std::vector<float>> logits;  // rank 0, per step
  std::vector<TensorReads> reads;          // rank 0's weight reads
  std::vector<std::vector<TensorReads>> all_reads;
  std::string error;
  ExpertLoad load;  // rank 0's, after the last step
  int64_t rebalances = 0, experts_moved = 0;
};

RunResult Err(const std::string& e) {
  RunResult r;
  r.error = e;
  return r;
}

RunResult RunRanks(const std::string& dir, int world, ShardOptions opts, const std::vector<ForwardBatch>& steps,
              bool record_reads = false) {
  RunResult res;
  if (world == 1 && !opts.expert_parallel) {
    auto backend = MakeCpuBackend({.num_threads = 1});
    auto m = Model::Load(dir, backend.get());
    if (!m.ok()) return Err(m.status().ToString());
    auto cache = (*m)->CreateKvCache(kBlocks, kBlockSize);
    for (const ForwardBatch& b : steps) {
      res.logits.emplace_back();
      Status s = (*m)->Forward(b, cache->get(), &res.logits.back());
      if (!s.ok()) return Err(s.ToString());
    }
    if (auto l = (*m)->ReadExpertLoad(); l.ok()) res.load = *l;
    return res;
  }
  auto g = InProcessGroup::Create(world, {std::chrono::milliseconds(20000)});
  if (!g.ok()) return Err(g.status().ToString());
  std::vector<std::string> errors(world);
  res.all_reads.resize(world);
  std::vector<std::thread> ts;
  for (int r = 0; r < world; ++r) {
    ts.emplace_back([&, r] {
      ParallelSetup setup{opts, &(*g)->communicator(r), record_reads};
      setup.shard.world_size = world;
      setup.shard.rank = r;
      auto backend = MakeCpuBackend({.num_threads = 1});
      auto m = Model::Load(dir, backend.get(), &setup);
      if (!m.ok()) {
        errors[r] = m.status().ToString();
        return;
      }
      auto cache = (*m)->CreateKvCache(kBlocks, kBlockSize);
      for (const ForwardBatch& b : steps) {
        std::vector<float> logits;
        Status s = ShardedForward(**m, b, cache->get(), &logits);
        if (!s.ok()) {
          errors[r] = s.ToString();
          return;
        }
        if (r == 0) res.logits.push_back(std::move(logits));
      }
      res.all_reads[r] = (*m)->shard()->reads();
      if (r == 0) {
        if (auto l = (*m)->ReadExpertLoad(); l.ok()) res.load = *l;
        res.rebalances = (*m)->shard()->rebalances();
        res.experts_moved = (*m)->shard()->experts_moved();
      }
    });
  }
  for (auto& t : ts) t.join();
  for (int r = 0; r < world; ++r) {
    if (!errors[r].empty()) res.error += "rank " + std::to_string(r) + ": " + errors[r] + "; ";
  }
  return res;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b, double* scale) {
  double d = 0;
  *scale = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
    *scale = std::max(*scale, std::abs(static_cast<double>(a[i])));
  }
  return d;
}

bool Bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

int VocabOf(const std::string& dir) { return static_cast<int>(LoadModelConfig(dir)->vocab_size); }

class TensorParallel : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(TensorParallel, LogitsWithinDenseToleranceOfOneRankAndBatchInvariant) {
  const auto& [arch, world] = GetParam();
  TempDir dir;
  MakeTinyModel(dir.path(), arch, DType::kBF16);
  const int vocab = VocabOf(dir.path());
  const auto steps = BatchedSteps(vocab, false);
  RunResult one = RunRanks(dir.path(), 1, {}, steps);
  ASSERT_EQ(one.error, "");
  RunResult tp = RunRanks(dir.path(), world, {}, steps);
  ASSERT_EQ(tp.error, "");
  ASSERT_EQ(tp.logits.size(), one.logits.size());
  for (size_t s = 0; s < steps.size(); ++s) {
    ASSERT_EQ(tp.logits[s].size(), one.logits[s].size());
    double scale = 1;
    const double d = MaxAbsDiff(one.logits[s], tp.logits[s], &scale);
    // Row-parallel sums add the ranks' partial dot products: f32 rounding only.
    EXPECT_LE(d, 1e-4 * scale) << arch << " TP=" << world << " step " << s;
  }
  // Sequence 0 alone at the same TP size: its rows bitwise equal to the batched run.
  RunResult alone = RunRanks(dir.path(), world, {}, BatchedSteps(vocab, true));
  ASSERT_EQ(alone.error, "");
  const size_t prompt_rows = 19 * static_cast<size_t>(vocab);
  std::vector<float> batched0(tp.logits[0].begin(), tp.logits[0].begin() + prompt_rows);
  EXPECT_TRUE(Bitwise(alone.logits[0], batched0)) << arch << " TP=" << world;
  for (size_t s = 1; s < steps.size(); ++s) {
    std::vector<float> b(tp.logits[s].begin(), tp.logits[s].begin() + vocab);
    EXPECT_TRUE(Bitwise(alone.logits[s], b)) << arch << " TP=" << world << " decode " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Dense, TensorParallel,
                         ::testing::Combine(::testing::Values("llama", "qwen3", "qwen2", "phi3"),
                                            ::testing::Values(2, 4)));
INSTANTIATE_TEST_SUITE_P(Moe, TensorParallel,
                         ::testing::Combine(::testing::Values("mixtral", "qwen2_moe"), ::testing::Values(2)));

// GGUF with Q8_0 matrices: column slices on quantization-block boundaries.
TEST(TensorParallelGguf, Q8LogitsWithinToleranceOfOneRank) {
  TempDir dir;
  SynthOptions o;
  o.arch = "qwen3";
  o.dtype = DType::kQ8_0;
  o.format = "gguf";
  o.out_dir = dir.path() + "/m.gguf";
  ASSERT_TRUE(WriteSyntheticCheckpoint(o).ok());
  ModelConfig c;
  {
    auto backend = MakeCpuBackend({.num_threads = 1});
    auto m = Model::Load(o.out_dir, backend.get());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    c = (*m)->config();
  }
  const auto steps = BatchedSteps(static_cast<int>(c.vocab_size), false);
  RunResult one = RunRanks(o.out_dir, 1, {}, steps);
  ASSERT_EQ(one.error, "");
  RunResult tp = RunRanks(o.out_dir, 2, {}, steps);
  ASSERT_EQ(tp.error, "");
  for (size_t s = 0; s < steps.size(); ++s) {
    double scale = 1;
    EXPECT_LE(MaxAbsDiff(one.logits[s], tp.logits[s], &scale), 1e-4 * scale) << "step " << s;
  }
}

// A tiny MoE checkpoint (bf16; gpt-oss: HF MXFP4 experts with biases and a 32k vocabulary,
// its 201k head proves nothing here); router_skew > 0 makes a few experts hot.
void MakeMoe(const std::string& dir, const std::string& arch, double router_skew = 0.0) {
  SynthOptions o;
  o.arch = arch;
  o.dtype = arch == "gpt_oss" ? DType::kMXFP4 : DType::kBF16;
  o.out_dir = dir;
  o.router_skew = router_skew;
  if (arch == "gpt_oss" || arch == "deepseek_v3") o.overrides = {"vocab_size=32768"};
  ASSERT_TRUE(WriteSyntheticCheckpoint(o).ok());
}

class ExpertParallel : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(ExpertParallel, DataParallelAttentionLogitsBitwiseEqualOneRank) {
  const auto& [arch, world] = GetParam();
  TempDir dir;
  MakeMoe(dir.path(), arch);
  const auto steps = BatchedSteps(VocabOf(dir.path()), false);
  RunResult one = RunRanks(dir.path(), 1, {}, steps);
  ASSERT_EQ(one.error, "");
  ShardOptions ep;
  ep.expert_parallel = true;
  ep.data_parallel_attention = true;
  RunResult par = RunRanks(dir.path(), world, ep, steps);
  ASSERT_EQ(par.error, "");
  ASSERT_EQ(par.logits.size(), one.logits.size());
  for (size_t s = 0; s < steps.size(); ++s) EXPECT_TRUE(Bitwise(one.logits[s], par.logits[s])) << arch << " step " << s;
}

TEST_P(ExpertParallel, TensorParallelAttentionWithExpertsOnRanksWithinTolerance) {
  const auto& [arch, world] = GetParam();
  TempDir dir;
  MakeMoe(dir.path(), arch);
  const auto steps = BatchedSteps(VocabOf(dir.path()), false);
  RunResult one = RunRanks(dir.path(), 1, {}, steps);
  ASSERT_EQ(one.error, "");
  ShardOptions ep;
  ep.expert_parallel = true;
  RunResult par = RunRanks(dir.path(), world, ep, steps);
  ASSERT_EQ(par.error, "");
  for (size_t s = 0; s < steps.size(); ++s) {
    double scale = 1;
    EXPECT_LE(MaxAbsDiff(one.logits[s], par.logits[s], &scale), 1e-4 * scale) << arch << " step " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Moe, ExpertParallel,
                         ::testing::Combine(::testing::Values("mixtral", "qwen2_moe", "qwen3_moe"),
                                            ::testing::Values(2, 4)));
INSTANTIATE_TEST_SUITE_P(GptOss, ExpertParallel, ::testing::Combine(::testing::Values("gpt_oss"), ::testing::Values(2)));

// DeepSeek-V3 layout (sigmoid scores, the correction bias choosing, noaux_tc groups, a
// shared expert; MLA): the weights are computed once on the token's rank, so expert
// parallelism over 2 and 4 ranks equals one rank bit for bit. Data-parallel attention
// only: MLA's latent is not split across ranks.
TEST(ExpertParallelDeepseek, DataParallelAttentionLogitsBitwiseEqualOneRank) {
  TempDir dir;
  MakeMoe(dir.path(), "deepseek_v3");
  const auto steps = BatchedSteps(VocabOf(dir.path()), false);
  RunResult one = RunRanks(dir.path(), 1, {}, steps);
  ASSERT_EQ(one.error, "");
  for (int world : {2, 4}) {
    ShardOptions ep;
    ep.expert_parallel = true;
    ep.data_parallel_attention = true;
    RunResult par = RunRanks(dir.path(), world, ep, steps);
    ASSERT_EQ(par.error, "") << world;
    ASSERT_EQ(par.logits.size(), one.logits.size());
    for (size_t s = 0; s < steps.size(); ++s) EXPECT_TRUE(Bitwise(one.logits[s], par.logits[s])) << world << " " << s;
  }
  ShardOptions tp;  // tensor-parallel attention would split the latent's heads: refused
  RunResult refused = RunRanks(dir.path(), 2, tp, steps);
  EXPECT_NE(refused.error.find("multi-head latent attention"), std::string::npos) << refused.error;
}

// The group's expert load (every rank routes only its own sequences under
// data-parallel attention) equals one rank's routing counts exactly.
TEST(ExpertLoadTest, DataParallelRanksReportTheWholeGroupsLoad) {
  TempDir dir;
  MakeMoe(dir.path(), "mixtral", 3.0);
  const auto steps = BatchedSteps(VocabOf(dir.path()), false);
  RunResult one = RunRanks(dir.path(), 1, {}, steps);
  ASSERT_EQ(one.error, "");
  ShardOptions ep;
  ep.expert_parallel = true;
  ep.data_parallel_attention = true;
  RunResult par = RunRanks(dir.path(), 2, ep, steps);
  ASSERT_EQ(par.error, "");
  EXPECT_EQ(par.load.counts, one.load.counts);
  EXPECT_EQ(par.load.world_size, 2);
  // By computing rank: sums to the same counts.
  ASSERT_EQ(par.load.rank_counts.size(), par.load.counts.size() * 2);
  for (size_t i = 0; i < par.load.counts.size(); ++i) {
    EXPECT_EQ(par.load.rank_counts[2 * i] + par.load.rank_counts[2 * i + 1], par.load.counts[i]) << i;
  }
}

// EPLB: redundant replicas and a rebalance after every step (window of 2
// steps), so the placement changes between the prefill and the decode steps
// and experts move between ranks; logits stay bitwise those of one rank.
class Eplb : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(Eplb, RebalancingMidGenerationKeepsLogitsBitwiseEqualOneRank) {
  const auto& [arch, world] = GetParam();
  TempDir dir;
  MakeMoe(dir.path(), arch, 3.0);
  const auto steps = BatchedSteps(VocabOf(dir.path()), false);
  RunResult one = RunRanks(dir.path(), 1, {}, steps);
  ASSERT_EQ(one.error, "");
  ShardOptions ep;
  ep.expert_parallel = true;
  ep.data_parallel_attention = true;
  ep.eplb.enabled = true;
  ep.eplb.num_redundant_experts = world;
  ep.eplb.step_interval = 1;
  ep.eplb.window_size = 2;
  RunResult par = RunRanks(dir.path(), world, ep, steps);
  ASSERT_EQ(par.error, "");
  ASSERT_EQ(par.logits.size(), one.logits.size());
  for (size_t s = 0; s < steps.size(); ++s) EXPECT_TRUE(Bitwise(one.logits[s], par.logits[s])) << arch << " step " << s;
  EXPECT_EQ(par.rebalances, static_cast<int64_t>(steps.size()));
  EXPECT_GT(par.experts_moved, 0) << "the rebalances should have moved experts";
  EXPECT_EQ(par.load.counts, one.load.counts);
}

TEST(EplbTest, TensorParallelAttentionWithReplicasWithinTolerance) {
  TempDir dir;
  MakeMoe(dir.path(), "qwen2_moe", 3.0);
  const auto steps = BatchedSteps(VocabOf(dir.path()), false);
  RunResult one = RunRanks(dir.path(), 1, {}, steps);
  ASSERT_EQ(one.error, "");
  ShardOptions ep;
  ep.expert_parallel = true;
  ep.eplb.enabled = true;
  ep.eplb.num_redundant_experts = 2;
  ep.eplb.step_interval = 1;
  ep.eplb.window_size = 1;
  RunResult par = RunRanks(dir.path(), 2, ep, steps);
  ASSERT_EQ(par.error, "");
  for (size_t s = 0; s < steps.size(); ++s) {
    double scale = 1;
    EXPECT_LE(MaxAbsDiff(one.logits[s], par.logits[s], &scale), 1e-4 * scale) << "step " << s;
  }
  EXPECT_EQ(par.rebalances, static_cast<int64_t>(steps.size()));
  EXPECT_EQ(par.load.counts, one.load.counts);
}

TEST(EplbTest, RedundantExpertsMustFillTheRanksEvenly) {
  TempDir dir;
  MakeTinyModel(dir.path(), "mixtral", DType::kBF16);
  ShardOptions ep;
  ep.expert_parallel = true;
  ep.data_parallel_attention = true;
  ep.eplb.num_redundant_experts = 1;  // 9 slots over 2 ranks
  RunResult par = RunRanks(dir.path(), 2, ep, BatchedSteps(VocabOf(dir.path()), true));
  EXPECT_NE(par.error.find("experts + redundant experts must be a multiple of the 2 ranks"), std::string::npos)
      << par.error;
}

INSTANTIATE_TEST_SUITE_P(Moe, Eplb,
                         ::testing::Combine(::testing::Values("mixtral", "qwen2_moe", "qwen3_moe"),
                                            ::testing::Values(2, 4)));
INSTANTIATE_TEST_SUITE_P(GptOss, Eplb, ::testing::Combine(::testing::Values("gpt_oss"), ::testing::Values(2)));

// gpt-oss runs the EP and EPLB suites above (its expert biases travel with their expert);
// experts split by tensor parallelism would need the down bias on one rank: refused by name.
TEST(GptOssParallel, ExpertsSplitByTensorParallelismAreRefused) {
  TempDir dir;
  MakeMoe(dir.path(), "gpt_oss");
  RunResult tp = RunRanks(dir.path(), 2, {}, BatchedSteps(VocabOf(dir.path()), true));
  EXPECT_NE(tp.error.find("expert biases with each expert split over tensor-parallel ranks"), std::string::npos)
      << tp.error;
}

// Each rank reads a disjoint part of every split tensor; together the ranks read
// each split tensor exactly once.
TEST(ShardedLoad, EachRankReadsOnlyItsSlice) {
  TempDir dir;
  MakeTinyModel(dir.path(), "qwen2_moe", DType::kBF16);
  const auto steps = BatchedSteps(VocabOf(dir.path()), false);
  ShardOptions ep;
  ep.expert_parallel = true;
  RunResult par = RunRanks(dir.path(), 2, ep, {steps[0]}, /*record_reads=*/true);
  ASSERT_EQ(par.error, "");
  for (const std::string& name : {std::string("model.layers.0.self_attn.q_proj.weight"),
                                  std::string("model.layers.0.self_attn.o_proj.weight"),
                                  std::string("model.embed_tokens.weight"),
                                  std::string("model.layers.1.mlp.experts.5.down_proj.weight")}) {
    std::vector<ByteRange> all;
    int64_t tensor_bytes = 0;
    int ranks_reading = 0;
    for (const auto& reads : par.all_reads) {
      for (const TensorReads& t : reads) {
        if (t.name != name) continue;
        tensor_bytes = t.tensor_bytes;
        ranks_reading += t.ranges.empty() ? 0 : 1;
        all.insert(all.end(), t.ranges.begin(), t.ranges.end());
      }
    }
    ASSERT_GT(tensor_bytes, 0) << name;
    std::sort(all.begin(), all.end(), [](auto a, auto b) { return a.begin < b.begin; });
    int64_t at = 0;
    for (const ByteRange& r : all) {
      EXPECT_EQ(r.begin, at) << name << ": ranges overlap or leave a gap";
      at = r.end;
    }
    EXPECT_EQ(at, tensor_bytes) << name;
    EXPECT_EQ(ranks_reading, name.find("experts") != std::string::npos ? 1 : 2) << name;
  }
}

TEST(ShardPlanTest, RejectsLayoutsThatDoNotSplit) {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.num_q_heads = 6;
  c.num_kv_heads = 3;
  c.vocab_size = 100;
  c.intermediate_size = 64;
  ShardOptions o{4, 0, false, false, {}};
  EXPECT_FALSE(MakeShardPlan(c, o).ok());  // 6 heads over 4 ranks
  o.world_size = 3;
  auto p = MakeShardPlan(c, o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->q_heads.count, 2);
  EXPECT_EQ(p->kv_heads.count, 1);
  o.expert_parallel = true;
  EXPECT_FALSE(MakeShardPlan(c, o).ok());  // no experts
  c.num_q_heads = 4;
  c.num_kv_heads = 2;
  o = {4, 3, false, false, {}};
  p = MakeShardPlan(c, o);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->kv_heads.begin, 1);  // q heads 3 read KV head 1, replicated on ranks 2 and 3
  EXPECT_EQ(p->kv_heads.count, 1);
}

}  // namespace
}  // namespace tessera::parallel

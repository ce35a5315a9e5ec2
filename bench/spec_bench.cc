// tessera-spec-bench: the cost model of speculative decoding on one model, the
// engine alone. For each batch size b and k, the time of one verification step
// (b sequences x (1 + k) tokens, logits for every row, as the engine loop
// verifies) relative to one plain decode step (b x 1 token), both at the same
// context length, median of `repeats` after a warm-up. Speculation at k pays
// when the expected accepted tokens per step, 1 + E[accepted], exceed that
// ratio (plus the proposer's cost: zero for n-gram, k draft-model steps).
//
//   tessera-spec-bench --model PATH --threads 2 --batches 1,4,16 --k 2,4,8 --context 256
//
// Prints one JSON line per (b, k), then a markdown table.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine/model.h"
#include "common/log.h"

namespace {

using Clock = std::chrono::steady_clock;

std::vector<int> ParseList(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(std::stoi(item));
  }
  return out;
}

// b sequences, each `tokens` tokens starting at `start`; sequence i owns blocks
// [i * blocks_per_seq, ...). Logits for the last `logit_rows` of each.
tessera::ForwardBatch MakeBatch(int b, int64_t start, int tokens, int logit_rows, int64_t blocks_per_seq,
                                int block_size, std::mt19937& rng, int vocab) {
  tessera::ForwardBatch fb;
  fb.num_seqs = b;
  fb.max_blocks_per_seq = blocks_per_seq;
  for (int i = 0; i < b; ++i) {
    for (int64_t j = 0; j < blocks_per_seq; ++j) fb.block_tables.push_back(static_cast<int32_t>(i * blocks_per_seq + j));
  }
  std::uniform_int_distribution<int> tok(0, vocab - 1);
  for (int i = 0; i < b; ++i) {
    const int first = static_cast<int>(fb.token_ids.size());
    for (int t = 0; t < tokens; ++t) {
      const int64_t pos = start + t;
      fb.token_ids.push_back(tok(rng));
      fb.positions.push_back(static_cast<int32_t>(pos));
      fb.token_to_seq.push_back(i);
      fb.slot_mapping.push_back((i * blocks_per_seq + pos / block_size) * block_size + pos % block_size);
    }
    for (int r = tokens - logit_rows; r < tokens; ++r) fb.logits_indices.push_back(first + r);
  }
  return fb;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Speculative decoding cost model: verification step vs plain decode step"};
  std::string model_path, batches_flag = "1,4,16", k_flag = "2,4,8";
  int threads = 0, context = 256, repeats = 9;
  app.add_option("--model", model_path, "model: HF checkpoint directory or .gguf")->required();
  app.add_option("--threads", threads, "CPU threads (0 = all)")->check(CLI::Range(0, 1024));
  app.add_option("--batches", batches_flag, "batch sizes, e.g. 1,4,16");
  app.add_option("--k", k_flag, "draft counts, e.g. 2,4,8");
  app.add_option("--context", context, "tokens of context before the step")->check(CLI::Range(1, 1 << 16));
  app.add_option("--repeats", repeats, "timed steps per point (median reported)")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  const std::vector<int> batches = ParseList(batches_flag), ks = ParseList(k_flag);
  if (batches.empty() || ks.empty()) {
    tessera::LogError("--batches and --k must list at least one value");
    return 2;
  }
  tessera::CpuBackendOptions bo;
  bo.num_threads = threads;
  auto backend = tessera::MakeCpuBackend(bo);
  auto model_or = tessera::Model::Load(model_path, backend.get());
  if (!model_or.ok()) {
    tessera::LogError("{}", model_or.status().ToString());
    return 1;
  }
  tessera::Model& model = **model_or;
  const int vocab = static_cast<int>(model.config().vocab_size);
  const int block_size = 16;
  const int max_b = *std::max_element(batches.begin(), batches.end());
  const int max_k = *std::max_element(ks.begin(), ks.end());
  const int64_t blocks_per_seq = (context + max_k + 1 + block_size - 1) / block_size;
  auto cache = model.CreateKvCache(max_b * blocks_per_seq, block_size);
  if (!cache.ok()) {
    tessera::LogError("{}", cache.status().ToString());
    return 1;
  }
  std::mt19937 rng(1);
  std::vector<float> logits;
  // Fill every sequence's context once (chunks of 256 tokens).
  for (int64_t s = 0; s < context; s += 256) {
    const int n = static_cast<int>(std::min<int64_t>(256, context - s));
    auto fb = MakeBatch(max_b, s, n, 0, blocks_per_seq, block_size, rng, vocab);
    if (auto st = model.Forward(fb, cache->get(), &logits); !st.ok()) {
      tessera::LogError("{}", st.ToString());
      return 1;
    }
  }
  auto time_step = [&](int b, int tokens) {
    auto fb = MakeBatch(b, context, tokens, tokens, blocks_per_seq, block_size, rng, vocab);
    (void)model.Forward(fb, cache->get(), &logits);  // warm-up
    std::vector<double> t;
    for (int r = 0; r < repeats; ++r) {
      const auto t0 = Clock::now();
      (void)model.Forward(fb, cache->get(), &logits);
      // The acceptance rule reads every row once (greedy: an argmax per row).
      float acc = 0;
      for (size_t i = 0; i < logits.size(); i += static_cast<size_t>(vocab)) {
        acc += *std::max_element(logits.begin() + static_cast<int64_t>(i), logits.begin() + static_cast<int64_t>(i) + vocab);
      }
      t.push_back(std::chrono::duration<double>(Clock::now() - t0).count() + (acc == 12345.f ? 1e-12 : 0));
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  struct Row {
    int b, k;
    double plain_ms, verify_ms;
  };
  std::vector<Row> rows;
  for (int b : batches) {
    const double plain = time_step(b, 1);
    for (int k : ks) {
      const double verify = time_step(b, 1 + k);
      rows.push_back({b, k, plain * 1e3, verify * 1e3});
      std::printf("{\"batch\":%d,\"k\":%d,\"context\":%d,\"plain_step_ms\":%.3f,\"verify_step_ms\":%.3f,"
                  "\"ratio\":%.3f}\n",
                  b, k, context, plain * 1e3, verify * 1e3, verify / plain);
      std::fflush(stdout);
    }
  }
  std::printf("\n| batch | k | plain step (ms) | verify step (ms) | verify / plain |\n|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    std::printf("| %d | %d | %.2f | %.2f | %.2f |\n", r.b, r.k, r.plain_ms, r.verify_ms, r.verify_ms / r.plain_ms);
  }
  return 0;
}

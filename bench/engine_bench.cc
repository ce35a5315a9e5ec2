// tessera-engine-bench: prefill and decode speed of the engine alone (no server,
// no scheduler) on one checkpoint. Prints one JSON line per measurement.
//
//   tessera-engine-bench --model DIR --threads 2 --prompt 512 --decode 32 --batch 1
//
// Prefill: one sequence's prompt in one step (tokens/s). Decode: `batch`
// sequences each with a prompt, then `decode` steps of one token per sequence
// (tokens/s = batch * steps / time); also bytes of weights read per step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "bench/limits.h"
#include "engine/batch_builder.h"
#include "engine/model.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Engine prefill/decode benchmark"};
  std::string model_dir;
  int threads = 0, prompt = 512, decode = 32, batch = 1, repeats = 2, decode_context = 128;
  app.add_option("--model", model_dir, "HF checkpoint directory")->required();
  app.add_option("--threads", threads, "CPU threads (0 = all)");
  app.add_option("--prompt", prompt, "prefill prompt length");
  app.add_option("--decode", decode, "decode steps");
  app.add_option("--batch", batch, "sequences decoding together");
  app.add_option("--decode-context", decode_context, "prompt length before decode");
  app.add_option("--repeats", repeats, "prefill repetitions (best is reported)");
  CLI11_PARSE(app, argc, argv);

  // Limits first, on the same number of threads the engine will use.
  tessera::ThreadPool limit_pool(threads > 0 ? threads : tessera::ThreadPool::HardwareThreads());
  double bandwidth = tessera::bench::MeasureReadBandwidth(limit_pool);
  const double fma_peak = tessera::bench::MeasureFmaPeak(limit_pool);
  std::printf("{\"phase\":\"limits\",\"threads\":%d,\"read_bandwidth_gb_s\":%.2f,\"fma_peak_gflop_s\":%.1f}\n",
              limit_pool.num_threads(), bandwidth / 1e9, fma_peak / 1e9);
  std::fflush(stdout);

  auto backend = tessera::MakeCpuBackend({threads});
  auto model_or = tessera::Model::Load(model_dir, backend.get());
  if (!model_or.ok()) {
    spdlog::error("{}", model_or.status().ToString());
    return 1;
  }
  auto& model = *model_or.value();
  const auto& cfg = model.config();
  const int64_t block_size = 16;
  const int64_t blocks = (std::max(prompt, decode_context + decode) / block_size + 2) * std::max(batch, 1) + 8;
  auto cache = model.CreateKvCache(blocks, block_size);
  if (!cache.ok()) {
    spdlog::error("{}", cache.status().ToString());
    return 1;
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> tok(0, static_cast<int>(cfg.vocab_size) - 1);
  std::vector<float> logits;

  // Prefill.
  double best_prefill = 1e30;
  for (int r = 0; r < repeats; ++r) {
    tessera::BatchBuilder b(blocks, block_size);
    int s = b.AddSequence();
    tessera::BatchBuilder::Chunk c{s, {}, {prompt - 1}};
    for (int i = 0; i < prompt; ++i) c.tokens.push_back(tok(rng));
    auto fb = b.Build({c});
    auto t0 = Clock::now();
    if (auto st = model.Forward(*fb, cache->get(), &logits); !st.ok()) {
      spdlog::error("{}", st.ToString());
      return 1;
    }
    best_prefill = std::min(best_prefill, Seconds(t0, Clock::now()));
  }
  // FLOPs: 2 per weight per token in the layers, lm_head once, causal attention
  // (q.k and p.v: 2 * 2 * head_dim per query head per key, ~prompt^2/2 keys).
  const double layer_weights = static_cast<double>(cfg.num_layers) *
      (cfg.hidden_size * (cfg.num_q_heads + 2 * cfg.num_kv_heads) * cfg.head_dim +
       cfg.num_q_heads * cfg.head_dim * cfg.hidden_size + 3.0 * cfg.hidden_size * cfg.intermediate_size);
  const double attn_flops = static_cast<double>(cfg.num_layers) * cfg.num_q_heads * 4.0 * cfg.head_dim *
                            prompt * (prompt + 1) / 2.0;
  const double prefill_flops = 2.0 * layer_weights * prompt + 2.0 * cfg.vocab_size * cfg.hidden_size + attn_flops;
  std::printf("{\"phase\":\"prefill\",\"backend\":\"%s\",\"prompt\":%d,\"seconds\":%.4f,\"tokens_per_s\":%.2f,"
              "\"gflop_s\":%.1f,\"fraction_of_fma_peak\":%.3f}\n",
              backend->name().c_str(), prompt, best_prefill, prompt / best_prefill, prefill_flops / best_prefill / 1e9,
              fma_peak > 0 ? prefill_flops / best_prefill / fma_peak : 0.0);
  std::fflush(stdout);

  // Decode: prefill each sequence's context, then time `decode` steps.
  tessera::BatchBuilder b(blocks, block_size);
  std::vector<int> seqs;
  std::vector<tessera::BatchBuilder::Chunk> chunks;
  for (int i = 0; i < batch; ++i) {
    seqs.push_back(b.AddSequence());
    tessera::BatchBuilder::Chunk c{seqs.back(), {}, {decode_context - 1}};
    for (int k = 0; k < decode_context; ++k) c.tokens.push_back(tok(rng));
    chunks.push_back(std::move(c));
  }
  auto fb = b.Build(chunks);
  if (auto st = model.Forward(*fb, cache->get(), &logits); !st.ok()) {
    spdlog::error("{}", st.ToString());
    return 1;
  }
  auto t0 = Clock::now();
  for (int step = 0; step < decode; ++step) {
    chunks.clear();
    for (int i = 0; i < batch; ++i) {
      const float* row = logits.data() + static_cast<size_t>(i) * cfg.vocab_size;
      const int next = static_cast<int>(std::max_element(row, row + cfg.vocab_size) - row);
      chunks.push_back({seqs[i], {next}, {0}});
    }
    auto step_batch = b.Build(chunks);
    if (auto st = model.Forward(*step_batch, cache->get(), &logits); !st.ok()) {
      spdlog::error("{}", st.ToString());
      return 1;
    }
  }
  const double secs = Seconds(t0, Clock::now());
  // Bandwidth again after the run (shared machines drift); the higher is the limit.
  bandwidth = std::max(bandwidth, tessera::bench::MeasureReadBandwidth(limit_pool));
  // Bytes one decode step must read: every weight once (the tied embedding table
  // once, as lm_head) plus each sequence's K and V (f32) at the mean context.
  const double kv_bytes = static_cast<double>(batch) * cfg.KvBytesPerToken(4) * (decode_context + decode / 2.0);
  const double step_bytes = static_cast<double>(model.weight_bytes()) + kv_bytes;
  const double step_s = secs / decode;
  std::printf("{\"phase\":\"decode\",\"backend\":\"%s\",\"batch\":%d,\"context\":%d,\"steps\":%d,"
              "\"seconds\":%.4f,\"tokens_per_s\":%.2f,\"ms_per_step\":%.2f,\"bytes_per_step\":%.0f,"
              "\"read_bandwidth_gb_s\":%.2f,\"fraction_of_bandwidth\":%.3f}\n",
              backend->name().c_str(), batch, decode_context, decode, secs, batch * decode / secs,
              1000 * step_s, step_bytes, bandwidth / 1e9, bandwidth > 0 ? step_bytes / step_s / bandwidth : 0.0);
  return 0;
}

// tessera-engine-bench: prefill and decode speed of the engine alone (no server,
// no scheduler) on one model, stated against limits measured in the same process.
//
//   tessera-engine-bench --model PATH --threads 2 --prompt 512 --decode 16 --batches 1,4,16,32
//
// PATH is whatever Model::Load accepts (an HF checkpoint directory; a .gguf file
// where the loader supports it). Prints JSON lines, then a human table.
//
// Limits: read bandwidth (bench/limits.h, the best of the membw kernels), f32 FMA
// peak and int8 dot peak, measured before and after the model runs; the higher of
// each is the limit (a shared machine only ever makes a probe read low).
// Prefill: one sequence's `prompt` tokens in one step, best of `repeats`.
// Decode: for each batch size b, b sequences (prefilled with `decode-context`
// tokens once, up front, and reused by every batch size, so later batch sizes see
// slightly longer contexts; the mean context is reported), one untimed step, then
// `decode` timed steps of one greedy token per sequence: tokens/s = b * steps / time.
// Bytes per decode step: every weight matrix once (the tied embedding table once,
// as lm_head; an untied one's embedding lookup reads a few rows and is not counted)
// plus each sequence's f32 K and V over its context. MoE models: only the routed
// experts some token of the step chose count (per layer, the distinct experts
// the step's expert-load delta shows), with attention, router, shared expert
// and lm_head; FLOPs count top_k experts per token. The expert load (tokens
// routed to each expert of each MoE layer over the whole run) is printed last.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/limits.h"
#include "common/log.h"
#include "engine/batch_builder.h"
#include "engine/model.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

struct Limits {
  double bandwidth = 0;  // bytes/s
  double fma = 0;        // FLOP/s
  double int8 = 0;       // MAC/s
};

Limits MeasureLimits(tessera::ThreadPool& pool, int repeats) {
  Limits l;
  l.bandwidth = tessera::bench::MeasureReadBandwidth(pool, size_t{1} << 30, repeats);
  l.fma = tessera::bench::MeasureFmaPeak(pool);
  l.int8 = tessera::bench::MeasureInt8DotPeak(pool);
  return l;
}

void PrintLimits(const char* when, int threads, const Limits& l) {
  // The load average tells a reader whether other processes shared the CPUs.
  double load[1] = {-1};
  getloadavg(load, 1);
  std::printf("{\"phase\":\"limits\",\"when\":\"%s\",\"threads\":%d,\"read_bandwidth_gb_s\":%.2f,"
              "\"fma_peak_gflop_s\":%.1f,\"int8_peak_gmac_s\":%.1f,\"loadavg_1m\":%.2f}\n",
              when, threads, l.bandwidth / 1e9, l.fma / 1e9, l.int8 / 1e9, load[0]);
  std::fflush(stdout);
}

tessera::StatusOr<std::vector<int>> ParseBatches(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > 4096) {
      return tessera::InvalidArgument("--batches: '" + item + "' is not a batch size in [1, 4096]");
    }
    out.push_back(static_cast<int>(v));
  }
  if (out.empty()) return tessera::InvalidArgument("--batches: empty list");
  return out;
}

struct DecodeResult {
  int batch = 0;
  double mean_context = 0;  // keys attended per sequence, mean over timed steps
  double seconds = 0;
  double bytes_per_step = 0;
  double flops_per_step = 0;
  double experts_per_step = 0;  // MoE: distinct (layer, expert) pairs read per step
};

}  // namespace

int main(int argc, char** argv) {
  bool file_pages = false;
  CLI::App app{"Engine prefill/decode benchmark"};
  std::string model_path, batches_flag;
  int threads = 0, prompt = 512, decode = 32, batch = 1, repeats = 2, decode_context = 128, limit_repeats = 5;
  app.add_option("--model", model_path, "model: HF checkpoint directory (or a file Model::Load accepts)")
      ->required();
  app.add_option("--threads", threads, "CPU threads (0 = all)")->check(CLI::Range(0, 1024));
  app.add_option("--prompt", prompt, "prefill prompt length (0 = skip prefill)")->check(CLI::Range(0, 1 << 20));
  app.add_option("--decode", decode, "timed decode steps per batch size (0 = skip decode)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--batch", batch, "sequences decoding together (when --batches is not given)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--batches", batches_flag, "comma-separated decode batch sizes, e.g. 1,4,16,32");
  app.add_option("--decode-context", decode_context, "prompt length before decode")->check(CLI::Range(1, 1 << 20));
  app.add_flag("--file-pages", file_pages, "read weights from the file mapping (4 KiB pages) instead of huge-page copies");
  app.add_option("--repeats", repeats, "prefill repetitions (best is reported)")->check(CLI::Range(1, 100));
  app.add_option("--limit-repeats", limit_repeats, "undisturbed passes per bandwidth kernel")
      ->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);
  std::vector<int> batches{batch};
  if (!batches_flag.empty()) {
    auto parsed = ParseBatches(batches_flag);
    if (!parsed.ok()) {
      tessera::LogError("{}", parsed.status().ToString());
      return 2;
    }
    batches = *parsed;
  }

  // Limits first, on the same number of threads the engine will use.
  tessera::ThreadPool limit_pool(threads > 0 ? threads : tessera::ThreadPool::HardwareThreads());
  const int nthreads = limit_pool.num_threads();
  const Limits before = MeasureLimits(limit_pool, limit_repeats);
  PrintLimits("before", nthreads, before);

  tessera::CpuBackendOptions backend_options;
  backend_options.num_threads = threads;
  backend_options.huge_page_weights = !file_pages;
  auto backend = tessera::MakeCpuBackend(backend_options);
  auto model_or = tessera::Model::Load(model_path, backend.get());
  if (!model_or.ok()) {
    tessera::LogError("{}", model_or.status().ToString());
    return 1;
  }
  auto& model = *model_or.value();
  const auto& cfg = model.config();
  // Weight dtype from bytes per parameter (Model does not expose per-matrix
  // dtypes): ~4 f32, ~2 bf16/f16, ~1.06 q8_0, ~0.56-0.6 q4_0/q4_K.
  const double params = static_cast<double>(cfg.NumParameters());
  const double bytes_per_param = static_cast<double>(model.weight_bytes()) / params;
  const bool quantized = bytes_per_param < 1.5;
  const double embed_params = static_cast<double>(cfg.vocab_size) * cfg.hidden_size;
  // An untied embedding table is counted in weight_bytes but only a few rows of it
  // are read per step; its bytes are estimated at the model's mean bytes/param.
  // MoE: the routed experts are counted per step from the experts actually used.
  const double expert_bytes = static_cast<double>(model.expert_bytes());
  const double all_experts_bytes = expert_bytes * cfg.moe.num_experts * cfg.num_moe_layers();
  const double stream_bytes = static_cast<double>(model.weight_bytes()) - all_experts_bytes -
                              (cfg.tie_word_embeddings ? 0.0 : embed_params * bytes_per_param);
  // Distinct experts used between two expert-load snapshots, summed over layers.
  auto experts_touched = [](const tessera::ExpertLoad& a, const tessera::ExpertLoad& b) {
    int64_t n = 0;
    for (size_t i = 0; i < b.counts.size() && i < a.counts.size(); ++i) n += b.counts[i] > a.counts[i] ? 1 : 0;
    return n;
  };
  auto expert_load = [&model]() {
    auto l = model.ReadExpertLoad();
    return l.ok() ? *l : tessera::ExpertLoad{};
  };
  std::printf("{\"phase\":\"model\",\"model\":\"%s\",\"backend\":\"%s\",\"params\":%.0f,\"active_params\":%.0f,"
              "\"weight_bytes\":%lld,\"bytes_per_param\":%.3f,\"quantized\":%s,\"tied_embeddings\":%s}\n",
              model_path.c_str(), backend->name().c_str(), params, static_cast<double>(cfg.NumActiveParameters()),
              static_cast<long long>(model.weight_bytes()),
              bytes_per_param, quantized ? "true" : "false", cfg.tie_word_embeddings ? "true" : "false");
  std::fflush(stdout);

  const int max_batch = decode > 0 ? *std::max_element(batches.begin(), batches.end()) : 0;
  const int64_t block_size = 16;
  const int64_t per_seq_tokens = decode_context + static_cast<int64_t>(batches.size()) * (decode + 1);
  const int64_t blocks = (prompt / block_size + 2) + max_batch * (per_seq_tokens / block_size + 2) + 8;
  auto cache = model.CreateKvCache(blocks, block_size);
  if (!cache.ok()) {
    tessera::LogError("{}", cache.status().ToString());
    return 1;
  }
  tessera::BatchBuilder builder(blocks, block_size);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> tok(0, static_cast<int>(cfg.vocab_size) - 1);
  std::vector<float> logits;
  auto forward = [&](const std::vector<tessera::BatchBuilder::Chunk>& chunks) -> bool {
    auto fb = builder.Build(chunks);
    tessera::Status st = fb.ok() ? model.Forward(*fb, cache->get(), &logits) : fb.status();
    if (!st.ok()) tessera::LogError("{}", st.ToString());
    return st.ok();
  };

  // FLOPs: 2 per weight per token in the layers, 2 per lm_head weight per row with
  // logits, and attention q.k and p.v: 4 * head_dim per query head per key.
  const double layer_weights =
      cfg.is_moe() ? static_cast<double>(cfg.NumActiveParameters()) - embed_params - cfg.hidden_size
                   : static_cast<double>(cfg.num_layers) *
                         (cfg.hidden_size * (cfg.num_q_heads + 2 * cfg.num_kv_heads) * cfg.head_dim +
                          cfg.num_q_heads * cfg.head_dim * cfg.hidden_size +
                          3.0 * cfg.hidden_size * cfg.intermediate_size);
  const double attn_flops_per_key = static_cast<double>(cfg.num_layers) * cfg.num_q_heads * 4.0 * cfg.head_dim;
  const double lm_head_flops = 2.0 * embed_params;

  // Prefill.
  double best_prefill = 0;
  double prefill_flops = 0;
  if (prompt > 0) {
    best_prefill = 1e30;
    for (int r = 0; r < repeats; ++r) {
      const int s = builder.AddSequence();
      tessera::BatchBuilder::Chunk c{s, {}, {prompt - 1}};
      for (int i = 0; i < prompt; ++i) c.tokens.push_back(tok(rng));
      const auto t0 = Clock::now();
      if (!forward({c})) return 1;
      best_prefill = std::min(best_prefill, Seconds(t0, Clock::now()));
      builder.RemoveSequence(s);
    }
    prefill_flops = 2.0 * layer_weights * prompt + lm_head_flops + attn_flops_per_key * prompt * (prompt + 1) / 2.0;
  }

  // Decode: prefill max_batch contexts (a few sequences per step), then each batch size.
  std::vector<DecodeResult> results;
  std::vector<int> seqs, next;
  const int group = std::max(1, 2048 / decode_context);
  for (int i = 0; i < max_batch; i += group) {
    std::vector<tessera::BatchBuilder::Chunk> chunks;
    for (int j = i; j < std::min(max_batch, i + group); ++j) {
      seqs.push_back(builder.AddSequence());
      tessera::BatchBuilder::Chunk c{seqs.back(), {}, {decode_context - 1}};
      for (int k = 0; k < decode_context; ++k) c.tokens.push_back(tok(rng));
      chunks.push_back(std::move(c));
    }
    if (!forward(chunks)) return 1;
    for (size_t j = 0; j < chunks.size(); ++j) next.push_back(tok(rng));
  }
  const double kv_bytes_per_token = static_cast<double>(cfg.KvBytesPerToken(4));
  for (int b : batches) {
    if (decode <= 0) break;
    DecodeResult res;
    res.batch = b;
    double keys = 0;  // sum over timed steps and sequences of keys attended
    double experts_read = 0;  // sum over timed steps of distinct (layer, expert) pairs used
    Clock::time_point t0;
    for (int step = 0; step <= decode; ++step) {  // step 0 is untimed (workspace growth)
      if (step == 1) t0 = Clock::now();
      // A host copy of a few KB of counters (MoE only): not worth excluding from the timing.
      const tessera::ExpertLoad load_before = cfg.is_moe() && step > 0 ? expert_load() : tessera::ExpertLoad{};
      std::vector<tessera::BatchBuilder::Chunk> chunks;
      for (int i = 0; i < b; ++i) {
        chunks.push_back({seqs[i], {next[i]}, {0}});
        if (step > 0) keys += static_cast<double>(builder.length(seqs[i]) + 1);
      }
      if (!forward(chunks)) return 1;
      if (!load_before.empty()) experts_read += static_cast<double>(experts_touched(load_before, expert_load()));
      for (int i = 0; i < b; ++i) {
        const float* row = logits.data() + static_cast<size_t>(i) * cfg.vocab_size;
        next[i] = static_cast<int>(std::max_element(row, row + cfg.vocab_size) - row);
      }
    }
    res.seconds = Seconds(t0, Clock::now());
    res.mean_context = keys / decode / b;
    res.bytes_per_step = stream_bytes + kv_bytes_per_token * keys / decode + expert_bytes * experts_read / decode;
    res.experts_per_step = experts_read / decode;
    res.flops_per_step = (2.0 * layer_weights + lm_head_flops) * b + attn_flops_per_key * keys / decode;
    results.push_back(res);
  }

  // Limits again after the run (shared machines drift); the higher of each is the limit.
  const Limits after = MeasureLimits(limit_pool, limit_repeats);
  PrintLimits("after", nthreads, after);
  const Limits lim{std::max(before.bandwidth, after.bandwidth), std::max(before.fma, after.fma),
                   std::max(before.int8, after.int8)};
  auto frac = [](double v, double limit) { return limit > 0 ? v / limit : 0.0; };
  // Quantized weights are multiplied as int8 (2 FLOP = 1 MAC): stated against the int8 peak too.
  auto int8_frac = [&](double flop_s) { return quantized ? frac(flop_s / 2, lim.int8) : 0.0; };
  std::printf("{\"phase\":\"limits\",\"when\":\"used\",\"threads\":%d,\"read_bandwidth_gb_s\":%.2f,"
              "\"fma_peak_gflop_s\":%.1f,\"int8_peak_gmac_s\":%.1f}\n",
              nthreads, lim.bandwidth / 1e9, lim.fma / 1e9, lim.int8 / 1e9);
  if (prompt > 0) {
    const double fs = prefill_flops / best_prefill;
    std::printf("{\"phase\":\"prefill\",\"backend\":\"%s\",\"threads\":%d,\"prompt\":%d,\"seconds\":%.4f,"
                "\"tokens_per_s\":%.2f,\"gflop_s\":%.1f,\"fraction_of_fma_peak\":%.3f,"
                "\"fraction_of_int8_peak\":%.3f}\n",
                backend->name().c_str(), nthreads, prompt, best_prefill, prompt / best_prefill, fs / 1e9,
                frac(fs, lim.fma), int8_frac(fs));
  }
  for (const DecodeResult& r : results) {
    const double step_s = r.seconds / decode;
    std::printf("{\"phase\":\"decode\",\"backend\":\"%s\",\"threads\":%d,\"batch\":%d,\"context\":%d,"
                "\"mean_context\":%.1f,\"steps\":%d,\"seconds\":%.4f,\"tokens_per_s\":%.2f,\"ms_per_step\":%.2f,"
                "\"bytes_per_step\":%.0f,\"read_bandwidth_gb_s\":%.2f,\"fraction_of_bandwidth\":%.3f,"
                "\"gflop_s\":%.1f,\"fraction_of_fma_peak\":%.3f,\"fraction_of_int8_peak\":%.3f,"
                "\"moe_experts_read_per_step\":%.1f}\n",
                backend->name().c_str(), nthreads, r.batch, decode_context, r.mean_context, decode, r.seconds,
                r.batch * decode / r.seconds, 1000 * step_s, r.bytes_per_step, lim.bandwidth / 1e9,
                frac(r.bytes_per_step / step_s, lim.bandwidth), r.flops_per_step / step_s / 1e9,
                frac(r.flops_per_step / step_s, lim.fma), int8_frac(r.flops_per_step / step_s), r.experts_per_step);
  }
  const tessera::ExpertLoad load = expert_load();
  if (!load.empty()) {
    // Tokens routed to each expert of each MoE layer over the whole run (prefill and decode).
    std::ostringstream counts;
    for (size_t l = 0; l < load.layers.size(); ++l) {
      counts << (l ? "," : "") << "[";
      for (int64_t e = 0; e < load.num_experts; ++e) counts << (e ? "," : "") << load.counts[l * load.num_experts + e];
      counts << "]";
    }
    std::ostringstream layers;
    for (size_t l = 0; l < load.layers.size(); ++l) layers << (l ? "," : "") << load.layers[l];
    std::printf("{\"phase\":\"moe_expert_load\",\"num_experts\":%lld,\"top_k\":%lld,\"expert_bytes\":%.0f,"
                "\"layers\":[%s],\"tokens_per_expert\":[%s],\"max_over_mean\":%.3f}\n",
                static_cast<long long>(load.num_experts), static_cast<long long>(cfg.moe.top_k), expert_bytes,
                layers.str().c_str(), counts.str().c_str(), load.MaxOverMean());
  }
  std::fflush(stdout);

  // Human table.
  std::printf("\nlimits (%d threads, best of before/after): read %.1f GB/s, f32 FMA %.1f GFLOP/s, int8 %.1f GMAC/s\n",
              nthreads, lim.bandwidth / 1e9, lim.fma / 1e9, lim.int8 / 1e9);
  std::printf("model: %.0fM params, %.2f GB of weights (%.2f bytes/param%s)\n", params / 1e6,
              model.weight_bytes() / 1e9, bytes_per_param, quantized ? ", quantized" : "");
  if (prompt > 0) {
    const double fs = prefill_flops / best_prefill;
    std::printf("prefill %d tokens: %.1f tok/s, %.1f GFLOP/s = %.2f of FMA peak", prompt, prompt / best_prefill,
                fs / 1e9, frac(fs, lim.fma));
    if (quantized) std::printf(", %.2f of int8 peak", int8_frac(fs));
    std::printf("\n");
  }
  if (!load.empty()) {
    std::printf("moe: %lld experts, top %lld, %.2f MB per expert; decode reads the distinct experts its tokens "
                "chose (column experts/step)\n",
                static_cast<long long>(load.num_experts), static_cast<long long>(cfg.moe.top_k), expert_bytes / 1e6);
    std::printf("expert load (tokens routed, whole run): layer: hottest expert share, max/mean, idle experts\n");
    for (size_t l = 0; l < load.layers.size(); ++l) {
      const int64_t* c = &load.counts[l * load.num_experts];
      int64_t total = 0, peak = 0, hot = 0, idle = 0;
      for (int64_t e = 0; e < load.num_experts; ++e) {
        total += c[e];
        if (c[e] > peak) peak = c[e], hot = e;
        idle += c[e] == 0 ? 1 : 0;
      }
      std::printf("  layer %3lld: expert %lld %.1f%%, %.2f, %lld idle\n", static_cast<long long>(load.layers[l]),
                  static_cast<long long>(hot), total ? 100.0 * peak / total : 0.0,
                  total ? static_cast<double>(peak) * load.num_experts / total : 0.0, static_cast<long long>(idle));
    }
  }
  if (!results.empty()) {
    std::printf("%6s %8s %10s %9s %9s %10s %7s %9s %7s%s\n", "batch", "ctx", "tok/s", "ms/step", "GB/step",
                "GB/s eff", "of bw", "GFLOP/s", "of fma", quantized ? "  of int8" : "");
    for (const DecodeResult& r : results) {
      const double step_s = r.seconds / decode;
      std::printf("%6d %8.0f %10.2f %9.2f %9.3f %10.2f %7.2f %9.1f %7.2f", r.batch, r.mean_context,
                  r.batch * decode / r.seconds, 1000 * step_s, r.bytes_per_step / 1e9,
                  r.bytes_per_step / step_s / 1e9, frac(r.bytes_per_step / step_s, lim.bandwidth),
                  r.flops_per_step / step_s / 1e9, frac(r.flops_per_step / step_s, lim.fma));
      if (quantized) std::printf(" %9.2f", int8_frac(r.flops_per_step / step_s));
      if (!load.empty()) std::printf("  %.1f experts/step", r.experts_per_step);
      std::printf("\n");
    }
  }
  return 0;
}

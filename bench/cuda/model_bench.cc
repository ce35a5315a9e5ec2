// End-to-end engine figures on the CUDA backend: synthetic Llama checkpoints
// (engine/synth.h) through engine/Model, no server or scheduler.
//  - TTFT: one sequence's whole prompt in one step, to its logits on the host.
//  - Decode: `batch` sequences of `decode_context` tokens (prefilled up front and
//    reused by every batch size, so later sizes see slightly longer contexts),
//    a few untimed steps (workspace growth, graph capture), then timed steps of
//    one token per sequence. Next tokens are random ids (the work does not depend
//    on them; a host argmax over 256 x 128256 logits would be timed otherwise).
//    Bytes per step = the weights once (an untied embedding table is not counted:
//    a lookup reads a few rows) + K and V of every sequence's context in the
//    backend's KV dtype; the HBM roofline is the measured D2D copy bandwidth.
#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <random>
#include <string>

#include "bench/cuda/sections.h"
#include "engine/batch_builder.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/model.h"
#include "engine/synth.h"

namespace tessera::cuda_bench {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct ModelSpec {
  std::string name;
  double approx_bytes;  // bf16 checkpoint size, for choosing where to write it
  std::vector<std::string> overrides;
};

StatusOr<ModelSpec> SpecFor(const std::string& name) {
  // synth's llama "1.5b" is the Llama-3.2-1B shape (2048 hidden, 16 layers, 32/8
  // heads x 64, FFN 8192, vocab 128256, tied); 8b overrides it to Llama-3-8B.
  if (name == "1b") {
    return ModelSpec{name, 2.6e9,
                     {"max_position_embeddings=16384",
                      R"(rope_scaling={"rope_type":"llama3","factor":32.0,"low_freq_factor":1.0,)"
                      R"("high_freq_factor":4.0,"original_max_position_embeddings":8192})"}};
  }
  if (name == "8b") {
    return ModelSpec{name, 16.1e9,
                     {"hidden_size=4096", "intermediate_size=14336", "num_hidden_layers=32",
                      "num_attention_heads=32", "num_key_value_heads=8", "tie_word_embeddings=false",
                      "max_position_embeddings=16384"}};
  }
  if (name == "tiny") {  // smoke runs: 2 layers, 4/2 heads x 32
    return ModelSpec{name, 1e8, {"hidden_size=128", "intermediate_size=256", "max_position_embeddings=1024"}};
  }
  return InvalidArgument("--models: '" + name + "' is not 1b, 8b or tiny");
}

double FreeDiskBytes(const std::string& dir) {
  struct statvfs s {};
  if (statvfs(dir.c_str(), &s) != 0) return 0;
  return static_cast<double>(s.f_bavail) * static_cast<double>(s.f_frsize);
}

// Writes (or reuses) the checkpoint; returns its directory.
StatusOr<std::string> EnsureCheckpoint(const ModelSpec& spec, const ModelBenchOptions& o, json* info) {
  std::string root = o.synth_dir;
  if (root.empty()) root = FreeDiskBytes("/dev/shm") > 1.3 * spec.approx_bytes ? "/dev/shm" : "/tmp";
  const fs::path dir = fs::path(root) / ("tessera-cuda-bench-llama-" + spec.name);
  const fs::path done = dir / "tessera-bench-complete";
  (*info)["checkpoint"] = dir.string();
  if (fs::exists(done)) {
    (*info)["synth_s"] = 0.0;
    return dir.string();
  }
  SynthOptions so;
  so.arch = "llama";
  so.size = spec.name == "tiny" ? "tiny" : "1.5b";
  so.dtype = DType::kBF16;
  so.out_dir = dir.string();
  so.overrides = spec.overrides;
  so.npm_dir = o.npm_dir;
  const auto t0 = Clock::now();
  RETURN_IF_ERROR(WriteSyntheticCheckpoint(so));
  (*info)["synth_s"] = Since(t0);
  std::FILE* f = std::fopen(done.c_str(), "w");
  if (f) std::fclose(f);
  return dir.string();
}

json Entry(const std::string& model, const std::string& mode, const std::string& phase) {
  return {{"model", model}, {"mode", mode}, {"phase", phase}};
}

class ModelRun {
 public:
  ModelRun(Context& ctx, const ModelBenchOptions& o, const std::string& name, const std::string& mode)
      : ctx_(ctx), o_(o), name_(name), mode_(mode) {}

  Status Run(const std::string& dir) {
    CudaBackendOptions bo;
    bo.deterministic = mode_ == "deterministic";
    bo.cuda_graphs = mode_ != "eager";
    ASSIGN_OR_RETURN(backend_, MakeCudaBackend(bo));
    const auto t0 = Clock::now();
    ASSIGN_OR_RETURN(model_, Model::Load(dir, backend_.get()));
    const ModelConfig& cfg = model_->config();
    json load = Entry(name_, mode_, "load");
    load["backend"] = backend_->name();
    load["load_s"] = Since(t0);
    load["params"] = static_cast<double>(cfg.NumParameters());
    load["weight_bytes"] = static_cast<double>(model_->weight_bytes());
    load["config"] = cfg.Summary();

    const int max_batch = *std::max_element(o_.batches.begin(), o_.batches.end());
    const int max_prompt = o_.prompts.empty() ? 0 : *std::max_element(o_.prompts.begin(), o_.prompts.end());
    const int64_t per_seq = o_.decode_context + static_cast<int64_t>(o_.batches.size()) * (kWarmSteps + o_.decode_steps);
    const int64_t blocks = max_batch * (per_seq / kBlock + 2) + (max_prompt / kBlock + 2) + 16;
    ASSIGN_OR_RETURN(cache_, model_->CreateKvCache(blocks, kBlock));
    builder_ = std::make_unique<BatchBuilder>(blocks, kBlock);
    kv_elem_ = DTypeSize(backend_->kv_dtype());
    if (backend_->SupportsGraphs()) {
      // As the engine loop does: decode steps of up to max_batch sequences replay
      // graphs captured on first use (during the untimed warm-up steps);
      // max_model_len covers every position this run uses (the RoPE table is
      // sized once, before any capture).
      const int64_t max_model_len = std::max<int64_t>(per_seq, max_prompt) + kBlock;
      RETURN_IF_ERROR(model_->EnableGraphs(max_batch, max_model_len, kBlock));
      load["graphs_max_model_len"] = max_model_len;  // replays size the split-K grid for it
    }
    ctx_.report->AddModel(load);

    for (int p : o_.prompts) RETURN_IF_ERROR(Ttft(p));
    RETURN_IF_ERROR(ctx_.report->WriteJson(ctx_.json_path));
    RETURN_IF_ERROR(Decode(max_batch));
    return ctx_.report->WriteJson(ctx_.json_path);
  }

 private:
  static constexpr int64_t kBlock = 16;
  static constexpr int kWarmSteps = 3;
  static constexpr int kTtftRepeats = 3;

  Status Forward(const std::vector<BatchBuilder::Chunk>& chunks) {
    ASSIGN_OR_RETURN(ForwardBatch fb, builder_->Build(chunks));
    return model_->Forward(fb, cache_.get(), &logits_);
  }
  std::vector<int32_t> RandomTokens(int64_t n) {
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(model_->config().vocab_size) - 1);
    std::vector<int32_t> v(n);
    for (auto& t : v) t = tok(rng_);
    return v;
  }
  bool Skip(json e) {
    if (!ctx_.OutOfTime()) return false;
    e["error"] = "skipped: time budget";
    ctx_.report->AddModel(e);
    return true;
  }

  // The first run of a length is untimed (workspace growth); median of the rest.
  Status Ttft(int prompt) {
    json e = Entry(name_, mode_, "ttft");
    e["batch"] = 1;
    e["prompt"] = prompt;
    if (Skip(e)) return Status::Ok();
    std::vector<double> secs;
    for (int r = 0; r <= kTtftRepeats; ++r) {
      const int s = builder_->AddSequence();
      const auto t0 = Clock::now();
      Status st = Forward({{s, RandomTokens(prompt), {prompt - 1}}});
      const double dt = Since(t0);
      builder_->RemoveSequence(s);
      if (!st.ok()) {
        e["error"] = st.ToString();
        ctx_.report->AddModel(e);
        return Status::Ok();
      }
      if (r > 0) secs.push_back(dt);
    }
    std::sort(secs.begin(), secs.end());
    const double med = secs[secs.size() / 2];
    e["ttft_ms"] = 1000 * med;
    e["ttft_ms_min"] = 1000 * secs.front();
    e["tokens_per_s"] = prompt / med;
    ctx_.report->AddModel(e);
    return Status::Ok();
  }

  Status Decode(int max_batch) {
    const ModelConfig& cfg = model_->config();
    std::vector<int> seqs;
    {
      json e = Entry(name_, mode_, "decode");
      if (Skip(e)) return Status::Ok();
    }
    const int group = std::max(1, 8192 / o_.decode_context);  // <= 8192 tokens per prefill step
    for (int i = 0; i < max_batch; i += group) {
      std::vector<BatchBuilder::Chunk> chunks;
      for (int j = i; j < std::min(max_batch, i + group); ++j) {
        seqs.push_back(builder_->AddSequence());
        chunks.push_back({seqs.back(), RandomTokens(o_.decode_context), {o_.decode_context - 1}});
      }
      RETURN_IF_ERROR(Forward(chunks));
    }
    const double embed = static_cast<double>(cfg.vocab_size) * cfg.hidden_size;
    const double stream_bytes = static_cast<double>(model_->weight_bytes()) -
                                (cfg.tie_word_embeddings ? 0.0 : embed * 2.0);
    const double layer_weights = static_cast<double>(cfg.num_layers) *
        (cfg.hidden_size * (cfg.num_q_heads + 2 * cfg.num_kv_heads) * cfg.head_dim +
         cfg.num_q_heads * cfg.head_dim * cfg.hidden_size + 3.0 * cfg.hidden_size * cfg.intermediate_size);
    for (int b : o_.batches) {
      json e = Entry(name_, mode_, "decode");
      e["batch"] = b;
      e["context"] = o_.decode_context;
      if (Skip(e)) continue;
      double keys = 0;
      Clock::time_point t0;
      Status st = Status::Ok();
      for (int step = 0; step < kWarmSteps + o_.decode_steps && st.ok(); ++step) {
        if (step == kWarmSteps) t0 = Clock::now();
        std::vector<BatchBuilder::Chunk> chunks;
        const std::vector<int32_t> next = RandomTokens(b);
        for (int i = 0; i < b; ++i) {
          chunks.push_back({seqs[i], {next[i]}, {0}});
          if (step >= kWarmSteps) keys += static_cast<double>(builder_->length(seqs[i]) + 1);
        }
        st = Forward(chunks);
      }
      if (!st.ok()) {
        e["error"] = st.ToString();
        ctx_.report->AddModel(e);
        continue;
      }
      const double secs = Since(t0), step_s = secs / o_.decode_steps;
      const double bytes = stream_bytes + static_cast<double>(cfg.KvBytesPerToken(kv_elem_)) * keys / o_.decode_steps;
      const double flops = (2.0 * layer_weights + 2.0 * embed) * b +
                           4.0 * cfg.num_layers * cfg.num_q_heads * cfg.head_dim * keys / o_.decode_steps;
      e["mean_context"] = keys / o_.decode_steps / b;
      e["steps"] = o_.decode_steps;
      e["tokens_per_s"] = b * o_.decode_steps / secs;
      e["ms_per_step"] = 1000 * step_s;
      e["bytes_per_step"] = bytes;
      e["weight_bytes_per_step"] = stream_bytes;
      e["effective_gb_s"] = bytes / step_s / 1e9;
      e["fraction_of_hbm_roofline"] = ctx_.report->copy_bytes_s() > 0 ? bytes / step_s / ctx_.report->copy_bytes_s() : -1;
      e["flops_per_step"] = flops;
      e["tflop_s"] = flops / step_s / 1e12;
      e["graphs_captured"] = model_->num_captured_graphs();  // 0 in graphs mode: steps ran eagerly
      ctx_.report->AddModel(e);
    }
    return Status::Ok();
  }

  Context& ctx_;
  const ModelBenchOptions& o_;
  std::string name_, mode_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<BatchBuilder> builder_;
  std::vector<float> logits_;
  std::mt19937 rng_{1234};
  int64_t kv_elem_ = 2;
};

}  // namespace

Status RunModels(Context& ctx, const ModelBenchOptions& o) {
  if (o.batches.empty() || o.decode_context < 1 || o.decode_steps < 1) {
    return InvalidArgument("model bench: needs batch sizes, --decode-context >= 1, --decode-steps >= 1");
  }
  for (const std::string& name : o.models) {
    ASSIGN_OR_RETURN(ModelSpec spec, SpecFor(name));
    json info = Entry(name, "", "synth");
    if (ctx.OutOfTime()) {
      info["error"] = "skipped: time budget";
      ctx.report->AddModel(info);
      continue;
    }
    auto dir = EnsureCheckpoint(spec, o, &info);
    if (!dir.ok()) {
      info["error"] = dir.status().ToString();
      ctx.report->AddModel(info);
      continue;
    }
    ctx.report->AddModel(info);
    for (const std::string& mode : o.modes) {
      if (mode != "eager" && mode != "graphs" && mode != "deterministic") {
        return InvalidArgument("--modes: '" + mode + "' is not eager, graphs or deterministic");
      }
      ModelRun run(ctx, o, name, mode);
      Status st = run.Run(*dir);
      if (!st.ok()) {
        json e = Entry(name, mode, "run");
        e["error"] = st.ToString();
        ctx.report->AddModel(e);
        cudaGetLastError();
        if (cudaDeviceSynchronize() != cudaSuccess) return st;  // device unusable
      }
      RETURN_IF_ERROR(ctx.report->WriteJson(ctx.json_path));
    }
  }
  return Status::Ok();
}

}  // namespace tessera::cuda_bench

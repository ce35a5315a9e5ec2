#include "server/http/engine_worker.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "engine/backend.h"
#include "engine/batch_builder.h"
#include "engine/kv_cache.h"
#include "engine/model.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

Status Unavailable(std::string m) { return Status(StatusCode::kUnavailable, std::move(m)); }

// eos ids from generation_config.json (an int or a list), if the file has any.
std::vector<int64_t> GenerationConfigEos(const std::string& model_dir) {
  std::ifstream in(std::filesystem::path(model_dir) / "generation_config.json");
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("eos_token_id")) return {};
  const nlohmann::json& e = j["eos_token_id"];
  std::vector<int64_t> ids;
  if (e.is_number_integer()) ids.push_back(e.get<int64_t>());
  if (e.is_array()) {
    for (const auto& x : e) {
      if (x.is_number_integer()) ids.push_back(x.get<int64_t>());
    }
  }
  return ids;
}

}  // namespace

EngineWorker::EngineWorker(EngineOptions options) : options_(std::move(options)) {}

EngineWorker::~EngineWorker() { Stop(); }

void EngineWorker::Start(Hooks hooks) {
  thread_ = std::thread([this, hooks = std::move(hooks)] { Run(hooks); });
}

Status EngineWorker::Submit(GenerateRequest request, std::function<void(GenerateResult)> done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Unavailable("server is shutting down");
    if (state() != EngineState::kReady) return Unavailable("model is not ready");
    if (queue_.size() >= options_.max_queued) {
      return ResourceExhausted("too many queued requests (" + std::to_string(queue_.size()) + "); retry later");
    }
    queue_.push_back(Job{std::move(request), std::move(done), Clock::now()});
  }
  cv_.notify_one();
  return Status::Ok();
}

size_t EngineWorker::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size() + (running_job_ ? 1 : 0);
}

void EngineWorker::Stop(bool abandon_queued) {
  std::deque<Job> dropped;  // destroyed outside the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (abandon_queued) dropped.swap(queue_);
  }
  if (!dropped.empty()) spdlog::warn("engine: dropping {} queued requests at shutdown", dropped.size());
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void EngineWorker::Run(Hooks hooks) {
  Status s = Load();
  if (s.ok()) s = WarmUp();
  if (s.ok() && hooks.before_ready) s = hooks.before_ready(info_);
  if (!s.ok()) {
    state_.store(EngineState::kFailed, std::memory_order_release);
    if (hooks.on_failed) hooks.on_failed(s);
    return;
  }
  state_.store(EngineState::kReady, std::memory_order_release);
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) break;  // stopping and drained
      job = std::move(queue_.front());
      queue_.pop_front();
      running_job_ = true;
    }
    const Clock::time_point start = Clock::now();
    GenerateResult r = Generate(job.request);
    r.queue_ms = std::chrono::duration<double, std::milli>(start - job.queued_at).count();
    r.run_ms = MsSince(start);
    job.done(std::move(r));
    std::lock_guard<std::mutex> lock(mu_);
    running_job_ = false;
  }
  // Release engine memory on the thread that owns it.
  builder_.reset();
  cache_.reset();
  model_.reset();
  backend_.reset();
}

Status EngineWorker::Load() {
  if (!options_.resolve_model_dir) return InvalidArgument("serve: no model directory");
  ASSIGN_OR_RETURN(std::string dir, options_.resolve_model_dir());
  const Clock::time_point t0 = Clock::now();
  backend_ = MakeCpuBackend({options_.threads});
  ASSIGN_OR_RETURN(model_, Model::Load(dir, backend_.get()));
  const ModelConfig& cfg = model_->config();
  spdlog::info("engine: loaded {} ({:.0f} MiB of weights) in {:.1f}s", dir, model_->weight_bytes() / 1048576.0,
               MsSince(t0) / 1000);

  // KV sizing. Cache memory is f32 on the CPU backend and committed up front.
  const int64_t bs = options_.block_size;
  const int64_t block_bytes = cfg.KvBytesPerToken(sizeof(float)) * bs;
  auto blocks_for = [bs](int64_t tokens) { return (tokens + bs - 1) / bs; };
  if (options_.max_model_len > cfg.max_position_embeddings) {
    return InvalidArgument("serve: --max-model-len " + std::to_string(options_.max_model_len) +
                           " exceeds the model's max_position_embeddings (" +
                           std::to_string(cfg.max_position_embeddings) + ")");
  }
  const bool explicit_len = options_.max_model_len > 0;
  int64_t max_len = explicit_len ? options_.max_model_len : cfg.max_position_embeddings;
  int64_t blocks = options_.num_kv_blocks;
  if (blocks <= 0) {
    const int64_t by_budget = std::max<int64_t>(1, options_.kv_budget_bytes / block_bytes);
    blocks = std::min(options_.auto_kv_sequences * blocks_for(max_len), by_budget);
    if (blocks < blocks_for(max_len)) {
      if (explicit_len) {
        blocks = blocks_for(max_len);  // the user asked for this length: hold one sequence
      } else {
        max_len = blocks * bs;
        spdlog::warn("serve: max model length limited to {} tokens (of the model's {}) by the default KV cache "
                     "budget of {} MiB; pass --num-kv-blocks and --max-model-len to change",
                     max_len, cfg.max_position_embeddings, options_.kv_budget_bytes >> 20);
      }
    }
  } else if (blocks < blocks_for(max_len)) {
    if (explicit_len) {
      spdlog::warn("serve: --num-kv-blocks {} holds {} tokens, fewer than --max-model-len {}; requests that do not "
                   "fit are rejected",
                   blocks, blocks * bs, max_len);
    } else {
      max_len = blocks * bs;
    }
  }
  ASSIGN_OR_RETURN(cache_, model_->CreateKvCache(blocks, bs));
  builder_ = std::make_unique<BatchBuilder>(blocks, bs);
  sequences_started_ = 0;

  info_.model_dir = dir;
  info_.config = cfg;
  info_.max_model_len = max_len;
  info_.num_kv_blocks = blocks;
  info_.block_size = bs;
  info_.eos_token_ids = cfg.eos_token_ids;
  for (int64_t id : GenerationConfigEos(dir)) {
    if (std::find(info_.eos_token_ids.begin(), info_.eos_token_ids.end(), id) == info_.eos_token_ids.end()) {
      info_.eos_token_ids.push_back(id);
    }
  }
  spdlog::info("engine: KV cache {} blocks x {} tokens ({:.0f} MiB), max model length {}, CPU backend", blocks, bs,
               cache_->bytes() / 1048576.0, max_len);
  return Status::Ok();
}

Status EngineWorker::WarmUp() {
  const Clock::time_point t0 = Clock::now();
  const int64_t bos = info_.config.bos_token_id;
  const int32_t token = bos >= 0 && bos < info_.config.vocab_size ? static_cast<int32_t>(bos) : 0;
  const int seq = builder_->AddSequence();
  ++sequences_started_;
  StatusOr<int32_t> next = StepArgmax(seq, {token});
  builder_->RemoveSequence(seq);
  if (!next.ok()) return Internal("serve: warm-up step failed: " + next.status().ToString());
  spdlog::info("engine: warm-up step done in {:.0f} ms", MsSince(t0));
  return Status::Ok();
}

void EngineWorker::ResetBuilderIfNeeded() {
  // BatchBuilder (an offline helper) never reuses sequence slots; start a fresh
  // one now and then, between jobs, when no sequence is live.
  if (sequences_started_ >= 4096) {
    builder_ = std::make_unique<BatchBuilder>(info_.num_kv_blocks, info_.block_size);
    sequences_started_ = 0;
  }
}

StatusOr<int32_t> EngineWorker::StepArgmax(int seq, const std::vector<int32_t>& tokens) {
  const size_t chunk = static_cast<size_t>(std::max<int64_t>(1, options_.prefill_chunk));
  for (size_t off = 0; off < tokens.size(); off += chunk) {
    const size_t take = std::min(chunk, tokens.size() - off);
    BatchBuilder::Chunk c;
    c.seq = seq;
    c.tokens.assign(tokens.begin() + off, tokens.begin() + off + take);
    if (off + take == tokens.size()) c.logits_at = {static_cast<int32_t>(take - 1)};
    ASSIGN_OR_RETURN(ForwardBatch batch, builder_->Build({c}));
    RETURN_IF_ERROR(model_->Forward(batch, cache_.get(), &logits_));
  }
  const int64_t vocab = info_.config.vocab_size;
  if (static_cast<int64_t>(logits_.size()) < vocab) return Internal("engine: forward returned no logits");
  // Greedy: the first maximum (lowest id wins ties, like numpy.argmax).
  return static_cast<int32_t>(std::max_element(logits_.begin(), logits_.begin() + vocab) - logits_.begin());
}

GenerateResult EngineWorker::Generate(const GenerateRequest& req) {
  GenerateResult r;
  const int64_t prompt_len = static_cast<int64_t>(req.prompt.size());
  if (prompt_len == 0 || req.max_tokens < 1 || prompt_len + req.max_tokens > info_.max_model_len) {
    r.status = InvalidArgument("engine: empty prompt or request longer than the max model length");
    return r;
  }
  ResetBuilderIfNeeded();
  const int seq = builder_->AddSequence();
  ++sequences_started_;
  StatusOr<int32_t> next = StepArgmax(seq, req.prompt);
  for (;;) {
    if (!next.ok()) {
      r.status = next.status();
      break;
    }
    const int32_t tok = *next;
    r.tokens.push_back(tok);
    const auto& eos = info_.eos_token_ids;
    if (std::find(eos.begin(), eos.end(), tok) != eos.end()) {
      r.hit_eos = true;
      break;
    }
    const int64_t n = static_cast<int64_t>(r.tokens.size());
    if (n >= req.max_tokens || prompt_len + n >= info_.max_model_len) break;
    next = StepArgmax(seq, {tok});
  }
  builder_->RemoveSequence(seq);  // frees the request's KV blocks
  return r;
}

}  // namespace tessera

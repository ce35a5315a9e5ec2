// ServingEngine: what the HTTP and gRPC front ends share. Text in, text out
// over the EngineLoop (runtime/engine_loop.h): it owns the loop, the
// tokenizer and the chat template, and turns each request's RequestOutputs
// into text deltas (incremental detokenization, stop strings, logprob token
// strings) and metrics.
//
// Threading: every method of ServingEngine is thread-safe. A Generation has
// one consumer at a time (e.g. a connection strand); its `notify` callback
// runs on the engine-loop thread and must only schedule a Poll elsewhere; it
// never runs after the Generation is destroyed. Generations must not outlive
// their ServingEngine; dropping one that has not finished aborts it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "runtime/engine_loop.h"
#include "scheduler/request.h"
#include "scheduler/sampling_params.h"
#include "server/serving/cache_isolation.h"
#include "server/serving/input_processor.h"
#include "server/serving/receipts.h"
#include "server/serving/ttft_slo.h"
#include "text/chat_template.h"
#include "text/incremental_detokenizer.h"
#include "structured/structured.h"
#include "text/tokenizer.h"

namespace tessera {

class ServingMetrics;

// ServingEngine::RenderChat with an explicit template (null: the model has
// none, FAILED_PRECONDITION naming `model_name`); for callers holding a view
// of the model rather than the engine (the request path, its fuzz target).
StatusOr<std::string> RenderChatPrompt(const text::ChatTemplate* chat_template, const std::string& model_name,
                                       const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                       bool add_generation_prompt, const nlohmann::ordered_json& template_kwargs,
                                       int64_t now_unix_seconds = -1);  // strftime_now's clock; < 0: the system's

struct ServingOptions {
  EngineLoopOptions loop;          // loop.model_dir: the checkpoint
  std::string served_model_name;   // "" : the directory's base name
  // Submissions beyond this many unfinished generations are refused with
  // RESOURCE_EXHAUSTED (HTTP 429, gRPC RESOURCE_EXHAUSTED).
  int64_t max_in_flight = 1024;
  ServingMetrics* metrics = nullptr;  // not owned; may be null
  // --cost-model: the twin's step-time model (runtime/sim/cost_model.h); with
  // metrics, each step's prediction is compared with its measured time
  // (tessera:step_time_prediction_error). Null: no prediction.
  std::shared_ptr<const sim::CostModel> step_cost_model;
  // --ttft-slo-ms (ttft_slo.h): Submit refuses, with RESOURCE_EXHAUSTED, a
  // request whose predicted time to first token exceeds the SLO. Unset: off.
  std::optional<TtftSloOptions> ttft_slo;
  // --chat-template-content-special-tokens (input_processor.h, ChatPromptInput).
  bool chat_content_special_tokens = false;
  // Which requests share prefix-cache blocks (cache_isolation.h), applied by Submit.
  CacheIsolation cache_isolation = CacheIsolation::kNone;
  // --retention-ttl-scale (testing only): multiplies each retained prefix's TTL.
  double retention_ttl_scale = 1.0;
  // Receipts (receipts.h): --receipt-key (an Ed25519 key file; "" : unsigned
  // receipts), and where the weights digest is cached when the checkpoint's
  // directory is read-only ("" : recomputed at each start then).
  std::string receipt_key_file;
  std::string weights_digest_cache_dir;
};

// One token with its log-probability, as both APIs report it.
struct LogprobEntry {
  int32_t token_id = 0;
  std::string token;            // the token's text alone (valid UTF-8; partial bytes as U+FFFD)
  std::vector<uint8_t> bytes;   // raw bytes of the token (may be a partial UTF-8 sequence)
  float logprob = 0.0f;
  std::vector<LogprobEntry> top;  // top alternatives, most likely first (empty on alternatives)
};

// New output of one choice since the previous Poll.
struct ChoiceDelta {
  int32_t index = 0;
  std::string text;                   // newly released text (stop string and what follows cut)
  std::vector<int32_t> token_ids;     // newly generated ids (text may lag behind them)
  std::vector<LogprobEntry> logprobs; // one per id in token_ids, when logprobs were asked
  FinishReason finish_reason = FinishReason::kNone;  // set on the choice's last delta
  // Why it stopped, vLLM's `stop_reason`: the matched stop string, or a stop token id.
  std::optional<std::string> stop_string;
  std::optional<int32_t> stop_token_id;
};

struct GenerationUpdate {
  std::vector<ChoiceDelta> choices;          // choices with something new, by index
  std::vector<LogprobEntry> prompt_logprobs; // new prompt positions, in order from position 1
  int64_t prompt_tokens = 0;                 // usage so far
  int64_t completion_tokens = 0;             // all choices together
  int64_t cached_tokens = 0;                 // prompt tokens served from the prefix cache
  // Where cached_tokens came from and why the rest of the prompt was computed
  // (scheduler/cache_waterfall.h); empty until the request was admitted.
  CacheWaterfall cache_waterfall;
  std::optional<KvExportInfo> kv_export;  // exported request: where a decode pulls its KV
  bool finished = false;  // every choice has ended: this is the last update
  Status status;          // non-OK: the request failed; terminal (finished is true)
};

// One submitted request. Shared by the front end and the engine's callback.
class Generation {
 public:
  ~Generation();
  const std::string& request_id() const;
  int64_t num_prompt_tokens() const;

  // Moves everything that arrived since the last call into `update`; false
  // when there was nothing new. One consumer thread at a time. After the
  // update with finished == true it always returns false.
  bool Poll(GenerationUpdate* update);
  bool finished() const;
  // Aborts the request (client gone, cancelled, timed out): choices end with
  // kAbort and the KV blocks are freed at the next step. Idempotent; any thread.
  void Cancel();
  // The RNG seed the choices sample with (the request's, or one the engine
  // drew: seed_drawn); receipts record it. Any thread.
  uint64_t seed() const;
  bool seed_drawn() const;

 private:
  friend class ServingEngine;
  struct State;
  // Calls the front end's `notify` from the loop thread. The loop holds it
  // past the Generation's life; the mutex makes Disarm a barrier: once it
  // returns, `notify` never runs again (front ends may free what it captures).
  struct Notifier {
    std::mutex mu;
    bool armed = false;  // the stream is in place; until then notices wait
    std::function<void()> fn;
    void Fire();
    void Arm();
    void Disarm();
  };
  explicit Generation(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

class ServingEngine {
 public:
  // Loads the model, tokenizer (tokenizer.json) and chat template
  // (tokenizer_config.json; optional), runs one warm-up step and starts the
  // loop thread. Slow (seconds); call off the I/O threads.
  static StatusOr<std::unique_ptr<ServingEngine>> Create(ServingOptions options);
  ~ServingEngine();  // Stop()s

  // Queues an input from ProcessInput (validated against limits(); its
  // request named). RESOURCE_EXHAUSTED when max_in_flight is reached or the
  // request's predicted time to first token exceeds ServingOptions::ttft_slo,
  // UNAVAILABLE when draining or stopped; the loop's own refusals (a live id
  // in use, KV transfer not configured). `notify`: runs on the loop thread whenever Poll may
  // have something new; must be cheap and non-blocking.
  StatusOr<std::shared_ptr<Generation>> Submit(GenerateInput input, std::function<void()> notify);

  // Renders a chat conversation to prompt text with the model's template.
  // INVALID_ARGUMENT (naming "messages") if the template rejects it;
  // FAILED_PRECONDITION if the model has no chat template.
  StatusOr<std::string> RenderChat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                   bool add_generation_prompt, const nlohmann::ordered_json& template_kwargs) const;

  const text::Tokenizer& tokenizer() const { return *tokenizer_; }
  bool has_chat_template() const { return chat_template_.has_value(); }
  // Null when the model has none. Immutable; lives as long as the engine.
  const text::ChatTemplate* chat_template() const { return chat_template_ ? &*chat_template_ : nullptr; }
  const ModelLimits& limits() const { return limits_; }
  // Compiles structured-output constraints over this model's vocabulary
  // (thread-safe; lives as long as the engine).
  structured::StructuredOutputs* structured_outputs() const { return structured_.get(); }
  const std::string& served_model_name() const { return served_model_name_; }
  bool chat_content_special_tokens() const { return chat_content_special_tokens_; }
  int64_t created_unix() const { return created_unix_; }
  // What every receipt of this engine names (digests, signing key); immutable.
  const ReceiptContext& receipts() const { return receipts_; }
  // Text of one token for logprob reports (see LogprobEntry).
  LogprobEntry MakeLogprobEntry(int32_t token_id, float logprob) const;

  SchedulerMetrics scheduler_metrics() const { return loop_->metrics(); }
  ExpertLoad expert_load() const { return loop_->expert_load(); }
  // Parallel groups: non-OK once a rank failed (/ready answers 503).
  Status group_error() const { return loop_->group_error(); }
  std::vector<parallel::RankTimes> rank_times() const { return loop_->rank_times(); }
  int64_t kv_cache_bytes() const { return loop_->kv_cache_bytes(); }
  // Null unless served with --role prefill|decode or --kv-peer-fetch.
  const KvTransport* kv_transport() const { return loop_->kv_transport(); }
  // Null unless served with --kv-offload-*.
  const KvTierManager* kv_tiers() const { return loop_->kv_tiers(); }
  // Tokens per KV block (the prefix cache's hash granularity).
  int32_t kv_block_size() const { return loop_->scheduler_options().kv.block_size; }
  int32_t kv_num_blocks() const { return loop_->scheduler_options().kv.num_blocks; }  // the device pool
  PrefixHashAlgo kv_hash_algo() const { return loop_->scheduler_options().kv.hash_scheme.algo(); }
  int64_t num_in_flight() const { return in_flight_->load(); }
  // --ttft-slo-ms: TtftSlo::Attainment() now; unset without the SLO.
  std::optional<double> predicted_slo_attainment() const {
    return ttft_slo_ ? std::optional<double>(ttft_slo_->Attainment()) : std::nullopt;
  }

  // New submissions fail with UNAVAILABLE; running ones continue.
  void BeginDrain() { draining_.store(true); }
  bool draining() const { return draining_.load(); }
  // Ends every running and queued generation at the next step with finish
  // reason abort (their streams close normally). Any thread.
  void AbortAll() {
    if (loop_) loop_->AbortAll();
  }
  // Aborts what is left and joins the loop thread.
  void Stop();

 private:
  ServingEngine() = default;

  std::unique_ptr<EngineLoop> loop_;
  std::shared_ptr<const text::Tokenizer> tokenizer_;
  std::unique_ptr<structured::StructuredOutputs> structured_;
  std::optional<text::ChatTemplate> chat_template_;
  ModelLimits limits_;
  ReceiptContext receipts_;
  std::string served_model_name_;
  int64_t created_unix_ = 0;
  int64_t max_in_flight_ = 0;
  bool chat_content_special_tokens_ = false;
  CacheIsolation cache_isolation_ = CacheIsolation::kNone;
  double retention_ttl_scale_ = 1.0;
  ServingMetrics* metrics_ = nullptr;
  // Shared with the loop's on_step and with Generations (which Leave on their first token).
  std::shared_ptr<TtftSlo> ttft_slo_;
  std::shared_ptr<std::atomic<int64_t>> in_flight_ = std::make_shared<std::atomic<int64_t>>(0);
  std::atomic<bool> draining_{false};
};

}  // namespace tessera

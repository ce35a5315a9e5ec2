#include "server/serving/serving_engine.h"
#include "common/log.h"

#include <algorithm>
#include <ctime>
#include <filesystem>


#include "receipt/build_info.h"
#include "server/serving/metrics.h"
#include "text/gguf_tokenizer.h"

namespace tessera {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The serve flags a sequence's tokens depend on (receipts' "flags" digest);
// the block size and max model length are added once the loop resolved them.
nlohmann::json NumericsFlags(const EngineLoopOptions& o) {
  nlohmann::json spec = nullptr;
  if (o.speculative) {
    spec = {{"method", static_cast<int>(o.speculative->method)},
            {"num_speculative_tokens", o.speculative->num_speculative_tokens},
            {"model", o.speculative->model}};
  }
  return {{"device", o.device},
          {"deterministic", o.device == "cuda" && o.cuda.deterministic},
          {"tensor_parallel_size", o.parallel.tensor_parallel_size},
          {"data_parallel_size", o.parallel.data_parallel_size},
          {"enable_expert_parallel", o.parallel.enable_expert_parallel},
          {"speculative", spec}};
}

}  // namespace

// ---------------------------------------------------------------- Generation

struct Generation::State {
  struct Choice {
    std::unique_ptr<text::IncrementalDetokenizer> detok;
    int32_t last_token = -1;
    bool ended = false;          // the client has seen (or will see) its last delta
    FinishReason reason = FinishReason::kNone;
  };

  const ServingEngine* engine = nullptr;
  EngineLoop* loop = nullptr;
  ServingMetrics* metrics = nullptr;
  std::shared_ptr<std::atomic<int64_t>> in_flight;
  RequestStreamPtr stream;
  std::shared_ptr<Notifier> notifier;
  std::string request_id;
  std::vector<int32_t> prompt;
  SamplingParams params;
  bool include_stop_str = false;
  std::vector<Choice> choices;

  Clock::time_point arrival;
  Clock::time_point last_token_at;
  bool first_token_seen = false;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache (usage)
  CacheWaterfall cache_waterfall;  // the first admitted choice's account (usage)
  int64_t next_prompt_position = 1;
  bool done = false;                   // the finished update was returned
  std::atomic<bool> cancelled{false};
  std::atomic<bool> released{false};   // in_flight decremented
  // --ttft-slo-ms: this request's share of the admission queue, until its first token.
  std::shared_ptr<TtftSlo> slo;
  TtftSloShare slo_share;
  std::atomic<bool> slo_left{false};

  void LeaveSloQueue() {
    if (slo && !slo_left.exchange(true)) slo->Leave(slo_share);
  }
  void Release() {
    LeaveSloQueue();
    if (!released.exchange(true)) in_flight->fetch_sub(1);
  }
  bool AllEnded() const {
    return std::all_of(choices.begin(), choices.end(), [](const Choice& c) { return c.ended; });
  }
  ChoiceDelta& DeltaFor(GenerationUpdate* u, int32_t index) {
    for (ChoiceDelta& d : u->choices) {
      if (d.index == index) return d;
    }
    u->choices.emplace_back().index = index;
    return u->choices.back();
  }
  void Apply(RequestOutput& out, GenerationUpdate* u);
  void EndChoice(Choice& c, ChoiceDelta& d, FinishReason reason);
};

void Generation::State::EndChoice(Choice& c, ChoiceDelta& d, FinishReason reason) {
  c.ended = true;
  c.reason = reason;
  d.finish_reason = reason;
}

void Generation::State::Apply(RequestOutput& out, GenerationUpdate* u) {
  if (!out.status.ok()) {
    if (u->status.ok()) u->status = out.status;
    for (Choice& c : choices) c.ended = true;
    return;
  }
  for (const TokenLogprobs& p : out.prompt_logprobs) {
    if (next_prompt_position >= static_cast<int64_t>(prompt.size())) break;
    LogprobEntry e = engine->MakeLogprobEntry(prompt[static_cast<size_t>(next_prompt_position)], p.logprob);
    for (const TokenLogprob& t : p.top) e.top.push_back(engine->MakeLogprobEntry(t.token, t.logprob));
    u->prompt_logprobs.push_back(std::move(e));
    ++next_prompt_position;
  }
  if (out.kv_export) u->kv_export = std::move(out.kv_export);
  cached_tokens = std::max(cached_tokens, out.num_cached_tokens);
  // Forked choices share the leader's prompt account; the leader's comes first.
  if (cache_waterfall.empty()) cache_waterfall = out.cache_waterfall;
  if (out.index < 0 || out.index >= static_cast<int32_t>(choices.size())) return;
  Choice& c = choices[static_cast<size_t>(out.index)];
  if (c.ended) return;  // e.g. tokens after a matched stop string
  if (out.token_ids.empty() && out.finish_reason == FinishReason::kNone) return;
  ChoiceDelta& d = DeltaFor(u, out.index);
  for (size_t i = 0; i < out.token_ids.size() && !c.ended; ++i) {
    const int32_t token = out.token_ids[i];
    d.token_ids.push_back(token);
    c.last_token = token;
    ++completion_tokens;
    if (params.logprobs && i < out.logprobs.size()) {
      LogprobEntry e = engine->MakeLogprobEntry(token, out.logprobs[i].logprob);
      for (const TokenLogprob& t : out.logprobs[i].top) e.top.push_back(engine->MakeLogprobEntry(t.token, t.logprob));
      d.logprobs.push_back(std::move(e));
    }
    StatusOr<std::string> piece = c.detok->Step(token);
    if (piece.ok()) d.text += *piece;
    if (c.detok->stopped()) {
      d.stop_string = c.detok->matched_stop();
      if (include_stop_str && d.stop_string) d.text += *d.stop_string;
      EndChoice(c, d, FinishReason::kStop);
      loop->FinishChoice(request_id, out.index, FinishReason::kStop);  // frees its KV at the next step
    }
  }
  if (!c.ended && out.finish_reason != FinishReason::kNone) {
    d.text += c.detok->Finish();
    if (out.finish_reason == FinishReason::kStop &&
        std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), c.last_token) !=
            params.stop_token_ids.end()) {
      d.stop_token_id = c.last_token;
    }
    EndChoice(c, d, out.finish_reason);
  }
}

Generation::Generation(std::unique_ptr<State> state) : state_(std::move(state)) {}

void Generation::Notifier::Fire() {
  std::lock_guard lock(mu);
  if (armed && fn) fn();
}

void Generation::Notifier::Arm() {
  std::lock_guard lock(mu);
  armed = true;
  if (fn) fn();  // for outputs pushed before the stream was in place
}

void Generation::Notifier::Disarm() {
  std::lock_guard lock(mu);
  armed = false;
  fn = nullptr;
}

Generation::~Generation() {
  if (state_->notifier) state_->notifier->Disarm();  // `notify` never runs after this
  if (!state_->done && state_->stream != nullptr) {
    if (!state_->AllEnded()) Cancel();
    if (state_->metrics != nullptr) state_->metrics->RequestFinished(FinishReason::kAbort);
  }
  state_->Release();
}

const std::string& Generation::request_id() const { return state_->request_id; }
int64_t Generation::num_prompt_tokens() const { return static_cast<int64_t>(state_->prompt.size()); }
bool Generation::finished() const { return state_->done; }
uint64_t Generation::seed() const { return state_->stream ? state_->stream->seed() : 0; }
bool Generation::seed_drawn() const { return state_->stream ? state_->stream->seed_drawn() : false; }

void Generation::Cancel() {
  State& s = *state_;
  if (s.cancelled.exchange(true)) return;
  s.loop->Abort(s.request_id);
}

bool Generation::Poll(GenerationUpdate* update) {
  State& s = *state_;
  if (s.done || s.stream == nullptr) return false;
  *update = GenerationUpdate{};
  RequestOutput out;
  bool any = false;
  while (s.stream->TryNext(&out)) {
    any = true;
    s.Apply(out, update);
  }
  if (!any) return false;
  std::sort(update->choices.begin(), update->choices.end(),
            [](const ChoiceDelta& a, const ChoiceDelta& b) { return a.index < b.index; });

  // Metrics from the consumer's view: when the client could first see tokens.
  const Clock::time_point now = Clock::now();
  int64_t new_tokens = 0;
  for (const ChoiceDelta& d : update->choices) new_tokens += static_cast<int64_t>(d.token_ids.size());
  if (new_tokens > 0 && s.metrics != nullptr) {
    if (!s.first_token_seen) {
      s.metrics->ObserveTimeToFirstToken(Seconds(now - s.arrival));
    } else {
      const double per_token = Seconds(now - s.last_token_at) / static_cast<double>(new_tokens);
      for (int64_t i = 0; i < new_tokens; ++i) s.metrics->ObserveInterTokenLatency(per_token);
    }
  }
  if (new_tokens > 0) {
    s.LeaveSloQueue();
    s.first_token_seen = true;
    s.last_token_at = now;
  }

  update->prompt_tokens = static_cast<int64_t>(s.prompt.size());
  update->completion_tokens = s.completion_tokens;
  update->cached_tokens = s.cached_tokens;
  update->cache_waterfall = s.cache_waterfall;
  if (s.AllEnded()) {
    update->finished = true;
    s.done = true;
    if (s.metrics != nullptr) {
      s.metrics->ObserveE2eLatency(Seconds(now - s.arrival));
      s.metrics->ObserveRequestTokens(update->prompt_tokens, s.completion_tokens);
      s.metrics->ObserveCacheWaterfall(update->cache_waterfall);
      s.metrics->RequestFinished(update->status.ok() ? s.choices[0].reason : FinishReason::kAbort);
    }
    s.Release();
  }
  return true;
}

// ---------------------------------------------------------------- ServingEngine

StatusOr<std::unique_ptr<ServingEngine>> ServingEngine::Create(ServingOptions options) {
  auto engine = std::unique_ptr<ServingEngine>(new ServingEngine());
  const std::string dir = options.loop.model_dir;
  ASSIGN_OR_RETURN(engine->tokenizer_, text::LoadModelTokenizer(dir));
  if (StatusOr<text::ChatTemplate> t = text::LoadModelChatTemplate(dir); t.ok()) {
    engine->chat_template_ = std::move(*t);
  } else if (t.status().code() != StatusCode::kNotFound) {
    LogWarn("serve: chat template unusable, /v1/chat/completions will answer 400: {}", t.status().ToString());
  }
  if (!engine->chat_template_) LogWarn("serve: {} has no chat template", dir);

  engine->metrics_ = options.metrics;
  if (options.ttft_slo) {
    if (options.metrics != nullptr) options.metrics->EnableTtftSlo();
    engine->ttft_slo_ = std::make_shared<TtftSlo>(*options.ttft_slo,
                                                  options.loop.scheduler.max_num_batched_tokens, options.metrics);
    options.loop.on_step = [slo = engine->ttft_slo_](const SchedulerOutput&, const sim::StepShape& shape, int64_t) {
      slo->OnStep(shape);
    };
  }
  if (ServingMetrics* m = options.metrics) {
    options.loop.on_finished = [m](const FinishedSequenceStats& st) {
      if (st.index == 0) m->ObserveQueueTime(st.queue_time_s);
    };
    options.loop.on_step = [m, cost = options.step_cost_model, slo = engine->ttft_slo_](
                               const SchedulerOutput&, const sim::StepShape& shape, int64_t ns) {
      m->ObserveStepTime(static_cast<double>(ns) / 1e9, cost ? static_cast<double>(cost->StepNs(shape)) / 1e9 : -1);
      if (slo) slo->OnStep(shape);
    };
    options.loop.on_kv_pull = [m](const KvPullEvent& ev) {
      if (ev.ok) m->ObserveKvPull(ev.bytes, ev.seconds);
    };
    if (options.loop.kv_tiers) {
      options.loop.kv_tiers->on_op = [m](const std::string& tier, KvTierOp op, double seconds) {
        m->ObserveKvTierOp(tier, op, seconds);
      };
    }
  }
  if (!options.receipt_key_file.empty()) {
    ASSIGN_OR_RETURN(receipt::ReceiptSigner signer, receipt::ReceiptSigner::Load(options.receipt_key_file));
    engine->receipts_.signer = std::move(signer);
  }
  options.loop.weights_digest.emplace();
  options.loop.weights_digest->fallback_cache_dir = options.weights_digest_cache_dir;
  const nlohmann::json flags = NumericsFlags(options.loop);
  ASSIGN_OR_RETURN(engine->loop_, EngineLoop::Create(std::move(options.loop)));
  engine->limits_ = engine->loop_->scheduler_options().limits;
  engine->receipts_.flags = flags;
  engine->receipts_.flags["block_size"] = engine->loop_->scheduler_options().kv.block_size;
  engine->receipts_.flags["max_model_len"] = engine->limits_.max_model_len;
  engine->receipts_.digests = {
      .weights = engine->loop_->weights_digest(),
      .tokenizer = TokenizerDigest(dir, *engine->tokenizer_, engine->chat_template_ ? &*engine->chat_template_ : nullptr),
      .engine = receipt::EngineDigest(),
      .flags = receipt::DigestHex(receipt::CanonicalDump(engine->receipts_.flags)),
  };
  LogInfo("receipts: tokenizer {}, engine {}, flags {} {}{}", engine->receipts_.digests.tokenizer,
          engine->receipts_.digests.engine, engine->receipts_.digests.flags,
          receipt::CanonicalDump(engine->receipts_.flags),
          engine->receipts_.signer ? ", signed by " + engine->receipts_.signer->public_key() : std::string());
  engine->structured_ = std::make_unique<structured::StructuredOutputs>(engine->tokenizer_.get(), engine->limits_.vocab_size);
  if (engine->tokenizer_->vocab_size() > engine->limits_.vocab_size) {
    LogWarn("serve: the tokenizer knows {} ids but the model only {}; ids beyond are rejected",
            engine->tokenizer_->vocab_size(), engine->limits_.vocab_size);
  }

  // Warm-up: one short request through the whole path on this thread, so the
  // first client does not pay for first-touch page faults and thread start-up.
  {
    Request warm;
    warm.id = "warmup";
    const int32_t vocab = static_cast<int32_t>(std::max<int64_t>(1, engine->limits_.vocab_size));
    for (int32_t i = 0; i < 8; ++i) warm.prompt_token_ids.push_back((i * 97 + 1) % vocab);
    warm.params.max_tokens = 2;
    warm.params.temperature = 0.0f;
    warm.params.ignore_eos = true;
    RETURN_IF_ERROR(ValidateRequest(warm, engine->limits_));
    ASSIGN_OR_RETURN(RequestStreamPtr stream, engine->loop_->Submit(std::move(warm)));
    RETURN_IF_ERROR(engine->loop_->RunUntilDone());
    RequestOutput out;
    while (stream->TryNext(&out)) {
      if (!out.status.ok()) return out.status;
    }
  }
  RETURN_IF_ERROR(engine->loop_->Start());

  engine->served_model_name_ = options.served_model_name;
  if (engine->served_model_name_.empty()) {
    fs::path p = fs::absolute(dir).lexically_normal();
    if (!p.has_filename()) p = p.parent_path();
    engine->served_model_name_ = p.filename().string();
  }
  engine->created_unix_ = static_cast<int64_t>(std::time(nullptr));
  engine->max_in_flight_ = options.max_in_flight;
  engine->chat_content_special_tokens_ = options.chat_content_special_tokens;
  engine->cache_isolation_ = options.cache_isolation;
  engine->retention_ttl_scale_ = options.retention_ttl_scale;
  return engine;
}

ServingEngine::~ServingEngine() { Stop(); }

void ServingEngine::Stop() {
  draining_.store(true);
  if (loop_) loop_->Stop();
}

StatusOr<std::string> RenderChatPrompt(const text::ChatTemplate* chat_template, const std::string& model_name,
                                       const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                       bool add_generation_prompt, const nlohmann::ordered_json& template_kwargs,
                                       int64_t now_unix_seconds) {
  if (chat_template == nullptr) {
    return FailedPrecondition("model '" + model_name +
                              "' has no chat template (tokenizer_config.json 'chat_template'); use /v1/completions");
  }
  text::ChatRenderOptions opts;
  opts.now_unix_seconds = now_unix_seconds;
  StatusOr<std::string> text = chat_template->Render(messages, tools, add_generation_prompt, template_kwargs, opts);
  if (!text.ok()) {
    return InvalidArgument("'messages': the chat template rejected the conversation: " + text.status().message());
  }
  return text;
}

StatusOr<std::string> ServingEngine::RenderChat(const nlohmann::ordered_json& messages,
                                                const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                                const nlohmann::ordered_json& template_kwargs) const {
  return RenderChatPrompt(chat_template(), served_model_name_, messages, tools, add_generation_prompt,
                          template_kwargs);
}

LogprobEntry ServingEngine::MakeLogprobEntry(int32_t token_id, float logprob) const {
  LogprobEntry e;
  e.token_id = token_id;
  e.logprob = logprob;
  const int32_t id = token_id;
  StatusOr<std::string> s = tokenizer_->Decode(std::span<const int32_t>(&id, 1), {.skip_special_tokens = false,
                                                                                 .clean_up = false});
  if (s.ok()) e.token = std::move(*s);
  e.bytes.assign(e.token.begin(), e.token.end());
  return e;
}

StatusOr<std::shared_ptr<Generation>> ServingEngine::Submit(GenerateInput input, std::function<void()> notify) {
  if (draining_.load()) return Status(StatusCode::kUnavailable, "the server is shutting down");
  RETURN_IF_ERROR(ApplyCacheIsolation(cache_isolation_, input.tenant, &input.request));
  // Retention budgets count per API key: the key the request authenticated with (as cache isolation names it).
  if (Retention& r = input.request.retention; !r.prefixes.empty()) {
    r.tenant = input.tenant;
    for (RetainedPrefix& p : r.prefixes) {
      p.ttl_ns = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(p.ttl_ns) * retention_ttl_scale_));
    }
  }
  const int64_t in_flight_before = in_flight_->fetch_add(1);
  if (in_flight_before >= max_in_flight_) {
    in_flight_->fetch_sub(1);
    return Status(StatusCode::kResourceExhausted,
                  "the server is at its limit of " + std::to_string(max_in_flight_) + " requests in flight");
  }
  auto state = std::make_unique<Generation::State>();
  if (ttft_slo_) {
    StatusOr<TtftSloShare> share =
        ttft_slo_->Admit(static_cast<int64_t>(input.request.prompt_token_ids.size()), in_flight_before == 0);
    if (!share.ok()) {
      in_flight_->fetch_sub(1);
      return share.status();
    }
    state->slo = ttft_slo_;
    state->slo_share = *share;
  }
  state->engine = this;
  state->loop = loop_.get();
  state->metrics = metrics_;
  state->in_flight = in_flight_;
  Request& request = input.request;
  state->request_id = request.id;
  state->prompt = request.prompt_token_ids;
  state->params = request.params;
  state->include_stop_str = input.include_stop_str_in_output;
  state->arrival = Clock::now();
  text::DetokenizerOptions dopts;
  dopts.decode.skip_special_tokens = input.skip_special_tokens;
  dopts.stop = request.params.stop;
  for (int32_t i = 0; i < request.params.n; ++i) {
    state->choices.emplace_back().detok = std::make_unique<text::IncrementalDetokenizer>(tokenizer_.get(), dopts);
  }
  request.arrival_time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                state->arrival.time_since_epoch()).count();
  auto notifier = std::make_shared<Generation::Notifier>();
  notifier->fn = std::move(notify);
  state->notifier = notifier;
  auto generation = std::shared_ptr<Generation>(new Generation(std::move(state)));
  StatusOr<RequestStreamPtr> stream = loop_->Submit(std::move(request), [notifier] { notifier->Fire(); });
  if (!stream.ok()) {
    generation->state_->done = true;  // nothing to cancel; ~Generation releases the slot
    return stream.status();
  }
  generation->state_->stream = *stream;
  notifier->Arm();
  return generation;
}

}  // namespace tessera

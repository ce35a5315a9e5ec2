#include "server/router/proxy_job.h"
#include "common/log.h"

#include <algorithm>
#include <chrono>
#include <ctime>

#include <nlohmann/json.hpp>

#include "server/openai/sse.h"
#include "server/router/http_client.h"
#include "server/router/kv_router.h"

namespace tessera {
namespace {

using Json = nlohmann::ordered_json;
namespace http = boost::beast::http;

// Chat-only fields, replaced by token ids when the router continues a choice
// on another decode through /v1/completions (migration).
constexpr const char* kChatOnly[] = {"messages", "tools", "tool_choice", "chat_template", "chat_template_kwargs",
                                     "add_generation_prompt", "continue_final_message", "documents",
                                     "parallel_tool_calls", "max_completion_tokens", "top_logprobs"};
// Fields whose output a continuation from prompt + tokens so far cannot
// reproduce (parser or grammar state, per-token logprobs, several prompts):
// such a request is relayed as it came and restarted on another decode only
// while the client has seen nothing of it.
constexpr const char* kNotContinuable[] = {"tools", "response_format", "structured_outputs", "guided_json",
                                           "guided_regex", "guided_choice", "guided_grammar", "logprobs",
                                           "top_logprobs", "continue_final_message"};

std::string Dump(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

// Appends `bytes` to `*pending` and calls on_data(payload) for each complete
// "data: " event ("[DONE]" included); false from on_data stops (returned).
template <typename F>
bool ForEachSseData(std::string* pending, std::string_view bytes, F&& on_data) {
  pending->append(bytes);
  size_t end;
  while ((end = pending->find("\n\n")) != std::string::npos) {
    const std::string event = pending->substr(0, end);
    pending->erase(0, end + 2);
    if (event.rfind("data: ", 0) == 0 && !on_data(event.substr(6))) return false;
  }
  return true;
}

bool Flag(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_boolean() && it->get<bool>();
}

bool Truthy(const Json& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();
  return true;
}

struct ChoiceState {
  std::vector<int32_t> ids;
  std::string text;
  bool finished = false;
  bool started = false;  // chat: the role delta was sent
  Json finish_reason = nullptr;
  Json stop_reason = nullptr;
};

// kAnswered: the instance's complete answer went to the client (non-streamed);
// kClientAnswered: the client got an error passed through, or left.
enum class LegOutcome { kDone, kAnswered, kFailed, kClientAnswered };

class Proxy {
 public:
  Proxy(const ProxyContext& ctx, std::shared_ptr<HttpExchange> ex, bool chat, Json body)
      : ctx_(ctx), ex_(std::move(ex)), chat_(chat), body_(std::move(body)) {
    id_ = (chat_ ? "chatcmpl-" : "cmpl-") + RandomHex(32);
    created_ = static_cast<int64_t>(std::time(nullptr));
  }

  void Run() {
    if (Stopping()) return Aborted();
    if (!body_.is_object()) return SendError(HttpStatus::bad_request, "the request body must be a JSON object");
    if (auto it = body_.find("kv_transfer_params"); it != body_.end() && !it->is_null()) {
      return SendError(HttpStatus::bad_request, "'kv_transfer_params' is set by the router; remove it");
    }
    if (ctx_.flags.isolate_api_keys) {  // the key's namespace, carried to every instance as the salt
      if (auto it = body_.find("cache_salt"); it != body_.end() && !it->is_null() && !it->is_string()) {
        return SendError(HttpStatus::bad_request, "'cache_salt' must be a string");
      }
      body_["cache_salt"] = TenantCacheSalt(ex_->tenant(), CacheSaltOf(body_));
    }
    stream_ = Flag(body_, "stream");
    if (auto so = body_.find("stream_options"); so != body_.end() && so->is_object()) {
      include_usage_ = Flag(*so, "include_usage");
    }
    return_token_ids_ = Flag(body_, "return_token_ids");
    n_ = body_.contains("n") && body_["n"].is_number_integer() ? body_["n"].get<int>() : 1;
    if (n_ < 1 || n_ > 128) n_ = 1;  // the instance answers with its own 400
    model_ = body_.contains("model") && body_["model"].is_string() ? body_["model"].get<std::string>() : "";
    size_t prompts = 1;
    if (auto it = body_.find("prompt"); !chat_ && it != body_.end() && it->is_array() && !it->empty() &&
                                        !(*it)[0].is_number_integer()) {
      prompts = std::min<size_t>(it->size(), 1024);
    }
    choices_.resize(static_cast<size_t>(n_) * prompts);
    for (const char* k : kNotContinuable) {
      if (auto it = body_.find(k); it != body_.end() && Truthy(*it)) {
        continuable_ = false;
        not_continuable_why_ = k;
      }
    }
    if (!chat_ && !SinglePrompt()) {
      continuable_ = false;
      not_continuable_why_ = "several prompts";
    } else if (!Tokenize()) {
      return;
    }
    if (chat_) {
      for (const char* k : {"max_completion_tokens", "max_tokens"}) {
        if (auto it = body_.find(k); it != body_.end() && it->is_number_integer()) {
          max_tokens_ = it->get<int64_t>();
          break;
        }
      }
    } else if (auto it = body_.find("max_tokens"); it == body_.end()) {
      max_tokens_ = 16;  // the completions default
    } else if (it->is_number_integer()) {
      max_tokens_ = it->get<int64_t>();
    }
    min_tokens_ = body_.contains("min_tokens") && body_["min_tokens"].is_number_integer()
                      ? body_["min_tokens"].get<int64_t>() : 0;

    const Json kv = Prefill();
    std::vector<std::string> failed;
    // The client's own request, relayed as it came (plus the KV handle): the
    // decode instance parses and answers it exactly as a unified one would.
    // While the client has seen nothing, a failed decode is replaced by
    // another running the same request (without the handle: it recomputes).
    // The decode (or unified) instance is picked by --routing-logic; with no
    // prefill handle, kv-aware may name a peer to export the prefix.
    const std::string salt = CacheSaltOf(body_);
    Json relay_kv = kv;
    for (int attempt = 0; attempt <= ctx_.flags.max_migrations; ++attempt) {
      if (ex_->closed()) return;
      if (Stopping()) return Aborted();
      std::optional<RouteDecision> route = ctx_.kv_router->Choose(InstanceRole::kDecode, prompt_, salt,
                                                                  max_tokens_ ? *max_tokens_ * n_ : -1, failed);
      if (!route) break;
      const InstanceRef decode = route->target;
      if (attempt > 0) ctx_.metrics->Migration();
      if (attempt == 0 && relay_kv.is_null() && route->peer) {
        relay_kv = ctx_.kv_router->PeerExport(*route, prompt_, salt, body_.contains("model") ? body_["model"] : Json());
      }
      const LegOutcome out = RelayLeg(decode, relay_kv);
      // ok: the instance computed the request (a 4xx passed through computed
      // nothing, so it owes no KV events).
      ctx_.kv_router->Done(*route, out == LegOutcome::kDone || out == LegOutcome::kAnswered);
      if (out == LegOutcome::kClientAnswered || out == LegOutcome::kAnswered) return;
      if (out == LegOutcome::kDone) return Finish();
      failed.push_back(decode.address);
      relay_kv = nullptr;
      if (stream_started_) break;
    }
    if (!stream_started_) {
      return SendError(HttpStatus::service_unavailable,
                       failed.empty() ? "no decode instance is available"
                                      : "router: decode failed and no other decode instance could serve the request");
    }
    if (!continuable_) {
      return Fail("the decode instance failed mid-stream, and a request with '" + not_continuable_why_ +
                  "' cannot be continued on another instance");
    }
    // Migration: each unfinished choice continues on another decode from prompt + its tokens so far.
    for (int i = 0; i < n_; ++i) {
      ChoiceState& c = choices_[static_cast<size_t>(i)];
      for (int attempt = 0; !c.finished && attempt < ctx_.flags.max_migrations; ++attempt) {
        if (ex_->closed()) return;
        if (Stopping()) return Aborted();
        std::optional<InstanceRef> next = ctx_.registry->Pick(InstanceRole::kDecode, failed);
        if (!next) break;
        ctx_.metrics->Migration();
        migrated_ = true;
        LogInfo("router: {} choice {}: continuing on decode {} after {} tokens", id_, i, next->address,
                c.ids.size());
        std::vector<int32_t> prompt = prompt_;
        prompt.insert(prompt.end(), c.ids.begin(), c.ids.end());
        const int64_t done = static_cast<int64_t>(c.ids.size());
        const int64_t left = max_tokens_ ? *max_tokens_ - done : -1;
        const LegOutcome out =
            DecodeLeg(*next, InstanceBody(prompt, 1, left, std::max<int64_t>(0, min_tokens_ - done), nullptr), {i});
        if (out == LegOutcome::kClientAnswered || out == LegOutcome::kAnswered) return;
        if (out == LegOutcome::kFailed) failed.push_back(next->address);
      }
      if (!c.finished) {
        return Fail("decode failed for choice " + std::to_string(i) + " and no other decode instance could continue it");
      }
    }
    Finish();
  }

 private:
  // Completions: whether the request holds one prompt (text or token ids).
  bool SinglePrompt() const {
    auto it = body_.find("prompt");
    if (it == body_.end() || it->is_string()) return true;
    if (!it->is_array() || it->empty()) return true;  // the instance refuses it
    if ((*it)[0].is_number_integer()) return true;
    return it->size() == 1;
  }

  bool Stopping() const { return ctx_.stopping != nullptr && ctx_.stopping->load(std::memory_order_relaxed); }

  // Whether the upstream call must end now: the client left (a queued or
  // prefilling request sends nothing for seconds, so this is polled through
  // HttpCallOptions::abandon, not only between relayed bytes), or the drain
  // deadline passed. Either way the connection to the instance closes, which
  // the instance takes as its client leaving: it aborts and frees the blocks.
  bool Gone() const { return ex_->closed() || Stopping(); }

  // After a leg ended by Gone(): nothing more for a departed client; the
  // drain's answer otherwise.
  LegOutcome EndGone() {
    if (!ex_->closed()) Aborted();
    return LegOutcome::kClientAnswered;
  }

  // --------------------------------------------------------------- upstream

  bool Tokenize() {
    Json p = chat_ ? Json() : (body_.contains("prompt") ? body_["prompt"] : Json());
    if (p.is_array() && p.size() == 1 && (p[0].is_string() || p[0].is_array())) p = p[0];
    if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
      for (const Json& t : p) {
        if (!t.is_number_integer()) return SendError(HttpStatus::bad_request, "'prompt' must be token ids"), false;
        prompt_.push_back(t.get<int32_t>());
      }
      return true;
    }
    if (!chat_ && !p.is_string()) return true;  // the instance answers with its own 400
    int status = 0;
    std::string error;
    if (TokenizeUpstream(ctx_, TokenizeRequestBody(body_, chat_), &prompt_, &status, &error)) return true;
    if (status == 503) {
      SendError(HttpStatus::service_unavailable, error);
    } else {
      PassThrough(status, error);
    }
    return false;
  }

  // A continuation on /v1/completions (migration). max_tokens < 0: null (up
  // to the context length).
  Json InstanceBody(const std::vector<int32_t>& prompt, int n, int64_t max_tokens, int64_t min_tokens,
                    const Json& kv) const {
    Json b = body_;
    for (const char* k : kChatOnly) b.erase(k);
    for (const char* k : {"stream_options", "echo", "prompt_logprobs", "logprobs", "suffix"}) b.erase(k);
    b["prompt"] = prompt;
    b["n"] = n;
    b["max_tokens"] = max_tokens >= 0 ? Json(max_tokens) : Json(nullptr);
    if (min_tokens > 0) b["min_tokens"] = min_tokens; else b.erase("min_tokens");
    b["stream"] = true;
    b["return_token_ids"] = true;
    if (chat_) b["add_special_tokens"] = false;  // ids already final; keeps /v1/completions from adding BOS
    if (!kv.is_null()) b["kv_transfer_params"] = kv;
    return b;
  }

  Json Prefill() { return PrefillUpstream(ctx_, body_, chat_, prompt_, id_); }

  // The client's request on the decode instance, its answer relayed as it
  // comes: only "id" and "created" are the router's (one id across
  // migrations). Streams ask for token ids and usage (kept for migration and
  // dropped again where the client did not ask for them).
  LegOutcome RelayLeg(const InstanceRef& inst, const Json& kv) {
    Json b = body_;
    if (!kv.is_null()) b["kv_transfer_params"] = kv;
    if (stream_) {
      b["return_token_ids"] = true;
      Json so = body_.contains("stream_options") && body_["stream_options"].is_object() ? body_["stream_options"]
                                                                                        : Json::object();
      so["include_usage"] = true;
      b["stream_options"] = so;
    }
    const int64_t estimate = static_cast<int64_t>(prompt_.size()) * n_ + max_tokens_.value_or(256) * n_;
    ctx_.registry->AddOutstanding(inst.address, estimate);
    const std::string path = chat_ ? "/v1/chat/completions" : "/v1/completions";
    HttpCallResult r;
    HttpCallOptions o = ctx_.registry->CallOptions();
    o.idle_timeout = std::chrono::milliseconds(120000);
    o.abandon = [this] { return Gone(); };
    std::string pending, upstream_body;
    bool done_seen = false, upstream_error = false;
    Status s = HttpCall(inst.host, inst.port, "POST", path, Dump(b), o, &r, [&](std::string_view d) {
      if (Gone()) return false;
      if (r.status != 200 || !stream_) {
        upstream_body.append(d);
        return true;
      }
      return ForEachSseData(&pending, d, [&](const std::string& data) {
        if (data == "[DONE]") {
          done_seen = true;
          return true;
        }
        Json j = Json::parse(data, nullptr, false);
        if (!j.is_object() || j.contains("error")) {
          upstream_error = true;
          LogWarn("router: {}: decode {} sent an error mid-stream: {}", id_, inst.address, data.substr(0, 300));
          return false;
        }
        RelayChunk(std::move(j));
        return true;
      });
    });
    ctx_.registry->AddOutstanding(inst.address, -estimate);
    if (Gone()) return EndGone();
    const int status = r.status;
    if (s.ok() && status != 200 && status != 0 && status < 500 && status != 429 && !stream_started_) {
      ctx_.metrics->Decision(inst.address, "decode", true);
      PassThrough(status, upstream_body);
      return LegOutcome::kClientAnswered;
    }
    bool ok = s.ok() && status == 200 && !upstream_error;
    if (ok && !stream_) {
      Json j = Json::parse(upstream_body, nullptr, false);
      ok = j.is_object() && j.contains("choices");
      if (ok) {
        ctx_.metrics->Decision(inst.address, "decode", true);
        ctx_.metrics->ObserveTimeToFirstToken(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - arrival_).count());
        j["id"] = id_;
        j["created"] = created_;
        SendJson(HttpStatus::ok, j);
        return LegOutcome::kAnswered;
      }
    }
    if (ok && stream_) {
      bool all_done = true;
      for (const ChoiceState& c : choices_) all_done = all_done && c.finished;
      ok = done_seen && all_done;
    }
    ctx_.metrics->Decision(inst.address, "decode", ok);
    if (!ok) {
      LogWarn("router: {}: decode {} failed ({})", id_, inst.address,
              !s.ok() ? s.message() : "HTTP " + std::to_string(status));
      if (!s.ok() || status >= 500 || status == 429) ctx_.registry->MarkFailed(inst.address);
      return LegOutcome::kFailed;
    }
    return LegOutcome::kDone;
  }

  // One event of the decode's own stream, to the client: its choices' token
  // ids and finish reasons recorded; an "abort" finish (the instance is
  // stopping) is withheld, the choice migrates; the usage chunk is held for
  // the end (recomputed when a migration happened).
  void RelayChunk(Json j) {
    if (j.contains("model") && j["model"].is_string()) model_ = j["model"].get<std::string>();
    Json* choices = j.contains("choices") && j["choices"].is_array() ? &j["choices"] : nullptr;
    if (choices == nullptr || choices->empty()) {
      if (j.contains("usage")) usage_chunk_ = std::move(j);
      return;
    }
    Json kept = Json::array();
    for (Json& ch : *choices) {
      const int index = ch.contains("index") && ch["index"].is_number_integer() ? ch["index"].get<int>() : 0;
      if (index < 0 || static_cast<size_t>(index) >= choices_.size()) continue;
      ChoiceState& c = choices_[static_cast<size_t>(index)];
      c.started = true;
      if (auto t = ch.find("token_ids"); t != ch.end() && t->is_array()) {
        for (const Json& v : *t) c.ids.push_back(v.get<int32_t>());
        if (!t->empty() && !first_token_seen_) {
          first_token_seen_ = true;
          ctx_.metrics->ObserveTimeToFirstToken(
              std::chrono::duration<double>(std::chrono::steady_clock::now() - arrival_).count());
        }
      }
      if (chat_) {
        if (auto d = ch.find("delta"); d != ch.end() && d->contains("content") && (*d)["content"].is_string()) {
          c.text += (*d)["content"].get<std::string>();
        }
      } else if (ch.contains("text") && ch["text"].is_string()) {
        c.text += ch["text"].get<std::string>();
      }
      if (auto f = ch.find("finish_reason"); f != ch.end() && f->is_string()) {
        if (f->get<std::string>() == "abort") {
          *f = nullptr;
          if (ch.contains("stop_reason")) ch["stop_reason"] = nullptr;
        } else {
          c.finished = true;
          c.finish_reason = *f;
          c.stop_reason = ch.contains("stop_reason") ? ch["stop_reason"] : Json(nullptr);
        }
      }
      if (!return_token_ids_) ch.erase("token_ids");
      // Chunks that only carried token ids (text held back) are not the client's.
      const bool empty = (chat_ ? ch.value("delta", Json::object()).empty() : ch.value("text", std::string()).empty()) &&
                         ch.value("finish_reason", Json()).is_null() && ch.value("logprobs", Json()).is_null() &&
                         ch.value("prompt_logprobs", Json()).is_null() && !ch.contains("token_ids");
      if (!empty) kept.push_back(std::move(ch));
    }
    if (kept.empty()) return;
    *choices = std::move(kept);
    j["id"] = id_;
    j["created"] = created_;
    StartStream();
    ex_->WriteChunk("data: " + Dump(j) + "\n\n");
  }

  // Streams one decode call; `index_map[j]` is the client's index of its choice j.
  LegOutcome DecodeLeg(const InstanceRef& inst, const Json& b, const std::vector<int>& index_map) {
    const int64_t estimate = static_cast<int64_t>(b["prompt"].size()) +
                             (b["max_tokens"].is_number_integer() ? b["max_tokens"].get<int64_t>() : 256);
    ctx_.registry->AddOutstanding(inst.address, estimate);
    std::string pending;
    bool done_seen = false, upstream_error = false;
    HttpCallResult r;
    HttpCallOptions o = ctx_.registry->CallOptions();
    o.idle_timeout = std::chrono::milliseconds(120000);
    o.abandon = [this] { return Gone(); };
    int status = 0;
    std::string error_body;
    Status s = HttpCall(inst.host, inst.port, "POST", "/v1/completions", b.dump(), o, &r, [&](std::string_view d) {
      if (Gone()) return false;
      if (r.status != 200) {
        error_body.append(d);
        return true;
      }
      return ForEachSseData(&pending, d, [&](const std::string& data) {
        if (data == "[DONE]") {
          done_seen = true;
          return true;
        }
        const Json j = Json::parse(data, nullptr, false);
        if (!j.is_object() || j.contains("error")) {
          upstream_error = true;
          LogWarn("router: {}: decode {} sent an error mid-stream: {}", id_, inst.address, data.substr(0, 300));
          return false;
        }
        if (j.contains("model") && j["model"].is_string()) model_ = j["model"].get<std::string>();
        if (!j.contains("choices")) return true;
        for (const Json& ch : j["choices"]) {
          const int local = ch.value("index", 0);
          if (local < 0 || static_cast<size_t>(local) >= index_map.size()) continue;
          OnDelta(index_map[static_cast<size_t>(local)], ch);
        }
        return true;
      });
    });
    status = r.status;
    ctx_.registry->AddOutstanding(inst.address, -estimate);
    if (Gone()) return EndGone();
    if (s.ok() && status != 200 && status != 0 && status < 500 && status != 429) {
      ctx_.metrics->Decision(inst.address, "decode", true);
      if (!stream_started_) {
        PassThrough(status, error_body);
        return LegOutcome::kClientAnswered;
      }
    }
    bool all_done = true;
    for (int i : index_map) all_done = all_done && choices_[static_cast<size_t>(i)].finished;
    const bool ok = s.ok() && !upstream_error && status == 200 && done_seen && all_done;
    ctx_.metrics->Decision(inst.address, "decode", ok);
    if (!ok) {
      LogWarn("router: {}: decode {} failed mid-request ({})", id_, inst.address,
              !s.ok() ? s.message() : "HTTP " + std::to_string(status));
      if (!s.ok() || status >= 500 || status == 429) ctx_.registry->MarkFailed(inst.address);
      return LegOutcome::kFailed;
    }
    return LegOutcome::kDone;
  }

  // --------------------------------------------------------------- client side

  void OnDelta(int index, const Json& ch) {
    ChoiceState& c = choices_[static_cast<size_t>(index)];
    if (c.finished) return;
    std::vector<int32_t> ids;
    if (auto t = ch.find("token_ids"); t != ch.end() && t->is_array()) {
      for (const Json& v : *t) ids.push_back(v.get<int32_t>());
    }
    const std::string text = ch.contains("text") && ch["text"].is_string() ? ch["text"].get<std::string>() : "";
    Json finish = ch.contains("finish_reason") ? ch["finish_reason"] : Json(nullptr);
    // An aborted choice (the instance drained or stopped) is not finished: it migrates.
    if (finish.is_string() && finish.get<std::string>() == "abort") finish = nullptr;
    if (!first_token_seen_ && !ids.empty()) {
      first_token_seen_ = true;
      ctx_.metrics->ObserveTimeToFirstToken(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - arrival_).count());
    }
    c.ids.insert(c.ids.end(), ids.begin(), ids.end());
    c.text += text;
    if (!finish.is_null()) {
      c.finished = true;
      c.finish_reason = finish;
      c.stop_reason = ch.contains("stop_reason") ? ch["stop_reason"] : Json(nullptr);
    }
    if (!stream_) return;
    if (text.empty() && finish.is_null() && !(return_token_ids_ && !ids.empty())) return;
    StartStream();
    ex_->WriteChunk(ChoiceChunk(index, text, finish, ids));
  }

  // One SSE event carrying one choice's delta (its role first, on chat).
  std::string ChoiceChunk(int index, const std::string& text, const Json& finish, const std::vector<int32_t>& ids) {
    ChoiceState& c = choices_[static_cast<size_t>(index)];
    Json choice;
    choice["index"] = index;
    if (chat_) {
      Json delta = Json::object();
      if (!c.started) delta["role"] = "assistant";
      c.started = true;
      if (!text.empty() || finish.is_null()) delta["content"] = text;
      choice["delta"] = delta;
    } else {
      choice["text"] = text;
    }
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = finish;
    choice["stop_reason"] = c.finished ? c.stop_reason : Json(nullptr);
    if (return_token_ids_) choice["token_ids"] = ids;
    Json chunk = Header(chat_ ? "chat.completion.chunk" : "text_completion");
    chunk["choices"] = Json::array({choice});
    return "data: " + Dump(chunk) + "\n\n";
  }

  // The drain deadline passed (ProxyContext::stopping) before the instance
  // finished: a stream ends as an instance ends one at its own deadline, each
  // unfinished choice with finish_reason "abort", usage if asked, [DONE]. A
  // plain response gets 503: the router relays an instance's answer whole,
  // so it holds no partial text to return.
  void Aborted() {
    if (!stream_) {
      return SendError(HttpStatus::service_unavailable,
                       "router: shutting down (--drain-timeout passed); the request was aborted");
    }
    StartStream();
    std::string tail;
    for (size_t i = 0; i < choices_.size(); ++i) {
      ChoiceState& c = choices_[i];
      if (c.finished) continue;
      c.finished = true;
      c.finish_reason = "abort";
      tail += ChoiceChunk(static_cast<int>(i), "", c.finish_reason, {});
    }
    migrated_ = true;  // the decode's usage chunk, if any, predates the abort
    EndStreamWith(std::move(tail));
  }

  Json Header(const char* object) const {
    return {{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}};
  }

  Json Usage() const {
    int64_t completion = 0;
    for (const ChoiceState& c : choices_) completion += static_cast<int64_t>(c.ids.size());  // one prompt here
    const int64_t prompt = static_cast<int64_t>(prompt_.size());
    return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
  }

  void StartStream() {
    if (stream_started_) return;
    stream_started_ = true;
    ex_->StartStream(SseResponseHead());
  }

  // The end of a stream: `tail` (last choice events), the usage chunk if
  // asked (the decode's own, or recomputed after a migration or an abort), [DONE].
  void EndStreamWith(std::string tail) {
    StartStream();
    if (include_usage_ && !migrated_ && usage_chunk_.is_object()) {
      usage_chunk_["id"] = id_;
      usage_chunk_["created"] = created_;
      tail += "data: " + Dump(usage_chunk_) + "\n\n";
    } else if (include_usage_) {
      Json u = Header(chat_ ? "chat.completion.chunk" : "text_completion");
      u["choices"] = Json::array();
      u["usage"] = Usage();
      tail += "data: " + Dump(u) + "\n\n";
    }
    tail += openai::SseDone();
    ex_->WriteChunk(std::move(tail));
    ex_->EndStream();
  }

  void Finish() {
    if (stream_) return EndStreamWith("");
    Json choices = Json::array();
    for (int i = 0; i < n_; ++i) {
      const ChoiceState& c = choices_[static_cast<size_t>(i)];
      Json ch;
      ch["index"] = i;
      if (chat_) {
        ch["message"] = {{"role", "assistant"}, {"content", c.text}};
      } else {
        ch["text"] = c.text;
      }
      ch["logprobs"] = nullptr;
      ch["finish_reason"] = c.finish_reason;
      ch["stop_reason"] = c.stop_reason;
      if (return_token_ids_) ch["token_ids"] = c.ids;
      choices.push_back(std::move(ch));
    }
    Json out = Header(chat_ ? "chat.completion" : "text_completion");
    out["choices"] = std::move(choices);
    out["usage"] = Usage();
    SendJson(HttpStatus::ok, out);
  }

  void SendJson(HttpStatus status, const Json& body) {
    HttpResponse res{status, 11};
    res.set(http::field::content_type, "application/json");
    res.body() = body.dump();
    res.prepare_payload();
    ex_->Send(std::move(res));
  }

  void SendError(HttpStatus status, const std::string& message) {
    const bool client = static_cast<int>(status) < 500;
    Json err = {{"error", {{"message", message},
                           {"type", client ? "invalid_request_error" : "server_error"},
                           {"param", nullptr},
                           {"code", client ? "invalid_request" : "unavailable"}}}};
    if (stream_started_) {
      ex_->WriteChunk(openai::SseData(nlohmann::json::parse(err.dump())) + openai::SseDone());
      ex_->EndStream();
      return;
    }
    SendJson(status, err);
  }

  void Fail(const std::string& message) { SendError(HttpStatus::service_unavailable, "router: " + message); }

  // An instance's own 4xx answer, as it came.
  void PassThrough(int status, const std::string& body) {
    HttpResponse res{static_cast<HttpStatus>(status), 11};
    res.set(http::field::content_type, "application/json");
    res.body() = body;
    res.prepare_payload();
    ex_->Send(std::move(res));
  }

  const ProxyContext& ctx_;
  std::shared_ptr<HttpExchange> ex_;
  const bool chat_;
  Json body_;
  std::string id_;
  std::string model_;
  int64_t created_ = 0;
  bool stream_ = false;
  bool include_usage_ = false;
  bool return_token_ids_ = false;
  bool stream_started_ = false;
  bool first_token_seen_ = false;
  bool continuable_ = true;           // see kNotContinuable
  std::string not_continuable_why_;
  bool migrated_ = false;             // a choice continued on another decode
  Json usage_chunk_;                  // the decode's usage chunk (streams), held for the end
  const std::chrono::steady_clock::time_point arrival_ = std::chrono::steady_clock::now();
  int n_ = 1;
  std::optional<int64_t> max_tokens_;
  int64_t min_tokens_ = 0;
  std::vector<int32_t> prompt_;
  std::vector<ChoiceState> choices_;
};

}  // namespace

// ------------------------------------------------------------------ shared with the gRPC front

Json TokenizeRequestBody(const Json& body, bool chat) {
  Json tb = Json::object();
  if (!chat && body.contains("prompt")) {
    Json p = body["prompt"];
    if (p.is_array() && p.size() == 1) p = p[0];
    tb["prompt"] = p;
  }
  for (const char* k : {"model", "messages", "tools", "add_generation_prompt", "continue_final_message",
                        "chat_template_kwargs", "add_special_tokens", "documents", "chat_template"}) {
    if (auto it = body.find(k); it != body.end()) tb[k] = *it;
  }
  return tb;
}

bool TokenizeUpstream(const ProxyContext& ctx, const Json& tokenize_body, std::vector<int32_t>* ids,
                      int* error_status, std::string* error_body) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::optional<InstanceRef> inst = ctx.registry->Pick(InstanceRole::kDecode);
    if (!inst) inst = ctx.registry->Pick(InstanceRole::kPrefill);
    if (!inst) break;
    HttpCallResult r;
    Status s = HttpCall(inst->host, inst->port, "POST", "/tokenize", tokenize_body.dump(), ctx.registry->CallOptions(), &r);
    if (!s.ok() || r.status >= 500 || r.status == 429) {
      ctx.registry->MarkFailed(inst->address);
      continue;
    }
    if (r.status != 200) {
      *error_status = r.status;
      *error_body = r.body;
      return false;
    }
    const Json j = Json::parse(r.body, nullptr, false);
    if (!j.is_object() || !j.contains("tokens") || !j["tokens"].is_array()) break;
    for (const Json& t : j["tokens"]) ids->push_back(t.get<int32_t>());
    return true;
  }
  *error_status = 503;
  *error_body = "no instance could tokenize the prompt";
  return false;
}

namespace {

// The prefill call: only what decides the prompt's KV (its token ids, the
// model or adapter, the cache salt that seeds the block hashes).
Json PrefillBody(const Json& body, const std::vector<int32_t>& prompt) {
  Json b = Json::object();
  for (const char* k : {"model", "cache_salt", "priority"}) {
    if (auto it = body.find(k); it != body.end()) b[k] = *it;
  }
  b["prompt"] = prompt;
  b["max_tokens"] = 1;
  b["temperature"] = 0;
  b["add_special_tokens"] = false;
  b["kv_transfer_params"] = Json{{"do_remote_decode", true}};
  return b;
}

// Whether the decode must compute the prompt's logits itself (prompt
// logprobs skip the prefix cache there: pulled blocks would go unused).
bool NeedsPromptLogits(const Json& body, bool chat) {
  auto pl = body.find("prompt_logprobs");
  if (pl != body.end() && !pl->is_null()) return true;
  return !chat && Flag(body, "echo") && body.contains("logprobs") && !body["logprobs"].is_null();
}

}  // namespace

std::string CacheSaltOf(const Json& body) {
  auto it = body.find("cache_salt");
  return it != body.end() && it->is_string() ? it->get<std::string>() : "";
}

Json PrefillUpstream(const ProxyContext& ctx, const Json& body, bool chat, const std::vector<int32_t>& prompt,
                     const std::string& id) {
  if (prompt.empty()) {
    ctx.metrics->PrefillSkipped("several_prompts");
    return nullptr;
  }
  if (static_cast<int64_t>(prompt.size()) < ctx.flags.prefill_threshold) {
    ctx.metrics->PrefillSkipped("short_prompt");
    return nullptr;
  }
  if (NeedsPromptLogits(body, chat)) {
    ctx.metrics->PrefillSkipped("prompt_logprobs");
    return nullptr;
  }
  const std::string salt = CacheSaltOf(body);
  std::vector<std::string> failed;
  for (int attempt = 0; attempt < 2; ++attempt) {
    // --routing-logic applies to the prefill pool too: kv-aware sends the
    // prompt where its prefix is cached (1 token of decode work there).
    std::optional<RouteDecision> route = ctx.kv_router->Choose(InstanceRole::kPrefill, prompt, salt, 1, failed, false);
    if (!route) break;
    const InstanceRef* p = &route->target;
    const Json b = PrefillBody(body, prompt);
    const int64_t tokens = static_cast<int64_t>(prompt.size());
    ctx.registry->AddOutstanding(p->address, tokens);
    HttpCallOptions o = ctx.registry->CallOptions();
    o.idle_timeout = std::chrono::milliseconds(120000);  // a long prompt's prefill sends nothing until done
    // A prefill that stops answering (frozen, partitioned) fails the health polls within about a
    // second; the call ends then instead of at idle_timeout.
    // So does the drain deadline (ProxyContext::stopping).
    const auto stopping = [&ctx] { return ctx.stopping != nullptr && ctx.stopping->load(std::memory_order_relaxed); };
    o.abandon = [&ctx, p, &stopping] { return stopping() || !ctx.registry->Healthy(p->address); };
    HttpCallResult r;
    const auto t0 = std::chrono::steady_clock::now();
    Status s = HttpCall(p->host, p->port, "POST", "/v1/completions", b.dump(), o, &r);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ctx.registry->AddOutstanding(p->address, -tokens);
    const Json j = s.ok() && r.status == 200 ? Json::parse(r.body, nullptr, false) : Json();
    const bool ok = j.is_object() && j.contains("kv_transfer_params") && j["kv_transfer_params"].is_object();
    ctx.kv_router->Done(*route, ok);
    ctx.metrics->Decision(p->address, "prefill", ok);
    if (ok) {
      ctx.metrics->ObservePrefill(took);
      return j["kv_transfer_params"];
    }
    if (stopping()) return nullptr;  // not the prefill's fault; the caller ends the request
    LogWarn("router: {}: prefill {} failed ({}); {}", id, p->address,
            s.ok() ? "HTTP " + std::to_string(r.status) : s.message(),
            attempt == 0 ? "trying another" : "the decode instance computes the prompt");
    if (!s.ok() || r.status >= 500) ctx.registry->MarkFailed(p->address);
    failed.push_back(p->address);
  }
  ctx.metrics->PrefillSkipped(failed.empty() ? "no_prefill" : "prefill_failed");
  return nullptr;
}

void RunProxyJob(const ProxyContext& ctx, const std::shared_ptr<HttpExchange>& ex, bool chat, Json body) {
  Proxy(ctx, ex, chat, std::move(body)).Run();
}

}  // namespace tessera

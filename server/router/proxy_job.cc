#include "server/router/proxy_job.h"

#include <chrono>
#include <ctime>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "server/openai/sse.h"
#include "server/router/http_client.h"
#include "server/router/kv_router.h"

namespace tessera {
namespace {

using Json = nlohmann::ordered_json;
namespace http = boost::beast::http;

// Fields a client may send that the router cannot carry through migration
// and prefill yet: refused, never silently dropped.
constexpr const char* kUnsupported[] = {"logprobs", "top_logprobs", "prompt_logprobs", "echo", "suffix", "tools"};
// Chat-only fields, replaced by token ids when the router talks to instances.
constexpr const char* kChatOnly[] = {"messages", "tools", "tool_choice", "chat_template", "chat_template_kwargs",
                                     "add_generation_prompt", "continue_final_message", "documents",
                                     "parallel_tool_calls", "max_completion_tokens"};

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

enum class LegOutcome { kDone, kFailed, kClientAnswered };

class Proxy {
 public:
  Proxy(const ProxyContext& ctx, std::shared_ptr<HttpExchange> ex, bool chat)
      : ctx_(ctx), ex_(std::move(ex)), chat_(chat) {
    id_ = (chat_ ? "chatcmpl-" : "cmpl-") + RandomHex(32);
    created_ = static_cast<int64_t>(std::time(nullptr));
  }

  void Run() {
    body_ = Json::parse(ex_->request().body(), nullptr, /*allow_exceptions=*/false);
    if (!body_.is_object()) return SendError(HttpStatus::bad_request, "the request body must be a JSON object");
    for (const char* k : kUnsupported) {
      if (auto it = body_.find(k); it != body_.end() && Truthy(*it)) {
        return SendError(HttpStatus::bad_request,
                         "'" + std::string(k) + "' is not supported through the router yet; send it to an instance");
      }
    }
    if (auto it = body_.find("kv_transfer_params"); it != body_.end() && !it->is_null()) {
      return SendError(HttpStatus::bad_request, "'kv_transfer_params' is set by the router; remove it");
    }
    stream_ = body_.value("stream", false);
    if (auto so = body_.find("stream_options"); so != body_.end() && so->is_object()) {
      include_usage_ = so->value("include_usage", false);
    }
    return_token_ids_ = body_.value("return_token_ids", false);
    n_ = body_.contains("n") && body_["n"].is_number_integer() ? body_["n"].get<int>() : 1;
    if (n_ < 1 || n_ > 128) return SendError(HttpStatus::bad_request, "'n' must be in [1, 128]");
    model_ = body_.contains("model") && body_["model"].is_string() ? body_["model"].get<std::string>() : "";
    choices_.resize(static_cast<size_t>(n_));
    if (!Tokenize()) return;
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

    Json kv = Prefill();
    std::vector<int> all(static_cast<size_t>(n_));
    for (int i = 0; i < n_; ++i) all[static_cast<size_t>(i)] = i;
    std::vector<std::string> failed;
    const std::string salt = body_.contains("cache_salt") && body_["cache_salt"].is_string()
                                 ? body_["cache_salt"].get<std::string>() : "";
    std::optional<RouteDecision> route = ctx_.kv_router->Choose(InstanceRole::kDecode, prompt_, salt,
                                                                         max_tokens_ ? *max_tokens_ * n_ : -1);
    if (!route) return SendError(HttpStatus::service_unavailable, "no decode instance is available");
    const InstanceRef* decode = &route->target;
    if (kv.is_null() && route->peer) {
      kv = ctx_.kv_router->PeerExport(*route, prompt_, salt, body_.contains("model") ? body_["model"] : Json());
    }
    LegOutcome out = DecodeLeg(*decode, InstanceBody(prompt_, n_, max_tokens_.value_or(-1), min_tokens_, kv), all);
    ctx_.kv_router->Done(*route, out == LegOutcome::kDone);
    if (out == LegOutcome::kClientAnswered) return;
    if (out == LegOutcome::kFailed) failed.push_back(decode->address);
    // Migration: each unfinished choice continues on another decode from prompt + its tokens so far.
    for (int i = 0; i < n_; ++i) {
      ChoiceState& c = choices_[static_cast<size_t>(i)];
      for (int attempt = 0; !c.finished && attempt < ctx_.flags.max_migrations; ++attempt) {
        if (ex_->closed()) return;
        std::optional<InstanceRef> next = ctx_.registry->Pick(InstanceRole::kDecode, failed);
        if (!next) break;
        ctx_.metrics->Migration();
        spdlog::info("router: {} choice {}: continuing on decode {} after {} tokens", id_, i, next->address,
                     c.ids.size());
        std::vector<int32_t> prompt = prompt_;
        prompt.insert(prompt.end(), c.ids.begin(), c.ids.end());
        const int64_t done = static_cast<int64_t>(c.ids.size());
        const int64_t left = max_tokens_ ? *max_tokens_ - done : -1;
        out = DecodeLeg(*next, InstanceBody(prompt, 1, left, std::max<int64_t>(0, min_tokens_ - done), nullptr), {i});
        if (out == LegOutcome::kClientAnswered) return;
        if (out == LegOutcome::kFailed) failed.push_back(next->address);
      }
      if (!c.finished) {
        return Fail("decode failed for choice " + std::to_string(i) + " and no other decode instance could continue it");
      }
    }
    Finish();
  }

 private:
  // --------------------------------------------------------------- upstream

  bool Tokenize() {
    if (!chat_) {
      const Json& p = body_.contains("prompt") ? body_["prompt"] : Json();
      if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
        for (const Json& t : p) {
          if (!t.is_number_integer()) return SendError(HttpStatus::bad_request, "'prompt' must be token ids"), false;
          prompt_.push_back(t.get<int32_t>());
        }
        return true;
      }
      if (p.is_array() && p.size() == 1 && p[0].is_string()) {
        body_["prompt"] = p[0];
      } else if (!p.is_string()) {
        SendError(HttpStatus::bad_request, "the router takes one prompt per request: a string or token ids");
        return false;
      }
    }
    Json tb = Json::object();
    for (const char* k : {"model", "prompt", "messages", "tools", "add_generation_prompt", "continue_final_message",
                          "chat_template_kwargs", "add_special_tokens", "documents", "chat_template"}) {
      if (auto it = body_.find(k); it != body_.end()) tb[k] = *it;
    }
    for (int attempt = 0; attempt < 3; ++attempt) {
      std::optional<InstanceRef> inst = ctx_.registry->Pick(InstanceRole::kDecode);
      if (!inst) inst = ctx_.registry->Pick(InstanceRole::kPrefill);
      if (!inst) break;
      HttpCallResult r;
      Status s = HttpCall(inst->host, inst->port, "POST", "/tokenize", tb.dump(), {}, &r);
      if (!s.ok() || r.status >= 500 || r.status == 429) {
        ctx_.registry->MarkFailed(inst->address);
        continue;
      }
      if (r.status != 200) {
        PassThrough(r.status, r.body);
        return false;
      }
      const Json j = Json::parse(r.body, nullptr, false);
      if (!j.is_object() || !j.contains("tokens") || !j["tokens"].is_array()) break;
      for (const Json& t : j["tokens"]) prompt_.push_back(t.get<int32_t>());
      return true;
    }
    SendError(HttpStatus::service_unavailable, "no instance could tokenize the prompt");
    return false;
  }

  // max_tokens < 0: null (up to the context length).
  Json InstanceBody(const std::vector<int32_t>& prompt, int n, int64_t max_tokens, int64_t min_tokens,
                    const Json& kv) const {
    Json b = body_;
    for (const char* k : kChatOnly) b.erase(k);
    b.erase("stream_options");
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

  // The prompt's KV on a prefill instance; null when skipped or failed (the decode computes it).
  Json Prefill() {
    if (static_cast<int64_t>(prompt_.size()) < ctx_.flags.prefill_threshold) {
      ctx_.metrics->PrefillSkipped("short_prompt");
      return nullptr;
    }
    std::vector<std::string> failed;
    for (int attempt = 0; attempt < 2; ++attempt) {
      std::optional<InstanceRef> p = ctx_.registry->Pick(InstanceRole::kPrefill, failed);
      if (!p) break;
      Json b = InstanceBody(prompt_, 1, 1, 0, Json{{"do_remote_decode", true}});
      b["stream"] = false;
      b["return_token_ids"] = false;
      const int64_t tokens = static_cast<int64_t>(prompt_.size());
      ctx_.registry->AddOutstanding(p->address, tokens);
      HttpCallOptions o;
      o.idle_timeout = std::chrono::milliseconds(120000);
      HttpCallResult r;
      const auto t0 = std::chrono::steady_clock::now();
      Status s = HttpCall(p->host, p->port, "POST", "/v1/completions", b.dump(), o, &r);
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ctx_.registry->AddOutstanding(p->address, -tokens);
      const Json j = s.ok() && r.status == 200 ? Json::parse(r.body, nullptr, false) : Json();
      const bool ok = j.is_object() && j.contains("kv_transfer_params") && j["kv_transfer_params"].is_object();
      ctx_.metrics->Decision(p->address, "prefill", ok);
      if (ok) {
        ctx_.metrics->ObservePrefill(took);
        return j["kv_transfer_params"];
      }
      spdlog::warn("router: {}: prefill {} failed ({}); {}", id_, p->address,
                   s.ok() ? "HTTP " + std::to_string(r.status) : s.message(),
                   attempt == 0 ? "trying another" : "the decode instance computes the prompt");
      if (!s.ok() || r.status >= 500) ctx_.registry->MarkFailed(p->address);
      failed.push_back(p->address);
    }
    ctx_.metrics->PrefillSkipped(failed.empty() ? "no_prefill" : "prefill_failed");
    return nullptr;
  }

  // Streams one decode call; `index_map[j]` is the client's index of its choice j.
  LegOutcome DecodeLeg(const InstanceRef& inst, const Json& b, const std::vector<int>& index_map) {
    const int64_t estimate = static_cast<int64_t>(b["prompt"].size()) +
                             (b["max_tokens"].is_number_integer() ? b["max_tokens"].get<int64_t>() : 256);
    ctx_.registry->AddOutstanding(inst.address, estimate);
    std::string pending;
    bool done_seen = false, upstream_error = false;
    HttpCallResult r;
    HttpCallOptions o;
    o.idle_timeout = std::chrono::milliseconds(120000);
    int status = 0;
    std::string error_body;
    Status s = HttpCall(inst.host, inst.port, "POST", "/v1/completions", b.dump(), o, &r, [&](std::string_view d) {
      if (ex_->closed()) return false;
      if (r.status != 200) {
        error_body.append(d);
        return true;
      }
      pending.append(d);
      size_t end;
      while ((end = pending.find("\n\n")) != std::string::npos) {
        std::string event = pending.substr(0, end);
        pending.erase(0, end + 2);
        if (event.rfind("data: ", 0) != 0) continue;
        const std::string data = event.substr(6);
        if (data == "[DONE]") {
          done_seen = true;
          continue;
        }
        const Json j = Json::parse(data, nullptr, false);
        if (!j.is_object() || j.contains("error")) {
          upstream_error = true;
          spdlog::warn("router: {}: decode {} sent an error mid-stream: {}", id_, inst.address, data.substr(0, 300));
          return false;
        }
        if (j.contains("model") && j["model"].is_string()) model_ = j["model"].get<std::string>();
        if (!j.contains("choices")) continue;
        for (const Json& ch : j["choices"]) {
          const int local = ch.value("index", 0);
          if (local < 0 || static_cast<size_t>(local) >= index_map.size()) continue;
          OnDelta(index_map[static_cast<size_t>(local)], ch);
        }
      }
      return true;
    });
    status = r.status;
    ctx_.registry->AddOutstanding(inst.address, -estimate);
    if (ex_->closed()) return LegOutcome::kClientAnswered;
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
      spdlog::warn("router: {}: decode {} failed mid-request ({})", id_, inst.address,
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
    ex_->WriteChunk(openai::SseData(nlohmann::json::parse(chunk.dump())));
  }

  Json Header(const char* object) const {
    return {{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}};
  }

  Json Usage() const {
    int64_t completion = 0;
    for (const ChoiceState& c : choices_) completion += static_cast<int64_t>(c.ids.size());
    const int64_t prompt = static_cast<int64_t>(prompt_.size());
    return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
  }

  void StartStream() {
    if (stream_started_) return;
    stream_started_ = true;
    HttpResponse head{HttpStatus::ok, 11};
    head.set(http::field::content_type, "text/event-stream; charset=utf-8");
    ex_->StartStream(std::move(head));
  }

  void Finish() {
    if (stream_) {
      StartStream();
      std::string tail;
      if (include_usage_) {
        Json u = Header(chat_ ? "chat.completion.chunk" : "text_completion");
        u["choices"] = Json::array();
        u["usage"] = Usage();
        tail += openai::SseData(nlohmann::json::parse(u.dump()));
      }
      tail += openai::SseDone();
      ex_->WriteChunk(std::move(tail));
      ex_->EndStream();
      return;
    }
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
  const std::chrono::steady_clock::time_point arrival_ = std::chrono::steady_clock::now();
  int n_ = 1;
  std::optional<int64_t> max_tokens_;
  int64_t min_tokens_ = 0;
  std::vector<int32_t> prompt_;
  std::vector<ChoiceState> choices_;
};

}  // namespace

void RunProxyJob(const ProxyContext& ctx, const std::shared_ptr<HttpExchange>& ex, bool chat) {
  Proxy(ctx, ex, chat).Run();
}

}  // namespace tessera

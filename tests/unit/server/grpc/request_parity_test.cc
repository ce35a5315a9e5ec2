// gRPC builds the request model directly from the proto (convert.h); these
// cases pin that it refuses exactly what the HTTP parser refuses for the
// equivalent body, with the same message and param, and accepts the rest
// into the same parsed request.
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/grpc/convert.h"

namespace tessera::grpc_api {
namespace {

using nlohmann::json;

openai::RequestLimits Limits() {
  openai::RequestLimits l;
  l.model.vocab_size = 1000;
  l.model.max_model_len = 4096;
  return l;
}

struct Outcome {
  std::optional<ApiError> error;
  SamplingParams params;
  std::string cache_salt;
  bool skip_special_tokens = true;
};

// Both front ends on one request: the proto, and the body GenerateRequestToJson says it means.
void ExpectSame(const v1::GenerateRequest& r) {
  SCOPED_TRACE(r.ShortDebugString().substr(0, 300));
  ASSERT_TRUE(CheckGrpcOnly(r).ok());
  bool chat = false;
  StatusOr<std::string> body = GenerateRequestToJson(r, &chat);
  ASSERT_TRUE(body.ok()) << body.status().ToString();
  Outcome http, grpc;
  if (chat) {
    openai::ChatRequest h, g;
    http.error = openai::ParseChatRequest(*body, Limits(), &h);
    grpc.error = ToChatRequest(r, Limits(), &g);
    if (!http.error && !grpc.error) {
      EXPECT_EQ(h.messages, g.messages);
      EXPECT_EQ(h.add_generation_prompt, g.add_generation_prompt);
      EXPECT_EQ(h.logprobs, g.logprobs);
      EXPECT_EQ(h.top_logprobs, g.top_logprobs);
      EXPECT_EQ(h.structured.kind, g.structured.kind);
      EXPECT_EQ(h.structured.param, g.structured.param);
    }
    http.params = h.params, http.cache_salt = h.cache_salt, http.skip_special_tokens = h.skip_special_tokens;
    grpc.params = g.params, grpc.cache_salt = g.cache_salt, grpc.skip_special_tokens = g.skip_special_tokens;
  } else {
    openai::CompletionRequest h, g;
    http.error = openai::ParseCompletionRequest(*body, Limits(), &h);
    grpc.error = ToCompletionRequest(r, Limits(), &g);
    if (!http.error && !grpc.error) {
      ASSERT_EQ(h.prompts.size(), 1u);
      ASSERT_EQ(g.prompts.size(), 1u);
      EXPECT_EQ(h.prompts[0].text, g.prompts[0].text);
      EXPECT_EQ(h.prompts[0].token_ids, g.prompts[0].token_ids);
      EXPECT_EQ(h.add_special_tokens, g.add_special_tokens);
      EXPECT_EQ(h.logprobs, g.logprobs);
      EXPECT_EQ(h.structured.kind, g.structured.kind);
      EXPECT_EQ(h.structured.schema, g.structured.schema);
      EXPECT_EQ(h.kv_transfer.do_remote_decode, g.kv_transfer.do_remote_decode);
      EXPECT_EQ(h.kv_transfer.remote.has_value(), g.kv_transfer.remote.has_value());
    }
    http.params = h.params, http.cache_salt = h.cache_salt, http.skip_special_tokens = h.skip_special_tokens;
    grpc.params = g.params, grpc.cache_salt = g.cache_salt, grpc.skip_special_tokens = g.skip_special_tokens;
  }
  ASSERT_EQ(http.error.has_value(), grpc.error.has_value())
      << (http.error ? "HTTP: " + http.error->message : "gRPC: " + grpc.error->message);
  if (http.error) {
    EXPECT_EQ(grpc.error->message, http.error->message);
    EXPECT_EQ(grpc.error->param, http.error->param);
    EXPECT_EQ(grpc.error->code, http.error->code);
    EXPECT_EQ(grpc.error->status, http.error->status);
    return;
  }
  const SamplingParams& a = http.params;
  const SamplingParams& b = grpc.params;
  EXPECT_EQ(a.max_tokens, b.max_tokens);
  EXPECT_EQ(a.min_tokens, b.min_tokens);
  EXPECT_EQ(a.temperature, b.temperature);
  EXPECT_EQ(a.top_p, b.top_p);
  EXPECT_EQ(a.top_k, b.top_k);
  EXPECT_EQ(a.min_p, b.min_p);
  EXPECT_EQ(a.presence_penalty, b.presence_penalty);
  EXPECT_EQ(a.frequency_penalty, b.frequency_penalty);
  EXPECT_EQ(a.repetition_penalty, b.repetition_penalty);
  EXPECT_EQ(a.logit_bias, b.logit_bias);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.stop, b.stop);
  EXPECT_EQ(a.stop_token_ids, b.stop_token_ids);
  EXPECT_EQ(a.ignore_eos, b.ignore_eos);
  EXPECT_EQ(a.n, b.n);
  EXPECT_EQ(a.logprobs, b.logprobs);
  EXPECT_EQ(a.top_logprobs, b.top_logprobs);
  EXPECT_EQ(a.prompt_logprobs, b.prompt_logprobs);
  EXPECT_EQ(http.cache_salt, grpc.cache_salt);
  EXPECT_EQ(http.skip_special_tokens, grpc.skip_special_tokens);
}

v1::GenerateRequest Text(const std::string& text = "Hello") {
  v1::GenerateRequest r;
  r.mutable_text()->set_text(text);
  return r;
}

v1::GenerateRequest Chat(const std::string& role = "user", const std::string& content = "hi") {
  v1::GenerateRequest r;
  v1::ChatMessage* m = r.mutable_chat()->add_messages();
  m->set_role(role);
  m->set_content(content);
  return r;
}

TEST(RequestParityTest, AcceptedRequestsParseAlike) {
  for (v1::GenerateRequest r : {Text(), Chat()}) {
    ExpectSame(r);
    v1::SamplingParams* p = r.mutable_params();
    p->set_max_tokens(5);
    p->set_min_tokens(2);
    p->set_temperature(0.1f);
    p->set_top_p(0.3f);
    p->set_top_k(0);
    p->set_min_p(0.05f);
    p->set_presence_penalty(-1.5f);
    p->set_frequency_penalty(0.7f);
    p->set_repetition_penalty(1.1f);
    p->set_seed(std::numeric_limits<uint64_t>::max());
    p->add_stop("x");
    p->add_stop("yz");
    p->add_stop_token_ids(3);
    p->set_ignore_eos(true);
    p->set_n(2);
    p->set_top_logprobs(4);
    (*p->mutable_logit_bias())[7] = -1.5f;
    (*p->mutable_logit_bias())[70] = 100.0f;
    p->set_skip_special_tokens(false);
    p->set_include_stop_str_in_output(true);
    r.set_cache_salt("tenant");
    ExpectSame(r);
    p->set_logprobs(true);
    p->set_response_format_type("json_schema");
    p->set_json_schema(R"({"type": "object"})");
    ExpectSame(r);
  }
  v1::GenerateRequest ids;
  for (int id : {1, 2, 999}) ids.mutable_token_ids()->add_ids(id);
  ids.set_kv_transfer_params(R"({"do_remote_decode": true})");
  ExpectSame(ids);
  ids.set_kv_transfer_params(R"({"do_remote_prefill": true, "remote_host": "h", "remote_port": 5,
                                 "remote_request_id": "r", "remote_block_ids": [1, 2]})");
  ExpectSame(ids);
  v1::GenerateRequest t = Text();
  t.mutable_text()->set_add_special_tokens(false);
  t.mutable_params()->set_guided_regex("a+");
  ExpectSame(t);
}

TEST(RequestParityTest, RefusedRequestsGetTheSameError) {
  std::vector<v1::GenerateRequest> cases;
  auto with = [&](v1::GenerateRequest r, auto set) {
    set(r.mutable_params());
    cases.push_back(r);
  };
  for (const v1::GenerateRequest& base : {Text(), Chat()}) {
    with(base, [](v1::SamplingParams* p) { p->set_temperature(2.5f); });
    with(base, [](v1::SamplingParams* p) { p->set_temperature(3.0f); });  // shown as 3.0, as JSON shows it
    with(base, [](v1::SamplingParams* p) { p->set_top_p(0.0f); });
    with(base, [](v1::SamplingParams* p) { p->set_top_p(1e30f); });
    with(base, [](v1::SamplingParams* p) { p->set_min_p(-0.1f); });
    with(base, [](v1::SamplingParams* p) { p->set_presence_penalty(-3.0f); });
    with(base, [](v1::SamplingParams* p) { p->set_frequency_penalty(2.01f); });
    with(base, [](v1::SamplingParams* p) { p->set_repetition_penalty(0.0f); });
    with(base, [](v1::SamplingParams* p) { p->set_top_k(-2); });
    with(base, [](v1::SamplingParams* p) { p->set_min_tokens(-1); });
    with(base, [](v1::SamplingParams* p) { p->set_n(0); });
    with(base, [](v1::SamplingParams* p) { p->set_n(1000); });
    with(base, [](v1::SamplingParams* p) { p->set_max_tokens(0); });
    with(base, [](v1::SamplingParams* p) { p->set_max_tokens(-5); });
    with(base, [](v1::SamplingParams* p) { p->set_max_tokens(3), p->set_min_tokens(4); });
    with(base, [](v1::SamplingParams* p) { p->set_top_logprobs(21); });
    with(base, [](v1::SamplingParams* p) { p->set_top_logprobs(-1); });
    with(base, [](v1::SamplingParams* p) { p->set_top_logprobs(2), p->set_temperature(9.0f); });
    with(base, [](v1::SamplingParams* p) {
      for (int i = 0; i < 17; ++i) p->add_stop("s" + std::to_string(i));
    });
    with(base, [](v1::SamplingParams* p) { p->add_stop(std::string(1025, 'x')); });
    with(base, [](v1::SamplingParams* p) { p->add_stop(""); });
    with(base, [](v1::SamplingParams* p) { p->add_stop_token_ids(-1); });
    with(base, [](v1::SamplingParams* p) { p->add_stop_token_ids(1000); });
    with(base, [](v1::SamplingParams* p) {
      for (int i = 0; i < 1025; ++i) p->add_stop_token_ids(1);
    });
    with(base, [](v1::SamplingParams* p) { (*p->mutable_logit_bias())[-1] = 1.0f; });
    with(base, [](v1::SamplingParams* p) { (*p->mutable_logit_bias())[1000] = 1.0f; });
    with(base, [](v1::SamplingParams* p) { (*p->mutable_logit_bias())[5] = 101.0f; });
    with(base, [](v1::SamplingParams* p) {  // two faults: the first key in text order is refused
      (*p->mutable_logit_bias())[20] = 500.0f;
      (*p->mutable_logit_bias())[100] = -500.0f;
    });
    with(base, [](v1::SamplingParams* p) {
      for (int32_t id = 0; id < 5000; ++id) (*p->mutable_logit_bias())[id] = 1.0f;
    });
    with(base, [](v1::SamplingParams* p) { p->set_response_format_type("xml"); });
    with(base, [](v1::SamplingParams* p) { p->set_response_format_type("json_schema"); });
    with(base, [](v1::SamplingParams* p) { p->set_response_format_type("json_schema"), p->set_json_schema("{"); });
    with(base, [](v1::SamplingParams* p) { p->set_response_format_type("json_schema"), p->set_json_schema("5"); });
    with(base, [](v1::SamplingParams* p) { p->set_response_format_type("json_object"), p->set_guided_regex("a"); });
    with(base, [](v1::SamplingParams* p) { p->set_guided_regex(""); });
    with(base, [](v1::SamplingParams* p) { p->set_guided_grammar(""); });
    with(base, [](v1::SamplingParams* p) { p->add_guided_choice("a"), p->add_guided_choice(""); });
    with(base, [](v1::SamplingParams* p) { p->set_guided_json("[1]"), p->set_guided_regex("a"); });
    with(base, [](v1::SamplingParams* p) { p->set_temperature(5.0f), p->add_stop_token_ids(-1); });  // first wins
    v1::GenerateRequest salted = base;
    salted.set_cache_salt("");
    cases.push_back(salted);
    salted.set_cache_salt(std::string(1025, 's'));
    cases.push_back(salted);
    v1::GenerateRequest kv = base;
    kv.set_kv_transfer_params(R"({"do_remote_prefill": true})");
    cases.push_back(kv);
    kv.set_kv_transfer_params(R"({"do_remote_decode": 1})");
    cases.push_back(kv);
  }
  cases.push_back(Text(""));
  v1::GenerateRequest ids;
  ids.mutable_token_ids();
  cases.push_back(ids);  // no ids
  ids.mutable_token_ids()->add_ids(5);
  ids.mutable_token_ids()->add_ids(1000);
  cases.push_back(ids);
  ids.mutable_token_ids()->set_ids(1, -7);
  cases.push_back(ids);
  cases.push_back(Chat("wizard"));
  cases.push_back(Chat(""));
  v1::GenerateRequest empty_chat;
  empty_chat.mutable_chat();
  cases.push_back(empty_chat);
  v1::GenerateRequest logprobs = Text();
  logprobs.mutable_params()->set_logprobs(true);
  logprobs.mutable_params()->set_top_logprobs(25);
  cases.push_back(logprobs);
  for (const v1::GenerateRequest& r : cases) ExpectSame(r);
}

TEST(RequestParityTest, TokenizeRequestsParseAlike) {
  v1::TokenizeRequest t;
  t.mutable_text()->set_text("");
  t.mutable_text()->set_add_special_tokens(false);
  openai::TokenizeRequest out;
  ASSERT_FALSE(ToTokenizeRequest(t, Limits(), &out));
  EXPECT_FALSE(out.is_chat);
  EXPECT_FALSE(out.add_special_tokens);
  v1::TokenizeRequest c;
  c.mutable_chat()->add_messages()->set_role("user");
  c.mutable_chat()->set_add_generation_prompt(false);
  ASSERT_FALSE(ToTokenizeRequest(c, Limits(), &out));
  openai::TokenizeRequest http;
  ASSERT_FALSE(openai::ParseTokenizeRequest(
      R"({"messages": [{"role": "user", "content": ""}], "add_generation_prompt": false})", Limits(), &http));
  EXPECT_TRUE(out.is_chat);
  EXPECT_EQ(out.messages, http.messages);
  EXPECT_EQ(out.tools, http.tools);
  EXPECT_EQ(out.template_kwargs, http.template_kwargs);
  EXPECT_EQ(out.add_generation_prompt, http.add_generation_prompt);
  EXPECT_EQ(out.add_special_tokens, http.add_special_tokens);
  c.mutable_chat()->mutable_messages(0)->set_role("x");
  std::optional<ApiError> e = ToTokenizeRequest(c, Limits(), &out);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "messages[0].role");
}

}  // namespace
}  // namespace tessera::grpc_api

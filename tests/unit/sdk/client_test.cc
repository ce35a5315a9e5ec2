// gRPC API end to end in one process: a ServingEngine on a tiny synthetic
// model, GrpcServer on 127.0.0.1 port 0, and the C++ SDK client. Unary greedy
// equals streamed greedy, n > 1, stop strings, the error codes of bad input,
// cancel and deadlines free the request, API keys, health while loading and
// draining.
#include "tessera/client.h"

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "server/grpc/grpc_server.h"
#include "server/serving/serving_engine.h"
#include "tests/unit/engine/test_model_util.h"

namespace tessera {
namespace {

using sdk::Code;
using testing::MakeTinyModel;
using testing::TempDir;

class GrpcClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    MakeTinyModel(dir_->path(), "qwen3", DType::kF32);
    ServingOptions o;
    o.loop.model_dir = dir_->path();
    o.loop.num_threads = 2;
    o.loop.scheduler.kv.num_blocks = 256;
    o.max_in_flight = 16;
    auto e = ServingEngine::Create(o);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = e->release();
    GrpcServerOptions so;
    so.port = 0;
    auto s = GrpcServer::Start(so, [] { return engine_; });
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = s->release();
  }
  static void TearDownTestSuite() {
    if (server_ != nullptr) server_->Shutdown(std::chrono::milliseconds(1000));
    delete server_;
    delete engine_;
    delete dir_;
  }

  static std::unique_ptr<sdk::Client> Connect(int port, sdk::ClientOptions options = {}) {
    auto c = sdk::Client::Connect("127.0.0.1:" + std::to_string(port), options);
    EXPECT_TRUE(c.ok()) << c.status.ToString();
    return std::move(c.value);
  }
  std::unique_ptr<sdk::Client> Client() { return Connect(server_->port()); }

  static sdk::GenerateParams Greedy(const std::string& prompt, int32_t max_tokens) {
    sdk::GenerateParams p;
    p.prompt = prompt;
    p.sampling.temperature = 0.0f;
    p.sampling.max_tokens = max_tokens;
    p.sampling.ignore_eos = true;
    return p;
  }

  // Waits (bounded) until the engine has no request in flight.
  static bool WaitIdle() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (engine_->num_in_flight() != 0) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }

  static sdk::HealthStatus WaitHealth(sdk::Client& c, sdk::HealthStatus want, const std::string& service = "") {
    sdk::HealthStatus got = sdk::HealthStatus::kUnknown;
    for (int i = 0; i < 100; ++i) {
      auto h = c.Health(service);
      EXPECT_TRUE(h.ok()) << h.status.ToString();
      got = h.value;
      if (got == want) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return got;
  }

  static TempDir* dir_;
  static ServingEngine* engine_;
  static GrpcServer* server_;
};
TempDir* GrpcClientTest::dir_ = nullptr;
ServingEngine* GrpcClientTest::engine_ = nullptr;
GrpcServer* GrpcClientTest::server_ = nullptr;

GrpcServerOptions AnyPort() {
  GrpcServerOptions o;
  o.port = 0;
  return o;
}

// Collects a stream into per-choice text/tokens.
struct Streamed {
  std::map<int32_t, sdk::Choice> choices;
  sdk::Usage usage;
  int chunks = 0;
  bool saw_finished = false;
  sdk::StreamCallback Callback() {
    return [this](const sdk::StreamChunk& c) {
      ++chunks;
      for (const sdk::Choice& d : c.choices) {
        sdk::Choice& acc = choices[d.index];
        acc.index = d.index;
        acc.text += d.text;
        acc.token_ids.insert(acc.token_ids.end(), d.token_ids.begin(), d.token_ids.end());
        if (!d.finish_reason.empty()) acc.finish_reason = d.finish_reason;
        if (d.stop_string) acc.stop_string = d.stop_string;
      }
      usage = c.usage;
      saw_finished = saw_finished || c.finished;
      return true;
    };
  }
};

TEST_F(GrpcClientTest, UnaryGreedyEqualsStreamedGreedy) {
  auto c = Client();
  auto unary = c->Generate(Greedy("Hello there, how are", 20));
  ASSERT_TRUE(unary.ok()) << unary.status.ToString();
  ASSERT_EQ(unary.value.choices.size(), 1u);
  const sdk::Choice& u = unary.value.choices[0];
  EXPECT_EQ(u.token_ids.size(), 20u);
  EXPECT_EQ(u.finish_reason, "length");
  EXPECT_EQ(unary.value.usage.completion_tokens, 20);
  EXPECT_GT(unary.value.usage.prompt_tokens, 0);
  EXPECT_FALSE(unary.value.request_id.empty());

  Streamed s;
  sdk::Status st = c->GenerateStream(Greedy("Hello there, how are", 20), s.Callback());
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(s.choices.size(), 1u);
  EXPECT_EQ(s.choices[0].token_ids, u.token_ids);
  EXPECT_EQ(s.choices[0].text, u.text);
  EXPECT_EQ(s.choices[0].finish_reason, "length");
  EXPECT_TRUE(s.saw_finished);
  EXPECT_EQ(s.usage.completion_tokens, 20);
  auto full = engine_->tokenizer().Decode(u.token_ids, {.skip_special_tokens = true});
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(u.text, *full);
  EXPECT_TRUE(WaitIdle());
}

TEST_F(GrpcClientTest, TwoChoicesAndTokenIdPrompt) {
  auto c = Client();
  sdk::GenerateParams p;
  p.prompt_token_ids = engine_->tokenizer().Encode("The weather today");
  p.sampling.n = 2;
  p.sampling.temperature = 1.0f;
  p.sampling.seed = 7;
  p.sampling.max_tokens = 8;
  p.sampling.ignore_eos = true;
  p.sampling.logprobs = true;
  p.sampling.top_logprobs = 2;
  auto r = c->Generate(p);
  ASSERT_TRUE(r.ok()) << r.status.ToString();
  ASSERT_EQ(r.value.choices.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const sdk::Choice& ch = r.value.choices[i];
    EXPECT_EQ(ch.index, i);
    EXPECT_EQ(ch.token_ids.size(), 8u);
    ASSERT_EQ(ch.logprobs.size(), 8u);
    EXPECT_EQ(ch.logprobs[0].token_id, ch.token_ids[0]);
    EXPECT_EQ(ch.logprobs[0].top.size(), 2u);
    EXPECT_EQ(ch.finish_reason, "length");
  }
  EXPECT_EQ(r.value.usage.completion_tokens, 16);
  EXPECT_EQ(r.value.usage.prompt_tokens, static_cast<int64_t>(p.prompt_token_ids.size()));
  Streamed s;
  ASSERT_TRUE(c->GenerateStream(p, s.Callback()).ok());
  ASSERT_EQ(s.choices.size(), 2u);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(s.choices[i].token_ids, r.value.choices[i].token_ids);  // seeded
}

// A short stop string lying on UTF-8 character boundaries in `text`.
std::string PickStop(const std::string& text) {
  auto boundary = [&](size_t i) { return i >= text.size() || (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80; };
  for (size_t at = text.size() / 2; at + 3 <= text.size(); ++at) {
    size_t end = at + 3;
    while (end < text.size() && !boundary(end)) ++end;
    if (boundary(at)) return text.substr(at, end - at);
  }
  return "";
}

TEST_F(GrpcClientTest, StopStringEndsTheChoice) {
  auto c = Client();
  auto base = c->Generate(Greedy("Once upon a time", 32));
  ASSERT_TRUE(base.ok()) << base.status.ToString();
  const std::string& text = base.value.choices[0].text;
  const std::string stop = PickStop(text);
  ASSERT_FALSE(stop.empty()) << text;
  sdk::GenerateParams p = Greedy("Once upon a time", 32);
  p.sampling.stop = {stop};
  auto cut = c->Generate(p);
  ASSERT_TRUE(cut.ok()) << cut.status.ToString();
  EXPECT_EQ(cut.value.choices[0].finish_reason, "stop");
  ASSERT_TRUE(cut.value.choices[0].stop_string.has_value());
  EXPECT_EQ(*cut.value.choices[0].stop_string, stop);
  EXPECT_EQ(cut.value.choices[0].text, text.substr(0, text.find(stop)));
  Streamed s;
  ASSERT_TRUE(c->GenerateStream(p, s.Callback()).ok());
  EXPECT_EQ(s.choices[0].text, cut.value.choices[0].text);
  EXPECT_EQ(s.choices[0].finish_reason, "stop");
}

TEST_F(GrpcClientTest, BadParamsAreInvalidArgumentNamingTheField) {
  auto c = Client();
  struct Case {
    const char* field;
    std::function<void(sdk::GenerateParams&)> edit;
  };
  const int64_t vocab = engine_->limits().vocab_size;
  const std::vector<Case> cases = {
      {"temperature", [](sdk::GenerateParams& p) { p.sampling.temperature = 5.0f; }},
      {"top_p", [](sdk::GenerateParams& p) { p.sampling.top_p = 0.0f; }},
      {"max_tokens", [](sdk::GenerateParams& p) { p.sampling.max_tokens = 0; }},
      {"n", [](sdk::GenerateParams& p) { p.sampling.n = 1000; }},
      {"top_logprobs", [](sdk::GenerateParams& p) { p.sampling.logprobs = true; p.sampling.top_logprobs = 1000; }},
      {"stop", [](sdk::GenerateParams& p) { p.sampling.stop.assign(100, "x"); }},
      {"logit_bias", [vocab](sdk::GenerateParams& p) { p.sampling.logit_bias[static_cast<int32_t>(vocab)] = 1; }},
      {"stop_token_ids", [](sdk::GenerateParams& p) { p.sampling.stop_token_ids = {-1}; }},
      {"token_ids", [vocab](sdk::GenerateParams& p) { p.prompt_token_ids = {1, static_cast<int32_t>(vocab)}; }},
      {"token_ids", [](sdk::GenerateParams& p) { p.prompt_token_ids = {-5}; }},
      {"prompt", [](sdk::GenerateParams& p) { p.prompt = ""; }},
  };
  for (const Case& k : cases) {
    sdk::GenerateParams p = Greedy("Hi", 4);
    k.edit(p);
    auto r = c->Generate(p);
    EXPECT_EQ(r.status.code, Code::kInvalidArgument) << k.field << ": " << r.status.ToString();
    EXPECT_NE(r.status.message.find(k.field), std::string::npos) << r.status.message;
    sdk::Status s = c->GenerateStream(p, [](const sdk::StreamChunk&) { return true; });
    EXPECT_EQ(s.code, Code::kInvalidArgument) << k.field;
  }
  EXPECT_EQ(engine_->num_in_flight(), 0);
}

TEST_F(GrpcClientTest, ContextTooLongIsOutOfRange) {
  auto c = Client();
  const int64_t max_len = engine_->limits().max_model_len;
  sdk::GenerateParams p = Greedy("Hi", static_cast<int32_t>(max_len));
  auto r = c->Generate(p);
  EXPECT_EQ(r.status.code, Code::kOutOfRange) << r.status.ToString();
  sdk::GenerateParams q;
  q.prompt_token_ids.assign(static_cast<size_t>(max_len) + 1, 1);
  EXPECT_EQ(c->Generate(q).status.code, Code::kOutOfRange);
}

TEST_F(GrpcClientTest, CancelMidStreamFreesTheRequest) {
  auto c = Client();
  sdk::GenerateParams p = Greedy("Tell me a long story", 400);
  int chunks = 0;
  sdk::Status s = c->GenerateStream(p, [&](const sdk::StreamChunk&) { return ++chunks < 2; });
  EXPECT_EQ(s.code, Code::kCancelled) << s.ToString();
  EXPECT_TRUE(WaitIdle()) << engine_->num_in_flight();

  // From another thread through a CancelHandle.
  sdk::CancelHandle handle;
  std::atomic<int> seen{0};
  std::thread canceller([&] {
    while (seen.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    handle.Cancel();
  });
  s = c->GenerateStream(p, [&](const sdk::StreamChunk&) { seen.fetch_add(1); return true; }, &handle);
  canceller.join();
  EXPECT_EQ(s.code, Code::kCancelled) << s.ToString();
  EXPECT_TRUE(WaitIdle()) << engine_->num_in_flight();
}

TEST_F(GrpcClientTest, DeadlineExceededFreesTheRequest) {
  auto c = Client();
  for (int ms : {1, 50}) {
    sdk::GenerateParams p = Greedy("Tell me a long story", 400);
    p.deadline = std::chrono::milliseconds(ms);
    auto r = c->Generate(p);
    EXPECT_EQ(r.status.code, Code::kDeadlineExceeded) << r.status.ToString();
    sdk::Status s = c->GenerateStream(p, [](const sdk::StreamChunk&) { return true; });
    EXPECT_EQ(s.code, Code::kDeadlineExceeded) << s.ToString();
    EXPECT_TRUE(WaitIdle()) << engine_->num_in_flight();
  }
}

TEST_F(GrpcClientTest, TokenizeDetokenizeModels) {
  auto c = Client();
  auto t = c->Tokenize("Hello world");
  ASSERT_TRUE(t.ok()) << t.status.ToString();
  EXPECT_EQ(t.value.token_ids, engine_->tokenizer().Encode("Hello world"));
  EXPECT_EQ(t.value.tokens.size(), t.value.token_ids.size());
  EXPECT_EQ(t.value.max_model_len, engine_->limits().max_model_len);
  auto d = c->Detokenize(t.value.token_ids, /*skip_special_tokens=*/true);
  ASSERT_TRUE(d.ok()) << d.status.ToString();
  EXPECT_EQ(d.value, "Hello world");
  EXPECT_EQ(c->Detokenize({-1}).status.code, Code::kInvalidArgument);
  auto m = c->ListModels();
  ASSERT_TRUE(m.ok()) << m.status.ToString();
  ASSERT_EQ(m.value.size(), 1u);
  EXPECT_EQ(m.value[0].id, engine_->served_model_name());
  EXPECT_EQ(m.value[0].vocab_size, engine_->limits().vocab_size);
  if (engine_->has_chat_template()) {
    auto chat = c->TokenizeChat({{"user", "Hi"}});
    ASSERT_TRUE(chat.ok()) << chat.status.ToString();
    EXPECT_FALSE(chat.value.token_ids.empty());
    sdk::GenerateParams p = Greedy("", 4);
    p.messages = {{"user", "Hi"}};
    auto r = c->Generate(p);
    ASSERT_TRUE(r.ok()) << r.status.ToString();
    EXPECT_EQ(r.value.usage.prompt_tokens, static_cast<int64_t>(chat.value.token_ids.size()));
  }
}

TEST_F(GrpcClientTest, ApiKeys) {
  GrpcServerOptions so;
  so.port = 0;
  so.api_keys = {"k1", "secret-key"};
  auto s = GrpcServer::Start(so, [] { return engine_; });
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(Connect((*s)->port())->ListModels().status.code, Code::kUnauthenticated);
  EXPECT_EQ(Connect((*s)->port(), {.api_key = "secret-kez"})->ListModels().status.code, Code::kUnauthenticated);
  EXPECT_EQ(Connect((*s)->port(), {.api_key = "secret"})->Generate(Greedy("Hi", 2)).status.code,
            Code::kUnauthenticated);
  auto ok = Connect((*s)->port(), {.api_key = "secret-key"});
  EXPECT_TRUE(ok->ListModels().ok());
  EXPECT_TRUE(ok->Generate(Greedy("Hi", 2)).ok());
  // Health checks need no key (load balancers and probes).
  EXPECT_TRUE(Connect((*s)->port())->Health().ok());
  (*s)->Shutdown(std::chrono::milliseconds(500));
}

TEST_F(GrpcClientTest, HealthWhileLoadingServingAndDraining) {
  std::atomic<ServingEngine*> loaded{nullptr};
  auto s = GrpcServer::Start(AnyPort(), [&loaded] { return loaded.load(); });
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto c = Connect((*s)->port());
  EXPECT_EQ(WaitHealth(*c, sdk::HealthStatus::kNotServing), sdk::HealthStatus::kNotServing);
  auto r = c->Generate(Greedy("Hi", 2));
  EXPECT_EQ(r.status.code, Code::kUnavailable);
  EXPECT_NE(r.status.message.find("loading"), std::string::npos) << r.status.message;
  EXPECT_EQ(c->Tokenize("Hi").status.code, Code::kUnavailable);

  loaded.store(engine_);
  EXPECT_EQ(WaitHealth(*c, sdk::HealthStatus::kServing), sdk::HealthStatus::kServing);
  EXPECT_EQ(WaitHealth(*c, sdk::HealthStatus::kServing, "tessera.v1.Tessera"), sdk::HealthStatus::kServing);
  EXPECT_TRUE(c->Generate(Greedy("Hi", 2)).ok());

  (*s)->BeginDrain();
  EXPECT_EQ(WaitHealth(*c, sdk::HealthStatus::kNotServing), sdk::HealthStatus::kNotServing);
  EXPECT_EQ(WaitHealth(*c, sdk::HealthStatus::kNotServing, "tessera.v1.Tessera"), sdk::HealthStatus::kNotServing);
  EXPECT_EQ(c->Generate(Greedy("Hi", 2)).status.code, Code::kUnavailable);
  EXPECT_TRUE(c->Tokenize("Hi").ok());  // only new generations are refused
  (*s)->Shutdown(std::chrono::milliseconds(500));
  EXPECT_TRUE(WaitIdle());
}

TEST_F(GrpcClientTest, ShutdownCancelsRunningStreams) {
  auto s = GrpcServer::Start(AnyPort(), [] { return engine_; });
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto c = Connect((*s)->port());
  std::atomic<int> seen{0};
  sdk::Status st;
  std::thread t([&] {
    st = c->GenerateStream(Greedy("Tell me a long story", 400), [&](const sdk::StreamChunk&) {
      seen.fetch_add(1);
      return true;
    });
  });
  while (seen.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  (*s)->Shutdown(std::chrono::milliseconds(50));
  t.join();
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(WaitIdle()) << engine_->num_in_flight();
}

}  // namespace
}  // namespace tessera

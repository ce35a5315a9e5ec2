// EngineLoop with KV transfer (disaggregation): a decode pulls a
// request's prompt KV on its KvPuller's thread, so its other requests keep
// stepping meanwhile. A prefill loop and a decode loop run in one process and
// talk over UCX on loopback; a gate in the transport's before_read hook holds
// a pull in flight (a frozen link) for as long as a test needs, so nothing
// here depends on timing. Outputs are compared bitwise with a unified loop.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "runtime/engine_loop.h"
#include "tests/unit/engine/test_model_util.h"

namespace tessera {
namespace {

using testing::MakeTinyModel;
using testing::RandomTokens;
using testing::TempDir;
using namespace std::chrono_literals;

// Holds pulls before their reads until opened. Hook runs on the puller's thread.
class Gate {
 public:
  void Hook(const std::string& handle) {
    std::unique_lock lock(mu_);
    entered_.insert(handle);
    cv_.notify_all();
    cv_.wait_for(lock, 60s, [&] { return open_; });  // bound: a broken loop must not hang the suite
  }
  bool WaitEntered(const std::string& handle) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 30s, [&] { return entered_.count(handle) != 0; });
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<std::string> entered_;
  bool open_ = false;
};

struct OpenOnExit {
  Gate* gate;
  ~OpenOnExit() { gate->Open(); }
};

struct Collected {
  std::vector<int32_t> tokens;
  FinishReason last = FinishReason::kNone;
  int64_t num_cached_tokens = 0;
  std::optional<KvExportInfo> kv_export;
  Status status;
};

// Reads a stream to its end (blocking).
Collected Drain(RequestStream& s) {
  Collected c;
  RequestOutput o;
  while (s.Next(&o)) {
    c.tokens.insert(c.tokens.end(), o.token_ids.begin(), o.token_ids.end());
    if (o.finish_reason != FinishReason::kNone) c.last = o.finish_reason;
    c.num_cached_tokens = std::max(c.num_cached_tokens, o.num_cached_tokens);
    if (o.kv_export) c.kv_export = o.kv_export;
    if (!o.status.ok()) c.status = o.status;
  }
  return c;
}

class EngineLoopKvPullTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    MakeTinyModel(dir_->path(), "qwen3", DType::kF32);
  }
  static void TearDownTestSuite() { delete dir_; }

  static EngineLoopOptions Options() {
    EngineLoopOptions o;
    o.model_dir = dir_->path();
    o.num_threads = 1;
    o.scheduler.max_num_seqs = 8;
    o.scheduler.max_num_batched_tokens = 256;
    o.scheduler.kv.num_blocks = 64;
    o.scheduler.kv.block_size = 16;
    return o;
  }
  static EngineLoopOptions WithTransfer(std::shared_ptr<Gate> gate = nullptr,
                                        std::chrono::milliseconds pull_timeout = 60s) {
    EngineLoopOptions o = Options();
    KvTransportOptions t;
    t.ucx_tls = "tcp,self";
    t.pull_timeout = pull_timeout;
    if (gate) t.before_read = [gate](const std::string& handle) { gate->Hook(handle); };
    o.kv_transfer = t;
    return o;
  }
  static std::unique_ptr<EngineLoop> MakeLoop(EngineLoopOptions o) {
    auto loop = EngineLoop::Create(std::move(o));
    EXPECT_TRUE(loop.ok()) << loop.status().ToString();
    return loop.ok() ? std::move(loop).value() : nullptr;
  }
  static Request Greedy(const std::string& id, std::vector<int32_t> prompt, int32_t max_tokens) {
    Request r;
    r.id = id;
    r.prompt_token_ids = std::move(prompt);
    r.params.temperature = 0.0f;
    r.params.max_tokens = max_tokens;
    r.params.ignore_eos = true;
    return r;
  }
  // Offline on `loop`: the request's tokens (and its export, if any).
  static Collected RunOffline(EngineLoop& loop, const Request& r) {
    auto s = loop.Submit(r);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) return {};
    EXPECT_TRUE(loop.RunUntilDone().ok());
    return Drain(**s);
  }
  // Prefills `prompt` on `prefill` and returns the decode's request for it.
  static Request Handoff(EngineLoop& prefill, const std::string& id, const std::vector<int32_t>& prompt,
                         int32_t max_tokens) {
    Request p = Greedy(id, prompt, 1);
    p.export_kv = true;
    const Collected c = RunOffline(prefill, p);
    EXPECT_TRUE(c.kv_export.has_value());
    Request d = Greedy(id, prompt, max_tokens);
    if (c.kv_export) {
      d.remote_kv = RemoteKvSource{c.kv_export->host, c.kv_export->port, c.kv_export->handle,
                                   c.kv_export->engine_id, c.kv_export->block_ids, c.kv_export->signature};
    }
    return d;
  }

  static TempDir* dir_;
};

TempDir* EngineLoopKvPullTest::dir_ = nullptr;

// While a pull is held in flight, a request submitted after it runs to its
// end; then the pull completes and the pulled request's tokens equal the
// unified output. With a pull on the loop thread, the held pull would stop
// every step (the running request would not finish while the gate is shut).
TEST_F(EngineLoopKvPullTest, RunningRequestsStepWhileAPullIsInFlight) {
  auto unified = MakeLoop(Options());
  ASSERT_TRUE(unified);
  const int vocab = static_cast<int>(unified->model_config().vocab_size);
  std::mt19937 rng(17);
  const std::vector<int32_t> pulled_prompt = RandomTokens(rng, 70, vocab);  // 4 full blocks pulled
  const std::vector<int32_t> other_prompt = RandomTokens(rng, 20, vocab);
  const Collected ref_pulled = RunOffline(*unified, Greedy("p", pulled_prompt, 8));
  const Collected ref_other = RunOffline(*unified, Greedy("a", other_prompt, 24));
  ASSERT_EQ(ref_pulled.tokens.size(), 8u);

  auto prefill = MakeLoop(WithTransfer());
  ASSERT_TRUE(prefill);
  const Request handed = Handoff(*prefill, "p", pulled_prompt, 8);
  ASSERT_TRUE(handed.remote_kv.has_value());

  auto gate = std::make_shared<Gate>();
  std::mutex events_mu;
  std::vector<KvPullEvent> events;
  EngineLoopOptions o = WithTransfer(gate);
  o.on_kv_pull = [&](const KvPullEvent& e) {
    std::lock_guard lock(events_mu);
    events.push_back(e);
  };
  auto decode = MakeLoop(std::move(o));
  ASSERT_TRUE(decode);
  OpenOnExit open_on_exit{gate.get()};
  ASSERT_TRUE(decode->Start().ok());

  auto pulled_stream = decode->Submit(handed);
  ASSERT_TRUE(pulled_stream.ok());
  ASSERT_TRUE(gate->WaitEntered(handed.remote_kv->handle)) << "the pull never started";
  auto other_stream = decode->Submit(Greedy("a", other_prompt, 24));
  ASSERT_TRUE(other_stream.ok());
  // The other request must end while the pull is still held (bounded wait).
  bool other_done = false;
  for (int i = 0; i < 3000 && !other_done; ++i) {
    other_done = (*other_stream)->finished();
    if (!other_done) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(other_done) << "a running request made no progress while a pull was in flight";
  {
    std::lock_guard lock(events_mu);
    EXPECT_TRUE(events.empty()) << "the pull ended before the gate opened";
  }
  EXPECT_FALSE((*pulled_stream)->finished());
  gate->Open();

  const Collected got_other = Drain(**other_stream);
  const Collected got_pulled = Drain(**pulled_stream);
  EXPECT_EQ(got_other.tokens, ref_other.tokens);
  EXPECT_EQ(got_pulled.tokens, ref_pulled.tokens);
  EXPECT_EQ(got_pulled.last, FinishReason::kLength);
  EXPECT_EQ(got_pulled.num_cached_tokens, 64) << "the prompt's 4 full blocks came from the pull";
  {
    std::lock_guard lock(events_mu);
    ASSERT_EQ(events.size(), 1u);
    EXPECT_TRUE(events[0].ok);
    EXPECT_EQ(events[0].blocks_pulled, 4);
  }
  EXPECT_EQ(decode->metrics().counters.kv_blocks_pulled, 4);
  decode->Stop();
  EXPECT_EQ(prefill->kv_transport()->num_exports(), 0) << "the decode acknowledged the pull";
}

// An abort while the pull is in flight ends the request at once, but its
// blocks stay held (the puller still writes into them) until the pull
// returns; then KV usage is back to idle.
TEST_F(EngineLoopKvPullTest, AbortDuringAPullFreesItsBlocksWhenThePullEnds) {
  auto prefill = MakeLoop(WithTransfer());
  ASSERT_TRUE(prefill);
  const int vocab = static_cast<int>(prefill->model_config().vocab_size);
  std::mt19937 rng(18);
  const Request handed = Handoff(*prefill, "p", RandomTokens(rng, 70, vocab), 8);
  ASSERT_TRUE(handed.remote_kv.has_value());

  auto gate = std::make_shared<Gate>();
  std::atomic<int> pulls{0};
  EngineLoopOptions o = WithTransfer(gate);
  o.on_kv_pull = [&](const KvPullEvent&) { pulls.fetch_add(1); };
  auto decode = MakeLoop(std::move(o));
  ASSERT_TRUE(decode);
  OpenOnExit open_on_exit{gate.get()};
  ASSERT_TRUE(decode->Start().ok());

  auto s = decode->Submit(handed);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(gate->WaitEntered(handed.remote_kv->handle));
  decode->Abort("p");
  const Collected aborted = Drain(**s);
  EXPECT_EQ(aborted.last, FinishReason::kAbort);
  EXPECT_TRUE(aborted.tokens.empty());
  // A later request runs and ends meanwhile; the loop's metrics snapshot of a
  // step after the abort with nothing running or waiting holds only the pull's blocks.
  auto later = decode->Submit(Greedy("q", RandomTokens(rng, 5, vocab), 2));
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(Drain(**later).tokens.size(), 2u);
  SchedulerMetrics m = decode->metrics();
  for (int i = 0; i < 3000 && (m.gauges.num_running != 0 || m.gauges.num_waiting != 0); ++i) {
    std::this_thread::sleep_for(10ms);
    m = decode->metrics();
  }
  EXPECT_EQ(m.gauges.num_running + m.gauges.num_waiting, 0);
  EXPECT_EQ(pulls.load(), 0);
  EXPECT_GT(m.gauges.kv_usage, 0.0) << "the aborted request's blocks were freed mid-pull";

  gate->Open();
  bool idle = false;
  for (int i = 0; i < 3000 && !idle; ++i) {
    idle = pulls.load() == 1 && decode->metrics().gauges.kv_usage == 0.0;
    if (!idle) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(idle) << "kv usage " << decode->metrics().gauges.kv_usage << " after the pull ended";
  decode->Stop();
}

// A port that accepts connections and never answers (a frozen peer).
class FrozenPeer {
 public:
  FrozenPeer() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd_, 16) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return;
    }
    port_ = ntohs(addr.sin_port);
  }
  ~FrozenPeer() {
    if (fd_ >= 0) close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A frozen prefill: the pull fails at its timeout and the prompt is computed
// here (tokens equal the unified output). Stop() with such a pull in flight
// returns (the pull is bounded by its timeout) and ends the request.
TEST_F(EngineLoopKvPullTest, FrozenPeerFallsBackToRecomputeAndStopIsBounded) {
  FrozenPeer peer1, peer2;  // one each: a channel that timed out may fail the next call at once
  ASSERT_NE(peer1.port(), 0);
  ASSERT_NE(peer2.port(), 0);
  auto unified = MakeLoop(Options());
  ASSERT_TRUE(unified);
  const int vocab = static_cast<int>(unified->model_config().vocab_size);
  std::mt19937 rng(19);
  const std::vector<int32_t> prompt = RandomTokens(rng, 40, vocab);
  const std::vector<int32_t> prompt2 = RandomTokens(rng, 40, vocab);  // not in the decode's prefix cache
  const Collected ref = RunOffline(*unified, Greedy("f", prompt, 6));
  const Collected ref2 = RunOffline(*unified, Greedy("g", prompt2, 6));

  std::atomic<int> failed{0};
  EngineLoopOptions o = WithTransfer(nullptr, 500ms);
  o.on_kv_pull = [&](const KvPullEvent& e) {
    if (!e.ok) failed.fetch_add(1);
  };
  auto decode = MakeLoop(std::move(o));
  ASSERT_TRUE(decode);
  ASSERT_TRUE(decode->Start().ok());
  Request r = Greedy("f", prompt, 6);
  r.remote_kv = RemoteKvSource{"127.0.0.1", peer1.port(), "frozen", "e", {0, 1}, ""};
  auto s = decode->Submit(r);
  ASSERT_TRUE(s.ok());
  const Collected got = Drain(**s);
  EXPECT_EQ(got.tokens, ref.tokens);
  EXPECT_EQ(got.num_cached_tokens, 0);
  EXPECT_EQ(failed.load(), 1);

  r.id = "g";
  r.prompt_token_ids = prompt2;
  r.remote_kv->port = peer2.port();
  auto s2 = decode->Submit(r);
  ASSERT_TRUE(s2.ok());
  // Usually still waiting for its pull here (on a slow machine it may have
  // failed and finished already: both end the stream).
  for (int i = 0; i < 200 && decode->metrics().gauges.num_waiting == 0 && !(*s2)->finished(); ++i) {
    std::this_thread::sleep_for(1ms);
  }
  decode->Stop();
  EXPECT_TRUE((*s2)->finished());
  const Collected stopped = Drain(**s2);
  if (stopped.last == FinishReason::kAbort) {
    EXPECT_TRUE(stopped.tokens.empty());
  } else {
    EXPECT_EQ(stopped.tokens, ref2.tokens);
  }
  EXPECT_EQ(decode->metrics().gauges.kv_usage, 0.0);
}

}  // namespace
}  // namespace tessera

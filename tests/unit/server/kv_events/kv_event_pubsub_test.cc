// Publishers and the subscriber over real ZeroMQ TCP sockets on 127.0.0.1:
// three instances feed one index; gaps are filled by replay; removal and
// restart are reflected. Bounded waits (a few seconds at most).
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "server/kv_events/kv_event_publisher.h"
#include "server/kv_events/kv_event_subscriber.h"

namespace tessera::kv_events {
namespace {

std::shared_ptr<KvEventPublisher> StartPublisher(bool replay) {
  KvEventPublisherOptions o;
  o.config.enable_kv_cache_events = true;
  o.config.publisher = "zmq";
  o.config.endpoint = "tcp://127.0.0.1:*";
  if (replay) o.config.replay_endpoint = "tcp://127.0.0.1:*";
  o.config.topic = "kv";
  o.flush_interval_ms = 2;
  auto p = KvEventPublisher::Start(o);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : nullptr;
}

bool WaitFor(const std::function<bool()>& cond) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

int64_t MatchedOf(const KvPrefixIndex& idx, std::span<const BlockHash> chain, const std::string& name) {
  for (const auto& m : idx.Match(chain)) {
    if (m.instance == name) return m.matched_blocks;
  }
  return -1;
}

std::vector<BlockHash> Chain(int32_t first_token, int n_blocks) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < n_blocks * 4; ++i) tokens.push_back(first_token + i);
  std::vector<BlockHash> chain;
  BlockHashScheme().ExtendBlockHashes(tokens, 4, {}, "", &chain);
  return chain;
}

void Store(KvEventPublisher& p, std::span<const BlockHash> chain) {
  std::vector<int32_t> tokens(chain.size() * 4, 1);
  p.OnBlocksStored(std::nullopt, chain, tokens, 4);
}

TEST(KvEventPubSub, ThreeInstancesFeedOneIndex) {
  auto a = StartPublisher(true), b = StartPublisher(true), c = StartPublisher(false);
  ASSERT_TRUE(a && b && c);
  KvPrefixIndex index;
  auto sub = KvEventSubscriber::Start({.topic = "kv", .poll_interval_ms = 5}, &index);
  ASSERT_TRUE(sub.ok());
  (*sub)->AddSource({"a", a->endpoint(), a->replay_endpoint()});
  (*sub)->AddSource({"b", b->endpoint(), b->replay_endpoint()});
  (*sub)->AddSource({"c", c->endpoint(), ""});
  const auto chain = Chain(100, 4);
  // PUB drops messages until a subscription reaches it ("slow joiner"): store
  // on a and b right away (replay fills what the subscriber missed), and on c
  // (no replay) once its subscription is known to be live.
  Store(*a, std::span(chain).first(3));
  Store(*b, std::span(chain).first(1));
  ASSERT_TRUE(WaitFor([&] { return MatchedOf(index, chain, "a") == 3 && MatchedOf(index, chain, "b") == 1; }));
  ASSERT_TRUE(WaitFor([&] {
    Store(*c, std::span(chain).first(2));
    return MatchedOf(index, chain, "c") == 2;
  }));
  EXPECT_GE((*sub)->stats().replays, 2);  // a and b: first batch past seq 0

  // Eviction on a cuts its prefix; AllBlocksCleared on b empties it.
  a->OnBlocksRemoved(std::span(chain).subspan(1, 1));
  b->OnAllBlocksCleared();
  ASSERT_TRUE(WaitFor([&] { return MatchedOf(index, chain, "a") == 1 && MatchedOf(index, chain, "b") == 0; }));

  // An instance removed from the cluster leaves the index.
  (*sub)->RemoveSource("c");
  ASSERT_TRUE(WaitFor([&] { return MatchedOf(index, chain, "c") == -1; }));

  // a restarts (a new publisher, new endpoints, sequence from 0 again): the
  // router re-adds it and its old entries are gone.
  (*sub)->RemoveSource("a");
  a.reset();
  a = StartPublisher(true);
  (*sub)->AddSource({"a", a->endpoint(), a->replay_endpoint()});
  Store(*a, std::span(chain).first(4));
  ASSERT_TRUE(WaitFor([&] { return MatchedOf(index, chain, "a") == 4; }));
  EXPECT_EQ((*sub)->stats().decode_errors, 0);
}

TEST(KvEventPubSub, FullQueueBecomesAllBlocksCleared) {
  KvEventPublisherOptions o;
  o.config.enable_kv_cache_events = true;
  o.config.endpoint = "tcp://127.0.0.1:*";
  o.config.publisher = "zmq";
  o.config.max_queue_size = 4;
  o.flush_interval_ms = 1000;  // nothing is sent while the test fills the queue
  auto p = KvEventPublisher::Start(o);
  ASSERT_TRUE(p.ok());
  const auto chain = Chain(1, 8);
  for (const BlockHash& h : chain) (*p)->OnBlocksRemoved(std::span(&h, 1));
  EXPECT_GT((*p)->stats().events_dropped, 0);
}

TEST(KvEventPubSub, TakenPortFailsTheStart) {
  auto a = StartPublisher(false);
  ASSERT_TRUE(a);
  KvEventPublisherOptions o;
  o.config.enable_kv_cache_events = true;
  o.config.publisher = "zmq";
  o.config.endpoint = a->endpoint();  // tcp://127.0.0.1:PORT, bound already: connect, not bind
  o.config.replay_endpoint = "tcp://127.0.0.1:" + a->endpoint().substr(a->endpoint().rfind(':') + 1);
  auto b = KvEventPublisher::Start(o);
  EXPECT_FALSE(b.ok());
}

}  // namespace
}  // namespace tessera::kv_events

// CURVE on the KV event sockets (server/kv_events/kv_event_auth.h), over real
// ZeroMQ TCP on 127.0.0.1: a subscriber with the deployment's keys fills its
// index (live and by replay); one without CURVE, or with another deployment's
// keys, gets nothing and the refusal is counted. Also where a wildcard
// endpoint binds, and which endpoints leave the machine. Bounded waits.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "server/kv_events/kv_event_auth.h"
#include "server/kv_events/kv_event_publisher.h"
#include "server/kv_events/kv_event_subscriber.h"
#include "tests/unit/server/kv_events/kv_events_test_util.h"

namespace tessera::kv_events {
namespace {

constexpr char kKey[] = "deployment-key-0123456789";

TEST(KvEventAuth, KeysAreDerivedDeterministicallyAndDifferPerDeployment) {
  const KvEventCurveKeys a = KvEventCurveKeys::FromInternalKey(kKey), b = KvEventCurveKeys::FromInternalKey(kKey);
  const KvEventCurveKeys c = KvEventCurveKeys::FromInternalKey("another-key-0123456789");
  EXPECT_EQ(a.server_public.size(), 40u);
  EXPECT_EQ(a.server_public, b.server_public);
  EXPECT_EQ(a.client_secret, b.client_secret);
  EXPECT_NE(a.server_public, c.server_public);
  EXPECT_NE(a.server_public, a.client_public);
}

TEST(KvEventAuth, OnlyTheDeploymentsSubscribersGetEvents) {
  KvEventPublisherOptions o;
  o.config.enable_kv_cache_events = true;
  o.config.publisher = "zmq";
  o.config.endpoint = "tcp://*:*";  // narrowed to o.host
  o.config.replay_endpoint = "tcp://*:*";
  o.config.topic = "kv";
  o.flush_interval_ms = 2;
  o.host = "127.0.0.1";
  o.curve = KvEventCurveKeys::FromInternalKey(kKey);
  auto pub = KvEventPublisher::Start(o);
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  EXPECT_EQ((*pub)->endpoint().rfind("tcp://127.0.0.1:", 0), 0u) << (*pub)->endpoint();
  EXPECT_EQ((*pub)->replay_endpoint().rfind("tcp://127.0.0.1:", 0), 0u) << (*pub)->replay_endpoint();

  // Knows the publisher's public key (public keys leak: logs, configs) but not the deployment's
  // client key: only the ZAP handler stops it.
  KvEventCurveKeys stranger_keys = *o.curve;
  {
    char pub[41], sec[41];
    ASSERT_EQ(zmq_curve_keypair(pub, sec), 0);
    stranger_keys.client_public = pub;
    stranger_keys.client_secret = sec;
  }
  KvPrefixIndex good_index, plain_index, foreign_index, stranger_index;
  auto good = KvEventSubscriber::Start(
      {.topic = "kv", .poll_interval_ms = 5, .replay_timeout_ms = 300, .curve = o.curve}, &good_index);
  auto plain = KvEventSubscriber::Start(
      {.topic = "kv", .poll_interval_ms = 5, .replay_timeout_ms = 300}, &plain_index);
  auto foreign = KvEventSubscriber::Start({.topic = "kv", .poll_interval_ms = 5, .replay_timeout_ms = 300,
                                           .curve = KvEventCurveKeys::FromInternalKey("another-key-0123456789")},
                                          &foreign_index);
  auto stranger = KvEventSubscriber::Start(
      {.topic = "kv", .poll_interval_ms = 5, .replay_timeout_ms = 300, .curve = stranger_keys}, &stranger_index);
  ASSERT_TRUE(good.ok() && plain.ok() && foreign.ok() && stranger.ok());
  for (auto* s : {&*good, &*plain, &*foreign, &*stranger}) {
    (*s)->AddSource({"p", (*pub)->endpoint(), (*pub)->replay_endpoint()});
  }
  const auto chain = Chain(100, 3);
  std::vector<int32_t> tokens(chain.size() * 4, 1);
  ASSERT_TRUE(WaitFor([&] {
    (*pub)->OnBlocksStored(std::nullopt, chain, tokens, 4);
    return MatchedOf(good_index, chain, "p") == 3;
  }));
  // The others had as long (and more) to receive the same stream and replays.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_LE(MatchedOf(plain_index, chain, "p"), 0);
  EXPECT_LE(MatchedOf(foreign_index, chain, "p"), 0);
  EXPECT_LE(MatchedOf(stranger_index, chain, "p"), 0);
  EXPECT_EQ((*plain)->stats().batches_applied, 0);
  EXPECT_EQ((*foreign)->stats().batches_applied, 0);
  EXPECT_EQ((*stranger)->stats().batches_applied, 0);
  EXPECT_TRUE(WaitFor([&] { return (*pub)->stats().subscribers_refused > 0; }));  // the stranger, by ZAP
}

TEST(KvEventAuth, WildcardEndpointsBindTheConfiguredHost) {
  EXPECT_EQ(NarrowEndpoint("tcp://*:5557", "127.0.0.1"), "tcp://127.0.0.1:5557");
  EXPECT_EQ(NarrowEndpoint("tcp://*:5557", "::1"), "tcp://[::1]:5557");
  EXPECT_EQ(NarrowEndpoint("tcp://*:5557", "0.0.0.0"), "tcp://*:5557");
  EXPECT_EQ(NarrowEndpoint("tcp://10.0.0.5:5557", "127.0.0.1"), "tcp://10.0.0.5:5557");
  EXPECT_EQ(NarrowEndpoint("ipc:///tmp/kv", "127.0.0.1"), "ipc:///tmp/kv");
  EXPECT_FALSE(EndpointLeavesHost("tcp://127.0.0.1:5557"));
  EXPECT_FALSE(EndpointLeavesHost("tcp://[::1]:5557"));
  EXPECT_FALSE(EndpointLeavesHost("ipc:///tmp/kv"));
  EXPECT_TRUE(EndpointLeavesHost("tcp://*:5557"));
  EXPECT_TRUE(EndpointLeavesHost("tcp://10.0.0.5:5557"));
}

}  // namespace
}  // namespace tessera::kv_events

// KvTransport between two transports in one process (two UCX contexts), over
// UCX shared memory and TCP on loopback: bytes arrive exactly, and every bad
// request is refused before anything is written.
#include "engine/kv_transfer/kv_transport.h"
#include "engine/kv_transfer/ucx_agent.h"

#include <atomic>
#include <cstring>
#include <thread>

#include <gtest/gtest.h>

namespace tessera {
namespace {

ModelConfig TinyConfig(int64_t layers = 2) {
  ModelConfig c;
  c.num_layers = layers;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.num_q_heads = 4;
  c.hidden_size = 32;
  return c;
}

struct Side {
  std::unique_ptr<Backend> backend = MakeCpuBackend({1});
  std::unique_ptr<KvCache> cache;
  std::unique_ptr<KvTransport> transport;
  Side(const ModelConfig& c, const std::string& tls, const std::string& fingerprint = "model-a",
       int32_t block_size = 4, const std::string& fault = "", const std::string& internal_key = "") {
    cache = KvCache::Create(c, backend.get(), 8, block_size).value();
    KvTransportOptions o;
    o.ucx_tls = tls;
    o.internal_key = internal_key;
    o.fault = fault;
    o.pin_timeout = std::chrono::milliseconds(60000);
    auto t = KvTransport::Create(o, cache.get(), MakeKvLayout(c, DType::kF32, block_size), fingerprint);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    if (t.ok()) transport = std::move(*t);
  }
  float* K(int64_t layer, int64_t block) const {
    return static_cast<float*>(cache->layer(layer).k) + block * cache->block_size() * 16;
  }
  float* V(int64_t layer, int64_t block) const {
    return static_cast<float*>(cache->layer(layer).v) + block * cache->block_size() * 16;
  }
};

constexpr int64_t kBlockFloats = 4 * 2 * 8;  // block_size x kv heads x head dim

void Fill(Side& s, int64_t block, float base) {
  for (int64_t l = 0; l < 2; ++l) {
    for (int64_t i = 0; i < kBlockFloats; ++i) {
      s.K(l, block)[i] = base + l * 1000 + i;
      s.V(l, block)[i] = -(base + l * 1000 + i);
    }
  }
}

// The i-th block's prefix hash, as the exporter and the puller both name it.
KvBlockKey BlockKey(size_t i) { return {Sha256Of("block " + std::to_string(i))}; }

KvPullSpec Spec(const Side& from, std::string handle, std::vector<int32_t> remote, std::vector<int32_t> local) {
  KvPullSpec p;
  p.host = "127.0.0.1";
  p.port = from.transport->port();
  p.handle = std::move(handle);
  p.remote_blocks = std::move(remote);
  p.local_blocks = std::move(local);
  for (size_t i = 0; i < p.remote_blocks.size(); ++i) p.keys.push_back(BlockKey(i));
  return p;
}

class KvTransportTest : public ::testing::TestWithParam<std::string> {};

TEST(KvTransportReleaseTest, ReleaseWithoutPullUnpinsAtOnce) {
  // A decode that needs none of the blocks (all in its prefix cache) acknowledges anyway.
  Side prefill(TinyConfig(), "tcp,self"), decode(TinyConfig(), "tcp,self");
  ASSERT_TRUE(prefill.transport && decode.transport);
  prefill.transport->Export("req-1", {3, 5}, {BlockKey(0), BlockKey(1)});
  decode.transport->Release("127.0.0.1", prefill.transport->port(), "req-1");
  EXPECT_EQ(prefill.transport->num_exports(), 0);
  EXPECT_EQ(prefill.transport->TakeReleased(), std::vector<std::string>{"req-1"});
  decode.transport->Release("127.0.0.1", prefill.transport->port(), "req-1");  // unknown now: a no-op
  EXPECT_TRUE(prefill.transport->TakeReleased().empty());
}

TEST(KvTransportAuthTest, ControlPlaneRefusesCallersWithoutTheDeploymentKey) {
  const std::string key = "deployment-key-0123456789";
  Side prefill(TinyConfig(), "tcp,self", "model-a", 4, "", key);
  Side stranger(TinyConfig(), "tcp,self");                                   // no key
  Side other(TinyConfig(), "tcp,self", "model-a", 4, "", "another-key-0123456789");  // another deployment
  Side decode(TinyConfig(), "tcp,self", "model-a", 4, "", key);
  ASSERT_TRUE(prefill.transport && stranger.transport && other.transport && decode.transport);
  Fill(prefill, 3, 100);
  prefill.transport->Export("req-1", {3}, {BlockKey(0)});
  for (Side* caller : {&stranger, &other}) {
    // Neither a release (someone else's transfer) nor an open gets through.
    caller->transport->Release("127.0.0.1", prefill.transport->port(), "req-1");
    EXPECT_EQ(prefill.transport->num_exports(), 1);
    StatusOr<KvPullStats> st = caller->transport->Pull(Spec(prefill, "req-1", {3}, {0}));
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.status().message().find("--internal-api-key-file"), std::string::npos) << st.status().ToString();
    EXPECT_EQ(prefill.transport->num_exports(), 1);
  }
  StatusOr<KvPullStats> ok = decode.transport->Pull(Spec(prefill, "req-1", {3}, {0}));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(std::memcmp(decode.K(1, 0), prefill.K(1, 3), kBlockFloats * sizeof(float)), 0);
  EXPECT_EQ(prefill.transport->num_exports(), 0);  // acknowledged with the token
}

TEST(KvTransportAuthTest, ExportsAreSignedAndOnlySignedSourcesPass) {
  const std::string key = "deployment-key-0123456789";
  Side prefill(TinyConfig(), "tcp,self", "model-a", 4, "", key);
  Side keyless(TinyConfig(), "tcp,self");
  ASSERT_TRUE(prefill.transport && keyless.transport);
  const std::vector<int32_t> blocks = {3, 5};
  const KvSourceFields src{"10.0.0.7", 5600, "req-1", "abcd", &blocks};
  const std::string sig = prefill.transport->SignExport(src);
  EXPECT_EQ(sig.size(), 64u);
  EXPECT_TRUE(prefill.transport->CheckSource(src, sig).ok());
  const std::vector<int32_t> other_blocks = {3, 6};
  for (const KvSourceFields& forged : {KvSourceFields{"10.0.0.8", 5600, "req-1", "abcd", &blocks},
                                       KvSourceFields{"10.0.0.7", 5601, "req-1", "abcd", &blocks},
                                       KvSourceFields{"10.0.0.7", 5600, "req-2", "abcd", &blocks},
                                       KvSourceFields{"10.0.0.7", 5600, "req-1", "abcd", &other_blocks}}) {
    Status s = prefill.transport->CheckSource(forged, sig);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("remote_signature"), std::string::npos) << s.ToString();
  }
  EXPECT_FALSE(prefill.transport->CheckSource(src, "").ok());
  // Without a key: no signatures, and only loopback peers.
  EXPECT_EQ(keyless.transport->SignExport(src), "");
  Status remote = keyless.transport->CheckSource(src, "");
  EXPECT_FALSE(remote.ok());
  EXPECT_NE(remote.message().find("remote_host"), std::string::npos) << remote.ToString();
  EXPECT_TRUE(keyless.transport->CheckSource({"127.0.0.1", 5600, "req-1", "abcd", &blocks}, "").ok());
}

TEST(UcxAgentTest, InterfaceOfHost) {
  EXPECT_EQ(InterfaceOfHost("0.0.0.0").value(), "");
  EXPECT_EQ(InterfaceOfHost("").value(), "");
  EXPECT_EQ(InterfaceOfHost("127.0.0.1").value(), "lo");
  EXPECT_FALSE(InterfaceOfHost("192.0.2.254").ok());  // TEST-NET-1: held by no interface here
}

TEST_P(KvTransportTest, PullsExportedBlocksExactlyAndReleases) {
  Side prefill(TinyConfig(), GetParam()), decode(TinyConfig(), GetParam());
  ASSERT_TRUE(prefill.transport && decode.transport);
  Fill(prefill, 3, 10);
  Fill(prefill, 5, 20);
  prefill.transport->Export("req-1", {3, 5}, {BlockKey(0), BlockKey(1)});
  auto st = decode.transport->Pull(Spec(prefill, "req-1", {3, 5}, {6, 1}));
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->bytes, 2 * 2 * 2 * kBlockFloats * 4);  // blocks x layers x (K, V) x bytes
  for (int64_t l = 0; l < 2; ++l) {
    EXPECT_EQ(0, std::memcmp(decode.K(l, 6), prefill.K(l, 3), kBlockFloats * 4));
    EXPECT_EQ(0, std::memcmp(decode.V(l, 6), prefill.V(l, 3), kBlockFloats * 4));
    EXPECT_EQ(0, std::memcmp(decode.K(l, 1), prefill.K(l, 5), kBlockFloats * 4));
    EXPECT_EQ(0, std::memcmp(decode.V(l, 1), prefill.V(l, 5), kBlockFloats * 4));
  }
  // The ack released the export; a second pull of the handle is refused.
  EXPECT_EQ(prefill.transport->TakeReleased(), std::vector<std::string>{"req-1"});
  EXPECT_EQ(prefill.transport->num_exports(), 0);
  EXPECT_EQ(decode.transport->Pull(Spec(prefill, "req-1", {3}, {2})).status().code(), StatusCode::kNotFound);
}

TEST_P(KvTransportTest, RefusesBadRequestsWritingNothing) {
  Side prefill(TinyConfig(), GetParam()), decode(TinyConfig(), GetParam());
  ASSERT_TRUE(prefill.transport && decode.transport);
  Fill(prefill, 3, 10);
  prefill.transport->Export("req-1", {3}, {BlockKey(0)});
  std::memset(decode.K(0, 2), 0, kBlockFloats * 4);

  auto unknown = decode.transport->Pull(Spec(prefill, "nope", {3}, {2}));
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("unknown transfer handle"), std::string::npos);
  auto out_of_range = decode.transport->Pull(Spec(prefill, "req-1", {100000}, {2}));
  EXPECT_EQ(out_of_range.status().code(), StatusCode::kOutOfRange);
  auto not_exported = decode.transport->Pull(Spec(prefill, "req-1", {4}, {2}));
  EXPECT_EQ(not_exported.status().code(), StatusCode::kInvalidArgument);
  KvPullSpec wrong_tokens = Spec(prefill, "req-1", {3}, {2});
  wrong_tokens.keys[0].sha256[31] ^= 1;
  EXPECT_EQ(decode.transport->Pull(wrong_tokens).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(decode.K(0, 2)[5], 0.0f);  // nothing written
  EXPECT_EQ(prefill.transport->num_exports(), 1);  // refusals release nothing

  Side other_model(TinyConfig(), GetParam(), "model-b");
  auto fp = other_model.transport->Pull(Spec(prefill, "req-1", {3}, {2}));
  EXPECT_EQ(fp.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(fp.status().message().find("different models"), std::string::npos);
  Side other_layout(TinyConfig(), GetParam(), "model-a", /*block_size=*/8);
  auto bs = other_layout.transport->Pull(Spec(prefill, "req-1", {3}, {2}));
  EXPECT_EQ(bs.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(bs.status().message().find("block_size 4 at the exporting instance vs 8 at the pulling one"), std::string::npos)
      << bs.status().message();
  Side other_layers(TinyConfig(3), GetParam());
  EXPECT_EQ(other_layers.transport->Pull(Spec(prefill, "req-1", {3}, {2})).status().code(),
            StatusCode::kFailedPrecondition);
}

TEST_P(KvTransportTest, CorruptionFailsTheChecksumAndDropFailsThePull) {
  Side prefill(TinyConfig(), GetParam());
  Side corrupt(TinyConfig(), GetParam(), "model-a", 4, "corrupt");
  Side drop(TinyConfig(), GetParam(), "model-a", 4, "drop");
  Fill(prefill, 3, 10);
  prefill.transport->Export("a", {3}, {BlockKey(0)});
  EXPECT_EQ(corrupt.transport->Pull(Spec(prefill, "a", {3}, {2})).status().code(), StatusCode::kDataLoss);
  prefill.transport->Export("b", {3}, {BlockKey(0)});
  EXPECT_EQ(drop.transport->Pull(Spec(prefill, "b", {3}, {2})).status().code(), StatusCode::kUnavailable);
  // Failed pulls still acknowledge: the prefill frees the blocks now.
  EXPECT_EQ(prefill.transport->num_exports(), 0);
}

TEST(KvTransportTimeoutTest, UnpulledExportsExpire) {
  ModelConfig c = TinyConfig();
  auto backend = MakeCpuBackend({1});
  auto cache = KvCache::Create(c, backend.get(), 8, 4).value();
  KvTransportOptions o;
  o.ucx_tls = "tcp,self";
  o.pin_timeout = std::chrono::milliseconds(50);
  std::atomic<int> notified{0};
  o.notify = [&] { ++notified; };
  auto t = KvTransport::Create(o, cache.get(), MakeKvLayout(c, DType::kF32, 4), "m");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  (*t)->Export("x", {1}, {BlockKey(0)});
  for (int i = 0; i < 100 && (*t)->num_exports() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ((*t)->num_exports(), 0);
  EXPECT_EQ((*t)->TakeReleased(), std::vector<std::string>{"x"});
  EXPECT_GE(notified.load(), 1);
}

INSTANTIATE_TEST_SUITE_P(Ucx, KvTransportTest, ::testing::Values("tcp,self", "sm,self"),
                         [](const auto& info) { return info.param == "tcp,self" ? "tcp" : "sm"; });

}  // namespace
}  // namespace tessera

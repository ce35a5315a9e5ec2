// vLLM's kv_transfer_params (server/openai/kv_transfer_params.h): the
// exporter's remote_signature travels both ways, and only the internal key's
// holder may send the field when one is configured.
#include "server/openai/kv_transfer_params.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

using Json = nlohmann::ordered_json;

TEST(KvTransferParams, SignatureRoundTrips) {
  KvExportInfo info{"engine", "10.0.0.5", 5600, "req-1", {3, 4}, "abc123"};
  const Json j = KvTransferParamsJson(info);
  EXPECT_EQ(j["remote_signature"], "abc123");
  KvTransferRequest r;
  ASSERT_FALSE(ParseKvTransferValue(j, &r));
  ASSERT_TRUE(r.remote.has_value());
  EXPECT_EQ(r.remote->signature, "abc123");
  EXPECT_EQ(r.remote->block_ids, (std::vector<int32_t>{3, 4}));
  info.signature.clear();  // no internal key: no field (vLLM's shape exactly)
  EXPECT_FALSE(KvTransferParamsJson(info).contains("remote_signature"));
  Json bad = j;
  bad["remote_signature"] = 5;
  auto e = ParseKvTransferValue(bad, &r);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->param, "kv_transfer_params.remote_signature");
}

TEST(KvTransferParams, OnlyTheInternalKeyMayCarryThem) {
  KvTransferRequest none, exp, pull;
  exp.do_remote_decode = true;
  pull.remote = RemoteKvSource{"127.0.0.1", 1, "h", "e", {0}, ""};
  const KvTransferCaller client{.internal_key_configured = true, .internal = false};
  const KvTransferCaller router{.internal_key_configured = true, .internal = true};
  const KvTransferCaller open{.internal_key_configured = false, .internal = false};
  EXPECT_FALSE(CheckKvTransferCaller(none, client));  // nothing asked
  for (const KvTransferRequest* r : {&exp, &pull}) {
    auto e = CheckKvTransferCaller(*r, client);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->status, ApiStatus::kBadRequest);
    EXPECT_EQ(e->param, "kv_transfer_params");
    EXPECT_NE(e->message.find("--internal-api-key-file"), std::string::npos);
    EXPECT_FALSE(CheckKvTransferCaller(*r, router));
    EXPECT_FALSE(CheckKvTransferCaller(*r, open));  // no key: loopback-only deployment (the flags)
  }
}

}  // namespace
}  // namespace tessera

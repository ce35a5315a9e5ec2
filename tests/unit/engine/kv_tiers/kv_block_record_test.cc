#include "engine/kv_tiers/kv_block_record.h"

#include <gtest/gtest.h>

namespace tessera::kv_tiers {
namespace {

KvBlockKey Key() { return {"fp-abc", "bs16 f32 L2 H2 D8", 0x1122334455667788ULL, 0x99aabbccddeeff00ULL, ""}; }

TEST(KvBlockRecord, RoundTripsAndChecksEveryField) {
  const std::string payload(1000, 'x');
  const std::string rec = EncodeKvRecord(Key(), payload);
  EXPECT_EQ(rec.size(), kKvRecordHeaderBytes + SerializeKey(Key()).size() + payload.size());
  auto back = DecodeKvRecord(rec, Key());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, payload);

  KvBlockKey other = Key();
  other.model_fingerprint = "fp-other";
  EXPECT_EQ(DecodeKvRecord(rec, other).status().code(), StatusCode::kFailedPrecondition);
  other = Key();
  other.tenant = "t1";
  EXPECT_EQ(DecodeKvRecord(rec, other).status().code(), StatusCode::kFailedPrecondition);
  other = Key();
  other.hash_lo ^= 1;
  EXPECT_EQ(DecodeKvRecord(rec, other).status().code(), StatusCode::kFailedPrecondition);

  std::string bad = rec;
  bad[bad.size() - 1] ^= 1;  // payload bit flip
  EXPECT_EQ(DecodeKvRecord(bad, Key()).status().code(), StatusCode::kDataLoss);
  bad = rec;
  bad[20] ^= 1;  // payload size field: header checksum catches it
  EXPECT_EQ(DecodeKvRecord(bad, Key()).status().code(), StatusCode::kDataLoss);
  bad = rec;
  bad[0] = 'X';
  EXPECT_EQ(DecodeKvRecord(bad, Key()).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(DecodeKvRecord(rec.substr(0, rec.size() - 1), Key()).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(DecodeKvRecord(rec.substr(0, 10), Key()).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(DecodeKvRecord(rec + "y", Key()).status().code(), StatusCode::kDataLoss);
}

TEST(KvBlockRecord, KeyIdsDifferPerField) {
  KvBlockKey a = Key(), b = Key();
  b.tenant = "t";
  EXPECT_NE(KeyId(a), KeyId(b));
  EXPECT_EQ(KeyId(a).size(), 32u);
  EXPECT_EQ(KeyId(a), KeyId(Key()));
  // Field boundaries are unambiguous: ("ab","c") != ("a","bc").
  KvBlockKey c = Key(), d = Key();
  c.model_fingerprint = "ab";
  c.layout = "c";
  d.model_fingerprint = "a";
  d.layout = "bc";
  EXPECT_NE(SerializeKey(c), SerializeKey(d));
  // The id holds no key text.
  EXPECT_EQ(KeyId(a).find("fp"), std::string::npos);
}

}  // namespace
}  // namespace tessera::kv_tiers

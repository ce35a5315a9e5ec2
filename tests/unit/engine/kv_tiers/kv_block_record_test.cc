#include "engine/kv_tiers/kv_block_record.h"

#include <gtest/gtest.h>

namespace tessera::kv_tiers {
namespace {

KvBlockKey Key() { return {"fp-abc", "bs16 f32 L2 H2 D8", Sha256Of("block"), ""}; }

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
  other.hash[31] ^= 1;
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

// A record as anyone who can write the tier can make it: other payload bytes,
// both checksums recomputed (the layout is public), the MAC left as it was.
std::string Forge(const std::string& rec, char fill) {
  std::string out = rec;
  const size_t key_len = SerializeKey(Key()).size();
  for (size_t i = kKvRecordHeaderBytes + key_len; i < out.size(); ++i) out[i] = fill;
  const size_t start = kKvRecordHeaderBytes + key_len;
  const std::string_view payload(out.data() + start, out.size() - start);
  const uint64_t sum = Fnv1a64(payload.data(), payload.size());
  for (int i = 0; i < 8; ++i) out[24 + i] = static_cast<char>((sum >> (8 * i)) & 0xff);
  const uint64_t header = Fnv1a64(out.data() + kKvRecordHeaderBytes, key_len, Fnv1a64(out.data(), 32));
  for (int i = 0; i < 8; ++i) out[32 + i] = static_cast<char>((header >> (8 * i)) & 0xff);
  return out;
}

TEST(KvBlockRecord, MacRefusesPlantedAndForeignRecords) {
  const std::string secret = "a deployment secret", payload(1000, 'x');
  const std::string rec = EncodeKvRecord(Key(), payload, secret);
  KvRecordFault fault = KvRecordFault::kCorrupt;
  auto back = DecodeKvRecord(rec, Key(), secret, &fault);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, payload);
  EXPECT_EQ(fault, KvRecordFault::kNone);

  // Valid checksums, other contents: without the secret it passes (that is
  // the hole the MAC closes), with it it is refused as unauthenticated.
  const std::string forged = Forge(rec, 'y');
  ASSERT_TRUE(DecodeKvRecord(forged, Key()).ok());
  EXPECT_EQ(DecodeKvRecord(forged, Key(), secret, &fault).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(fault, KvRecordFault::kUnauthenticated);
  // Written without a secret, or under another one: refused too.
  EXPECT_FALSE(DecodeKvRecord(EncodeKvRecord(Key(), payload), Key(), secret, &fault).ok());
  EXPECT_EQ(fault, KvRecordFault::kUnauthenticated);
  EXPECT_FALSE(DecodeKvRecord(EncodeKvRecord(Key(), payload, "another secret"), Key(), secret, &fault).ok());
  EXPECT_EQ(fault, KvRecordFault::kUnauthenticated);
  // A bit flip is still corruption (checksums first), another key still another key.
  std::string flipped = rec;
  flipped.back() ^= 1;
  EXPECT_EQ(DecodeKvRecord(flipped, Key(), secret, &fault).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(fault, KvRecordFault::kCorrupt);
  KvBlockKey other = Key();
  other.tenant = "t1";
  EXPECT_FALSE(DecodeKvRecord(rec, other, secret, &fault).ok());
  EXPECT_EQ(fault, KvRecordFault::kOtherKey);
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

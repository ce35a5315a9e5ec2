#include "server/kv_events/kv_event_codec.h"

#include <gtest/gtest.h>

#include <string>

namespace tessera::kv_events {
namespace {

std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// Bytes from Python's msgpack (an independent encoder), as vLLM's msgspec
// writes them: msgpack.packb([1700000000.5, [["BlockStored", [b"\x01"*16,
// 12345], None, [1,2,3,4], 2, None, "GPU"], ["BlockRemoved", [-7], "CPU"],
// ["AllBlocksCleared"]], 0], use_bin_type=True)
const char* kPythonBatch =
    "93cb41d954fc402000009397ab426c6f636b53746f72656492c41001010101010101010101010101010101cd3039c0940102030402c0a3"
    "47505593ac426c6f636b52656d6f76656491f9a343505591b0416c6c426c6f636b73436c656172656400";

TEST(KvEventCodec, DecodesWhatPythonMsgpackWrites) {
  auto b = DecodeEventBatch(FromHex(kPythonBatch));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->ts, 1700000000.5);
  ASSERT_EQ(b->data_parallel_rank, 0);
  ASSERT_EQ(b->events.size(), 3u);
  const auto& s = std::get<BlockStored>(b->events[0]);
  EXPECT_EQ(s.block_hashes, (std::vector<HashKey>{std::string(16, '\x01'), KeyOfInt(12345)}));
  EXPECT_FALSE(s.parent_block_hash);
  EXPECT_EQ(s.token_ids, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(s.block_size, 2);
  EXPECT_FALSE(s.lora_id);
  EXPECT_EQ(s.medium, "GPU");
  const auto& r = std::get<BlockRemoved>(b->events[1]);
  EXPECT_EQ(r.block_hashes, std::vector<HashKey>{KeyOfInt(-7)});
  EXPECT_EQ(r.medium, "CPU");
  EXPECT_TRUE(std::holds_alternative<AllBlocksCleared>(b->events[2]));
  // Our encoder writes the same bytes for the same batch.
  EXPECT_EQ(EncodeEventBatch(*b), FromHex(kPythonBatch));
}

TEST(KvEventCodec, AcceptsOmittedTrailingDefaults) {
  // msgpack.packb([1.0, [["BlockStored", [5], 7, [9, 9], 2]]]): no rank, no lora_id/medium.
  auto b = DecodeEventBatch(FromHex("92cb3ff00000000000009195ab426c6f636b53746f72656491050792090902"));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_FALSE(b->data_parallel_rank);
  const auto& s = std::get<BlockStored>(b->events[0]);
  EXPECT_EQ(s.parent_block_hash, KeyOfInt(7));
  EXPECT_FALSE(s.medium);
}

BlockHash H(int i) { return BlockHash{Sha256Of(std::to_string(i))}; }

TEST(KvEventCodec, RoundTripsTesseraHashes) {
  EventBatch in;
  in.ts = 12.25;
  in.data_parallel_rank = 3;
  BlockStored s;
  s.block_hashes = {KeyOf(H(1)), KeyOf(H(2))};
  s.parent_block_hash = KeyOf(H(3));
  s.token_ids = {7, 8, 9, 10};
  s.block_size = 2;
  s.lora_id = 5;
  s.medium = "GPU";
  in.events = {s, BlockRemoved{{KeyOf(H(1))}, std::nullopt}, AllBlocksCleared{}};
  auto out = DecodeEventBatch(EncodeEventBatch(in));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->ts, in.ts);
  EXPECT_EQ(out->data_parallel_rank, 3);
  EXPECT_EQ(out->events, in.events);
  EXPECT_EQ(KeyOf(H(1)).size(), 32u);  // the SHA-256 digest, as vLLM's bytes hashes
}

TEST(KvEventCodec, RefusesMalformedBatches) {
  EXPECT_FALSE(DecodeEventBatch("").ok());
  EXPECT_FALSE(DecodeEventBatch(FromHex("c0")).ok());                    // nil
  EXPECT_FALSE(DecodeEventBatch(FromHex("91cb3ff0000000000000")).ok());  // [1.0]
  EXPECT_FALSE(DecodeEventBatch(FromHex("92a1789190")).ok());            // ["x", [[]]]
  // [1.0, [["Nope"]]]: unknown tag.
  EXPECT_FALSE(DecodeEventBatch(FromHex("92cb3ff00000000000009191a44e6f7065")).ok());
  // Trailing bytes after a valid batch.
  EXPECT_FALSE(DecodeEventBatch(FromHex(kPythonBatch) + "00").ok());
  // Truncated.
  const std::string full = FromHex(kPythonBatch);
  EXPECT_FALSE(DecodeEventBatch(full.substr(0, full.size() - 3)).ok());
  // Containers claiming more elements than there are bytes (msgpack-c would
  // allocate them up front): array32 of 2^32-1, map32, a str32 past the end.
  EXPECT_FALSE(DecodeEventBatch(FromHex("92cb3ff0000000000000ddffffffff")).ok());
  EXPECT_FALSE(DecodeEventBatch(FromHex("92cb3ff0000000000000dfffffffff")).ok());
  EXPECT_FALSE(DecodeEventBatch(FromHex("92cb3ff000000000000091dbffffffff41")).ok());
  EXPECT_FALSE(DecodeEventBatch(FromHex("c1")).ok());
  // BlockStored with a negative token id: [1.0, [["BlockStored", [5], nil, [-1], 1]]]
  EXPECT_FALSE(DecodeEventBatch(FromHex("92cb3ff00000000000009195ab426c6f636b53746f72656491" "05c091ff01")).ok());
}

}  // namespace
}  // namespace tessera::kv_events

// The KV tiers' share of the cache waterfall: a spilled block counts as
// not_written until some tier has stored it — never while every tier's write
// failed, no longer once one succeeded.
#include <gtest/gtest.h>

#include "engine/kv_tiers/host_kv_store.h"
#include "runtime/kv_tiers/kv_tier_manager.h"

namespace tessera {
namespace {

// A tier that refuses every write: an unreachable Redis.
class DownStore final : public kv_tiers::KvBlockStore {
 public:
  Status Put(const kv_tiers::KvBlockKey&, std::string_view) override { return Status(StatusCode::kUnavailable, "down"); }
  StatusOr<std::string> Get(const kv_tiers::KvBlockKey&) override { return Status(StatusCode::kUnavailable, "down"); }
  StatusOr<bool> Contains(const kv_tiers::KvBlockKey&) override { return Status(StatusCode::kUnavailable, "down"); }
  Status Delete(const kv_tiers::KvBlockKey&) override { return Status(StatusCode::kUnavailable, "down"); }
  kv_tiers::KvStoreStats stats() const override { return {}; }
  const char* name() const override { return "redis"; }
};

std::unique_ptr<KvTierManager> Manager(std::vector<std::shared_ptr<kv_tiers::KvBlockStore>> stores) {
  KvTierOptions o;
  o.extra_stores = std::move(stores);
  o.model_fingerprint = "m";
  o.layout = "l";
  o.block_bytes = 64;
  return std::move(KvTierManager::Create(std::move(o))).value();
}

TEST(KvTierUnwrittenTest, ASpillCountsAsNotWrittenUntilATierStoresIt) {
  BlockHash a, b;
  a.digest[0] = 1;
  b.digest[0] = 2;
  auto down = Manager({std::make_shared<DownStore>()});
  down->Spill(a, "", std::string(64, 'x'));
  down->Drain();
  EXPECT_TRUE(down->NotWrittenThrough(a));
  EXPECT_FALSE(down->NotWrittenThrough(b));  // never spilled: not this tier's doing

  auto host = std::make_shared<kv_tiers::HostKvStore>(kv_tiers::HostKvStoreOptions{int64_t{1} << 20});
  auto one_up = Manager({host, std::make_shared<DownStore>()});
  one_up->Spill(a, "", std::string(64, 'x'));
  one_up->Drain();
  EXPECT_FALSE(one_up->NotWrittenThrough(a));  // the host tier has it
}

}  // namespace
}  // namespace tessera

// KV tiers end to end inside one process (scheduler/kv_tiers, engine loop,
// real tier stores): greedy output is bitwise the same whether a prompt's
// prefix was computed here or loaded back from the host tier (after the pool
// evicted it), the disk tier (also after a restart) or a real redis-server;
// Redis stopped mid-run and corrupted blocks in Redis and on disk mean
// recompute, counted, never a failed request; tenants with different
// cache_salt never share a block; keys never hold prompt text or the salt.
#include <hiredis/hiredis.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>

#include <gtest/gtest.h>

#include "engine/kv_tiers/disk_kv_store.h"
#include "engine/kv_tiers/host_kv_store.h"
#include "engine/kv_tiers/redis_kv_store.h"
#include "runtime/engine_loop.h"
#include "tests/unit/engine/kv_tiers/redis_server.h"
#include "tests/unit/engine/test_model_util.h"

namespace tessera {
namespace {

using testing::MakeTinyModel;
using testing::RandomTokens;
using testing::TempDir;
namespace fs = std::filesystem;

constexpr int kBlock = 16;

class KvTiersTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    MakeTinyModel(dir_->path(), "qwen3", DType::kF32);
  }
  static void TearDownTestSuite() { delete dir_; }

  static EngineLoopOptions Options(std::optional<KvTierOptions> tiers, int32_t num_blocks = 64) {
    EngineLoopOptions o;
    o.model_dir = dir_->path();
    o.num_threads = 2;
    o.scheduler.max_num_seqs = 8;
    o.scheduler.max_num_batched_tokens = 256;
    o.scheduler.kv.num_blocks = num_blocks;
    o.scheduler.kv.block_size = kBlock;
    o.kv_tiers = std::move(tiers);
    return o;
  }

  static std::unique_ptr<EngineLoop> MakeLoop(EngineLoopOptions o) {
    auto loop = EngineLoop::Create(std::move(o));
    EXPECT_TRUE(loop.ok()) << loop.status().ToString();
    return loop.ok() ? std::move(loop).value() : nullptr;
  }

  static Request Greedy(const std::string& id, std::vector<int32_t> prompt, std::string salt = "") {
    Request r;
    r.id = id;
    r.prompt_token_ids = std::move(prompt);
    r.params.temperature = 0.0f;
    r.params.max_tokens = 8;
    r.params.ignore_eos = true;
    r.cache_salt = std::move(salt);
    return r;
  }

  // Runs one request to completion offline; its tokens. Spills and fetches
  // are drained after, so the next request sees the tiers' final state.
  static std::vector<int32_t> Run(EngineLoop& loop, const Request& r) {
    auto s = loop.Submit(r);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) return {};
    EXPECT_TRUE(loop.RunUntilDone().ok());
    std::vector<int32_t> out;
    RequestOutput o;
    while ((*s)->TryNext(&o)) {
      EXPECT_TRUE(o.status.ok()) << o.status.ToString();
      out.insert(out.end(), o.token_ids.begin(), o.token_ids.end());
    }
    if (loop.kv_tiers()) loop.kv_tiers()->Drain();
    return out;
  }

  static std::vector<int32_t> Prompt(int seed, int n) {
    std::mt19937 rng(seed);
    return RandomTokens(rng, n, 200);
  }

  // Greedy tokens of `prompt` computed by a loop without tiers.
  static std::vector<int32_t> Reference(const std::vector<int32_t>& prompt) {
    auto loop = MakeLoop(Options(std::nullopt));
    return Run(*loop, Greedy("ref", prompt));
  }

  static int64_t PromptTokensComputed(const EngineLoop& loop) { return loop.metrics().counters.prompt_tokens; }
  static const KvTierStats& Tier(const std::vector<KvTierStats>& s, const std::string& name) {
    for (const KvTierStats& t : s) {
      if (t.name == name) return t;
    }
    static const KvTierStats none;
    ADD_FAILURE() << "no tier " << name;
    return none;
  }

  static TempDir* dir_;
};

TempDir* KvTiersTest::dir_ = nullptr;

// The host tier below a small pool: the prefix is evicted by other prompts,
// then loaded back from host memory instead of recomputed.
TEST_F(KvTiersTest, HostTierAfterEvictionIsExact) {
  const std::vector<int32_t> p = Prompt(1, 5 * kBlock + 3);
  const std::vector<int32_t> want = Reference(p);
  KvTierOptions t;
  t.host_bytes = int64_t{64} << 20;
  auto loop = MakeLoop(Options(t, /*num_blocks=*/16));
  ASSERT_TRUE(loop);
  EXPECT_EQ(Run(*loop, Greedy("a", p)), want);
  // Two other prompts of 13 blocks each evict every block of the first.
  Run(*loop, Greedy("f1", Prompt(2, 12 * kBlock + 5)));
  Run(*loop, Greedy("f2", Prompt(3, 12 * kBlock + 5)));
  const int64_t before = PromptTokensComputed(*loop);
  EXPECT_EQ(Run(*loop, Greedy("b", p)), want);
  // 5 full blocks loaded: only the 3 tokens past them are computed.
  EXPECT_EQ(PromptTokensComputed(*loop) - before, 3);
  EXPECT_EQ(loop->kv_tiers()->totals().tokens_loaded, 5 * kBlock);
  EXPECT_GE(Tier(loop->kv_tiers()->stats(), "host").store.hits, 5);
}

// Part of the prefix still in the pool, the rest in the host tier: the
// fetch loads only the missing blocks, and the prefix stats count the
// admission once (the load's hold of the pool's blocks is not a second hit).
TEST_F(KvTiersTest, HostTierCompletesAPartialPoolHitCountedOnce) {
  const std::vector<int32_t> p = Prompt(1, 5 * kBlock + 3);
  const std::vector<int32_t> want = Reference(p);
  KvTierOptions t;
  t.host_bytes = int64_t{64} << 20;
  auto loop = MakeLoop(Options(t, /*num_blocks=*/16));
  ASSERT_TRUE(loop);
  EXPECT_EQ(Run(*loop, Greedy("a", p)), want);
  // 13 blocks for another prompt: the pool keeps 3 of the first prompt's 6 (its head).
  Run(*loop, Greedy("f1", Prompt(2, 12 * kBlock + 5)));
  const SchedulerCounters before = loop->metrics().counters;
  const int64_t loaded0 = loop->kv_tiers()->totals().tokens_loaded;
  EXPECT_EQ(Run(*loop, Greedy("b", p)), want);
  const SchedulerCounters after = loop->metrics().counters;
  const int64_t loaded = loop->kv_tiers()->totals().tokens_loaded - loaded0;
  EXPECT_GT(loaded, 0);
  EXPECT_LT(loaded, 5 * kBlock);  // a partial pool hit completed from the tier
  EXPECT_EQ(after.prompt_tokens - before.prompt_tokens, 3);
  EXPECT_EQ(after.prefix_cache_queries - before.prefix_cache_queries, static_cast<int64_t>(p.size()));
  EXPECT_EQ(after.prefix_cache_hits - before.prefix_cache_hits, 5 * kBlock);
}

// The disk tier: a second instance (a restart) on the same directory loads
// the prefix the first one computed; a corrupted file is detected (counted),
// dropped, and the prompt computed from that block on.
TEST_F(KvTiersTest, DiskTierSurvivesRestartAndDetectsCorruption) {
  const std::vector<int32_t> p = Prompt(4, 4 * kBlock + 1);
  const std::vector<int32_t> want = Reference(p);
  TempDir disk;
  KvTierOptions t;
  t.disk_dir = disk.path();
  {
    auto first = MakeLoop(Options(t));
    ASSERT_TRUE(first);
    EXPECT_EQ(Run(*first, Greedy("a", p)), want);
    EXPECT_EQ(Tier(first->kv_tiers()->stats(), "disk").store.puts, 4);
  }
  {
    auto second = MakeLoop(Options(t));  // a new pool: nothing cached on the device
    ASSERT_TRUE(second);
    EXPECT_EQ(Run(*second, Greedy("b", p)), want);
    EXPECT_EQ(PromptTokensComputed(*second), 1);
    EXPECT_EQ(second->kv_tiers()->totals().tokens_loaded, 4 * kBlock);
  }
  // Corrupt the third block's file: blocks 0-1 load, 2-3 are recomputed.
  auto third = MakeLoop(Options(t));
  ASSERT_TRUE(third);
  std::vector<BlockHash> hashes;
  BlockHashScheme().ExtendBlockHashes(p, kBlock, {}, "", &hashes);
  auto* store = dynamic_cast<kv_tiers::DiskKvStore*>(&third->kv_tiers()->store(0));
  ASSERT_NE(store, nullptr);
  const std::string path = store->PathOf(third->kv_tiers()->KeyOf(hashes[2], ""));
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << path;
    f.seekp(-7, std::ios::end);
    f.put('\x7f');
  }
  EXPECT_EQ(Run(*third, Greedy("c", p)), want);
  EXPECT_EQ(PromptTokensComputed(*third), 2 * kBlock + 1);
  EXPECT_EQ(Tier(third->kv_tiers()->stats(), "disk").store.corrupt, 1);
  EXPECT_EQ(third->kv_tiers()->totals().tokens_loaded, 2 * kBlock);
}

// A tier whose reads wait until released: a slow Redis or disk.
class GatedStore final : public kv_tiers::KvBlockStore {
 public:
  explicit GatedStore(std::shared_ptr<kv_tiers::KvBlockStore> inner) : inner_(std::move(inner)) {}
  Status Put(const kv_tiers::KvBlockKey& k, std::string_view b) override { return inner_->Put(k, b); }
  StatusOr<std::string> Get(const kv_tiers::KvBlockKey& k) override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return open_; });
    return inner_->Get(k);
  }
  StatusOr<bool> Contains(const kv_tiers::KvBlockKey& k) override { return inner_->Contains(k); }
  Status Delete(const kv_tiers::KvBlockKey& k) override { return inner_->Delete(k); }
  kv_tiers::KvStoreStats stats() const override { return inner_->stats(); }
  const char* name() const override { return "gated"; }
  void Open() {
    {
      std::lock_guard lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::shared_ptr<kv_tiers::KvBlockStore> inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// While one request's blocks are on their way from a (slow) tier, other
// requests are admitted and finish; the waiting one then loads and is exact.
// (A request with full blocks missing from the pool waits for its own lookup.)
TEST_F(KvTiersTest, FetchDoesNotStallOtherRequests) {
  const std::vector<int32_t> p = Prompt(9, 4 * kBlock + 2);
  const std::vector<int32_t> q = Prompt(10, kBlock - 4);  // no full block: never waits for a tier
  const std::vector<int32_t> want_p = Reference(p), want_q = Reference(q);
  auto host = std::make_shared<kv_tiers::HostKvStore>(kv_tiers::HostKvStoreOptions{int64_t{16} << 20});
  auto gated = std::make_shared<GatedStore>(host);
  KvTierOptions t;
  t.extra_stores = {gated};
  {
    KvTierOptions w;
    w.extra_stores = {host};
    auto writer = MakeLoop(Options(w));
    ASSERT_TRUE(writer);
    EXPECT_EQ(Run(*writer, Greedy("w", p)), want_p);
  }
  auto loop = MakeLoop(Options(t));
  ASSERT_TRUE(loop);
  struct OpenOnExit {  // a failed assertion must not leave the loader waiting forever
    GatedStore* g;
    ~OpenOnExit() { g->Open(); }
  } open_on_exit{gated.get()};
  auto sp = loop->Submit(Greedy("p", p));
  auto sq = loop->Submit(Greedy("q", q));
  ASSERT_TRUE(sp.ok() && sq.ok());
  for (int i = 0; i < 500 && !(*sq)->finished(); ++i) ASSERT_TRUE(loop->Step().ok());
  ASSERT_TRUE((*sq)->finished()) << "q waited for p's tier fetch";
  EXPECT_FALSE((*sp)->finished());
  EXPECT_EQ(PromptTokensComputed(*loop), static_cast<int64_t>(q.size()));  // p not started
  gated->Open();
  ASSERT_TRUE(loop->RunUntilDone().ok());
  std::vector<int32_t> got_p, got_q;
  RequestOutput o;
  while ((*sp)->TryNext(&o)) got_p.insert(got_p.end(), o.token_ids.begin(), o.token_ids.end());
  while ((*sq)->TryNext(&o)) got_q.insert(got_q.end(), o.token_ids.begin(), o.token_ids.end());
  EXPECT_EQ(got_p, want_p);
  EXPECT_EQ(got_q, want_q);
  EXPECT_EQ(PromptTokensComputed(*loop), static_cast<int64_t>(q.size()) + 2);
  EXPECT_EQ(loop->kv_tiers()->totals().tokens_loaded, 4 * kBlock);
}

class KvTiersRedisTest : public KvTiersTest {
 protected:
  void SetUp() override {
    if (!kv_tiers::testing::HaveRedis()) GTEST_SKIP() << "redis-server is not installed (scripts/bootstrap)";
    ASSERT_TRUE(redis_.Start(kv_tiers::testing::FreePort()));
    tiers_.remote_url = "redis://127.0.0.1:" + std::to_string(redis_.port()) + "/0";
  }
  // Runs a raw Redis command (tests only): the reply as a string, or "".
  std::string RedisCommand(const std::vector<std::string>& argv) {
    redisContext* c = redisConnect("127.0.0.1", redis_.port());
    if (c == nullptr || c->err) {
      if (c) redisFree(c);
      return "";
    }
    std::vector<const char*> args;
    std::vector<size_t> lens;
    for (const std::string& a : argv) args.push_back(a.data()), lens.push_back(a.size());
    auto* reply = static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(args.size()), args.data(), lens.data()));
    std::string out;
    if (reply && reply->type == REDIS_REPLY_STRING) out.assign(reply->str, reply->len);
    if (reply && reply->type == REDIS_REPLY_ARRAY) {
      for (size_t i = 0; i < reply->elements; ++i) out += std::string(reply->element[i]->str, reply->element[i]->len) + "\n";
    }
    if (reply) freeReplyObject(reply);
    redisFree(c);
    return out;
  }
  kv_tiers::testing::RedisServer redis_;
  KvTierOptions tiers_;
};

// Another instance fetches the prefix from Redis: bitwise the same tokens;
// a corrupted value is detected, dropped and recomputed.
TEST_F(KvTiersRedisTest, RemoteTierIsExactAndDetectsCorruption) {
  const std::vector<int32_t> p = Prompt(5, 3 * kBlock + 7);
  const std::vector<int32_t> want = Reference(p);
  {
    auto a = MakeLoop(Options(tiers_));
    ASSERT_TRUE(a);
    EXPECT_EQ(Run(*a, Greedy("a", p)), want);
    EXPECT_EQ(Tier(a->kv_tiers()->stats(), "redis").store.puts, 3);
  }
  {
    auto b = MakeLoop(Options(tiers_));
    ASSERT_TRUE(b);
    EXPECT_EQ(Run(*b, Greedy("b", p)), want);
    EXPECT_EQ(PromptTokensComputed(*b), 7);
    EXPECT_EQ(Tier(b->kv_tiers()->stats(), "redis").store.hits, 3);
  }
  auto c = MakeLoop(Options(tiers_));
  ASSERT_TRUE(c);
  std::vector<BlockHash> hashes;
  BlockHashScheme().ExtendBlockHashes(p, kBlock, {}, "", &hashes);
  auto* store = dynamic_cast<kv_tiers::RedisKvStore*>(&c->kv_tiers()->store(0));
  ASSERT_NE(store, nullptr);
  const std::string key = store->RedisKeyOf(c->kv_tiers()->KeyOf(hashes[1], ""));
  ASSERT_FALSE(RedisCommand({"GET", key}).empty());
  RedisCommand({"SETRANGE", key, "100", "garbage"});
  EXPECT_EQ(Run(*c, Greedy("c", p)), want);
  EXPECT_EQ(PromptTokensComputed(*c), 2 * kBlock + 7);
  EXPECT_EQ(Tier(c->kv_tiers()->stats(), "redis").store.corrupt, 1);
}

// Redis killed mid-run: requests keep succeeding (computed here), errors are
// counted; once a server is back, blocks are stored again.
TEST_F(KvTiersRedisTest, RedisStoppedMeansRecompute) {
  const std::vector<int32_t> p = Prompt(6, 2 * kBlock + 2);
  const std::vector<int32_t> q = Prompt(7, 2 * kBlock + 2);
  auto loop = MakeLoop(Options(tiers_, /*num_blocks=*/64));
  ASSERT_TRUE(loop);
  const std::vector<int32_t> want_p = Reference(p);
  EXPECT_EQ(Run(*loop, Greedy("a", p)), want_p);
  redis_.Stop();
  auto other = MakeLoop(Options(tiers_));  // its pool lacks p: it asks the (dead) tier
  ASSERT_TRUE(other);
  EXPECT_EQ(Run(*other, Greedy("b", p)), want_p);
  EXPECT_EQ(PromptTokensComputed(*other), static_cast<int64_t>(p.size()));
  EXPECT_EQ(Run(*other, Greedy("c", q)), Reference(q));
  const KvTierStats r = Tier(other->kv_tiers()->stats(), "redis");
  EXPECT_GE(r.store.errors + r.spill_errors, 1);
  EXPECT_EQ(r.store.hits, 0);
}

// Tenants: the same prompt under another cache_salt never hits the first
// tenant's blocks in any tier; keys and stored records hold neither the salt
// nor prompt text.
TEST_F(KvTiersRedisTest, TenantsNeverShareBlocks) {
  const std::vector<int32_t> p = Prompt(8, 3 * kBlock + 1);
  const std::vector<int32_t> want = Reference(p);
  TempDir disk;
  KvTierOptions t = tiers_;
  t.host_bytes = int64_t{16} << 20;
  t.disk_dir = disk.path();
  const std::string salt_a = "tenant-a-secret-salt", salt_b = "tenant-b-secret-salt";
  {
    auto a = MakeLoop(Options(t));
    ASSERT_TRUE(a);
    EXPECT_EQ(Run(*a, Greedy("a", p, salt_a)), want);
  }
  auto b = MakeLoop(Options(t));
  ASSERT_TRUE(b);
  EXPECT_EQ(Run(*b, Greedy("b", p, salt_b)), want);
  EXPECT_EQ(PromptTokensComputed(*b), static_cast<int64_t>(p.size()));
  EXPECT_EQ(b->kv_tiers()->totals().blocks_found, 0);
  // Unsalted: no hit either (tenant a's chain starts from its salt).
  EXPECT_EQ(Run(*b, Greedy("c", p)), want);
  EXPECT_EQ(b->kv_tiers()->totals().blocks_found, 0);
  // Tenant a again, on a fresh pool: its own blocks load.
  auto a2 = MakeLoop(Options(t));
  ASSERT_TRUE(a2);
  EXPECT_EQ(Run(*a2, Greedy("d", p, salt_a)), want);
  EXPECT_EQ(a2->kv_tiers()->totals().tokens_loaded, 3 * kBlock);
  // Keys: 32 hex digits after the prefix; records: no salt bytes, and the key
  // (what a record header repeats) holds only a digest of the salt.
  const std::string keys = RedisCommand({"KEYS", "*"});
  ASSERT_FALSE(keys.empty());
  std::istringstream lines(keys);
  for (std::string k; std::getline(lines, k);) {
    ASSERT_EQ(k.rfind("tessera:kv:", 0), 0u) << k;
    EXPECT_EQ(k.size(), std::string("tessera:kv:").size() + 32) << k;
    const std::string value = RedisCommand({"GET", k});
    EXPECT_EQ(value.find("tenant-"), std::string::npos);
  }
  for (const auto& e : fs::recursive_directory_iterator(disk.path())) {
    if (!e.is_regular_file()) continue;
    std::ifstream f(e.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_EQ(bytes.find("tenant-"), std::string::npos) << e.path();
    EXPECT_EQ(e.path().filename().string().size(), 32u + 4u) << e.path();  // <KeyId>.kvb
  }
  const kv_tiers::KvBlockKey ka = b->kv_tiers()->KeyOf(BlockHash{Sha256Of("block")}, salt_a);
  const kv_tiers::KvBlockKey kb = b->kv_tiers()->KeyOf(BlockHash{Sha256Of("block")}, salt_b);
  EXPECT_NE(ka.tenant, kb.tenant);
  EXPECT_NE(kv_tiers::KeyId(ka), kv_tiers::KeyId(kb));
  EXPECT_EQ(ka.tenant.find("tenant"), std::string::npos);
}

}  // namespace
}  // namespace tessera

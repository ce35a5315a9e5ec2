// tessera-kv-tier-bench: time to first token of a prompt whose
// full blocks are loaded back from a KV tier (host DRAM, local disk, Redis on
// loopback) against computing the same prompt, per prompt length: the
// break-even prompt length per tier. Also the raw per-block read time of each
// tier (the store's Get with its checks).
//
//   tessera-kv-tier-bench --model /tmp/q05 --redis-port 6399 --lengths 33,65,129,257,513,1025
//
// One writer loop (all tiers) computes every prompt and writes its blocks
// through; then, per tier, a fresh loop whose pool is empty serves the same
// prompts from that tier alone. A loop without tiers gives the recompute
// TTFT. Each prompt runs once per loop (max_tokens 1). The disk tier reads
// through the page cache (the files were just written). --tiny runs a few
// tokens of a synthetic model for CI.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <sstream>

#include <unistd.h>

#include <CLI/CLI.hpp>

#include "engine/kv_tiers/disk_kv_store.h"
#include "engine/kv_tiers/host_kv_store.h"
#include "engine/kv_tiers/redis_kv_store.h"
#include "engine/synth.h"
#include "runtime/engine_loop.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

struct Timed {
  std::vector<int32_t> tokens;
  double seconds = 0;
};

Timed RunOne(EngineLoop& loop, const std::string& id, const std::vector<int32_t>& prompt) {
  Request r;
  r.id = id;
  r.prompt_token_ids = prompt;
  r.params.temperature = 0;
  r.params.max_tokens = 1;
  r.params.ignore_eos = true;
  const auto t0 = Clock::now();
  const Status valid = ValidateRequest(r, loop.scheduler_options().limits);
  StatusOr<RequestStreamPtr> s = valid.ok() ? loop.Submit(r) : StatusOr<RequestStreamPtr>(valid);
  if (!s.ok() || !loop.RunUntilDone().ok()) {
    std::fprintf(stderr, "request failed\n");
    std::exit(1);
  }
  Timed t;
  t.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  RequestOutput o;
  while ((*s)->TryNext(&o)) t.tokens.insert(t.tokens.end(), o.token_ids.begin(), o.token_ids.end());
  return t;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int Main(int argc, char** argv) {
  CLI::App app{"KV tier load time vs recompute (break-even prompt length per tier)"};
  std::string model, lengths_s = "33,65,129,257,513,1025", out_dir;
  int redis_port = 0, reps = 3, threads = 0;
  bool tiny = false;
  app.add_option("--model", model, "HF checkpoint dir (default: a synthetic tiny qwen3)");
  app.add_option("--lengths", lengths_s, "prompt lengths (tokens), comma-separated");
  app.add_option("--reps", reps, "distinct prompts per length");
  app.add_option("--redis-port", redis_port, "a redis-server on 127.0.0.1 (0: no Redis tier)");
  app.add_option("--dir", out_dir, "scratch dir for the disk tier (default: a temp dir)");
  app.add_option("--threads", threads, "CPU threads (0: all)");
  app.add_flag("--tiny", tiny, "a few tokens on a synthetic model (CI)");
  CLI11_PARSE(app, argc, argv);
  namespace fs = std::filesystem;
  const fs::path scratch = out_dir.empty() ? fs::temp_directory_path() / ("tessera-kvtier-" + std::to_string(getpid()))
                                           : fs::path(out_dir);
  fs::create_directories(scratch);
  if (model.empty()) {
    SynthOptions so;
    so.arch = "qwen3";
    so.size = "tiny";
    so.out_dir = (scratch / "model").string();
    if (Status s = WriteSyntheticCheckpoint(so); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
    model = so.out_dir;
  }
  std::vector<int> lengths;
  if (tiny) {
    lengths = {33, 40};
    reps = 1;
  } else {
    std::stringstream ss(lengths_s);
    for (std::string x; std::getline(ss, x, ',');) lengths.push_back(std::stoi(x));
  }
  auto host = std::make_shared<kv_tiers::HostKvStore>(kv_tiers::HostKvStoreOptions{int64_t{8} << 30});
  auto disk = kv_tiers::DiskKvStore::Open({(scratch / "disk").string(), int64_t{8} << 30});
  if (!disk.ok()) return std::fprintf(stderr, "%s\n", disk.status().ToString().c_str()), 1;
  std::vector<std::pair<std::string, std::shared_ptr<kv_tiers::KvBlockStore>>> tiers = {
      {"host", host}, {"disk", std::shared_ptr<kv_tiers::KvBlockStore>(std::move(*disk))}};
  if (redis_port > 0) {
    kv_tiers::RedisKvStoreOptions ro;
    ro.port = redis_port;
    ro.op_timeout_ms = 5000;
    auto r = kv_tiers::RedisKvStore::Create(ro);
    if (!r.ok()) return std::fprintf(stderr, "%s\n", r.status().ToString().c_str()), 1;
    tiers.push_back({"redis", std::shared_ptr<kv_tiers::KvBlockStore>(std::move(*r))});
  }
  std::mutex mu;
  std::map<std::string, std::vector<double>> load_s;  // per tier: seconds per block read
  auto make = [&](std::vector<std::shared_ptr<kv_tiers::KvBlockStore>> stores) {
    EngineLoopOptions o;
    o.model_dir = model;
    o.num_threads = threads;
    o.scheduler.kv.block_size = 16;
    o.scheduler.max_num_batched_tokens = 2048;
    o.kv_cache_bytes = int64_t{1} << 30;
    if (!stores.empty()) {
      KvTierOptions t;
      t.extra_stores = std::move(stores);
      t.spill_queue_bytes = int64_t{4} << 30;  // the bench measures loads: keep every block
      t.on_op = [&](const std::string& tier, KvTierOp op, double s) {
        std::lock_guard lock(mu);
        if (op == KvTierOp::kLoad) load_s[tier].push_back(s);
      };
      o.kv_tiers = std::move(t);
    }
    auto loop = EngineLoop::Create(std::move(o));
    if (!loop.ok()) {
      std::fprintf(stderr, "%s\n", loop.status().ToString().c_str());
      std::exit(1);
    }
    return std::move(*loop);
  };
  std::mt19937 rng(7);
  std::map<int, std::vector<std::vector<int32_t>>> prompts;
  int vocab = 0;
  {
    auto probe = make({});
    vocab = static_cast<int>(std::min<int64_t>(probe->model_config().vocab_size, 30000));
    // Warm-up: first-touch costs out of the measurements.
    std::vector<int32_t> w(64);
    for (auto& x : w) x = static_cast<int32_t>(rng() % vocab);
    RunOne(*probe, "warm", w);
    for (int len : lengths) {
      for (int i = 0; i < reps; ++i) {
        std::vector<int32_t> p(static_cast<size_t>(len));
        for (auto& x : p) x = static_cast<int32_t>(rng() % vocab);
        prompts[len].push_back(std::move(p));
      }
    }
  }
  std::map<int, std::vector<double>> recompute;
  std::map<int, std::vector<std::vector<int32_t>>> want;
  {
    auto base = make({});
    RunOne(*base, "warm", std::vector<int32_t>(48, 1));
    for (auto& [len, ps] : prompts) {
      for (size_t i = 0; i < ps.size(); ++i) {
        Timed t = RunOne(*base, "r" + std::to_string(len) + "_" + std::to_string(i), ps[i]);
        recompute[len].push_back(t.seconds);
        want[len].push_back(t.tokens);
      }
    }
  }
  {
    std::vector<std::shared_ptr<kv_tiers::KvBlockStore>> all;
    for (auto& t : tiers) all.push_back(t.second);
    auto writer = make(all);
    for (auto& [len, ps] : prompts) {
      for (size_t i = 0; i < ps.size(); ++i) RunOne(*writer, "w" + std::to_string(len) + "_" + std::to_string(i), ps[i]);
    }
    writer->kv_tiers()->Drain();
  }
  const int64_t block_bytes = [&] {
    auto st = tiers[0].second->stats();
    return st.puts > 0 ? st.put_bytes / st.puts : 0;
  }();
  std::printf("model %s, block 16 tokens = %lld bytes of KV\n", model.c_str(), static_cast<long long>(block_bytes));
  std::printf("%-6s %7s %12s %12s %18s\n", "tier", "tokens", "recompute_s", "tier_s", "recompute/tier");
  bool exact = true;
  for (auto& [name, store] : tiers) {
    auto loop = make({store});
    RunOne(*loop, "warm", std::vector<int32_t>(48, 2));
    {
      std::lock_guard lock(mu);
      load_s[name].clear();
    }
    int break_even = -1;
    for (auto& [len, ps] : prompts) {
      std::vector<double> times;
      for (size_t i = 0; i < ps.size(); ++i) {
        Timed t = RunOne(*loop, "l" + std::to_string(len) + "_" + std::to_string(i), ps[i]);
        times.push_back(t.seconds);
        exact = exact && t.tokens == want[len][i];
      }
      const double rc = Median(recompute[len]), ld = Median(times);
      std::printf("%-6s %7d %12.4f %12.4f %18.2f\n", name.c_str(), len, rc, ld, rc / std::max(ld, 1e-9));
      if (ld < rc && break_even < 0) break_even = len;
      if (ld >= rc) break_even = -1;  // the first length from which loading stays faster
    }
    std::printf("%-6s break-even: loading is faster from %s\n", name.c_str(),
                break_even < 0 ? "no measured length" : (std::to_string(break_even) + " tokens on").c_str());
    std::lock_guard lock(mu);
    std::printf("%-6s per-block read (Get + checks): median %.3f ms over %zu blocks\n", name.c_str(),
                Median(load_s[name]) * 1e3, load_s[name].size());
  }
  std::printf("greedy first tokens identical to recompute: %s\n", exact ? "yes" : "NO");
  if (out_dir.empty()) fs::remove_all(scratch);
  return exact ? 0 : 1;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) { return tessera::Main(argc, argv); }

// tessera-kv-transfer-bench: KV bytes moved between two processes on this host
// by KvTransport (prefill/decode disaggregation), over UCX shared memory and
// TCP, as GB/s and as a fraction of a memcpy of the same bytes measured in the
// same run; plus the per-request time for prompts of --tokens.
//
//   tessera-kv-transfer-bench [--tls sm,self --tls tcp,self] [--tokens 1024 --tokens 4096]
//       [--layers 28 --kv-heads 8 --head-dim 128] [--reps 5] [--json FILE] [--tiny]
//
// A child process (forked before any UCX state exists) plays the prefill:
// it owns a KV pool, exports one handle per repetition and serves the
// control plane; the parent plays the decode and pulls. The layout defaults
// to Qwen3-0.6B's (f32 KV on the CPU backend). --tiny: a few KiB, for CI.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/kv_transfer/kv_transport.h"

namespace tessera {
namespace {

struct Flags {
  std::vector<std::string> tls = {"sm,self", "tcp,self"};
  std::vector<int64_t> tokens = {1024, 4096};
  int32_t layers = 28, kv_heads = 8, head_dim = 128, block_size = 16;
  int reps = 5;
  std::string json;
  bool tiny = false;
};

ModelConfig Config(const Flags& f) {
  ModelConfig c;
  c.num_layers = f.layers;
  c.num_kv_heads = f.kv_heads;
  c.head_dim = f.head_dim;
  c.num_q_heads = f.kv_heads;
  c.hidden_size = f.kv_heads * f.head_dim;
  return c;
}

std::string Handle(int64_t tokens, int rep) { return "bench-" + std::to_string(tokens) + "-" + std::to_string(rep); }

// The exporter: fills its pool, exports every (tokens, rep) handle, reports its
// port on `fd`, then serves until the parent closes the pipe.
int RunExporter(const Flags& f, const std::string& tls, int port_fd, int stop_fd) {
  auto backend = MakeCpuBackend({1});
  const int64_t max_tokens = *std::max_element(f.tokens.begin(), f.tokens.end());
  const int64_t blocks = (max_tokens + f.block_size - 1) / f.block_size;
  auto cache = KvCache::Create(Config(f), backend.get(), blocks, f.block_size);
  if (!cache.ok()) return 2;
  for (int32_t l = 0; l < f.layers; ++l) {
    const int64_t bytes = blocks * f.block_size * f.kv_heads * f.head_dim * 4;
    std::memset((*cache)->layer(l).k, 0x11 + l, static_cast<size_t>(bytes));
    std::memset((*cache)->layer(l).v, 0x22 + l, static_cast<size_t>(bytes));
  }
  KvTransportOptions o;
  o.ucx_tls = tls;
  o.pin_timeout = std::chrono::hours(1);
  auto t = KvTransport::Create(o, cache->get(), MakeKvLayout(Config(f), DType::kF32, f.block_size), "bench");
  if (!t.ok()) {
    std::fprintf(stderr, "exporter: %s\n", t.status().ToString().c_str());
    return 2;
  }
  for (int64_t tokens : f.tokens) {
    const int64_t n = tokens / f.block_size;
    for (int rep = 0; rep <= f.reps; ++rep) {
      std::vector<int32_t> ids;
      std::vector<KvBlockKey> keys;
      for (int64_t b = 0; b < n; ++b) {
        ids.push_back(static_cast<int32_t>(b));
        keys.push_back({Sha256Of(std::to_string(b))});
      }
      (*t)->Export(Handle(tokens, rep), ids, keys);
    }
  }
  const int port = (*t)->port();
  if (write(port_fd, &port, sizeof(port)) != sizeof(port)) return 2;
  char c;
  while (read(stop_fd, &c, 1) > 0) {
  }
  return 0;
}

double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

int Main(int argc, char** argv) {
  Flags f;
  CLI::App app{"KV transfer bandwidth between two processes (KvTransport over UCX)"};
  app.add_option("--tls", f.tls, "UCX transports to measure, one run each");
  app.add_option("--tokens", f.tokens, "prompt lengths (tokens) to move");
  app.add_option("--layers", f.layers);
  app.add_option("--kv-heads", f.kv_heads);
  app.add_option("--head-dim", f.head_dim);
  app.add_option("--reps", f.reps, "timed pulls per size (after one warm-up)")->check(CLI::Range(1, 1000));
  app.add_option("--json", f.json, "also write the results here");
  app.add_flag("--tiny", f.tiny, "2 layers, 2 heads x 8, 32/64 tokens: checks the code path, measures nothing");
  CLI11_PARSE(app, argc, argv);
  if (f.tiny) {
    f.layers = 2, f.kv_heads = 2, f.head_dim = 8, f.tokens = {32, 64}, f.reps = 2;
  }
  nlohmann::json results = nlohmann::json::array();
  // Every exporter is forked before this process touches gRPC or UCX (neither survives a fork).
  struct Child {
    pid_t pid;
    int port_fd, stop_fd;
  };
  std::vector<Child> children;
  std::fflush(stdout);
  for (const std::string& tls : f.tls) {
    int port_pipe[2], stop_pipe[2];
    if (pipe(port_pipe) != 0 || pipe(stop_pipe) != 0) return 2;
    const pid_t child = fork();
    if (child == 0) {
      close(port_pipe[0]);
      close(stop_pipe[1]);
      for (const Child& c : children) {  // the earlier exporters' pipes: their EOF must come from the parent alone
        close(c.port_fd);
        close(c.stop_fd);
      }
      _exit(RunExporter(f, tls, port_pipe[1], stop_pipe[0]));
    }
    close(port_pipe[1]);
    close(stop_pipe[0]);
    children.push_back({child, port_pipe[0], stop_pipe[1]});
  }
  for (size_t ci = 0; ci < f.tls.size(); ++ci) {
    const std::string& tls = f.tls[ci];
    const pid_t child = children[ci].pid;
    int port_pipe[2] = {children[ci].port_fd, -1};
    int stop_pipe[2] = {-1, children[ci].stop_fd};
    int port = 0;
    const bool got_port = read(port_pipe[0], &port, sizeof(port)) == sizeof(port);
    int rc = 0;
    if (!got_port) {
      std::fprintf(stderr, "%s: the exporter failed to start\n", tls.c_str());
      rc = 1;
    }
    auto backend = MakeCpuBackend({1});
    const int64_t max_tokens = *std::max_element(f.tokens.begin(), f.tokens.end());
    const int64_t blocks = (max_tokens + f.block_size - 1) / f.block_size;
    auto cache = KvCache::Create(Config(f), backend.get(), blocks, f.block_size);
    KvTransportOptions o;
    o.ucx_tls = tls;
    o.pull_timeout = std::chrono::minutes(5);
    auto t = got_port ? KvTransport::Create(o, cache->get(), MakeKvLayout(Config(f), DType::kF32, f.block_size),
                                            "bench")
                      : StatusOr<std::unique_ptr<KvTransport>>(Internal("no exporter"));
    for (int64_t tokens : f.tokens) {
      if (!t.ok()) break;
      const int64_t n = tokens / f.block_size;
      KvPullSpec spec;
      spec.host = "127.0.0.1";
      spec.port = port;
      for (int64_t b = 0; b < n; ++b) {
        spec.remote_blocks.push_back(static_cast<int32_t>(b));
        spec.local_blocks.push_back(static_cast<int32_t>(n - 1 - b));
        spec.keys.push_back({Sha256Of(std::to_string(b))});
      }
      double best = 1e30, sum = 0;
      int64_t bytes = 0;
      for (int rep = 0; rep <= f.reps; ++rep) {
        spec.handle = Handle(tokens, rep);
        auto st = (*t)->Pull(spec);
        if (!st.ok()) {
          std::fprintf(stderr, "%s, %lld tokens: %s\n", tls.c_str(), static_cast<long long>(tokens),
                       st.status().ToString().c_str());
          rc = 1;
          break;
        }
        bytes = st->bytes;
        if (rep == 0) continue;  // warm-up: endpoint and remote keys
        best = std::min(best, st->seconds);
        sum += st->seconds;
      }
      if (rc != 0) break;
      // The same bytes through memcpy, block by block, in this process: the local limit.
      std::vector<char> src(static_cast<size_t>(bytes)), dst(static_cast<size_t>(bytes));
      std::memset(src.data(), 1, src.size());
      double copy = 1e30;
      for (int rep = 0; rep < 3; ++rep) {
        const auto a = std::chrono::steady_clock::now();
        std::memcpy(dst.data(), src.data(), src.size());
        copy = std::min(copy, Seconds(std::chrono::steady_clock::now() - a));
      }
      const double gbs = static_cast<double>(bytes) / best / 1e9;
      const double copy_gbs = static_cast<double>(bytes) / copy / 1e9;
      std::printf("%-10s %6lld tokens  %9.2f MiB  best %8.3f ms  mean %8.3f ms  %7.2f GB/s  (memcpy %6.2f GB/s, "
                  "%.0f%%)\n",
                  tls.c_str(), static_cast<long long>(tokens), bytes / 1048576.0, best * 1e3, sum / f.reps * 1e3, gbs,
                  copy_gbs, 100 * gbs / copy_gbs);
      results.push_back({{"tls", tls}, {"tokens", tokens}, {"bytes", bytes}, {"best_s", best},
                         {"mean_s", sum / f.reps}, {"gb_per_s", gbs}, {"memcpy_gb_per_s", copy_gbs}});
    }
    if (!t.ok() && got_port) {
      std::fprintf(stderr, "%s: %s\n", tls.c_str(), t.status().ToString().c_str());
      rc = 1;
    }
    t = Internal("done");  // drop the puller's transport before the exporter goes
    close(stop_pipe[1]);
    int status = 0;
    waitpid(child, &status, 0);
    if (rc != 0) return rc;
  }
  if (!f.json.empty()) std::ofstream(f.json) << results.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) { return tessera::Main(argc, argv); }

// tessera-comm-bench: collective bandwidth of each Communicator implementation
// (engine/parallel) per world size and message size, in nccl-tests' units, so CPU
// and GPU figures compare to NVIDIA's own:
//   size   bytes of the largest per-rank buffer (all_reduce: the buffer; all_gather:
//          the gathered output; reduce_scatter and all_to_all: the input)
//   time   mean over ranks of (wall time of `iters` back-to-back calls) / iters
//   algbw  size / time (GB/s = 1e9 B/s)
//   busbw  algbw * 2(n-1)/n (all_reduce), * (n-1)/n (all_gather, reduce_scatter,
//          all_to_all): the per-rank link traffic of a bandwidth-optimal algorithm
//
//   tessera-comm-bench [--impl inproc,gloo,nccl] [--ranks 2,4] [--ops all_reduce,all_to_all]
//                      [--min-bytes 1024] [--max-bytes 67108864] [--factor 2] [--iters 20]
//                      [--warmup 5] [--json out.json] [--tiny]
//
// inproc: ranks are threads of this process. gloo: this process is rank 0 and
// hosts the rendezvous store on 127.0.0.1 (a free port); ranks 1..n-1 are copies of
// this binary started with --worker-*, stopped by PID. nccl (built with CUDA and
// NCCL, run where GPUs exist): one thread per GPU, world size = --nccl-ranks
// (default: all visible GPUs). Every size is checked once (inputs of 1.0, the sum
// must be n) before it is timed. f32 elements throughout.
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/parallel/gloo_communicator.h"
#include "engine/parallel/inproc.h"
#include "engine/parallel/store.h"
#ifdef TESSERA_HAVE_NCCL
#include <cuda_runtime.h>

#include "engine/parallel/nccl_communicator.h"
#endif

extern char** environ;

namespace tessera::parallel {
namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  std::vector<std::string> ops;
  int64_t min_bytes = 1024, max_bytes = int64_t{64} << 20;
  int factor = 2, iters = 20, warmup = 5;
  int timeout_ms = 60000;
};

struct Row {
  std::string impl, op;
  int ranks = 0;
  int64_t bytes = 0;
  double time_us = 0, algbw = 0, busbw = 0;
};

double BusFactor(const std::string& op, int n) {
  return op == "all_reduce" ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
}

// Host or device memory for one rank's buffers.
struct Memory {
  std::function<void*(size_t)> alloc;
  std::function<void(void*)> release;
  std::function<void(void*, const std::vector<float>&)> upload;
  std::function<std::vector<float>(const void*, size_t)> download;
};

Memory HostMemory() {
  return {[](size_t b) { return static_cast<void*>(new float[b / 4 + 1]); },
          [](void* p) { delete[] static_cast<float*>(p); },
          [](void* p, const std::vector<float>& v) { std::copy(v.begin(), v.end(), static_cast<float*>(p)); },
          [](const void* p, size_t n) {
            const float* f = static_cast<const float*>(p);
            return std::vector<float>(f, f + n);
          }};
}

#ifdef TESSERA_HAVE_NCCL
Memory DeviceMemory(int device) {
  return {[device](size_t b) {
            cudaSetDevice(device);
            void* p = nullptr;
            return cudaMalloc(&p, b + 4) == cudaSuccess ? p : nullptr;
          },
          [](void* p) { cudaFree(p); },
          [](void* p, const std::vector<float>& v) { cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice); },
          [](const void* p, size_t n) {
            std::vector<float> v(n);
            cudaMemcpy(v.data(), p, n * 4, cudaMemcpyDeviceToHost);
            return v;
          }};
}
#endif

// One call of `op` with per-rank element counts derived from `bytes`.
struct OpShape {
  int64_t count = 0;            // the collective's count argument
  int64_t in_elems = 0, out_elems = 0;
};
OpShape Shape(const std::string& op, int64_t bytes, int n) {
  const int64_t e = bytes / 4;
  if (op == "all_reduce") return {e, e, e};
  const int64_t per = e / n;
  if (op == "all_gather") return {per, per, per * n};
  if (op == "reduce_scatter") return {per, per * n, per};
  return {per, per * n, per * n};  // all_to_all
}

Status CallOp(Communicator& c, const std::string& op, const OpShape& s, const void* in, void* out,
              const std::vector<int64_t>& counts) {
  if (op == "all_reduce") return c.AllReduce(in, out, s.count, DType::kF32);
  if (op == "all_gather") return c.AllGather(in, out, s.count, DType::kF32);
  if (op == "reduce_scatter") return c.ReduceScatter(in, out, s.count, DType::kF32);
  return c.AllToAllV(in, counts, out, counts, DType::kF32);
}

// The sweep every rank runs in lockstep; rows are filled on rank 0.
Status Sweep(Communicator& c, const Config& cfg, const Memory& mem, const std::string& impl, std::vector<Row>* rows) {
  const int n = c.world_size();
  std::vector<int64_t> nanos(n);
  for (const std::string& op : cfg.ops) {
    for (int64_t bytes = cfg.min_bytes; bytes <= cfg.max_bytes; bytes *= cfg.factor) {
      const OpShape s = Shape(op, bytes, n);
      if (s.count == 0) continue;
      void* in = mem.alloc(static_cast<size_t>(s.in_elems) * 4);
      void* out = mem.alloc(static_cast<size_t>(s.out_elems) * 4);
      if (in == nullptr || out == nullptr) return ResourceExhausted("comm-bench: cannot allocate " + op + " buffers");
      const std::vector<int64_t> counts(n, s.count);
      mem.upload(in, std::vector<float>(s.in_elems, 1.0f));
      Status st = CallOp(c, op, s, in, out, counts);
      if (st.ok()) {  // correctness: sums are n, moved elements stay 1
        const float want = op == "all_reduce" || op == "reduce_scatter" ? static_cast<float>(n) : 1.0f;
        std::vector<float> got = mem.download(out, static_cast<size_t>(s.out_elems));
        if (got.front() != want || got.back() != want)
          st = Internal("comm-bench: " + op + " of " + std::to_string(bytes) + " bytes gave " +
                        std::to_string(got.back()) + ", want " + std::to_string(want));
      }
      for (int i = 0; st.ok() && i < cfg.warmup; ++i) st = CallOp(c, op, s, in, out, counts);
      const auto t0 = Clock::now();
      for (int i = 0; st.ok() && i < cfg.iters; ++i) st = CallOp(c, op, s, in, out, counts);
      const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
      mem.release(in);
      mem.release(out);
      RETURN_IF_ERROR(st);
      // Mean over ranks, as nccl-tests reports it (on the host, for every impl).
      RETURN_IF_ERROR(c.Barrier());
      if (c.backend() == "nccl") {
        nanos.assign(n, ns);  // device buffers: rank 0's own time stands for all
      } else {
        RETURN_IF_ERROR(c.AllGather(&ns, nanos.data(), 1, DType::kI64));
      }
      if (c.rank() == 0) {
        double sum = 0;
        for (int64_t v : nanos) sum += static_cast<double>(v);
        const double sec = sum / n / cfg.iters / 1e9;
        Row r{impl, op, n, bytes, sec * 1e6, 0, 0};
        r.algbw = static_cast<double>(bytes) / sec / 1e9;
        r.busbw = r.algbw * BusFactor(op, n);
        rows->push_back(r);
        std::printf("%-7s %-15s %5d %12lld %12.1f %9.3f %9.3f\n", impl.c_str(), op.c_str(), n,
                    static_cast<long long>(bytes), r.time_us, r.algbw, r.busbw);
        std::fflush(stdout);
      }
    }
  }
  return Status::Ok();
}

RendezvousOptions LocalRendezvous(int port, int world, int rank, int timeout_ms) {
  RendezvousOptions o;
  o.leader_host = "127.0.0.1";
  o.leader_port = port;
  o.world_size = world;
  o.rank = rank;
  o.timeout = std::chrono::milliseconds(timeout_ms);
  o.group = "comm-bench";
  return o;
}

Status RunInProcess(int n, const Config& cfg, std::vector<Row>* rows) {
  ASSIGN_OR_RETURN(auto g, InProcessGroup::Create(n, {std::chrono::milliseconds(cfg.timeout_ms)}));
  std::vector<Status> st(n);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] { st[r] = Sweep(g->communicator(r), cfg, HostMemory(), "inproc", rows); });
  for (auto& t : ts) t.join();
  for (const Status& s : st) RETURN_IF_ERROR(s);
  return Status::Ok();
}

// This process is rank 0; ranks 1..n-1 are this binary with the same arguments
// plus --worker-*. They are always reaped; on failure or a hang, killed by PID.
Status RunGloo(int n, const Config& cfg, const std::vector<std::string>& args, std::vector<Row>* rows) {
  ASSIGN_OR_RETURN(const int port, FreeLoopbackPort());
  std::vector<pid_t> pids;
  for (int r = 1; r < n; ++r) {
    std::vector<std::string> a = args;
    a.insert(a.end(), {"--worker-rank", std::to_string(r), "--worker-world", std::to_string(n), "--worker-port",
                       std::to_string(port)});
    std::vector<char*> argv;
    for (auto& s : a) argv.push_back(s.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0)
      return Internal("comm-bench: cannot start a gloo worker");
    pids.push_back(pid);
  }
  Status st;
  {
    auto comm = CreateGlooCommunicator(LocalRendezvous(port, n, 0, cfg.timeout_ms));
    st = comm.ok() ? Sweep(**comm, cfg, HostMemory(), "gloo", rows) : comm.status();
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(st.ok() ? cfg.timeout_ms : 0);
  for (pid_t pid : pids) {
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        if (st.ok()) st = Internal("comm-bench: a gloo worker did not finish");
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (st.ok() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
      st = Internal("comm-bench: gloo worker pid " + std::to_string(pid) + " failed");
  }
  return st;
}

#ifdef TESSERA_HAVE_NCCL
Status RunNccl(int n, const Config& cfg, std::vector<Row>* rows) {
  ASSIGN_OR_RETURN(const int port, FreeLoopbackPort());
  std::vector<Status> st(n);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      auto comm = CreateNcclCommunicator(LocalRendezvous(port, n, r, cfg.timeout_ms), r);
      st[r] = comm.ok() ? Sweep(**comm, cfg, DeviceMemory(r), "nccl", rows) : comm.status();
    });
  for (auto& t : ts) t.join();
  for (const Status& s : st) RETURN_IF_ERROR(s);
  return Status::Ok();
}
#endif

}  // namespace
}  // namespace tessera::parallel

int main(int argc, char** argv) {
  using namespace tessera::parallel;
  CLI::App app{"Collective bandwidth per Communicator implementation (nccl-tests units)"};
  Config cfg;
  std::vector<std::string> impls = {"inproc", "gloo", "nccl"};
  std::vector<int> ranks = {2, 4};
  cfg.ops = {"all_reduce", "all_to_all"};
  std::string json_path;
  bool tiny = false;
  int nccl_ranks = 0, worker_rank = -1, worker_world = 0, worker_port = 0;
  app.add_option("--impl", impls, "inproc, gloo, nccl (nccl is skipped without a GPU)")
      ->delimiter(',')->check(CLI::IsMember({"inproc", "gloo", "nccl"}));
  app.add_option("--ranks", ranks, "world sizes for inproc and gloo")->delimiter(',')->check(CLI::Range(1, 64));
  app.add_option("--nccl-ranks", nccl_ranks, "NCCL world size (0: every visible GPU)")->check(CLI::Range(0, 64));
  app.add_option("--ops", cfg.ops, "all_reduce, all_gather, reduce_scatter, all_to_all")
      ->delimiter(',')->check(CLI::IsMember({"all_reduce", "all_gather", "reduce_scatter", "all_to_all"}));
  app.add_option("--min-bytes", cfg.min_bytes, "smallest size (bytes)")->check(CLI::Range(int64_t{4}, int64_t{1} << 34));
  app.add_option("--max-bytes", cfg.max_bytes, "largest size (bytes)")->check(CLI::Range(int64_t{4}, int64_t{1} << 34));
  app.add_option("--factor", cfg.factor, "size multiplier between steps")->check(CLI::Range(2, 1024));
  app.add_option("--iters", cfg.iters, "timed calls per size")->check(CLI::Range(1, 100000));
  app.add_option("--warmup", cfg.warmup, "untimed calls per size")->check(CLI::Range(0, 100000));
  app.add_option("--timeout-ms", cfg.timeout_ms, "bound on every collective and on the rendezvous")
      ->check(CLI::Range(100, 3600000));
  app.add_option("--json", json_path, "write the rows as JSON here");
  app.add_flag("--tiny", tiny, "1-16 KiB, 2 ranks, 2 timed calls: checks the benchmark's own code (ctest)");
  app.add_option("--worker-rank", worker_rank)->group("");  // internal: a gloo worker process
  app.add_option("--worker-world", worker_world)->group("");
  app.add_option("--worker-port", worker_port)->group("");
  CLI11_PARSE(app, argc, argv);
  if (tiny) {  // explicit flags still win
    if (app.count("--ranks") == 0) ranks = {2};
    if (app.count("--max-bytes") == 0) cfg.max_bytes = 16 << 10;
    if (app.count("--iters") == 0) cfg.iters = 2;
    if (app.count("--warmup") == 0) cfg.warmup = 1;
  }
  if (cfg.min_bytes > cfg.max_bytes) {
    std::fprintf(stderr, "--min-bytes is above --max-bytes\n");
    return 2;
  }

  if (worker_rank >= 0) {  // a gloo rank started by RunGloo
    auto comm = CreateGlooCommunicator(LocalRendezvous(worker_port, worker_world, worker_rank, cfg.timeout_ms));
    std::vector<Row> none;
    tessera::Status st = comm.ok() ? Sweep(**comm, cfg, HostMemory(), "gloo", &none) : comm.status();
    if (!st.ok()) std::fprintf(stderr, "comm-bench worker %d: %s\n", worker_rank, st.ToString().c_str());
    return st.ok() ? 0 : 1;
  }

  std::vector<std::string> args(argv, argv + argc);
  std::vector<Row> rows;
  nlohmann::json skipped = nlohmann::json::array();
  std::printf("%-7s %-15s %5s %12s %12s %9s %9s\n", "impl", "op", "ranks", "size(B)", "time(us)", "algbw",
              "busbw");
  for (const std::string& impl : impls) {
    if (impl == "nccl") {
#ifdef TESSERA_HAVE_NCCL
      const int gpus = NcclDeviceCount();
      const int n = nccl_ranks > 0 ? nccl_ranks : gpus;
      if (gpus == 0 || n > gpus) {
        skipped.push_back({{"impl", "nccl"}, {"reason", gpus == 0 ? std::string("no GPU visible")
                                                                    : "needs " + std::to_string(n) + " GPUs, " +
                                                                          std::to_string(gpus) + " visible"}});
        continue;
      }
      if (tessera::Status st = RunNccl(n, cfg, &rows); !st.ok()) {
        std::fprintf(stderr, "nccl: %s\n", st.ToString().c_str());
        return 1;
      }
#else
      skipped.push_back({{"impl", "nccl"}, {"reason", "built without CUDA/NCCL"}});
#endif
      continue;
    }
    for (int n : ranks) {
      tessera::Status st = impl == "inproc" ? RunInProcess(n, cfg, &rows) : RunGloo(n, cfg, args, &rows);
      if (!st.ok()) {
        std::fprintf(stderr, "%s, %d ranks: %s\n", impl.c_str(), n, st.ToString().c_str());
        return 1;
      }
    }
  }
  for (const auto& s : skipped) std::printf("skipped: %s\n", s.dump().c_str());
  if (!json_path.empty()) {
    nlohmann::json j = {{"units", {{"size", "bytes of the largest per-rank buffer"},
                                   {"time_us", "mean over ranks of one call"},
                                   {"algbw_gb_s", "size / time, 1e9 B/s"},
                                   {"busbw_gb_s", "algbw * 2(n-1)/n for all_reduce, (n-1)/n otherwise"}}},
                        {"iters", cfg.iters}, {"warmup", cfg.warmup}, {"rows", nlohmann::json::array()},
                        {"skipped", skipped}};
    for (const Row& r : rows)
      j["rows"].push_back({{"impl", r.impl}, {"op", r.op}, {"ranks", r.ranks}, {"size", r.bytes},
                           {"time_us", r.time_us}, {"algbw_gb_s", r.algbw}, {"busbw_gb_s", r.busbw}});
    std::ofstream(json_path) << j.dump(1) << "\n";
  }
  return 0;
}

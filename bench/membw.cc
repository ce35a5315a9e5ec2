// tessera-membw: this machine's memory READ bandwidth for 1..N threads.
//
//   tessera-membw [--mib 1024] [--threads N] [--repeats 10] [--pages both|huge|4k]
//
// For each page kind, thread count and read kernel (bench/limits.h: plain AVX2
// loads into 8 accumulators, the same with software prefetch, and two interleaved
// streams per thread) it runs one warm-up pass and R timed passes over the buffer
// and prints one JSON line with the best and median GB/s, then one "limit" line per
// thread count and a human table.
//
// Why the best of all kernels and passes is the limit: a decode step's GEMV streams
// each weight byte once, and however it is written it cannot read memory faster
// than the fastest streaming read this machine sustains. A slower kernel or pass
// only shows a way to read slower (too few misses in flight, a prefetcher stopping
// at a page boundary, the host stealing the CPU mid-pass on a shared VM); none of
// them bounds the GEMV. Taking the best therefore gives the tightest ceiling we can
// show exists, and decode efficiency = bytes/step / step time / that ceiling is a
// conservative fraction. Medians are printed to show how noisy the machine is.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/limits.h"

namespace {

struct Row {
  std::string pages;
  int threads;
  std::string kernel;
  tessera::bench::ReadResult r;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace tessera::bench;
  CLI::App app{"Memory read bandwidth for 1..N threads"};
  int64_t mib = 1024;
  int max_threads = tessera::ThreadPool::HardwareThreads(), repeats = 10;
  std::string pages = "both";
  app.add_option("--mib", mib, "buffer size in MiB (>= 1024 recommended: far beyond the caches)")
      ->check(CLI::Range(int64_t{64}, int64_t{1} << 20));
  app.add_option("--threads", max_threads, "largest thread count (default: hardware threads)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--repeats", repeats, "timed passes per kernel and thread count")->check(CLI::Range(1, 1000));
  app.add_option("--pages", pages, "both | huge (transparent huge pages requested) | 4k")
      ->check(CLI::IsMember({"both", "huge", "4k"}));
  CLI11_PARSE(app, argc, argv);

  std::vector<bool> kinds;
  if (pages != "4k") kinds.push_back(true);
  if (pages != "huge") kinds.push_back(false);
  std::vector<Row> rows;
  for (bool huge : kinds) {
    ReadBuffer buf(static_cast<size_t>(mib) << 20, huge);
    if (!buf.ok()) {
      std::fprintf(stderr, "membw: cannot map %lld MiB\n", static_cast<long long>(mib));
      return 1;
    }
    for (int t = 1; t <= max_threads; ++t) {
      for (ReadKernel k : AllReadKernels()) {
        Row row{huge ? "huge" : "4k", t, ReadKernelName(k), MeasureReadKernel(buf, t, k, repeats)};
        std::printf("{\"tool\":\"membw\",\"pages\":\"%s\",\"threads\":%d,\"kernel\":\"%s\",\"mib\":%lld,"
                    "\"repeats\":%d,\"passes\":%d,\"clean_passes\":%d,\"pinned\":%s,\"best_gb_s\":%.2f,\"median_gb_s\":%.2f}\n",
                    row.pages.c_str(), t, row.kernel.c_str(), static_cast<long long>(mib), repeats, row.r.passes, row.r.clean_passes,
                    row.r.pinned ? "true" : "false", row.r.best / 1e9, row.r.median / 1e9);
        std::fflush(stdout);
        rows.push_back(row);
      }
    }
  }
  for (int t = 1; t <= max_threads; ++t) {
    const Row* best = nullptr;
    for (const Row& r : rows) {
      if (r.threads == t && (best == nullptr || r.r.best > best->r.best)) best = &r;
    }
    int clean = 0;
    for (const Row& r : rows) clean += r.threads == t ? r.r.clean_passes : 0;
    std::printf("{\"tool\":\"membw\",\"limit\":true,\"threads\":%d,\"read_bandwidth_gb_s\":%.2f,"
                "\"kernel\":\"%s\",\"pages\":\"%s\",\"clean_passes\":%d}\n",
                t, best->r.best / 1e9, best->kernel.c_str(), best->pages.c_str(), clean);
    if (clean == 0) {
      std::fprintf(stderr, "membw: no undisturbed pass at %d thread(s): other processes held the CPUs; "
                   "the figure is a lower bound\n", t);
    }
  }
  std::printf("\n%-6s %-8s %-15s %10s %12s %14s\n", "pages", "threads", "kernel", "best GB/s", "median GB/s",
              "clean/passes");
  for (const Row& r : rows) {
    std::printf("%-6s %-8d %-15s %10.2f %12.2f %8d/%d\n", r.pages.c_str(), r.threads, r.kernel.c_str(),
                r.r.best / 1e9, r.r.median / 1e9, r.r.clean_passes, r.r.passes);
  }
  return 0;
}

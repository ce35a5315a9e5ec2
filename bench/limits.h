// Hardware limits measured in the same run as a benchmark, so results can be
// stated as fractions of them (bench/RESULTS.md rule).
//
// Read bandwidth is the best of several streaming-read kernels (see bench/membw.cc
// for why the best, not a typical, kernel is the limit); tessera-membw prints every
// kernel, tessera-engine-bench uses MeasureReadBandwidth, which runs the same code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/thread_pool.h"

namespace tessera::bench {

// Streaming-read kernels; each reads its thread's slice once per pass with AVX2
// loads added into 8 independent accumulators (so no dependency chain limits it).
enum class ReadKernel {
  kSum,           // plain loads, hardware prefetchers only
  kPrefetchNear,  // plus prefetcht0 2 KiB ahead (starts each 4 KiB page early)
  kPrefetchFar,   // plus prefetcht1 16 KiB ahead (like the Linear GEMV's next-block prefetch)
  kTwoStreams,    // the slice split in halves read interleaved: 2 concurrent streams per thread
};
const std::vector<ReadKernel>& AllReadKernels();
const char* ReadKernelName(ReadKernel k);

// A 2 MiB-aligned anonymous buffer for read probes. With huge_pages it asks the
// kernel for transparent huge pages (madvise; silently 4 KiB pages where refused).
// Owns the mapping; not copyable.
class ReadBuffer {
 public:
  ReadBuffer(size_t bytes, bool huge_pages);
  ~ReadBuffer();
  ReadBuffer(const ReadBuffer&) = delete;
  ReadBuffer& operator=(const ReadBuffer&) = delete;
  bool ok() const { return data_ != nullptr; }
  const uint64_t* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  uint64_t* data_ = nullptr;
  size_t bytes_ = 0;
  size_t mapped_ = 0;
  void* unmap_base_ = nullptr;  // start of the mapping (data_ is aligned inside it)
};

struct ReadResult {
  double best = 0;       // bytes/s, fastest pass
  double median = 0;     // bytes/s, median of the undisturbed passes (of all when none was)
  int passes = 0;        // timed passes run
  int clean_passes = 0;  // of which undisturbed: every thread on a CPU >= 97% of the pass
  bool pinned = false;   // every thread got its own CPU
};

// Reads `buf` with `threads` fresh threads (each pinned to a distinct CPU of this
// process's affinity set where possible), each a contiguous slice: one warm-up
// pass, then timed passes until `repeats` were undisturbed (no thread lost its CPU
// to another process: shared machines), at most 4 x repeats. A pass lasts from the
// first thread's start to the last thread's end. Cost: up to (4 x repeats + 1) x
// buf.bytes() of reads.
ReadResult MeasureReadKernel(const ReadBuffer& buf, int threads, ReadKernel kernel, int repeats);

// Sustained read bandwidth in bytes/s on pool.num_threads() threads: the best pass
// of every ReadKernel over a `bytes` buffer (huge pages requested). The pool only
// sets the thread count; the probe runs on its own pinned threads.
double MeasureReadBandwidth(ThreadPool& pool, size_t bytes = size_t{1} << 30, int repeats = 5);

// Peak f32 FMA throughput in FLOP/s with AVX2 registers only (no memory), all
// pool threads. 0 when the CPU lacks AVX2/FMA.
double MeasureFmaPeak(ThreadPool& pool);

// Peak int8 multiply-accumulate rate in MAC/s with AVX2 registers only: the
// vpmaddubsw (u8 x s8 -> s16 pairs) + vpmaddwd (-> s32) + vpaddd sequence that
// quantized dot products use, counted as 32 MACs per vpmaddubsw on a ymm register;
// on a CPU with AVX-512 VNNI, the higher of that and a vpdpbusd zmm loop (64 MACs
// per instruction), since the quantized Linear then uses VNNI. All pool threads.
// 0 when the CPU lacks AVX2.
double MeasureInt8DotPeak(ThreadPool& pool);

}  // namespace tessera::bench

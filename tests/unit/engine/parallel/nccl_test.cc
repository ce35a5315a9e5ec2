// NCCL communicator on device buffers: world size 1 and, where several GPUs are
// visible, every GPU as a rank (threads). Skips without NCCL in the build or
// without a GPU. NCCL's sums are in its own order, so f32 sums are compared with
// a tolerance; data movement is compared bit for bit.
#include <gtest/gtest.h>

#ifdef TESSERA_HAVE_NCCL
#include <cuda_runtime.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <thread>

#include "engine/parallel/nccl_communicator.h"
#include "engine/parallel/store.h"
#include "tests/unit/engine/parallel/collective_checks.h"
#endif

namespace tessera::parallel {
namespace {

#ifdef TESSERA_HAVE_NCCL
struct Dev {  // a device buffer of f32 (or any 4-byte type)
  explicit Dev(size_t n) : n(n) { cudaMalloc(&p, n * 4 + 4); }
  ~Dev() { cudaFree(p); }
  void Put(const void* h) { cudaMemcpy(p, h, n * 4, cudaMemcpyHostToDevice); }
  template <typename T>
  std::vector<T> Get() {
    std::vector<T> v(n);
    cudaMemcpy(v.data(), p, n * 4, cudaMemcpyDeviceToHost);
    return v;
  }
  size_t n;
  void* p = nullptr;
};

// Returns "" or what failed, for rank `me` of `n` (device = rank).
std::string CheckOnDevice(Communicator& c) {
  const int n = c.world_size(), me = c.rank();
  cudaSetDevice(me);
  const uint64_t salt = 3;
  auto where = [&](const std::string& w) { return "rank " + std::to_string(me) + ": " + w; };
  {  // all-reduce f32: NCCL's order, so a tolerance relative to the sum of |x|
    const int64_t count = 1027;
    std::vector<float> h(count);
    for (int64_t i = 0; i < count; ++i) h[i] = testing::TestValue(me, i, salt);
    Dev in(count), out(count);
    in.Put(h.data());
    Status s = c.AllReduce(in.p, out.p, count, DType::kF32);
    if (!s.ok()) return where(s.ToString());
    auto got = out.Get<float>();
    for (int64_t i = 0; i < count; ++i) {
      double want = 0, mag = 0;
      for (int r = 0; r < n; ++r) {
        want += testing::TestValue(r, i, salt);
        mag += std::fabs(testing::TestValue(r, i, salt));
      }
      if (std::fabs(got[i] - want) > 1e-6 * mag) return where("all_reduce at " + std::to_string(i));
    }
  }
  {  // all-gather: exact
    const int64_t count = 33;
    std::vector<float> h(count);
    for (int64_t i = 0; i < count; ++i) h[i] = testing::TestValue(me, i, salt + 2);
    Dev in(count), out(count * n);
    in.Put(h.data());
    Status s = c.AllGather(in.p, out.p, count, DType::kF32);
    if (!s.ok()) return where(s.ToString());
    auto got = out.Get<float>();
    for (int r = 0; r < n; ++r)
      for (int64_t i = 0; i < count; ++i)
        if (got[r * count + i] != testing::TestValue(r, i, salt + 2)) return where("all_gather");
  }
  {  // all-to-all-v with zero counts: exact
    auto sends = [](int s, int d) { return static_cast<int64_t>((s + 2 * d) % 4); };
    std::vector<int64_t> sc(n), rc(n);
    std::vector<float> h;
    int64_t total = 0;
    for (int d = 0; d < n; ++d) {
      sc[d] = sends(me, d);
      rc[d] = sends(d, me);
      total += rc[d];
      for (int64_t j = 0; j < sc[d]; ++j) h.push_back(static_cast<float>(me * 10000 + d * 100 + j));
    }
    Dev in(h.size() + 1), out(total + 1);
    in.Put(h.data());
    Status s = c.AllToAllV(in.p, sc, out.p, rc, DType::kF32);
    if (!s.ok()) return where(s.ToString());
    auto got = out.Get<float>();
    int64_t k = 0;
    for (int src = 0; src < n; ++src)
      for (int64_t j = 0; j < rc[src]; ++j, ++k)
        if (got[k] != static_cast<float>(src * 10000 + me * 100 + j)) return where("all_to_all_v");
  }
  {  // broadcast from the last rank: exact
    std::vector<int32_t> h(100);
    for (int i = 0; i < 100; ++i) h[i] = me == n - 1 ? 7 * i + 3 : -1;
    Dev buf(100);
    buf.Put(h.data());
    Status s = c.Broadcast(buf.p, 100, DType::kI32, n - 1);
    if (!s.ok()) return where(s.ToString());
    auto got = buf.Get<int32_t>();
    for (int i = 0; i < 100; ++i)
      if (got[i] != 7 * i + 3) return where("broadcast");
  }
  Status s = c.Barrier();
  return s.ok() ? "" : where(s.ToString());
}
#endif

TEST(Nccl, EveryCollectiveOnDeviceBuffers) {
#ifndef TESSERA_HAVE_NCCL
  GTEST_SKIP() << "built without CUDA/NCCL";
#else
  const int gpus = NcclDeviceCount();
  if (gpus == 0) GTEST_SKIP() << "no CUDA device";
  for (int n : {1, gpus}) {
    if (n == 1 && gpus > 1) continue;
    const StatusOr<int> free_port = FreeLoopbackPort();
    ASSERT_TRUE(free_port.ok()) << free_port.status().ToString();
    const int port = *free_port;
    std::vector<std::string> res(n);
    std::vector<std::thread> ts;
    for (int r = 0; r < n; ++r)
      ts.emplace_back([&, r] {
        RendezvousOptions o;
        o.leader_host = "127.0.0.1";
        o.leader_port = port;
        o.world_size = n;
        o.rank = r;
        o.timeout = std::chrono::milliseconds(60000);
        auto comm = CreateNcclCommunicator(o, r);
        res[r] = comm.ok() ? CheckOnDevice(**comm) : comm.status().ToString();
      });
    for (auto& t : ts) t.join();
    for (int r = 0; r < n; ++r) EXPECT_EQ(res[r], "") << "world " << n << " rank " << r;
  }
#endif
}

TEST(Nccl, MissingDeviceIsAnError) {
#ifndef TESSERA_HAVE_NCCL
  GTEST_SKIP() << "built without CUDA/NCCL";
#else
  RendezvousOptions o;
  auto comm = CreateNcclCommunicator(o, NcclDeviceCount());  // one past the last device
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.status().message().find("no CUDA device"), std::string::npos) << comm.status().ToString();
#endif
}

}  // namespace
}  // namespace tessera::parallel

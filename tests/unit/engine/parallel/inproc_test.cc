// In-process ranks (threads): every collective against the serial oracle at 1, 2
// and 4 ranks, bitwise reproducibility, and the failure paths (missing rank,
// mismatched calls, bad arguments) returning errors instead of hanging.
#include "engine/parallel/inproc.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/unit/engine/parallel/collective_checks.h"

namespace tessera::parallel {
namespace {

// Runs fn(rank's communicator) on one thread per rank; returns each rank's result.
template <typename F>
std::vector<std::string> OnRanks(InProcessGroup& g, F fn) {
  std::vector<std::string> out(g.world_size());
  std::vector<std::thread> ts;
  for (int r = 0; r < g.world_size(); ++r) ts.emplace_back([&, r] { out[r] = fn(g.communicator(r)); });
  for (auto& t : ts) t.join();
  return out;
}

class InProcessRanks : public ::testing::TestWithParam<int> {};

TEST_P(InProcessRanks, EveryCollectiveMatchesSerialOracle) {
  auto g = InProcessGroup::Create(GetParam(), {std::chrono::milliseconds(10000)});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  for (uint64_t salt : {1ull, 99ull}) {
    auto res = OnRanks(**g, [&](Communicator& c) { return testing::CheckAllCollectives(c, salt); });
    for (int r = 0; r < GetParam(); ++r) EXPECT_EQ(res[r], "") << "rank " << r;
  }
}

TEST_P(InProcessRanks, AllReduceIsBitwiseReproducibleAcrossRuns) {
  const int n = GetParam();
  const int64_t count = 4099;
  std::vector<std::vector<float>> first;
  for (int run = 0; run < 3; ++run) {
    auto g = InProcessGroup::Create(n);
    ASSERT_TRUE(g.ok());
    std::vector<std::vector<float>> outs(n, std::vector<float>(count));
    OnRanks(**g, [&](Communicator& c) {
      std::vector<float> in(count);
      for (int64_t i = 0; i < count; ++i) in[i] = testing::TestValue(c.rank(), i, 5);
      Status s = c.AllReduce(in.data(), outs[c.rank()].data(), count, DType::kF32);
      return s.ok() ? std::string() : s.ToString();
    });
    for (int r = 1; r < n; ++r) ASSERT_EQ(0, std::memcmp(outs[0].data(), outs[r].data(), count * 4)) << "rank " << r;
    if (run == 0) first = outs;
    else ASSERT_EQ(0, std::memcmp(first[0].data(), outs[0].data(), count * 4)) << "run " << run;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, InProcessRanks, ::testing::Values(1, 2, 4));

TEST(InProcess, RankOrderMattersAndIsKept) {
  // ((1e8 + 1) - 1e8) + 1 in f32 is 1 (1e8 + 1 rounds to 1e8); the reverse order
  // gives 0 and pairwise (1e8 + 1) + (-1e8 + 1) gives 0: only rank order gives 1.
  auto g = InProcessGroup::Create(4);
  ASSERT_TRUE(g.ok());
  const float vals[4] = {1e8f, 1.f, -1e8f, 1.f};
  std::vector<float> got(4);
  OnRanks(**g, [&](Communicator& c) {
    float v = vals[c.rank()];
    Status s = c.AllReduce(&v, &got[c.rank()], 1, DType::kF32);
    return s.ToString();
  });
  for (float x : got) EXPECT_EQ(x, 1.f);
}

TEST(InProcess, MissingRankFailsWithinTimeoutNamingIt) {
  auto g = InProcessGroup::Create(4, {std::chrono::milliseconds(300)});
  ASSERT_TRUE(g.ok());
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Status> st(3);
  std::vector<std::thread> ts;
  for (int r = 0; r < 3; ++r)  // rank 3 never calls
    ts.emplace_back([&, r] {
      float x = 1.f, y = 0.f;
      st[r] = (*g)->communicator(r).AllReduce(&x, &y, 1, DType::kF32);
    });
  for (auto& t : ts) t.join();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(ms, 3000);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(st[r].code(), StatusCode::kDeadlineExceeded) << st[r].ToString();
    EXPECT_NE(st[r].message().find("rank(s) 3 did not arrive"), std::string::npos) << st[r].message();
  }
  // The group is broken: the late rank fails at once instead of waiting alone.
  float x = 1.f, y = 0.f;
  EXPECT_FALSE((*g)->communicator(3).AllReduce(&x, &y, 1, DType::kF32).ok());
}

TEST(InProcess, MismatchedCallsAreErrorsOnEveryRank) {
  auto g = InProcessGroup::Create(2, {std::chrono::milliseconds(2000)});
  ASSERT_TRUE(g.ok());
  auto res = OnRanks(**g, [&](Communicator& c) {
    std::vector<float> buf(8, 1.f), out(16);
    Status s = c.rank() == 0 ? c.AllReduce(buf.data(), out.data(), 8, DType::kF32)
                             : c.AllGather(buf.data(), out.data(), 8, DType::kF32);
    return s.ToString();
  });
  for (const auto& r : res) EXPECT_NE(r.find("INVALID_ARGUMENT: inproc: rank 1 called all_gather"), std::string::npos) << r;
}

TEST(InProcess, AllToAllCountsThatDisagreeAreErrors) {
  auto g = InProcessGroup::Create(2, {std::chrono::milliseconds(2000)});
  ASSERT_TRUE(g.ok());
  auto res = OnRanks(**g, [&](Communicator& c) {
    std::vector<float> in(8), out(8);
    std::vector<int64_t> sc = {1, 1}, rc = {1, c.rank() == 1 ? 3 : 1};  // rank 1 expects 3 from itself, sends 1
    return c.AllToAllV(in.data(), sc, out.data(), rc, DType::kF32).ToString();
  });
  for (const auto& r : res) EXPECT_NE(r.find("rank 1 sends 1 elements to rank 1 which expects 3"), std::string::npos) << r;
}

TEST(InProcess, UnmatchedSendTimesOut) {
  auto g = InProcessGroup::Create(2, {std::chrono::milliseconds(200)});
  ASSERT_TRUE(g.ok());
  float x = 1.f;
  Status s = (*g)->communicator(0).Send(&x, 1, DType::kF32, 1);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("rank 1 did not receive from rank 0"), std::string::npos) << s.message();
}

TEST(InProcess, RejectsBadArguments) {
  EXPECT_FALSE(InProcessGroup::Create(0).ok());
  auto g = InProcessGroup::Create(1);
  ASSERT_TRUE(g.ok());
  int32_t x = 1, y = 0;
  EXPECT_EQ((*g)->communicator(0).AllReduce(&x, &y, 1, DType::kI32).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::parallel

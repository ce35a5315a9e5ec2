// Gloo ranks as real processes on loopback: this binary re-runs itself with
// --gtest_filter=GlooChild.DISABLED_Rank and TESSERA_GLOO_CHILD set, one process
// per rank; the parent waits for them with a bound and kills leftovers by PID.
// Children write one result line to a file; the parent checks it.
#include "engine/parallel/gloo_communicator.h"
#include "engine/parallel/store.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "engine/model.h"
#include "engine/parallel/shard/model_shard.h"
#include "engine/parallel/shard/sharded_forward.h"
#include "engine/synth.h"
#include "tests/unit/engine/parallel/collective_checks.h"
#include "tests/unit/engine/parallel/model_steps.h"

extern char** environ;

namespace tessera::parallel {
namespace {

using Clock = std::chrono::steady_clock;

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct ChildResult {
  int rank;
  int exit_code = -1;  // -1: killed by a signal (term_signal says which)
  int term_signal = 0;
  std::string line;    // what the child wrote
  std::string log;     // its stdout and stderr
};

// Spawns `ranks` of a world of `world` processes running `scenario`; waits at most
// `limit` for all of them, then SIGKILLs the rest (a hang is a test failure).
std::vector<ChildResult> RunRanks(const std::string& scenario, int world, const std::vector<int>& ranks,
                                  int timeout_ms, std::chrono::milliseconds limit, bool* hung) {
  const StatusOr<int> free_port = FreeLoopbackPort();
  EXPECT_TRUE(free_port.ok()) << free_port.status().ToString();
  const int port = free_port.ok() ? *free_port : 0;
  const std::string dir = ::testing::TempDir();
  std::vector<pid_t> pids;
  std::vector<ChildResult> res;
  for (int r : ranks) {
    const std::string out = dir + "/gloo_child_" + std::to_string(::getpid()) + "_" + std::to_string(r);
    std::remove(out.c_str());
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    env.push_back("TESSERA_GLOO_CHILD=" + scenario + " " + std::to_string(r) + " " + std::to_string(world) + " " +
                  std::to_string(port) + " " + std::to_string(timeout_ms) + " " + out);
    std::vector<char*> envp;
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string self = "/proc/self/exe", filter = "--gtest_filter=GlooChild.DISABLED_Rank",
                also = "--gtest_also_run_disabled_tests";
    char* argv[] = {self.data(), filter.data(), also.data(), nullptr};
    // The child's gtest output goes to <out>.log, shown when its result is wrong.
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, (out + ".log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid = -1;
    EXPECT_EQ(0, posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv, envp.data()));
    posix_spawn_file_actions_destroy(&fa);
    pids.push_back(pid);
    res.push_back({r, -1, 0, out, ""});
  }
  *hung = false;
  const auto deadline = Clock::now() + limit;
  std::vector<bool> done(pids.size(), false);
  for (size_t left = pids.size(); left > 0;) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      if (::waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        done[i] = true;
        --left;
        if (WIFEXITED(status)) res[i].exit_code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) res[i].term_signal = WTERMSIG(status);
      }
    }
    if (left == 0) break;
    if (Clock::now() > deadline) {
      *hung = true;
      for (size_t i = 0; i < pids.size(); ++i)
        if (!done[i]) {
          ::kill(pids[i], SIGKILL);
          ::waitpid(pids[i], nullptr, 0);
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (auto& r : res) {
    const std::string path = r.line;
    r.line = ReadFile(path);
    r.log = ReadFile(path + ".log");
    std::remove(path.c_str());
    std::remove((path + ".log").c_str());
  }
  return res;
}

// ---- the child side: one rank, selected by TESSERA_GLOO_CHILD

TEST(GlooChild, DISABLED_Rank) {
  const char* spec = std::getenv("TESSERA_GLOO_CHILD");
  if (spec == nullptr) GTEST_SKIP() << "only run as a child rank of the Gloo tests";
  std::istringstream in(spec);
  std::string scenario, out;
  int rank = 0, world = 0, port = 0, timeout_ms = 0;
  in >> scenario >> rank >> world >> port >> timeout_ms >> out;
  std::ofstream result(out);
  RendezvousOptions o;
  o.leader_host = "127.0.0.1";
  o.leader_port = port;
  o.world_size = world;
  o.rank = rank;
  o.timeout = std::chrono::milliseconds(timeout_ms);
  auto comm = CreateGlooCommunicator(o);
  if (scenario == "never_join") {  // a rank is missing: joining must fail, in time
    ASSERT_FALSE(comm.ok());
    result << comm.status().ToString();
    return;
  }
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  Communicator& c = **comm;
  if (scenario == "all") {
    std::string err = testing::CheckAllCollectives(c, 7);
    result << (err.empty() ? "OK" : err);
    ASSERT_EQ(err, "");
    return;
  }
  if (scenario == "eplb" || scenario == "tp") {
    // The model in $TESSERA_GLOO_MODEL: expert parallelism with EPLB (a
    // rebalance after every step), or tensor parallelism.
    const std::string dir = std::getenv("TESSERA_GLOO_MODEL");
    ShardOptions ep;
    ep.world_size = world;
    ep.rank = rank;
    if (scenario == "eplb") {
      ep.expert_parallel = true;
      ep.data_parallel_attention = true;
      ep.eplb.enabled = true;
      ep.eplb.num_redundant_experts = world;
      ep.eplb.step_interval = 1;
      ep.eplb.window_size = 2;
    }
    ParallelSetup setup{ep, &c};
    auto backend = MakeCpuBackend({.num_threads = 1});
    auto m = Model::Load(dir, backend.get(), &setup);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    auto cache = (*m)->CreateKvCache(steps::kBlocks, steps::kBlockSize);
    std::ofstream bin(out + ".bin", std::ios::binary);
    for (const ForwardBatch& b : steps::BatchedSteps(static_cast<int>((*m)->config().vocab_size), false)) {
      std::vector<float> logits;
      Status st = ShardedForward(**m, b, cache->get(), &logits);
      ASSERT_TRUE(st.ok()) << st.ToString();
      bin.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * 4));
    }
    result << "OK rebalances=" << (*m)->shard()->rebalances() << " moved=" << (*m)->shard()->experts_moved();
    return;
  }
  if (scenario == "unmatched_send") {  // rank 0 sends, rank 1 never receives
    if (rank == 0) {
      float x = 1.f;
      const auto t0 = Clock::now();
      Status s = c.Send(&x, 1, DType::kF32, 1);
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      result << "after_ms=" << static_cast<int>(ms) << " " << s.ToString();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms * 2));
      result << "IDLE";
    }
    return;
  }
  ASSERT_TRUE(scenario == "killed" || scenario == "stuck") << scenario;
  // The last rank dies (SIGKILL) or stops taking part (alive, sockets open) in the
  // middle of a run of all-reduces.
  ASSERT_TRUE(c.Barrier().ok());
  std::vector<float> buf(1 << 16, 1.f);
  auto last_ok = Clock::now();
  for (int it = 0; it < 100000; ++it) {
    if (rank == world - 1 && it == 3) {
      if (scenario == "killed") ::kill(::getpid(), SIGKILL);
      // Stuck: alive with sockets open until the others have written their result
      // (their paths differ from ours only in the rank suffix), at most 30 s.
      const std::string prefix = out.substr(0, out.rfind('_') + 1);
      for (int waited = 0; waited < 3000; ++waited) {
        bool all = true;
        for (int r = 0; r < world - 1; ++r) all = all && !ReadFile(prefix + std::to_string(r)).empty();
        if (all) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      result << "STUCK RANK DONE";
      return;
    }
    Status s = c.AllReduce(buf.data(), buf.data(), static_cast<int64_t>(buf.size()), DType::kF32);
    if (!s.ok()) {
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - last_ok).count();
      Status again = c.Barrier();  // broken: fails at once with the first error
      result << "ERROR after_ms=" << static_cast<int>(ms) << " iter=" << it << " again_ok=" << again.ok() << " "
             << s.ToString();
      result.close();  // a stuck peer waits for this file
      return;
    }
    std::fill(buf.begin(), buf.end(), 1.f);
    last_ok = Clock::now();
  }
  result << "NO ERROR";
}

// ---- the parent side

void ExpectAllPass(int world) {
  bool hung = false;
  std::vector<int> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(r);
  auto res = RunRanks("all", world, ranks, 5000, std::chrono::milliseconds(20000), &hung);
  EXPECT_FALSE(hung);
  for (const auto& r : res) {
    EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank << "\n" << r.log;
    EXPECT_EQ(r.line, "OK") << "rank " << r.rank;
  }
}

TEST(Gloo, TwoProcessesEveryCollectiveMatchesSerialOracle) { ExpectAllPass(2); }
TEST(Gloo, FourProcessesEveryCollectiveMatchesSerialOracle) { ExpectAllPass(4); }

TEST(Gloo, RankThatNeverJoinsIsAnErrorWithinTheTimeout) {
  bool hung = false;
  const auto t0 = Clock::now();
  auto res = RunRanks("never_join", 3, {0, 1}, 1000, std::chrono::milliseconds(10000), &hung);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EXPECT_FALSE(hung);
  EXPECT_LT(ms, 1000 + 6000);  // the timeout plus process start-up on a loaded machine
  for (const auto& r : res) EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank << ": " << r.line << "\n" << r.log;
  EXPECT_NE(res[0].line.find("DEADLINE_EXCEEDED: rendezvous at 127.0.0.1:"), std::string::npos) << res[0].line;
  EXPECT_NE(res[0].line.find("rank(s) 2 never joined within 1000 ms"), std::string::npos) << res[0].line;
}

TEST(Gloo, RankKilledMidCollectiveGivesTheOthersAnErrorWithinTheTimeout) {
  bool hung = false;
  auto res = RunRanks("killed", 3, {0, 1, 2}, 2000, std::chrono::milliseconds(15000), &hung);
  EXPECT_FALSE(hung);
  EXPECT_EQ(res[2].term_signal, SIGKILL);
  for (int r = 0; r < 2; ++r) {
    // A survivor that writes to the dead rank's socket gets EPIPE, not SIGPIPE.
    EXPECT_EQ(res[r].exit_code, 0) << "rank " << r << " signal " << res[r].term_signal << "\n" << res[r].log;
    const std::string& l = res[r].line;
    ASSERT_EQ(l.rfind("ERROR after_ms=", 0), 0u) << "rank " << r << ": " << l;
    const int ms = std::atoi(l.c_str() + std::strlen("ERROR after_ms="));
    EXPECT_LE(ms, 2000 + 1000) << l;
    EXPECT_NE(l.find("again_ok=0"), std::string::npos) << l;
    EXPECT_NE(l.find("gloo all_reduce on rank " + std::to_string(r) + " of 3: a peer failed or exited (rank 2 ("),
              std::string::npos) << l;
  }
}

TEST(Gloo, RankThatStopsTakingPartGivesTheOthersADeadlineError) {
  bool hung = false;
  auto res = RunRanks("stuck", 3, {0, 1, 2}, 1000, std::chrono::milliseconds(15000), &hung);
  EXPECT_FALSE(hung);
  EXPECT_EQ(res[2].line, "STUCK RANK DONE");
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(res[r].exit_code, 0) << "rank " << r << "\n" << res[r].log;
    const std::string& l = res[r].line;
    ASSERT_EQ(l.rfind("ERROR after_ms=", 0), 0u) << "rank " << r << ": " << l;
    const int ms = std::atoi(l.c_str() + std::strlen("ERROR after_ms="));
    EXPECT_GE(ms, 900) << l;
    EXPECT_LE(ms, 1000 + 3000) << l;  // generous: CI runs tests in parallel
    EXPECT_NE(l.find("DEADLINE_EXCEEDED: gloo all_reduce on rank " + std::to_string(r) +
                     " of 3: a peer did not take part within 1000 ms"),
              std::string::npos) << l;
  }
}

// Rank 0's logits of a model run over Gloo processes: "eplb" (replicas and a
// rebalance after every step, so experts move between processes) must equal
// one rank's bit for bit; "tp" within f32 rounding (1e-4 of the largest logit).
void ExpectGlooModel(const std::string& scenario, const std::string& arch, int world) {
  tessera::testing::TempDir dir;
  SynthOptions o;
  o.arch = arch;
  o.dtype = DType::kBF16;
  o.out_dir = dir.path();
  o.router_skew = scenario == "eplb" ? 3.0 : 0.0;
  ASSERT_TRUE(WriteSyntheticCheckpoint(o).ok());
  std::string expected;
  {
    auto backend = MakeCpuBackend({.num_threads = 1});
    auto m = Model::Load(dir.path(), backend.get());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    auto cache = (*m)->CreateKvCache(steps::kBlocks, steps::kBlockSize);
    for (const ForwardBatch& b : steps::BatchedSteps(static_cast<int>((*m)->config().vocab_size), false)) {
      std::vector<float> logits;
      ASSERT_TRUE((*m)->Forward(b, cache->get(), &logits).ok());
      expected.append(reinterpret_cast<const char*>(logits.data()), logits.size() * 4);
    }
  }
  ::setenv("TESSERA_GLOO_MODEL", dir.path().c_str(), 1);
  std::vector<int> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(r);
  bool hung = false;
  // Results are read before RunRanks removes them: the logits go to <out>.bin,
  // which it leaves; find it by the line's path.
  const std::string bin = ::testing::TempDir() + "/gloo_child_" + std::to_string(::getpid()) + "_0.bin";
  auto res = RunRanks(scenario, world, ranks, 10000, std::chrono::milliseconds(30000), &hung);
  ::unsetenv("TESSERA_GLOO_MODEL");
  EXPECT_FALSE(hung);
  const std::string ok = scenario == "eplb" ? "OK rebalances=3 moved=" : "OK rebalances=0 moved=0";
  for (const auto& r : res) {
    EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank << "\n" << r.log;
    EXPECT_EQ(r.line.rfind(ok, 0), 0u) << "rank " << r.rank << ": " << r.line;
  }
  if (scenario == "eplb") {
    EXPECT_EQ(res[0].line.find(" moved=0"), std::string::npos) << "the rebalances should have moved experts";
  }
  const std::string got = ReadFile(bin);
  std::remove(bin.c_str());
  for (int r = 1; r < world; ++r) std::remove((::testing::TempDir() + "/gloo_child_" + std::to_string(::getpid()) +
                                               "_" + std::to_string(r) + ".bin").c_str());
  ASSERT_EQ(got.size(), expected.size());
  if (scenario == "eplb") {
    EXPECT_TRUE(got == expected) << "EP+EPLB logits over Gloo differ from one rank's";
    return;
  }
  std::vector<float> a(expected.size() / 4), b(got.size() / 4);
  std::memcpy(a.data(), expected.data(), expected.size());
  std::memcpy(b.data(), got.data(), got.size());
  float scale = 1, diff = 0;
  for (size_t i = 0; i < a.size(); ++i) scale = std::max(scale, std::abs(a[i])), diff = std::max(diff, std::abs(a[i] - b[i]));
  EXPECT_LE(diff, 1e-4f * scale) << "TP logits over Gloo";
}

TEST(Gloo, TwoProcessesExpertParallelWithEplbBitwiseEqualOneRankMixtral) { ExpectGlooModel("eplb", "mixtral", 2); }
TEST(Gloo, FourProcessesExpertParallelWithEplbBitwiseEqualOneRankMixtral) { ExpectGlooModel("eplb", "mixtral", 4); }
TEST(Gloo, TwoProcessesExpertParallelWithEplbBitwiseEqualOneRankQwen2Moe) { ExpectGlooModel("eplb", "qwen2_moe", 2); }
TEST(Gloo, FourProcessesExpertParallelWithEplbBitwiseEqualOneRankQwen3Moe) { ExpectGlooModel("eplb", "qwen3_moe", 4); }
TEST(Gloo, TwoProcessesTensorParallelWithinToleranceOfOneRank) { ExpectGlooModel("tp", "qwen3", 2); }
TEST(Gloo, FourProcessesTensorParallelWithinToleranceOfOneRank) { ExpectGlooModel("tp", "llama", 4); }

TEST(Gloo, UnmatchedSendFailsAtTheTimeout) {
  bool hung = false;
  auto res = RunRanks("unmatched_send", 2, {0, 1}, 500, std::chrono::milliseconds(10000), &hung);
  EXPECT_FALSE(hung);
  const std::string& l = res[0].line;
  ASSERT_EQ(l.rfind("after_ms=", 0), 0u) << l;
  const int ms = std::atoi(l.c_str() + std::strlen("after_ms="));
  EXPECT_GE(ms, 450) << l;
  EXPECT_LE(ms, 500 + 3000) << l;
  EXPECT_NE(l.find("DEADLINE_EXCEEDED: gloo send on rank 0 of 2 (peer rank 1)"), std::string::npos) << l;
}

}  // namespace
}  // namespace tessera::parallel

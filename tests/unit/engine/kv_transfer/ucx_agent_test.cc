// UcxAgent::Get against a peer process that stops answering: this binary
// re-runs itself as the peer (--gtest_filter=UcxAgentPeer.DISABLED_Serve with
// TESSERA_UCX_PEER set), which registers a buffer, writes its worker address
// and remote key to a file and waits; the parent reads from it over UCX tcp,
// freezes it with SIGSTOP and reads again. The parent kills the peer by PID.
#include "engine/kv_transfer/ucx_agent.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

extern char** environ;

namespace tessera {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kPeerBytes = 4 << 20;  // far more than the kernel's socket buffers hold

std::string Hex(const std::string& bytes) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += d[c >> 4];
    out += d[c & 15];
  }
  return out;
}

std::string Unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

// ---- the peer: selected by TESSERA_UCX_PEER=<file to write>

TEST(UcxAgentPeer, DISABLED_Serve) {
  const char* out = std::getenv("TESSERA_UCX_PEER");
  if (out == nullptr) GTEST_SKIP() << "only run as the peer process of the UcxAgent tests";
  auto agent = UcxAgent::Create({.tls = "tcp", .host = "127.0.0.1"});
  ASSERT_TRUE(agent.ok()) << agent.status().ToString();
  std::vector<char> buf(kPeerBytes, 'p');
  auto region = (*agent)->Register(buf.data(), buf.size());
  ASSERT_TRUE(region.ok()) << region.status().ToString();
  {
    std::ofstream f(std::string(out) + ".tmp");
    f << Hex((*agent)->worker_address()) << " " << region->base << " " << Hex(region->rkey) << "\n";
  }
  std::rename((std::string(out) + ".tmp").c_str(), out);
  std::this_thread::sleep_for(60s);  // the parent kills it long before
}

// ---- the parent

struct Peer {
  pid_t pid = -1;
  std::string address;
  UcxRegion region;

  ~Peer() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

// Starts the peer process and waits (bounded) for what it wrote.
void StartPeer(Peer* peer) {
  static int started = 0;
  const std::string file =
      ::testing::TempDir() + "/ucx_peer_" + std::to_string(::getpid()) + "_" + std::to_string(started++);
  std::remove(file.c_str());
  std::string self = "/proc/self/exe", filter = "--gtest_filter=UcxAgentPeer.DISABLED_Serve",
              also = "--gtest_also_run_disabled_tests", marker = "TESSERA_UCX_PEER=" + file;
  char* argv[] = {self.data(), filter.data(), also.data(), nullptr};
  std::vector<char*> envp;  // this process's environment and the marker
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  envp.push_back(marker.data());
  envp.push_back(nullptr);
  // The peer's gtest output goes to <file>.log, shown when it wrote no address.
  const std::string log = file + ".log";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  const int spawned = posix_spawn(&peer->pid, "/proc/self/exe", &fa, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  ASSERT_EQ(0, spawned);
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  std::string line;
  while (line.empty()) {
    auto peer_log = [&] {
      std::ifstream f(log);
      return std::string(std::istreambuf_iterator<char>(f), {});
    };
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the peer wrote no address within 30 s:\n" << peer_log();
    ASSERT_NE(::waitpid(peer->pid, nullptr, WNOHANG), peer->pid) << "the peer exited:\n" << peer_log();
    std::ifstream f(file);
    std::getline(f, line);
    if (line.empty()) std::this_thread::sleep_for(10ms);
  }
  std::remove(file.c_str());
  std::remove(log.c_str());
  std::istringstream in(line);
  std::string address, rkey;
  in >> address >> peer->region.base >> rkey;
  peer->address = Unhex(address);
  peer->region.rkey = Unhex(rkey);
}

// A GET that a frozen peer never serves (TCP emulates GET with messages the
// target's worker must answer) ends at its deadline: ucp_request_cancel does
// not cancel RMA requests, so without closing the endpoint the read would run
// until the peer woke. Once Get returned, the destination is the caller's
// again: the peer, woken, writes nothing more into it.
TEST(UcxAgentTest, GetEndsAtItsDeadlineWhenThePeerIsFrozen) {
  Peer peer;
  ASSERT_NO_FATAL_FAILURE(StartPeer(&peer));
  auto agent = UcxAgent::Create({.tls = "tcp", .host = "127.0.0.1"});
  ASSERT_TRUE(agent.ok()) << agent.status().ToString();
  std::vector<char> local(kPeerBytes, 0);
  // The peer answers: the endpoint is up and the bytes arrive.
  Status first = (*agent)->Get(peer.address, {peer.region}, {{0, peer.region.base, local.data(), 4096}}, 10s);
  ASSERT_TRUE(first.ok()) << first.ToString();
  ASSERT_EQ(local[0], 'p');
  ASSERT_EQ(local[4095], 'p');

  std::fill(local.begin(), local.end(), 0);
  ASSERT_EQ(0, ::kill(peer.pid, SIGSTOP));
  int st = 0;  // every thread of the peer has stopped (kill returns before they do)
  ASSERT_EQ(::waitpid(peer.pid, &st, WUNTRACED), peer.pid);
  ASSERT_TRUE(WIFSTOPPED(st));
  auto frozen = std::async(std::launch::async, [&] {
    return (*agent)->Get(peer.address, {peer.region}, {{0, peer.region.base, local.data(), kPeerBytes}}, 300ms);
  });
  const bool ended = frozen.wait_for(5s) == std::future_status::ready;
  if (!ended) ::kill(peer.pid, SIGKILL);  // a dead peer ends the read: the test fails rather than hangs
  const Status s = frozen.get();
  EXPECT_TRUE(ended) << "Get ran on 5 s past its 300 ms deadline";
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();

  // Woken, the peer gets to answer the abandoned reads: none of it may land.
  const std::vector<char> after = local;
  ::kill(peer.pid, SIGCONT);
  std::this_thread::sleep_for(200ms);
  EXPECT_TRUE(local == after) << "bytes landed in the destination after Get returned";
}

// A peer that dies between reads (killed, scaled down, restarted under a new
// worker address) leaves no endpoint behind: UCX reports the broken
// connection, and the next read, from another peer, closes its endpoint.
TEST(UcxAgentTest, APeerThatDiesBetweenReadsLeavesNoEndpoint) {
  Peer gone, other;
  ASSERT_NO_FATAL_FAILURE(StartPeer(&gone));
  ASSERT_NO_FATAL_FAILURE(StartPeer(&other));
  auto agent = UcxAgent::Create({.tls = "tcp", .host = "127.0.0.1"});
  ASSERT_TRUE(agent.ok()) << agent.status().ToString();
  std::vector<char> local(4096, 0);
  auto read = [&](const Peer& peer) {
    return (*agent)->Get(peer.address, {peer.region}, {{0, peer.region.base, local.data(), local.size()}}, 10s);
  };
  ASSERT_TRUE(read(gone).ok());
  ASSERT_TRUE(read(other).ok());
  ASSERT_EQ((*agent)->num_peers(), 2u);
  ::kill(gone.pid, SIGKILL);
  ::waitpid(gone.pid, nullptr, 0);
  gone.pid = -1;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while ((*agent)->num_peers() != 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);  // UCX notices the closed connection on its progress thread
    ASSERT_TRUE(read(other).ok());
  }
  EXPECT_EQ((*agent)->num_peers(), 1u) << "the dead peer's endpoint is still cached 5 s after it died";
}

}  // namespace
}  // namespace tessera

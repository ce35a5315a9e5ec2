// Rendezvous options (flags and LeaderWorkerSet environment) and the TCP store.
#include "engine/parallel/rendezvous.h"

#include <gtest/gtest.h>

#include <map>
#include <thread>

namespace tessera::parallel {
namespace {

GetEnvFn Env(std::map<std::string, std::string> m) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(m));
  return [shared](const char* n) -> const char* {
    auto it = shared->find(n);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

TEST(Rendezvous, SingleNodeDefaults) {
  LaunchOptions l;
  l.ranks_per_node = 4;
  l.local_rank = 2;
  auto o = ResolveRendezvous(l, Env({}));
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->leader_host, "127.0.0.1");
  EXPECT_EQ(o->leader_port, kDefaultRendezvousPort);
  EXPECT_EQ(o->world_size, 4);
  EXPECT_EQ(o->rank, 2);
}

TEST(Rendezvous, FlagsGiveNodeRankAndWorld) {
  LaunchOptions l;
  l.nnodes = 3;
  l.node_rank = 2;
  l.leader_addr = "10.0.0.5:1234";
  l.ranks_per_node = 2;
  l.local_rank = 1;
  auto o = ResolveRendezvous(l, Env({{"LWS_GROUP_SIZE", "9"}, {"LWS_WORKER_INDEX", "7"}}));  // flags win
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->leader_host, "10.0.0.5");
  EXPECT_EQ(o->leader_port, 1234);
  EXPECT_EQ(o->world_size, 6);
  EXPECT_EQ(o->rank, 5);
}

TEST(Rendezvous, LeaderWorkerSetEnvironment) {
  LaunchOptions l;
  l.ranks_per_node = 2;
  auto o = ResolveRendezvous(l, Env({{"LWS_LEADER_ADDRESS", "grp-0.grp.ns"},
                                     {"LWS_GROUP_SIZE", "4"},
                                     {"LWS_WORKER_INDEX", "3"}}));
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->leader_host, "grp-0.grp.ns");
  EXPECT_EQ(o->leader_port, kDefaultRendezvousPort);
  EXPECT_EQ(o->nnodes, 4);
  EXPECT_EQ(o->node_rank, 3);
  EXPECT_EQ(o->world_size, 8);
  EXPECT_EQ(o->rank, 6);
}

TEST(Rendezvous, InvalidOptionsAreClearErrors) {
  LaunchOptions l;
  l.nnodes = 2;
  auto o = ResolveRendezvous(l, Env({}));
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("needs --leader-addr"), std::string::npos);
  l.leader_addr = "h:99999";
  EXPECT_FALSE(ResolveRendezvous(l, Env({})).ok());
  l.leader_addr = "h:80";
  l.node_rank = 2;
  EXPECT_NE(ResolveRendezvous(l, Env({})).status().message().find("is not below --nnodes"), std::string::npos);
  LaunchOptions e;
  auto bad = ResolveRendezvous(e, Env({{"LWS_WORKER_INDEX", "x1"}}));
  EXPECT_NE(bad.status().message().find("LWS_WORKER_INDEX='x1'"), std::string::npos);
}

TEST(TcpStore, SetGetCreateWait) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const int port = (*server)->port();
  auto a = TcpStore::Connect("127.0.0.1", port, std::chrono::milliseconds(2000));
  auto b = TcpStore::Connect("127.0.0.1", port, std::chrono::milliseconds(2000));
  ASSERT_TRUE(a.ok() && b.ok());
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE((*b)->Set("k", {'v', '1'}).ok());
  });
  auto v = (*a)->Get("k", std::chrono::milliseconds(2000));  // waits for b's Set
  later.join();
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(std::string(v->begin(), v->end()), "v1");
  EXPECT_TRUE(*(*a)->Create("c", {'x'}));
  EXPECT_FALSE(*(*b)->Create("c", {'y'}));
  EXPECT_EQ(std::string(1, (*b)->Get("c", std::chrono::milliseconds(10))->front()), "x");
  Status w = (*a)->Wait({"k", "never"}, std::chrono::milliseconds(100));
  EXPECT_EQ(w.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(w.message().find("'never'"), std::string::npos) << w.message();
  EXPECT_EQ(w.message().find("'k'"), std::string::npos) << w.message();
}

TEST(TcpStore, UnreachableLeaderIsAnErrorAfterTheTimeout) {
  auto probe = TcpStoreServer::Start("127.0.0.1", 0);  // a port that is then closed
  ASSERT_TRUE(probe.ok());
  const int port = (*probe)->port();
  probe->reset();
  const auto t0 = std::chrono::steady_clock::now();
  auto c = TcpStore::Connect("127.0.0.1", port, std::chrono::milliseconds(300));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(c.status().message().find("cannot reach the rendezvous store"), std::string::npos);
  EXPECT_LT(ms, 2000);
}

TEST(Rendezvous, ThreadsJoinAndAMissingRankIsNamed) {
  auto probe = TcpStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(probe.ok());
  const int port = (*probe)->port();
  probe->reset();
  std::vector<Status> st(3);
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r)  // world size 3, rank 2 never comes
    ts.emplace_back([&, r] {
      RendezvousOptions o;
      o.leader_host = "127.0.0.1";
      o.leader_port = port;
      o.world_size = 3;
      o.rank = r;
      o.timeout = std::chrono::milliseconds(400);
      st[r] = JoinRendezvous(o).status();
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(st[0].code(), StatusCode::kDeadlineExceeded) << st[0].ToString();
  EXPECT_NE(st[0].message().find("rank(s) 2 never joined"), std::string::npos) << st[0].message();
  // Rank 1 either times out the same way or sees the leader's store go away first.
  EXPECT_FALSE(st[1].ok());
  EXPECT_TRUE(st[1].message().find("rank(s) 2 never joined") != std::string::npos ||
              st[1].code() == StatusCode::kUnavailable) << st[1].ToString();
}

}  // namespace
}  // namespace tessera::parallel

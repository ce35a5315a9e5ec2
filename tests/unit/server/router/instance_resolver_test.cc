// The router's DNS expansion of instance names (headless Services): IP entries
// pass through, names become every address, re-resolved after the interval, a
// failed lookup keeps the last addresses; and the registry follows a name.
#include "server/router/instance_resolver.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "server/router/instance_registry.h"

namespace tessera {
namespace {

using std::chrono::milliseconds;
using Strings = std::vector<std::string>;

struct FakeDns {
  std::map<std::string, Strings> records;
  int lookups = 0;
  InstanceResolver::ResolveFn Fn() {
    return [this](const std::string& host) -> StatusOr<Strings> {
      ++lookups;
      auto it = records.find(host);
      if (it == records.end()) return Status(StatusCode::kUnavailable, "NXDOMAIN " + host);
      return it->second;
    };
  }
};

TEST(InstanceResolverTest, IpLiteralsPassThroughNamesExpandToEveryAddress) {
  FakeDns dns;
  dns.records["decode.llm.svc"] = {"10.0.0.7", "10.0.0.3"};
  InstanceResolver r(milliseconds(5000), dns.Fn());
  auto got = r.Expand({"127.0.0.1:8001", "decode.llm.svc:8000", "[::1]:9000", "10.0.0.3:8000"}, "--decode-instances");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, (Strings{"127.0.0.1:8001", "10.0.0.3:8000", "10.0.0.7:8000", "[::1]:9000"}));
  EXPECT_EQ(dns.lookups, 1);  // literals are never looked up
}

TEST(InstanceResolverTest, PrefersIpv4AndFallsBackToIpv6) {
  FakeDns dns;
  dns.records["dual"] = {"::1", "127.0.0.1"};
  dns.records["v6only"] = {"fd00::2", "fd00::1"};
  InstanceResolver r(milliseconds(5000), dns.Fn());
  auto got = r.Expand({"dual:80", "v6only:81"}, "x");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, (Strings{"127.0.0.1:80", "[fd00::1]:81", "[fd00::2]:81"}));
}

TEST(InstanceResolverTest, ReResolvesAfterTheIntervalAndKeepsAddressesOnFailure) {
  FakeDns dns;
  dns.records["prefill"] = {"10.1.0.1"};
  InstanceResolver r(milliseconds(1000), dns.Fn());
  const auto t0 = InstanceResolver::Clock::now();
  EXPECT_EQ(*r.Expand({"prefill:8000"}, "x", t0), Strings{"10.1.0.1:8000"});
  dns.records["prefill"] = {"10.1.0.1", "10.1.0.2"};  // a pod joined
  EXPECT_FALSE(r.Due(t0 + milliseconds(500)));
  EXPECT_EQ(*r.Expand({"prefill:8000"}, "x", t0 + milliseconds(500)), Strings{"10.1.0.1:8000"});  // cached
  EXPECT_TRUE(r.Due(t0 + milliseconds(1000)));
  EXPECT_EQ(*r.Expand({"prefill:8000"}, "x", t0 + milliseconds(1000)),
            (Strings{"10.1.0.1:8000", "10.1.0.2:8000"}));
  dns.records.erase("prefill");  // DNS down: the last answer stands
  EXPECT_EQ(*r.Expand({"prefill:8000"}, "x", t0 + milliseconds(2000)),
            (Strings{"10.1.0.1:8000", "10.1.0.2:8000"}));
  dns.records["prefill"] = {"10.1.0.2"};  // a pod left
  EXPECT_EQ(*r.Expand({"prefill:8000"}, "x", t0 + milliseconds(3000)), Strings{"10.1.0.2:8000"});
}

TEST(InstanceResolverTest, UnknownNameYieldsNothingAndBadEntriesFail) {
  FakeDns dns;
  InstanceResolver r(milliseconds(1000), dns.Fn());
  auto got = r.Expand({"nowhere:8000"}, "x");
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->empty());
  EXPECT_FALSE(r.Expand({"no-port"}, "--decode-instances").ok());
  EXPECT_FALSE(r.Expand({"host:99999"}, "--decode-instances").ok());
}

TEST(InstanceResolverTest, SystemResolverFindsLocalhost) {
  auto a = ResolveHostAddresses("localhost");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_NE(std::find(a->begin(), a->end(), "127.0.0.1"), a->end());
}

TEST(InstanceResolverTest, RegistryListsTheAddressesOfANamedInstance) {
  InstanceRegistry::Options o;
  o.decode = {"localhost:1", "127.0.0.1:2"};  // nothing listens: the instances just go unhealthy
  o.prefill = {"localhost:3"};
  auto reg = InstanceRegistry::Create(o);
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  Strings addresses;
  for (const InstanceSnapshot& s : (*reg)->Snapshot()) {
    addresses.push_back(std::string(InstanceRoleName(s.role)) + "/" + s.ref.address);
  }
  std::sort(addresses.begin(), addresses.end());
  EXPECT_EQ(addresses, (Strings{"decode/127.0.0.1:1", "decode/127.0.0.1:2", "prefill/127.0.0.1:3"}));
}

}  // namespace
}  // namespace tessera

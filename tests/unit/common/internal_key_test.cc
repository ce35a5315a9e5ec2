// The deployment credential (common/internal_key.h): reading the file,
// HMAC-SHA256 against RFC 4231, derived keys, constant-time comparison and
// loopback hosts.
#include "common/internal_key.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace tessera {
namespace {

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path) << text;
  return path;
}

TEST(InternalKey, ReadsTheFirstLineTrimmedAndRefusesShortKeys) {
  const std::string ok = WriteTemp("tessera-key-ok", "  0123456789abcdef0123 \nsecond line\n");
  EXPECT_EQ(ReadInternalKeyFile(ok).value(), "0123456789abcdef0123");
  const std::string shorty = WriteTemp("tessera-key-short", "short\n");
  StatusOr<std::string> s = ReadInternalKeyFile(shorty);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--internal-api-key-file"), std::string::npos);
  EXPECT_FALSE(ReadInternalKeyFile("/nonexistent/tessera.key").ok());
  // What cannot go in an Authorization header is refused naming the flag.
  for (const std::string& bad : {std::string("two words 0123456789\n"), std::string("tab\tinside0123456789"),
                                 std::string("caf\xc3\xa9-0123456789abcdef"), std::string("a\x01z0123456789abcdef")}) {
    const std::string p = WriteTemp("tessera-key-bad", bad);
    StatusOr<std::string> k = ReadInternalKeyFile(p);
    ASSERT_FALSE(k.ok()) << bad;
    EXPECT_NE(k.status().message().find("--internal-api-key-file"), std::string::npos);
    std::remove(p.c_str());
  }
  const std::string crlf = WriteTemp("tessera-key-crlf", "0123456789abcdef0123\r\nsecond line\n");
  EXPECT_EQ(ReadInternalKeyFile(crlf).value(), "0123456789abcdef0123");
  std::remove(crlf.c_str());
  std::remove(ok.c_str());
  std::remove(shorty.c_str());
}

TEST(InternalKey, HmacMatchesRfc4231AndDerivedKeysDiffer) {
  EXPECT_EQ(HmacSha256Hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  const std::string a = DeriveInternalKey("k-0123456789abcdef", "one");
  EXPECT_EQ(a.size(), 32u);
  EXPECT_EQ(a, DeriveInternalKey("k-0123456789abcdef", "one"));
  EXPECT_NE(a, DeriveInternalKey("k-0123456789abcdef", "two"));
  EXPECT_NE(a, DeriveInternalKey("k-0123456789abcdeF", "one"));
}

TEST(InternalKey, ConstantTimeEqualsAndLoopback) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abcd"));
  for (const char* h : {"127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"}) EXPECT_TRUE(IsLoopbackHost(h)) << h;
  for (const char* h : {"0.0.0.0", "10.0.0.1", "::", "example.com", "", "128.0.0.1"}) {
    EXPECT_FALSE(IsLoopbackHost(h)) << h;
  }
}

}  // namespace
}  // namespace tessera

// --internal-api-key-file: the first line is the key; what cannot go in an
// Authorization header is refused naming the flag.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "server/router/router.h"

namespace tessera {
namespace {

class InternalApiKeyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tessera-key-XXXXXX";
    const int fd = mkstemp(tmpl);
    ASSERT_GE(fd, 0);
    close(fd);
    path_ = tmpl;
  }
  void TearDown() override { std::remove(path_.c_str()); }
  StatusOr<std::string> Read(const std::string& content) {
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << content;
    return ReadInternalApiKey(path_);
  }
  std::string path_;
};

TEST_F(InternalApiKeyTest, FirstLineWithoutItsLineEnd) {
  EXPECT_EQ(Read("sk-internal\n").value(), "sk-internal");
  EXPECT_EQ(Read("sk-internal\r\nignored second line\n").value(), "sk-internal");
  EXPECT_EQ(Read("sk-internal  \t").value(), "sk-internal");
  EXPECT_EQ(Read("k").value(), "k");
}

TEST_F(InternalApiKeyTest, RefusesWhatCannotBeAHeaderValue) {
  for (const std::string& bad : {std::string(""), std::string("\nkey\n"), std::string("two words\n"),
                                std::string("tab\tinside"), std::string("caf\xc3\xa9"), std::string("a\x01z")}) {
    StatusOr<std::string> k = Read(bad);
    ASSERT_FALSE(k.ok()) << bad;
    EXPECT_EQ(k.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(k.status().message().find("--internal-api-key-file"), std::string::npos) << k.status().message();
  }
  StatusOr<std::string> missing = ReadInternalApiKey(path_ + ".missing");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cannot read"), std::string::npos);
}

}  // namespace
}  // namespace tessera

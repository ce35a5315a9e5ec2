#include "server/record/request_log.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace tessera::record {
namespace {

namespace fs = std::filesystem;

class RequestLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera-request-log-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string Read(const fs::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  fs::path dir_;
};

TEST_F(RequestLogTest, WritesLinesInOrderWithMode0600) {
  {
    auto log = RequestLog::Open({.dir = dir_.string()});
    ASSERT_TRUE(log.ok()) << log.status().ToString();
    for (int i = 0; i < 5; ++i) (*log)->Append("{\"i\":" + std::to_string(i) + "}");
  }  // the destructor writes what is queued
  const auto files = RequestLog::RequestFiles(dir_.string());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].filename(), "requests-000001.jsonl");
  EXPECT_EQ(Read(files[0]), "{\"i\":0}\n{\"i\":1}\n{\"i\":2}\n{\"i\":3}\n{\"i\":4}\n");
  struct stat st {};
  ASSERT_EQ(::stat(files[0].c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(RequestLogTest, RotatesDeletesTheOldestAndContinuesNumberingAfterARestart) {
  const std::string line(1000, 'x');  // 1001 bytes with its newline: 4 per 4 KiB file
  {
    auto log = RequestLog::Open({.dir = dir_.string(), .max_bytes = 16384, .file_bytes = 4096});
    ASSERT_TRUE(log.ok());
    for (int i = 0; i < 40; ++i) (*log)->Append(line);
    log->reset();
  }
  auto files = RequestLog::RequestFiles(dir_.string());
  ASSERT_EQ(files.size(), 4u);  // 10 written, the open one counted at its bound: 3 + 1 kept
  EXPECT_EQ(files.front().filename(), "requests-000007.jsonl");
  EXPECT_EQ(files.back().filename(), "requests-000010.jsonl");
  uint64_t total = 0;
  for (const auto& f : files) total += fs::file_size(f);
  EXPECT_LE(total, 16384u);
  {
    auto log = RequestLog::Open({.dir = dir_.string(), .max_bytes = 16384, .file_bytes = 4096});
    ASSERT_TRUE(log.ok());
    (*log)->Append("{}");
    log->reset();
  }
  files = RequestLog::RequestFiles(dir_.string());
  EXPECT_EQ(files.back().filename(), "requests-000011.jsonl");
  EXPECT_EQ(Read(files.back()), "{}\n");
}

TEST_F(RequestLogTest, RefusesWhatCannotWork) {
  EXPECT_FALSE(RequestLog::Open({.dir = ""}).ok());
  EXPECT_NE(RequestLog::Open({.dir = dir_.string(), .max_bytes = 100}).status().message().find("--record-max-mb"),
            std::string::npos);
  fs::create_directories(dir_);
  std::ofstream(dir_ / "file") << "x";
  EXPECT_NE(RequestLog::Open({.dir = (dir_ / "file").string()}).status().message().find("--record"),
            std::string::npos);
  // Other names in the directory are not request files.
  std::ofstream(dir_ / "requests-x.jsonl") << "x";
  std::ofstream(dir_ / "serve.toml") << "x";
  EXPECT_TRUE(RequestLog::RequestFiles(dir_.string()).empty());
}

}  // namespace
}  // namespace tessera::record

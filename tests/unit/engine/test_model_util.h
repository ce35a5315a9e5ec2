// Helpers for engine tests: synthetic checkpoints in temp dirs.
#pragma once

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/synth.h"

namespace tessera::testing {

// A fresh temp directory removed at destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tessera_test_XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Writes a tiny synthetic checkpoint; fails the test on error.
inline std::string MakeTinyModel(const std::string& dir, const std::string& arch, DType dtype,
                                 std::vector<std::string> overrides = {}) {
  SynthOptions o;
  o.arch = arch;
  o.size = "tiny";
  o.dtype = dtype;
  o.out_dir = dir;
  o.overrides = std::move(overrides);
  Status s = WriteSyntheticCheckpoint(o);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return dir;
}

inline std::vector<int32_t> RandomTokens(std::mt19937& rng, int n, int vocab) {
  std::uniform_int_distribution<int> d(0, vocab - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

}  // namespace tessera::testing

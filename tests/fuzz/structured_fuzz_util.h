// Shared by the structured-output fuzz targets: a byte vocabulary (every byte
// plus a few multi-byte tokens) and a bounded drive of a compiled grammar:
// masks and token steps chosen by the input, each mask checked against the
// per-token acceptance it promises.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "structured/matcher.h"
#include "structured/vocab.h"

namespace tessera::structured::fuzz {

inline std::shared_ptr<const TokenVocab> Vocab() {
  static const std::shared_ptr<const TokenVocab> v = [] {
    std::vector<std::optional<std::string>> t;
    for (int b = 0; b < 256; ++b) t.push_back(std::string(1, static_cast<char>(b)));
    for (const char* s : {"{\"", "\":", "true", "null", "ab", "\xC3\xA9", "\xE6\x97", "123", "\"}", "  "}) t.push_back(s);
    return TokenVocab::Create(std::move(t));
  }();
  return v;
}

// Compile limits small enough that every input finishes well inside -timeout=10.
inline CompileLimits FuzzLimits() {
  CompileLimits l;
  l.max_compile_time = std::chrono::milliseconds(500);
  l.max_elements = 1 << 16;
  return l;
}

inline void Drive(const Grammar& grammar, const uint8_t* data, size_t size) {
  auto g = std::make_shared<const CompiledGrammar>(grammar, Vocab());
  GrammarMatcher m(g);
  std::vector<uint32_t> mask(static_cast<size_t>(g->mask_words()));
  for (size_t i = 0; i < 16; ++i) {
    m.FillMask(mask);
    std::vector<int32_t> allowed;
    for (int32_t t = 0; t < g->vocab().size(); ++t) {
      if ((mask[t >> 5] >> (t & 31)) & 1) allowed.push_back(t);
    }
    if (allowed.empty()) {
      if (!m.CanEnd()) std::abort();  // a state that is neither complete nor continuable
      return;
    }
    const int32_t t = allowed[(size > 0 ? data[i % size] : 0) % allowed.size()];
    if (!m.AcceptToken(t)) std::abort();  // the mask promised this token
  }
}

}  // namespace tessera::structured::fuzz

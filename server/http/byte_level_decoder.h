// ByteLevelDecoder: a minimal ids -> text decoder for byte-level BPE
// tokenizer.json files (GPT-2, Qwen, Llama-3 style), so completions can carry
// `text` before the real tokenizer exists. Stopgap: server/text/ (the full HF
// tokenizer with incremental, UTF-8-safe detokenization) replaces it.
//
// Immutable after Load; Decode is thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tessera {

class ByteLevelDecoder {
 public:
  // Reads `model.vocab` and `added_tokens` of a tokenizer.json whose model is
  // BPE with a ByteLevel decoder; anything else is Unimplemented.
  static StatusOr<ByteLevelDecoder> Load(const std::string& tokenizer_json_path);
  // Builds from parsed parts (tests): vocab token strings by id ("" = unknown
  // id) and added tokens (content used literally unless special).
  struct AddedToken {
    int64_t id = 0;
    std::string content;
    bool special = false;
  };
  static ByteLevelDecoder FromVocab(const std::vector<std::pair<std::string, int64_t>>& vocab,
                                    const std::vector<AddedToken>& added);

  // Concatenates the tokens' bytes, skipping special added tokens and ids
  // outside the vocabulary, and replaces invalid UTF-8 with U+FFFD.
  std::string Decode(const std::vector<int32_t>& ids) const;
  size_t size() const { return bytes_.size(); }

 private:
  std::vector<std::string> bytes_;  // per id: the token's raw bytes
  std::vector<bool> skip_;          // special added token or unassigned id
};

// Replaces each maximal invalid UTF-8 subsequence with U+FFFD (the Unicode
// recommended practice, same as Python's errors="replace").
std::string SanitizeUtf8(std::string_view s);

}  // namespace tessera

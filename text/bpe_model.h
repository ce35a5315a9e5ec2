// BPE model of tokenizer.json ("model": {"type": "BPE"}): vocab, ranked
// merges (either "a b" strings or ["a", "b"] pairs), byte_fallback, unk with
// fuse_unk, ignore_merges. Merging is a rank-ordered priority queue over a
// linked list of symbols: O(n log n) per word, no recursion. A bounded word
// cache (shared_mutex) makes repeated words O(1); the model is otherwise
// immutable and safe to use from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "text/json_util.h"

namespace tessera::text {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // `model` is the "model" object of tokenizer.json; errors name `path`.
  static StatusOr<std::unique_ptr<BpeModel>> FromJson(const Json& model, const std::string& path);

  // Appends the ids of the pre-tokenized `pieces` (one BPE word each).
  void Encode(const std::vector<std::string>& pieces, std::vector<int32_t>* ids) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // Token text of a vocab id, or nullptr when the id is not in the vocab.
  const std::string* IdToToken(int32_t id) const;
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }
  std::optional<int32_t> unk_id() const { return unk_id_; }
  bool byte_fallback() const { return byte_fallback_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  BpeModel() = default;
  void EncodeWord(std::string_view word, std::vector<int32_t>* ids) const;
  void EncodeSegment(std::string_view word, std::vector<int32_t>* ids) const;
  void MergeWord(std::string_view word, std::vector<int32_t>* ids) const;
  void AppendUnknown(std::string_view text, std::vector<int32_t>* ids) const;
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  TokenMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<uint8_t> id_present_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::unordered_map<char32_t, int32_t> char_ids_;  // single-code-point tokens
  std::optional<int32_t> unk_id_;
  std::vector<int32_t> byte_ids_;  // <0xXX> ids when byte_fallback (else empty)
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  // SentencePiece-style vocabularies: a word may be cut before U+2581 when
  // no vocab token contains "X\u2581" for the preceding char X (then no merge
  // can cross the cut, so the result is exact); this keeps whole-sentence
  // "words" (no pre-tokenizer) short and cacheable.
  bool split_at_metaspace_ = false;
  std::unordered_set<char32_t> metaspace_blockers_;

  static constexpr size_t kMaxCachedWordBytes = 256;
  static constexpr size_t kMaxCacheEntries = 1 << 16;
  mutable std::shared_mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace tessera::text

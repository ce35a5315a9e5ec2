// TokenVocab: what each token of the model's vocabulary adds to the output,
// as BYTES (a token may end inside a UTF-8 character), plus a byte trie over
// all of them, so one walk of the trie tests every token against a grammar
// state while sharing the work of common prefixes. Built once per served
// model (about 100 ms for 150k tokens); immutable and thread-safe afterwards.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tessera::text {
class Tokenizer;
}

namespace tessera::structured {

class TokenVocab {
 public:
  struct TrieNode {
    int32_t first_child = -1;
    int32_t next_sibling = -1;
    int32_t tokens_begin = 0;  // [tokens_begin, tokens_end) in trie_tokens(): tokens spelling exactly this path
    int32_t tokens_end = 0;
    uint8_t byte = 0;
  };

  // bytes[t]: the bytes token t adds to the text; nullopt (or empty) for
  // tokens a grammar may never produce (special tokens, ids past the
  // tokenizer's vocabulary).
  static std::shared_ptr<const TokenVocab> Create(std::vector<std::optional<std::string>> bytes);
  // The model's vocabulary (vocab_size >= the tokenizer's; extra ids never allowed).
  static std::shared_ptr<const TokenVocab> FromTokenizer(const text::Tokenizer& tokenizer, int64_t vocab_size);

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::optional<std::string>& bytes(int32_t token) const { return bytes_[static_cast<size_t>(token)]; }
  const std::vector<TrieNode>& trie() const { return trie_; }  // node 0 is the root (empty prefix)
  const std::vector<int32_t>& trie_tokens() const { return trie_tokens_; }
  size_t max_token_bytes() const { return max_len_; }

 private:
  std::vector<std::optional<std::string>> bytes_;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> trie_tokens_;
  size_t max_len_ = 0;
};

}  // namespace tessera::structured

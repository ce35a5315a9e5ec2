// Tokenizer: a Hugging Face tokenizer.json (+ tokenizer_config.json) loaded
// into an immutable object shared by all front-end threads (every method is
// const and thread-safe). Supported: model BPE (byte-level and
// SentencePiece-style with byte_fallback), added tokens, the normalizers,
// pre-tokenizers, post-processors and decoders listed in their headers.
//
// Invalid UTF-8 in input text is REPLACED, not rejected: each ill-formed
// subsequence becomes U+FFFD (maximal-subpart rule, like Python's
// errors="replace" and JS TextDecoder) before tokenization, so Encode never
// fails. HTTP handlers that must reject bad bytes can check IsValidUtf8 first.
//
// Behavioural choices where references disagree (the oracle is
// transformers.js, see tests/reference/test_tokenizer_oracle.py):
//  - \s in pre-tokenizer regexes is the ECMAScript whitespace set (utf8.h).
//  - (?i:...) groups fold ASCII letters only.
//  - For Llama/Gemma tokenizer classes, add_bos_token/add_eos_token from
//    tokenizer_config.json decide the special tokens (as HF transformers'
//    LlamaTokenizerFast does); otherwise the post_processor does.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "text/added_tokens.h"
#include "text/post_processors.h"

namespace tessera::text {

class BpeModel;
class Decoder;
class Normalizer;
class PreTokenizer;

struct DecodeOptions {
  bool skip_special_tokens = false;
  // false: skip clean_up_tokenization even if the tokenizer config asks for
  // it (the incremental detokenizer applies it itself).
  bool clean_up = true;
};

class Tokenizer {
 public:
  // Loads DIR/tokenizer.json and, if present, DIR/tokenizer_config.json.
  static StatusOr<std::shared_ptr<const Tokenizer>> FromDirectory(const std::string& dir);
  // `config_path` may be empty (no tokenizer_config.json).
  static StatusOr<std::shared_ptr<const Tokenizer>> FromFiles(const std::string& tokenizer_path,
                                                              const std::string& config_path);
  // From JSON text; `config_json` may be empty. Errors are prefixed with `name`.
  static StatusOr<std::shared_ptr<const Tokenizer>> FromJson(std::string_view tokenizer_json,
                                                             std::string_view config_json,
                                                             const std::string& name = "tokenizer.json");
  ~Tokenizer();

  // Token ids of `text`; with add_special_tokens, BOS/EOS per the template.
  std::vector<int32_t> Encode(std::string_view text, bool add_special_tokens = true) const;
  // The same, except that special-token text touching one of `plain_spans`
  // (byte ranges of `text`, sorted and disjoint) is tokenized as plain text,
  // as HF's split_special_tokens / llama.cpp's parse_special = false do for a
  // whole input: how client text inside a rendered chat template stays text
  // (special_text.h). Spans over text that is not valid UTF-8 are kept
  // through the U+FFFD repair.
  std::vector<int32_t> Encode(std::string_view text, bool add_special_tokens,
                              std::span<const TextSpan> plain_spans) const;
  // Text of `ids`; fails on an id outside the vocabulary.
  StatusOr<std::string> Decode(std::span<const int32_t> ids, const DecodeOptions& options = {}) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // Raw vocabulary string of `id` (nullptr if unknown).
  const std::string* IdToToken(int32_t id) const;
  // One past the largest valid id.
  int32_t vocab_size() const { return vocab_size_; }
  bool IsSpecial(int32_t id) const;
  // The special added tokens as plain substrings (no lstrip/rstrip/single_word):
  // finds special-token text in client strings (special_text.h).
  const AddedTokenMatcher& special_text_matcher() const { return special_text_matcher_; }
  // The raw bytes token `id` adds to decoded text (byte-level and byte-fallback
  // tokens mapped back to bytes, which may be part of a UTF-8 character;
  // SentencePiece's U+2581 as a space), for constrained decoding. nullopt for
  // special tokens and ids outside the vocabulary. Not the text of a one-token
  // Decode, which repairs partial UTF-8 and strips a leading space.
  std::optional<std::string> TokenBytes(int32_t id) const;

  std::optional<int32_t> bos_token_id() const { return bos_id_; }
  std::optional<int32_t> eos_token_id() const { return eos_id_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  // Whether Decode applies clean_up_tokenization (" ." -> "." and friends).
  bool clean_up_tokenization_spaces() const { return clean_up_; }

 private:
  friend class TokenizerLoader;
  Tokenizer();
  void EncodeSection(std::string_view text, bool first_section, std::vector<int32_t>* ids) const;
  void EncodeNormalized(std::string_view normalized, bool first_section, std::vector<int32_t>* ids) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Decoder> decoder_;
  SpecialTokenTemplate template_;
  AddedTokenMatcher raw_matcher_;         // added tokens with normalized == false
  AddedTokenMatcher normalized_matcher_;  // matched after normalization (never special tokens)
  AddedTokenMatcher special_text_matcher_;
  std::unordered_map<int32_t, AddedToken> added_by_id_;
  std::vector<uint8_t> special_;          // by id
  int32_t vocab_size_ = 0;
  std::optional<int32_t> bos_id_, eos_id_;
  std::string bos_token_, eos_token_;
  bool clean_up_ = true;
  // How TokenBytes maps a model token to bytes (from the decoder's types).
  bool byte_level_decoder_ = false;
  bool byte_fallback_decoder_ = false;
  bool metaspace_decoder_ = false;  // U+2581 -> ' '
};

// transformers' clean_up_tokenization: removes the space before . ? ! , and
// English contractions. Exposed for the incremental detokenizer.
std::string CleanUpTokenization(std::string_view text);

}  // namespace tessera::text

// Tokenizers in GGUF metadata (`tokenizer.ggml.*`, `tokenizer.chat_template`):
// the named pre-tokenizers llama.cpp knows by `tokenizer.ggml.pre`, and the
// conversion of an HF tokenizer.json (+ tokenizer_config.json) into that
// metadata, as llama.cpp's convert_hf_to_gguf.py does for byte-level BPE.
// The reverse direction (metadata -> Tokenizer) is text/gguf_tokenizer.h.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "engine/gguf.h"

namespace tessera {

// llama.cpp token types (tokenizer.ggml.token_type).
enum GgufTokenType : int32_t {
  kGgufTokenNormal = 1, kGgufTokenUnknown = 2, kGgufTokenControl = 3,
  kGgufTokenUserDefined = 4, kGgufTokenUnused = 5, kGgufTokenByte = 6,
};

// A byte-level BPE pre-tokenizer by its llama.cpp name.
struct GgufPreTokenizer {
  const char* name;   // tokenizer.ggml.pre, e.g. "llama-bpe", "qwen2", "gpt2"
  const char* regex;  // the HF Split pattern
  bool ignore_merges; // llama-bpe: whole-word vocab hits skip merging
  bool nfc;           // HF applies an NFC normalizer (Qwen2)
  bool add_bos;       // llama.cpp's default when tokenizer.ggml.add_bos_token is absent
};
// nullptr when unknown.
const GgufPreTokenizer* FindGgufPreTokenizer(const std::string& name);
const GgufPreTokenizer* FindGgufPreTokenizerByRegex(const std::string& regex);

// tokenizer.* metadata for a BPE tokenizer.json and its tokenizer_config.json
// (may be empty): byte-level BPE as llama.cpp's "gpt2" model; SentencePiece-style
// BPE (byte_fallback, "▁" for spaces: Llama 2, Phi-3, Gemma) as its "llama" model,
// with piece scores ranking the merges, <0xNN> pieces typed BYTE, special tokens
// CONTROL, and add_space_prefix from the normalizer. Unsupported shapes (non-BPE
// models, an unknown pre-tokenizer regex) give InvalidArgument naming the field.
// With `vocab_size` > 0 the token list is padded with unused "[PADi]" tokens
// up to the model's vocabulary (the embedding rows), as llama.cpp's converter
// does: llama.cpp refuses a file whose token count differs from token_embd.
StatusOr<std::vector<std::pair<std::string, GgufValue>>> GgufTokenizerMetadata(
    const std::string& tokenizer_json, const std::string& tokenizer_config_json, const std::string& label,
    int64_t vocab_size = 0);

}  // namespace tessera

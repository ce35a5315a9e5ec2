// Tokenizers and chat templates from GGUF metadata, and the one entry point
// the commands use to load text handling for any model path.
//
// `tokenizer.ggml.model` "gpt2" (byte-level BPE) is converted to the
// tokenizer.json + tokenizer_config.json an HF checkpoint would carry and
// loaded with Tokenizer::FromJson: tokens/token_type/merges -> model.vocab,
// merges and added_tokens (type 3 control -> special, 4 user-defined -> not
// special, 5 unused -> dropped); `tokenizer.ggml.pre` picks the pre-tokenizer
// regex (llama-bpe/llama3, qwen2, gpt2/default; others are Unimplemented);
// bos/eos/unk/pad ids, add_bos/add_eos, clean_spaces and
// `tokenizer.chat_template` -> tokenizer_config fields. "llama"
// (SentencePiece BPE) becomes HF's LlamaTokenizerFast layout: "▁" prefix and
// space replacement (tokenizer.ggml.add_space_prefix, default true), byte
// fallback, and merges derived from tokens + scores the way transformers'
// SentencePieceExtractor derives them.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "engine/gguf.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace tessera::text {

struct GgufTokenizerFiles {
  nlohmann::json tokenizer;          // tokenizer.json equivalent (std::map objects: fast for big vocabs)
  nlohmann::ordered_json config;     // tokenizer_config.json equivalent
};

// The HF documents equivalent to `gguf`'s tokenizer metadata. Errors name the key.
StatusOr<GgufTokenizerFiles> GgufToTokenizerJson(const GgufContents& gguf, const std::string& label);

StatusOr<std::shared_ptr<const Tokenizer>> TokenizerFromGguf(const GgufContents& gguf, const std::string& label);

// Tokenizer of a model path: an HF directory (tokenizer.json + optional
// tokenizer_config.json), a .gguf file, or a directory holding one .gguf.
StatusOr<std::shared_ptr<const Tokenizer>> LoadModelTokenizer(const std::string& model_path);

// Chat template of a model path; NotFound when it has none.
StatusOr<ChatTemplate> LoadModelChatTemplate(const std::string& model_path);

}  // namespace tessera::text

#include "text/gguf_tokenizer.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <unordered_map>

#include "engine/gguf_model.h"
#include "engine/gguf_vocab.h"

namespace tessera::text {
namespace {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

const GgufValue* Key(const GgufContents& g, const std::string& key) { return g.Find("tokenizer.ggml." + key); }

StatusOr<const std::vector<GgufValue>*> Array(const GgufContents& g, const std::string& label, const std::string& key,
                                              GgufType elem, bool required) {
  const GgufValue* v = Key(g, key);
  if (!v) {
    if (!required) return static_cast<const std::vector<GgufValue>*>(nullptr);
    return InvalidArgument(label + ": missing required metadata key 'tokenizer.ggml." + key + "'");
  }
  const bool int_ok = elem == GgufType::kInt32 && v->type == GgufType::kArray && !v->array.empty() &&
                      v->array[0].is_integer();
  if (v->type != GgufType::kArray || (v->array_type != elem && !int_ok)) {
    return InvalidArgument(label + ": metadata 'tokenizer.ggml." + key + "' must be an array of " +
                           std::string(GgufTypeName(elem)));
  }
  return &v->array;
}

std::optional<int64_t> OptInt(const GgufContents& g, const std::string& key) {
  const GgufValue* v = Key(g, key);
  return v ? v->AsInt() : std::nullopt;
}

// llama.cpp (llama-vocab.cpp) gives Phi-3 files, recognised by "phi-3" or
// "phi3" in general.name, its tokenizer.json's behaviour: every special token
// but <unk>, <s> and <|endoftext|> strips the whitespace after it (the chat
// markers' rstrip), which GGUF has no field for.
bool Phi3RstripsSpecials(const GgufContents& g) {
  const GgufValue* v = g.Find("general.name");
  if (!v || v->type != GgufType::kString) return false;
  std::string name = v->str;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  return name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos;
}

bool OptBool(const GgufContents& g, const std::string& key, bool def) {
  const GgufValue* v = Key(g, key);
  return v && v->type == GgufType::kBool ? v->u != 0 : def;
}

// UTF-8 code point boundaries of s (0 and size included).
std::vector<size_t> CharBounds(const std::string& s) {
  std::vector<size_t> b;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) b.push_back(i);
  }
  b.push_back(s.size());
  return b;
}

// Merges of a SentencePiece BPE vocabulary, as transformers'
// SentencePieceExtractor derives them: every split of a piece into two
// pieces of the vocabulary, ordered by the merged piece's score (highest
// first), then by the ids of the left and right parts. Cost: sum over pieces
// of length^2 hash lookups.
std::vector<std::string> SpmMerges(const std::vector<std::string>& pieces, const std::vector<float>& scores,
                                   const std::vector<bool>& usable) {
  std::unordered_map<std::string, size_t> id;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (usable[i]) id.emplace(pieces[i], i);
  }
  struct M {
    float score;
    size_t left, right;
  };
  std::vector<M> merges;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (!usable[i]) continue;
    const std::string& p = pieces[i];
    const std::vector<size_t> b = CharBounds(p);
    for (size_t k = 1; k + 1 < b.size(); ++k) {
      auto l = id.find(p.substr(0, b[k])), r = id.find(p.substr(b[k]));
      if (l != id.end() && r != id.end()) merges.push_back({scores[i], l->second, r->second});
    }
  }
  std::stable_sort(merges.begin(), merges.end(), [](const M& a, const M& b) {
    if (a.score != b.score) return a.score > b.score;
    return a.left != b.left ? a.left < b.left : a.right < b.right;
  });
  std::vector<std::string> out;
  out.reserve(merges.size());
  for (const M& m : merges) out.push_back(pieces[m.left] + " " + pieces[m.right]);
  return out;
}

}  // namespace

StatusOr<GgufTokenizerFiles> GgufToTokenizerJson(const GgufContents& g, const std::string& label) {
  const GgufValue* model = Key(g, "model");
  if (!model || model->type != GgufType::kString) {
    return InvalidArgument(label + ": missing required metadata key 'tokenizer.ggml.model' (a string)");
  }
  const bool spm = model->str == "llama";
  if (model->str != "gpt2" && !spm) {
    return Unimplemented(label + ": metadata 'tokenizer.ggml.model' is '" + model->str +
                         "'; supported: 'gpt2' (byte-level BPE) and 'llama' (SentencePiece BPE)");
  }
  const GgufPreTokenizer* pre = nullptr;
  if (!spm) {
    const GgufValue* pre_v = Key(g, "pre");
    const std::string pre_name = pre_v && pre_v->type == GgufType::kString ? pre_v->str : "default";
    pre = FindGgufPreTokenizer(pre_name);
    if (!pre) {
      return Unimplemented(label + ": metadata 'tokenizer.ggml.pre' is '" + pre_name +
                           "', a pre-tokenizer Tessera does not know (known: llama-bpe, llama3, qwen2, gpt2, default)");
    }
  }
  ASSIGN_OR_RETURN(const std::vector<GgufValue>* tokens, Array(g, label, "tokens", GgufType::kString, true));
  ASSIGN_OR_RETURN(const std::vector<GgufValue>* types, Array(g, label, "token_type", GgufType::kInt32, false));
  ASSIGN_OR_RETURN(const std::vector<GgufValue>* merges, Array(g, label, "merges", GgufType::kString, !spm));
  ASSIGN_OR_RETURN(const std::vector<GgufValue>* scores, Array(g, label, "scores", GgufType::kFloat32, false));
  for (auto [arr, key] : {std::pair{types, "token_type"}, {scores, "scores"}}) {
    if (arr && arr->size() != tokens->size()) {
      return InvalidArgument(label + ": metadata 'tokenizer.ggml." + key + "' has " + std::to_string(arr->size()) +
                             " entries but 'tokenizer.ggml.tokens' has " + std::to_string(tokens->size()));
    }
  }
  json vocab = json::object();
  json added = json::array();
  std::vector<std::string> pieces(tokens->size());
  std::vector<float> piece_scores(tokens->size());
  std::vector<bool> usable(tokens->size());
  const bool phi3 = Phi3RstripsSpecials(g);
  for (size_t i = 0; i < tokens->size(); ++i) {
    const std::string& text = (*tokens)[i].str;
    const int64_t type = types ? (*types)[i].AsInt().value_or(int64_t{kGgufTokenNormal}) : int64_t{kGgufTokenNormal};
    pieces[i] = text;
    piece_scores[i] = scores ? static_cast<float>((*scores)[i].f) : -static_cast<float>(i);
    usable[i] = type != kGgufTokenUnused;
    if (type == kGgufTokenUnused) continue;
    if (type == kGgufTokenControl || type == kGgufTokenUserDefined || type == kGgufTokenUnknown) {
      const bool rstrip = phi3 && text != "<unk>" && text != "<s>" && text != "<|endoftext|>";
      added.push_back({{"id", i}, {"content", text}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", rstrip}, {"normalized", false}, {"special", type != kGgufTokenUserDefined}});
      // SentencePiece keeps control and unknown pieces in the model vocabulary.
      if (!spm && type != kGgufTokenUnknown) continue;
    }
    if (!vocab.contains(text)) vocab[text] = i;  // first id wins, as HF's vocab map does
  }
  json merge_list = json::array();
  if (merges) {
    for (const GgufValue& m : *merges) merge_list.push_back(m.str);
  } else {
    for (std::string& m : SpmMerges(pieces, piece_scores, usable)) merge_list.push_back(std::move(m));
  }

  GgufTokenizerFiles out;
  json& t = out.tokenizer;
  t["version"] = "1.0";
  t["truncation"] = nullptr;
  t["padding"] = nullptr;
  t["added_tokens"] = std::move(added);
  if (spm) {
    // HF's LlamaTokenizerFast (legacy): "▁" prepended, spaces -> "▁", byte fallback.
    const bool prefix = OptBool(g, "add_space_prefix", true);
    json norm = json::array();
    if (prefix) norm.push_back({{"type", "Prepend"}, {"prepend", "\xe2\x96\x81"}});
    norm.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xe2\x96\x81"}});
    t["normalizer"] = {{"type", "Sequence"}, {"normalizers", std::move(norm)}};
    t["pre_tokenizer"] = nullptr;
    t["post_processor"] = nullptr;
    json dec = json::array({{{"type", "Replace"}, {"pattern", {{"String", "\xe2\x96\x81"}}}, {"content", " "}},
                            {{"type", "ByteFallback"}}, {{"type", "Fuse"}}});
    if (prefix) dec.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    t["decoder"] = {{"type", "Sequence"}, {"decoders", std::move(dec)}};
    json unk = nullptr;
    if (auto u = OptInt(g, "unknown_token_id"); u && *u >= 0 && static_cast<uint64_t>(*u) < tokens->size()) {
      unk = (*tokens)[*u].str;
    }
    t["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", unk},
                  {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                  {"fuse_unk", true}, {"byte_fallback", true}, {"ignore_merges", false},
                  {"vocab", std::move(vocab)}, {"merges", std::move(merge_list)}};
  } else {
    t["normalizer"] = pre->nfc ? json{{"type", "NFC"}} : json(nullptr);
    const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false},
                             {"use_regex", false}};
    t["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers",
                           {{{"type", "Split"}, {"pattern", {{"Regex", pre->regex}}}, {"behavior", "Isolated"},
                             {"invert", false}},
                            byte_level}}};
    t["post_processor"] = byte_level;  // special tokens come from add_bos/add_eos below
    t["decoder"] = byte_level;
    t["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                  {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                  {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", pre->ignore_merges},
                  {"vocab", std::move(vocab)}, {"merges", std::move(merge_list)}};
  }

  ojson& c = out.config;
  auto token_at = [&](const char* key, const char* field) -> Status {
    auto id = OptInt(g, key);
    if (!id) return Status::Ok();
    if (*id < 0 || static_cast<uint64_t>(*id) >= tokens->size()) {
      return InvalidArgument(label + ": metadata 'tokenizer.ggml." + key + "' = " + std::to_string(*id) +
                             " is not a token id (vocabulary has " + std::to_string(tokens->size()) + ")");
    }
    c[field] = (*tokens)[*id].str;
    return Status::Ok();
  };
  RETURN_IF_ERROR(token_at("bos_token_id", "bos_token"));
  RETURN_IF_ERROR(token_at("eos_token_id", "eos_token"));
  RETURN_IF_ERROR(token_at("unknown_token_id", "unk_token"));
  RETURN_IF_ERROR(token_at("padding_token_id", "pad_token"));
  // The Llama class makes the loader build the BOS/EOS template from these flags.
  c["tokenizer_class"] = "LlamaTokenizerFast";
  c["add_bos_token"] = OptBool(g, "add_bos_token", spm || pre->add_bos) && c.contains("bos_token");
  c["add_eos_token"] = OptBool(g, "add_eos_token", false) && c.contains("eos_token");
  c["clean_up_tokenization_spaces"] = OptBool(g, "clean_spaces", false);
  if (const GgufValue* tmpl = g.Find("tokenizer.chat_template")) {
    if (tmpl->type != GgufType::kString) {
      return InvalidArgument(label + ": metadata 'tokenizer.chat_template' must be a string");
    }
    c["chat_template"] = tmpl->str;
  }
  return out;
}

StatusOr<std::shared_ptr<const Tokenizer>> TokenizerFromGguf(const GgufContents& g, const std::string& label) {
  ASSIGN_OR_RETURN(GgufTokenizerFiles f, GgufToTokenizerJson(g, label));
  return Tokenizer::FromJson(f.tokenizer.dump(), f.config.dump(), label + " (tokenizer metadata)");
}

StatusOr<std::shared_ptr<const Tokenizer>> LoadModelTokenizer(const std::string& model_path) {
  ASSIGN_OR_RETURN(std::string gguf, ResolveGgufPath(model_path));
  if (gguf.empty()) return Tokenizer::FromDirectory(model_path);
  ASSIGN_OR_RETURN(auto file, GgufFile::Open(gguf));
  return TokenizerFromGguf(file->contents(), gguf);
}

StatusOr<ChatTemplate> LoadModelChatTemplate(const std::string& model_path) {
  ASSIGN_OR_RETURN(std::string gguf, ResolveGgufPath(model_path));
  if (gguf.empty()) {
    const std::filesystem::path config = std::filesystem::path(model_path) / "tokenizer_config.json";
    std::error_code ec;
    if (!std::filesystem::exists(config, ec)) return NotFound(config.string() + ": not found");
    return ChatTemplate::FromTokenizerConfigFile(config.string());
  }
  ASSIGN_OR_RETURN(auto file, GgufFile::Open(gguf));
  const GgufValue* tmpl = file->contents().Find("tokenizer.chat_template");
  if (!tmpl) return NotFound(gguf + ": no 'tokenizer.chat_template' metadata");
  ASSIGN_OR_RETURN(GgufTokenizerFiles f, GgufToTokenizerJson(file->contents(), gguf));
  return ChatTemplate::FromTokenizerConfig(f.config, gguf);
}

}  // namespace tessera::text

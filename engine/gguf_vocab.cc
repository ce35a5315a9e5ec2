#include "engine/gguf_vocab.h"

#include <functional>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace tessera {
namespace {

using json = nlohmann::json;

constexpr GgufPreTokenizer kPre[] = {
    {"llama-bpe",
     R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     true, false, true},
    {"qwen2",
     R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     false, true, false},
    {"gpt2", R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", false, false, false},
    // o200k (gpt-oss): tokenizer.json sets ignore_merges; no BOS.
    {"gpt-4o",
     R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
     R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
     R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     true, false, false},
};

// The Split regex of a byte-level pre-tokenizer ("" when there is none).
std::string SplitRegex(const json& pre) {
  if (!pre.is_object()) return "";
  if (pre.value("type", "") == "Split" && pre.contains("pattern") && pre["pattern"].is_object() &&
      pre["pattern"].contains("Regex") && pre["pattern"]["Regex"].is_string()) {
    return pre["pattern"]["Regex"].get<std::string>();
  }
  if (pre.value("type", "") == "Sequence" && pre.contains("pretokenizers") && pre["pretokenizers"].is_array()) {
    for (const json& p : pre["pretokenizers"]) {
      std::string r = SplitRegex(p);
      if (!r.empty()) return r;
    }
  }
  if (pre.value("type", "") == "ByteLevel" && pre.value("use_regex", false)) return kPre[2].regex;
  return "";
}

// Token content of a tokenizer_config field (a string or {"content": ...}).
std::string ConfigToken(const json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return "";
}

// Tokens by id with their llama.cpp types; holes become unused "[PADi]" as
// llama.cpp's converter writes them.
struct TokenTable {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  Status Put(int64_t id, const std::string& text, int32_t type, const std::string& label) {
    if (id < 0 || id > (1 << 24)) return InvalidArgument(label + ": token id " + std::to_string(id) + " out of range");
    for (size_t i = tokens.size(); i <= static_cast<size_t>(id); ++i) {
      tokens.push_back("[PAD" + std::to_string(i) + "]");
      types.push_back(kGgufTokenUnused);
    }
    tokens[id] = text;
    types[id] = type;
    return Status::Ok();
  }
  // The model's vocab, then added_tokens (special: control), then padding to vocab_size.
  // `type_of` gives each vocab entry's type.
  Status Fill(const json& tj, const json& model, int64_t vocab_size, const std::string& label,
              const std::function<int32_t(const std::string&)>& type_of) {
    for (const auto& [text, id] : model["vocab"].items()) {
      if (!id.is_number_integer()) return InvalidArgument(label + ": field 'model.vocab' must map to integers");
      RETURN_IF_ERROR(Put(id.get<int64_t>(), text, type_of(text), label));
    }
    if (tj.contains("added_tokens") && tj["added_tokens"].is_array()) {
      for (const json& a : tj["added_tokens"]) {
        if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
            !a["content"].is_string()) {
          return InvalidArgument(label + ": field 'added_tokens' entries need integer 'id' and string 'content'");
        }
        const std::string text = a["content"].get<std::string>();
        int32_t type = a.value("special", false) ? kGgufTokenControl : kGgufTokenUserDefined;
        if (type_of(text) == kGgufTokenUnknown) type = kGgufTokenUnknown;
        RETURN_IF_ERROR(Put(a["id"].get<int64_t>(), text, type, label));
      }
    }
    if (vocab_size > static_cast<int64_t>(tokens.size())) {
      RETURN_IF_ERROR(Put(vocab_size - 1, "[PAD" + std::to_string(vocab_size - 1) + "]", kGgufTokenUnused, label));
    }
    return Status::Ok();
  }
};

// Merges as "left right" strings (tokenizer.json writes strings or pairs).
StatusOr<std::vector<std::string>> MergeStrings(const json& model, const std::string& label) {
  std::vector<std::string> merges;
  merges.reserve(model["merges"].size());
  for (const json& m : model["merges"]) {
    if (m.is_string()) {
      merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    } else {
      return InvalidArgument(label + ": field 'model.merges' entries must be strings or pairs of strings");
    }
  }
  return merges;
}

// The metadata after the vocabulary: special token ids, add_bos/add_eos, the chat template.
void AppendSpecialMetadata(const json& tj, const json& cfg, const TokenTable& t,
                           std::vector<std::pair<std::string, GgufValue>>* md) {
  auto id_of = [&](const std::string& text) -> int64_t {
    if (text.empty()) return -1;
    for (size_t i = 0; i < t.tokens.size(); ++i) {
      if (t.tokens[i] == text && t.types[i] != kGgufTokenUnused) return static_cast<int64_t>(i);
    }
    return -1;
  };
  for (auto [key, field] : {std::pair{"bos_token_id", "bos_token"}, {"eos_token_id", "eos_token"},
                            {"unknown_token_id", "unk_token"}, {"padding_token_id", "pad_token"}}) {
    if (int64_t id = id_of(ConfigToken(cfg, field)); id >= 0) {
      md->emplace_back(std::string("tokenizer.ggml.") + key, GgufValue::U32(static_cast<uint32_t>(id)));
    }
  }
  // add_bos: the config's flag, else whether the post-processor prepends a token.
  bool add_bos = cfg.value("add_bos_token", false), add_eos = cfg.value("add_eos_token", false);
  if (!cfg.contains("add_bos_token") && tj.contains("post_processor") && tj["post_processor"].is_object()) {
    const json& pp = tj["post_processor"];
    if (pp.value("type", "") == "TemplateProcessing" && pp.contains("single") && pp["single"].is_array() &&
        !pp["single"].empty() && pp["single"][0].is_object() && pp["single"][0].contains("SpecialToken")) {
      add_bos = true;
    }
  }
  md->emplace_back("tokenizer.ggml.add_bos_token", GgufValue::Bool(add_bos));
  md->emplace_back("tokenizer.ggml.add_eos_token", GgufValue::Bool(add_eos));
  md->emplace_back("tokenizer.ggml.clean_spaces", GgufValue::Bool(cfg.value("clean_up_tokenization_spaces", false)));
  if (cfg.contains("chat_template") && cfg["chat_template"].is_string()) {
    md->emplace_back("tokenizer.chat_template", GgufValue::Str(cfg["chat_template"].get<std::string>()));
  }
}

GgufValue I32Array(const std::vector<int32_t>& v) {
  std::vector<GgufValue> out;
  out.reserve(v.size());
  for (int32_t x : v) out.push_back(GgufValue::I32(x));
  return GgufValue::Array(GgufType::kInt32, std::move(out));
}

// SentencePiece BPE written as tokenizer.json (BPE with byte_fallback: Llama-2,
// Phi-3, Gemma) -> llama.cpp's "llama" model. llama.cpp carries piece scores,
// not merges; readers (text/gguf_tokenizer.h) rebuild the merges by ordering
// each piece's splits by its score, so a piece's score here is minus the rank
// of the first merge that makes it: the rebuilt list is the file's own order.
// Pieces no merge makes (characters, bytes, control) score -1e9.
StatusOr<std::vector<std::pair<std::string, GgufValue>>> SpmTokenizerMetadata(const json& tj, const json& cfg,
                                                                              const std::string& label,
                                                                              int64_t vocab_size) {
  const json& model = tj["model"];
  // HF's LlamaTokenizerFast: spaces -> "▁", with (legacy) or without a "▁" prepended.
  const json norm = tj.contains("normalizer") ? tj["normalizer"] : json();
  const json steps = norm.is_object() && norm.value("type", "") == "Sequence" && norm.contains("normalizers")
                         ? norm["normalizers"]
                         : json::array({norm});
  bool prefix = false, replace = false;
  for (const json& n : steps) {
    const std::string type = n.is_object() ? n.value("type", "") : "";
    if (type == "Prepend" && n.value("prepend", "") == "\xe2\x96\x81") {
      prefix = true;
    } else if (type == "Replace" && n.contains("pattern") && n["pattern"].is_object() &&
               n["pattern"].value("String", "") == " " && n.value("content", "") == "\xe2\x96\x81") {
      replace = true;
    } else {
      replace = false;
      break;
    }
  }
  if (!replace) {
    return InvalidArgument(label + ": field 'normalizer': SentencePiece BPE converts to GGUF only with the "
                           "[Prepend \"\xe2\x96\x81\"], Replace \" \" -> \"\xe2\x96\x81\" normalizer");
  }
  const std::string unk = model.contains("unk_token") && model["unk_token"].is_string()
                              ? model["unk_token"].get<std::string>() : "";
  TokenTable t;
  RETURN_IF_ERROR(t.Fill(tj, model, vocab_size, label, [&](const std::string& text) -> int32_t {
    if (!unk.empty() && text == unk) return kGgufTokenUnknown;
    if (text.size() == 6 && text.compare(0, 3, "<0x") == 0 && text[5] == '>') return kGgufTokenByte;
    return kGgufTokenNormal;
  }));
  ASSIGN_OR_RETURN(std::vector<std::string> merges, MergeStrings(model, label));
  std::unordered_map<std::string, size_t> rank;  // merged piece -> first merge making it
  for (size_t r = 0; r < merges.size(); ++r) {
    std::string piece = merges[r];
    const size_t sp = piece.find(' ');
    if (sp == std::string::npos) {
      return InvalidArgument(label + ": field 'model.merges' entry " + std::to_string(r) + " is not a pair");
    }
    piece.erase(sp, 1);
    rank.emplace(std::move(piece), r);
  }
  std::vector<GgufValue> scores;
  scores.reserve(t.tokens.size());
  for (size_t i = 0; i < t.tokens.size(); ++i) {
    auto it = t.types[i] == kGgufTokenNormal ? rank.find(t.tokens[i]) : rank.end();
    scores.push_back(GgufValue::F32(it != rank.end() ? -static_cast<float>(it->second) : -1e9f));
  }
  std::vector<std::pair<std::string, GgufValue>> md;
  md.emplace_back("tokenizer.ggml.model", GgufValue::Str("llama"));
  md.emplace_back("tokenizer.ggml.pre", GgufValue::Str("default"));
  md.emplace_back("tokenizer.ggml.tokens", GgufValue::StrArray(t.tokens));
  md.emplace_back("tokenizer.ggml.scores", GgufValue::Array(GgufType::kFloat32, std::move(scores)));
  md.emplace_back("tokenizer.ggml.token_type", I32Array(t.types));
  md.emplace_back("tokenizer.ggml.add_space_prefix", GgufValue::Bool(prefix));
  AppendSpecialMetadata(tj, cfg, t, &md);
  return md;
}

}  // namespace

const GgufPreTokenizer* FindGgufPreTokenizer(const std::string& name) {
  const std::string n = name == "llama3" || name == "llama-v3" ? "llama-bpe" : name == "default" ? "gpt2" : name;
  for (const auto& p : kPre) {
    if (n == p.name) return &p;
  }
  return nullptr;
}

const GgufPreTokenizer* FindGgufPreTokenizerByRegex(const std::string& regex) {
  for (const auto& p : kPre) {
    if (regex == p.regex) return &p;
  }
  return nullptr;
}

StatusOr<std::vector<std::pair<std::string, GgufValue>>> GgufTokenizerMetadata(
    const std::string& tokenizer_json, const std::string& config_json, const std::string& label,
    int64_t vocab_size) {
  const json tj = json::parse(tokenizer_json, nullptr, false);
  if (tj.is_discarded() || !tj.is_object()) return InvalidArgument(label + ": tokenizer.json is not a JSON object");
  json cfg = config_json.empty() ? json::object() : json::parse(config_json, nullptr, false);
  if (cfg.is_discarded() || !cfg.is_object()) return InvalidArgument(label + ": tokenizer_config.json is not a JSON object");
  const json& model = tj.contains("model") ? tj["model"] : json();
  if (!model.is_object() || model.value("type", "") != "BPE" || !model.contains("vocab") ||
      !model["vocab"].is_object() || !model.contains("merges") || !model["merges"].is_array()) {
    return InvalidArgument(label + ": field 'model' must be a BPE model with vocab and merges");
  }
  if (model.value("byte_fallback", false)) return SpmTokenizerMetadata(tj, cfg, label, vocab_size);
  const std::string regex = SplitRegex(tj.contains("pre_tokenizer") ? tj["pre_tokenizer"] : json());
  const GgufPreTokenizer* pre = FindGgufPreTokenizerByRegex(regex);
  if (!pre) {
    return InvalidArgument(label + ": field 'pre_tokenizer' has a regex with no llama.cpp name (known: "
                           "llama-bpe, qwen2, gpt2, gpt-4o)");
  }
  TokenTable t;
  RETURN_IF_ERROR(t.Fill(tj, model, vocab_size, label, [](const std::string&) -> int32_t { return kGgufTokenNormal; }));
  ASSIGN_OR_RETURN(std::vector<std::string> merges, MergeStrings(model, label));
  std::vector<std::pair<std::string, GgufValue>> md;
  md.emplace_back("tokenizer.ggml.model", GgufValue::Str("gpt2"));
  md.emplace_back("tokenizer.ggml.pre", GgufValue::Str(pre->name));
  md.emplace_back("tokenizer.ggml.tokens", GgufValue::StrArray(t.tokens));
  md.emplace_back("tokenizer.ggml.token_type", I32Array(t.types));
  md.emplace_back("tokenizer.ggml.merges", GgufValue::StrArray(merges));
  AppendSpecialMetadata(tj, cfg, t, &md);
  return md;
}

}  // namespace tessera

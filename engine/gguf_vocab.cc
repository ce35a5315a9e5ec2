#include "engine/gguf_vocab.h"

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
  // SentencePiece-style BPE (byte fallback, "▁" for spaces: Llama 2, Gemma) becomes
  // llama.cpp's "llama" tokenizer model; byte-level BPE its "gpt2" model.
  const bool spm = model.value("byte_fallback", false);
  const std::string regex = SplitRegex(tj.contains("pre_tokenizer") ? tj["pre_tokenizer"] : json());
  const GgufPreTokenizer* pre = spm ? nullptr : FindGgufPreTokenizerByRegex(regex);
  if (!spm && !pre) {
    return InvalidArgument(label + ": field 'pre_tokenizer' has a regex with no llama.cpp name (known: "
                           "llama-bpe, qwen2, gpt2)");
  }
  // Tokens by id; holes become unused "[PADi]" as llama.cpp's converter writes them.
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  auto put = [&](int64_t id, const std::string& text, int32_t type) -> Status {
    if (id < 0 || id > (1 << 24)) return InvalidArgument(label + ": token id " + std::to_string(id) + " out of range");
    if (static_cast<size_t>(id) >= tokens.size()) {
      for (size_t i = tokens.size(); i <= static_cast<size_t>(id); ++i) {
        tokens.push_back("[PAD" + std::to_string(i) + "]");
        types.push_back(kGgufTokenUnused);
      }
    }
    tokens[id] = text;
    types[id] = type;
    return Status::Ok();
  };
  for (const auto& [text, id] : model["vocab"].items()) {
    if (!id.is_number_integer()) return InvalidArgument(label + ": field 'model.vocab' must map to integers");
    const bool byte = spm && text.size() == 6 && text.rfind("<0x", 0) == 0 && text.back() == '>';
    RETURN_IF_ERROR(put(id.get<int64_t>(), text, byte ? kGgufTokenByte : kGgufTokenNormal));
  }
  if (tj.contains("added_tokens") && tj["added_tokens"].is_array()) {
    for (const json& a : tj["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string()) {
        return InvalidArgument(label + ": field 'added_tokens' entries need integer 'id' and string 'content'");
      }
      RETURN_IF_ERROR(put(a["id"].get<int64_t>(), a["content"].get<std::string>(),
                          a.value("special", false) ? kGgufTokenControl : kGgufTokenUserDefined));
    }
  }
  if (vocab_size > static_cast<int64_t>(tokens.size())) {
    RETURN_IF_ERROR(put(vocab_size - 1, "[PAD" + std::to_string(vocab_size - 1) + "]", kGgufTokenUnused));
  }
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
  std::vector<std::pair<std::string, GgufValue>> md;
  if (spm) {
    // llama.cpp's SentencePiece tokenizer merges by score: a piece's score is minus the
    // rank of the first merge producing it (0 for pieces no merge produces). The merges
    // are written too (Tessera's reader prefers them). A "▁" prefix is added only when
    // the normalizer prepends one (Llama 2 yes, Gemma no).
    const std::string norm = tj.contains("normalizer") ? tj["normalizer"].dump() : "";
    md.emplace_back("tokenizer.ggml.model", GgufValue::Str("llama"));
    md.emplace_back("tokenizer.ggml.add_space_prefix",
                    GgufValue::Bool(norm.find("\"Prepend\"") != std::string::npos));
    std::unordered_map<std::string, float> rank;
    rank.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      std::string piece = merges[i];
      // SentencePiece pieces hold no spaces ("▁" instead): the one space splits the pair.
      if (const size_t sp = piece.find(' '); sp != std::string::npos) piece.erase(sp, 1);
      rank.emplace(std::move(piece), -static_cast<float>(i));
    }
    std::vector<GgufValue> scores;
    scores.reserve(tokens.size());
    for (const std::string& t : tokens) {
      auto it = rank.find(t);
      scores.push_back(GgufValue::F32(it == rank.end() ? 0.0f : it->second));
    }
    md.emplace_back("tokenizer.ggml.scores", GgufValue::Array(GgufType::kFloat32, std::move(scores)));
  } else {
    md.emplace_back("tokenizer.ggml.model", GgufValue::Str("gpt2"));
    md.emplace_back("tokenizer.ggml.pre", GgufValue::Str(pre->name));
  }
  md.emplace_back("tokenizer.ggml.tokens", GgufValue::StrArray(tokens));
  std::vector<GgufValue> tv;
  tv.reserve(types.size());
  for (int32_t t : types) tv.push_back(GgufValue::I32(t));
  md.emplace_back("tokenizer.ggml.token_type", GgufValue::Array(GgufType::kInt32, std::move(tv)));
  md.emplace_back("tokenizer.ggml.merges", GgufValue::StrArray(merges));
  auto id_of = [&](const std::string& text) -> int64_t {
    if (text.empty()) return -1;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] == text && types[i] != kGgufTokenUnused) return static_cast<int64_t>(i);
    }
    return -1;
  };
  for (auto [key, field] : {std::pair{"bos_token_id", "bos_token"}, {"eos_token_id", "eos_token"},
                            {"unknown_token_id", "unk_token"}, {"padding_token_id", "pad_token"}}) {
    if (int64_t id = id_of(ConfigToken(cfg, field)); id >= 0) {
      md.emplace_back(std::string("tokenizer.ggml.") + key, GgufValue::U32(static_cast<uint32_t>(id)));
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
  md.emplace_back("tokenizer.ggml.add_bos_token", GgufValue::Bool(add_bos));
  md.emplace_back("tokenizer.ggml.add_eos_token", GgufValue::Bool(add_eos));
  md.emplace_back("tokenizer.ggml.clean_spaces", GgufValue::Bool(cfg.value("clean_up_tokenization_spaces", false)));
  if (cfg.contains("chat_template") && cfg["chat_template"].is_string()) {
    md.emplace_back("tokenizer.chat_template", GgufValue::Str(cfg["chat_template"].get<std::string>()));
  }
  return md;
}

}  // namespace tessera

// Builds a Tokenizer from tokenizer.json + tokenizer_config.json text.
// Errors name the file and the JSON path of the part at fault.
#include <fstream>
#include <sstream>
#include <unordered_set>

#include "common/read_file.h"
#include "text/bpe_model.h"
#include "text/decoders.h"
#include "text/normalizers.h"
#include "text/pre_tokenizers.h"
#include "text/tokenizer.h"

namespace tessera::text {

class TokenizerLoader {
 public:
  static StatusOr<std::shared_ptr<const Tokenizer>> Load(const Json& tj, const Json& cj);

 private:
  static Status LoadAddedTokens(const Json& tj, Tokenizer* t);
  static Status ApplyConfig(const Json& cj, Tokenizer* t);
};

namespace {

StatusOr<std::string> ReadFile(const std::string& path) { return ReadFileToString(path); }

// A token field of tokenizer_config.json: a string or {"content": ...}.
std::string TokenContent(const Json& cj, const char* key) {
  auto it = cj.find(key);
  if (it == cj.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return "";
}

Status Prefix(const std::string& name, const Status& s) {
  if (s.ok()) return s;
  return Status(s.code(), name + ": " + s.message());
}

}  // namespace

Status TokenizerLoader::LoadAddedTokens(const Json& tj, Tokenizer* t) {
  std::vector<AddedToken> raw, normalized;
  auto it = tj.find("added_tokens");
  if (it != tj.end() && !it->is_null()) {
    if (!it->is_array()) return InvalidArgument("added_tokens: expected an array");
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& e = (*it)[i];
      const std::string path = "added_tokens[" + std::to_string(i) + "]";
      if (!e.is_object()) return InvalidArgument(path + ": expected an object");
      AddedToken a;
      long long id = -1;
      RETURN_IF_ERROR(GetInt(e, path, "id", &id));
      if (id < 0 || id > (1 << 30)) return InvalidArgument(path + ".id: expected a non-negative integer");
      a.id = static_cast<int32_t>(id);
      RETURN_IF_ERROR(GetString(e, path, "content", &a.content, true));
      if (a.content.empty()) return InvalidArgument(path + ".content: must not be empty");
      RETURN_IF_ERROR(GetBool(e, path, "special", &a.special));
      RETURN_IF_ERROR(GetBool(e, path, "lstrip", &a.lstrip));
      RETURN_IF_ERROR(GetBool(e, path, "rstrip", &a.rstrip));
      RETURN_IF_ERROR(GetBool(e, path, "normalized", &a.normalized));
      RETURN_IF_ERROR(GetBool(e, path, "single_word", &a.single_word));
      t->added_by_id_[a.id] = a;
      // Special tokens are never normalized (as in HF tokenizers).
      if (a.normalized && !a.special && t->normalizer_) {
        a.content = t->normalizer_->Normalize(a.content);
        normalized.push_back(a);
      } else {
        raw.push_back(a);
      }
    }
  }
  t->raw_matcher_ = AddedTokenMatcher(raw);
  t->normalized_matcher_ = AddedTokenMatcher(normalized);
  std::vector<AddedToken> special;
  for (const AddedToken& a : raw) {
    if (a.special) special.push_back({.id = a.id, .content = a.content, .special = true});
  }
  t->special_text_matcher_ = AddedTokenMatcher(special);
  return Status::Ok();
}

Status TokenizerLoader::ApplyConfig(const Json& cj, Tokenizer* t) {
  t->bos_token_ = TokenContent(cj, "bos_token");
  t->eos_token_ = TokenContent(cj, "eos_token");
  if (!t->bos_token_.empty()) t->bos_id_ = t->TokenToId(t->bos_token_);
  if (!t->eos_token_.empty()) t->eos_id_ = t->TokenToId(t->eos_token_);
  if (auto it = cj.find("clean_up_tokenization_spaces"); it != cj.end() && it->is_boolean()) {
    t->clean_up_ = it->get<bool>();
  }
  // Extra special tokens named by the config count as special in decoding.
  if (auto it = cj.find("additional_special_tokens"); it != cj.end() && it->is_array()) {
    for (const Json& e : *it) {
      std::string content;
      if (e.is_string()) content = e.get<std::string>();
      else if (e.is_object() && e.contains("content") && e["content"].is_string()) content = e["content"].get<std::string>();
      if (auto id = t->TokenToId(content); id && *id >= 0 && static_cast<size_t>(*id) < t->special_.size()) {
        t->special_[*id] = 1;
      }
    }
  }
  // Llama/Gemma tokenizer classes rebuild the template from add_bos/add_eos.
  std::string cls;
  if (auto it = cj.find("tokenizer_class"); it != cj.end() && it->is_string()) cls = it->get<std::string>();
  if (cls.size() > 4 && cls.compare(cls.size() - 4, 4, "Fast") == 0) cls.resize(cls.size() - 4);
  static const std::unordered_set<std::string> kTemplateFromConfig = {"LlamaTokenizer", "CodeLlamaTokenizer",
                                                                       "GemmaTokenizer"};
  if (kTemplateFromConfig.count(cls)) {
    bool add_bos = true, add_eos = false;
    RETURN_IF_ERROR(GetBool(cj, "tokenizer_config.json", "add_bos_token", &add_bos));
    RETURN_IF_ERROR(GetBool(cj, "tokenizer_config.json", "add_eos_token", &add_eos));
    SpecialTokenTemplate tmpl;
    if (add_bos) {
      if (!t->bos_id_) return InvalidArgument("tokenizer_config.json: add_bos_token is set but bos_token is unknown");
      tmpl.prefix.push_back(*t->bos_id_);
    }
    if (add_eos) {
      if (!t->eos_id_) return InvalidArgument("tokenizer_config.json: add_eos_token is set but eos_token is unknown");
      tmpl.suffix.push_back(*t->eos_id_);
    }
    t->template_ = std::move(tmpl);
  }
  return Status::Ok();
}

StatusOr<std::shared_ptr<const Tokenizer>> TokenizerLoader::Load(const Json& tj, const Json& cj) {
  if (!tj.is_object()) return InvalidArgument("not a JSON object");
  std::shared_ptr<Tokenizer> t(new Tokenizer());
  auto model = tj.find("model");
  if (model == tj.end()) return InvalidArgument("missing field 'model'");
  ASSIGN_OR_RETURN(t->model_, BpeModel::FromJson(*model, "model"));
  if (auto it = tj.find("normalizer"); it != tj.end() && !it->is_null()) {
    ASSIGN_OR_RETURN(t->normalizer_, ParseNormalizer(*it, "normalizer"));
  }
  if (auto it = tj.find("pre_tokenizer"); it != tj.end() && !it->is_null()) {
    ASSIGN_OR_RETURN(t->pre_tokenizer_, ParsePreTokenizer(*it, "pre_tokenizer"));
  }
  if (auto it = tj.find("post_processor"); it != tj.end() && !it->is_null()) {
    RETURN_IF_ERROR(ParsePostProcessor(*it, "post_processor", &t->template_));
  }
  if (auto it = tj.find("decoder"); it != tj.end() && !it->is_null()) {
    ASSIGN_OR_RETURN(t->decoder_, ParseDecoder(*it, "decoder"));
    const std::string d = it->dump();
    t->byte_level_decoder_ = d.find("\"ByteLevel\"") != std::string::npos;
    t->byte_fallback_decoder_ = d.find("\"ByteFallback\"") != std::string::npos;
    t->metaspace_decoder_ = d.find("\"Metaspace\"") != std::string::npos ||
                            d.find("\u2581") != std::string::npos || d.find("\xe2\x96\x81") != std::string::npos;
  }
  RETURN_IF_ERROR(LoadAddedTokens(tj, t.get()));
  int32_t max_id = t->model_->max_id();
  for (const auto& [id, a] : t->added_by_id_) max_id = std::max(max_id, id);
  t->vocab_size_ = max_id + 1;
  t->special_.assign(static_cast<size_t>(t->vocab_size_), 0);
  for (const auto& [id, a] : t->added_by_id_) t->special_[id] = a.special ? 1 : 0;
  for (int32_t id : t->template_.prefix) {
    if (id < 0 || id >= t->vocab_size_) return InvalidArgument("post_processor: special token id " + std::to_string(id) + " out of range");
  }
  for (int32_t id : t->template_.suffix) {
    if (id < 0 || id >= t->vocab_size_) return InvalidArgument("post_processor: special token id " + std::to_string(id) + " out of range");
  }
  if (cj.is_object()) RETURN_IF_ERROR(ApplyConfig(cj, t.get()));
  return std::shared_ptr<const Tokenizer>(std::move(t));
}

StatusOr<std::shared_ptr<const Tokenizer>> Tokenizer::FromJson(std::string_view tokenizer_json,
                                                               std::string_view config_json,
                                                               const std::string& name) {
  Json tj = Json::parse(tokenizer_json, nullptr, /*allow_exceptions=*/false);
  if (tj.is_discarded()) return InvalidArgument(name + ": not valid JSON");
  Json cj;
  if (!config_json.empty()) {
    cj = Json::parse(config_json, nullptr, false);
    if (cj.is_discarded() || !cj.is_object()) return InvalidArgument("tokenizer_config.json: not a JSON object");
  }
  try {
    auto t = TokenizerLoader::Load(tj, cj);
    if (!t.ok()) {
      const std::string& m = t.status().message();
      if (m.rfind("tokenizer_config.json", 0) == 0) return t.status();
      return Prefix(name, t.status());
    }
    return t;
  } catch (const std::exception& e) {  // nlohmann type errors on odd inputs
    return InvalidArgument(name + ": " + e.what());
  }
}

StatusOr<std::shared_ptr<const Tokenizer>> Tokenizer::FromFiles(const std::string& tokenizer_path,
                                                                const std::string& config_path) {
  ASSIGN_OR_RETURN(std::string tj, ReadFile(tokenizer_path));
  std::string cj;
  if (!config_path.empty()) {
    ASSIGN_OR_RETURN(cj, ReadFile(config_path));
  }
  return FromJson(tj, cj, tokenizer_path);
}

StatusOr<std::shared_ptr<const Tokenizer>> Tokenizer::FromDirectory(const std::string& dir) {
  const std::string config = dir + "/tokenizer_config.json";
  std::ifstream probe(config);
  return FromFiles(dir + "/tokenizer.json", probe ? config : "");
}

}  // namespace tessera::text

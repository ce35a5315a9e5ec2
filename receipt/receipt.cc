#include "receipt/receipt.h"

#include <sodium.h>

#include <algorithm>
#include <climits>
#include <stdexcept>

namespace tessera::receipt {
namespace {

using json = nlohmann::json;

// Seeds are uint64: a string, so JSON readers with 53-bit numbers keep them.
std::string SeedText(uint64_t seed) { return std::to_string(seed); }

Status FieldError(const std::string& field, const std::string& what) {
  return InvalidArgument("receipt: '" + field + "' " + what);
}

bool IsHexDigest(const json& v) {
  if (!v.is_string()) return false;
  const std::string& s = v.get_ref<const std::string&>();
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Status ReadDigest(const json& obj, const char* key, const std::string& path, std::string* out) {
  auto it = obj.find(key);
  if (it == obj.end() || !IsHexDigest(*it)) return FieldError(path + key, "must be a 64-digit lower-case hex SHA-256");
  *out = it->get<std::string>();
  return Status::Ok();
}


Status OnlyKeys(const json& obj, std::initializer_list<std::string_view> keys, const std::string& path) {
  for (const auto& [key, value] : obj.items()) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) return FieldError(path + key, "is not a receipt field");
  }
  return Status::Ok();
}

StatusOr<ChoiceRecord> ReadChoice(const json& c, size_t i, const std::string& path) {
  if (!c.is_object()) return FieldError(path.substr(0, path.size() - 1), "must be an object");
  ChoiceRecord rec;
  auto index = c.find("index");
  if (index == c.end() || !index->is_number_integer() || index->get<int64_t>() != static_cast<int64_t>(i)) {
    return FieldError(path + "index", "must be " + std::to_string(i));
  }
  rec.index = static_cast<int32_t>(i);
  auto ids = c.find("token_ids");
  rec.has_token_ids = ids != c.end();
  if (rec.has_token_ids && !ids->is_array()) return FieldError(path + "token_ids", "must be an array of token ids");
  for (const json& t : rec.has_token_ids ? *ids : json::array()) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) {
      return FieldError(path + "token_ids", "must hold non-negative 32-bit integers");
    }
    rec.token_ids.push_back(t.get<int32_t>());
  }
  RETURN_IF_ERROR(ReadDigest(c, "output", path, &rec.output));
  auto lp = c.find("logprobs");
  if (lp == c.end() || !(lp->is_null() || IsHexDigest(*lp))) {
    return FieldError(path + "logprobs", "must be null or a 64-digit lower-case hex SHA-256");
  }
  if (lp->is_string()) rec.logprobs = lp->get<std::string>();
  RETURN_IF_ERROR(OnlyKeys(c, {"index", "token_ids", "output", "logprobs"}, path));
  return rec;
}

StatusOr<GenerationRecord> ReadGeneration(const json& g, const std::string& path) {
  if (!g.is_object()) return FieldError(path.substr(0, path.size() - 1), "must be an object");
  GenerationRecord r;
  RETURN_IF_ERROR(ReadDigest(g, "request", path, &r.request));
  auto seed = g.find("seed");
  const std::string s = seed != g.end() && seed->is_string() ? seed->get<std::string>() : std::string();
  size_t used = 0;
  try {
    if (s.empty() || s[0] < '0' || s[0] > '9') throw std::invalid_argument(s);
    r.seed = std::stoull(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (s.empty() || used != s.size()) return FieldError(path + "seed", "must be a decimal string of an unsigned 64-bit integer");
  auto drawn = g.find("seed_drawn");
  if (drawn == g.end() || !drawn->is_boolean()) return FieldError(path + "seed_drawn", "must be a boolean");
  r.seed_drawn = drawn->get<bool>();
  auto choices = g.find("choices");
  if (choices == g.end() || !choices->is_array() || choices->empty()) {
    return FieldError(path + "choices", "must be a non-empty array");
  }
  for (size_t i = 0; i < choices->size(); ++i) {
    ASSIGN_OR_RETURN(ChoiceRecord c, ReadChoice((*choices)[i], i, path + "choices[" + std::to_string(i) + "]."));
    r.choices.push_back(std::move(c));
  }
  RETURN_IF_ERROR(OnlyKeys(g, {"request", "seed", "seed_drawn", "choices"}, path));
  return r;
}

}  // namespace

std::string CanonicalDump(const json& j) {
  // json (not ordered_json) keeps object keys in std::map order: ascending bytes.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string DigestHex(std::string_view bytes) { return ToHex(Sha256Of(bytes)); }

json CanonicalRequest(const Request& request, uint64_t seed_used, bool skip_special_tokens,
                      bool include_stop_str_in_output) {
  const SamplingParams& p = request.params;
  json bias = json::array();
  for (const auto& [token, b] : p.logit_bias) bias.push_back({token, b});
  return json{
      {"prompt_token_ids", request.prompt_token_ids},
      {"max_tokens", p.max_tokens ? json(*p.max_tokens) : json(nullptr)},
      {"min_tokens", p.min_tokens},
      {"temperature", p.temperature},
      {"top_p", p.top_p},
      {"top_k", p.top_k},
      {"min_p", p.min_p},
      {"presence_penalty", p.presence_penalty},
      {"frequency_penalty", p.frequency_penalty},
      {"repetition_penalty", p.repetition_penalty},
      {"logit_bias", bias},
      {"seed", SeedText(seed_used)},
      {"stop", p.stop},
      {"stop_token_ids", p.stop_token_ids},
      {"ignore_eos", p.ignore_eos},
      {"n", p.n},
      {"logprobs", p.logprobs},
      {"top_logprobs", p.top_logprobs},
      {"prompt_logprobs", p.prompt_logprobs ? json(*p.prompt_logprobs) : json(nullptr)},
      {"structured_output", p.constraint ? json(p.constraint_field) : json(nullptr)},
      {"skip_special_tokens", skip_special_tokens},
      {"include_stop_str_in_output", include_stop_str_in_output},
  };
}

std::string TokenIdsDigest(const std::vector<int32_t>& token_ids) { return DigestHex(CanonicalDump(json(token_ids))); }

std::string LogprobsDigest(const json& logprobs) { return DigestHex(CanonicalDump(logprobs)); }

ChoiceRecord MakeChoice(int32_t index, std::vector<int32_t> token_ids, const json* logprobs) {
  ChoiceRecord c;
  c.index = index;
  c.output = TokenIdsDigest(token_ids);
  c.token_ids = std::move(token_ids);
  if (logprobs != nullptr) c.logprobs = LogprobsDigest(*logprobs);
  return c;
}

namespace {

json Unsigned(const Receipt& r, bool with_token_ids) {
  json gens = json::array();
  for (const GenerationRecord& g : r.generations) {
    json choices = json::array();
    for (const ChoiceRecord& c : g.choices) {
      json choice = {{"index", c.index},
                     {"output", c.output},
                     {"logprobs", c.logprobs.empty() ? json(nullptr) : json(c.logprobs)}};
      if (with_token_ids && c.has_token_ids) choice["token_ids"] = c.token_ids;
      choices.push_back(std::move(choice));
    }
    gens.push_back({{"request", g.request}, {"seed", SeedText(g.seed)}, {"seed_drawn", g.seed_drawn}, {"choices", choices}});
  }
  return json{{"version", r.version},
              {"weights", r.server.weights},
              {"tokenizer", r.server.tokenizer},
              {"engine", r.server.engine},
              {"flags", r.server.flags},
              {"generations", gens}};
}

}  // namespace

std::string SignedBytes(const Receipt& r) { return CanonicalDump(Unsigned(r, /*with_token_ids=*/false)); }

Receipt Compact(Receipt r) {
  for (GenerationRecord& g : r.generations) {
    for (ChoiceRecord& c : g.choices) {
      c.has_token_ids = false;
      c.token_ids.clear();
    }
  }
  return r;
}

json ToJson(const Receipt& r) {
  json j = Unsigned(r, /*with_token_ids=*/true);
  if (r.signature) {
    j["signature"] = {{"alg", "ed25519"}, {"public_key", r.signature->public_key}, {"value", r.signature->value}};
  }
  return j;
}

StatusOr<Receipt> FromJson(const json& j) {
  if (!j.is_object()) return InvalidArgument("receipt: must be a JSON object");
  Receipt r;
  auto version = j.find("version");
  if (version == j.end() || !version->is_number_integer()) return FieldError("version", "must be an integer");
  if (version->get<int64_t>() != kReceiptVersion) {
    return FieldError("version", "is " + version->dump() + "; this server reads version " +
                                     std::to_string(kReceiptVersion));
  }
  RETURN_IF_ERROR(ReadDigest(j, "weights", "", &r.server.weights));
  RETURN_IF_ERROR(ReadDigest(j, "tokenizer", "", &r.server.tokenizer));
  RETURN_IF_ERROR(ReadDigest(j, "engine", "", &r.server.engine));
  RETURN_IF_ERROR(ReadDigest(j, "flags", "", &r.server.flags));
  auto gens = j.find("generations");
  if (gens == j.end() || !gens->is_array() || gens->empty()) return FieldError("generations", "must be a non-empty array");
  for (size_t g = 0; g < gens->size(); ++g) {
    ASSIGN_OR_RETURN(GenerationRecord rec, ReadGeneration((*gens)[g], "generations[" + std::to_string(g) + "]."));
    r.generations.push_back(std::move(rec));
  }
  if (auto sig = j.find("signature"); sig != j.end()) {
    if (!sig->is_object() || sig->value("alg", json()) != json("ed25519") || !sig->value("public_key", json()).is_string() ||
        !sig->value("value", json()).is_string()) {
      return FieldError("signature", "must be {\"alg\": \"ed25519\", \"public_key\": ..., \"value\": ...}");
    }
    r.signature = Signature{sig->at("public_key").get<std::string>(), sig->at("value").get<std::string>()};
  }
  RETURN_IF_ERROR(OnlyKeys(j, {"version", "weights", "tokenizer", "engine", "flags", "generations", "signature"}, ""));
  return r;
}

std::string Encode(const Receipt& r) { return Base64UrlEncode(CanonicalDump(ToJson(r))); }

StatusOr<Receipt> Decode(std::string_view text) {
  ASSIGN_OR_RETURN(std::string bytes, Base64UrlDecode(text));
  json j = json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("receipt: the decoded text is not JSON");
  return FromJson(j);
}

std::string Base64UrlEncode(std::string_view bytes) {
  constexpr int kVariant = sodium_base64_VARIANT_URLSAFE_NO_PADDING;
  std::string out(sodium_base64_ENCODED_LEN(bytes.size(), kVariant), '\0');
  sodium_bin2base64(out.data(), out.size(), reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                    kVariant);
  out.resize(out.size() - 1);  // the terminating NUL
  return out;
}

StatusOr<std::string> Base64UrlDecode(std::string_view text) {
  std::string out(text.size() * 3 / 4 + 3, '\0');
  size_t len = 0;
  const char* end = nullptr;
  if (sodium_base642bin(reinterpret_cast<unsigned char*>(out.data()), out.size(), text.data(), text.size(), nullptr,
                        &len, &end, sodium_base64_VARIANT_URLSAFE_NO_PADDING) != 0 ||
      end != text.data() + text.size()) {
    return InvalidArgument("receipt: not base64url (RFC 4648 section 5, without padding)");
  }
  out.resize(len);
  return out;
}

}  // namespace tessera::receipt

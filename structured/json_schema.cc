#include "structured/json_schema.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "structured/gbnf.h"
#include "structured/one_of.h"
#include "structured/regex.h"

namespace tessera::structured {
namespace {

using Json = nlohmann::ordered_json;

// Primitive rules: name -> (body, rules it uses). Bodies name other
// primitives without the prefix; Prim() adds it.
struct PrimDef {
  const char* body;
  std::vector<const char*> deps;
};
const std::map<std::string, PrimDef>& Prims() {
  static const std::map<std::string, PrimDef> kPrims = {
      {"space", {R"(| " " | "\n" [ \t]{0,20})", {}}},
      {"char",
       {R"([^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2})))",
        {}}},
      {"string", {R"("\"" @char* "\"" @space)", {"char", "space"}}},
      {"integral-part", {R"([0] | [1-9] [0-9]{0,15})", {}}},
      {"number", {R"("-"? @integral-part ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})? @space)", {"integral-part", "space"}}},
      {"nonneg-number", {R"(@integral-part ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})? @space)", {"integral-part", "space"}}},
      {"integer", {R"("-"? @integral-part @space)", {"integral-part", "space"}}},
      {"boolean", {R"(("true" | "false") @space)", {"space"}}},
      {"null", {R"("null" @space)", {"space"}}},
      {"value", {R"(@object | @array | @string | @number | @boolean | @null)",
                 {"object", "array", "string", "number", "boolean", "null"}}},
      {"object", {R"("{" @space (@string ":" @space @value ("," @space @string ":" @space @value)*)? "}" @space)",
                  {"string", "space", "value"}}},
      {"array", {R"("[" @space (@value ("," @space @value)*)? "]" @space)", {"space", "value"}}},
      {"date", {R"([0-9]{4} "-" (("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | "02-" ("0" [1-9] | "1" [0-9] | "2" [0-8])))",
                {}}},
      {"time", {R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))",
                {}}},
      {"date-time", {R"(@date "T" @time)", {"date", "time"}}},
      {"uuid", {R"([0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12})", {}}},
      {"email-atom", {R"([a-z0-9!#$%&'*+/=?^_`{|}~-]+)", {}}},
      {"email-label", {R"([a-z0-9] ([a-z0-9-]{0,61} [a-z0-9])?)", {}}},
      {"email", {R"(@email-atom ("." @email-atom)* "@" (@email-label ".")+ @email-label)", {"email-atom", "email-label"}}},
      {"ipv4-octet", {R"("25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9]? [0-9])", {}}},
      {"ipv4", {R"(@ipv4-octet "." @ipv4-octet "." @ipv4-octet "." @ipv4-octet)", {"ipv4-octet"}}},
  };
  return kPrims;
}

std::string Lit(const Json& v) { return GbnfLiteral(v.dump(-1, ' ', false, Json::error_handler_t::replace)); }

bool AllChar(const std::string& s, char c) { return s.find_first_not_of(c) == std::string::npos; }

// Decimal strings of equal length a <= b: a GBNF expression for [a, b].
std::string SameLen(const std::string& a, const std::string& b) {
  if (a == b) return GbnfLiteral(a);
  size_t p = 0;
  while (a[p] == b[p]) ++p;
  if (p > 0) return "(" + GbnfLiteral(a.substr(0, p)) + " " + SameLen(a.substr(p), b.substr(p)) + ")";
  const size_t n = a.size();
  auto cls = [](char lo, char hi) { return lo == hi ? GbnfLiteral(std::string(1, lo)) : std::string("[") + lo + "-" + hi + "]"; };
  auto tail = [n] { return n > 1 ? " [0-9]{" + std::to_string(n - 1) + "}" : std::string(); };
  if (n == 1) return cls(a[0], b[0]);
  const std::string ra = a.substr(1), rb = b.substr(1);
  if (AllChar(ra, '0') && AllChar(rb, '9')) return cls(a[0], b[0]) + tail();
  std::vector<std::string> alts;
  char start = a[0], end = b[0];
  if (!AllChar(ra, '0')) {
    alts.push_back(GbnfLiteral(std::string(1, a[0])) + " " + SameLen(ra, std::string(n - 1, '9')));
    ++start;
  }
  std::string hi_alt;
  if (!AllChar(rb, '9')) {
    hi_alt = GbnfLiteral(std::string(1, b[0])) + " " + SameLen(std::string(n - 1, '0'), rb);
    --end;
  }
  if (start <= end) alts.push_back(cls(start, end) + tail());
  if (!hi_alt.empty()) alts.push_back(hi_alt);
  std::string out;
  for (const auto& s : alts) out += (out.empty() ? "" : " | ") + s;
  return "(" + out + ")";
}

constexpr int64_t kMaxMagnitude = 999999999999999;  // 15 digits

// Non-negative integers in [lo, hi] (hi < 0: unbounded), no leading zeros.
std::string UintRange(int64_t lo, int64_t hi) {
  std::vector<std::string> alts;
  const int dlo = static_cast<int>(std::to_string(lo).size());
  const int dhi = hi < 0 ? dlo : static_cast<int>(std::to_string(hi).size());
  int64_t pow = 1;
  for (int i = 1; i < dlo; ++i) pow *= 10;  // 10^(dlo-1)
  for (int d = dlo; d <= dhi; ++d, pow *= 10) {
    const int64_t a = d == dlo ? lo : pow;
    const int64_t b = (hi >= 0 && d == dhi) ? hi : pow * 10 - 1;
    alts.push_back(SameLen(std::to_string(a), std::to_string(b)));
  }
  if (hi < 0 && dlo < 16) alts.push_back("[1-9] [0-9]{" + std::to_string(dlo) + ",15}");
  std::string out;
  for (const auto& s : alts) out += (out.empty() ? "" : " | ") + s;
  return "(" + out + ")";
}

class Converter {
 public:
  Converter(const Json& root, const CompileLimits& limits, const JsonSchemaGbnfOptions& o)
      : root_(root), limits_(limits), o_(o),
        deadline_(std::chrono::steady_clock::now() + limits.max_compile_time) {}

  StatusOr<std::string> Run() {
    const std::string dumped = root_.dump(-1, ' ', false, Json::error_handler_t::replace);
    if (dumped.size() > limits_.max_source_bytes) {
      return InvalidArgument("the schema is too large (over " + std::to_string(limits_.max_source_bytes) + " bytes)");
    }
    ASSIGN_OR_RETURN(std::string expr, Visit(root_, "", 0));
    return Emit(expr);
  }

  // The GBNF text: the root rule `expr`, then every rule made so far.
  std::string Emit(const std::string& expr) const {
    std::string out = o_.rule_prefix + o_.root_name + " ::= " + expr + "\n";
    for (const auto& name : order_) out += name + " ::= " + rules_.at(name) + "\n";
    return out;
  }

  std::string Prim(const std::string& name) {
    const std::string full = o_.rule_prefix + name;
    if (rules_.count(full)) return full;
    const PrimDef& def = Prims().at(name);
    std::string body;
    for (const char* p = def.body; *p; ++p) {
      if (*p == '@') {
        body += o_.rule_prefix;
      } else {
        body += *p;
      }
    }
    rules_[full] = body;
    order_.push_back(full);
    for (const char* d : def.deps) Prim(d);
    return full;
  }

 private:
  Status Error(const std::string& path, const std::string& what) const {
    return InvalidArgument("schema at '" + (path.empty() ? std::string("/") : path) + "': " + what);
  }

  std::string NewRule(const std::string& hint, const std::string& body) {
    std::string base = o_.rule_prefix;
    for (char c : hint) base += ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) ? c : '-';
    if (base.size() > 48) base.resize(48);
    std::string name = base;
    for (int k = 1; rules_.count(name) && rules_[name] != body; ++k) name = base + "-" + std::to_string(k);
    if (!rules_.count(name)) {
      rules_[name] = body;
      order_.push_back(name);
    }
    return name;
  }

  Status CheckUnsupported(const Json& s, const std::string& path) const {
    static const char* kUnsupported[] = {"not", "if", "then", "else", "patternProperties", "propertyNames",
                                         "dependentRequired", "dependentSchemas", "dependencies",
                                         "unevaluatedProperties", "unevaluatedItems", "contains", "minContains",
                                         "maxContains", "multipleOf", "minProperties", "maxProperties",
                                         "$dynamicRef", "$recursiveRef", "additionalItems"};
    for (const char* k : kUnsupported) {
      if (s.contains(k)) return Error(path, std::string("'") + k + "' is not supported");
    }
    if (auto it = s.find("uniqueItems"); it != s.end() && *it == true) {
      return Error(path, "'uniqueItems' is not supported");
    }
    return Status::Ok();
  }

  StatusOr<std::string> Ref(const std::string& ref, const std::string& path, int depth) {
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    const std::string shown = "$ref \"" + ref.substr(0, 64) + "\"";
    if (ref.empty() || ref[0] != '#') return Error(path, "only local $ref (\"#...\") is supported, got " + shown);
    const std::string pointer = ref.substr(1);
    if (!pointer.empty() && pointer[0] != '/') return Error(path, shown + " is not a JSON pointer");
    const Json* target = ResolveLocalRef(root_, ref);
    if (target == nullptr) return Error(path, shown + " not found");
    // Named before visiting, so recursive references resolve to it.
    std::string name = o_.rule_prefix + "ref" + std::to_string(refs_.size());
    refs_[ref] = name;
    rules_[name] = "\"\"";
    order_.push_back(name);
    ASSIGN_OR_RETURN(std::string body, Visit(*target, pointer, depth + 1));
    rules_[name] = body;
    return name;
  }

  StatusOr<std::string> Visit(const Json& s, const std::string& path, int depth) {
    if (depth > limits_.max_schema_depth) {
      return Error(path, "nested deeper than " + std::to_string(limits_.max_schema_depth) + " levels");
    }
    if (std::chrono::steady_clock::now() > deadline_) return InvalidArgument("the schema took too long to compile");
    if (s.is_boolean()) {
      if (s.get<bool>()) return Prim("value");
      return Error(path, "the schema false matches nothing (unsatisfiable)");
    }
    if (!s.is_object()) return Error(path, "a schema must be an object or a boolean");
    RETURN_IF_ERROR(CheckUnsupported(s, path));
    if (auto it = s.find("$ref"); it != s.end()) {
      if (!it->is_string()) return Error(path, "$ref must be a string");
      return Ref(it->get<std::string>(), path, depth);
    }
    std::vector<std::string> types;
    if (auto it = s.find("type"); it != s.end()) {
      if (it->is_string()) {
        types.push_back(it->get<std::string>());
      } else if (it->is_array() && !it->empty()) {
        for (const Json& t : *it) {
          if (!t.is_string()) return Error(path, "'type' must be a string or an array of strings");
          types.push_back(t.get<std::string>());
        }
      } else {
        return Error(path, "'type' must be a string or an array of strings");
      }
    }
    for (const char* k : {"const", "enum"}) {
      auto it = s.find(k);
      if (it == s.end()) continue;
      std::vector<Json> values;
      if (std::string(k) == "const") {
        values.push_back(*it);
      } else if (it->is_array()) {
        values.assign(it->begin(), it->end());
      } else {
        return Error(path, "'enum' must be an array");
      }
      std::string out;
      for (const Json& v : values) {
        if (!types.empty() && !MatchesType(v, types)) continue;
        out += (out.empty() ? "" : " | ") + Lit(v);
      }
      if (out.empty()) return Error(path, std::string("'") + k + "' allows no value (unsatisfiable)");
      return "(" + out + ") " + Prim("space");
    }
    for (const char* k : {"anyOf", "oneOf"}) {
      auto it = s.find(k);
      if (it == s.end()) continue;
      if (!it->is_array() || it->empty()) return Error(path, std::string("'") + k + "' must be a non-empty array");
      // The grammar generates the union; that is oneOf only when no two branches overlap (one_of.h).
      if (std::string(k) == "oneOf") RETURN_IF_ERROR(CheckOneOfExclusive(root_, *it, path));
      std::string out;
      int i = 0;
      for (const Json& sub : *it) {
        ASSIGN_OR_RETURN(std::string e, Visit(sub, path + "/" + k + "/" + std::to_string(i++), depth + 1));
        out += (out.empty() ? "" : " | ") + e;
      }
      return "(" + out + ")";
    }
    if (auto it = s.find("allOf"); it != s.end()) {
      if (!it->is_array() || it->size() != 1) return Error(path, "'allOf' is supported with exactly one schema");
      return Visit((*it)[0], path + "/allOf/0", depth + 1);
    }
    if (types.empty()) {
      if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) {
        types.push_back("object");
      } else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems")) {
        types.push_back("array");
      } else if (s.contains("pattern") || s.contains("minLength") || s.contains("maxLength") || s.contains("format")) {
        types.push_back("string");
      } else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
                 s.contains("exclusiveMaximum")) {
        types.push_back("number");
      } else {
        return Prim("value");
      }
    }
    std::string out;
    for (const std::string& t : types) {
      ASSIGN_OR_RETURN(std::string e, Typed(s, t, path, depth));
      out += (out.empty() ? "" : " | ") + e;
    }
    return types.size() == 1 ? out : "(" + out + ")";
  }

  static bool MatchesType(const Json& v, const std::vector<std::string>& types) {
    for (const std::string& t : types) {
      if ((t == "string" && v.is_string()) || (t == "number" && v.is_number()) ||
          (t == "integer" && (v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()))) ||
          (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null()) || (t == "object" && v.is_object()) ||
          (t == "array" && v.is_array())) {
        return true;
      }
    }
    return false;
  }

  Status ReadCount(const Json& s, const char* key, const std::string& path, int* out) const {
    auto it = s.find(key);
    if (it == s.end()) return Status::Ok();
    if (!it->is_number_integer() || it->get<int64_t>() < 0) return Error(path, std::string("'") + key + "' must be a non-negative integer");
    if (it->get<int64_t>() > limits_.max_repeat) {
      return Error(path, std::string("'") + key + "' over " + std::to_string(limits_.max_repeat) + " is not supported");
    }
    *out = static_cast<int>(it->get<int64_t>());
    return Status::Ok();
  }

  StatusOr<std::string> Typed(const Json& s, const std::string& t, const std::string& path, int depth) {
    if (t == "string") return StringRule(s, path);
    if (t == "integer") return IntegerRule(s, path);
    if (t == "number") {
      for (const char* k : {"maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
        if (s.contains(k)) return Error(path, std::string("'") + k + "' on a number is not supported (only on integers)");
      }
      if (auto it = s.find("minimum"); it != s.end()) {
        if (!it->is_number() || it->get<double>() != 0.0) return Error(path, "'minimum' on a number is supported only as 0");
        return Prim("nonneg-number");
      }
      return Prim("number");
    }
    if (t == "boolean") return Prim("boolean");
    if (t == "null") return Prim("null");
    if (t == "object") return ObjectRule(s, path, depth);
    if (t == "array") return ArrayRule(s, path, depth);
    return Error(path, "unknown type '" + t.substr(0, 32) + "'");
  }

  StatusOr<std::string> StringRule(const Json& s, const std::string& path) {
    int min = 0, max = -1;
    RETURN_IF_ERROR(ReadCount(s, "minLength", path, &min));
    RETURN_IF_ERROR(ReadCount(s, "maxLength", path, &max));
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    if (max >= 0 && max < min) return Error(path, "maxLength < minLength (unsatisfiable)");
    if (auto it = s.find("format"); it != s.end()) {
      if (!it->is_string()) return Error(path, "'format' must be a string");
      const std::string f = it->get<std::string>();
      static const std::set<std::string> kFormats = {"date", "time", "date-time", "uuid", "email", "ipv4"};
      if (!kFormats.count(f)) return Error(path, "format '" + f.substr(0, 32) + "' is not supported");
      if (lengths || s.contains("pattern")) return Error(path, "'format' with lengths or 'pattern' is not supported");
      return NewRule(f + "-string", "\"\\\"\" " + Prim(f) + " \"\\\"\" " + Prim("space"));
    }
    if (auto it = s.find("pattern"); it != s.end()) {
      if (!it->is_string()) return Error(path, "'pattern' must be a string");
      if (lengths) return Error(path, "'pattern' with minLength/maxLength is not supported");
      StatusOr<std::string> re = RegexToGbnf(it->get<std::string>(), limits_, {.json_string = true, .search = true});
      if (!re.ok()) return Error(path, "'pattern': " + re.status().message());
      return NewRule("pattern-string", "\"\\\"\" " + *re + " \"\\\"\" " + Prim("space"));
    }
    if (!lengths) return Prim("string");
    const std::string rep = "{" + std::to_string(min) + "," + (max >= 0 ? std::to_string(max) : "") + "}";
    return NewRule("string-" + std::to_string(min) + "-" + std::to_string(max),
                   "\"\\\"\" " + Prim("char") + rep + " \"\\\"\" " + Prim("space"));
  }

  StatusOr<std::string> IntegerRule(const Json& s, const std::string& path) {
    std::optional<int64_t> lo, hi;
    for (const char* k : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      auto it = s.find(k);
      if (it == s.end()) continue;
      if (!it->is_number()) return Error(path, std::string("'") + k + "' must be a number");
      const double v = it->get<double>();
      if (!(std::fabs(v) <= static_cast<double>(kMaxMagnitude))) {
        return Error(path, std::string("'") + k + "' beyond 15 digits is not supported");
      }
      const std::string key = k;
      if (key == "minimum") lo = std::max(lo.value_or(INT64_MIN), static_cast<int64_t>(std::ceil(v)));
      if (key == "exclusiveMinimum") lo = std::max(lo.value_or(INT64_MIN), static_cast<int64_t>(std::floor(v)) + 1);
      if (key == "maximum") hi = std::min(hi.value_or(INT64_MAX), static_cast<int64_t>(std::floor(v)));
      if (key == "exclusiveMaximum") hi = std::min(hi.value_or(INT64_MAX), static_cast<int64_t>(std::ceil(v)) - 1);
    }
    if (!lo && !hi) return Prim("integer");
    if (lo && hi && *lo > *hi) return Error(path, "the integer range is empty (unsatisfiable)");
    std::vector<std::string> alts;
    if (!lo || *lo < 0) {  // negative part: magnitudes [max(1, -hi), -lo]
      const int64_t mlo = hi && *hi < 0 ? -*hi : 1;
      const int64_t mhi = lo ? -*lo : -1;
      alts.push_back("\"-\" " + UintRange(mlo, mhi));
    }
    if (!hi || *hi >= 0) alts.push_back(UintRange(lo ? std::max<int64_t>(*lo, 0) : 0, hi ? *hi : -1));
    std::string out;
    for (const auto& a : alts) out += (out.empty() ? "" : " | ") + a;
    return NewRule("integer-range", "(" + out + ") " + Prim("space"));
  }

  // A JSON key that is not one of `names` (printable ASCII, no escapes).
  std::string ExcludingKey(const std::vector<std::string>& names) {
    struct TrieNode {
      std::map<char, int> next;
      bool terminal = false;
    };
    std::vector<TrieNode> trie(1);
    for (const std::string& n : names) {
      bool plain = true;
      for (char c : n) plain = plain && c >= 0x20 && c < 0x7F && c != '"' && c != '\\';
      if (!plain) continue;
      int at = 0;
      for (char c : n) {
        auto it = trie[at].next.find(c);
        if (it == trie[at].next.end()) {
          trie.emplace_back();
          it = trie[at].next.emplace(c, static_cast<int>(trie.size() - 1)).first;
        }
        at = it->second;
      }
      trie[at].terminal = true;
    }
    const std::string raw = NewRule("key-char", R"([ !#-\[\]-~])");
    std::vector<std::string> names_of(trie.size());
    for (size_t i = 0; i < trie.size(); ++i) names_of[i] = o_.rule_prefix + "key-" + std::to_string(key_rules_++);
    for (size_t i = 0; i < trie.size(); ++i) {
      std::string body;
      std::string cls = "[";
      for (int c = 0x20; c < 0x7F; ++c) {
        if (c == '"' || c == '\\' || trie[i].next.count(static_cast<char>(c))) continue;
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02X", c);
        cls += buf;
      }
      cls += "]";
      body = cls + " " + raw + "* \"\\\"\"";
      for (const auto& [c, j] : trie[i].next) body += " | " + GbnfLiteral(std::string(1, c)) + " " + names_of[j];
      if (!trie[i].terminal) body += " | \"\\\"\"";
      rules_[names_of[i]] = body;
      order_.push_back(names_of[i]);
    }
    return NewRule("additional-key", "\"\\\"\" " + names_of[0] + " " + Prim("space"));
  }

  StatusOr<std::string> ObjectRule(const Json& s, const std::string& path, int depth) {
    struct Item {
      std::string kv;
      bool required;
    };
    std::set<std::string> required;
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) return Error(path, "'required' must be an array of strings");
      for (const Json& r : *it) {
        if (!r.is_string()) return Error(path, "'required' must be an array of strings");
        required.insert(r.get<std::string>());
      }
    }
    std::vector<Item> items;
    std::vector<std::string> names;
    if (auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) return Error(path, "'properties' must be an object");
      for (const auto& [name, sub] : it->items()) {
        names.push_back(name);
        const bool req = required.count(name) > 0;
        if (sub.is_boolean() && !sub.get<bool>()) {
          if (req) return Error(path, "required property '" + name.substr(0, 64) + "' has the schema false");
          continue;
        }
        ASSIGN_OR_RETURN(std::string val, Visit(sub, path + "/properties/" + name, depth + 1));
        items.push_back({NewRule(name + "-kv", Lit(Json(name)) + " " + Prim("space") + " \":\" " + Prim("space") + " " + val), req});
      }
    }
    for (const std::string& r : required) {
      if (std::find(names.begin(), names.end(), r) == names.end()) {
        return Error(path, "required property '" + r.substr(0, 64) + "' is not in 'properties' (not supported)");
      }
    }
    std::string add_kv;
    if (auto it = s.find("additionalProperties"); it != s.end() && !(it->is_boolean() && !it->get<bool>())) {
      ASSIGN_OR_RETURN(std::string val, Visit(*it, path + "/additionalProperties", depth + 1));
      add_kv = NewRule("additional-kv", ExcludingKey(names) + " \":\" " + Prim("space") + " " + val);
    }
    const std::string comma = "\",\" " + Prim("space") + " ";
    std::string body;
    size_t first_req = items.size();
    for (size_t i = 0; i < items.size(); ++i) {
      if (items[i].required) {
        first_req = i;
        break;
      }
    }
    const std::string add_tail = add_kv.empty() ? "" : " (" + comma + add_kv + ")*";
    if (first_req < items.size()) {
      for (size_t i = 0; i < first_req; ++i) body += "(" + items[i].kv + " " + comma + ")? ";
      body += items[first_req].kv;
      for (size_t i = first_req + 1; i < items.size(); ++i) {
        body += items[i].required ? " " + comma + items[i].kv : " (" + comma + items[i].kv + ")?";
      }
      body += add_tail;
    } else {
      // All optional: the first present item has no comma. rest_i: (, kv_i)? rest_{i+1}.
      std::string rest = add_kv.empty() ? "" : NewRule("rest", add_tail.substr(1));
      std::vector<std::string> alts;
      if (!add_kv.empty()) alts.push_back(add_kv + (rest.empty() ? "" : " " + rest));
      for (size_t i = items.size(); i-- > 0;) {
        alts.push_back(items[i].kv + (rest.empty() ? "" : " " + rest));
        const std::string body_i = "(" + comma + items[i].kv + ")?" + (rest.empty() ? "" : " " + rest);
        rest = NewRule("rest", body_i);
      }
      if (!alts.empty()) {
        std::string a;
        for (auto k = alts.rbegin(); k != alts.rend(); ++k) a += (a.empty() ? "" : " | ") + *k;
        body = "(" + a + ")?";
      }
    }
    return NewRule("object", "\"{\" " + Prim("space") + " " + body + " \"}\" " + Prim("space"));
  }

  StatusOr<std::string> ArrayRule(const Json& s, const std::string& path, int depth) {
    int min = 0, max = -1;
    RETURN_IF_ERROR(ReadCount(s, "minItems", path, &min));
    RETURN_IF_ERROR(ReadCount(s, "maxItems", path, &max));
    if (max >= 0 && max < min) return Error(path, "maxItems < minItems (unsatisfiable)");
    const std::string comma = "\",\" " + Prim("space") + " ";
    const std::string open = "\"[\" " + Prim("space") + " ", close = " \"]\" " + Prim("space");
    const Json* prefix = nullptr;
    const Json* items = nullptr;
    if (auto it = s.find("prefixItems"); it != s.end()) prefix = &*it;
    if (auto it = s.find("items"); it != s.end()) {
      if (it->is_array()) {
        if (prefix) return Error(path, "'items' as an array with 'prefixItems' is not supported");
        prefix = &*it;
      } else {
        items = &*it;
      }
    }
    std::string item_expr;
    if (items && !(items->is_boolean() && !items->get<bool>())) {
      ASSIGN_OR_RETURN(item_expr, Visit(*items, path + "/items", depth + 1));
    } else if (!items && !prefix) {
      item_expr = Prim("value");
    }
    if (prefix) {
      if (!prefix->is_array()) return Error(path, "'prefixItems' must be an array");
      const int n = static_cast<int>(prefix->size());
      if (max >= 0 && max < n) return Error(path, "maxItems below the number of prefixItems is not supported");
      if (min > n && item_expr.empty()) return Error(path, "minItems above the tuple length (unsatisfiable)");
      std::string body;
      for (int i = 0; i < n; ++i) {
        ASSIGN_OR_RETURN(std::string e, Visit((*prefix)[i], path + "/prefixItems/" + std::to_string(i), depth + 1));
        body += (i == 0 ? "" : " " + comma) + e;
      }
      if (!item_expr.empty() && max != n) {
        const int lo = std::max(0, min - n);
        const std::string rep = "{" + std::to_string(lo) + "," + (max >= 0 ? std::to_string(max - n) : "") + "}";
        body += n == 0 ? "" : " (" + comma + item_expr + ")" + rep;
        if (n == 0) body = "(" + item_expr + " (" + comma + item_expr + ")*)?";  // a tuple of none: like items
      }
      return NewRule("tuple", open + body + close);
    }
    if (item_expr.empty() || max == 0) {
      if (min > 0) return Error(path, "'items' false with minItems > 0 (unsatisfiable)");
      return NewRule("empty-array", open + close.substr(1));
    }
    const int rep_lo = std::max(0, min - 1);
    const std::string rep = "{" + std::to_string(rep_lo) + "," + (max >= 0 ? std::to_string(max - 1) : "") + "}";
    std::string list = item_expr + " (" + comma + item_expr + ")" + rep;
    if (min == 0) list = "(" + list + ")?";
    return NewRule("array", open + list + close);
  }

  const Json& root_;
  const CompileLimits& limits_;
  const JsonSchemaGbnfOptions& o_;
  std::chrono::steady_clock::time_point deadline_;
  std::map<std::string, std::string> rules_;
  std::vector<std::string> order_;
  std::map<std::string, std::string> refs_;
  int key_rules_ = 0;
};

}  // namespace

StatusOr<std::string> JsonSchemaToGbnf(const Json& schema, const CompileLimits& limits,
                                       const JsonSchemaGbnfOptions& options) {
  Converter c(schema, limits, options);
  return c.Run();
}

std::string JsonObjectGbnf(const JsonSchemaGbnfOptions& options) {
  const Json none = Json::object();
  CompileLimits limits;
  Converter c(none, limits, options);
  return c.Emit(c.Prim("object"));
}

}  // namespace tessera::structured

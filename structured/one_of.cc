#include "structured/one_of.h"

#include <optional>
#include <vector>

namespace tessera::structured {
namespace {

using Json = nlohmann::ordered_json;

// The JSON types a schema accepts, as bits.
constexpr unsigned kNull = 1;
constexpr unsigned kBoolean = 2;
constexpr unsigned kNumber = 4;  // integer too: 1 is both
constexpr unsigned kString = 8;
constexpr unsigned kArray = 16;
constexpr unsigned kObject = 32;
constexpr unsigned kAny = 63;

constexpr int kMaxRefHops = 16;  // $ref chains (and cycles) past this count as "anything"

unsigned TypeOfName(const std::string& t) {
  if (t == "null") return kNull;
  if (t == "boolean") return kBoolean;
  if (t == "integer" || t == "number") return kNumber;
  if (t == "string") return kString;
  if (t == "array") return kArray;
  if (t == "object") return kObject;
  return kAny;  // unknown: the converter refuses it anyway
}

unsigned TypeOfValue(const Json& v) {
  if (v.is_null()) return kNull;
  if (v.is_boolean()) return kBoolean;
  if (v.is_number()) return kNumber;
  if (v.is_string()) return kString;
  if (v.is_array()) return kArray;
  return kObject;
}

// Follows $ref and allOf-of-one to the schema that decides; null: unknown.
const Json* Deref(const Json& root, const Json* s) {
  for (int hops = 0; s != nullptr && s->is_object(); ++hops) {
    if (hops > kMaxRefHops) return nullptr;
    if (auto it = s->find("$ref"); it != s->end()) {
      s = it->is_string() ? ResolveLocalRef(root, it->get<std::string>()) : nullptr;
    } else if (auto all = s->find("allOf"); all != s->end() && all->is_array() && all->size() == 1 &&
                                            !s->contains("type")) {
      s = &(*all)[0];
    } else {
      break;
    }
  }
  return s;
}

// The JSON types a schema accepts (a superset).
unsigned Accepted(const Json& root, const Json& schema, int depth) {
  const Json* s = Deref(root, &schema);
  if (s == nullptr || depth > kMaxRefHops) return kAny;
  if (s->is_boolean()) return s->get<bool>() ? kAny : 0;
  if (!s->is_object()) return kAny;
  unsigned types = kAny;
  if (auto it = s->find("type"); it != s->end()) {
    types = 0;
    if (it->is_string()) types = TypeOfName(it->get<std::string>());
    if (it->is_array()) {
      for (const Json& t : *it) types |= t.is_string() ? TypeOfName(t.get<std::string>()) : kAny;
    }
  }
  if (auto it = s->find("const"); it != s->end()) types &= TypeOfValue(*it);
  if (auto it = s->find("enum"); it != s->end() && it->is_array()) {
    unsigned values = 0;
    for (const Json& v : *it) values |= TypeOfValue(v);
    types &= values;
  }
  for (const char* k : {"anyOf", "oneOf"}) {
    if (auto it = s->find(k); it != s->end() && it->is_array()) {
      unsigned any = 0;
      for (const Json& b : *it) any |= Accepted(root, b, depth + 1);
      types &= any;
    }
  }
  return types;
}

// The values a schema allows when it lists them (const / enum); nullopt: not a list.
std::optional<std::vector<Json>> Values(const Json& root, const Json& schema) {
  const Json* s = Deref(root, &schema);
  if (s == nullptr || !s->is_object()) return std::nullopt;
  if (auto it = s->find("const"); it != s->end()) return std::vector<Json>{*it};
  if (auto it = s->find("enum"); it != s->end() && it->is_array()) return std::vector<Json>(it->begin(), it->end());
  return std::nullopt;
}

bool Disjoint(const std::vector<Json>& a, const std::vector<Json>& b) {
  for (const Json& x : a) {
    for (const Json& y : b) {
      if (x == y) return false;
    }
  }
  return true;
}

bool Requires(const Json& s, const std::string& name) {
  auto it = s.find("required");
  if (it == s.end() || !it->is_array()) return false;
  for (const Json& r : *it) {
    if (r.is_string() && r.get<std::string>() == name) return true;
  }
  return false;
}

// Both require a property whose listed values differ.
bool Discriminated(const Json& root, const Json& a_schema, const Json& b_schema) {
  const Json* a = Deref(root, &a_schema);
  const Json* b = Deref(root, &b_schema);
  if (a == nullptr || b == nullptr || !a->is_object() || !b->is_object()) return false;
  auto pa = a->find("properties");
  auto pb = b->find("properties");
  if (pa == a->end() || pb == b->end() || !pa->is_object() || !pb->is_object()) return false;
  for (auto it = pa->begin(); it != pa->end(); ++it) {
    auto other = pb->find(it.key());
    if (other == pb->end() || !Requires(*a, it.key()) || !Requires(*b, it.key())) continue;
    auto va = Values(root, it.value());
    auto vb = Values(root, *other);
    if (va && vb && Disjoint(*va, *vb)) return true;
  }
  return false;
}

bool Exclusive(const Json& root, const Json& a, const Json& b) {
  if ((Accepted(root, a, 0) & Accepted(root, b, 0)) == 0) return true;
  auto va = Values(root, a);
  auto vb = Values(root, b);
  if (va && vb && Disjoint(*va, *vb)) return true;
  return Discriminated(root, a, b);
}

}  // namespace

const Json* ResolveLocalRef(const Json& root, const std::string& ref) {
  if (ref.empty() || ref[0] != '#') return nullptr;
  const Json* target = &root;
  const std::string pointer = ref.substr(1);
  if (!pointer.empty() && pointer[0] != '/') return nullptr;
  for (size_t at = 1; at <= pointer.size() && !pointer.empty();) {
    size_t next = pointer.find('/', at);
    if (next == std::string::npos) next = pointer.size();
    std::string token = pointer.substr(at, next - at);
    for (size_t p = token.find("~1"); p != std::string::npos; p = token.find("~1", p + 1)) token.replace(p, 2, "/");
    for (size_t p = token.find("~0"); p != std::string::npos; p = token.find("~0", p + 1)) token.replace(p, 2, "~");
    if (!target->is_object() || !target->contains(token)) return nullptr;
    target = &(*target)[token];
    at = next + 1;
  }
  return target;
}

Status CheckOneOfExclusive(const Json& root, const Json& branches, const std::string& path) {
  for (size_t i = 0; i < branches.size(); ++i) {
    for (size_t j = i + 1; j < branches.size(); ++j) {
      if (Exclusive(root, branches[i], branches[j])) continue;
      return InvalidArgument("schema at '" + (path.empty() ? std::string("/") : path) + "': 'oneOf' branches " +
                             std::to_string(i) + " and " + std::to_string(j) +
                             " may both match one value, and a grammar cannot exclude that; give branches of "
                             "different types, different const/enum values, or a required property with different "
                             "const/enum values in each (or use 'anyOf' if a value may match both)");
    }
  }
  return Status::Ok();
}

}  // namespace tessera::structured

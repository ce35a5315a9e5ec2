#include "text/jinja/value.h"

#include <algorithm>
#include <cmath>

#include "text/jinja/py_str.h"

namespace tessera::jinja {

Value Value::Undefined(std::string hint) {
  Value v;
  v.str_ = std::move(hint);
  return v;
}
Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.flag_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.int_ = i;
  return v;
}
Value Value::Float(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.float_ = d;
  return v;
}
Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.str_ = std::move(s);
  return v;
}
Value Value::List(std::vector<Value> items, bool tuple) {
  Value v;
  v.kind_ = Kind::kList;
  v.flag_ = tuple;
  int d = 0;
  for (const Value& x : items) d = std::max(d, x.depth_);
  v.depth_ = d + 1;
  v.list_ = std::make_shared<const std::vector<Value>>(std::move(items));
  return v;
}
Value Value::Dict(std::shared_ptr<DictData> data) {
  Value v;
  v.kind_ = Kind::kDict;
  int d = 0;
  for (const auto& kv : data->items) d = std::max({d, kv.first.depth_, kv.second.depth_});
  v.depth_ = d + 1;
  v.dict_ = std::move(data);
  return v;
}
Value Value::Namespace(std::shared_ptr<DictData> data) {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.depth_ = 1;
  v.dict_ = std::move(data);
  return v;
}
Value Value::Function(std::shared_ptr<const Callable> fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.fn_ = std::move(fn);
  return v;
}

const Value* DictData::Find(const Value& key) const {
  for (const auto& kv : items)
    if (PyEquals(kv.first, key)) return &kv.second;
  return nullptr;
}
const Value* DictData::Find(const std::string& key) const {
  for (const auto& kv : items)
    if (kv.first.is_string() && kv.first.str() == key) return &kv.second;
  return nullptr;
}
void DictData::Set(Value key, Value value) {
  for (auto& kv : items) {
    if (PyEquals(kv.first, key)) {
      kv.second = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

bool Truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: case Value::Kind::kNone: return false;
    case Value::Kind::kBool: return v.bool_value();
    case Value::Kind::kInt: return v.int_value() != 0;
    case Value::Kind::kFloat: return v.float_value() != 0.0;
    case Value::Kind::kString: return !v.str().empty();
    case Value::Kind::kList: return !v.list().empty();
    case Value::Kind::kDict: return !v.dict().items.empty();
    case Value::Kind::kNamespace: case Value::Kind::kCallable: return true;
  }
  return false;
}

bool PyEquals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.float_value() == b.float_value();
    return a.int_value() == b.int_value();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined: case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.str() == b.str();
    case Value::Kind::kList: {
      if (a.is_tuple() != b.is_tuple() || a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i)
        if (!PyEquals(a.list()[i], b.list()[i])) return false;
      return true;
    }
    case Value::Kind::kDict: {
      if (a.dict().items.size() != b.dict().items.size()) return false;
      for (const auto& kv : a.dict().items) {
        const Value* o = b.dict().Find(kv.first);
        if (o == nullptr || !PyEquals(kv.second, *o)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace: return &a.dict() == &b.dict();
    case Value::Kind::kCallable: return &a.callable() == &b.callable();
    default: return false;
  }
}

std::string TypeName(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "str";
    case Value::Kind::kList: return v.is_tuple() ? "tuple" : "list";
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kNamespace: return "Namespace";
    case Value::Kind::kCallable: return "function";
  }
  return "object";
}

namespace {
void AppendRepr(const Value& v, std::string* out);

void AppendStr(const Value& v, std::string* out) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return;
    case Value::Kind::kNone: *out += "None"; return;
    case Value::Kind::kBool: *out += v.bool_value() ? "True" : "False"; return;
    case Value::Kind::kInt: *out += std::to_string(v.int_value()); return;
    case Value::Kind::kFloat: *out += PyReprFloat(v.float_value()); return;
    case Value::Kind::kString: *out += v.str(); return;
    case Value::Kind::kList: {
      *out += v.is_tuple() ? "(" : "[";
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i) *out += ", ";
        AppendRepr(v.list()[i], out);
      }
      if (v.is_tuple() && v.list().size() == 1) *out += ",";
      *out += v.is_tuple() ? ")" : "]";
      return;
    }
    case Value::Kind::kDict: {
      *out += "{";
      bool first = true;
      for (const auto& kv : v.dict().items) {
        if (!first) *out += ", ";
        first = false;
        AppendRepr(kv.first, out);
        *out += ": ";
        AppendRepr(kv.second, out);
      }
      *out += "}";
      return;
    }
    case Value::Kind::kNamespace: *out += "<Namespace>"; return;
    case Value::Kind::kCallable: *out += "<function " + v.callable().name + ">"; return;
  }
}

void AppendRepr(const Value& v, std::string* out) {
  if (v.is_string()) *out += PyReprString(v.str());
  else if (v.is_undefined()) *out += "Undefined";
  else AppendStr(v, out);
}
}  // namespace

std::string ToStr(const Value& v) {
  std::string out;
  AppendStr(v, &out);
  return out;
}

std::string Repr(const Value& v) {
  std::string out;
  AppendRepr(v, &out);
  return out;
}

StatusOr<Value> FromJson(const nlohmann::ordered_json& j) {
  // Depth is checked before recursing so deeply nested input cannot overflow.
  struct Conv {
    static StatusOr<Value> Run(const nlohmann::ordered_json& j, int depth) {
      if (depth > kMaxValueDepth) return InvalidArgument("JSON nested too deeply");
      switch (j.type()) {
        case nlohmann::ordered_json::value_t::null: return Value::None();
        case nlohmann::ordered_json::value_t::boolean: return Value::Bool(j.get<bool>());
        case nlohmann::ordered_json::value_t::number_integer: return Value::Int(j.get<int64_t>());
        case nlohmann::ordered_json::value_t::number_unsigned: {
          uint64_t u = j.get<uint64_t>();
          if (u > static_cast<uint64_t>(INT64_MAX)) return Value::Float(static_cast<double>(u));
          return Value::Int(static_cast<int64_t>(u));
        }
        case nlohmann::ordered_json::value_t::number_float: return Value::Float(j.get<double>());
        case nlohmann::ordered_json::value_t::string: return Value::String(j.get<std::string>());
        case nlohmann::ordered_json::value_t::array: {
          std::vector<Value> items;
          items.reserve(j.size());
          for (const auto& x : j) {
            ASSIGN_OR_RETURN(Value v, Run(x, depth + 1));
            items.push_back(std::move(v));
          }
          return Value::List(std::move(items));
        }
        case nlohmann::ordered_json::value_t::object: {
          auto d = std::make_shared<DictData>();
          for (auto it = j.begin(); it != j.end(); ++it) {
            ASSIGN_OR_RETURN(Value v, Run(it.value(), depth + 1));
            d->items.emplace_back(Value::String(it.key()), std::move(v));
          }
          return Value::Dict(std::move(d));
        }
        default: return InvalidArgument("unsupported JSON value");
      }
    }
  };
  return Conv::Run(j, 0);
}

namespace {
Status DumpJson(const Value& v, const JsonDumpOptions& o, int level, std::string* out) {
  bool pretty = o.indent >= 0 || o.indent_is_str;
  std::string item_sep = o.separators ? o.separators->first : (pretty ? "," : ", ");
  std::string key_sep = o.separators ? o.separators->second : ": ";
  auto newline = [&](int lvl) {
    *out += "\n";
    for (int i = 0; i < lvl; ++i) {
      if (o.indent_is_str) *out += o.indent_str;
      else out->append(static_cast<size_t>(o.indent), ' ');
    }
  };
  switch (v.kind()) {
    case Value::Kind::kNone: *out += "null"; return Status::Ok();
    case Value::Kind::kBool: *out += v.bool_value() ? "true" : "false"; return Status::Ok();
    case Value::Kind::kInt: *out += std::to_string(v.int_value()); return Status::Ok();
    case Value::Kind::kFloat: {
      double d = v.float_value();
      if (std::isnan(d)) *out += "NaN";
      else if (std::isinf(d)) *out += d > 0 ? "Infinity" : "-Infinity";
      else *out += PyReprFloat(d);
      return Status::Ok();
    }
    case Value::Kind::kString: AppendJsonString(v.str(), o.ensure_ascii, out); return Status::Ok();
    case Value::Kind::kList: {
      if (v.list().empty()) { *out += "[]"; return Status::Ok(); }
      *out += "[";
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i) *out += item_sep;
        if (pretty) newline(level + 1);
        RETURN_IF_ERROR(DumpJson(v.list()[i], o, level + 1, out));
      }
      if (pretty) newline(level);
      *out += "]";
      return Status::Ok();
    }
    case Value::Kind::kDict: {
      if (v.dict().items.empty()) { *out += "{}"; return Status::Ok(); }
      std::vector<const std::pair<Value, Value>*> items;
      for (const auto& kv : v.dict().items) items.push_back(&kv);
      if (o.sort_keys) {
        for (auto* kv : items)
          if (!kv->first.is_string())
            return InvalidArgument("tojson: sort_keys needs string keys");
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first.str() < b->first.str(); });
      }
      *out += "{";
      bool first = true;
      for (auto* kv : items) {
        if (!first) *out += item_sep;
        first = false;
        if (pretty) newline(level + 1);
        const Value& k = kv->first;
        if (k.is_string()) AppendJsonString(k.str(), o.ensure_ascii, out);
        else if (k.is_bool()) *out += k.bool_value() ? "\"true\"" : "\"false\"";
        else if (k.is_none()) *out += "\"null\"";
        else if (k.is_int()) *out += "\"" + std::to_string(k.int_value()) + "\"";
        else if (k.is_float()) *out += "\"" + PyReprFloat(k.float_value()) + "\"";
        else return InvalidArgument("keys must be str, int, float, bool or None, not " + TypeName(k));
        *out += key_sep;
        RETURN_IF_ERROR(DumpJson(kv->second, o, level + 1, out));
      }
      if (pretty) newline(level);
      *out += "}";
      return Status::Ok();
    }
    default:
      return InvalidArgument("Object of type " + TypeName(v) + " is not JSON serializable");
  }
}
}  // namespace

StatusOr<std::string> ToJson(const Value& v, const JsonDumpOptions& options) {
  std::string out;
  RETURN_IF_ERROR(DumpJson(v, options, 0, &out));
  return out;
}

}  // namespace tessera::jinja

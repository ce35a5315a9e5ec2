// Value: the dynamically typed value of the Jinja interpreter, with Python
// semantics for truthiness, equality, str()/repr() and json.dumps().
// Values are cheap to copy: lists and dicts are shared immutable data (the HF
// sandbox forbids mutating them); only namespace() objects are mutable, and they
// are shared by reference as in Python. A Value is not thread-safe to mutate, but
// immutable values may be read from several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tessera::jinja {

class Value;
struct DictData;
struct Callable;

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable
  };

  Value() = default;  // Undefined
  static Value Undefined(std::string hint = "");
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double d);
  static Value String(std::string s);
  static Value List(std::vector<Value> items, bool tuple = false);
  static Value Dict(std::shared_ptr<DictData> d);
  static Value Namespace(std::shared_ptr<DictData> d);
  static Value Function(std::shared_ptr<const Callable> fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  // Python's int includes bool.
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && flag_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool bool_value() const { return flag_; }
  int64_t int_value() const { return is_bool() ? (flag_ ? 1 : 0) : int_; }
  double float_value() const { return is_float() ? float_ : static_cast<double>(int_value()); }
  const std::string& str() const { return str_; }  // string content, or Undefined hint
  const std::vector<Value>& list() const { return *list_; }
  const DictData& dict() const { return *dict_; }     // kDict or kNamespace
  DictData* mutable_dict() const { return dict_.get(); }  // namespace attribute set
  const Callable& callable() const { return *fn_; }
  // Nesting depth of lists/dicts (scalars are 0); bounded so that printing and
  // destroying values cannot overflow the stack.
  int depth() const { return depth_; }

 private:
  Kind kind_ = Kind::kUndefined;
  bool flag_ = false;  // bool value, or tuple-ness of a list
  int depth_ = 0;
  int64_t int_ = 0;
  double float_ = 0;
  std::string str_;
  std::shared_ptr<const std::vector<Value>> list_;
  std::shared_ptr<DictData> dict_;
  std::shared_ptr<const Callable> fn_;
};

// Insertion-ordered dict with Python key equality (1 == 1.0 == True). Lookup is a
// linear scan: chat-template dicts are small.
struct DictData {
  std::vector<std::pair<Value, Value>> items;
  const Value* Find(const Value& key) const;
  const Value* Find(const std::string& key) const;
  void Set(Value key, Value value);
};

// A callable value: a bound method (`s.strip`), a global function (`range`),
// or a macro defined by the template (`node` points into the owning Template).
struct Callable {
  enum class Kind { kMethod, kGlobal, kMacro };
  Kind kind = Kind::kGlobal;
  std::string name;
  Value receiver;
  const void* node = nullptr;
};

bool Truthy(const Value& v);
bool PyEquals(const Value& a, const Value& b);
// Python type name for error messages: "str", "int", "dict", "NoneType", ...
std::string TypeName(const Value& v);
// str(v) as Jinja prints it ("" for Undefined, "None", "True", "['a', 1]").
std::string ToStr(const Value& v);
// repr(v).
std::string Repr(const Value& v);

// Deepest list/dict nesting a Value may have.
inline constexpr int kMaxValueDepth = 200;

// JSON (parsed with key order kept) → Value, with json.loads types. Fails on
// nesting deeper than kMaxValueDepth.
StatusOr<Value> FromJson(const nlohmann::ordered_json& j);
// json.dumps(v, ensure_ascii, indent, separators, sort_keys). indent < 0 means None.
struct JsonDumpOptions {
  bool ensure_ascii = false;
  int64_t indent = -1;
  std::string indent_str;  // when indent was given as a string
  bool indent_is_str = false;
  std::optional<std::pair<std::string, std::string>> separators;
  bool sort_keys = false;
};
StatusOr<std::string> ToJson(const Value& v, const JsonDumpOptions& options);

}  // namespace tessera::jinja

// Attribute/item access, iteration, tests, globals and str/dict methods.
// Filters live in filters.cc.
#include "text/jinja/builtins.h"

#include <ctime>
#include <set>

#include "text/jinja/error.h"
#include "text/jinja/ops.h"
#include "text/jinja/py_str.h"

namespace tessera::jinja {
namespace {

const std::set<std::string, std::less<>>& StrMethods() {
  static const std::set<std::string, std::less<>> k = {
      "strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "upper", "lower", "title",
      "capitalize", "replace", "find", "count", "join", "isdigit", "isspace", "isalpha", "isalnum",
      "islower", "isupper", "splitlines"};
  return k;
}
const std::set<std::string, std::less<>>& DictMethods() {
  static const std::set<std::string, std::less<>> k = {"items", "keys", "values", "get"};
  return k;
}
// dict attributes that exist in Python but are not (safely) callable here: they
// shadow keys of the same name, as Python's getattr does.
const std::set<std::string, std::less<>>& DictShadowed() {
  static const std::set<std::string, std::less<>> k = {"copy", "pop", "update", "clear", "fromkeys",
                                                        "setdefault", "popitem"};
  return k;
}

[[noreturn]] void RuntimeErr(const std::string& m) { Fail(TemplateError::Kind::kRuntime, m); }

Value Bound(const Value& receiver, const std::string& name) {
  auto fn = std::make_shared<Callable>();
  fn->kind = Callable::Kind::kMethod;
  fn->name = name;
  fn->receiver = receiver;
  return Value::Function(std::move(fn));
}

const Value* Kw(const CallArgs& a, const char* name) {
  for (const auto& [k, v] : a.kwargs)
    if (k == name) return &v;
  return nullptr;
}
// Positional argument i or keyword `name`, else nullptr.
const Value* Arg(const CallArgs& a, size_t i, const char* name) {
  if (i < a.positional.size()) return &a.positional[i];
  return Kw(a, name);
}
const std::string* OptStr(const Value* v, const char* what) {
  if (v == nullptr || v->is_none()) return nullptr;
  if (!v->is_string()) RuntimeErr(std::string(what) + " arg must be None or str");
  return &v->str();
}

bool AllCodePoints(const std::string& s, bool (*pred)(char32_t)) {
  std::vector<char32_t> cps = DecodeUtf8(s);
  if (cps.empty()) return false;
  for (char32_t c : cps)
    if (!pred(c)) return false;
  return true;
}

}  // namespace

bool IsKnownMethod(std::string_view name) {
  return StrMethods().count(name) || DictMethods().count(name);
}

bool IsKnownGlobal(std::string_view name) {
  return name == "range" || name == "namespace" || name == "raise_exception" || name == "strftime_now" ||
         name == "dict";
}

Value GetAttr(const Value& obj, const std::string& name) {
  RequireDefined(obj);
  if (obj.is_dict()) {
    if (DictMethods().count(name)) return Bound(obj, name);
    if (DictShadowed().count(name)) return Value::Undefined("'dict object' attribute '" + name + "' is unsafe");
    if (const Value* v = obj.dict().Find(name)) return *v;
    return Value::Undefined("'dict object' has no attribute '" + name + "'");
  }
  if (obj.is_namespace()) {
    if (const Value* v = obj.dict().Find(name)) return *v;
    return Value::Undefined("'Namespace' object has no attribute '" + name + "'");
  }
  if (obj.is_string() && StrMethods().count(name)) return Bound(obj, name);
  return Value::Undefined("'" + TypeName(obj) + " object' has no attribute '" + name + "'");
}

Value GetItem(const Value& obj, const Value& key) {
  RequireDefined(obj);
  if (obj.is_dict() || obj.is_namespace()) {
    if (const Value* v = obj.dict().Find(key)) return *v;
    if (key.is_string() && obj.is_dict()) return GetAttr(obj, key.str());
    return Value::Undefined("'dict object' has no attribute " + Repr(key));
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.int_value();
    if (obj.is_list()) {
      int64_t n = static_cast<int64_t>(obj.list().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::Undefined(TypeName(obj) + " object has no element " + std::to_string(key.int_value()));
      return obj.list()[static_cast<size_t>(i)];
    }
    std::vector<char32_t> cps = DecodeUtf8(obj.str());
    int64_t n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::Undefined("str object has no element " + std::to_string(key.int_value()));
    std::string out;
    AppendUtf8(cps[static_cast<size_t>(i)], &out);
    return Value::String(std::move(out));
  }
  if (key.is_string()) return GetAttr(obj, key.str());
  return Value::Undefined("'" + TypeName(obj) + " object' has no attribute " + Repr(key));
}

Value Slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  RequireDefined(obj);
  if (!obj.is_list() && !obj.is_string()) return Value::Undefined("object is not sliceable");
  auto as_index = [](const Value& v, bool* present) -> int64_t {
    *present = !(v.is_none() || v.is_undefined());
    if (!*present) return 0;
    if (!v.is_int() && !v.is_bool()) RuntimeErr("slice indices must be integers or None");
    return v.int_value();
  };
  bool has_start, has_stop, has_step;
  int64_t start = as_index(start_v, &has_start), stop = as_index(stop_v, &has_stop);
  int64_t step = as_index(step_v, &has_step);
  if (!has_step) step = 1;
  if (step == 0) RuntimeErr("slice step cannot be zero");
  std::vector<char32_t> cps;
  int64_t len;
  if (obj.is_string()) {
    cps = DecodeUtf8(obj.str());
    len = static_cast<int64_t>(cps.size());
  } else {
    len = static_cast<int64_t>(obj.list().size());
  }
  int64_t lower = step > 0 ? 0 : -1, upper = step > 0 ? len : len - 1;
  auto adjust = [&](int64_t v, bool present, int64_t dflt) {
    if (!present) return dflt;
    if (v < 0) {
      v += len;
      if (v < lower) v = lower;
    } else if (v > upper) {
      v = upper;
    }
    return v;
  };
  start = adjust(start, has_start, step < 0 ? upper : lower);
  stop = adjust(stop, has_stop, step < 0 ? lower : upper);
  std::vector<size_t> idx;
  if (step > 0) {
    for (int64_t i = start; i < stop; i += step) idx.push_back(static_cast<size_t>(i));
  } else {
    for (int64_t i = start; i > stop; i += step) idx.push_back(static_cast<size_t>(i));
  }
  if (obj.is_string()) {
    std::string out;
    for (size_t i : idx) AppendUtf8(cps[i], &out);
    return Value::String(std::move(out));
  }
  std::vector<Value> out;
  out.reserve(idx.size());
  for (size_t i : idx) out.push_back(obj.list()[i]);
  return Value::List(std::move(out), obj.is_tuple());
}

std::vector<Value> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return v.list();
    case Value::Kind::kString: {
      std::vector<Value> out;
      for (char32_t c : DecodeUtf8(v.str())) {
        std::string s;
        AppendUtf8(c, &s);
        out.push_back(Value::String(std::move(s)));
      }
      return out;
    }
    case Value::Kind::kDict: {
      std::vector<Value> out;
      for (const auto& kv : v.dict().items) out.push_back(kv.first);
      return out;
    }
    default: RuntimeErr("'" + TypeName(v) + "' object is not iterable");
  }
}

int64_t Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kList: return static_cast<int64_t>(v.list().size());
    case Value::Kind::kString: return Utf8Length(v.str());
    case Value::Kind::kDict: return static_cast<int64_t>(v.dict().items.size());
    default: RuntimeErr("object of type '" + TypeName(v) + "' has no len()");
  }
}

// ---- Tests -----------------------------------------------------------------

bool IsKnownTest(std::string_view n) {
  static const std::set<std::string, std::less<>> k = {
      "defined", "undefined", "none", "boolean", "false", "true", "integer", "float", "number", "string",
      "mapping", "iterable", "sequence", "callable", "odd", "even", "divisibleby", "eq", "equalto", "==",
      "ne", "!=", "lt", "lessthan", "<", "le", "<=", "gt", "greaterthan", ">", "ge", ">=", "in", "sameas",
      "lower", "upper", "escaped", "filter", "test"};
  return k.count(n) > 0;
}

bool CallTest(BuiltinContext& ctx, const std::string& n, const Value& v, const CallArgs& a) {
  auto arg = [&](size_t i) -> const Value& {
    if (i >= a.positional.size()) RuntimeErr("test '" + n + "' is missing an argument");
    return a.positional[i];
  };
  if (n == "defined") return !v.is_undefined();
  if (n == "undefined") return v.is_undefined();
  if (n == "none") return v.is_none();
  if (n == "boolean") return v.is_bool();
  if (n == "false") return v.is_bool() && !v.bool_value();
  if (n == "true") return v.is_bool() && v.bool_value();
  if (n == "integer") return v.is_int();
  if (n == "float") return v.is_float();
  if (n == "number") return v.is_number();
  if (n == "string") return v.is_string();
  if (n == "mapping") return v.is_dict();
  if (n == "iterable") return v.is_list() || v.is_string() || v.is_dict() || v.is_undefined();
  if (n == "sequence") return v.is_list() || v.is_string() || v.is_dict() || v.is_undefined();
  if (n == "callable") return v.is_callable();
  if (n == "escaped") return false;
  if (n == "odd" || n == "even") {
    RequireDefined(v);
    if (!v.is_int() && !v.is_bool()) RuntimeErr("odd/even test needs an integer");
    int64_t r = v.int_value() % 2;
    return n == "odd" ? r != 0 : r == 0;
  }
  if (n == "divisibleby") {
    const Value& d = arg(0);
    if (!v.is_number() || !d.is_number()) RuntimeErr("divisibleby needs numbers");
    if (d.float_value() == 0) RuntimeErr("integer division or modulo by zero");
    Value m = BinaryOp("%", v, d, INT64_MAX);
    return m.float_value() == 0;
  }
  if (n == "eq" || n == "equalto" || n == "==") return PyEquals(v, arg(0));
  if (n == "ne" || n == "!=") return !PyEquals(v, arg(0));
  if (n == "lt" || n == "lessthan" || n == "<") return PyLess(v, arg(0));
  if (n == "le" || n == "<=") return PyLess(v, arg(0)) || PyEquals(v, arg(0));
  if (n == "gt" || n == "greaterthan" || n == ">") return PyLess(arg(0), v);
  if (n == "ge" || n == ">=") return PyLess(arg(0), v) || PyEquals(v, arg(0));
  if (n == "in") return Contains(arg(0), v);
  if (n == "sameas") {
    const Value& o = arg(0);
    if (v.is_none() || v.is_bool() || o.is_none() || o.is_bool())
      return v.kind() == o.kind() && (v.is_none() || v.bool_value() == o.bool_value());
    if (v.is_int() && o.is_int()) return v.int_value() == o.int_value() && v.int_value() >= -5 && v.int_value() <= 256;
    if (v.is_dict() || v.is_namespace()) return o.kind() == v.kind() && &v.dict() == &o.dict();
    if (v.is_list()) return o.is_list() && &v.list() == &o.list();
    return false;
  }
  if (n == "lower" || n == "upper") {
    std::string s = ToStr(v);
    bool cased = false;
    for (char32_t c : DecodeUtf8(s)) {
      std::string one;
      AppendUtf8(c, &one);
      std::string conv = n == "lower" ? PyUpper(one) : PyLower(one);
      if (conv != one) {
        cased = true;
        if ((n == "lower" ? PyLower(one) : PyUpper(one)) != one) return false;
      }
    }
    return cased;
  }
  if (n == "filter") return v.is_string() && IsKnownFilter(v.str());
  if (n == "test") return v.is_string() && IsKnownTest(v.str());
  (void)ctx;
  RuntimeErr("unknown test '" + n + "'");
}

// ---- Globals ---------------------------------------------------------------

Value CallGlobal(BuiltinContext& ctx, const std::string& n, const CallArgs& a) {
  if (n == "raise_exception") {
    std::string msg = a.positional.empty() ? "" : ToStr(a.positional[0]);
    Fail(TemplateError::Kind::kRaised, msg);
  }
  if (n == "range") {
    if (a.positional.empty() || a.positional.size() > 3) RuntimeErr("range expected 1 to 3 arguments");
    for (const Value& v : a.positional)
      if (!v.is_int() && !v.is_bool()) RuntimeErr("'" + TypeName(v) + "' object cannot be interpreted as an integer");
    int64_t start = 0, stop, step = 1;
    if (a.positional.size() == 1) {
      stop = a.positional[0].int_value();
    } else {
      start = a.positional[0].int_value();
      stop = a.positional[1].int_value();
      if (a.positional.size() == 3) step = a.positional[2].int_value();
    }
    if (step == 0) RuntimeErr("range() arg 3 must not be zero");
    std::vector<Value> out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (out.size() >= 100000)
        RuntimeErr("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
      out.push_back(Value::Int(i));
    }
    ctx.CountWork(static_cast<int64_t>(out.size()));
    return Value::List(std::move(out));
  }
  if (n == "namespace" || n == "dict") {
    auto d = std::make_shared<DictData>();
    for (const Value& p : a.positional) {
      if (!p.is_dict()) RuntimeErr(n + "() positional argument must be a mapping");
      for (const auto& kv : p.dict().items) d->Set(kv.first, kv.second);
    }
    for (const auto& [k, v] : a.kwargs) d->Set(Value::String(k), v);
    return n == "dict" ? Value::Dict(std::move(d)) : Value::Namespace(std::move(d));
  }
  if (n == "strftime_now") {
    if (a.positional.size() != 1 || !a.positional[0].is_string()) RuntimeErr("strftime_now expects a format string");
    std::time_t t = static_cast<std::time_t>(ctx.NowUnixSeconds());
    std::tm tm{};
    gmtime_r(&t, &tm);
    const std::string& fmt = a.positional[0].str();
    if (fmt.size() > 1000) RuntimeErr("strftime format too long");
    std::vector<char> buf(fmt.size() * 16 + 64);
    size_t len = fmt.empty() ? 0 : std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
    return Value::String(std::string(buf.data(), len));
  }
  RuntimeErr("'" + n + "' is undefined");
}

// ---- Methods ---------------------------------------------------------------

Value CallMethod(BuiltinContext& ctx, const Value& self, const std::string& n, const CallArgs& a) {
  if (self.is_dict()) {
    if (n == "items") {
      std::vector<Value> out;
      for (const auto& kv : self.dict().items) out.push_back(Value::List({kv.first, kv.second}, true));
      return Value::List(std::move(out));
    }
    if (n == "keys" || n == "values") {
      std::vector<Value> out;
      for (const auto& kv : self.dict().items) out.push_back(n == "keys" ? kv.first : kv.second);
      return Value::List(std::move(out));
    }
    if (n == "get") {
      if (a.positional.empty()) RuntimeErr("get expected at least 1 argument");
      if (const Value* v = self.dict().Find(a.positional[0])) return *v;
      return a.positional.size() > 1 ? a.positional[1] : Value::None();
    }
  }
  if (self.is_string()) {
    const std::string& s = self.str();
    if (n == "strip" || n == "lstrip" || n == "rstrip") {
      const std::string* chars = OptStr(Arg(a, 0, "chars"), "strip");
      StripSide side = n == "strip" ? StripSide::kBoth : n == "lstrip" ? StripSide::kLeft : StripSide::kRight;
      return Value::String(PyStrip(s, chars, side));
    }
    if (n == "split" || n == "rsplit") {
      const std::string* sep = OptStr(Arg(a, 0, "sep"), "split");
      if (sep && sep->empty()) RuntimeErr("empty separator");
      const Value* ms = Arg(a, 1, "maxsplit");
      int64_t maxsplit = ms ? ms->int_value() : -1;
      if (n == "rsplit" && maxsplit >= 0) RuntimeErr("rsplit with maxsplit is not supported");
      std::vector<Value> out;
      for (auto& part : PySplit(s, sep, maxsplit)) out.push_back(Value::String(std::move(part)));
      ctx.CountWork(static_cast<int64_t>(out.size()));
      return Value::List(std::move(out));
    }
    if (n == "startswith" || n == "endswith") {
      if (a.positional.empty()) RuntimeErr(n + " takes at least 1 argument");
      std::vector<Value> cands = a.positional[0].is_tuple() ? a.positional[0].list() : std::vector<Value>{a.positional[0]};
      for (const Value& c : cands) {
        if (!c.is_string()) RuntimeErr(n + " first arg must be str or a tuple of str, not " + TypeName(c));
        const std::string& p = c.str();
        bool ok = n == "startswith" ? s.compare(0, p.size(), p) == 0
                                    : s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
        if (ok) return Value::Bool(true);
      }
      return Value::Bool(false);
    }
    if (n == "upper") return Value::String(PyUpper(s));
    if (n == "lower") return Value::String(PyLower(s));
    if (n == "title") return Value::String(PyTitle(s));
    if (n == "capitalize") return Value::String(PyCapitalize(s));
    if (n == "replace") {
      if (a.positional.size() < 2 || !a.positional[0].is_string() || !a.positional[1].is_string())
        RuntimeErr("replace expects two strings");
      const Value* c = Arg(a, 2, "count");
      return Value::String(PyReplace(s, a.positional[0].str(), a.positional[1].str(), c ? c->int_value() : -1));
    }
    if (n == "find" || n == "count") {
      if (a.positional.empty() || !a.positional[0].is_string()) RuntimeErr(n + " expects a string");
      const std::string& sub = a.positional[0].str();
      if (n == "find") {
        size_t f = s.find(sub);
        return Value::Int(f == std::string::npos ? -1 : Utf8Length(std::string_view(s).substr(0, f)));
      }
      if (sub.empty()) return Value::Int(Utf8Length(s) + 1);
      int64_t cnt = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++cnt;
      return Value::Int(cnt);
    }
    if (n == "join") {
      if (a.positional.empty()) RuntimeErr("join takes exactly one argument");
      std::string out;
      bool first = true;
      for (const Value& x : Iterate(a.positional[0])) {
        if (!x.is_string()) RuntimeErr("sequence item: expected str instance, " + TypeName(x) + " found");
        if (!first) out += s;
        first = false;
        out += x.str();
      }
      return Value::String(std::move(out));
    }
    if (n == "isdigit") return Value::Bool(AllCodePoints(s, [](char32_t c) { return c >= '0' && c <= '9'; }));
    if (n == "isspace") return Value::Bool(AllCodePoints(s, PyIsSpace));
    if (n == "isalpha")
      return Value::Bool(AllCodePoints(s, [](char32_t c) { return (c | 32) >= 'a' && (c | 32) <= 'z'; }));
    if (n == "isalnum")
      return Value::Bool(AllCodePoints(s, [](char32_t c) { return ((c | 32) >= 'a' && (c | 32) <= 'z') || (c >= '0' && c <= '9'); }));
    if (n == "islower" || n == "isupper") return Value::Bool(CallTest(ctx, n.substr(2), self, {}));
    if (n == "splitlines") {
      std::vector<Value> out;
      for (auto& l : PySplitLines(s)) out.push_back(Value::String(std::move(l)));
      return Value::List(std::move(out));
    }
  }
  RuntimeErr("'" + TypeName(self) + "' object has no attribute '" + n + "'");
}

}  // namespace tessera::jinja

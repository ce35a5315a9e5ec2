// Jinja filters with jinja2 3.1 semantics; tojson follows HF transformers'
// override (json.dumps with ensure_ascii=False, no HTML escaping).
#include <algorithm>
#include <cfenv>
#include <cmath>
#include <set>

#include "text/jinja/builtins.h"
#include "text/jinja/error.h"
#include "text/jinja/ops.h"
#include "text/jinja/py_str.h"

namespace tessera::jinja {
namespace {

[[noreturn]] void RuntimeErr(const std::string& m) { Fail(TemplateError::Kind::kRuntime, m); }

const Value* Arg(const CallArgs& a, size_t i, const char* name) {
  if (i < a.positional.size()) return &a.positional[i];
  for (const auto& [k, v] : a.kwargs)
    if (k == name) return &v;
  return nullptr;
}
bool ArgBool(const CallArgs& a, size_t i, const char* name, bool dflt) {
  const Value* v = Arg(a, i, name);
  return v ? Truthy(*v) : dflt;
}

// environment.getitem chain over "a.b.0" (jinja's make_attrgetter).
Value GetAttribute(const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return GetItem(item, attribute);
  Value cur = item;
  const std::string& path = attribute.str();
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = numeric && part.size() < 18 ? GetItem(cur, Value::Int(std::stoll(part))) : GetItem(cur, Value::String(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// Key used by sort/unique/dictsort: lowercases strings unless case-sensitive.
Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::String(PyLower(v.str()));
  return v;
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

std::string JinjaTitle(const std::string& s) {
  // re.split(r"([-\s({\[<]+)") then item[0].upper() + item[1:].lower().
  std::vector<char32_t> cps = DecodeUtf8(s);
  auto is_sep = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || PyIsSpace(c); };
  std::string out;
  size_t i = 0;
  while (i < cps.size()) {
    size_t j = i;
    bool sep = is_sep(cps[i]);
    while (j < cps.size() && is_sep(cps[j]) == sep) ++j;
    std::string piece = EncodeUtf8(std::vector<char32_t>(cps.begin() + i, cps.begin() + j));
    std::string first;
    AppendUtf8(cps[i], &first);
    out += PyUpper(first) + PyLower(EncodeUtf8(std::vector<char32_t>(cps.begin() + i + 1, cps.begin() + j)));
    i = j;
  }
  return out;
}

std::string Indent(const std::string& s_in, const Value* width_v, bool first, bool blank) {
  std::string ind = width_v && width_v->is_string() ? width_v->str()
                                                     : std::string(static_cast<size_t>(std::clamp<int64_t>(
                                                                       width_v ? width_v->int_value() : 4, 0, 1000)),
                                                                   ' ');
  std::vector<std::string> lines = PySplitLines(s_in + "\n");
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
  } else if (!lines.empty()) {
    rv = lines[0];
    if (lines.size() > 1) {
      rv += "\n";
      for (size_t i = 1; i < lines.size(); ++i) rv += (i > 1 ? "\n" : "") + (lines[i].empty() ? "" : ind) + lines[i];
    }
  }
  if (first) rv = ind + rv;
  return rv;
}

double PyRound(double x, int64_t digits) {
  double scale = std::pow(10.0, static_cast<double>(digits));
  int saved = std::fegetround();
  std::fesetround(FE_TONEAREST);
  double r = std::nearbyint(x * scale) / scale;
  std::fesetround(saved);
  return r;
}

Value SelectOrReject(BuiltinContext& ctx, const Value& seq, const CallArgs& a, bool attr, bool select) {
  size_t i = 0;
  Value attribute;
  if (attr) {
    if (a.positional.empty()) RuntimeErr("Missing parameter for attribute name");
    attribute = a.positional[0];
    i = 1;
  }
  std::string test;
  CallArgs test_args;
  if (i < a.positional.size()) {
    if (!a.positional[i].is_string()) RuntimeErr("test name must be a string");
    test = a.positional[i].str();
    if (!IsKnownTest(test)) RuntimeErr("No test named '" + test + "'");
    test_args.positional.assign(a.positional.begin() + static_cast<long>(i) + 1, a.positional.end());
    test_args.kwargs = a.kwargs;
  }
  std::vector<Value> out;
  for (const Value& item : Iterate(seq)) {
    ctx.CountWork(1);
    Value probe = attr ? GetAttribute(item, attribute) : item;
    bool r = test.empty() ? Truthy(probe) : ctx.ApplyTest(test, probe, test_args);
    if (r == select) out.push_back(item);
  }
  return Value::List(std::move(out));
}

}  // namespace

bool IsKnownFilter(std::string_view n) {
  static const std::set<std::string, std::less<>> k = {
      "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float",
      "indent", "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject",
      "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum",
      "title", "tojson", "trim", "unique", "upper", "wordcount"};
  return k.count(n) > 0;
}

Value CallFilter(BuiltinContext& ctx, const std::string& n, const Value& v, const CallArgs& a) {
  if (n == "default" || n == "d") {
    const Value* dv = Arg(a, 0, "default_value");
    bool boolean = ArgBool(a, 1, "boolean", false);
    if (v.is_undefined() || (boolean && !Truthy(v))) return dv ? *dv : Value::String("");
    return v;
  }
  if (n == "trim") {
    const Value* chars = Arg(a, 0, "chars");
    const std::string* cs = chars && !chars->is_none() ? &chars->str() : nullptr;
    if (chars && !chars->is_none() && !chars->is_string()) RuntimeErr("strip arg must be None or str");
    return Value::String(PyStrip(ToStr(v), cs, StripSide::kBoth));
  }
  if (n == "upper") return Value::String(PyUpper(ToStr(v)));
  if (n == "lower") return Value::String(PyLower(ToStr(v)));
  if (n == "capitalize") return Value::String(PyCapitalize(ToStr(v)));
  if (n == "title") return Value::String(JinjaTitle(ToStr(v)));
  if (n == "string" || n == "safe") return Value::String(ToStr(v));
  if (n == "escape" || n == "e") return Value::String(HtmlEscape(ToStr(v)));
  if (n == "length" || n == "count") return Value::Int(Length(v));
  if (n == "wordcount") return Value::Int(static_cast<int64_t>(PySplit(ToStr(v), nullptr, -1).size()));
  if (n == "tojson") {
    // HF: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
    JsonDumpOptions o;
    o.ensure_ascii = ArgBool(a, 0, "ensure_ascii", false);
    if (const Value* ind = Arg(a, 1, "indent"); ind && !ind->is_none()) {
      if (ind->is_string()) {
        o.indent_is_str = true;
        o.indent_str = ind->str();
      } else if (ind->is_int() || ind->is_bool()) {
        if (ind->int_value() < 0) o.indent_is_str = true;
        else o.indent = std::min<int64_t>(ind->int_value(), 1000);
      } else {
        RuntimeErr("indent must be an int or str");
      }
    }
    if (const Value* sep = Arg(a, 2, "separators"); sep && !sep->is_none()) {
      if (!sep->is_list() || sep->list().size() != 2 || !sep->list()[0].is_string() || !sep->list()[1].is_string())
        RuntimeErr("separators must be a pair of strings");
      o.separators = std::make_pair(sep->list()[0].str(), sep->list()[1].str());
    }
    o.sort_keys = ArgBool(a, 3, "sort_keys", false);
    StatusOr<std::string> s = ToJson(v, o);
    if (!s.ok()) RuntimeErr(s.status().message());
    return Value::String(std::move(s).value());
  }
  if (n == "items") {
    if (v.is_undefined()) return Value::List({});
    if (!v.is_dict()) RuntimeErr("Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto& kv : v.dict().items) out.push_back(Value::List({kv.first, kv.second}, true));
    return Value::List(std::move(out));
  }
  if (n == "dictsort") {
    if (!v.is_dict()) RuntimeErr("You can only sort by either \"key\" or \"value\"");
    bool cs = ArgBool(a, 0, "case_sensitive", false);
    const Value* by = Arg(a, 1, "by");
    int pos = by && by->is_string() && by->str() == "value" ? 1 : 0;
    bool rev = ArgBool(a, 2, "reverse", false);
    std::vector<Value> out;
    for (const auto& kv : v.dict().items) out.push_back(Value::List({kv.first, kv.second}, true));
    std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) {
      return rev ? PyLess(SortKey(y.list()[pos], cs), SortKey(x.list()[pos], cs))
                 : PyLess(SortKey(x.list()[pos], cs), SortKey(y.list()[pos], cs));
    });
    return Value::List(std::move(out));
  }
  if (n == "first" || n == "last") {
    std::vector<Value> items = Iterate(v);
    if (items.empty()) return Value::Undefined("No " + n + " item, sequence was empty.");
    return n == "first" ? items.front() : items.back();
  }
  if (n == "list") return Value::List(Iterate(v));
  if (n == "reverse") {
    if (v.is_string()) {
      std::vector<char32_t> cps = DecodeUtf8(v.str());
      std::reverse(cps.begin(), cps.end());
      return Value::String(EncodeUtf8(cps));
    }
    std::vector<Value> items = Iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::List(std::move(items));
  }
  if (n == "join") {
    const Value* sep = Arg(a, 0, "d");
    const Value* attr = Arg(a, 1, "attribute");
    std::string s = sep ? ToStr(*sep) : "";
    std::string out;
    bool first = true;
    for (const Value& x : Iterate(v)) {
      if (!first) out += s;
      first = false;
      out += ToStr(attr && !attr->is_none() ? GetAttribute(x, *attr) : x);
    }
    return Value::String(std::move(out));
  }
  if (n == "map") {
    std::vector<Value> out;
    const Value* attr = nullptr;
    for (const auto& [k, kv] : a.kwargs)
      if (k == "attribute") attr = &kv;
    if (attr) {
      const Value* dflt = nullptr;
      for (const auto& [k, kv] : a.kwargs)
        if (k == "default") dflt = &kv;
      for (const Value& x : Iterate(v)) {
        Value r = GetAttribute(x, *attr);
        out.push_back(r.is_undefined() && dflt ? *dflt : r);
      }
      return Value::List(std::move(out));
    }
    if (a.positional.empty() || !a.positional[0].is_string()) RuntimeErr("map requires a filter argument");
    const std::string& f = a.positional[0].str();
    if (!IsKnownFilter(f)) RuntimeErr("No filter named '" + f + "'");
    CallArgs rest;
    rest.positional.assign(a.positional.begin() + 1, a.positional.end());
    rest.kwargs = a.kwargs;
    for (const Value& x : Iterate(v)) {
      ctx.CountWork(1);
      out.push_back(ctx.ApplyFilter(f, x, rest));
    }
    return Value::List(std::move(out));
  }
  if (n == "select") return SelectOrReject(ctx, v, a, false, true);
  if (n == "reject") return SelectOrReject(ctx, v, a, false, false);
  if (n == "selectattr") return SelectOrReject(ctx, v, a, true, true);
  if (n == "rejectattr") return SelectOrReject(ctx, v, a, true, false);
  if (n == "sort" || n == "unique" || n == "min" || n == "max") {
    bool rev = n == "sort" && ArgBool(a, 0, "reverse", false);
    bool cs = ArgBool(a, n == "sort" ? 1 : 0, "case_sensitive", false);
    const Value* attr = Arg(a, n == "sort" ? 2 : 1, "attribute");
    std::vector<Value> items = Iterate(v);
    auto key = [&](const Value& x) { return SortKey(attr && !attr->is_none() ? GetAttribute(x, *attr) : x, cs); };
    if (n == "unique") {
      std::vector<Value> out, seen;
      for (const Value& x : items) {
        Value k = key(x);
        bool dup = false;
        for (const Value& s : seen) dup |= PyEquals(s, k);
        if (!dup) {
          seen.push_back(k);
          out.push_back(x);
        }
      }
      return Value::List(std::move(out));
    }
    if (n == "min" || n == "max") {
      if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
      Value best = items[0];
      for (const Value& x : items) {
        if (n == "min" ? PyLess(key(x), key(best)) : PyLess(key(best), key(x))) best = x;
      }
      return best;
    }
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      return rev ? PyLess(key(y), key(x)) : PyLess(key(x), key(y));
    });
    return Value::List(std::move(items));
  }
  if (n == "sum") {
    const Value* attr = Arg(a, 0, "attribute");
    const Value* start = Arg(a, 1, "start");
    Value total = start ? *start : Value::Int(0);
    for (const Value& x : Iterate(v))
      total = BinaryOp("+", total, attr && !attr->is_none() ? GetAttribute(x, *attr) : x, INT64_MAX);
    return total;
  }
  if (n == "replace") {
    if (a.positional.size() < 2) RuntimeErr("replace expects old and new");
    const Value* c = Arg(a, 2, "count");
    return Value::String(PyReplace(ToStr(v), ToStr(a.positional[0]), ToStr(a.positional[1]),
                                   c && !c->is_none() ? c->int_value() : -1));
  }
  if (n == "indent") {
    return Value::String(Indent(ToStr(v), Arg(a, 0, "width"), ArgBool(a, 1, "first", false), ArgBool(a, 2, "blank", false)));
  }
  if (n == "int" || n == "float") {
    const Value* dflt = Arg(a, 0, "default");
    Value fallback = dflt ? *dflt : (n == "int" ? Value::Int(0) : Value::Float(0.0));
    if (v.is_bool() || v.is_int()) return n == "int" ? Value::Int(v.int_value()) : Value::Float(v.float_value());
    if (v.is_float()) {
      if (n == "float") return v;
      if (!std::isfinite(v.float_value()) || std::fabs(v.float_value()) > 9e18) return fallback;
      return Value::Int(static_cast<int64_t>(v.float_value()));
    }
    if (v.is_string()) {
      std::string s = PyStrip(v.str(), nullptr, StripSide::kBoth);
      std::string digits;
      for (char c : s)
        if (c != '_') digits.push_back(c);
      if (s.empty()) return fallback;
      char* end = nullptr;
      errno = 0;
      if (n == "int") {
        long long iv = std::strtoll(digits.c_str(), &end, 10);
        if (end && *end == 0 && errno == 0) return Value::Int(iv);
      }
      double d = std::strtod(digits.c_str(), &end);
      if (!end || *end != 0) return fallback;
      if (n == "float") return Value::Float(d);
      if (!std::isfinite(d) || std::fabs(d) > 9e18) return fallback;
      return Value::Int(static_cast<int64_t>(d));
    }
    return fallback;
  }
  if (n == "abs") {
    if (!v.is_number()) RuntimeErr("bad operand type for abs(): '" + TypeName(v) + "'");
    if (v.is_float()) return Value::Float(std::fabs(v.float_value()));
    if (v.int_value() == INT64_MIN) RuntimeErr("integer overflow");
    return Value::Int(std::llabs(v.int_value()));
  }
  if (n == "round") {
    const Value* p = Arg(a, 0, "precision");
    const Value* m = Arg(a, 1, "method");
    int64_t prec = p ? std::clamp<int64_t>(p->int_value(), -300, 300) : 0;
    std::string method = m ? ToStr(*m) : "common";
    if (!v.is_number()) RuntimeErr("round needs a number");
    double scale = std::pow(10.0, static_cast<double>(prec));
    if (method == "common") {
      if (!v.is_float()) return Value::Int(v.int_value());
      return Value::Float(PyRound(v.float_value(), prec));
    }
    if (method != "ceil" && method != "floor") RuntimeErr("method must be common, ceil or floor");
    double x = v.float_value() * scale;
    return Value::Float((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
  }
  if (n == "attr") {
    if (a.positional.empty() || !a.positional[0].is_string()) RuntimeErr("attr needs a name");
    if (v.is_dict()) return Value::Undefined("'dict object' has no attribute '" + a.positional[0].str() + "'");
    return GetAttr(v, a.positional[0].str());
  }
  RuntimeErr("unknown filter '" + n + "'");
}

}  // namespace tessera::jinja

#include "text/jinja/ops.h"

#include <cmath>

#include "text/jinja/error.h"

namespace tessera::jinja {

namespace {
[[noreturn]] void TypeErr(const std::string& msg) { Fail(TemplateError::Kind::kRuntime, msg); }

[[noreturn]] void Unsupported(const std::string& op, const Value& a, const Value& b) {
  TypeErr("unsupported operand type(s) for " + op + ": '" + TypeName(a) + "' and '" + TypeName(b) + "'");
}

Value Repeat(const Value& seq, int64_t n, int64_t max_bytes) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    if (!seq.str().empty() && n > max_bytes / static_cast<int64_t>(seq.str().size()))
      Fail(TemplateError::Kind::kLimit, "string repetition exceeds the size limit");
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value::String(std::move(out));
  }
  if (!seq.list().empty() && n > max_bytes / 16 / static_cast<int64_t>(seq.list().size()))
    Fail(TemplateError::Kind::kLimit, "list repetition exceeds the size limit");
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
  return Value::List(std::move(out), seq.is_tuple());
}

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
}  // namespace

void RequireDefined(const Value& v) {
  if (v.is_undefined()) Fail(TemplateError::Kind::kRuntime, v.str().empty() ? "value is undefined" : v.str());
}

Value UnaryOp(const std::string& op, const Value& v) {
  RequireDefined(v);
  if (!v.is_number()) TypeErr("bad operand type for unary " + op + ": '" + TypeName(v) + "'");
  if (op == "+") return v.is_float() ? v : Value::Int(v.int_value());
  if (v.is_float()) return Value::Float(-v.float_value());
  if (v.int_value() == INT64_MIN) TypeErr("integer overflow");
  return Value::Int(-v.int_value());
}

bool PyLess(const Value& a, const Value& b) {
  RequireDefined(a);
  RequireDefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.float_value() < b.float_value();
    return a.int_value() < b.int_value();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.list();
    const auto& y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!PyEquals(x[i], y[i])) return PyLess(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  TypeErr("'<' not supported between instances of '" + TypeName(a) + "' and '" + TypeName(b) + "'");
}

bool Contains(const Value& hay, const Value& needle) {
  if (hay.is_string()) {
    if (!needle.is_string())
      TypeErr("'in <string>' requires string as left operand, not " + TypeName(needle));
    return hay.str().find(needle.str()) != std::string::npos;
  }
  if (hay.is_list()) {
    for (const Value& x : hay.list())
      if (PyEquals(x, needle)) return true;
    return false;
  }
  if (hay.is_dict()) return hay.dict().Find(needle) != nullptr;
  if (hay.is_undefined()) return false;
  TypeErr("argument of type '" + TypeName(hay) + "' is not iterable");
}

Value BinaryOp(const std::string& op, const Value& a, const Value& b, int64_t max_bytes) {
  if (op == "~") {
    std::string s = ToStr(a);
    std::string t = ToStr(b);
    if (static_cast<int64_t>(s.size() + t.size()) > max_bytes)
      Fail(TemplateError::Kind::kLimit, "string exceeds the size limit");
    return Value::String(s + t);
  }
  if (op == "==") return Value::Bool(PyEquals(a, b));
  if (op == "!=") return Value::Bool(!PyEquals(a, b));
  if (op == "<") return Value::Bool(PyLess(a, b));
  if (op == ">") return Value::Bool(PyLess(b, a));
  if (op == "<=") return Value::Bool(PyLess(a, b) || PyEquals(a, b));
  if (op == ">=") return Value::Bool(PyLess(b, a) || PyEquals(a, b));
  if (op == "in") return Value::Bool(Contains(b, a));
  if (op == "notin") return Value::Bool(!Contains(b, a));

  RequireDefined(a);
  RequireDefined(b);
  if (a.is_number() && b.is_number()) {
    bool fl = a.is_float() || b.is_float();
    if (op == "/") {
      if (b.float_value() == 0) TypeErr("division by zero");
      return Value::Float(a.float_value() / b.float_value());
    }
    if (fl) {
      double x = a.float_value(), y = b.float_value();
      if (op == "+") return Value::Float(x + y);
      if (op == "-") return Value::Float(x - y);
      if (op == "*") return Value::Float(x * y);
      if (op == "**") return Value::Float(std::pow(x, y));
      if (y == 0) TypeErr("float division by zero");
      if (op == "//") return Value::Float(std::floor(x / y));
      if (op == "%") {
        double m = std::fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return Value::Float(m);
      }
    } else {
      int64_t x = a.int_value(), y = b.int_value(), r = 0;
      if (op == "+") {
        if (__builtin_add_overflow(x, y, &r)) TypeErr("integer overflow");
        return Value::Int(r);
      }
      if (op == "-") {
        if (__builtin_sub_overflow(x, y, &r)) TypeErr("integer overflow");
        return Value::Int(r);
      }
      if (op == "*") {
        if (__builtin_mul_overflow(x, y, &r)) TypeErr("integer overflow");
        return Value::Int(r);
      }
      if (op == "**") {
        if (y < 0) return Value::Float(std::pow(static_cast<double>(x), static_cast<double>(y)));
        r = 1;
        for (int64_t i = 0; i < y; ++i) {
          if (__builtin_mul_overflow(r, x, &r)) TypeErr("integer overflow");
          if (r == 0 || r == 1) break;
        }
        if (r == 1 && x == -1 && (y % 2)) r = -1;
        return Value::Int(r);
      }
      if (y == 0) TypeErr("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) TypeErr("integer overflow");
      if (op == "//") return Value::Int(FloorDiv(x, y));
      if (op == "%") return Value::Int(x - FloorDiv(x, y) * y);
    }
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      if (static_cast<int64_t>(a.str().size() + b.str().size()) > max_bytes)
        Fail(TemplateError::Kind::kLimit, "string exceeds the size limit");
      return Value::String(a.str() + b.str());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      std::vector<Value> out = a.list();
      out.insert(out.end(), b.list().begin(), b.list().end());
      return Value::List(std::move(out), a.is_tuple());
    }
    if (a.is_string() && !b.is_string()) TypeErr("can only concatenate str (not \"" + TypeName(b) + "\") to str");
    if (a.is_list()) TypeErr("can only concatenate list (not \"" + TypeName(b) + "\") to list");
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return Repeat(a, b.int_value(), max_bytes);
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return Repeat(b, a.int_value(), max_bytes);
  }
  if (op == "%" && a.is_string()) Fail(TemplateError::Kind::kRuntime, "string formatting with % is not supported");
  Unsupported(op == "//" ? "//" : op, a, b);
}

}  // namespace tessera::jinja

#include "text/jinja/evaluator.h"

#include <cmath>
#include <ctime>

#include "text/jinja/error.h"
#include "text/jinja/ops.h"
#include "text/jinja/py_str.h"

namespace tessera::jinja {
namespace {

enum class Flow { kNormal, kBreak, kContinue };

class Evaluator final : public BuiltinContext {
 public:
  Evaluator(const std::vector<std::pair<std::string, Value>>& vars, const RenderOptions& o) : opt_(o) {
    frames_.emplace_back();
    for (const char* g : {"range", "namespace", "raise_exception", "strftime_now", "dict"}) {
      auto fn = std::make_shared<Callable>();
      fn->kind = Callable::Kind::kGlobal;
      fn->name = g;
      frames_[0][g] = Value::Function(std::move(fn));
    }
    for (const auto& [k, v] : vars) frames_[0][k] = v;
    frames_.emplace_back();  // template-level assignments
  }

  std::string Run(const NodeList& nodes) {
    std::string out;
    Render(nodes, &out);
    return out;
  }

  // ---- BuiltinContext ----
  Value ApplyFilter(const std::string& name, const Value& operand, const CallArgs& args) override {
    return CallFilter(*this, name, operand, args);
  }
  bool ApplyTest(const std::string& name, const Value& operand, const CallArgs& args) override {
    return CallTest(*this, name, operand, args);
  }
  int64_t NowUnixSeconds() const override {
    return opt_.now_unix_seconds >= 0 ? opt_.now_unix_seconds : static_cast<int64_t>(std::time(nullptr));
  }
  void CountWork(int64_t units) override {
    work_ += units;
    if (work_ > opt_.limits.max_work) Fail(TemplateError::Kind::kLimit, "template exceeded its work limit");
  }

  // True when `v` holds `target` at any depth; each value visited counts as
  // work. Iterative: values can nest as deep as the work limit allows.
  bool Reaches(const Value& root, const DictData* target) {
    std::vector<const Value*> todo = {&root};
    while (!todo.empty()) {
      const Value* v = todo.back();
      todo.pop_back();
      CountWork(1);
      if (v->is_list()) {
        for (const Value& x : v->list()) todo.push_back(&x);
      } else if (v->is_dict() || v->is_namespace()) {
        if (&v->dict() == target) return true;
        for (const auto& kv : v->dict().items) {
          todo.push_back(&kv.first);
          todo.push_back(&kv.second);
        }
      } else if (v->is_callable()) {
        todo.push_back(&v->callable().receiver);
      }
    }
    return false;
  }

 private:
  using Frame = std::unordered_map<std::string, Value>;

  struct DepthGuard {
    DepthGuard(Evaluator* e, int line, int col) : e_(e) {
      if (++e_->depth_ > e_->opt_.limits.max_depth)
        Fail(TemplateError::Kind::kLimit, "template recursion too deep", line, col);
    }
    ~DepthGuard() { --e_->depth_; }
    Evaluator* e_;
  };

  void Append(std::string* out, const std::string& s) {
    out->append(s);
    CountWork(static_cast<int64_t>(s.size() / 64));
    if (static_cast<int64_t>(out->size()) > opt_.limits.max_output_bytes)
      Fail(TemplateError::Kind::kLimit, "template output exceeds the size limit");
  }

  Value Lookup(const std::string& name) const {
    for (size_t i = frames_.size(); i-- > floor_;) {
      auto it = frames_[i].find(name);
      if (it != frames_[i].end()) return it->second;
    }
    for (size_t i = std::min<size_t>(floor_, 2); i-- > 0;) {
      auto it = frames_[i].find(name);
      if (it != frames_[i].end()) return it->second;
    }
    return Value::Undefined("'" + name + "' is undefined");
  }
  void Assign(const std::string& name, Value v) { frames_.back()[name] = std::move(v); }

  void AssignTargets(const Node& n, const Value& v) {
    if (!n.target_is_tuple) {
      Assign(n.targets[0], v);
      return;
    }
    std::vector<Value> items = Iterate(v);
    if (items.size() != n.targets.size())
      Fail(TemplateError::Kind::kRuntime,
           items.size() > n.targets.size() ? "too many values to unpack (expected " + std::to_string(n.targets.size()) + ")"
                                           : "not enough values to unpack (expected " + std::to_string(n.targets.size()) +
                                                 ", got " + std::to_string(items.size()) + ")",
           n.line, n.column);
    for (size_t i = 0; i < items.size(); ++i) Assign(n.targets[i], items[i]);
  }

  Flow Render(const NodeList& nodes, std::string* out) {
    for (const auto& np : nodes) {
      const Node& n = *np;
      DepthGuard guard(this, n.line, n.column);
      switch (n.kind) {
        case NodeKind::kText: Append(out, n.text); break;
        case NodeKind::kOutput: Append(out, ToStr(Eval(*n.expr))); break;
        case NodeKind::kIf:
          for (const auto& [cond, body] : n.branches) {
            if (!cond || Truthy(Eval(*cond))) {
              Flow f = Render(body, out);
              if (f != Flow::kNormal) return f;
              break;
            }
          }
          break;
        case NodeKind::kFor: RenderFor(n, out); break;
        case NodeKind::kSet: {
          Value v = Eval(*n.expr);
          if (!n.text.empty()) {
            Value ns = Lookup(n.targets[0]);
            if (!ns.is_namespace())
              Fail(TemplateError::Kind::kRuntime, "can only set attributes on namespace objects", n.line, n.column);
            // Values share their containers (shared_ptr): a namespace stored inside
            // itself would be a reference cycle that is never freed.
            if (Reaches(v, &ns.dict()))
              Fail(TemplateError::Kind::kRuntime, "cannot store a namespace inside itself", n.line, n.column);
            ns.mutable_dict()->Set(Value::String(n.text), std::move(v));
          } else {
            AssignTargets(n, v);
          }
          break;
        }
        case NodeKind::kSetBlock: {
          std::string captured;
          frames_.emplace_back();
          Render(n.body, &captured);
          frames_.pop_back();
          Assign(n.targets[0], Value::String(std::move(captured)));
          break;
        }
        case NodeKind::kMacro: {
          auto fn = std::make_shared<Callable>();
          fn->kind = Callable::Kind::kMacro;
          fn->name = n.text;
          fn->node = &n;
          Assign(n.text, Value::Function(std::move(fn)));
          break;
        }
        case NodeKind::kBreak: return Flow::kBreak;
        case NodeKind::kContinue: return Flow::kContinue;
        case NodeKind::kScope: {
          Flow f = Render(n.body, out);
          if (f != Flow::kNormal) return f;
          break;
        }
      }
    }
    return Flow::kNormal;
  }

  void RenderFor(const Node& n, std::string* out) {
    Value iterable = Eval(*n.expr);
    if (!(iterable.is_list() || iterable.is_string() || iterable.is_dict() || iterable.is_undefined()))
      Fail(TemplateError::Kind::kRuntime, "'" + TypeName(iterable) + "' object is not iterable", n.line, n.column);
    std::vector<Value> items = Iterate(iterable);
    CountWork(static_cast<int64_t>(items.size()));
    if (n.cond) {
      std::vector<Value> kept;
      for (const Value& it : items) {
        frames_.emplace_back();
        AssignTargets(n, it);
        bool keep = Truthy(Eval(*n.cond));
        frames_.pop_back();
        if (keep) kept.push_back(it);
      }
      items = std::move(kept);
    }
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      CountWork(1);
      frames_.emplace_back();
      auto loop = std::make_shared<DictData>();
      auto put = [&](const char* k, Value v) { loop->items.emplace_back(Value::String(k), std::move(v)); };
      put("index", Value::Int(i + 1));
      put("index0", Value::Int(i));
      put("revindex", Value::Int(len - i));
      put("revindex0", Value::Int(len - i - 1));
      put("first", Value::Bool(i == 0));
      put("last", Value::Bool(i == len - 1));
      put("length", Value::Int(len));
      put("depth", Value::Int(1));
      put("depth0", Value::Int(0));
      if (i > 0) put("previtem", items[static_cast<size_t>(i - 1)]);
      if (i + 1 < len) put("nextitem", items[static_cast<size_t>(i + 1)]);
      Assign("loop", Value::Dict(std::move(loop)));
      AssignTargets(n, items[static_cast<size_t>(i)]);
      Flow f = Render(n.body, out);
      frames_.pop_back();
      if (f == Flow::kBreak) break;
    }
    if (len == 0 && !n.else_body.empty()) {
      frames_.emplace_back();
      Render(n.else_body, out);
      frames_.pop_back();
    }
  }

  CallArgs EvalArgs(const Expr& e, size_t first) {
    CallArgs a;
    for (size_t i = first; i < e.args.size(); ++i) a.positional.push_back(Eval(*e.args[i]));
    for (const auto& [k, v] : e.kwargs) a.kwargs.emplace_back(k, Eval(*v));
    return a;
  }

  Value CallValue(const Value& callee, const CallArgs& args, const Expr& at) {
    if (!callee.is_callable()) {
      if (callee.is_undefined())
        Fail(TemplateError::Kind::kRuntime, callee.str().empty() ? "undefined value is not callable" : callee.str(),
             at.line, at.column);
      Fail(TemplateError::Kind::kRuntime, "'" + TypeName(callee) + "' object is not callable", at.line, at.column);
    }
    const Callable& fn = callee.callable();
    switch (fn.kind) {
      case Callable::Kind::kMethod: return CallMethod(*this, fn.receiver, fn.name, args);
      case Callable::Kind::kGlobal: return CallGlobal(*this, fn.name, args);
      case Callable::Kind::kMacro: return CallMacro(*static_cast<const Node*>(fn.node), args, at);
    }
    return Value();
  }

  Value CallMacro(const Node& m, const CallArgs& args, const Expr& at) {
    if (args.positional.size() > m.params.size())
      Fail(TemplateError::Kind::kRuntime,
           "macro '" + m.text + "' takes not more than " + std::to_string(m.params.size()) + " argument(s)", at.line,
           at.column);
    size_t saved_floor = floor_;
    frames_.emplace_back();
    floor_ = frames_.size() - 1;
    for (size_t i = 0; i < m.params.size(); ++i) {
      const auto& [pname, def] = m.params[i];
      Value v;
      bool set = false;
      if (i < args.positional.size()) {
        v = args.positional[i];
        set = true;
      }
      for (const auto& [k, kv] : args.kwargs) {
        if (k == pname) {
          v = kv;
          set = true;
        }
      }
      if (!set) v = def ? Eval(*def) : Value::Undefined("parameter '" + pname + "' was not provided");
      Assign(pname, v);
    }
    for (const auto& [k, kv] : args.kwargs) {
      bool known = false;
      for (const auto& p : m.params) known |= p.first == k;
      if (!known)
        Fail(TemplateError::Kind::kRuntime, "macro '" + m.text + "' takes no keyword argument '" + k + "'", at.line,
             at.column);
    }
    std::string out;
    Render(m.body, &out);
    frames_.pop_back();
    floor_ = saved_floor;
    return Value::String(std::move(out));
  }

  Value Eval(const Expr& e) {
    DepthGuard guard(this, e.line, e.column);
    try {
      return EvalInner(e);
    } catch (TemplateError& err) {
      if (err.line == 0) {
        err.line = e.line;
        err.column = e.column;
      }
      throw;
    }
  }

  Value EvalInner(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kConst: return e.value;
      case ExprKind::kName: return Lookup(e.name);
      case ExprKind::kList: {
        std::vector<Value> items;
        for (const auto& a : e.args) items.push_back(Eval(*a));
        CountWork(static_cast<int64_t>(items.size()));
        Value v = Value::List(std::move(items), e.flag);
        CheckDepth(v);
        return v;
      }
      case ExprKind::kDict: {
        auto d = std::make_shared<DictData>();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          Value k = Eval(*e.args[i]);
          if (k.is_list() && !k.is_tuple()) Fail(TemplateError::Kind::kRuntime, "unhashable type: 'list'");
          if (k.is_dict()) Fail(TemplateError::Kind::kRuntime, "unhashable type: 'dict'");
          d->Set(std::move(k), Eval(*e.args[i + 1]));
        }
        Value v = Value::Dict(std::move(d));
        CheckDepth(v);
        return v;
      }
      case ExprKind::kGetAttr: return GetAttr(Eval(*e.args[0]), e.name);
      case ExprKind::kGetItem: return GetItem(Eval(*e.args[0]), Eval(*e.args[1]));
      case ExprKind::kSlice: {
        Value obj = Eval(*e.args[0]);
        Value parts[3];
        for (int i = 0; i < 3; ++i) parts[i] = e.args[i + 1] ? Eval(*e.args[i + 1]) : Value::None();
        Value v = Slice(obj, parts[0], parts[1], parts[2]);
        if (v.is_list()) CountWork(static_cast<int64_t>(v.list().size()));
        return v;
      }
      case ExprKind::kCall: {
        const Expr& callee = *e.args[0];
        Value fn;
        if (callee.kind == ExprKind::kGetAttr) {
          Value obj = Eval(*callee.args[0]);
          fn = GetAttr(obj, callee.name);
        } else {
          fn = Eval(callee);
        }
        CallArgs args = EvalArgs(e, 1);
        Value v = CallValue(fn, args, e);
        CheckResult(v);
        return v;
      }
      case ExprKind::kFilter: {
        Value operand = Eval(*e.args[0]);
        CallArgs args = EvalArgs(e, 1);
        Value v = CallFilter(*this, e.name, operand, args);
        CheckResult(v);
        return v;
      }
      case ExprKind::kTest: {
        Value operand = Eval(*e.args[0]);
        CallArgs args = EvalArgs(e, 1);
        bool r = CallTest(*this, e.name, operand, args);
        return Value::Bool(e.flag ? !r : r);
      }
      case ExprKind::kUnary: {
        Value v = Eval(*e.args[0]);
        if (e.name == "not") return Value::Bool(!Truthy(v));
        return UnaryOp(e.name, v);
      }
      case ExprKind::kBinary: {
        if (e.name == "and") {
          Value a = Eval(*e.args[0]);
          return Truthy(a) ? Eval(*e.args[1]) : a;
        }
        if (e.name == "or") {
          Value a = Eval(*e.args[0]);
          return Truthy(a) ? a : Eval(*e.args[1]);
        }
        Value a = Eval(*e.args[0]);
        Value b = Eval(*e.args[1]);
        Value v = BinaryOp(e.name, a, b, opt_.limits.max_output_bytes);
        CheckResult(v);
        return v;
      }
      case ExprKind::kCondExpr: {
        if (Truthy(Eval(*e.args[1]))) return Eval(*e.args[0]);
        if (e.args[2]) return Eval(*e.args[2]);
        return Value::Undefined("the inline if-expression evaluated to false and no else section was defined");
      }
    }
    return Value();
  }

  void CheckDepth(const Value& v) {
    if (v.depth() > kMaxValueDepth) Fail(TemplateError::Kind::kLimit, "value nested too deeply");
  }
  void CheckResult(const Value& v) {
    CheckDepth(v);
    if (v.is_string()) {
      CountWork(static_cast<int64_t>(v.str().size() / 64));
      if (static_cast<int64_t>(v.str().size()) > opt_.limits.max_output_bytes)
        Fail(TemplateError::Kind::kLimit, "string exceeds the size limit");
    } else if (v.is_list()) {
      CountWork(static_cast<int64_t>(v.list().size()));
    }
  }

  RenderOptions opt_;
  std::vector<Frame> frames_;
  size_t floor_ = 2;  // lowest frame visible before falling back to frames 1 and 0
  int depth_ = 0;
  int64_t work_ = 0;
};

}  // namespace

std::string RenderNodes(const NodeList& nodes, const std::vector<std::pair<std::string, Value>>& variables,
                        const RenderOptions& options) {
  Evaluator ev(variables, options);
  return ev.Run(nodes);
}

}  // namespace tessera::jinja

// Built-in filters, tests, global functions and methods of str/dict/list, with
// jinja2 3.1 + HF transformers semantics. Stateless; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace tessera::jinja {

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> kwargs;
};

// Load-time checks: is the name implemented?
bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);
bool IsKnownGlobal(std::string_view name);
bool IsKnownMethod(std::string_view name);

// Hooks the builtins need from the evaluator (filters such as map/select apply
// other filters and tests; strftime_now needs the injected clock).
class BuiltinContext {
 public:
  virtual ~BuiltinContext() = default;
  virtual Value ApplyFilter(const std::string& name, const Value& operand, const CallArgs& args) = 0;
  virtual bool ApplyTest(const std::string& name, const Value& operand, const CallArgs& args) = 0;
  virtual int64_t NowUnixSeconds() const = 0;
  virtual void CountWork(int64_t units) = 0;  // for iteration/size limits
};

// All of these throw TemplateError (kRuntime / kRaised) on misuse.
Value CallFilter(BuiltinContext& ctx, const std::string& name, const Value& operand, const CallArgs& args);
bool CallTest(BuiltinContext& ctx, const std::string& name, const Value& operand, const CallArgs& args);
Value CallGlobal(BuiltinContext& ctx, const std::string& name, const CallArgs& args);
Value CallMethod(BuiltinContext& ctx, const Value& receiver, const std::string& name, const CallArgs& args);

// obj.name / obj[key] with Jinja's sandboxed getattr/getitem fallbacks. Returns
// Undefined when missing; throws when obj itself is Undefined.
Value GetAttr(const Value& obj, const std::string& name);
Value GetItem(const Value& obj, const Value& key);
// obj[start:stop:step]; nulls given as Undefined/None.
Value Slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// Iteration as Python does it (str → code points, dict → keys, Undefined → empty).
std::vector<Value> Iterate(const Value& v);
// Python len(); throws for values without a length.
int64_t Length(const Value& v);

}  // namespace tessera::jinja

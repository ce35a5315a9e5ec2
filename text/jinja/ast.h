// AST of a parsed template. Nodes are owned by their parent through unique_ptr;
// the whole tree is owned by a Template and immutable after parsing, so several
// threads may render the same tree concurrently.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace tessera::jinja {

enum class ExprKind {
  kConst,     // value
  kName,      // name
  kList,      // args = items; flag = tuple
  kDict,      // args = k0, v0, k1, v1, ...
  kGetAttr,   // args[0] . name
  kGetItem,   // args[0] [ args[1] ]
  kSlice,     // args[0] [ args[1] : args[2] : args[3] ] (null = omitted)
  kCall,      // args[0] ( args[1..] , kwargs )
  kFilter,    // args[0] | name ( args[1..], kwargs )
  kTest,      // args[0] is [not] name ( args[1..] ); flag = negated
  kUnary,     // name in {"not", "-", "+"}; args[0]
  kBinary,    // name is the operator; args[0], args[1]
  kCondExpr,  // args[0] if args[1] else args[2] (null = undefined)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  int column = 0;
  Value value;
  std::string name;
  bool flag = false;
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
};

struct Node;
using NodeList = std::vector<std::unique_ptr<Node>>;

enum class NodeKind {
  kText,      // text
  kOutput,    // {{ expr }}
  kIf,        // branches
  kFor,       // targets in expr [if cond] body [else else_body]
  kSet,       // targets = expr; or attr: targets[0].attr = expr
  kSetBlock,  // {% set targets[0] %} body {% endset %}
  kMacro,     // name(params) body
  kBreak,
  kContinue,
  kScope,     // body rendered as-is ({% generation %} from HF's AssistantTracker)
};

struct Node {
  NodeKind kind;
  int line = 0;
  int column = 0;
  std::string text;                 // kText; macro name; namespace attribute for kSet
  std::unique_ptr<Expr> expr;       // output / set value / for iterable
  std::unique_ptr<Expr> cond;       // for-loop filter
  std::vector<std::string> targets; // for/set targets (several = tuple unpacking)
  bool target_is_tuple = false;
  NodeList body;
  NodeList else_body;
  // kIf: (condition, body); condition null for {% else %}.
  std::vector<std::pair<std::unique_ptr<Expr>, NodeList>> branches;
  // kMacro: parameter names and defaults (null = required).
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> params;
};

}  // namespace tessera::jinja

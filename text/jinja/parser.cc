#include "text/jinja/parser.h"

#include <map>
#include <set>

#include "text/jinja/builtins.h"
#include "text/jinja/error.h"

namespace tessera::jinja {
namespace {

using ExprPtr = std::unique_ptr<Expr>;

class Parser {
 public:
  Parser(std::vector<Token> tokens, const ParseLimits& limits)
      : toks_(std::move(tokens)), limits_(limits) {}

  NodeList ParseTemplate() {
    std::string end;
    NodeList nodes = ParseBody({}, &end);
    for (const auto& [name, tok] : bare_calls_) {
      if (!IsKnownGlobal(name) && !macros_.count(name))
        Fail(TemplateError::Kind::kUnsupported, "unsupported function '" + name + "'", tok.first, tok.second);
    }
    return nodes;
  }

 private:
  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p_(p) {
      if (++p_->depth_ > p_->limits_.max_nesting)
        p_->Error("template nested too deeply", TemplateError::Kind::kSyntax);
    }
    ~DepthGuard() { --p_->depth_; }
    Parser* p_;
  };

  const Token& Cur() const { return toks_[pos_]; }
  const Token& Peek(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  void Next() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  [[noreturn]] void Error(const std::string& msg, TemplateError::Kind kind = TemplateError::Kind::kSyntax) const {
    Fail(kind, msg, Cur().line, Cur().column);
  }
  std::string Describe(const Token& t) const {
    if (t.type == TokenType::kName || t.type == TokenType::kOp) return "'" + t.value + "'";
    return TokenTypeName(t.type);
  }
  bool IsOp(const char* op) const { return Cur().type == TokenType::kOp && Cur().value == op; }
  bool IsName(const char* n) const { return Cur().type == TokenType::kName && Cur().value == n; }
  void ExpectOp(const char* op) {
    if (!IsOp(op)) Error(std::string("expected '") + op + "', got " + Describe(Cur()));
    Next();
  }
  std::string ExpectName() {
    if (Cur().type != TokenType::kName) Error("expected name, got " + Describe(Cur()));
    std::string n = Cur().value;
    Next();
    return n;
  }
  void ExpectBlockEnd() {
    if (Cur().type != TokenType::kBlockEnd) Error("expected end of statement block, got " + Describe(Cur()));
    Next();
  }
  ExprPtr MakeExpr(ExprKind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    return e;
  }
  std::unique_ptr<Node> MakeNode(NodeKind kind, const Token& at) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->line = at.line;
    n->column = at.column;
    return n;
  }

  // Parses nodes until a block tag whose name is in `ends` (left as the current
  // token, its '{%' consumed) or end of input (only valid when `ends` is empty).
  NodeList ParseBody(const std::set<std::string>& ends, std::string* end_found) {
    DepthGuard guard(this);
    NodeList out;
    while (true) {
      const Token& t = Cur();
      if (t.type == TokenType::kEof) {
        if (!ends.empty()) {
          std::string list;
          for (const auto& e : ends) list += (list.empty() ? "'" : " or '") + e + "'";
          Error("unexpected end of template, expected " + list);
        }
        return out;
      }
      if (t.type == TokenType::kData) {
        auto n = MakeNode(NodeKind::kText, t);
        n->text = t.value;
        out.push_back(std::move(n));
        Next();
      } else if (t.type == TokenType::kVarBegin) {
        auto n = MakeNode(NodeKind::kOutput, t);
        Next();
        n->expr = ParseTuple(true, {});
        if (Cur().type != TokenType::kVarEnd) Error("expected end of print statement, got " + Describe(Cur()));
        Next();
        out.push_back(std::move(n));
      } else if (t.type == TokenType::kBlockBegin) {
        Next();
        if (Cur().type != TokenType::kName) Error("tag name expected");
        if (ends.count(Cur().value)) {
          *end_found = Cur().value;
          return out;
        }
        out.push_back(ParseStatement());
      } else {
        Error("unexpected " + Describe(t));
      }
    }
  }

  std::unique_ptr<Node> ParseStatement() {
    const Token start = Cur();
    const std::string& tag = start.value;
    if (tag == "if") return ParseIf();
    if (tag == "for") return ParseFor();
    if (tag == "set") return ParseSet();
    if (tag == "macro") return ParseMacro();
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) Error("'" + tag + "' outside of a loop");
      auto n = MakeNode(tag == "break" ? NodeKind::kBreak : NodeKind::kContinue, start);
      Next();
      ExpectBlockEnd();
      return n;
    }
    if (tag == "generation") {
      auto n = MakeNode(NodeKind::kScope, start);
      Next();
      ExpectBlockEnd();
      std::string end;
      n->body = ParseBody({"endgeneration"}, &end);
      Next();
      ExpectBlockEnd();
      return n;
    }
    static const std::set<std::string> kKnownUnsupported = {
        "call", "filter", "with", "include", "import", "from", "extends", "block",
        "autoescape", "do", "trans", "print"};
    if (kKnownUnsupported.count(tag)) Error("unsupported tag '" + tag + "'", TemplateError::Kind::kUnsupported);
    Error("Encountered unknown tag '" + tag + "'");
  }

  std::unique_ptr<Node> ParseIf() {
    auto n = MakeNode(NodeKind::kIf, Cur());
    Next();
    ExprPtr cond = ParseTuple(false, {});
    ExpectBlockEnd();
    while (true) {
      std::string end;
      NodeList body = ParseBody({"elif", "else", "endif"}, &end);
      n->branches.emplace_back(std::move(cond), std::move(body));
      Next();
      if (end == "elif") {
        cond = ParseTuple(false, {});
        ExpectBlockEnd();
      } else if (end == "else") {
        ExpectBlockEnd();
        NodeList else_body = ParseBody({"endif"}, &end);
        n->branches.emplace_back(nullptr, std::move(else_body));
        Next();
        ExpectBlockEnd();
        return n;
      } else {
        ExpectBlockEnd();
        return n;
      }
    }
  }

  // Assignment target: name, or names separated by commas (optionally in parens).
  void ParseTargets(Node* n, bool allow_namespace) {
    if (allow_namespace && Cur().type == TokenType::kName && Peek().type == TokenType::kOp && Peek().value == ".") {
      n->targets.push_back(ExpectName());
      Next();
      n->text = ExpectName();
      return;
    }
    bool paren = IsOp("(");
    if (paren) Next();
    while (true) {
      if (Cur().type != TokenType::kName) Error("can't assign to " + Describe(Cur()));
      std::string name = Cur().value;
      if (name == "true" || name == "false" || name == "none" || name == "True" || name == "False" || name == "None")
        Error("can't assign to '" + name + "'");
      n->targets.push_back(name);
      Next();
      if (!IsOp(",")) break;
      n->target_is_tuple = true;
      Next();
      if (!(Cur().type == TokenType::kName) || IsName("in")) break;
    }
    if (paren) ExpectOp(")");
  }

  std::unique_ptr<Node> ParseFor() {
    auto n = MakeNode(NodeKind::kFor, Cur());
    Next();
    ParseTargets(n.get(), false);
    if (!IsName("in")) Error("expected 'in', got " + Describe(Cur()));
    Next();
    n->expr = ParseTuple(false, {"recursive"});
    if (IsName("if")) {
      Next();
      n->cond = ParseExpression(true);
    }
    if (IsName("recursive")) Error("recursive loops are not supported", TemplateError::Kind::kUnsupported);
    ExpectBlockEnd();
    ++loop_depth_;
    std::string end;
    n->body = ParseBody({"endfor", "else"}, &end);
    --loop_depth_;
    Next();
    ExpectBlockEnd();
    if (end == "else") {
      n->else_body = ParseBody({"endfor"}, &end);
      Next();
      ExpectBlockEnd();
    }
    return n;
  }

  std::unique_ptr<Node> ParseSet() {
    const Token start = Cur();
    Next();
    auto n = MakeNode(NodeKind::kSet, start);
    ParseTargets(n.get(), true);
    if (IsOp("=")) {
      Next();
      n->expr = ParseTuple(true, {});
      ExpectBlockEnd();
      return n;
    }
    if (n->targets.size() != 1 || !n->text.empty()) Error("expected '=', got " + Describe(Cur()));
    if (IsOp("|")) Error("filtered block set is not supported", TemplateError::Kind::kUnsupported);
    ExpectBlockEnd();
    n->kind = NodeKind::kSetBlock;
    std::string end;
    n->body = ParseBody({"endset"}, &end);
    Next();
    ExpectBlockEnd();
    return n;
  }

  std::unique_ptr<Node> ParseMacro() {
    auto n = MakeNode(NodeKind::kMacro, Cur());
    Next();
    n->text = ExpectName();
    macros_.insert(n->text);
    ExpectOp("(");
    while (!IsOp(")")) {
      if (!n->params.empty()) ExpectOp(",");
      if (IsOp(")")) break;
      std::string p = ExpectName();
      ExprPtr def;
      if (IsOp("=")) {
        Next();
        def = ParseExpression(true);
      } else {
        for (const auto& q : n->params)
          if (q.second) Error("non-default argument follows default argument");
      }
      n->params.emplace_back(std::move(p), std::move(def));
    }
    Next();
    ExpectBlockEnd();
    int saved = loop_depth_;
    loop_depth_ = 0;
    std::string end;
    n->body = ParseBody({"endmacro"}, &end);
    loop_depth_ = saved;
    Next();
    if (Cur().type == TokenType::kName && Cur().value == n->text) Next();
    ExpectBlockEnd();
    return n;
  }

  // ---- Expressions -------------------------------------------------------

  bool IsTupleEnd(const std::set<std::string>& extra_end) const {
    const Token& t = Cur();
    if (t.type == TokenType::kVarEnd || t.type == TokenType::kBlockEnd || t.type == TokenType::kEof) return true;
    if (t.type == TokenType::kOp && t.value == ")") return true;
    return t.type == TokenType::kName && extra_end.count(t.value);
  }

  ExprPtr ParseTuple(bool with_condexpr, const std::set<std::string>& extra_end, bool explicit_parens = false) {
    const Token start = Cur();
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) ExpectOp(",");
      if (IsTupleEnd(extra_end)) break;
      items.push_back(with_condexpr ? ParseExpression(true) : ParseOr());
      if (IsOp(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) Error("Expected an expression, got " + Describe(Cur()));
    }
    auto e = MakeExpr(ExprKind::kList, start);
    e->flag = true;
    e->args = std::move(items);
    return e;
  }

  ExprPtr ParseExpression(bool with_condexpr) {
    DepthGuard guard(this);
    if (!with_condexpr) return ParseOr();
    const Token start = Cur();
    ExprPtr e = ParseOr();
    while (IsName("if")) {
      Next();
      ExprPtr cond = ParseOr();
      ExprPtr other;
      if (IsName("else")) {
        Next();
        other = ParseExpression(true);
      }
      auto c = MakeExpr(ExprKind::kCondExpr, start);
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(other));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr Binary(const Token& at, std::string op, ExprPtr a, ExprPtr b) {
    auto e = MakeExpr(ExprKind::kBinary, at);
    e->name = std::move(op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  ExprPtr ParseOr() {
    ExprPtr e = ParseAnd();
    while (IsName("or")) {
      const Token at = Cur();
      Next();
      e = Binary(at, "or", std::move(e), ParseAnd());
    }
    return e;
  }
  ExprPtr ParseAnd() {
    ExprPtr e = ParseNot();
    while (IsName("and")) {
      const Token at = Cur();
      Next();
      e = Binary(at, "and", std::move(e), ParseNot());
    }
    return e;
  }
  ExprPtr ParseNot() {
    DepthGuard guard(this);
    if (IsName("not")) {
      auto e = MakeExpr(ExprKind::kUnary, Cur());
      Next();
      e->name = "not";
      e->args.push_back(ParseNot());
      return e;
    }
    return ParseCompare();
  }
  ExprPtr ParseCompare() {
    ExprPtr e = ParseMath1();
    // Python chains comparisons (a < b < c); we support one operator per level.
    for (int n = 0;; ++n) {
      if (n == 1 && IsComparison()) Error("chained comparisons are not supported", TemplateError::Kind::kUnsupported);
      const Token at = Cur();
      std::string op;
      if (at.type == TokenType::kOp &&
          (at.value == "==" || at.value == "!=" || at.value == "<" || at.value == ">" ||
           at.value == "<=" || at.value == ">=")) {
        op = at.value;
        Next();
      } else if (IsName("in")) {
        op = "in";
        Next();
      } else if (IsName("not") && Peek().type == TokenType::kName && Peek().value == "in") {
        op = "notin";
        Next();
        Next();
      } else {
        return e;
      }
      e = Binary(at, op, std::move(e), ParseMath1());
    }
  }
  bool IsComparison() const {
    const Token& t = Cur();
    if (t.type == TokenType::kOp)
      return t.value == "==" || t.value == "!=" || t.value == "<" || t.value == ">" || t.value == "<=" || t.value == ">=";
    return IsName("in") || (IsName("not") && Peek().type == TokenType::kName && Peek().value == "in");
  }
  ExprPtr ParseMath1() {
    ExprPtr e = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      const Token at = Cur();
      Next();
      e = Binary(at, at.value, std::move(e), ParseConcat());
    }
    return e;
  }
  ExprPtr ParseConcat() {
    ExprPtr e = ParseMath2();
    while (IsOp("~")) {
      const Token at = Cur();
      Next();
      e = Binary(at, "~", std::move(e), ParseMath2());
    }
    return e;
  }
  ExprPtr ParseMath2() {
    ExprPtr e = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token at = Cur();
      Next();
      e = Binary(at, at.value, std::move(e), ParsePow());
    }
    return e;
  }
  ExprPtr ParsePow() {
    ExprPtr e = ParseUnary(true);
    while (IsOp("**")) {
      const Token at = Cur();
      Next();
      e = Binary(at, "**", std::move(e), ParseUnary(true));
    }
    return e;
  }
  ExprPtr ParseUnary(bool with_filter) {
    DepthGuard guard(this);
    ExprPtr e;
    if (IsOp("-") || IsOp("+")) {
      e = MakeExpr(ExprKind::kUnary, Cur());
      e->name = Cur().value;
      Next();
      e->args.push_back(ParseUnary(false));
    } else {
      e = ParsePrimary();
    }
    e = ParsePostfix(std::move(e));
    if (with_filter) e = ParseFilterExpr(std::move(e));
    return e;
  }

  ExprPtr ParsePrimary() {
    DepthGuard guard(this);
    const Token t = Cur();
    if (t.type == TokenType::kName) {
      Next();
      auto e = MakeExpr(ExprKind::kConst, t);
      if (t.value == "true" || t.value == "True") e->value = Value::Bool(true);
      else if (t.value == "false" || t.value == "False") e->value = Value::Bool(false);
      else if (t.value == "none" || t.value == "None") e->value = Value::None();
      else {
        e->kind = ExprKind::kName;
        e->name = t.value;
      }
      return e;
    }
    if (t.type == TokenType::kString) {
      std::string s;
      while (Cur().type == TokenType::kString) {
        s += Cur().value;
        Next();
      }
      auto e = MakeExpr(ExprKind::kConst, t);
      e->value = Value::String(std::move(s));
      return e;
    }
    if (t.type == TokenType::kInt || t.type == TokenType::kFloat) {
      Next();
      auto e = MakeExpr(ExprKind::kConst, t);
      e->value = t.type == TokenType::kInt ? Value::Int(t.int_value) : Value::Float(t.float_value);
      return e;
    }
    if (IsOp("(")) {
      Next();
      ExprPtr e = ParseTuple(true, {}, true);
      ExpectOp(")");
      return e;
    }
    if (IsOp("[")) {
      auto e = MakeExpr(ExprKind::kList, t);
      Next();
      while (!IsOp("]")) {
        if (!e->args.empty()) ExpectOp(",");
        if (IsOp("]")) break;
        e->args.push_back(ParseExpression(true));
      }
      Next();
      return e;
    }
    if (IsOp("{")) {
      auto e = MakeExpr(ExprKind::kDict, t);
      Next();
      while (!IsOp("}")) {
        if (!e->args.empty()) ExpectOp(",");
        if (IsOp("}")) break;
        e->args.push_back(ParseExpression(true));
        ExpectOp(":");
        e->args.push_back(ParseExpression(true));
      }
      Next();
      return e;
    }
    Error("unexpected " + Describe(t));
  }

  ExprPtr ParsePostfix(ExprPtr e) {
    while (true) {
      if (IsOp(".") || IsOp("[")) e = ParseSubscript(std::move(e));
      else if (IsOp("(")) e = ParseCall(std::move(e));
      else return e;
    }
  }
  ExprPtr ParseFilterExpr(ExprPtr e) {
    while (true) {
      if (IsOp("|")) e = ParseFilter(std::move(e));
      else if (IsName("is")) e = ParseTest(std::move(e));
      else if (IsOp("(")) e = ParseCall(std::move(e));
      else return e;
    }
  }

  ExprPtr ParseSubscript(ExprPtr obj) {
    DepthGuard guard(this);
    const Token at = Cur();
    if (IsOp(".")) {
      Next();
      if (Cur().type == TokenType::kName) {
        auto e = MakeExpr(ExprKind::kGetAttr, at);
        e->name = Cur().value;
        Next();
        e->args.push_back(std::move(obj));
        return e;
      }
      if (Cur().type == TokenType::kInt) {
        auto e = MakeExpr(ExprKind::kGetItem, at);
        auto k = MakeExpr(ExprKind::kConst, Cur());
        k->value = Value::Int(Cur().int_value);
        Next();
        e->args.push_back(std::move(obj));
        e->args.push_back(std::move(k));
        return e;
      }
      Error("expected name or number");
    }
    Next();  // '['
    std::vector<ExprPtr> parts;
    bool is_slice = false;
    ExprPtr slice[3];
    int idx = 0;
    // Jinja allows tuple subscripts (a[1, 2]); we support a single index or slice.
    if (!IsOp(":")) slice[0] = ParseExpression(true);
    while (IsOp(":")) {
      is_slice = true;
      Next();
      if (++idx > 2) Error("unexpected ':'");
      if (!IsOp(":") && !IsOp("]")) slice[idx] = ParseExpression(true);
    }
    if (IsOp(",")) Error("tuple subscripts are not supported", TemplateError::Kind::kUnsupported);
    ExpectOp("]");
    if (!is_slice) {
      auto e = MakeExpr(ExprKind::kGetItem, at);
      e->args.push_back(std::move(obj));
      e->args.push_back(std::move(slice[0]));
      return e;
    }
    auto e = MakeExpr(ExprKind::kSlice, at);
    e->args.push_back(std::move(obj));
    for (auto& s : slice) e->args.push_back(std::move(s));
    return e;
  }

  void ParseCallArgs(Expr* e) {
    ExpectOp("(");
    bool first = true;
    while (!IsOp(")")) {
      if (!first) ExpectOp(",");
      first = false;
      if (IsOp(")")) break;
      if (IsOp("*") || IsOp("**")) Error("*args/**kwargs calls are not supported", TemplateError::Kind::kUnsupported);
      if (Cur().type == TokenType::kName && Peek().type == TokenType::kOp && Peek().value == "=") {
        std::string k = Cur().value;
        Next();
        Next();
        e->kwargs.emplace_back(k, ParseExpression(true));
      } else {
        if (!e->kwargs.empty()) Error("invalid syntax for function call expression");
        e->args.push_back(ParseExpression(true));
      }
    }
    Next();
  }

  ExprPtr ParseCall(ExprPtr callee) {
    DepthGuard guard(this);
    const Token at = Cur();
    if (callee->kind == ExprKind::kName) {
      bare_calls_.emplace(callee->name, std::make_pair(callee->line, callee->column));
    } else if (callee->kind == ExprKind::kGetAttr && !IsKnownMethod(callee->name)) {
      Fail(TemplateError::Kind::kUnsupported, "unsupported method '" + callee->name + "'", callee->line, callee->column);
    }
    auto e = MakeExpr(ExprKind::kCall, at);
    e->args.push_back(std::move(callee));
    ParseCallArgs(e.get());
    return e;
  }

  ExprPtr ParseFilter(ExprPtr operand) {
    DepthGuard guard(this);
    Next();  // '|'
    const Token at = Cur();
    std::string name = ExpectName();
    if (!IsKnownFilter(name))
      Fail(TemplateError::Kind::kUnsupported, "unsupported filter '" + name + "'", at.line, at.column);
    auto e = MakeExpr(ExprKind::kFilter, at);
    e->name = name;
    e->args.push_back(std::move(operand));
    if (IsOp("(")) ParseCallArgs(e.get());
    return e;
  }

  ExprPtr ParseTest(ExprPtr operand) {
    DepthGuard guard(this);
    Next();  // 'is'
    bool negated = false;
    if (IsName("not")) {
      negated = true;
      Next();
    }
    const Token at = Cur();
    std::string name = ExpectName();
    if (!IsKnownTest(name))
      Fail(TemplateError::Kind::kUnsupported, "unsupported test '" + name + "'", at.line, at.column);
    auto e = MakeExpr(ExprKind::kTest, at);
    e->name = name;
    e->flag = negated;
    e->args.push_back(std::move(operand));
    const Token& c = Cur();
    if (IsOp("(")) {
      ParseCallArgs(e.get());
    } else if ((c.type == TokenType::kName || c.type == TokenType::kString || c.type == TokenType::kInt ||
                c.type == TokenType::kFloat || IsOp("(") || IsOp("[") || IsOp("{")) &&
               !IsName("else") && !IsName("or") && !IsName("and")) {
      if (IsName("is")) Error("You cannot chain multiple tests with is");
      e->args.push_back(ParsePostfix(ParsePrimary()));
    }
    return e;
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  ParseLimits limits_;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::set<std::string> macros_;
  std::multimap<std::string, std::pair<int, int>> bare_calls_;
};

}  // namespace

NodeList Parse(std::string_view source, const LexerOptions& lexer_options, const ParseLimits& limits) {
  Parser parser(Tokenize(source, lexer_options), limits);
  return parser.ParseTemplate();
}

}  // namespace tessera::jinja

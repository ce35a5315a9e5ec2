// Bounded work per token (docs/architecture.md, "Time-bounded steps"): a
// grammar whose parses multiply (nested counted repetition of an optional
// item, ~40 bytes of regex, GBNF, JSON Schema `pattern` or tool schema) is
// refused when compiled, in well under a second; a matcher over its stack or
// time bound fails for good (no truncated state, nothing partial cached).
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "structured/gbnf.h"
#include "structured/json_schema.h"
#include "structured/matcher.h"
#include "structured/structured.h"

namespace tessera::structured {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

// Every byte, "a" runs (so one token can advance through many parses) and a special token.
std::shared_ptr<const TokenVocab> Vocab() {
  std::vector<std::optional<std::string>> v;
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));
  for (const char* t : {"aa", "aaaa", "aaaaaaaa", "{\"", "\":", "\"}"}) v.push_back(std::string(t));
  v.push_back(std::nullopt);
  return TokenVocab::Create(std::move(v));
}

constexpr const char* kBombRegex = "((a?){1,30}){1,30}";
constexpr const char* kBombGbnf = "root ::= ((\"a\"?){1,30}){1,30}";
// Its parses multiply only as "a"s come (the first state is one stack).
constexpr const char* kSlowBombGbnf = "root ::= (((\"a\"){1,20}){1,20}){1,20}";

// Each kind of source, refused fast with a message saying why.
TEST(WorkBudgetTest, BombsAreRefusedAtCompileTime) {
  StructuredOutputs so(Vocab());
  const Json pattern = Json::parse(R"({"type": "object", "properties": {"p": {"type": "string",
      "pattern": "^((a?){1,30}){1,30}$"}}, "required": ["p"]})");
  // A tool call: the schema embedded in literal text, as tool_grammar.h builds it.
  const Json params = Json::parse(R"({"type": "object", "properties": {"q": {"type": "string",
      "pattern": "((a?){1,30}){1,30}"}}, "required": ["q"]})");
  auto args = JsonSchemaToGbnf(params, so.limits(), {.root_name = "args", .rule_prefix = "t0-"});
  ASSERT_TRUE(args.ok()) << args.status().ToString();
  const std::string tool = "root ::= \"<tool_call>{\\\"arguments\\\": \" t0-args \"}</tool_call>\"\n" + *args;
  struct Case {
    const char* what;
    std::function<StatusOr<StructuredOutputs::ConstraintPtr>()> compile;
  };
  const std::vector<Case> cases = {
      {"regex", [&] { return so.Regex(kBombRegex); }},
      {"gbnf", [&] { return so.Gbnf(kBombGbnf); }},
      {"pattern", [&] { return so.JsonSchema(pattern); }},
      {"tool", [&] { return so.Gbnf(tool); }},
  };
  for (const Case& c : cases) {
    const auto t0 = Clock::now();
    auto r = c.compile();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(r.status().message().find("too expensive"), std::string::npos) << r.status().message();
    EXPECT_LT(s, 2.0) << c.what;
    // The refusal is cached: the second time costs nothing.
    const auto t1 = Clock::now();
    EXPECT_FALSE(c.compile().ok());
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t1).count(), 0.05) << c.what;
  }
}

// Ordinary grammars, counted repetition included, pass the probe.
TEST(WorkBudgetTest, OrdinaryGrammarsPass) {
  StructuredOutputs so(Vocab());
  for (const char* rx : {"[a-z]{3,8}@(foo|bar)\\.com", "(ab|cd)*e", "a{1,30}", "(a{1,5}){1,5}", "x{2}y{0,3}z?",
                         "-?(0|[1-9]\\d{0,5})(\\.\\d{1,3})?"}) {
    auto r = so.Regex(rx);
    EXPECT_TRUE(r.ok()) << rx << ": " << r.status().ToString();
  }
  EXPECT_TRUE(so.JsonObject().ok());
  auto schema = so.JsonSchema(Json::parse(R"({"type": "object", "properties": {"name": {"type": "string",
      "maxLength": 12}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5}}})"));
  EXPECT_TRUE(schema.ok()) << schema.status().ToString();
}

std::shared_ptr<const CompiledGrammar> CompileUnprobed(const std::string& gbnf, const CompileLimits& limits) {
  auto g = ParseGbnf(gbnf, limits, Clock::now() + std::chrono::seconds(10));
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return std::make_shared<const CompiledGrammar>(std::move(*g), Vocab(), limits);
}

// Past max_stacks the matcher fails (it used to keep the first 4096 stacks and
// go on with a wrong state), and stays failed; nothing partial is cached.
TEST(WorkBudgetTest, StackBoundFailsTheMatcherForGood) {
  CompileLimits limits;
  limits.max_stacks = 64;
  auto g = CompileUnprobed(kSlowBombGbnf, limits);
  GrammarMatcher m(g);
  std::vector<uint32_t> mask(static_cast<size_t>(g->mask_words()));
  int advanced = 0;
  bool failed = false;
  for (; advanced < 200 && !failed; ++advanced) {
    failed = !m.FillMask(mask) || !m.AcceptBytes("a");
  }
  ASSERT_TRUE(failed) << "never went over 64 stacks";
  EXPECT_NE(m.over_budget().find("parse stacks"), std::string::npos) << m.over_budget();
  EXPECT_FALSE(m.FillMask(mask));
  EXPECT_FALSE(m.AcceptBytes("a"));
  // A fresh matcher of the same grammar starts clean (the failure is the matcher's, not the grammar's).
  GrammarMatcher fresh(g);
  EXPECT_TRUE(fresh.over_budget().empty());
  EXPECT_TRUE(fresh.FillMask(mask));
}

// A zero time budget fails the first call that has work to do.
TEST(WorkBudgetTest, TimeBoundFailsTheCall) {
  CompileLimits limits;
  limits.max_mask_time = std::chrono::milliseconds(0);
  auto g = CompileUnprobed("root ::= [a-z]+ \"@x.com\"", limits);
  GrammarMatcher m(g);
  std::vector<uint32_t> mask(static_cast<size_t>(g->mask_words()));
  EXPECT_FALSE(m.FillMask(mask));
  EXPECT_NE(m.over_budget().find("ms"), std::string::npos) << m.over_budget();
  // The same grammar with the default budget gives the mask.
  auto ok = CompileUnprobed("root ::= [a-z]+ \"@x.com\"", CompileLimits{});
  GrammarMatcher m2(ok);
  EXPECT_TRUE(m2.FillMask(mask));
}

// The constraint's matcher reports the failure as a status (the engine loop ends the request with it).
TEST(WorkBudgetTest, TokenMatcherReportsTheFailure) {
  CompileLimits limits;
  limits.max_stacks = 64;
  auto constraint = MakeGrammarConstraint(CompileUnprobed(kSlowBombGbnf, limits));
  auto m = constraint->NewMatcher();
  std::vector<uint32_t> mask(static_cast<size_t>((Vocab()->size() + 31) / 32));
  Status st = Status::Ok();
  for (int i = 0; i < 200 && st.ok(); ++i) {
    st = m->FillNextTokenMask(mask);
    if (st.ok()) m->AcceptToken('a');
  }
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("budget"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace tessera::structured

#include "structured/structured.h"

#include <chrono>

#include "structured/gbnf.h"
#include "structured/probe.h"
#include "structured/regex.h"
#include "text/tokenizer.h"

namespace tessera::structured {
namespace {

class GrammarTokenMatcher : public TokenMatcher {
 public:
  explicit GrammarTokenMatcher(std::shared_ptr<const CompiledGrammar> g) : m_(std::move(g)) {}
  Status FillNextTokenMask(std::span<uint32_t> mask) override {
    if (m_.FillMask(mask)) return Status::Ok();
    return InvalidArgument("the constraint went over its per-token budget: " + m_.over_budget());
  }
  bool AcceptToken(int32_t token) override { return m_.AcceptToken(token); }
  bool CanEnd() const override { return m_.CanEnd(); }
  bool IsComplete() const override { return m_.IsComplete(); }

 private:
  GrammarMatcher m_;
};

class GrammarConstraint : public TokenConstraint {
 public:
  explicit GrammarConstraint(std::shared_ptr<const CompiledGrammar> g) : g_(std::move(g)) {}
  std::unique_ptr<TokenMatcher> NewMatcher() const override { return std::make_unique<GrammarTokenMatcher>(g_); }

 private:
  std::shared_ptr<const CompiledGrammar> g_;
};

}  // namespace

std::shared_ptr<const TokenConstraint> MakeGrammarConstraint(std::shared_ptr<const CompiledGrammar> grammar) {
  return std::make_shared<GrammarConstraint>(std::move(grammar));
}

StructuredOutputs::StructuredOutputs(const text::Tokenizer* tokenizer, int64_t vocab_size, CompileLimits limits)
    : tokenizer_(tokenizer), vocab_size_(vocab_size), limits_(limits) {}

StructuredOutputs::StructuredOutputs(std::shared_ptr<const TokenVocab> vocab, CompileLimits limits)
    : limits_(limits), vocab_(std::move(vocab)) {}

std::shared_ptr<const TokenVocab> StructuredOutputs::vocab() {
  std::call_once(vocab_once_, [this] {
    if (vocab_ == nullptr) vocab_ = TokenVocab::FromTokenizer(*tokenizer_, vocab_size_);
  });
  return vocab_;
}

StatusOr<std::shared_ptr<const CompiledGrammar>> StructuredOutputs::CompileGbnf(std::string_view grammar) {
  const std::string key = "gbnf\n" + std::string(grammar);
  {
    std::lock_guard lock(mu_);
    if (auto it = cache_.find(key); it != cache_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.pos);
      return it->second.grammar;
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + limits_.max_compile_time;
  ASSIGN_OR_RETURN(Grammar g, ParseGbnf(grammar, limits_, deadline));
  StatusOr<std::shared_ptr<const CompiledGrammar>> compiled =
      std::make_shared<const CompiledGrammar>(std::move(g), vocab(), limits_);
  // A grammar too costly to enforce is cached too: a client repeating it costs nothing more.
  if (Status probe = ProbeGrammar(*compiled, limits_); !probe.ok()) compiled = probe;
  std::lock_guard lock(mu_);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second.grammar;
  lru_.push_front(key);
  cache_.emplace(key, Entry{compiled, lru_.begin()});
  if (cache_.size() > kCacheEntries) {
    cache_.erase(lru_.back());
    lru_.pop_back();
  }
  return compiled;
}

// The GBNF text is the cache key: equal sources give equal text, and making
// it is linear in the source; parsing and the mask cache are what is shared.
StatusOr<StructuredOutputs::ConstraintPtr> StructuredOutputs::FromGbnfText(
    const std::function<StatusOr<std::string>()>& to_gbnf) {
  ASSIGN_OR_RETURN(std::string gbnf, to_gbnf());
  ASSIGN_OR_RETURN(auto compiled, CompileGbnf(gbnf));
  return MakeGrammarConstraint(std::move(compiled));
}

StatusOr<StructuredOutputs::ConstraintPtr> StructuredOutputs::JsonSchema(const nlohmann::ordered_json& schema) {
  return FromGbnfText([&] { return JsonSchemaToGbnf(schema, limits_); });
}

StatusOr<StructuredOutputs::ConstraintPtr> StructuredOutputs::JsonObject() {
  return FromGbnfText([] { return StatusOr<std::string>(JsonObjectGbnf()); });
}

StatusOr<StructuredOutputs::ConstraintPtr> StructuredOutputs::Regex(std::string_view pattern) {
  return FromGbnfText([&]() -> StatusOr<std::string> {
    ASSIGN_OR_RETURN(std::string expr, RegexToGbnf(pattern, limits_));
    return "root ::= " + expr + "\n";
  });
}

StatusOr<StructuredOutputs::ConstraintPtr> StructuredOutputs::Choice(const std::vector<std::string>& choices) {
  return FromGbnfText([&]() -> StatusOr<std::string> {
    if (choices.empty()) return InvalidArgument("the choice list is empty");
    std::string g = "root ::= ";
    for (size_t i = 0; i < choices.size(); ++i) {
      if (choices[i].empty()) return InvalidArgument("a choice is the empty string");
      g += (i ? " | " : "") + GbnfLiteral(choices[i]);
    }
    if (g.size() > limits_.max_source_bytes) return InvalidArgument("the choice list is too long");
    return g + "\n";
  });
}

StatusOr<StructuredOutputs::ConstraintPtr> StructuredOutputs::Gbnf(std::string_view grammar) {
  ASSIGN_OR_RETURN(auto compiled, CompileGbnf(grammar));
  return MakeGrammarConstraint(std::move(compiled));
}

}  // namespace tessera::structured

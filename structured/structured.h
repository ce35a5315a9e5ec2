// StructuredOutputs: the one entry point of structured/ for the rest
// of the server. Turns a JSON Schema, {"type":"json_object"}, a regex, a
// choice list or a GBNF grammar into a TokenConstraint (scheduler/
// token_constraint.h) that the engine loop applies as a per-step token mask.
// Compiled grammars are cached by their full source text (LRU), as are the
// refusals of ProbeGrammar (structured/probe.h: a grammar whose next-token
// masks would be too costly); the vocabulary's byte trie is built once, on
// first use.
//
// One instance per served model; every method is thread-safe. Compiling runs
// on the calling thread (a request worker, never an I/O thread) and is
// bounded by CompileLimits: over a bound -> INVALID_ARGUMENT saying which.
//
// Embedding a schema in a bigger grammar (e.g. forcing a tool call):
//   auto args = JsonSchemaToGbnf(params_schema, limits, {.root_name = "args", .rule_prefix = "t0-"});
//   std::string g = "root ::= \"<tool_call>\\n{\\\"name\\\": \\\"get_weather\\\", \\\"arguments\\\": \" t0-args "
//                   "\"}\\n</tool_call>\"\n" + *args;
//   auto constraint = structured_outputs.Gbnf(g);
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "scheduler/token_constraint.h"
#include "structured/grammar.h"
#include "structured/json_schema.h"
#include "structured/matcher.h"
#include "structured/vocab.h"

namespace tessera::text {
class Tokenizer;
}

namespace tessera::structured {

class StructuredOutputs {
 public:
  // `tokenizer` must outlive this; vocab_size is the model's (>= the tokenizer's).
  StructuredOutputs(const text::Tokenizer* tokenizer, int64_t vocab_size, CompileLimits limits = {});
  // For tests and tools: a fixed vocabulary.
  StructuredOutputs(std::shared_ptr<const TokenVocab> vocab, CompileLimits limits = {});

  using ConstraintPtr = std::shared_ptr<const TokenConstraint>;
  StatusOr<ConstraintPtr> JsonSchema(const nlohmann::ordered_json& schema);
  StatusOr<ConstraintPtr> JsonObject();
  StatusOr<ConstraintPtr> Regex(std::string_view pattern);  // the whole output must match (fullmatch)
  StatusOr<ConstraintPtr> Choice(const std::vector<std::string>& choices);  // exactly one of them
  StatusOr<ConstraintPtr> Gbnf(std::string_view grammar);

  // The compiled grammar behind Gbnf (cached); for tests and benchmarks.
  StatusOr<std::shared_ptr<const CompiledGrammar>> CompileGbnf(std::string_view grammar);
  const CompileLimits& limits() const { return limits_; }
  std::shared_ptr<const TokenVocab> vocab();  // built on first call

 private:
  StatusOr<ConstraintPtr> FromGbnfText(const std::function<StatusOr<std::string>()>& to_gbnf);

  const text::Tokenizer* tokenizer_ = nullptr;
  int64_t vocab_size_ = 0;
  CompileLimits limits_;
  std::once_flag vocab_once_;
  std::shared_ptr<const TokenVocab> vocab_;

  static constexpr size_t kCacheEntries = 32;
  std::mutex mu_;
  std::list<std::string> lru_;  // most recent first
  struct Entry {
    StatusOr<std::shared_ptr<const CompiledGrammar>> grammar;  // or why ProbeGrammar refused it
    std::list<std::string>::iterator pos;
  };
  std::unordered_map<std::string, Entry> cache_;
};

// The constraint for a compiled grammar (what the StructuredOutputs methods return).
std::shared_ptr<const TokenConstraint> MakeGrammarConstraint(std::shared_ptr<const CompiledGrammar> grammar);

}  // namespace tessera::structured

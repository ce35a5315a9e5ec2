// CompiledGrammar: a Grammar bound to a model's TokenVocab, plus a cache of
// next-token masks keyed by parser state (shared by every request using the
// grammar). GrammarMatcher: one sequence's position in the grammar.
//
// The matcher is a pushdown recognizer over bytes: a set of stacks
// (persistent nodes with parent links, hash-consed so equal stacks share one
// id), each stack's top a byte class to match next. Stack sets are interned
// as states of a lazily built DFA whose transitions are computed once per
// (state, byte) and then cost an array lookup. A mask is one walk of the
// vocabulary's byte trie through that DFA: a subtree is skipped as soon as
// its prefix is dead, so after warm-up the walk costs about one lookup per
// trie node it visits (all of them inside a JSON string: a few ms for a 150k
// vocabulary). Masks are also cached per grammar, keyed by the stacks'
// content, so a state any request has seen costs a ~V/8-byte copy.
//
// Thread-safety: CompiledGrammar is immutable apart from its mask cache
// (mutex); a GrammarMatcher is used by one thread at a time.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "server/structured/grammar.h"
#include "server/structured/vocab.h"

namespace tessera::structured {

class CompiledGrammar {
 public:
  CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocab> vocab);
  const Grammar& grammar() const { return grammar_; }
  const TokenVocab& vocab() const { return *vocab_; }
  int32_t mask_words() const { return (vocab_->size() + 31) / 32; }

  // Mask cache (bounded; cleared when full).
  std::shared_ptr<const std::vector<uint32_t>> FindMask(const std::string& state) const;
  void StoreMask(const std::string& state, std::shared_ptr<const std::vector<uint32_t>> mask) const;

 private:
  Grammar grammar_;
  std::shared_ptr<const TokenVocab> vocab_;
  size_t max_cached_ = 0;
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::shared_ptr<const std::vector<uint32_t>>> masks_;
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  // Advances by `bytes`; false (state unchanged) when the grammar rejects them.
  bool AcceptBytes(std::string_view bytes);
  // Advances by the token's bytes; false for tokens the grammar may not produce.
  bool AcceptToken(int32_t token);
  // Bit t of mask[t / 32]: token t may come next. Overwrites all mask_words()
  // words. End-of-sequence is not a token here: see CanEnd.
  void FillMask(std::span<uint32_t> mask);

  bool CanEnd() const { return states_[state_].accept; }  // the output so far is complete
  bool IsComplete() const { return CanEnd() && states_[state_].tops.empty(); }  // ... and nothing may follow

 private:
  static constexpr int32_t kUnknown = -1;
  static constexpr int32_t kDead = -2;
  struct Node {
    int32_t pos;     // position in grammar().elems to continue at
    int32_t parent;  // -1: bottom of the stack
  };
  // A set of stacks (their top nodes, sorted; each top a byte class) and
  // whether some stack is empty; transitions filled in lazily.
  struct State {
    std::vector<int32_t> tops;
    bool accept = false;
    std::array<int32_t, 256> next;
  };
  int32_t Intern(int32_t pos, int32_t parent);  // hash-consed: equal stacks have equal ids
  void Expand(int32_t node, std::vector<int32_t>* tops, bool* accept);
  int32_t InternState(std::vector<int32_t> tops, bool accept);
  int32_t Step(int32_t state, uint8_t byte);  // the state after `byte`, or kDead
  void Restart();  // drops every state but the current one (memory bound)
  std::string StateKey() const;
  void Walk(int32_t trie_node, int32_t state, uint32_t* mask);

  std::shared_ptr<const CompiledGrammar> g_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> node_ids_;
  std::vector<uint32_t> visited_;  // node id -> epoch of its last expansion
  uint32_t epoch_ = 0;
  std::vector<int32_t> work_;
  std::vector<int32_t> scratch_;
  std::vector<State> states_;  // a lazily built DFA over stack sets
  std::unordered_map<std::string, int32_t> state_ids_;
  int32_t state_ = 0;
};

}  // namespace tessera::structured

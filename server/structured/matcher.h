// CompiledGrammar: a Grammar bound to a model's TokenVocab, plus a cache of
// next-token masks keyed by parser state (shared by every request using the
// grammar). GrammarMatcher: one sequence's position in the grammar.
//
// The matcher is a pushdown recognizer over bytes: its state is a set of
// stacks (persistent: nodes with parent links, shared suffixes, deduplicated
// by hash-consing), each stack's top a byte class to match next. A mask is
// one walk of the vocabulary's byte trie from the current stacks: a subtree
// is skipped as soon as no stack survives its prefix, so the cost is the part
// of the trie the grammar allows. Masks are cached per state: inside a JSON
// string, or at the same place of a schema, the state repeats and the mask is
// a copy of ~V/8 bytes (microseconds); the first walk of a state costs about
// the trie nodes it visits (milliseconds for a 150k vocabulary in a string).
//
// Thread-safety: CompiledGrammar is immutable apart from its mask cache
// (mutex); a GrammarMatcher is used by one thread at a time.
#pragma once

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

  bool CanEnd() const { return accept_; }                      // the output so far is complete
  bool IsComplete() const { return accept_ && tops_.empty(); }  // ... and nothing may follow
  bool IsDead() const { return !accept_ && tops_.empty(); }     // no continuation at all

 private:
  struct Node {
    int32_t pos;     // position in grammar().elems to continue at
    int32_t parent;  // -1: bottom of the stack
  };
  int32_t Intern(int32_t pos, int32_t parent);
  void Expand(int32_t node, std::vector<int32_t>* tops, bool* accept);
  void Advance(const std::vector<int32_t>& tops, uint8_t byte, std::vector<int32_t>* next, bool* accept);
  void Compact();  // keeps only the nodes of tops_, hash-consed
  std::string StateKey() const;
  void Walk(int32_t trie_node, size_t depth, const std::vector<int32_t>& tops, uint32_t* mask);

  std::shared_ptr<const CompiledGrammar> g_;
  std::vector<Node> nodes_;
  std::vector<int32_t> table_;    // lossy hash-consing: hash(pos, parent) -> node id, checked on read
  std::vector<uint32_t> visited_;  // node id -> epoch of its last expansion
  uint32_t epoch_ = 0;
  std::vector<int32_t> work_;
  std::vector<std::vector<int32_t>> levels_;  // Walk scratch, one per trie depth
  std::vector<int32_t> tops_;                 // stacks whose top is a byte class
  bool accept_ = false;                       // some stack is empty: the document may end here
  bool overflowed_ = false;
};

}  // namespace tessera::structured

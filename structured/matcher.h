// CompiledGrammar: a Grammar bound to a model's TokenVocab, plus a cache of
// next-token masks keyed by parser state (shared by every request using the
// grammar). GrammarMatcher: one sequence's position in the grammar.
//
// The matcher is a pushdown recognizer over bytes: a set of stacks
// (persistent nodes with parent links, hash-consed so equal stacks share one
// id), each stack's top a byte class to match next. Stack sets are interned
// as states of a lazily built DFA whose transitions are computed once per
// (state, byte) and then cost an array lookup. A full mask would be one walk
// of the vocabulary's byte trie through that DFA (a subtree skipped as soon
// as its prefix is dead; inside a JSON string that is every trie node: a few
// ms for a 150k vocabulary); the position tables below avoid most of it.
// Masks are also cached per grammar, keyed by the stacks' content, so a state
// any request has seen costs a ~V/8-byte copy.
//
// Context-independent precompute (as XGrammar): a stack's top frames (the
// positions of its kTableFrames topmost nodes) see the rest of their
// alternatives, then pop into the stack below, which differs from state to
// state. For each such key the vocabulary trie is walked ONCE from a stack
// holding those frames alone (PositionTable): tokens matched without popping
// past them are allowed whatever lies below (accepted);
// tokens that die inside them without having popped are never allowed
// (rejected); the rest pop into the context with bytes left (uncertain), kept
// as a pruned trie. A mask is then the union of the tops' accepted sets plus
// a walk of their uncertain tries through the real state's DFA: exact, and
// it costs a few bitset ORs plus the uncertain tokens' walk (bench/RESULTS.md:
// p50 ~0.008x, p99 ~0.18x a full walk on the Qwen vocabulary). Tables are built lazily, shared
// by every matcher of the grammar, and bounded in memory (past the bound a
// mask is one full trie walk, as before).
//
// Work bounds (docs/architecture.md, "Time-bounded steps"): every FillMask and
// AcceptBytes call runs against a deadline (CompileLimits::max_mask_time) and
// no state may hold more than CompileLimits::max_stacks stacks (a grammar that
// ambiguous, e.g. nested counted repetition of a nullable item, would make
// every byte cost thousands of expansions). Past either bound the matcher is
// over budget for good: the call fails, nothing partial is cached, and every
// later call fails too; over_budget() says why.
//
// Thread-safety: CompiledGrammar is immutable apart from its mask and table
// caches (mutex); a GrammarMatcher is used by one thread at a time.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "structured/grammar.h"
#include "structured/vocab.h"

namespace tessera::structured {

// The context-independent token classes of one grammar position (see above).
struct PositionTable {
  // The uncertain tokens as a pruned copy of the vocabulary trie, in
  // preorder: path nodes lead to `whole` nodes, each a vocabulary trie
  // subtree whose tokens all need the context (their path popped out of the
  // frame and then died inside it).
  struct Node {
    int32_t end;        // one past the last node of its subtree
    int32_t trie_node;  // the vocabulary trie node
    uint16_t depth;     // bytes from the root (1 for the first byte)
    uint8_t byte;
    bool whole;
  };
  std::vector<uint32_t> accept_bits;  // a bitmask over the vocabulary, or (when few) ...
  std::vector<int32_t> accept_list;   // ... the accepted tokens
  std::vector<Node> uncertain;
  uint64_t uncertain_hash = 0;  // of `uncertain`: positions with equal tries are walked once per mask
  size_t Bytes() const;
};

class CompiledGrammar {
 public:
  // Of `limits`, the matchers use max_mask_time and max_stacks.
  CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocab> vocab, const CompileLimits& limits = {});
  const Grammar& grammar() const { return grammar_; }
  std::chrono::milliseconds max_mask_time() const { return max_mask_time_; }
  size_t max_stacks() const { return max_stacks_; }
  const TokenVocab& vocab() const { return *vocab_; }
  int32_t mask_words() const { return (vocab_->size() + 31) / 32; }

  // Mask cache (bounded; cleared when full).
  std::shared_ptr<const std::vector<uint32_t>> FindMask(const std::string& state) const;
  void StoreMask(const std::string& state, std::shared_ptr<const std::vector<uint32_t>> mask) const;

  // Position tables (bounded; when full, new ones are not kept and
  // TablesFull() tells matchers to walk the whole trie instead).
  // Keyed by the positions of a stack's topmost frames (top first).
  std::shared_ptr<const PositionTable> FindTable(const std::vector<int32_t>& frames) const;
  void StoreTable(const std::vector<int32_t>& frames, std::shared_ptr<const PositionTable> table) const;
  bool TablesFull() const;

 private:
  Grammar grammar_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::chrono::milliseconds max_mask_time_;
  size_t max_stacks_;
  size_t max_cached_ = 0;
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::shared_ptr<const std::vector<uint32_t>>> masks_;
  static std::string FramesKey(const std::vector<int32_t>& frames);
  mutable std::unordered_map<std::string, std::shared_ptr<const PositionTable>> tables_;
  mutable size_t table_bytes_ = 0;
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);
  // At the start of `rule` instead of the root (the probe walks from every rule).
  GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, int32_t rule);

  // The clock budgets are read on: wall time (at run time a mask delays the
  // step: latency is what counts), or this thread's CPU time (the compile-time
  // probe: the same verdict however loaded the machine is).
  enum class BudgetClock { kWall, kThreadCpu };

  // Advances by `bytes`; false (state unchanged) when the grammar rejects them
  // or the call went over budget (then over_budget()).
  bool AcceptBytes(std::string_view bytes);
  // Advances by the token's bytes; false for tokens the grammar may not produce.
  bool AcceptToken(int32_t token);
  // Bit t of mask[t / 32]: token t may come next. Overwrites all mask_words()
  // words. End-of-sequence is not a token here: see CanEnd. False (mask
  // unspecified) when over budget.
  bool FillMask(std::span<uint32_t> mask);
  // The same mask by one walk of the whole vocabulary trie, without the
  // position tables or the mask cache (the fallback; tests compare the two).
  bool FillMaskFullWalk(std::span<uint32_t> mask);
  // The table of a stack whose topmost frames are at `frames` (top first; the
  // top a byte class), built now; null (and `*over` says why) past `deadline`
  // or the stack bound.
  static std::shared_ptr<const PositionTable> BuildTable(std::shared_ptr<const CompiledGrammar> grammar,
                                                         const std::vector<int32_t>& frames, BudgetClock clock,
                                                         int64_t deadline_ns, std::string* over);

  // Empty, or why a call went over the work bounds (sticky).
  const std::string& over_budget() const { return over_; }
  void SetBudgetClock(BudgetClock clock) { clock_ = clock; }
  // Now on `clock`, in nanoseconds.
  static int64_t Now(BudgetClock clock);
  // Calls run against `deadline_ns` (on the budget clock) instead of now +
  // max_mask_time each (a probe's own bounds).
  void SetDeadline(int64_t deadline_ns) { fixed_deadline_ns_ = deadline_ns; }
  // The compile-time probe's walk toward ambiguity: up to `max_bytes` bytes,
  // each the candidate (one byte of each stack top's class) whose next state
  // holds the most stacks. False when over budget.
  bool GreedyWalk(size_t max_bytes);
  size_t num_stacks() const { return states_[state_].tops.size(); }  // in the current state

  bool CanEnd() const { return states_[state_].accept; }  // the output so far is complete
  bool IsComplete() const { return CanEnd() && states_[state_].tops.empty(); }  // ... and nothing may follow

 private:
  // One stack: the frames at `frames` (top first) on nothing.
  GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, const std::vector<int32_t>& frames);
  // Frames a table sees: a rule as small as a JSON string's `char` pops at
  // once, so one frame would leave nearly every token to the context.
  static constexpr size_t kTableFrames = 3;
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
  void TableWalk(int32_t trie_node, int32_t state, bool escaped, int depth, PositionTable* table,
                 std::vector<int32_t>* accepted);
  void UncertainWalk(const PositionTable& table, uint32_t* mask);
  void TableKey(int32_t top, std::vector<int32_t>* key) const;
  void BeginCall();                       // sets deadline_ for one public call
  void OverBudget(const std::string& why);  // records the first reason

  std::shared_ptr<const CompiledGrammar> g_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> node_ids_;
  std::vector<uint32_t> visited_;  // node id -> epoch of its last expansion
  uint32_t epoch_ = 0;
  std::vector<int32_t> work_;
  std::vector<int32_t> scratch_;
  std::vector<int32_t> depth_states_;  // UncertainWalk: the DFA state at each depth
  std::vector<State> states_;  // a lazily built DFA over stack sets
  std::unordered_map<std::string, int32_t> state_ids_;
  int32_t state_ = 0;
  BudgetClock clock_ = BudgetClock::kWall;
  int64_t deadline_ns_ = INT64_MAX;
  std::optional<int64_t> fixed_deadline_ns_;
  std::string over_;
};

}  // namespace tessera::structured

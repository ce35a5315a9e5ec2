#include "structured/matcher.h"

#include <algorithm>
#include <cstring>
#include <ctime>

namespace tessera::structured {
namespace {

constexpr size_t kMaskCacheBytes = size_t{8} << 20;
constexpr size_t kTableBytes = size_t{64} << 20;  // position tables per grammar

using Kind = Grammar::Kind;

bool SameUncertain(const PositionTable& a, const PositionTable& b) {
  if (a.uncertain.size() != b.uncertain.size()) return false;
  for (size_t i = 0; i < a.uncertain.size(); ++i) {
    const PositionTable::Node& x = a.uncertain[i];
    const PositionTable::Node& y = b.uncertain[i];
    if (x.end != y.end || x.trie_node != y.trie_node || x.depth != y.depth || x.byte != y.byte || x.whole != y.whole) {
      return false;
    }
  }
  return true;
}

}  // namespace

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocab> vocab, const CompileLimits& limits)
    : grammar_(std::move(grammar)),
      vocab_(std::move(vocab)),
      max_mask_time_(limits.max_mask_time),
      max_stacks_(limits.max_stacks) {
  max_cached_ = std::max<size_t>(16, kMaskCacheBytes / (static_cast<size_t>(mask_words()) * 4 + 64));
}

std::shared_ptr<const std::vector<uint32_t>> CompiledGrammar::FindMask(const std::string& state) const {
  std::lock_guard lock(mu_);
  auto it = masks_.find(state);
  return it == masks_.end() ? nullptr : it->second;
}

void CompiledGrammar::StoreMask(const std::string& state, std::shared_ptr<const std::vector<uint32_t>> mask) const {
  std::lock_guard lock(mu_);
  if (masks_.size() >= max_cached_) masks_.clear();
  masks_.emplace(state, std::move(mask));
}

size_t PositionTable::Bytes() const {
  return sizeof(*this) + accept_bits.size() * sizeof(uint32_t) + accept_list.size() * sizeof(int32_t) +
         uncertain.size() * sizeof(Node);
}

std::string CompiledGrammar::FramesKey(const std::vector<int32_t>& frames) {
  return std::string(reinterpret_cast<const char*>(frames.data()), frames.size() * sizeof(int32_t));
}

std::shared_ptr<const PositionTable> CompiledGrammar::FindTable(const std::vector<int32_t>& frames) const {
  const std::string key = FramesKey(frames);
  std::lock_guard lock(mu_);
  auto it = tables_.find(key);
  return it == tables_.end() ? nullptr : it->second;
}

void CompiledGrammar::StoreTable(const std::vector<int32_t>& frames, std::shared_ptr<const PositionTable> table) const {
  std::string key = FramesKey(frames);
  std::lock_guard lock(mu_);
  if (table_bytes_ + table->Bytes() > kTableBytes) {
    table_bytes_ = kTableBytes;  // full from now on
    return;
  }
  const size_t bytes = table->Bytes();
  if (tables_.emplace(std::move(key), std::move(table)).second) table_bytes_ += bytes;
}

bool CompiledGrammar::TablesFull() const {
  std::lock_guard lock(mu_);
  return table_bytes_ >= kTableBytes;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, const std::vector<int32_t>& frames)
    : g_(std::move(grammar)) {
  std::vector<int32_t> tops;
  bool accept = false;
  ++epoch_;
  int32_t node = -1;
  for (size_t i = frames.size(); i-- > 0;) node = Intern(frames[i], node);
  Expand(node, &tops, &accept);
  state_ = InternState(std::move(tops), accept);
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : GrammarMatcher(grammar, grammar->grammar().root) {}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, int32_t rule) : g_(std::move(grammar)) {
  std::vector<int32_t> tops;
  bool accept = false;
  ++epoch_;
  for (int32_t alt : g_->grammar().alts[rule]) Expand(Intern(alt, -1), &tops, &accept);
  state_ = InternState(std::move(tops), accept);
}

int32_t GrammarMatcher::Intern(int32_t pos, int32_t parent) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
  auto [it, inserted] = node_ids_.emplace(key, static_cast<int32_t>(nodes_.size()));
  if (inserted) nodes_.push_back({pos, parent});
  return it->second;
}

// Closure of one node: follows rule references (pushing continuations) and
// completed alternatives (popping) until every stack's top is a byte class.
// Terminates because Grammar::Validate rejects left recursion; nodes already
// expanded in this epoch are skipped, which also deduplicates the result.
void GrammarMatcher::Expand(int32_t start, std::vector<int32_t>* tops, bool* accept) {
  const Grammar& g = g_->grammar();
  work_.clear();
  work_.push_back(start);
  while (!work_.empty()) {
    const int32_t n = work_.back();
    work_.pop_back();
    if (n < 0) {
      *accept = true;
      continue;
    }
    if (visited_.size() <= static_cast<size_t>(n)) visited_.resize(nodes_.size() * 2 + 16, 0);
    if (visited_[n] == epoch_) continue;
    visited_[n] = epoch_;
    const Node node = nodes_[n];
    const Grammar::Element e = g.elems[node.pos];
    if (e.kind == Kind::kClass) {
      if (tops->size() >= g_->max_stacks()) {
        OverBudget("a state of more than " + std::to_string(g_->max_stacks()) +
                   " parse stacks (the grammar is too ambiguous)");
        return;
      }
      tops->push_back(n);
    } else if (e.kind == Kind::kEnd) {
      work_.push_back(node.parent);
    } else {
      // Tail position: the continuation is the parent itself (keeps x* loops flat).
      const int32_t cont = g.elems[node.pos + 1].kind == Kind::kEnd ? node.parent : Intern(node.pos + 1, node.parent);
      for (int32_t alt : g.alts[e.arg]) work_.push_back(Intern(alt, cont));
    }
  }
}

int32_t GrammarMatcher::InternState(std::vector<int32_t> tops, bool accept) {
  std::sort(tops.begin(), tops.end());
  tops.erase(std::unique(tops.begin(), tops.end()), tops.end());
  std::string key(1, accept ? 'A' : 'a');
  key.append(reinterpret_cast<const char*>(tops.data()), tops.size() * sizeof(int32_t));
  auto [it, inserted] = state_ids_.emplace(std::move(key), static_cast<int32_t>(states_.size()));
  if (inserted) {
    State st;
    st.tops = std::move(tops);
    st.accept = accept;
    st.next.fill(kUnknown);
    states_.push_back(std::move(st));
  }
  return it->second;
}

int64_t GrammarMatcher::Now(BudgetClock clock) {
  if (clock == BudgetClock::kThreadCpu) {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
  }
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void GrammarMatcher::BeginCall() {
  deadline_ns_ = fixed_deadline_ns_
                     ? *fixed_deadline_ns_
                     : Now(clock_) + std::chrono::duration_cast<std::chrono::nanoseconds>(g_->max_mask_time()).count();
}

void GrammarMatcher::OverBudget(const std::string& why) {
  if (over_.empty()) over_ = why;
}

// kDead also when over budget (callers then stop: see over_).
int32_t GrammarMatcher::Step(int32_t state, uint8_t byte) {
  const int32_t known = states_[state].next[byte];
  if (known != kUnknown) return known;
  if (!over_.empty()) return kDead;
  if (Now(clock_) > deadline_ns_) {
    OverBudget("the work for one token went over its time budget (" + std::to_string(g_->max_mask_time().count()) +
               " ms a mask)");
    return kDead;
  }
  const Grammar& g = g_->grammar();
  if (++epoch_ == 0) {  // wrapped: forget every mark
    std::fill(visited_.begin(), visited_.end(), 0);
    epoch_ = 1;
  }
  scratch_.clear();
  bool accept = false;
  for (size_t i = 0; i < states_[state].tops.size(); ++i) {
    const Node node = nodes_[states_[state].tops[i]];
    if (!ByteSetHas(g.classes[g.elems[node.pos].arg], byte)) continue;
    Expand(Intern(node.pos + 1, node.parent), &scratch_, &accept);
    if (!over_.empty()) return kDead;  // not memoized: the state is incomplete
  }
  const int32_t next = scratch_.empty() && !accept ? kDead : InternState(scratch_, accept);
  states_[state].next[byte] = next;
  return next;
}

void GrammarMatcher::Restart() {
  // Copy the current stacks into a fresh node pool; forget every other state.
  std::vector<Node> old_nodes = std::move(nodes_);
  const State cur = states_[state_];
  nodes_.clear();
  node_ids_.clear();
  states_.clear();
  state_ids_.clear();
  std::fill(visited_.begin(), visited_.end(), 0);
  std::unordered_map<int32_t, int32_t> remap;
  std::vector<int32_t> chain, tops;
  for (int32_t top : cur.tops) {
    chain.clear();
    int32_t n = top;
    while (n >= 0 && !remap.count(n)) {
      chain.push_back(n);
      n = old_nodes[n].parent;
    }
    int32_t parent = n < 0 ? -1 : remap[n];
    for (size_t i = chain.size(); i-- > 0;) {
      parent = Intern(old_nodes[chain[i]].pos, parent);
      remap[chain[i]] = parent;
    }
    tops.push_back(parent);
  }
  state_ = InternState(std::move(tops), cur.accept);
}

bool GrammarMatcher::AcceptBytes(std::string_view bytes) {
  if (!over_.empty()) return false;
  BeginCall();
  int32_t s = state_;
  for (char c : bytes) {
    s = Step(s, static_cast<uint8_t>(c));
    if (s == kDead) return false;
  }
  state_ = s;
  // Bound memory: a long output keeps making new stacks (deeper nesting).
  if (nodes_.size() > (size_t{1} << 20) || states_.size() > (size_t{1} << 14)) Restart();
  return true;
}

bool GrammarMatcher::AcceptToken(int32_t token) {
  if (token < 0 || token >= g_->vocab().size()) return false;
  const auto& b = g_->vocab().bytes(token);
  if (!b || b->empty()) return false;
  return AcceptBytes(*b);
}

// Each stack as its positions top to bottom; stacks sorted, so equal states
// of different matchers (or of one matcher at different times) give equal keys.
std::string GrammarMatcher::StateKey() const {
  const State& st = states_[state_];
  std::vector<std::string> stacks;
  stacks.reserve(st.tops.size());
  for (int32_t top : st.tops) {
    std::string s;
    for (int32_t n = top; n >= 0; n = nodes_[n].parent) {
      s.append(reinterpret_cast<const char*>(&nodes_[n].pos), sizeof(int32_t));
    }
    stacks.push_back(std::move(s));
  }
  std::sort(stacks.begin(), stacks.end());
  std::string key(1, st.accept ? 'A' : 'a');
  for (const std::string& s : stacks) {
    const uint32_t len = static_cast<uint32_t>(s.size());
    key.append(reinterpret_cast<const char*>(&len), sizeof len);
    key += s;
  }
  return key;
}

void GrammarMatcher::Walk(int32_t trie_node, int32_t state, uint32_t* mask) {
  const auto& trie = g_->vocab().trie();
  const auto& tokens = g_->vocab().trie_tokens();
  for (int32_t c = trie[trie_node].first_child; c >= 0; c = trie[c].next_sibling) {
    const int32_t next = Step(state, trie[c].byte);
    if (next == kDead) {
      if (!over_.empty()) return;
      continue;
    }
    for (int32_t i = trie[c].tokens_begin; i < trie[c].tokens_end; ++i) {
      mask[tokens[i] >> 5] |= uint32_t{1} << (tokens[i] & 31);
    }
    if (!states_[next].tops.empty()) Walk(c, next, mask);
  }
}

// The table walk runs on a matcher whose only stack is the position itself,
// so reaching the bottom (state.accept) means popping into the unknown
// context. `escaped`: some shorter prefix of the current path reached it, so
// tokens below that are not matched inside the frame may still be allowed by
// the context (uncertain). Builds the pruned trie of uncertain tokens in
// preorder, dropping paths that lead to none.
void GrammarMatcher::TableWalk(int32_t trie_node, int32_t state, bool escaped, int depth, PositionTable* t,
                               std::vector<int32_t>* accepted) {
  const auto& trie = g_->vocab().trie();
  const auto& tokens = g_->vocab().trie_tokens();
  const bool esc = escaped || (state != kDead && states_[state].accept);
  for (int32_t c = trie[trie_node].first_child; c >= 0; c = trie[c].next_sibling) {
    const int32_t next = Step(state, trie[c].byte);
    if (!over_.empty()) return;
    const size_t at = t->uncertain.size();
    if (next == kDead) {
      // Dies inside the frame: uncertain if a prefix escaped (the whole
      // subtree, walked at mask time), else never allowed.
      if (esc) t->uncertain.push_back({static_cast<int32_t>(at + 1), c, static_cast<uint16_t>(depth), trie[c].byte, true});
      continue;
    }
    for (int32_t i = trie[c].tokens_begin; i < trie[c].tokens_end; ++i) accepted->push_back(tokens[i]);
    t->uncertain.push_back({0, c, static_cast<uint16_t>(depth), trie[c].byte, false});
    TableWalk(c, next, esc, depth + 1, t, accepted);
    if (t->uncertain.size() == at + 1) {
      t->uncertain.pop_back();  // nothing uncertain below
    } else {
      t->uncertain[at].end = static_cast<int32_t>(t->uncertain.size());
    }
  }
}

std::shared_ptr<const PositionTable> GrammarMatcher::BuildTable(std::shared_ptr<const CompiledGrammar> grammar,
                                                                const std::vector<int32_t>& frames,
                                                                BudgetClock clock, int64_t deadline_ns,
                                                                std::string* over) {
  GrammarMatcher local(grammar, frames);
  local.SetBudgetClock(clock);
  local.SetDeadline(deadline_ns);
  local.BeginCall();
  auto t = std::make_shared<PositionTable>();
  std::vector<int32_t> accepted;
  if (local.over_.empty()) local.TableWalk(0, local.state_, /*escaped=*/false, 1, t.get(), &accepted);
  if (!local.over_.empty()) {
    *over = local.over_;
    return nullptr;
  }
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the nodes' fields
  for (const PositionTable::Node& n : t->uncertain) {
    for (uint64_t v : {uint64_t(uint32_t(n.end)), uint64_t(uint32_t(n.trie_node)), uint64_t(n.depth) << 9 | uint64_t(n.byte) << 1 | n.whole}) {
      h = (h ^ v) * 1099511628211ull;
    }
  }
  t->uncertain_hash = h;
  const size_t words = static_cast<size_t>(grammar->mask_words());
  if (accepted.size() < words) {
    t->accept_list = std::move(accepted);
  } else {
    t->accept_bits.assign(words, 0);
    for (int32_t tok : accepted) t->accept_bits[tok >> 5] |= uint32_t{1} << (tok & 31);
  }
  return t;
}

// The uncertain tokens of a table against this matcher's real state.
void GrammarMatcher::UncertainWalk(const PositionTable& t, uint32_t* mask) {
  if (t.uncertain.empty()) return;
  if (depth_states_.size() < g_->vocab().max_token_bytes() + 1) depth_states_.resize(g_->vocab().max_token_bytes() + 1);
  depth_states_[0] = state_;
  const auto& nodes = t.uncertain;
  for (size_t i = 0; i < nodes.size();) {
    const PositionTable::Node& n = nodes[i];
    const int32_t next = Step(depth_states_[n.depth - 1], n.byte);
    if (next == kDead) {
      if (!over_.empty()) return;
      i = static_cast<size_t>(n.end);
      continue;
    }
    if (n.whole) {  // its tokens here, and a walk below
      const auto& trie = g_->vocab().trie();
      const auto& tokens = g_->vocab().trie_tokens();
      for (int32_t k = trie[n.trie_node].tokens_begin; k < trie[n.trie_node].tokens_end; ++k) {
        mask[tokens[k] >> 5] |= uint32_t{1} << (tokens[k] & 31);
      }
      if (!states_[next].tops.empty()) Walk(n.trie_node, next, mask);
      i = static_cast<size_t>(n.end);
      continue;
    }
    if (states_[next].tops.empty()) {
      i = static_cast<size_t>(n.end);
      continue;
    }
    depth_states_[n.depth] = next;
    ++i;
  }
}

bool GrammarMatcher::FillMaskFullWalk(std::span<uint32_t> mask) {
  std::fill(mask.begin(), mask.end(), 0);
  if (!over_.empty()) return false;
  if (states_[state_].tops.empty()) return true;
  BeginCall();
  std::vector<uint32_t> full(static_cast<size_t>(g_->mask_words()), 0);
  Walk(0, state_, full.data());
  if (!over_.empty()) return false;
  std::memcpy(mask.data(), full.data(), std::min(mask.size(), full.size()) * sizeof(uint32_t));
  return true;
}

bool GrammarMatcher::GreedyWalk(size_t max_bytes) {
  if (!over_.empty()) return false;
  BeginCall();
  const Grammar& g = g_->grammar();
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i < max_bytes && !states_[state_].tops.empty(); ++i) {
    bytes.clear();
    for (int32_t top : states_[state_].tops) {
      const ByteSet& set = g.classes[g.elems[nodes_[top].pos].arg];
      for (int b = 0; b < 256; ++b) {
        if (ByteSetHas(set, static_cast<uint8_t>(b))) {
          bytes.push_back(static_cast<uint8_t>(b));
          break;
        }
      }
    }
    std::sort(bytes.begin(), bytes.end());
    bytes.erase(std::unique(bytes.begin(), bytes.end()), bytes.end());
    int32_t best = kDead;
    for (uint8_t b : bytes) {
      const int32_t next = Step(state_, b);
      if (!over_.empty()) return false;
      if (next != kDead && (best == kDead || states_[next].tops.size() > states_[best].tops.size())) best = next;
    }
    if (best == kDead) break;
    state_ = best;
  }
  return true;
}

// A top's table key: the positions of its kTableFrames topmost frames.
void GrammarMatcher::TableKey(int32_t top, std::vector<int32_t>* key) const {
  key->clear();
  for (int32_t n = top; n >= 0 && key->size() < kTableFrames; n = nodes_[n].parent) key->push_back(nodes_[n].pos);
}

bool GrammarMatcher::FillMask(std::span<uint32_t> mask) {
  std::fill(mask.begin(), mask.end(), 0);
  if (!over_.empty()) return false;
  if (states_[state_].tops.empty()) return true;
  BeginCall();
  const std::string key = StateKey();
  if (auto cached = g_->FindMask(key)) {
    std::memcpy(mask.data(), cached->data(), std::min(mask.size(), cached->size()) * sizeof(uint32_t));
    return true;
  }
  auto fresh = std::make_shared<std::vector<uint32_t>>(static_cast<size_t>(g_->mask_words()), 0);
  uint32_t* out = fresh->data();
  std::vector<std::vector<int32_t>> keys(states_[state_].tops.size());
  for (size_t i = 0; i < keys.size(); ++i) TableKey(states_[state_].tops[i], &keys[i]);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::vector<std::shared_ptr<const PositionTable>> tables;
  tables.reserve(keys.size());
  for (const std::vector<int32_t>& k : keys) {
    std::shared_ptr<const PositionTable> t = g_->FindTable(k);
    if (t == nullptr) {
      if (g_->TablesFull()) break;
      t = BuildTable(g_, k, clock_, deadline_ns_, &over_);
      if (t == nullptr) return false;
      g_->StoreTable(k, t);
    }
    tables.push_back(std::move(t));
  }
  if (tables.size() < keys.size()) {
    Walk(0, state_, out);  // over the table budget: the whole trie
  } else {
    for (const auto& t : tables) {
      if (!t->accept_bits.empty()) {
        for (size_t w = 0; w < t->accept_bits.size(); ++w) out[w] |= t->accept_bits[w];
      } else {
        for (int32_t tok : t->accept_list) out[tok >> 5] |= uint32_t{1} << (tok & 31);
      }
    }
    for (size_t i = 0; i < tables.size(); ++i) {
      const PositionTable& t = *tables[i];
      bool same = false;  // equal tries from the same state add the same tokens
      for (size_t j = 0; j < i && !same; ++j) {
        same = tables[j]->uncertain_hash == t.uncertain_hash && SameUncertain(*tables[j], t);
      }
      if (!same) UncertainWalk(t, out);
    }
  }
  if (!over_.empty()) return false;
  std::memcpy(mask.data(), fresh->data(), std::min(mask.size(), fresh->size()) * sizeof(uint32_t));
  g_->StoreMask(key, std::move(fresh));
  return true;
}

}  // namespace tessera::structured

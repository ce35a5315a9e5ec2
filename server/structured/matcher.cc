#include "server/structured/matcher.h"

#include <algorithm>
#include <cstring>

namespace tessera::structured {
namespace {

constexpr size_t kTableSize = 1 << 14;  // power of two
constexpr size_t kMaxStacks = 4096;     // per state; more means a pathologically ambiguous grammar
constexpr size_t kMaskCacheBytes = size_t{8} << 20;

using Kind = Grammar::Kind;

}  // namespace

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocab> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {
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

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar) : g_(std::move(grammar)) {
  table_.assign(kTableSize, -1);
  levels_.resize(g_->vocab().max_token_bytes() + 1);
  ++epoch_;
  for (int32_t alt : g_->grammar().alts[g_->grammar().root]) Expand(Intern(alt, -1), &tops_, &accept_);
  Compact();
}

int32_t GrammarMatcher::Intern(int32_t pos, int32_t parent) {
  const uint32_t h = (static_cast<uint32_t>(pos) * 0x9E3779B1u) ^ (static_cast<uint32_t>(parent + 1) * 0x85EBCA77u);
  const size_t slot = (h ^ (h >> 15)) & (kTableSize - 1);
  const int32_t id = table_[slot];
  if (id >= 0 && static_cast<size_t>(id) < nodes_.size() && nodes_[id].pos == pos && nodes_[id].parent == parent) {
    return id;
  }
  nodes_.push_back({pos, parent});
  table_[slot] = static_cast<int32_t>(nodes_.size() - 1);
  return table_[slot];
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
      if (tops->size() < kMaxStacks) {
        tops->push_back(n);
      } else {
        overflowed_ = true;
      }
    } else if (e.kind == Kind::kEnd) {
      work_.push_back(node.parent);
    } else {
      // Tail position: the continuation is the parent itself (keeps x* loops flat).
      const int32_t cont = g.elems[node.pos + 1].kind == Kind::kEnd ? node.parent : Intern(node.pos + 1, node.parent);
      for (int32_t alt : g.alts[e.arg]) work_.push_back(Intern(alt, cont));
    }
  }
}

void GrammarMatcher::Advance(const std::vector<int32_t>& tops, uint8_t byte, std::vector<int32_t>* next,
                             bool* accept) {
  const Grammar& g = g_->grammar();
  if (++epoch_ == 0) {  // wrapped: forget every mark
    std::fill(visited_.begin(), visited_.end(), 0);
    epoch_ = 1;
  }
  next->clear();
  *accept = false;
  for (int32_t id : tops) {
    const Node node = nodes_[id];
    if (!ByteSetHas(g.classes[g.elems[node.pos].arg], byte)) continue;
    Expand(Intern(node.pos + 1, node.parent), next, accept);
  }
}

bool GrammarMatcher::AcceptBytes(std::string_view bytes) {
  if (bytes.empty()) return true;
  const size_t mark = nodes_.size();
  std::vector<int32_t> cur = tops_, next;
  bool accept = accept_;
  for (size_t i = 0; i < bytes.size(); ++i) {
    Advance(cur, static_cast<uint8_t>(bytes[i]), &next, &accept);
    if (next.empty() && (!accept || i + 1 < bytes.size())) {
      nodes_.resize(mark);
      return false;
    }
    cur.swap(next);
  }
  tops_ = std::move(cur);
  accept_ = accept;
  Compact();
  return true;
}

bool GrammarMatcher::AcceptToken(int32_t token) {
  if (token < 0 || token >= g_->vocab().size()) return false;
  const auto& b = g_->vocab().bytes(token);
  if (!b || b->empty()) return false;
  return AcceptBytes(*b);
}

void GrammarMatcher::Compact() {
  std::vector<Node> fresh;
  std::unordered_map<int64_t, int32_t> interned;
  std::unordered_map<int32_t, int32_t> remap;
  std::vector<int32_t> chain;
  for (int32_t& top : tops_) {
    chain.clear();
    int32_t n = top;
    while (n >= 0 && !remap.count(n)) {
      chain.push_back(n);
      n = nodes_[n].parent;
    }
    int32_t parent = n < 0 ? -1 : remap[n];
    for (size_t i = chain.size(); i-- > 0;) {
      const int32_t pos = nodes_[chain[i]].pos;
      const int64_t key = (static_cast<int64_t>(pos) << 32) | static_cast<uint32_t>(parent);
      auto [it, inserted] = interned.emplace(key, static_cast<int32_t>(fresh.size()));
      if (inserted) fresh.push_back({pos, parent});
      parent = it->second;
      remap[chain[i]] = parent;
    }
    top = parent;
  }
  std::sort(tops_.begin(), tops_.end());
  tops_.erase(std::unique(tops_.begin(), tops_.end()), tops_.end());
  nodes_ = std::move(fresh);
  std::fill(table_.begin(), table_.end(), -1);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& nd = nodes_[i];
    const uint32_t h = (static_cast<uint32_t>(nd.pos) * 0x9E3779B1u) ^ (static_cast<uint32_t>(nd.parent + 1) * 0x85EBCA77u);
    table_[(h ^ (h >> 15)) & (kTableSize - 1)] = static_cast<int32_t>(i);
  }
  std::fill(visited_.begin(), visited_.end(), 0);
}

// Each stack as its positions top to bottom; stacks sorted, so equal states
// of different matchers (or of one matcher at different times) give equal keys.
std::string GrammarMatcher::StateKey() const {
  std::vector<std::string> stacks;
  stacks.reserve(tops_.size());
  for (int32_t top : tops_) {
    std::string s;
    for (int32_t n = top; n >= 0; n = nodes_[n].parent) {
      s.append(reinterpret_cast<const char*>(&nodes_[n].pos), sizeof(int32_t));
    }
    stacks.push_back(std::move(s));
  }
  std::sort(stacks.begin(), stacks.end());
  std::string key(1, accept_ ? 'A' : 'a');
  for (const std::string& s : stacks) {
    const uint32_t len = static_cast<uint32_t>(s.size());
    key.append(reinterpret_cast<const char*>(&len), sizeof len);
    key += s;
  }
  return key;
}

void GrammarMatcher::Walk(int32_t trie_node, size_t depth, const std::vector<int32_t>& tops, uint32_t* mask) {
  const auto& trie = g_->vocab().trie();
  const auto& tokens = g_->vocab().trie_tokens();
  std::vector<int32_t>& next = levels_[depth];
  for (int32_t c = trie[trie_node].first_child; c >= 0; c = trie[c].next_sibling) {
    const size_t mark = nodes_.size();
    bool accept = false;
    Advance(tops, trie[c].byte, &next, &accept);
    if (!next.empty() || accept) {
      for (int32_t i = trie[c].tokens_begin; i < trie[c].tokens_end; ++i) {
        mask[tokens[i] >> 5] |= uint32_t{1} << (tokens[i] & 31);
      }
      if (!next.empty() && depth + 1 < levels_.size()) Walk(c, depth + 1, next, mask);
    }
    nodes_.resize(mark);
  }
}

void GrammarMatcher::FillMask(std::span<uint32_t> mask) {
  std::fill(mask.begin(), mask.end(), 0);
  if (tops_.empty()) return;
  const std::string key = StateKey();
  if (auto cached = g_->FindMask(key)) {
    std::memcpy(mask.data(), cached->data(), std::min(mask.size(), cached->size()) * sizeof(uint32_t));
    return;
  }
  auto fresh = std::make_shared<std::vector<uint32_t>>(static_cast<size_t>(g_->mask_words()), 0);
  Walk(0, 0, tops_, fresh->data());
  std::memcpy(mask.data(), fresh->data(), std::min(mask.size(), fresh->size()) * sizeof(uint32_t));
  g_->StoreMask(key, std::move(fresh));
}

}  // namespace tessera::structured

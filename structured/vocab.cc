#include "structured/vocab.h"

#include <algorithm>
#include <numeric>

#include "text/tokenizer.h"

namespace tessera::structured {

std::shared_ptr<const TokenVocab> TokenVocab::Create(std::vector<std::optional<std::string>> bytes) {
  auto v = std::make_shared<TokenVocab>();
  v->bytes_ = std::move(bytes);
  std::vector<int32_t> order;
  for (size_t t = 0; t < v->bytes_.size(); ++t) {
    if (v->bytes_[t] && !v->bytes_[t]->empty()) order.push_back(static_cast<int32_t>(t));
  }
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return *v->bytes_[a] < *v->bytes_[b] || (*v->bytes_[a] == *v->bytes_[b] && a < b); });
  v->trie_.emplace_back();
  std::vector<int32_t> path{0};        // node ids along the previous token's bytes
  std::vector<int32_t> last_child{-1};  // per node: its last child (siblings are appended in byte order)
  const std::string* prev = nullptr;
  for (int32_t t : order) {
    const std::string& s = *v->bytes_[t];
    v->max_len_ = std::max(v->max_len_, s.size());
    size_t lcp = 0;
    if (prev != nullptr) {
      while (lcp < s.size() && lcp < prev->size() && s[lcp] == (*prev)[lcp]) ++lcp;
    }
    path.resize(lcp + 1);
    for (size_t i = lcp; i < s.size(); ++i) {
      const int32_t parent = path.back();
      const int32_t id = static_cast<int32_t>(v->trie_.size());
      TrieNode n;
      n.byte = static_cast<uint8_t>(s[i]);
      v->trie_.push_back(n);
      last_child.push_back(-1);
      if (last_child[parent] < 0) {
        v->trie_[parent].first_child = id;
      } else {
        v->trie_[last_child[parent]].next_sibling = id;
      }
      last_child[parent] = id;
      path.push_back(id);
    }
    TrieNode& leaf = v->trie_[path.back()];
    if (leaf.tokens_end == leaf.tokens_begin) {
      leaf.tokens_begin = static_cast<int32_t>(v->trie_tokens_.size());
      leaf.tokens_end = leaf.tokens_begin;
    }
    v->trie_tokens_.push_back(t);
    ++leaf.tokens_end;
    prev = &s;
  }
  return v;
}

std::shared_ptr<const TokenVocab> TokenVocab::FromTokenizer(const text::Tokenizer& tokenizer, int64_t vocab_size) {
  std::vector<std::optional<std::string>> bytes(static_cast<size_t>(std::max<int64_t>(vocab_size, 0)));
  for (size_t t = 0; t < bytes.size(); ++t) bytes[t] = tokenizer.TokenBytes(static_cast<int32_t>(t));
  return Create(std::move(bytes));
}

}  // namespace tessera::structured

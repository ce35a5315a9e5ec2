#include "text/bpe_model.h"

#include <cstdio>
#include <mutex>
#include <queue>

#include "text/utf8.h"

namespace tessera::text {

StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const Json& j, const std::string& path) {
  ASSIGN_OR_RETURN(std::string type, GetType(j, path));
  if (type != "BPE") return Unsupported(path, type);
  std::unique_ptr<BpeModel> m(new BpeModel());
  auto vocab = j.find("vocab");
  if (vocab == j.end() || !vocab->is_object()) return InvalidArgument(path + ": missing object field 'vocab'");
  int32_t max_id = -1;
  m->vocab_.reserve(vocab->size());
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it->is_number_integer() || it->get<long long>() < 0 || it->get<long long>() > (1 << 30)) {
      return InvalidArgument(path + ".vocab['" + it.key() + "']: expected a non-negative integer id");
    }
    const auto id = static_cast<int32_t>(it->get<long long>());
    m->vocab_.emplace(it.key(), id);
    max_id = std::max(max_id, id);
  }
  m->id_to_token_.resize(static_cast<size_t>(max_id + 1));
  m->id_present_.assign(static_cast<size_t>(max_id + 1), 0);
  for (const auto& [tok, id] : m->vocab_) {
    m->id_to_token_[id] = tok;
    m->id_present_[id] = 1;
    size_t i = 0;
    if (!tok.empty() && IsValidUtf8(tok)) {
      const char32_t c = NextCodePoint(tok, &i);
      if (i == tok.size()) m->char_ids_[c] = id;
    }
  }

  constexpr char32_t kMetaspace = 0x2581;
  if (m->char_ids_.count(kMetaspace)) {
    m->split_at_metaspace_ = true;
    for (const auto& [tok, id] : m->vocab_) {
      if (!IsValidUtf8(tok)) continue;
      char32_t prev = 0;
      for (size_t i = 0; i < tok.size();) {
        const char32_t c = NextCodePoint(tok, &i);
        if (c == kMetaspace && prev != 0 && prev != kMetaspace) m->metaspace_blockers_.insert(prev);
        prev = c;
      }
    }
  }

  std::string s;
  RETURN_IF_ERROR(GetString(j, path, "continuing_subword_prefix", &s, false));
  if (!s.empty()) return Unimplemented(path + ".continuing_subword_prefix: non-empty values are not supported");
  s.clear();
  RETURN_IF_ERROR(GetString(j, path, "end_of_word_suffix", &s, false));
  if (!s.empty()) return Unimplemented(path + ".end_of_word_suffix: non-empty values are not supported");
  if (auto d = j.find("dropout"); d != j.end() && !d->is_null() && !(d->is_number() && d->get<double>() == 0.0)) {
    return Unimplemented(path + ".dropout: BPE dropout is not supported for inference");
  }
  RETURN_IF_ERROR(GetBool(j, path, "byte_fallback", &m->byte_fallback_));
  RETURN_IF_ERROR(GetBool(j, path, "fuse_unk", &m->fuse_unk_));
  RETURN_IF_ERROR(GetBool(j, path, "ignore_merges", &m->ignore_merges_));
  std::string unk;
  RETURN_IF_ERROR(GetString(j, path, "unk_token", &unk, false));
  if (!unk.empty()) {
    auto it = m->vocab_.find(unk);
    if (it == m->vocab_.end()) return InvalidArgument(path + ".unk_token: '" + unk + "' is not in the vocab");
    m->unk_id_ = it->second;
  }
  if (m->byte_fallback_) {
    m->byte_ids_.assign(256, -1);
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      if (auto it = m->vocab_.find(std::string_view(name)); it != m->vocab_.end()) m->byte_ids_[b] = it->second;
    }
  }

  auto merges = j.find("merges");
  if (merges == j.end() || !merges->is_array()) return InvalidArgument(path + ": missing array field 'merges'");
  m->merges_.reserve(merges->size());
  std::string left, right;
  for (size_t r = 0; r < merges->size(); ++r) {
    const Json& e = (*merges)[r];
    const std::string where = path + ".merges[" + std::to_string(r) + "]";
    if (e.is_string()) {
      const std::string& str = e.get_ref<const std::string&>();
      const size_t sp = str.find(' ');
      if (sp == std::string::npos) return InvalidArgument(where + ": expected \"left right\"");
      left = str.substr(0, sp);
      const size_t sp2 = str.find(' ', sp + 1);
      right = str.substr(sp + 1, sp2 == std::string::npos ? std::string::npos : sp2 - sp - 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      left = e[0].get<std::string>();
      right = e[1].get<std::string>();
    } else {
      return InvalidArgument(where + ": expected a string or a [left, right] pair");
    }
    auto a = m->vocab_.find(left), b = m->vocab_.find(right), c = m->vocab_.find(left + right);
    if (a == m->vocab_.end()) return InvalidArgument(where + ": token '" + left + "' is not in the vocab");
    if (b == m->vocab_.end()) return InvalidArgument(where + ": token '" + right + "' is not in the vocab");
    if (c == m->vocab_.end()) return InvalidArgument(where + ": merged token '" + left + right + "' is not in the vocab");
    // The first occurrence of a pair wins (lowest rank).
    m->merges_.emplace(PairKey(a->second, b->second), Merge{static_cast<int32_t>(r), c->second});
  }
  return m;
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !id_present_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::Encode(const std::vector<std::string>& pieces, std::vector<int32_t>* ids) const {
  const size_t first = ids->size();
  for (const std::string& p : pieces) {
    if (!p.empty()) EncodeWord(p, ids);
  }
  if (fuse_unk_ && unk_id_) {
    // Consecutive unknown tokens collapse into one.
    size_t w = first;
    for (size_t r = first; r < ids->size(); ++r) {
      if ((*ids)[r] == *unk_id_ && w > first && (*ids)[w - 1] == *unk_id_) continue;
      (*ids)[w++] = (*ids)[r];
    }
    ids->resize(w);
  }
}

void BpeModel::EncodeWord(std::string_view word, std::vector<int32_t>* ids) const {
  if (!split_at_metaspace_) {
    EncodeSegment(word, ids);
    return;
  }
  // Cut before each U+2581 ("\xE2\x96\x81") whose predecessor cannot merge with it.
  size_t start = 0;
  char32_t prev = 0;
  for (size_t i = 0; i < word.size();) {
    const size_t at = i;
    const char32_t c = NextCodePoint(word, &i);
    if (c == 0x2581 && at > start && prev != 0x2581 && !metaspace_blockers_.count(prev)) {
      EncodeSegment(word.substr(start, at - start), ids);
      start = at;
    }
    prev = c;
  }
  EncodeSegment(word.substr(start), ids);
}

void BpeModel::EncodeSegment(std::string_view word, std::vector<int32_t>* ids) const {
  if (ignore_merges_) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() < kMaxCachedWordBytes;
  if (cacheable) {
    std::shared_lock lock(cache_mu_);
    if (auto it = cache_.find(word); it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = ids->size();
  MergeWord(word, ids);
  if (cacheable) {
    std::unique_lock lock(cache_mu_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::string(word), std::vector<int32_t>(ids->begin() + static_cast<ptrdiff_t>(start), ids->end()));
  }
}

void BpeModel::AppendUnknown(std::string_view text, std::vector<int32_t>* ids) const {
  if (byte_fallback_) {
    bool all = true;
    for (char ch : text) all = all && byte_ids_[static_cast<uint8_t>(ch)] >= 0;
    if (all) {
      for (char ch : text) ids->push_back(byte_ids_[static_cast<uint8_t>(ch)]);
      return;
    }
  }
  if (unk_id_) ids->push_back(*unk_id_);
  // With neither byte fallback nor an unk token the text is dropped (as HF's
  // tokenizers would refuse it); byte-level vocabularies never get here.
}

void BpeModel::MergeWord(std::string_view word, std::vector<int32_t>* ids) const {
  struct Symbol {
    int32_t id;  // -1: not in vocab (never merges)
    int32_t prev, next;
    uint32_t begin, len;  // byte span in `word`; len == 0 once merged away
  };
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  for (size_t i = 0; i < word.size();) {
    const size_t b = i;
    const char32_t c = NextCodePoint(word, &i);
    auto it = char_ids_.find(c);
    const int32_t n = static_cast<int32_t>(sym.size());
    sym.push_back({it == char_ids_.end() ? -1 : it->second, n - 1, n + 1, static_cast<uint32_t>(b),
                   static_cast<uint32_t>(i - b)});
  }
  if (sym.empty()) return;
  sym.back().next = -1;

  struct Candidate {
    int32_t rank, pos, right, left_id, right_id, new_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t pos) {
    const int32_t r = sym[pos].next;
    if (r < 0 || sym[pos].id < 0 || sym[r].id < 0) return;
    auto it = merges_.find(PairKey(sym[pos].id, sym[r].id));
    if (it != merges_.end()) heap.push({it->second.rank, pos, r, sym[pos].id, sym[r].id, it->second.new_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& l = sym[c.pos];
    if (l.len == 0 || l.next != c.right || l.id != c.left_id) continue;
    Symbol& r = sym[c.right];
    if (r.len == 0 || r.id != c.right_id) continue;
    l.id = c.new_id;
    l.len += r.len;
    l.next = r.next;
    r.len = 0;
    if (l.next >= 0) sym[l.next].prev = c.pos;
    if (l.prev >= 0) push(l.prev);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    if (sym[i].id >= 0) {
      ids->push_back(sym[i].id);
    } else {
      AppendUnknown(word.substr(sym[i].begin, sym[i].len), ids);
    }
  }
}

}  // namespace tessera::text

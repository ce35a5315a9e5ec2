#include "structured/grammar.h"

#include <algorithm>
#include <cstdio>

namespace tessera::structured {
namespace {

int EncodeUtf8(uint32_t cp, uint8_t* out) {
  if (cp < 0x80) {
    out[0] = static_cast<uint8_t>(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

bool TimedOut(std::chrono::steady_clock::time_point deadline) { return std::chrono::steady_clock::now() > deadline; }

}  // namespace

void AppendUtf8(uint32_t cp, std::string* out) {
  uint8_t b[4];
  const int n = EncodeUtf8(cp, b);
  out->append(reinterpret_cast<const char*>(b), static_cast<size_t>(n));
}

std::vector<std::pair<uint32_t, uint32_t>> NormalizeRanges(std::vector<std::pair<uint32_t, uint32_t>> ranges,
                                                           bool negate) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (auto [lo, hi] : ranges) {
    if (lo > hi) continue;
    if (!merged.empty() && lo <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, hi);
    } else {
      merged.push_back({lo, hi});
    }
  }
  if (!negate) return merged;
  std::vector<std::pair<uint32_t, uint32_t>> out;
  uint32_t next = 0;
  for (auto [lo, hi] : merged) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return out;
}

std::vector<std::vector<std::pair<uint8_t, uint8_t>>> Utf8Sequences(uint32_t lo, uint32_t hi) {
  std::vector<std::vector<std::pair<uint8_t, uint8_t>>> out;
  hi = std::min<uint32_t>(hi, 0x10FFFF);
  std::vector<std::pair<uint32_t, uint32_t>> work;
  // Surrogates are not scalar values.
  if (lo < 0xD800 && hi >= 0xD800) {
    if (hi > 0xDFFF) work.push_back({0xE000, hi});
    hi = 0xD7FF;
  } else if (lo >= 0xD800 && lo <= 0xDFFF) {
    lo = 0xE000;
  }
  if (lo <= hi) work.push_back({lo, hi});
  while (!work.empty()) {
    auto [s, e] = work.back();
    work.pop_back();
    bool split = false;
    for (uint32_t max : {0x7Fu, 0x7FFu, 0xFFFFu}) {
      if (s <= max && max < e) {
        work.push_back({max + 1, e});
        work.push_back({s, max});
        split = true;
        break;
      }
    }
    if (split) continue;
    if (e <= 0x7F) {
      out.push_back({{static_cast<uint8_t>(s), static_cast<uint8_t>(e)}});
      continue;
    }
    for (int i = 1; i < 4 && !split; ++i) {
      const uint32_t m = (1u << (6 * i)) - 1;
      if ((s & ~m) != (e & ~m)) {
        if ((s & m) != 0) {
          work.push_back({(s | m) + 1, e});
          work.push_back({s, s | m});
          split = true;
        } else if ((e & m) != m) {
          work.push_back({e & ~m, e});
          work.push_back({s, (e & ~m) - 1});
          split = true;
        }
      }
    }
    if (split) continue;
    uint8_t a[4], b[4];
    const int n = EncodeUtf8(s, a);
    EncodeUtf8(e, b);
    std::vector<std::pair<uint8_t, uint8_t>> seq;
    for (int i = 0; i < n; ++i) seq.push_back({a[i], b[i]});
    out.push_back(std::move(seq));
  }
  return out;
}

int32_t GrammarBuilder::NewRule(std::string name) {
  rules_.emplace_back();
  names_.push_back(std::move(name));
  return static_cast<int32_t>(rules_.size() - 1);
}

Status GrammarBuilder::AddAlt(int32_t rule, std::vector<Grammar::Element> seq) {
  num_elements_ += static_cast<int64_t>(seq.size()) + 1;
  if (num_elements_ > limits_.max_elements) {
    return InvalidArgument("the grammar is too large (over " + std::to_string(limits_.max_elements) +
                           " elements after expanding repetitions)");
  }
  if (static_cast<int>(rules_.size()) > limits_.max_rules) {
    return InvalidArgument("the grammar has too many rules (over " + std::to_string(limits_.max_rules) + ")");
  }
  rules_[static_cast<size_t>(rule)].push_back(std::move(seq));
  return Status::Ok();
}

Grammar::Element GrammarBuilder::Class(const ByteSet& set) {
  for (size_t i = 0; i < classes_.size(); ++i) {
    if (classes_[i] == set) return {Grammar::Kind::kClass, static_cast<int32_t>(i)};
  }
  classes_.push_back(set);
  return {Grammar::Kind::kClass, static_cast<int32_t>(classes_.size() - 1)};
}

StatusOr<Grammar::Element> GrammarBuilder::CodePointClass(const std::vector<std::pair<uint32_t, uint32_t>>& ranges) {
  ByteSet ascii{};
  bool non_ascii = false;
  for (auto [lo, hi] : ranges) {
    if (lo < 0x80) ByteSetAdd(&ascii, static_cast<uint8_t>(lo), static_cast<uint8_t>(std::min<uint32_t>(hi, 0x7F)));
    if (hi >= 0x80) non_ascii = true;
  }
  if (!non_ascii) return Class(ascii);
  std::string key;
  for (auto [lo, hi] : ranges) key += std::to_string(lo) + "-" + std::to_string(hi) + ",";
  for (const auto& [k, e] : class_rules_) {
    if (k == key) return e;
  }
  const int32_t rule = NewRule("class" + std::to_string(class_rules_.size()));
  if (ascii != ByteSet{}) RETURN_IF_ERROR(AddAlt(rule, {Class(ascii)}));
  for (auto [lo, hi] : ranges) {
    if (hi < 0x80) continue;
    for (const auto& seq : Utf8Sequences(std::max<uint32_t>(lo, 0x80), hi)) {
      std::vector<Grammar::Element> elems;
      for (auto [a, b] : seq) {
        ByteSet s{};
        ByteSetAdd(&s, a, b);
        elems.push_back(Class(s));
      }
      RETURN_IF_ERROR(AddAlt(rule, std::move(elems)));
    }
  }
  const Grammar::Element e{Grammar::Kind::kRule, rule};
  if (class_rules_.size() < 256) class_rules_.push_back({key, e});
  return e;
}

StatusOr<Grammar> GrammarBuilder::Finish(int32_t root, std::chrono::steady_clock::time_point deadline) {
  // Drop alternatives that derive no string (an empty class, or a rule that
  // derives none): then every stack the matcher builds can be completed, so
  // a token the mask allows never leads into a dead end.
  std::vector<uint8_t> productive(rules_.size(), 0);
  auto alt_productive = [&](const std::vector<Grammar::Element>& alt) {
    for (const Grammar::Element& e : alt) {
      if (e.kind == Grammar::Kind::kClass && classes_[e.arg] == ByteSet{}) return false;
      if (e.kind == Grammar::Kind::kRule && (e.arg < 0 || static_cast<size_t>(e.arg) >= rules_.size() ||
                                             !productive[e.arg])) {
        return false;
      }
    }
    return true;
  };
  for (bool changed = true; changed;) {
    changed = false;
    if (std::chrono::steady_clock::now() > deadline) return InvalidArgument("the grammar took too long to compile");
    for (size_t r = 0; r < rules_.size(); ++r) {
      if (productive[r]) continue;
      for (const auto& alt : rules_[r]) {
        if (alt_productive(alt)) {
          productive[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  if (root < 0 || static_cast<size_t>(root) >= rules_.size() || !productive[root]) {
    return InvalidArgument("the grammar is unsatisfiable: its root derives no string");
  }
  for (auto& alts : rules_) {
    std::erase_if(alts, [&](const std::vector<Grammar::Element>& alt) { return !alt_productive(alt); });
  }
  Grammar g;
  g.classes = std::move(classes_);
  g.names = std::move(names_);
  g.root = root;
  g.alts.resize(rules_.size());
  for (size_t r = 0; r < rules_.size(); ++r) {
    for (auto& alt : rules_[r]) {
      g.alts[r].push_back(static_cast<int32_t>(g.elems.size()));
      g.elems.insert(g.elems.end(), alt.begin(), alt.end());
      g.elems.push_back({Grammar::Kind::kEnd, 0});
    }
  }
  rules_.clear();
  RETURN_IF_ERROR(g.Validate(deadline));
  return g;
}

Status Grammar::Validate(std::chrono::steady_clock::time_point deadline) const {
  const size_t n = alts.size();
  if (root < 0 || static_cast<size_t>(root) >= n) return InvalidArgument("the grammar has no root rule");
  for (const Element& e : elems) {
    if (e.kind == Kind::kRule && (e.arg < 0 || static_cast<size_t>(e.arg) >= n)) {
      return InvalidArgument("the grammar references an unknown rule");
    }
    if (e.kind == Kind::kClass && (e.arg < 0 || static_cast<size_t>(e.arg) >= classes.size())) {
      return InvalidArgument("the grammar references an unknown class");
    }
  }
  const auto timeout = [] { return InvalidArgument("the grammar took too long to check (compile time limit)"); };
  // Nullable and productive rules: fixpoints, each pass O(elements).
  std::vector<uint8_t> nullable(n, 0), productive(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    if (TimedOut(deadline)) return timeout();
    for (size_t r = 0; r < n; ++r) {
      for (int32_t start : alts[r]) {
        bool null_all = true, prod_all = true;
        for (int32_t p = start; elems[p].kind != Kind::kEnd; ++p) {
          const Element& e = elems[p];
          if (e.kind == Kind::kClass) {
            null_all = false;
            if (classes[e.arg] == ByteSet{}) prod_all = false;
          } else {
            null_all = null_all && nullable[e.arg];
            prod_all = prod_all && productive[e.arg];
          }
        }
        if (null_all && !nullable[r]) nullable[r] = 1, changed = true;
        if (prod_all && !productive[r]) productive[r] = 1, changed = true;
      }
    }
  }
  if (!productive[root]) return InvalidArgument("the grammar is unsatisfiable: its root derives no string");
  // Left recursion: a cycle in "rule A may start with rule B" (through nullable prefixes).
  std::vector<std::vector<int32_t>> first(n);
  for (size_t r = 0; r < n; ++r) {
    for (int32_t start : alts[r]) {
      for (int32_t p = start; elems[p].kind == Kind::kRule; ++p) {
        first[r].push_back(elems[p].arg);
        if (!nullable[elems[p].arg]) break;
      }
    }
  }
  std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the DFS path, 2 done
  for (size_t s = 0; s < n; ++s) {
    if (color[s]) continue;
    std::vector<std::pair<int32_t, size_t>> dfs{{static_cast<int32_t>(s), 0}};
    color[s] = 1;
    while (!dfs.empty()) {
      auto& [r, i] = dfs.back();
      if (i == first[r].size()) {
        color[r] = 2;
        dfs.pop_back();
        continue;
      }
      const int32_t next = first[r][i++];
      if (color[next] == 1) {
        return InvalidArgument("grammar rule '" + names[next] + "' is left recursive (not supported)");
      }
      if (color[next] == 0) {
        color[next] = 1;
        dfs.push_back({next, 0});
      }
    }
  }
  return Status::Ok();
}

std::string Grammar::ToGbnf() const {
  auto rule_name = [&](int32_t r) { return names[r] + "-" + std::to_string(r); };
  std::string out;
  for (size_t r = 0; r < alts.size(); ++r) {
    out += rule_name(static_cast<int32_t>(r)) + " ::=";
    for (size_t a = 0; a < alts[r].size(); ++a) {
      if (a > 0) out += " |";
      for (int32_t p = alts[r][a]; elems[p].kind != Kind::kEnd; ++p) {
        const Element& e = elems[p];
        if (e.kind == Kind::kRule) {
          out += " " + rule_name(e.arg);
          continue;
        }
        out += " [";
        for (int b = 0; b < 256;) {
          if (!ByteSetHas(classes[e.arg], static_cast<uint8_t>(b))) {
            ++b;
            continue;
          }
          int c = b;
          while (c + 1 < 256 && ByteSetHas(classes[e.arg], static_cast<uint8_t>(c + 1))) ++c;
          char buf[16];
          std::snprintf(buf, sizeof buf, "\\x%02X", b);
          out += buf;
          if (c > b) {
            std::snprintf(buf, sizeof buf, "-\\x%02X", c);
            out += buf;
          }
          b = c + 1;
        }
        out += "]";
      }
      if (elems[alts[r][a]].kind == Kind::kEnd) out += " \"\"";
    }
    out += "\n";
  }
  return out;
}

}  // namespace tessera::structured

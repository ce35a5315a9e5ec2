#include "bench/tessera_bench/dataset.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <numeric>
#include <sstream>

#include <nlohmann/json.hpp>

#include "text/tokenizer.h"

namespace tessera::bench {

namespace {

// Common English words; with a leading space each is one token in the GPT-2,
// Llama-3 and Qwen vocabularies.
constexpr const char* kWords[] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
    "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "she", "other", "its",
    "may", "these", "what", "them", "than", "some", "him", "time", "into", "only", "do", "could",
    "new", "about", "two", "first", "then", "also", "any", "like", "our", "my", "made", "over",
    "such", "after", "most", "very", "people", "years", "must", "many", "where", "way", "well",
    "should", "because", "each", "just", "those", "how", "work", "good", "world", "make", "life",
    "see", "water", "day", "long", "great", "little", "old", "house", "small", "down", "back",
    "use", "place", "year", "part", "city", "state", "under", "number", "high", "light", "hand",
    "name", "home", "school", "water", "right", "left", "open", "sea", "river", "book", "story",
    "music", "game", "food", "tree", "road", "fire", "night", "morning", "stone", "paper",
    "table", "window", "garden", "market", "friend", "family", "country", "question", "answer",
};
constexpr size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);

std::string WordPrompt(int64_t n, std::mt19937_64& rng) {
  std::uniform_int_distribution<size_t> pick(0, kNumWords - 1);
  std::string out;
  for (int64_t i = 0; i < n; ++i) {
    if (i) out.push_back(' ');
    out += kWords[pick(rng)];
  }
  return out;
}

}  // namespace

PromptBuilder::PromptBuilder(std::shared_ptr<const text::Tokenizer> tokenizer)
    : tokenizer_(std::move(tokenizer)) {
  if (!tokenizer_) return;
  for (int32_t id = 0; id < tokenizer_->vocab_size(); ++id) {
    if (!tokenizer_->IsSpecial(id) && tokenizer_->IdToToken(id) != nullptr) ordinary_ids_.push_back(id);
  }
}

std::string PromptBuilder::Make(int64_t tokens, std::mt19937_64& rng) const {
  tokens = std::max<int64_t>(tokens, 1);
  if (!tokenizer_ || ordinary_ids_.empty()) return WordPrompt(tokens, rng);
  std::uniform_int_distribution<size_t> pick(0, ordinary_ids_.size() - 1);
  std::vector<int32_t> ids;
  auto top_up = [&] {
    while (static_cast<int64_t>(ids.size()) < tokens) ids.push_back(ordinary_ids_[pick(rng)]);
  };
  top_up();
  std::string text;
  // Decoding and re-encoding merges or splits tokens; trim or top up until the
  // text re-encodes to exactly `tokens` ids (a few rounds suffice in practice).
  for (int round = 0; round < 16; ++round) {
    auto decoded = tokenizer_->Decode(ids, {.skip_special_tokens = true});
    text = decoded.ok() ? decoded.value() : WordPrompt(tokens, rng);
    std::vector<int32_t> enc = tokenizer_->Encode(text, /*add_special_tokens=*/false);
    if (static_cast<int64_t>(enc.size()) == tokens) return text;
    ids = std::move(enc);
    if (static_cast<int64_t>(ids.size()) > tokens) ids.resize(static_cast<size_t>(tokens));
    top_up();
  }
  return text;  // best effort: Count() reports its real length
}

int64_t PromptBuilder::Count(std::string_view text) const {
  if (tokenizer_) return static_cast<int64_t>(tokenizer_->Encode(text, false).size());
  return std::max<int64_t>(1, static_cast<int64_t>((text.size() + 3) / 4));  // ~4 bytes per token
}

int64_t SampleLength(int64_t len, double range_ratio, std::mt19937_64& rng) {
  if (range_ratio <= 0) return std::max<int64_t>(len, 1);
  int64_t lo = static_cast<int64_t>(std::floor(static_cast<double>(len) * (1.0 - range_ratio)));
  int64_t hi = static_cast<int64_t>(std::ceil(static_cast<double>(len) * (1.0 + range_ratio)));
  lo = std::max<int64_t>(lo, 1);
  hi = std::max(hi, lo);
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

std::vector<RequestSpec> RandomDataset(const RandomOptions& opt, const PromptBuilder& pb, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> prefixes;
  std::vector<int64_t> prefix_tokens;
  if (opt.prefix_len > 0) {
    for (int64_t g = 0; g < std::max<int64_t>(opt.num_prefix_groups, 1); ++g) {
      prefixes.push_back(pb.Make(opt.prefix_len, rng));
      prefix_tokens.push_back(pb.exact() ? pb.Count(prefixes.back()) : opt.prefix_len);
    }
  }
  std::vector<RequestSpec> out;
  out.reserve(static_cast<size_t>(std::max<int64_t>(opt.num, 0)));
  for (int64_t i = 0; i < opt.num; ++i) {
    RequestSpec r;
    const int64_t in = SampleLength(opt.input_len, opt.range_ratio, rng);
    r.max_tokens = SampleLength(opt.output_len, opt.range_ratio, rng);
    r.prompt = pb.Make(in, rng);
    r.prompt_tokens = pb.exact() ? pb.Count(r.prompt) : in;
    if (!prefixes.empty()) {
      r.group = static_cast<int>(i % static_cast<int64_t>(prefixes.size()));
      r.system = prefixes[static_cast<size_t>(r.group)];
      r.prompt_tokens += prefix_tokens[static_cast<size_t>(r.group)];
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<RequestSpec> MultiTurnDataset(const MultiTurnOptions& opt, const PromptBuilder& pb, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t turns = std::max<int64_t>(opt.turns, 1);
  const int64_t convs = (std::max<int64_t>(opt.num, 0) + turns - 1) / turns;
  std::vector<std::string> prefixes;
  if (opt.prefix_len > 0) {
    for (int64_t g = 0; g < std::max<int64_t>(opt.num_prefix_groups, 1); ++g) prefixes.push_back(pb.Make(opt.prefix_len, rng));
  }
  struct Conv {
    std::string system;
    int group = -1;
    std::vector<std::string> users, replies;
  };
  std::vector<Conv> cs(static_cast<size_t>(convs));
  for (int64_t c = 0; c < convs; ++c) {
    Conv& cv = cs[static_cast<size_t>(c)];
    if (!prefixes.empty()) {
      cv.group = static_cast<int>(c % static_cast<int64_t>(prefixes.size()));
      cv.system = prefixes[static_cast<size_t>(cv.group)];
    }
    for (int64_t t = 0; t < turns; ++t) {
      cv.users.push_back(pb.Make(opt.input_len, rng));
      cv.replies.push_back(pb.Make(opt.output_len, rng));
    }
  }
  std::vector<RequestSpec> out;
  for (int64_t t = 0; t < turns; ++t) {
    for (int64_t c = 0; c < convs && static_cast<int64_t>(out.size()) < opt.num; ++c) {
      const Conv& cv = cs[static_cast<size_t>(c)];
      RequestSpec r;
      r.system = cv.system;
      r.group = cv.group;
      for (int64_t k = 0; k < t; ++k) {
        r.history.push_back(cv.users[static_cast<size_t>(k)]);
        r.history.push_back(cv.replies[static_cast<size_t>(k)]);
      }
      r.prompt = cv.users[static_cast<size_t>(t)];
      r.max_tokens = opt.output_len;
      std::string all = r.system;
      for (const std::string& h : r.history) all += " " + h;
      all += " " + r.prompt;
      r.prompt_tokens = pb.exact() ? pb.Count(all) : (t * (opt.input_len + opt.output_len) + opt.input_len +
                                                      (r.system.empty() ? 0 : opt.prefix_len));
      out.push_back(std::move(r));
    }
  }
  return out;
}

StatusOr<std::vector<Conversation>> ParseShareGpt(std::string_view json, const std::string& name,
                                                  int64_t* skipped) {
  auto doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgument(name + ": not valid JSON");
  if (!doc.is_array()) return InvalidArgument(name + ": expected a JSON array of conversations");
  std::vector<Conversation> out;
  int64_t skip = 0;
  for (size_t i = 0; i < doc.size(); ++i) {
    const auto& e = doc[i];
    const std::string where = name + ": entry " + std::to_string(i);
    if (!e.is_object()) return InvalidArgument(where + ": not an object");
    auto conv = e.find("conversations");
    if (conv == e.end() || !conv->is_array()) {
      return InvalidArgument(where + ": 'conversations' is missing or not an array");
    }
    std::vector<std::pair<std::string, std::string>> turns;
    for (size_t t = 0; t < conv->size(); ++t) {
      const auto& turn = (*conv)[t];
      const std::string tw = where + ": conversations[" + std::to_string(t) + "]";
      if (!turn.is_object()) return InvalidArgument(tw + ": not an object");
      auto from = turn.find("from");
      auto value = turn.find("value");
      if (from == turn.end() || !from->is_string()) return InvalidArgument(tw + ": 'from' is missing or not a string");
      if (value == turn.end() || !value->is_string()) return InvalidArgument(tw + ": 'value' is missing or not a string");
      turns.emplace_back(from->get<std::string>(), value->get<std::string>());
    }
    bool found = false;
    for (size_t t = 0; t + 1 < turns.size(); ++t) {
      if (turns[t].first == "human" && turns[t + 1].first == "gpt" && !turns[t].second.empty() &&
          !turns[t + 1].second.empty()) {
        out.push_back({turns[t].second, turns[t + 1].second});
        found = true;
        break;
      }
      if (turns[t].first == "human") break;  // only the first human turn counts
    }
    if (!found) ++skip;
  }
  if (skipped) *skipped = skip;
  return out;
}

std::vector<RequestSpec> ShareGptDataset(const std::vector<Conversation>& convs, int64_t num,
                                         int64_t output_len_override, const PromptBuilder& pb,
                                         uint64_t seed) {
  std::vector<size_t> order(convs.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<RequestSpec> out;
  for (size_t k = 0; k < order.size() && static_cast<int64_t>(out.size()) < num; ++k) {
    const auto& c = convs[order[k]];
    RequestSpec r;
    r.prompt = c.prompt;
    r.prompt_tokens = pb.Count(c.prompt);
    r.max_tokens = output_len_override > 0 ? output_len_override : pb.Count(c.completion);
    out.push_back(std::move(r));
  }
  return out;
}

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// One CSV record (RFC 4180 quoting, no embedded newlines).
StatusOr<std::vector<std::string>> SplitCsv(std::string_view line, const std::string& where) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        out.back().push_back('"');
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        out.back().push_back(c);
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else {
      out.back().push_back(c);
    }
  }
  if (quoted) return InvalidArgument(where + ": unterminated quoted field");
  for (auto& f : out) f = std::string(Trim(f));
  return out;
}

constexpr const char* kTraceColumns[] = {"Timestamp", "Model", "Request tokens", "Response tokens",
                                         "Total tokens", "Log Type"};

}  // namespace

StatusOr<std::vector<TraceRow>> ParseBurstGptCsv(std::string_view csv, const std::string& name,
                                                 int64_t* skipped) {
  std::vector<TraceRow> rows;
  std::vector<int> col;  // index of each kTraceColumns entry in the header
  size_t num_fields = 0;
  int64_t skip = 0;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < csv.size()) {
    size_t end = csv.find('\n', pos);
    if (end == std::string_view::npos) end = csv.size();
    std::string_view line = Trim(csv.substr(pos, end - pos));
    pos = end + 1;
    ++line_no;
    if (line.empty()) continue;
    const std::string where = name + " line " + std::to_string(line_no);
    auto fields_or = SplitCsv(line, where);
    if (!fields_or.ok()) return fields_or.status();
    const auto& fields = fields_or.value();
    if (col.empty()) {  // header
      if (line_no == 1 && !line.empty() && static_cast<unsigned char>(line[0]) == 0xEF) {
        return InvalidArgument(where + ": byte-order mark before the header; save the CSV without a BOM");
      }
      for (const char* want : kTraceColumns) {
        auto it = std::find(fields.begin(), fields.end(), want);
        if (it == fields.end()) {
          return InvalidArgument(where + ": header lacks column '" + want +
                                 "' (BurstGPT header: Timestamp,Model,Request tokens,Response tokens,"
                                 "Total tokens,Log Type)");
        }
        col.push_back(static_cast<int>(it - fields.begin()));
      }
      num_fields = fields.size();
      continue;
    }
    if (fields.size() != num_fields) {
      return InvalidArgument(where + ": expected " + std::to_string(num_fields) + " fields, got " +
                             std::to_string(fields.size()));
    }
    auto field_error = [&](int k, const std::string& what) {
      return InvalidArgument(where + ", column " + std::to_string(col[static_cast<size_t>(k)] + 1) + " (" +
                             kTraceColumns[k] + "): '" + fields[static_cast<size_t>(col[static_cast<size_t>(k)])] +
                             "' " + what);
    };
    auto get_int = [&](int k, int64_t* v) -> Status {
      const std::string& f = fields[static_cast<size_t>(col[static_cast<size_t>(k)])];
      auto [p, ec] = std::from_chars(f.data(), f.data() + f.size(), *v);
      if (f.empty() || ec != std::errc() || p != f.data() + f.size() || *v < 0) {
        return field_error(k, "is not a non-negative integer");
      }
      return Status::Ok();
    };
    TraceRow row;
    {
      const std::string& f = fields[static_cast<size_t>(col[0])];
      char* endp = nullptr;
      row.timestamp = f.empty() ? NAN : std::strtod(f.c_str(), &endp);
      if (f.empty() || endp != f.c_str() + f.size() || !std::isfinite(row.timestamp) || row.timestamp < 0) {
        return field_error(0, "is not a non-negative number of seconds");
      }
      if (!rows.empty() && row.timestamp < rows.back().timestamp) {
        return field_error(0, "is earlier than the previous row (the trace must be sorted by time)");
      }
    }
    if (Status s = get_int(2, &row.request_tokens); !s.ok()) return s;
    if (Status s = get_int(3, &row.response_tokens); !s.ok()) return s;
    int64_t total = 0;
    if (Status s = get_int(4, &total); !s.ok()) return s;
    if (row.response_tokens == 0 || row.request_tokens == 0) {  // failed or empty request
      ++skip;
      continue;
    }
    rows.push_back(row);
  }
  if (col.empty()) return InvalidArgument(name + ": empty file (no header)");
  if (skipped) *skipped = skip;
  return rows;
}

std::vector<RequestSpec> TraceDataset(const std::vector<TraceRow>& rows, const PromptBuilder& pb,
                                      uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<RequestSpec> out;
  out.reserve(rows.size());
  for (const auto& row : rows) {
    RequestSpec r;
    r.prompt = pb.Make(row.request_tokens, rng);
    r.prompt_tokens = pb.exact() ? pb.Count(r.prompt) : row.request_tokens;
    r.max_tokens = row.response_tokens;
    out.push_back(std::move(r));
  }
  return out;
}

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace tessera::bench

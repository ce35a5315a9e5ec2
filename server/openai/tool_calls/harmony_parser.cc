#include "server/openai/tool_calls/harmony_parser.h"

#include <algorithm>
#include <array>
#include <optional>

namespace tessera::openai::tools {
namespace {

constexpr size_t npos = std::string_view::npos;
constexpr std::string_view kEnd = "<|end|>";
constexpr std::string_view kFunctions = "functions.";

// What ends a header: its <|message|>, or (malformed) any token that ends or
// starts a message.
constexpr std::array<std::string_view, 5> kHeaderStops = {kHarmonyMessage, kHarmonyStart, kEnd, kHarmonyCall,
                                                          kHarmonyReturn};
// What ends a body: an end token, or the next message's <|start|> (an
// unterminated message; the <|start|> is not consumed).
constexpr std::array<std::string_view, 4> kBodyStops = {kEnd, kHarmonyCall, kHarmonyReturn, kHarmonyStart};

struct Found {
  size_t at = npos;
  std::string_view tag;
};

template <size_t N>
Found FindFirst(std::string_view text, const std::array<std::string_view, N>& tags, size_t from) {
  Found f;
  for (std::string_view tag : tags) {
    const size_t at = text.find(tag, from);
    if (at < f.at) f = {at, tag};
  }
  return f;
}

// Bytes at the end of `text` that may be the start of one of `tags`.
template <size_t N>
size_t PartialSuffix(std::string_view text, const std::array<std::string_view, N>& tags) {
  size_t keep = 0;
  for (std::string_view tag : tags) keep = std::max(keep, PartialTagSuffix(text, tag));
  return keep;
}

struct Header {
  std::string role, channel, recipient;
};

// Words of a header, split at whitespace and at special tokens: the first
// word (before any token) is the role, the word after <|channel|> the channel,
// a word "to=X" the recipient wherever it stands; content types (after
// <|constrain|> or bare, as "commentary json") do not route.
Header ParseHeader(std::string_view h) {
  Header r;
  bool first = true, after_channel = false;
  size_t i = 0;
  while (i < h.size()) {
    if (IsJsonSpace(h[i])) {
      ++i;
      continue;
    }
    if (h.substr(i).starts_with("<|")) {
      const size_t close = h.find("|>", i + 2);
      const size_t e = close == npos ? h.size() : close + 2;
      after_channel = h.substr(i, e - i) == kHarmonyChannel;
      first = false;
      i = e;
      continue;
    }
    size_t j = i;
    while (j < h.size() && !IsJsonSpace(h[j]) && !h.substr(j).starts_with("<|")) ++j;
    const std::string_view word = h.substr(i, j - i);
    if (word.starts_with("to=")) {
      r.recipient = word.substr(3);
    } else if (first) {
      r.role = word;
    } else if (after_channel && r.channel.empty()) {
      r.channel = word;
    }
    first = false;
    after_channel = false;
    i = j;
  }
  return r;
}

}  // namespace

std::string HarmonyOpenHeader(std::string_view prompt) {
  const size_t start = prompt.rfind(kHarmonyStart);
  if (start == npos) return "";
  std::string_view tail = prompt.substr(start);
  for (std::string_view end : {kEnd, kHarmonyCall, kHarmonyReturn}) {
    if (tail.find(end) != npos) return "";
  }
  if (const size_t m = tail.find(kHarmonyMessage); m != npos) tail = tail.substr(0, m + kHarmonyMessage.size());
  return std::string(tail);
}

HarmonyParser::HarmonyParser(std::string_view open_header, bool parse_tools) : parse_tools_(parse_tools) {
  if (!open_header.starts_with(kHarmonyStart)) return;  // between messages
  open_header.remove_prefix(kHarmonyStart.size());
  state_ = State::kHeader;
  if (open_header.ends_with(kHarmonyMessage)) {
    header_ = open_header.substr(0, open_header.size() - kHarmonyMessage.size());
    OpenBody();
  } else {
    header_ = open_header;
  }
}

void HarmonyParser::Feed(std::string_view text, HarmonyOutput* out) {
  buf_.append(text);
  Run(/*final=*/false, out);
}

void HarmonyParser::Finish(HarmonyOutput* out) {
  Run(/*final=*/true, out);
  switch (state_) {
    case State::kOutside: out->text.content += buf_; break;
    case State::kHeader: out->text.content += markup_ + buf_; break;  // an unfinished header: verbatim
    case State::kBody:
      // A call's complete JSON body still counts: the stop token <|call|> is not in the text.
      CloseBody(buf_, "", out);
      break;
  }
  buf_.clear();
  Reset();
}

void HarmonyParser::OpenBody() {
  const Header h = ParseHeader(header_);
  state_ = State::kBody;
  search_from_ = 0;
  if (!h.role.empty() && h.role != "assistant") {
    route_ = Route::kVerbatim;
  } else if (!h.recipient.empty()) {
    const bool function = h.recipient.starts_with(kFunctions) && h.recipient.size() > kFunctions.size();
    route_ = parse_tools_ && function ? Route::kCall : Route::kVerbatim;
    call_name_ = h.recipient.substr(kFunctions.size() < h.recipient.size() ? kFunctions.size() : 0);
  } else if (h.channel == "analysis") {
    route_ = Route::kReasoning;
  } else {
    route_ = Route::kContent;
  }
}

void HarmonyParser::Emit(std::string_view body, HarmonyOutput* out) {
  switch (route_) {
    case Route::kReasoning: out->reasoning.append(body); break;
    case Route::kContent:
    case Route::kVerbatim: out->text.content.append(body); break;
    case Route::kCall: break;  // held until the body ends
  }
}

void HarmonyParser::CloseBody(std::string_view body, std::string_view end, HarmonyOutput* out) {
  if (route_ == Route::kCall) {
    std::optional<nlohmann::ordered_json> args = ParseJsonText(body);
    if (args && args->is_object()) {
      out->text.calls.push_back({call_name_, JsonText(*args)});
    } else {
      out->text.content += markup_;
      out->text.content.append(body);
      out->text.content.append(end);
    }
  } else {
    Emit(body, out);
    if (route_ == Route::kVerbatim) out->text.content.append(end);
  }
  Reset();
}

void HarmonyParser::Reset() {
  state_ = State::kOutside;
  route_ = Route::kContent;
  search_from_ = 0;
  markup_.clear();
  header_.clear();
}

void HarmonyParser::Run(bool final, HarmonyOutput* out) {
  for (;;) {
    switch (state_) {
      case State::kOutside: {
        const size_t at = buf_.find(kHarmonyStart);
        if (at == npos) {
          const size_t keep = final ? 0 : PartialTagSuffix(buf_, kHarmonyStart);
          out->text.content.append(buf_, 0, buf_.size() - keep);
          buf_.erase(0, buf_.size() - keep);
          return;
        }
        out->text.content.append(buf_, 0, at);
        buf_.erase(0, at + kHarmonyStart.size());
        state_ = State::kHeader;
        markup_ = kHarmonyStart;
        search_from_ = 0;
        break;
      }
      case State::kHeader: {
        const Found f = FindFirst(buf_, kHeaderStops, search_from_);
        if (f.at == npos) {
          search_from_ = buf_.size() - PartialSuffix(buf_, kHeaderStops);
          return;  // headers are held whole (Finish releases an unfinished one verbatim)
        }
        if (f.tag != kHarmonyMessage) {  // malformed: the header's own text is content, the token is read outside
          out->text.content += markup_;
          out->text.content.append(buf_, 0, f.at);
          buf_.erase(0, f.at);
          Reset();
          break;
        }
        header_.append(buf_, 0, f.at);
        markup_.append(buf_, 0, f.at + kHarmonyMessage.size());
        buf_.erase(0, f.at + kHarmonyMessage.size());
        OpenBody();
        if (route_ == Route::kVerbatim) {
          out->text.content += markup_;
          markup_.clear();
        }
        break;
      }
      case State::kBody: {
        const Found f = FindFirst(buf_, kBodyStops, route_ == Route::kCall ? search_from_ : 0);
        if (f.at == npos) {
          const size_t keep = PartialSuffix(buf_, kBodyStops);
          if (route_ == Route::kCall) {
            search_from_ = buf_.size() - keep;
            return;
          }
          if (final) return;  // Finish releases the rest
          Emit(std::string_view(buf_).substr(0, buf_.size() - keep), out);
          buf_.erase(0, buf_.size() - keep);
          return;
        }
        // Cut short by the next <|start|>: what came before is the whole body, the <|start|> stays.
        const std::string_view end = f.tag == kHarmonyStart ? std::string_view() : f.tag;
        const std::string body = buf_.substr(0, f.at);
        buf_.erase(0, f.at + end.size());
        CloseBody(body, end, out);
        break;
      }
    }
  }
}

}  // namespace tessera::openai::tools

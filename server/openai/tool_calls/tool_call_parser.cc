#include "server/openai/tool_calls/tool_call_parser.h"

#include <utility>

#include "server/openai/tool_calls/deepseek_v3_parser.h"
#include "server/openai/tool_calls/harmony_parser.h"
#include "text/chat_template.h"

namespace tessera::openai::tools {
namespace {

using Json = nlohmann::ordered_json;
constexpr size_t npos = std::string_view::npos;

// ---- hermes ------------------------------------------------------------------

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";

class HermesParser : public ToolCallParser {
 public:
  void Feed(std::string_view text, ParsedText* out) override {
    buf_.append(text);
    for (;;) {
      if (!in_call_) {
        const size_t at = buf_.find(kHermesOpen);
        if (at == npos) {
          const size_t keep = PartialTagSuffix(buf_, kHermesOpen);
          sink_.Text(std::string_view(buf_).substr(0, buf_.size() - keep), out);
          buf_.erase(0, buf_.size() - keep);
          return;
        }
        sink_.Text(std::string_view(buf_).substr(0, at), out);
        buf_.erase(0, at + kHermesOpen.size());
        in_call_ = true;
        close_search_from_ = 0;
      } else {
        const size_t at = buf_.find(kHermesClose, close_search_from_);
        if (at == npos) {
          // Resume the search where the tag could still begin (linear overall).
          close_search_from_ = buf_.size() - PartialTagSuffix(buf_, kHermesClose);
          return;
        }
        EndCall(std::string_view(buf_).substr(0, at), /*closed=*/true, out);
        buf_.erase(0, at + kHermesClose.size());
        in_call_ = false;
      }
    }
  }

  void Finish(ParsedText* out) override {
    if (in_call_) {
      // Output ended inside a call (e.g. a stop string was "</tool_call>"): a
      // complete JSON call still counts.
      EndCall(buf_, /*closed=*/false, out);
    } else {
      sink_.Text(buf_, out);
    }
    buf_.clear();
    in_call_ = false;
    sink_.Finish(out);
  }

 private:
  void EndCall(std::string_view body, bool closed, ParsedText* out) {
    if (std::optional<ToolCall> call = ParseToolCallObject(body)) {
      sink_.Call(std::move(*call), out);
      return;
    }
    std::string raw(kHermesOpen);
    raw.append(body);
    if (closed) raw.append(kHermesClose);
    sink_.Text(raw, out);
  }

  std::string buf_;  // not yet released: a partial tag, or the open call's body
  bool in_call_ = false;
  size_t close_search_from_ = 0;
  CallTextSink sink_;
};

// ---- llama3_json ---------------------------------------------------------------

constexpr std::string_view kPythonTag = "<|python_tag|>";

// The whole output is either calls (JSON objects, optionally after
// <|python_tag|>, separated by ';' or whitespace) or text; once something
// that is not a valid call appears, the rest is text.
class Llama3JsonParser : public ToolCallParser {
 public:
  void Feed(std::string_view text, ParsedText* out) override {
    buf_.append(text);
    if (state_ == State::kStart) Decide(/*final=*/false);
    if (state_ == State::kCalls) ScanCalls(out);
    if (state_ == State::kText) {
      sink_.Text(buf_, out);
      buf_.clear();
    }
  }

  void Finish(ParsedText* out) override {
    if (state_ == State::kStart) Decide(/*final=*/true);
    if (state_ == State::kCalls) ScanCalls(out);
    sink_.Text(buf_, out);  // an unfinished object, or text
    buf_.clear();
    state_ = State::kText;
    sink_.Finish(out);
  }

 private:
  enum class State { kStart, kCalls, kText };

  // Calls or text? Decided by the first non-whitespace bytes.
  void Decide(bool final) {
    const size_t at = SkipSpace(buf_);
    if (at == buf_.size() && !final) return;
    std::string_view rest = std::string_view(buf_).substr(at);
    if (rest.starts_with(kPythonTag)) {
      buf_.erase(0, at + kPythonTag.size());
      state_ = State::kCalls;
    } else if (rest.starts_with("{")) {
      buf_.erase(0, at);
      state_ = State::kCalls;
    } else if (!final && !rest.empty() && kPythonTag.starts_with(rest)) {
      return;  // maybe the tag
    } else {
      state_ = State::kText;
    }
  }

  void ScanCalls(ParsedText* out) {
    for (;;) {
      size_t at = 0;
      while (at < buf_.size() && (IsJsonSpace(buf_[at]) || buf_[at] == ';')) ++at;
      if (at == buf_.size()) {
        buf_.clear();
        return;
      }
      if (at > 0) {
        buf_.erase(0, at);
        scanner_.Reset();
      }
      if (buf_[0] != '{') {
        state_ = State::kText;
        return;
      }
      const size_t end = scanner_.Advance(buf_);
      if (end == npos) return;
      std::optional<ToolCall> call = ParseToolCallObject(std::string_view(buf_).substr(0, end));
      if (!call) {
        state_ = State::kText;
        return;
      }
      sink_.Call(std::move(*call), out);
      buf_.erase(0, end);
      scanner_.Reset();
    }
  }

  State state_ = State::kStart;
  std::string buf_;
  JsonValueScanner scanner_;
  CallTextSink sink_;
};

// ---- mistral -------------------------------------------------------------------

constexpr std::string_view kToolCallsTag = "[TOOL_CALLS]";
constexpr std::string_view kArgsTag = "[ARGS]";
constexpr size_t kMaxNameBytes = 256;  // longer "names" are text

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
         c == '.';
}

// [TOOL_CALLS] then either a JSON array of calls (or one call object), or
// name[ARGS]{...} (newer tokenizers), possibly repeated with more tags.
class MistralParser : public RescanningToolCallParser {
 private:
  void ReleaseHeld(ParsedText* out) override {
    if (in_calls_) {
      sink_.Text(std::string(kToolCallsTag) + buf_, out);
    } else {
      sink_.Text(buf_, out);
    }
    in_calls_ = false;
  }

  void Run(bool final, ParsedText* out) override {
    for (;;) {
      if (!in_calls_) {
        const size_t at = buf_.find(kToolCallsTag);
        if (at == npos) {
          const size_t keep = final ? 0 : PartialTagSuffix(buf_, kToolCallsTag);
          sink_.Text(std::string_view(buf_).substr(0, buf_.size() - keep), out);
          buf_.erase(0, buf_.size() - keep);
          return;
        }
        sink_.Text(std::string_view(buf_).substr(0, at), out);
        buf_.erase(0, at + kToolCallsTag.size());
        in_calls_ = true;
        scanner_.Reset();
      }
      // buf_ holds what follows the tag; it is released as text if malformed.
      const size_t start = SkipSpace(buf_);
      if (start == buf_.size()) return;
      const char c = buf_[start];
      size_t end = npos;
      std::vector<ToolCall> calls;
      bool valid = false;
      if (c == '[' || c == '{') {
        if (start > 0) {
          buf_.erase(0, start);
          scanner_.Reset();
        }
        end = scanner_.Advance(buf_);
        if (end == npos) return;
        valid = ParseCalls(std::string_view(buf_).substr(0, end), &calls);
      } else {
        size_t n = start;
        while (n < buf_.size() && n - start <= kMaxNameBytes && IsNameChar(buf_[n])) ++n;
        std::string_view after = std::string_view(buf_).substr(n);
        if (n - start > kMaxNameBytes) {
          // not a function name: fall through as text (and no rescans of a long run)
        } else if (n > start && after.starts_with(kArgsTag)) {
          const size_t obj = SkipSpace(buf_, n + kArgsTag.size());
          if (obj == buf_.size()) return;
          if (buf_[obj] == '{') {
            if (args_at_ != obj) {
              args_at_ = obj;
              scanner_.Reset();
            }
            const size_t len = scanner_.Advance(std::string_view(buf_).substr(obj));
            if (len == npos) return;
            end = obj + len;
            std::optional<Json> args = ParseJsonText(std::string_view(buf_).substr(obj, len));
            if (args && args->is_object()) {
              calls.push_back({buf_.substr(start, n - start), JsonText(*args)});
              valid = true;
            }
          }
        } else if (n > start && n == buf_.size()) {
          return;  // the name may go on
        } else if (n > start && kArgsTag.starts_with(after)) {
          return;  // maybe [ARGS]
        }
      }
      args_at_ = npos;
      if (!valid) {  // not a call: the tag and what follows are text
        sink_.Text(kToolCallsTag, out);
        in_calls_ = false;
        continue;
      }
      for (ToolCall& call : calls) sink_.Call(std::move(call), out);
      buf_.erase(0, end);
      in_calls_ = false;
    }
  }

  static bool ParseCalls(std::string_view json, std::vector<ToolCall>* calls) {
    std::optional<Json> j = ParseJsonText(json);
    if (!j) return false;
    if (j->is_object()) *j = Json::array({std::move(*j)});
    if (j->empty()) return false;
    for (const Json& e : *j) {
      std::optional<ToolCall> call = ToolCallFromJson(e);
      if (!call) return false;
      calls->push_back(std::move(*call));
    }
    return true;
  }

  bool in_calls_ = false;
  size_t args_at_ = npos;  // where the scanner's [ARGS] object starts in buf_
  JsonValueScanner scanner_;
};

// ---- forced formats (tool_choice required / named) -----------------------------

// The output is one JSON value; text after it (none under the grammar) is
// content. An unfinished value is content too.
class ForcedParser : public ToolCallParser {
 public:
  explicit ForcedParser(std::string function_name) : function_name_(std::move(function_name)) {}

  void Feed(std::string_view text, ParsedText* out) override {
    if (done_) return sink_.Text(text, out);
    if (buf_.empty()) text.remove_prefix(SkipSpace(text));  // whitespace before the value is dropped
    if (text.empty()) return;
    const char open = function_name_.empty() ? '[' : '{';
    if (buf_.empty() && text[0] != open) {
      done_ = true;
      sink_.Text(text, out);
      return;
    }
    buf_.append(text);
    const size_t end = scanner_.Advance(buf_);
    if (end == npos) return;
    done_ = true;
    std::vector<ToolCall> calls;
    if (Parse(std::string_view(buf_).substr(0, end), &calls)) {
      for (ToolCall& c : calls) sink_.Call(std::move(c), out);
      sink_.Text(std::string_view(buf_).substr(end), out);
    } else {
      sink_.Text(buf_, out);
    }
    buf_.clear();
  }

  void Finish(ParsedText* out) override {
    sink_.Text(buf_, out);
    buf_.clear();
    done_ = true;
    sink_.Finish(out);
  }

 private:
  bool Parse(std::string_view json, std::vector<ToolCall>* calls) const {
    std::optional<Json> j = ParseJsonText(json);
    if (!j) return false;
    if (!function_name_.empty()) {
      if (!j->is_object()) return false;
      calls->push_back({function_name_, JsonText(*j)});
      return true;
    }
    if (!j->is_array() || j->empty()) return false;
    for (const Json& e : *j) {
      std::optional<ToolCall> call = ToolCallFromJson(e);
      if (!call) return false;
      calls->push_back(std::move(*call));
    }
    return true;
  }

  std::string function_name_;  // "" : required (an array of calls)
  std::string buf_;
  bool done_ = false;
  JsonValueScanner scanner_;
  CallTextSink sink_;
};

}  // namespace

StatusOr<ToolParserKind> ToolParserFromName(std::string_view name) {
  if (name == "hermes") return ToolParserKind::kHermes;
  if (name == "llama3_json") return ToolParserKind::kLlama3Json;
  if (name == "mistral") return ToolParserKind::kMistral;
  if (name == "openai") return ToolParserKind::kOpenAI;
  if (name == "deepseek_v3") return ToolParserKind::kDeepSeekV3;
  return InvalidArgument("unknown tool-call parser '" + std::string(name.substr(0, 64)) +
                         "' (known: hermes, llama3_json, mistral, openai, deepseek_v3)");
}

std::string_view ToolParserName(ToolParserKind kind) {
  switch (kind) {
    case ToolParserKind::kHermes: return "hermes";
    case ToolParserKind::kLlama3Json: return "llama3_json";
    case ToolParserKind::kMistral: return "mistral";
    case ToolParserKind::kOpenAI: return "openai";
    case ToolParserKind::kDeepSeekV3: return "deepseek_v3";
    case ToolParserKind::kNone: break;
  }
  return "";
}

ToolParserKind DetectToolParser(const text::ChatTemplate& t) {
  if (t.SourceMentions(kHarmonyChannel)) return ToolParserKind::kOpenAI;
  if (t.SourceMentions("<｜tool▁calls▁begin｜>")) return ToolParserKind::kDeepSeekV3;
  if (t.SourceMentions(kHermesOpen)) return ToolParserKind::kHermes;
  if (t.SourceMentions(kToolCallsTag)) return ToolParserKind::kMistral;
  if (t.SourceMentions(kPythonTag) || t.SourceMentions("respond with a JSON for a function call")) {
    return ToolParserKind::kLlama3Json;
  }
  return ToolParserKind::kNone;
}

std::unique_ptr<ToolCallParser> MakeToolCallParser(ToolParserKind kind) {
  switch (kind) {
    case ToolParserKind::kHermes: return std::make_unique<HermesParser>();
    case ToolParserKind::kLlama3Json: return std::make_unique<Llama3JsonParser>();
    case ToolParserKind::kMistral: return std::make_unique<MistralParser>();
    case ToolParserKind::kDeepSeekV3: return MakeDeepSeekV3ToolCallParser();
    case ToolParserKind::kOpenAI:  // HarmonyParser
    case ToolParserKind::kNone: break;
  }
  return nullptr;
}

std::unique_ptr<ToolCallParser> MakeRequiredToolCallParser() { return std::make_unique<ForcedParser>(""); }

std::unique_ptr<ToolCallParser> MakeNamedToolCallParser(std::string function_name) {
  if (function_name.empty()) return nullptr;
  return std::make_unique<ForcedParser>(std::move(function_name));
}

// ---- RescanningToolCallParser -----------------------------------------------------

void RescanningToolCallParser::Feed(std::string_view text, ParsedText* out) {
  buf_.append(text);
  Run(/*final=*/false, out);
}

void RescanningToolCallParser::Finish(ParsedText* out) {
  Run(/*final=*/true, out);
  ReleaseHeld(out);
  buf_.clear();
  sink_.Finish(out);
}

// ---- CallTextSink ---------------------------------------------------------------

void CallTextSink::Text(std::string_view text, ParsedText* out) {
  if (text.empty()) return;
  size_t last = text.size();
  while (last > 0 && IsJsonSpace(text[last - 1])) --last;
  if (last == 0) {  // whitespace only: hold until we know what it touches
    held_space_.append(text);
    return;
  }
  std::string_view body = text.substr(0, last);
  if (after_call_) {
    held_space_.clear();
    body = body.substr(SkipSpace(body));
  }
  out->content += held_space_;
  out->content.append(body);
  held_space_.assign(text.substr(last));
  after_call_ = false;
}

void CallTextSink::Call(ToolCall call, ParsedText* out) {
  held_space_.clear();
  after_call_ = true;
  out->calls.push_back(std::move(call));
}

void CallTextSink::Finish(ParsedText* out) {
  if (!after_call_) out->content += held_space_;
  held_space_.clear();
}

}  // namespace tessera::openai::tools

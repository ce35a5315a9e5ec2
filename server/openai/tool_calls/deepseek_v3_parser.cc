#include "server/openai/tool_calls/deepseek_v3_parser.h"

#include <optional>
#include <string>
#include <utility>

namespace tessera::openai::tools {
namespace {

constexpr size_t npos = std::string_view::npos;
constexpr std::string_view kCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kSep = "<｜tool▁sep｜>";

std::string_view TrimSpace(std::string_view s) {
  s.remove_prefix(SkipSpace(s));
  while (!s.empty() && IsJsonSpace(s.back())) s.remove_suffix(1);
  return s;
}

// One call's body (between its begin and end markers).
std::optional<ToolCall> ParseCallBody(std::string_view body) {
  const size_t sep = body.find(kSep);
  if (sep == npos) return std::nullopt;
  std::string_view name = body.substr(0, sep);
  std::string_view args = body.substr(sep + kSep.size());
  if (const size_t nl = args.find('\n'); name == "function" && nl != npos) {  // V3: type, name, fenced JSON
    name = args.substr(0, nl);
    args = TrimSpace(args.substr(nl + 1));
    if (args.starts_with("```")) {
      const size_t fence_end = args.find('\n');
      args = fence_end == npos ? std::string_view() : args.substr(fence_end + 1);
      args = TrimSpace(args);
      if (args.ends_with("```")) args.remove_suffix(3);
    }
  }
  name = TrimSpace(name);
  if (name.empty() || name.find('\n') != npos) return std::nullopt;
  std::optional<nlohmann::ordered_json> j = ParseJsonText(args);
  if (!j || !j->is_object()) return std::nullopt;
  return ToolCall{std::string(name), JsonText(*j)};
}

class DeepSeekV3Parser : public RescanningToolCallParser {
 private:
  enum class State { kOutside, kBlock, kCall };

  void ReleaseHeld(ParsedText* out) override {
    switch (state_) {
      case State::kOutside: sink_.Text(buf_, out); break;
      case State::kBlock:
        if (calls_in_block_ == 0) sink_.Text(raw_ + buf_, out);  // else only whitespace is left
        break;
      case State::kCall:  // output ended inside a call: a complete one still counts
        EndCall(buf_, "", out);
        break;
    }
    raw_.clear();
    state_ = State::kOutside;
  }

  void EndCall(std::string_view body, std::string_view end, ParsedText* out) {
    if (std::optional<ToolCall> call = ParseCallBody(body)) {
      sink_.Call(std::move(*call), out);
      ++calls_in_block_;
    } else {
      sink_.Text(raw_ + std::string(body) + std::string(end), out);
    }
    raw_.clear();
  }

  void Run(bool final, ParsedText* out) override {
    for (;;) {
      switch (state_) {
        case State::kOutside: {
          const size_t at = buf_.find(kCallsBegin);
          if (at == npos) {
            const size_t keep = final ? 0 : PartialTagSuffix(buf_, kCallsBegin);
            sink_.Text(std::string_view(buf_).substr(0, buf_.size() - keep), out);
            buf_.erase(0, buf_.size() - keep);
            return;
          }
          sink_.Text(std::string_view(buf_).substr(0, at), out);
          raw_ = kCallsBegin;
          buf_.erase(0, at + kCallsBegin.size());
          state_ = State::kBlock;
          calls_in_block_ = 0;
          break;
        }
        case State::kBlock: {
          const size_t at = SkipSpace(buf_);
          const std::string_view rest = std::string_view(buf_).substr(at);
          if (rest.starts_with(kCallBegin)) {
            raw_.append(buf_, 0, at + kCallBegin.size());
            buf_.erase(0, at + kCallBegin.size());
            state_ = State::kCall;
            search_from_ = 0;
          } else if (rest.starts_with(kCallsEnd)) {
            if (calls_in_block_ == 0) sink_.Text(raw_ + buf_.substr(0, at + kCallsEnd.size()), out);
            raw_.clear();
            buf_.erase(0, at + kCallsEnd.size());
            state_ = State::kOutside;
          } else if (rest.empty() || (!final && (kCallBegin.starts_with(rest) || kCallsEnd.starts_with(rest)))) {
            return;  // maybe a marker
          } else {  // not a call: the block's markup so far is text, the rest is read as text
            if (calls_in_block_ == 0) sink_.Text(raw_, out);
            raw_.clear();
            state_ = State::kOutside;
          }
          break;
        }
        case State::kCall: {
          const size_t at = buf_.find(kCallEnd, search_from_);
          if (at == npos) {
            search_from_ = buf_.size() - PartialTagSuffix(buf_, kCallEnd);
            return;
          }
          const std::string body = buf_.substr(0, at);
          buf_.erase(0, at + kCallEnd.size());
          state_ = State::kBlock;
          EndCall(body, kCallEnd, out);
          break;
        }
      }
    }
  }

  State state_ = State::kOutside;
  std::string raw_;   // markup consumed since the last released call (the verbatim fallback)
  int calls_in_block_ = 0;
  size_t search_from_ = 0;
};

}  // namespace

std::unique_ptr<ToolCallParser> MakeDeepSeekV3ToolCallParser() { return std::make_unique<DeepSeekV3Parser>(); }

}  // namespace tessera::openai::tools

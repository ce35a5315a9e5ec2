#include "server/openai/tool_calls/reasoning_parser.h"

#include "server/openai/tool_calls/scan.h"

namespace tessera::openai::tools {
namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";

}  // namespace

StatusOr<ReasoningParserKind> ReasoningParserFromName(std::string_view name) {
  if (name == "qwen3") return ReasoningParserKind::kQwen3;
  if (name == "deepseek_r1") return ReasoningParserKind::kDeepSeekR1;
  if (name == "openai_gptoss") return ReasoningParserKind::kOpenAIGptOss;
  return InvalidArgument("unknown reasoning parser '" + std::string(name.substr(0, 64)) +
                         "' (known: qwen3, deepseek_r1, openai_gptoss)");
}

std::string_view ReasoningParserName(ReasoningParserKind kind) {
  switch (kind) {
    case ReasoningParserKind::kQwen3: return "qwen3";
    case ReasoningParserKind::kDeepSeekR1: return "deepseek_r1";
    case ReasoningParserKind::kOpenAIGptOss: return "openai_gptoss";
    case ReasoningParserKind::kNone: break;
  }
  return "";
}

bool PromptOpensThink(std::string_view prompt) {
  size_t end = prompt.size();
  while (end > 0 && IsJsonSpace(prompt[end - 1])) --end;
  return prompt.substr(0, end).ends_with(kThinkOpen);
}

ReasoningParser::ReasoningParser(ReasoningParserKind kind, bool prompt_opened_think) {
  if (prompt_opened_think) {
    state_ = start_default_ = State::kReasoning;
  } else {
    state_ = State::kStart;
    start_default_ = kind == ReasoningParserKind::kDeepSeekR1 ? State::kReasoning : State::kContent;
  }
}

void ReasoningParser::Feed(std::string_view text, ReasoningSplit* out) {
  buf_.append(text);
  Run(/*final=*/false, out);
}

void ReasoningParser::Finish(ReasoningSplit* out) { Run(/*final=*/true, out); }

void ReasoningParser::Run(bool final, ReasoningSplit* out) {
  if (state_ == State::kStart) {
    const size_t at = SkipSpace(buf_);
    std::string_view rest = std::string_view(buf_).substr(at);
    if (rest.starts_with(kThinkOpen)) {
      buf_.erase(0, at + kThinkOpen.size());
      state_ = State::kReasoning;
    } else if (!final && kThinkOpen.starts_with(rest)) {
      return;  // empty so far, or maybe the tag
    } else {
      state_ = start_default_;
    }
  }
  if (state_ == State::kReasoning) {
    const size_t at = buf_.find(kThinkClose);
    if (at == std::string::npos) {
      const size_t keep = final ? 0 : PartialTagSuffix(buf_, kThinkClose);
      out->reasoning.append(buf_, 0, buf_.size() - keep);
      buf_.erase(0, buf_.size() - keep);
      return;
    }
    out->reasoning.append(buf_, 0, at);
    buf_.erase(0, at + kThinkClose.size());
    state_ = State::kContent;
    after_close_ = true;
  }
  if (after_close_) {  // the blank lines models put after </think>
    const size_t at = SkipSpace(buf_);
    buf_.erase(0, at);
    if (buf_.empty()) return;
    after_close_ = false;
  }
  out->content += buf_;
  buf_.clear();
}

}  // namespace tessera::openai::tools

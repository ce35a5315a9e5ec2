// /v1/completions response bodies from ServingEngine updates: an accumulator
// for the non-streamed text_completion object and a chunk builder for
// streaming. One instance per request, used by one thread at a time. The
// caller handles update.status (send an error instead).
//
// Choice index = prompt_index * n + choice index. With echo the prompt text
// (and, with logprobs, its tokens: first with null logprob) comes first.
// text_offset counts Unicode code points, as vLLM does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/openai/response_common.h"
#include "server/serving/serving_engine.h"

namespace tessera::openai {

// What echo needs about one prompt. The other prompt positions' tokens come
// from GenerationUpdate::prompt_logprobs (set params.prompt_logprobs).
struct PromptEcho {
  std::string text;                         // the prompt as text
  std::optional<LogprobEntry> first_token;  // position 0 (it has no logprob)
};

struct CompletionOptions {
  bool echo = false;
  std::optional<int32_t> logprobs;  // alternatives per token; unset: "logprobs": null
  bool prompt_logprobs = false;     // add vLLM's "prompt_logprobs" to each choice
  bool return_token_ids = false;    // add vLLM's "token_ids" (the choice's new ids) to each choice
};

// The "logprobs" object of a completion choice, built token by token.
class CompletionLogprobs {
 public:
  explicit CompletionLogprobs(int32_t top_k, int64_t start_offset = 0);
  // A token; without_logprob: a first prompt token (null logprob and top).
  void Add(const LogprobEntry& entry, bool without_logprob = false);
  bool empty() const { return tokens_.empty(); }
  int64_t next_offset() const { return offset_; }
  nlohmann::json ToJson() const;

 private:
  int32_t top_k_;
  int64_t offset_;
  nlohmann::json tokens_ = nlohmann::json::array();
  nlohmann::json token_logprobs_ = nlohmann::json::array();
  nlohmann::json top_logprobs_ = nlohmann::json::array();
  nlohmann::json text_offset_ = nlohmann::json::array();
};

// vLLM's prompt_logprobs list: null for position 0, then per position
// {"<id>": {"logprob", "decoded_token"}} for the token and its alternatives.
nlohmann::json PromptLogprobsJson(const std::vector<LogprobEntry>& positions);

class CompletionAccumulator {
 public:
  CompletionAccumulator(int num_prompts, int n, CompletionOptions options);
  void SetPromptEcho(int prompt_index, PromptEcho echo);
  void Add(int prompt_index, const GenerationUpdate& update);
  nlohmann::json Build(const std::string& id, int64_t created, const std::string& model) const;

 private:
  struct Choice {
    std::string text;
    std::vector<int32_t> token_ids;
    std::vector<LogprobEntry> logprobs;
    FinishReason finish = FinishReason::kNone;
    nlohmann::json stop_reason;
  };
  struct Prompt {
    PromptEcho echo;
    std::vector<LogprobEntry> prompt_logprobs;
    UsageCounter usage;
  };
  int n_;
  CompletionOptions options_;
  std::vector<Prompt> prompts_;
  std::vector<Choice> choices_;
  std::optional<KvExportInfo> kv_export_;  // -> "kv_transfer_params"
};

class CompletionStream {
 public:
  CompletionStream(std::string id, int64_t created, std::string model, int num_prompts, int n,
                   CompletionOptions options, bool continuous_usage);
  void SetPromptEcho(int prompt_index, PromptEcho echo);
  // Chunks for the choices with something new (text, logprobs or the end):
  // {"id","object":"text_completion","created","model","choices":[{"index",
  // "text","logprobs","finish_reason","stop_reason"}]} (+ "usage").
  std::vector<nlohmann::json> OnUpdate(int prompt_index, const GenerationUpdate& update);
  // {"id",...,"choices":[],"usage":{...}} over all prompts.
  nlohmann::json UsageChunk() const;

 private:
  struct Choice {
    bool started = false;
    int64_t offset = 0;  // text_offset of the next token
  };
  struct Prompt {
    PromptEcho echo;
    std::vector<LogprobEntry> prompt_logprobs;
    UsageCounter usage;
  };
  nlohmann::json Header() const;

  std::string id_;
  int64_t created_;
  std::string model_;
  int n_;
  CompletionOptions options_;
  bool continuous_usage_;
  std::vector<Prompt> prompts_;
  std::vector<Choice> choices_;
};

}  // namespace tessera::openai

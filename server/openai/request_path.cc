#include "server/openai/request_path.h"

#include <algorithm>
#include <string>
#include <utility>

#include "server/openai/tool_calls/template_messages.h"
#include "server/openai/tool_calls/tool_grammar.h"
#include "structured/structured.h"

namespace tessera::openai {
namespace {

// A chat render failure as the error to send (RenderChatPrompt's codes).
ApiError RenderError(const Status& s) {
  if (s.code() == StatusCode::kFailedPrecondition) return BadRequest(s.message(), "", "unsupported");
  if (s.code() == StatusCode::kInvalidArgument) return BadRequest(s.message(), "messages");
  return {ApiStatus::kInternal, "internal error: " + s.message(), "server_error", "", "internal_error"};
}

// One tokenized prompt through the input processor (serving/input_processor.h):
// the engine's Request, validated once. Its refusal as the error to send: the
// context length in OpenAI's words naming `param` ("prompt" or "messages"),
// anything else a 400 naming the field its message quotes (ErrorFromStatus).
// `Parsed`: CompletionRequest or ChatRequest.
template <typename Parsed>
std::optional<ApiError> ProcessPrompt(const RequestModel& model, std::vector<int32_t> ids, const Parsed& req,
                                      const char* param, GenerateInput* out) {
  Request request;
  request.prompt_token_ids = std::move(ids);
  request.params = req.params;
  request.cache_salt = req.cache_salt;
  request.export_kv = req.kv_transfer.do_remote_decode;
  request.remote_kv = req.kv_transfer.remote;
  const int64_t n = static_cast<int64_t>(request.prompt_token_ids.size());
  for (const RetentionMark& m : req.retention.marks) {
    request.retention.prefixes.push_back({m.tokens < 0 ? n : std::min(m.tokens, n), m.ttl_ns});
  }
  request.retention.field = req.retention.field;
  StatusOr<GenerateInput> in =
      ProcessInput(std::move(request), req.skip_special_tokens, req.include_stop_str_in_output, model.limits.model);
  if (in.ok()) {
    *out = std::move(*in);
    return std::nullopt;
  }
  if (IsContextLengthExceeded(in.status())) {
    return ContextLengthError(n, req.params.max_tokens, model.limits.model.max_model_len, param);
  }
  return ErrorFromStatus(in.status());
}

// The conversation the template renders (tool-call turns in its convention).
Json TemplateMessages(const RequestModel& model, const Json& messages) {
  return model.chat_template ? tools::MessagesForTemplate(messages, *model.chat_template) : messages;
}

// What RenderChatPromptTokens renders for a chat or chat /tokenize request.
ChatPromptInput ChatInput(const RequestModel& model, const Json& messages, const Json& tools,
                          bool add_generation_prompt, const Json& template_kwargs, bool add_special_tokens,
                          bool continue_final_message) {
  return {.chat_template = model.chat_template,
          .model_name = model.limits.served_model_name,
          .messages = TemplateMessages(model, messages),
          .tools = tools,
          .add_generation_prompt = add_generation_prompt,
          .continue_final_message = continue_final_message,
          .template_kwargs = template_kwargs,
          .add_special_tokens = add_special_tokens,
          .content_special_tokens = model.chat_content_special_tokens};
}

// Anthropic's cache_control marks a prefix of the conversation: the chat
// messages up to a point (or the tools alone). Each mark becomes the tokens
// its partial render shares with the full prompt (the template renders a
// prefix of the conversation as a prefix of the prompt; where it does not, the
// shared part is what can be reused anyway). One render per mark (at most 4).
void ResolveRetentionMarks(const RequestModel& model, const ChatRequest& req, std::span<const int32_t> full,
                           std::vector<RetentionMark>* marks) {
  for (RetentionMark& m : *marks) {
    if (m.messages < 0) continue;
    Json head = Json::array();
    for (int64_t i = 0; i < m.messages && i < static_cast<int64_t>(req.messages.size()); ++i) {
      head.push_back(req.messages[static_cast<size_t>(i)]);
    }
    StatusOr<ChatPrompt> part = RenderChatPromptTokens(
        *model.tokenizer, ChatInput(model, head, req.tools, /*add_generation_prompt=*/false, req.template_kwargs,
                                    req.add_special_tokens, /*continue_final_message=*/false));
    m.tokens = 0;
    if (!part.ok()) continue;  // e.g. a template that needs a user message: nothing of it is held
    const size_t n = std::min(part->ids.size(), full.size());
    size_t shared = 0;
    while (shared < n && part->ids[shared] == full[shared]) ++shared;
    m.tokens = static_cast<int64_t>(shared);
  }
}

// tool_choice "required" / a named function: the grammar of the calls
// becomes the request's constraint (ToolCallGrammar), so the output always
// parses into calls.
std::optional<ApiError> ForceToolCalls(const RequestModel& model, const tools::ChatOutputOptions& output,
                                       ChatRequest* req) {
  const char* what = req->tool_choice.mode == tools::ToolChoiceMode::kNamed ? "a named function" : "\"required\"";
  if (req->structured.kind != StructuredOutputSpec::Kind::kNone) {
    return BadRequest("'" + req->structured.param + "' cannot be combined with tool_choice " + what +
                          " (the output is the tool calls)",
                      req->structured.param);
  }
  if (model.structured == nullptr) {
    return BadRequest(std::string("tool_choice ") + what + " needs constrained decoding, which is not available on " +
                          "this server",
                      "tool_choice", "unsupported_parameter");
  }
  std::string gbnf;
  tools::ToolGrammarOptions options{.choice = req->tool_choice,
                                    .parallel_tool_calls = req->parallel_tool_calls,
                                    .parser = output.tool_parser,
                                    .close_think = output.reasoning_parser != tools::ReasoningParserKind::kNone &&
                                                   output.prompt_opened_think};
  if (auto err = tools::ToolCallGrammar(req->tools, options, model.structured->limits(), &gbnf)) return err;
  StatusOr<structured::StructuredOutputs::ConstraintPtr> c = model.structured->Gbnf(gbnf);
  if (!c.ok()) return BadRequest("'tools': the tool-call grammar does not compile: " + c.status().message(), "tools");
  req->params.constraint = std::move(*c);
  req->params.constraint_field = "tools";
  return std::nullopt;
}

// A harmony assistant turn ends at <|return|> (the answer) or <|call|> (a
// tool call); the checkpoint's eos_token_id names only the first, so both
// stop the request (vLLM adds the same stop tokens for gpt-oss).
void AddHarmonyStops(const text::Tokenizer& tokenizer, SamplingParams* params) {
  for (std::string_view stop : {tools::kHarmonyReturn, tools::kHarmonyCall}) {
    std::optional<int32_t> id = tokenizer.TokenToId(stop);
    if (!id || !tokenizer.IsSpecial(*id)) continue;
    auto& ids = params->stop_token_ids;
    if (std::find(ids.begin(), ids.end(), *id) == ids.end()) ids.push_back(*id);
  }
}

// The prompt whose end sets the harmony parser's starting state. Under
// continue_final_message the final message's content is cut off when it is
// either fed to the parser again (echo, chat_response.h) or was plain text to
// the model (content special tokens masked, the default): harmony markup
// written in it must not decide how the output is read. Only content the
// model read as control tokens, and does not see again, stays.
std::string_view HarmonyStatePrompt(const RequestModel& model, const ChatRequest& req, std::string_view prompt) {
  if (!req.continue_final_message || (!req.echo && model.chat_content_special_tokens) || !req.messages.is_array() ||
      req.messages.empty()) {
    return prompt;
  }
  const Json& last = req.messages.back();
  auto content = last.is_object() && last.value("role", Json()) == "assistant" ? last.find("content") : last.end();
  if (content == last.end() || !content->is_string()) return prompt;
  const std::string& text = content->get_ref<const std::string&>();
  if (prompt.ends_with(text)) prompt.remove_suffix(text.size());
  return prompt;
}

}  // namespace

RequestModel RequestModelOf(const ServingEngine& engine) {
  RequestModel m;
  m.tokenizer = &engine.tokenizer();
  m.chat_template = engine.chat_template();
  m.limits = {engine.served_model_name(), engine.limits()};
  m.structured = engine.structured_outputs();
  m.chat_content_special_tokens = engine.chat_content_special_tokens();
  return m;
}

std::optional<ApiError> PrepareCompletion(const RequestModel& model, std::string_view body, PreparedCompletion* out) {
  CompletionRequest request;
  if (auto err = ParseCompletionRequest(body, model.limits, &request)) return err;
  return PrepareParsedCompletion(model, std::move(request), out);
}

std::optional<ApiError> PrepareParsedCompletion(const RequestModel& model, CompletionRequest request,
                                                PreparedCompletion* out) {
  PreparedCompletion p;
  p.request = std::move(request);
  CompletionRequest& req = p.request;
  if (auto err = CompileStructuredOutput(req.structured, model.structured, &req.params)) return err;
  // A raw prompt is the client's own text: special-token text in it is parsed, as vLLM does
  // (docs/architecture.md, "Validation"); only chat content is kept plain.
  for (PromptInput& prompt : req.prompts) {  // token ids move to the input; text stays (echo)
    std::vector<int32_t> ids =
        prompt.text ? model.tokenizer->Encode(*prompt.text, req.add_special_tokens) : std::move(prompt.token_ids);
    if (ids.empty()) return BadRequest("'prompt' encodes to no tokens", "prompt");
    GenerateInput& in = p.inputs.emplace_back();
    if (auto err = ProcessPrompt(model, std::move(ids), req, "prompt", &in)) return err;
  }
  *out = std::move(p);
  return std::nullopt;
}

std::optional<ApiError> PrepareChat(const RequestModel& model, std::string_view body, PreparedChat* out) {
  ChatRequest request;
  if (auto err = ParseChatRequest(body, model.limits, &request)) return err;
  return PrepareParsedChat(model, std::move(request), out);
}

std::optional<ApiError> PrepareParsedChat(const RequestModel& model, ChatRequest request, PreparedChat* out) {
  PreparedChat p;
  p.request = std::move(request);
  if (auto err = CompileStructuredOutput(p.request.structured, model.structured, &p.request.params)) return err;
  const ChatRequest& req = p.request;
  if (req.tool_choice.mode == tools::ToolChoiceMode::kAuto && model.output.tool_parser == tools::ToolParserKind::kNone) {
    // As vLLM: tools the server could not parse calls for are refused, not left to chance.
    return BadRequest("tool_choice \"auto\" needs a tool-call parser, and this model's chat template shows no "
                      "tool-call format: start the server with --tool-call-parser "
                      "hermes|llama3_json|mistral|deepseek_v3|openai, or "
                      "send tool_choice \"none\"",
                      "tool_choice");
  }
  StatusOr<ChatPrompt> prompt = RenderChatPromptTokens(
      *model.tokenizer, ChatInput(model, req.messages, req.tools, req.add_generation_prompt, req.template_kwargs,
                                  req.add_special_tokens, req.continue_final_message));
  if (!prompt.ok()) return RenderError(prompt.status());
  if (prompt->ids.empty()) return BadRequest("'messages' render to no tokens", "messages");
  ResolveRetentionMarks(model, req, prompt->ids, &p.request.retention.marks);
  if (auto err = ProcessPrompt(model, std::move(prompt->ids), req, "messages", &p.input)) return err;
  p.output.tool_choice = req.tool_choice;
  p.output.tool_parser = model.output.tool_parser;
  p.output.parallel_tool_calls = req.parallel_tool_calls;
  p.output.reasoning_parser = model.output.reasoning_parser;
  p.output.prompt_opened_think = tools::PromptOpensThink(prompt->text);
  if (p.output.harmony()) p.output.harmony_open_header = tools::HarmonyOpenHeader(HarmonyStatePrompt(model, req, prompt->text));
  if (req.tool_choice.mode == tools::ToolChoiceMode::kRequired || req.tool_choice.mode == tools::ToolChoiceMode::kNamed) {
    if (auto err = ForceToolCalls(model, p.output, &p.request)) return err;
  }
  const bool mistral_tools =
      p.output.parses_tools() && req.tool_choice.mode == tools::ToolChoiceMode::kAuto &&
      model.output.tool_parser == tools::ToolParserKind::kMistral;
  p.input.request.params.constraint = p.request.params.constraint;  // the tool-call grammar, if forced
  p.input.request.params.constraint_field = p.request.params.constraint_field;
  // Harmony's channels and recipients are special tokens: its parser reads them (as vLLM does).
  p.input.skip_special_tokens = req.skip_special_tokens && !mistral_tools && !p.output.harmony();
  if (p.output.harmony()) AddHarmonyStops(*model.tokenizer, &p.input.request.params);
  *out = std::move(p);
  return std::nullopt;
}

std::optional<ApiError> PrepareTokenize(const RequestModel& model, std::string_view body, TokenizeRequest* request,
                                        std::vector<int32_t>* ids) {
  if (auto err = ParseTokenizeRequest(body, model.limits, request)) return err;
  return PrepareParsedTokenize(model, *request, ids);
}

std::optional<ApiError> PrepareParsedTokenize(const RequestModel& model, const TokenizeRequest& request,
                                              std::vector<int32_t>* ids) {
  if (request.is_chat) {
    StatusOr<ChatPrompt> prompt = RenderChatPromptTokens(
        *model.tokenizer, ChatInput(model, request.messages, request.tools, request.add_generation_prompt,
                                    request.template_kwargs, request.add_special_tokens,
                                    request.continue_final_message));
    if (!prompt.ok()) return RenderError(prompt.status());
    *ids = std::move(prompt->ids);
    return std::nullopt;
  }
  // A raw prompt is the client's own text: special-token text in it is parsed (as vLLM does).
  *ids = model.tokenizer->Encode(request.prompt, request.add_special_tokens);
  return std::nullopt;
}

}  // namespace tessera::openai

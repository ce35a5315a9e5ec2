#include "server/openai/tool_calls/tool_grammar.h"

#include <vector>

#include "structured/gbnf.h"
#include "structured/json_schema.h"

namespace tessera::openai::tools {
namespace {

Json ParametersOf(const Json& fn) {
  auto p = fn.find("parameters");
  if (p == fn.end() || p->is_null()) return Json{{"type", "object"}};
  return *p;
}

}  // namespace

ForcedFormat ForcedToolCallFormat(ToolParserKind parser) {
  switch (parser) {
    case ToolParserKind::kHermes: return ForcedFormat::kHermes;
    case ToolParserKind::kLlama3Json: return ForcedFormat::kLlama3Json;
    case ToolParserKind::kMistral:  // [TOOL_CALLS] and harmony's markup are special tokens
    case ToolParserKind::kOpenAI:
    case ToolParserKind::kDeepSeekV3:
    case ToolParserKind::kNone: break;
  }
  return ForcedFormat::kJson;
}

std::optional<ApiError> ToolCallGrammar(const Json& tools, const ToolGrammarOptions& o,
                                        const structured::CompileLimits& limits, std::string* gbnf) {
  const bool named = o.choice.mode == ToolChoiceMode::kNamed;
  const ForcedFormat format = ForcedToolCallFormat(o.parser);
  const char* args_key = format == ForcedFormat::kLlama3Json ? "parameters" : "arguments";
  if (format == ForcedFormat::kJson) args_key = "parameters";  // vLLM's array items
  std::string rules;
  std::vector<std::string> calls;  // one rule name per allowed tool
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& fn = tools[i].at("function");
    const std::string& name = fn.at("name").get_ref<const std::string&>();
    if (named && name != o.choice.function_name) continue;
    const std::string prefix = "tool" + std::to_string(i) + "-";
    StatusOr<std::string> args =
        structured::JsonSchemaToGbnf(ParametersOf(fn), limits, {.root_name = "args", .rule_prefix = prefix});
    const std::string param = "tools[" + std::to_string(i) + "].function.parameters";
    if (!args.ok()) {
      return BadRequest("'" + param + "': invalid or unsupported JSON Schema for a forced tool call: " +
                            args.status().message(),
                        param);
    }
    rules += *args;
    if (named && format == ForcedFormat::kJson) {
      calls.push_back(prefix + "args");  // the output is the arguments object itself
      continue;
    }
    // {"name": "<name>", "<args_key>": <args>} as the chat templates write it.
    const std::string head = "{\"name\": " + Json(name).dump() + ", \"" + args_key + "\": ";
    rules += prefix + "call ::= " + structured::GbnfLiteral(head) + " " + prefix + "args \"}\"\n";
    calls.push_back(prefix + "call");
  }
  std::string root = "root ::= ";
  if (o.close_think) root += "\"</think>\\n\\n\" ";
  std::string any = "call ::= ";
  for (size_t i = 0; i < calls.size(); ++i) any += (i ? " | " : "") + calls[i];
  rules += any + "\n";
  const bool many = !named && o.parallel_tool_calls;
  switch (format) {
    case ForcedFormat::kHermes:
      rules += "wrapped ::= \"<tool_call>\\n\" call \"\\n</tool_call>\"\n";
      root += many ? "wrapped (\"\\n\" wrapped)*" : "wrapped";
      break;
    case ForcedFormat::kLlama3Json:
      root += many ? "call (\"; \" call)*" : "call";
      break;
    case ForcedFormat::kJson:
      root += named ? "call" : many ? "\"[\" call (\", \" call)* \"]\"" : "\"[\" call \"]\"";
      break;
  }
  *gbnf = root + "\n" + rules;
  if (gbnf->size() > limits.max_source_bytes) {
    return BadRequest("'tools': the grammar forcing the tool calls is over the server's limit of " +
                          std::to_string(limits.max_source_bytes) + " bytes",
                      "tools");
  }
  return std::nullopt;
}

}  // namespace tessera::openai::tools

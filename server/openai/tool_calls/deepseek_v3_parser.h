// DeepSeek-V3 / R1 tool calls (vLLM's `--tool-call-parser deepseek_v3`). The
// markup is ordinary text in DeepSeek's tokenizer (not special tokens), so it
// is parsed from the usual skip_special_tokens output:
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
//   ```json
//   {ARGS}
//   ```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
// V3.1's shorter call `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{ARGS}<｜tool▁call▁end｜>`
// is read too. Text before the block is content; a call that does not parse
// (no separator, arguments not a JSON object) is content verbatim, and so is
// a block that holds no call. Same streaming contract as every
// ToolCallParser (tool_call_parser.h). One instance per choice; not thread-safe.
#pragma once

#include <memory>

#include "server/openai/tool_calls/tool_call_parser.h"

namespace tessera::openai::tools {

std::unique_ptr<ToolCallParser> MakeDeepSeekV3ToolCallParser();

}  // namespace tessera::openai::tools

// The structured-output fields of /v1/completions and /v1/chat/completions:
// OpenAI's `response_format` ({"type":"text"|"json_object"|"json_schema"}),
// vLLM's `structured_outputs` ({json | regex | choice | grammar |
// json_object}) and its older `guided_json`, `guided_regex`,
// `guided_choice`, `guided_grammar`. Parsing is pure (the spec names the
// field it came from); CompileStructuredOutput turns it into the request's
// TokenConstraint through structured/, as a 400 naming that field
// when it is invalid, unsatisfiable or over a limit.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "scheduler/sampling_params.h"
#include "server/openai/api_error.h"
#include "server/openai/request_common.h"

namespace tessera::structured {
class StructuredOutputs;
}

namespace tessera::openai {

struct StructuredOutputSpec {
  enum class Kind { kNone, kJsonObject, kJsonSchema, kRegex, kChoice, kGrammar };
  Kind kind = Kind::kNone;
  Json schema;                       // kJsonSchema
  std::string text;                  // kRegex, kGrammar
  std::vector<std::string> choices;  // kChoice
  std::string param;                 // the request field it came from
};

// At most one constraint may be given; 400 naming the field otherwise.
std::optional<ApiError> ParseStructuredOutput(const Json& body, StructuredOutputSpec* out);

// For front ends whose fields are typed (gRPC), with the JSON fields' checks
// and words. Adds one constraint of `kind` given by `value`, as the field
// `param` gives it: a schema object or its JSON text (kJsonSchema), a
// non-empty regex or grammar text, a non-empty array of non-empty choices;
// nothing for kJsonObject.
std::optional<ApiError> AddStructuredOutput(StructuredOutputSpec::Kind kind, std::string param, const Json& value,
                                            StructuredOutputSpec* out);
// response_format's type when it is none of text, json_object, json_schema.
ApiError UnsupportedResponseFormat(const std::string& type);

// Sets params->constraint (unchanged for kNone). `compiler` null: any
// constraint is a 400 (the server was built without a vocabulary).
std::optional<ApiError> CompileStructuredOutput(const StructuredOutputSpec& spec,
                                                structured::StructuredOutputs* compiler, SamplingParams* params);

}  // namespace tessera::openai

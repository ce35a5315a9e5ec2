// JSON Schema -> GBNF text (like llama.cpp's json-schema-to-grammar), which
// ParseGbnf compiles like any grammar. Also usable to embed a schema in a
// bigger grammar (e.g. `<tool_call>` + arguments JSON + `</tool_call>`):
// every rule it emits starts with `rule_prefix`, and the value rule is named
// `root_name`.
//
// Supported: type (one or a list), enum, const, properties / required /
// additionalProperties (false, true or a schema; ABSENT MEANS FALSE, as in
// XGrammar's strict mode: only declared properties are generated, which is
// always valid), prefixItems / items / minItems / maxItems, minLength /
// maxLength / pattern (see regex.h) / format (date, time, date-time, uuid,
// email, ipv4), integer minimum / maximum / exclusiveMinimum /
// exclusiveMaximum, number minimum 0, anyOf, oneOf (whose branches must
// provably exclude each other, see one_of.h: then the union is exactly-one;
// overlapping ones are refused), allOf of one schema, $ref to "#", "#/$defs/..." or "#/definitions/...", boolean schemas.
// Annotations (title, description, default, examples, $schema, $id, ...)
// are ignored. Anything that would constrain the output but is not enforced
// (not, if/then/else, patternProperties, uniqueItems, multipleOf, other
// formats, ...) is an INVALID_ARGUMENT naming the keyword and its location.
//
// Properties come out in `properties` order; whitespace between tokens is
// bounded (at most a newline and 20 spaces/tabs), so outputs stay finite.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "structured/grammar.h"

namespace tessera::structured {

struct JsonSchemaGbnfOptions {
  std::string root_name = "root";
  std::string rule_prefix;  // e.g. "tool1-": makes the rules unique inside a bigger grammar
};

StatusOr<std::string> JsonSchemaToGbnf(const nlohmann::ordered_json& schema, const CompileLimits& limits,
                                       const JsonSchemaGbnfOptions& options = {});

// GBNF for any JSON object ({"type":"json_object"}), same conventions.
std::string JsonObjectGbnf(const JsonSchemaGbnfOptions& options = {});

}  // namespace tessera::structured

#include "server/openai/structured_request.h"

#include <utility>

#include "server/openai/json_body.h"
#include "structured/structured.h"

namespace tessera::openai {
namespace {

using Kind = StructuredOutputSpec::Kind;

std::optional<ApiError> Set(StructuredOutputSpec* out, Kind kind, std::string param) {
  if (out->kind != Kind::kNone) {
    return BadRequest("'" + param + "' cannot be combined with '" + out->param +
                          "': give one structured-output constraint",
                      param);
  }
  out->kind = kind;
  out->param = std::move(param);
  return std::nullopt;
}

// A schema given as an object, or as a string holding one (vLLM accepts both).
std::optional<ApiError> ReadSchema(const Json& v, const std::string& param, StructuredOutputSpec* out) {
  if (v.is_string()) {
    Json parsed;
    if (auto e = ParseJsonBounded(v.get_ref<const std::string&>(), JsonLimits{.max_depth = kMaxJsonDepth}, &parsed)) {
      return BadRequest("'" + param + "' is not valid JSON: " + e->message, param);
    }
    if (!parsed.is_object() && !parsed.is_boolean()) return TypeError(param, "a JSON Schema object", v);
    out->schema = std::move(parsed);
    return std::nullopt;
  }
  if (!v.is_object() && !v.is_boolean()) return TypeError(param, "a JSON Schema object", v);
  out->schema = v;
  return std::nullopt;
}

std::optional<ApiError> ReadChoices(const Json& v, const std::string& param, StructuredOutputSpec* out) {
  if (!v.is_array() || v.empty()) return TypeError(param, "a non-empty array of strings", v);
  for (const Json& c : v) {
    if (!c.is_string() || c.get_ref<const std::string&>().empty()) {
      return TypeError(param, "a non-empty array of non-empty strings", v);
    }
    out->choices.push_back(c.get<std::string>());
  }
  return std::nullopt;
}

std::optional<ApiError> ReadText(const Json& v, const std::string& param, std::string* out) {
  if (!v.is_string() || v.get_ref<const std::string&>().empty()) return TypeError(param, "a non-empty string", v);
  *out = v.get<std::string>();
  return std::nullopt;
}

std::optional<ApiError> ReadResponseFormat(const Json& body, StructuredOutputSpec* out) {
  auto it = body.find("response_format");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) return TypeError("response_format", "an object", *it);
  auto type = it->find("type");
  if (type == it->end() || !type->is_string()) {
    return TypeError("response_format.type", "a string", type == it->end() ? Json() : *type);
  }
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") return Set(out, Kind::kJsonObject, "response_format");
  if (t != "json_schema") return UnsupportedResponseFormat(t);
  auto js = it->find("json_schema");
  if (js == it->end() || !js->is_object()) {
    return TypeError("response_format.json_schema", "an object", js == it->end() ? Json() : *js);
  }
  if (auto name = js->find("name"); name != js->end() && !name->is_null() && !name->is_string()) {
    return TypeError("response_format.json_schema.name", "a string", *name);
  }
  if (auto strict = js->find("strict"); strict != js->end() && !strict->is_null() && !strict->is_boolean()) {
    return TypeError("response_format.json_schema.strict", "a boolean", *strict);
  }
  auto schema = js->find("schema");
  if (schema == js->end() || schema->is_null()) {
    return BadRequest("'response_format.json_schema.schema' is required", "response_format.json_schema.schema");
  }
  return AddStructuredOutput(Kind::kJsonSchema, "response_format.json_schema.schema", *schema, out);
}

std::optional<ApiError> ReadStructuredOutputs(const Json& body, StructuredOutputSpec* out) {
  auto it = body.find("structured_outputs");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) return TypeError("structured_outputs", "an object", *it);
  for (const char* k : {"whitespace_pattern", "structural_tag"}) {
    if (auto f = it->find(k); f != it->end() && !f->is_null()) {
      return BadRequest(std::string("'structured_outputs.") + k + "' is not supported by this server",
                        std::string("structured_outputs.") + k, "unsupported_parameter");
    }
  }
  for (const char* k : {"disable_fallback", "disable_any_whitespace", "disable_additional_properties"}) {
    bool v = false;
    if (auto e = ReadBool(*it, k, std::string("structured_outputs.") + k, &v)) return e;
    // Our JSON grammars never generate undeclared properties; whitespace is always bounded-but-allowed.
    if (std::string(k) == "disable_any_whitespace" && v) {
      return BadRequest("'structured_outputs.disable_any_whitespace' is not supported by this server",
                        "structured_outputs.disable_any_whitespace", "unsupported_parameter");
    }
  }
  static constexpr std::pair<const char*, Kind> kFields[] = {
      {"json", Kind::kJsonSchema}, {"regex", Kind::kRegex}, {"choice", Kind::kChoice}, {"grammar", Kind::kGrammar}};
  for (const auto& [key, kind] : kFields) {
    if (auto f = it->find(key); f != it->end() && !f->is_null()) {
      if (auto e = AddStructuredOutput(kind, std::string("structured_outputs.") + key, *f, out)) return e;
    }
  }
  bool json_object = false;
  if (auto e = ReadBool(*it, "json_object", "structured_outputs.json_object", &json_object)) return e;
  if (json_object) {
    if (auto e = Set(out, Kind::kJsonObject, "structured_outputs.json_object")) return e;
  }
  if (out->kind == Kind::kNone) {
    return BadRequest("'structured_outputs' needs one of json, regex, choice, grammar or json_object",
                      "structured_outputs");
  }
  return std::nullopt;
}

std::optional<ApiError> ReadGuided(const Json& body, StructuredOutputSpec* out) {
  if (auto f = body.find("guided_whitespace_pattern"); f != body.end() && !f->is_null()) {
    return BadRequest("'guided_whitespace_pattern' is not supported by this server", "guided_whitespace_pattern",
                      "unsupported_parameter");
  }
  std::string backend;  // one engine here: any backend name is accepted
  if (auto e = ReadString(body, "guided_decoding_backend", "guided_decoding_backend", &backend)) return e;
  static constexpr std::pair<const char*, Kind> kFields[] = {{"guided_json", Kind::kJsonSchema},
                                                              {"guided_regex", Kind::kRegex},
                                                              {"guided_choice", Kind::kChoice},
                                                              {"guided_grammar", Kind::kGrammar}};
  for (const auto& [key, kind] : kFields) {
    if (auto f = body.find(key); f != body.end() && !f->is_null()) {
      if (auto e = AddStructuredOutput(kind, key, *f, out)) return e;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> AddStructuredOutput(Kind kind, std::string param, const Json& value,
                                            StructuredOutputSpec* out) {
  if (auto e = Set(out, kind, param)) return e;
  switch (kind) {
    case Kind::kJsonSchema: return ReadSchema(value, param, out);
    case Kind::kRegex:
    case Kind::kGrammar: return ReadText(value, param, &out->text);
    case Kind::kChoice: return ReadChoices(value, param, out);
    case Kind::kJsonObject:
    case Kind::kNone: break;
  }
  return std::nullopt;
}

ApiError UnsupportedResponseFormat(const std::string& type) {
  return BadRequest("response_format type '" + type.substr(0, 64) +
                        "' is not supported (expected text, json_object or json_schema)",
                    "response_format.type", "unsupported_parameter");
}

std::optional<ApiError> ParseStructuredOutput(const Json& body, StructuredOutputSpec* out) {
  StructuredOutputSpec spec;
  if (auto e = ReadResponseFormat(body, &spec)) return e;
  if (auto e = ReadStructuredOutputs(body, &spec)) return e;
  if (auto e = ReadGuided(body, &spec)) return e;
  *out = std::move(spec);
  return std::nullopt;
}

std::optional<ApiError> CompileStructuredOutput(const StructuredOutputSpec& spec,
                                                structured::StructuredOutputs* compiler, SamplingParams* params) {
  if (spec.kind == Kind::kNone) return std::nullopt;
  if (compiler == nullptr) {
    return BadRequest("'" + spec.param + "': structured outputs are not available on this server", spec.param,
                      "unsupported_parameter");
  }
  const char* what = "";
  auto compile = [&]() -> StatusOr<structured::StructuredOutputs::ConstraintPtr> {
    switch (spec.kind) {
      case Kind::kJsonObject: what = "JSON object grammar"; return compiler->JsonObject();
      case Kind::kJsonSchema: what = "JSON Schema"; return compiler->JsonSchema(spec.schema);
      case Kind::kRegex: what = "regular expression"; return compiler->Regex(spec.text);
      case Kind::kChoice: what = "choice list"; return compiler->Choice(spec.choices);
      case Kind::kGrammar: what = "grammar"; return compiler->Gbnf(spec.text);
      case Kind::kNone: break;
    }
    return InvalidArgument("no constraint");
  };
  StatusOr<structured::StructuredOutputs::ConstraintPtr> c = compile();
  if (!c.ok()) {
    return BadRequest("'" + spec.param + "': invalid or unsupported " + what + ": " + c.status().message(), spec.param);
  }
  params->constraint = std::move(*c);
  params->constraint_field = spec.param;
  return std::nullopt;
}

}  // namespace tessera::openai

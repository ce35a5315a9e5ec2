// JSON Schema `oneOf` is exactly-one: a grammar generates the union of the
// branches, so the converter accepts only branches it can prove exclusive
// (types, const/enum values, a required discriminator) and refuses the rest,
// naming the pair (structured/one_of.h).
#include <string>

#include <gtest/gtest.h>

#include "structured/json_schema.h"

namespace tessera::structured {
namespace {

using Json = nlohmann::ordered_json;

StatusOr<std::string> Schema(const char* text) { return JsonSchemaToGbnf(Json::parse(text), CompileLimits{}); }

TEST(OneOfTest, OverlappingBranchesAreRefused) {
  for (const char* s : {
           R"({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]})",
           R"({"oneOf": [{"type": "integer"}, {"type": "number"}]})",
           R"({"oneOf": [{"type": "object", "properties": {"a": {"type": "integer"}}},
                         {"type": "object", "properties": {"b": {"type": "integer"}}}]})",
           R"({"oneOf": [{"type": "boolean"}, {}]})",
           R"({"oneOf": [{"enum": [1, "x"]}, {"const": "x"}]})",
           R"({"oneOf": [{"type": "string"}, {"$ref": "#/$defs/s"}], "$defs": {"s": {"type": ["string", "null"]}}})",
           R"({"type": "array", "items": {"oneOf": [{"type": "null"}, {"anyOf": [{"type": "null"}, {"type": "string"}]}]}})",
           // a required discriminator only in one branch is no proof
           R"({"oneOf": [{"type": "object", "properties": {"k": {"const": "a"}}, "required": ["k"]},
                         {"type": "object", "properties": {"k": {"const": "b"}}}]})",
       }) {
    auto r = Schema(s);
    ASSERT_FALSE(r.ok()) << s;
    EXPECT_NE(r.status().message().find("'oneOf' branches"), std::string::npos) << r.status().message();
  }
}

TEST(OneOfTest, ExclusiveBranchesAreAccepted) {
  for (const char* s : {
           R"({"oneOf": [{"type": "boolean"}, {"type": "array", "maxItems": 2}]})",
           R"({"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]})",
           R"({"oneOf": [{"const": "a"}, {"enum": ["b", 1]}]})",
           R"({"oneOf": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/b"}],
               "$defs": {"a": {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
                               "required": ["kind"]},
                         "b": {"type": "object", "properties": {"kind": {"enum": ["b", "c"]}}, "required": ["kind"]}}})",
           R"({"oneOf": [{"type": "string"}, {"allOf": [{"type": "integer"}]}]})",
       }) {
    auto r = Schema(s);
    EXPECT_TRUE(r.ok()) << s << ": " << r.status().ToString();
  }
}

}  // namespace
}  // namespace tessera::structured

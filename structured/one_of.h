// JSON Schema `oneOf` exclusivity. A value valid under oneOf matches exactly
// one branch; the grammar can only generate the union of the branches (a
// context-free language has no "and not"), so Tessera enforces oneOf by
// accepting only branches it can prove mutually exclusive, where the union IS
// exactly-one, and refusing the rest (the client can say anyOf when overlap
// is fine). Proofs, per pair of branches, under JSON Schema's semantics (not
// the strict generation's: a branch without `additionalProperties: false`
// still accepts extra keys):
//   - the JSON types the branches accept are disjoint (`type`, the types of
//     `const` / `enum` values; integer and number count as one; through
//     $ref, allOf of one schema and nested anyOf/oneOf); or
//   - both are `const` / `enum` with no value in common; or
//   - both require a property whose `const` / `enum` values have none in
//     common (a discriminator, as OpenAPI's).
// Anything else counts as overlapping. Cost: O(branches^2 x schema size),
// on a schema already bounded by CompileLimits.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tessera::structured {

// OK when every pair of `branches` (the oneOf array, found at `path` in
// `root`, which $refs resolve against) provably excludes each other;
// INVALID_ARGUMENT naming the first overlapping pair otherwise.
Status CheckOneOfExclusive(const nlohmann::ordered_json& root, const nlohmann::ordered_json& branches,
                           const std::string& path);

// The schema a local $ref ("#", "#/$defs/x", JSON-pointer escapes ~0 ~1)
// names inside `root`; null when it names none.
const nlohmann::ordered_json* ResolveLocalRef(const nlohmann::ordered_json& root, const std::string& ref);

}  // namespace tessera::structured

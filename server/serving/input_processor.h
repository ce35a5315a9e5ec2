// The input processor (as vLLM's InputProcessor): where a request is
// validated, once, before it reaches the engine (docs/architecture.md,
// "Validation"). A front end parses its wire format (openai/ for HTTP,
// grpc/convert.h for gRPC), tokenizes, builds the engine's Request and hands
// it here; ProcessInput checks it with ValidateRequest (scheduler/request.h)
// against the model's limits. ServingEngine::Submit, the engine loop and the
// scheduler then only check their own invariants and capacity.
// Pure; thread-safe.
#pragma once

#include "common/status.h"
#include "scheduler/request.h"
#include "scheduler/sampling_params.h"

namespace tessera {

// A validated request and how its tokens become text (front-end-only).
struct GenerateInput {
  // request.id: unique among live requests; may stay empty through
  // ProcessInput, the front end names it before ServingEngine::Submit.
  Request request;
  bool skip_special_tokens = true;  // in the returned text
  bool include_stop_str_in_output = false;
  // The matched API key's id (ApiKeyTenantId; "" without keys): the request's
  // cache namespace under --cache-isolation api-key (ServingEngine::Submit).
  std::string tenant;
};

// `request` with its text options, once ValidateRequest accepts it against
// `limits`: INVALID_ARGUMENT naming the field, OUT_OF_RANGE for the context
// length (IsContextLengthExceeded).
StatusOr<GenerateInput> ProcessInput(Request request, bool skip_special_tokens, bool include_stop_str_in_output,
                                     const ModelLimits& limits);

}  // namespace tessera

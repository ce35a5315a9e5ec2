// What a tessera.v1 GenerateRequest says before any model is involved, shared
// by the instance's gRPC service (convert.h) and the router's
// (server/router/router_grpc.h); knows nothing of serving:
//  - CheckGrpcOnly: the faults only a proto can have, which no OpenAI JSON
//    body can express (no prompt, a non-finite float, top_logprobs with
//    logprobs false on a text prompt, json_schema without its format type,
//    kv_transfer_params text that is not a JSON object);
//  - GenerateRequestToJson: the OpenAI body the request means, which the
//    router sends to instances' HTTP APIs (prefill, tokenize).
// Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "proto/tessera.pb.h"

namespace tessera::grpc_api {

// INVALID_ARGUMENT naming the field for the faults above, in this order: no
// prompt; a non-finite temperature, top_p, min_p, presence_penalty,
// frequency_penalty, repetition_penalty; top_logprobs with logprobs false on a
// text or token-id prompt (chat refuses it with the HTTP check); a non-finite
// logit_bias value (among the entries the HTTP path would read: at most one
// past its limit); json_schema without response_format_type;
// kv_transfer_params not a JSON object.
Status CheckGrpcOnly(const v1::GenerateRequest& request);

// `kv_transfer_params` arrives as JSON text: read with the request body's
// bounded parser (one linear pass, nesting capped as for an HTTP body) into
// `out`. INVALID_ARGUMENT naming the field unless it is a JSON object.
Status ParseKvTransferText(const std::string& text, nlohmann::ordered_json* out);

// The proto's value of the float sampling field the HTTP API names `name`
// (the names are the same); nullopt when unset or not a float field.
std::optional<float> SamplingFloat(const v1::SamplingParams& params, std::string_view name);

// Completions spelling of the proto's logprobs: unset logprobs with
// top_logprobs set means logprobs on.
bool WantsLogprobs(const v1::SamplingParams& params);

// The OpenAI request body a GenerateRequest means (JSON text): a text or
// token-id prompt is a /v1/completions body, a chat prompt a
// /v1/chat/completions body (*chat = true). Unset proto fields are left out,
// so the HTTP defaults apply; logprobs/top_logprobs map to the endpoint's
// spelling (completions: "logprobs": top_logprobs). CheckGrpcOnly's errors,
// and INVALID_ARGUMENT for a string that is not valid UTF-8.
StatusOr<std::string> GenerateRequestToJson(const v1::GenerateRequest& request, bool* chat);

}  // namespace tessera::grpc_api

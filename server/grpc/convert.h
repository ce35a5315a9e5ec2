// Conversions between tessera.v1 messages and the ServingEngine's types. A
// request is validated by the HTTP front end's code (openai/request_path.h):
// the proto becomes the equivalent OpenAI JSON body first, so gRPC refuses
// exactly what HTTP refuses, with the same message naming the (HTTP) field.
// Pure functions of their inputs (plus the model's read-only tokenizer and
// template); thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "proto/tessera.pb.h"
#include "server/grpc/grpc_util.h"
#include "server/openai/request_path.h"
#include "server/serving/serving_engine.h"

namespace tessera::grpc_api {

// Bounds on what a client may send besides the HTTP request path's own.
inline constexpr size_t kMaxRequestIdBytes = 256;

// The OpenAI request body a GenerateRequest means (JSON text): a text or
// token-id prompt is a /v1/completions body, a chat prompt a
// /v1/chat/completions body (*chat = true). Unset proto fields are left out,
// so the HTTP defaults apply; logprobs/top_logprobs map to the endpoint's
// spelling (completions: "logprobs": top_logprobs). INVALID_ARGUMENT for
// what JSON cannot carry (a non-finite float, invalid UTF-8) and for
// top_logprobs with logprobs false on a text prompt (as chat refuses it).
StatusOr<std::string> GenerateRequestToJson(const v1::GenerateRequest& request, bool* chat);
// The /tokenize body a TokenizeRequest means.
StatusOr<std::string> TokenizeRequestToJson(const v1::TokenizeRequest& request);

// The gRPC request path: GenerateRequestToJson, then the HTTP front end's
// openai::PrepareCompletion / PrepareChat, so both validate alike. The
// request's request_id (at most kMaxRequestIdBytes) or else `request_id`.
StatusOr<GenerateInput> BuildGenerateInput(const openai::RequestModel& model, const v1::GenerateRequest& request,
                                           const std::string& request_id);
// Prompt token ids of a Tokenize call, through openai::PrepareTokenize.
StatusOr<std::vector<int32_t>> TokenizePrompt(const openai::RequestModel& model, const v1::TokenizeRequest& request);

// Checks ids are inside [0, vocab_size); INVALID_ARGUMENT naming `field`.
Status CheckTokenIds(const std::vector<int32_t>& ids, int64_t vocab_size, const char* field);

// Appends a delta's new text, ids and logprobs to `out` and sets its finish
// reason when the choice ended (stream: `out` is fresh; unary: it accumulates).
void AppendDelta(const ChoiceDelta& delta, v1::ChoiceDelta* out);
void FillUsage(const GenerationUpdate& update, v1::Usage* usage);

}  // namespace tessera::grpc_api

// Conversions between tessera.v1 messages and the serving types. A request
// becomes the same parsed structs the HTTP parser produces
// (openai::CompletionRequest / ChatRequest / TokenizeRequest), field by
// field and with the HTTP parser's checks, words and order, then goes
// through the HTTP front end's preparation (openai/request_path.h): gRPC
// refuses exactly what HTTP refuses, with the same message naming the (HTTP)
// field, plus " (gRPC field 'F')" where the proto's name differs.
// Pure functions of their inputs (plus the model's read-only tokenizer and
// template); thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "proto/tessera.pb.h"
#include "server/grpc/generate_request.h"
#include "server/grpc/grpc_util.h"
#include "server/openai/request_path.h"
#include "server/serving/serving_engine.h"

namespace tessera::grpc_api {

// Bounds on what a client may send besides the HTTP request path's own.
inline constexpr size_t kMaxRequestIdBytes = 256;

// A GenerateRequest that passed CheckGrpcOnly as the request the equivalent
// HTTP body parses into: a text or token-id prompt is a /v1/completions
// request, a chat prompt a /v1/chat/completions one. Unset proto fields take
// the HTTP defaults. The error is what the HTTP parser answers that body.
std::optional<ApiError> ToCompletionRequest(const v1::GenerateRequest& request, const openai::RequestLimits& limits,
                                            openai::CompletionRequest* out);
std::optional<ApiError> ToChatRequest(const v1::GenerateRequest& request, const openai::RequestLimits& limits,
                                      openai::ChatRequest* out);
// The /tokenize request a TokenizeRequest with a prompt means.
std::optional<ApiError> ToTokenizeRequest(const v1::TokenizeRequest& request, const openai::RequestLimits& limits,
                                          openai::TokenizeRequest* out);

// The gRPC request path: CheckGrpcOnly, To*Request, then the HTTP front end's
// openai::PrepareParsedCompletion / PrepareParsedChat (through the input
// processor), so both validate alike. The request's request_id (at most kMaxRequestIdBytes) or else
// `request_id`.
StatusOr<GenerateInput> BuildGenerateInput(const openai::RequestModel& model, const v1::GenerateRequest& request,
                                           const std::string& request_id);
// Prompt token ids of a Tokenize call, through openai::PrepareParsedTokenize.
StatusOr<std::vector<int32_t>> TokenizePrompt(const openai::RequestModel& model, const v1::TokenizeRequest& request);

// Checks ids are inside [0, vocab_size); INVALID_ARGUMENT naming `field`.
Status CheckTokenIds(const std::vector<int32_t>& ids, int64_t vocab_size, const char* field);

// Appends a delta's new text, ids and logprobs to `out` and sets its finish
// reason when the choice ended (stream: `out` is fresh; unary: it accumulates).
void AppendDelta(const ChoiceDelta& delta, v1::ChoiceDelta* out);
void FillUsage(const GenerationUpdate& update, v1::Usage* usage);

}  // namespace tessera::grpc_api

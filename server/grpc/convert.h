// Conversions between tessera.v1 messages and the ServingEngine's types, with
// the validation the gRPC front end does before submitting. Pure functions of
// their inputs (plus the engine's read-only tokenizer); thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <grpcpp/support/status.h>

#include "common/status.h"
#include "proto/tessera.pb.h"
#include "server/serving/serving_engine.h"

namespace tessera::grpc_api {

// Bounds on what a client may send, besides ModelLimits.
inline constexpr size_t kMaxRequestIdBytes = 256;
inline constexpr size_t kMaxStopStrings = 64;
inline constexpr size_t kMaxStopStringBytes = 1024;
inline constexpr size_t kMaxStopTokenIds = 1024;
inline constexpr size_t kMaxLogitBias = 1024;
inline constexpr size_t kMaxMessages = 4096;
inline constexpr size_t kMaxRoleBytes = 64;
// max_tokens when the request leaves it unset, for text and token-id prompts
// (OpenAI /v1/completions' default); chat prompts default to the context room.
inline constexpr int32_t kDefaultMaxTokens = 16;

// Tessera Status -> gRPC status (same message).
grpc::Status ToGrpc(const Status& status);

// Prompt token ids of a text or chat prompt: Encode(text, add_special_tokens),
// or RenderChat then Encode(add_special_tokens=false). INVALID_ARGUMENT naming
// the field on bad input; FAILED_PRECONDITION when the model has no chat template.
StatusOr<std::vector<int32_t>> EncodeText(const ServingEngine& engine, const v1::TextPrompt& text);
StatusOr<std::vector<int32_t>> EncodeChat(const ServingEngine& engine, const v1::ChatPrompt& chat);

// Fills a GenerateInput: prompt ids (checked against the vocabulary), sampling
// parameters with HTTP defaults for unset fields, validated
// (SamplingParams::Validate), and the context length (OUT_OF_RANGE).
// `request_id` is used when the request names none.
StatusOr<GenerateInput> BuildGenerateInput(const ServingEngine& engine, const v1::GenerateRequest& request,
                                           const std::string& request_id);

// Checks ids are inside [0, vocab_size); INVALID_ARGUMENT naming `field`.
Status CheckTokenIds(const std::vector<int32_t>& ids, int64_t vocab_size, const char* field);

// Appends a delta's new text, ids and logprobs to `out` and sets its finish
// reason when the choice ended (stream: `out` is fresh; unary: it accumulates).
void AppendDelta(const ChoiceDelta& delta, v1::ChoiceDelta* out);
void FillUsage(const GenerationUpdate& update, v1::Usage* usage);

// A fresh request id, unique in this process ("grpc-<hex>").
std::string NewRequestId();

// Constant-time (in the compared bytes) check of "Bearer <key>" against keys.
bool CheckBearer(const std::string& authorization, const std::vector<std::string>& keys);

}  // namespace tessera::grpc_api

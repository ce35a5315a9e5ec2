// Tessera C++ client SDK: a thin, typed wrapper over the tessera.v1 gRPC API
// (proto/tessera.proto). No gRPC or protobuf types appear here; link the
// `tessera_client` library (it brings gRPC in).
//
//   auto client = tessera::Client::Connect("127.0.0.1:50051", {.api_key = "k"});
//   if (!client.ok()) ...;
//   tessera::sdk::GenerateParams p;
//   p.prompt = "Hello";
//   p.sampling.max_tokens = 32;
//   auto done = client.value->Generate(p);                  // unary
//   client.value->GenerateStream(p, [](const tessera::sdk::StreamChunk& c) {
//     for (auto& ch : c.choices) std::cout << ch.text;
//     return true;                                          // false cancels
//   });
//
// Threading: a Client may be used from many threads at once; each call blocks
// the calling thread. The stream callback runs on the calling thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tessera::sdk {

// gRPC status codes, same numbers.
enum class Code {
  kOk = 0, kCancelled = 1, kUnknown = 2, kInvalidArgument = 3, kDeadlineExceeded = 4,
  kNotFound = 5, kAlreadyExists = 6, kPermissionDenied = 7, kResourceExhausted = 8,
  kFailedPrecondition = 9, kAborted = 10, kOutOfRange = 11, kUnimplemented = 12,
  kInternal = 13, kUnavailable = 14, kDataLoss = 15, kUnauthenticated = 16,
};
const char* CodeName(Code code);  // "INVALID_ARGUMENT"

struct Status {
  Code code = Code::kOk;
  std::string message;
  bool ok() const { return code == Code::kOk; }
  std::string ToString() const;  // "OK" or "CODE: message"
};

// A value, or the error that prevented it (value is default-constructed then).
template <typename T>
struct Result {
  Status status;
  T value{};
  bool ok() const { return status.ok(); }
};

struct ClientOptions {
  std::string api_key;                   // sent as "authorization: Bearer <key>" when set
  std::chrono::milliseconds deadline{0};  // per call; 0: none
  int max_receive_message_bytes = 64 << 20;
};

struct ChatMessage {
  std::string role;
  std::string content;
};

// Unset fields take the server's (HTTP API's) defaults.
struct SamplingOptions {
  std::optional<int32_t> max_tokens, min_tokens, top_k, n, top_logprobs;
  std::optional<float> temperature, top_p, min_p;
  std::optional<float> presence_penalty, frequency_penalty, repetition_penalty;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  std::optional<bool> ignore_eos, logprobs, skip_special_tokens, include_stop_str_in_output;
  std::map<int32_t, float> logit_bias;
};

// Exactly one of prompt / prompt_token_ids / messages is used, in that order of
// preference: a non-empty messages list makes a chat request; else non-empty
// prompt_token_ids; else the text prompt.
struct GenerateParams {
  std::string request_id;  // "": the server picks one
  std::string prompt;
  bool add_special_tokens = true;
  std::vector<int32_t> prompt_token_ids;
  std::vector<ChatMessage> messages;
  bool add_generation_prompt = true;
  SamplingOptions sampling;
  std::chrono::milliseconds deadline{0};  // 0: ClientOptions::deadline
};

struct TokenLogprob {
  int32_t token_id = 0;
  std::string token;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;  // alternatives, most likely first
};

// One choice: its whole output (Generate) or what is new (GenerateStream).
struct Choice {
  int32_t index = 0;
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<TokenLogprob> logprobs;
  std::string finish_reason;  // "stop" | "length" | "abort" | "" (still running)
  std::optional<std::string> stop_string;  // what stopped it, if a stop string
  std::optional<int32_t> stop_token_id;    // ... or a stop token
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};

struct Completion {
  std::string request_id;
  std::vector<Choice> choices;  // by index
  Usage usage;
};

struct StreamChunk {
  std::string request_id;
  std::vector<Choice> choices;  // deltas of the choices that advanced
  Usage usage;                  // so far
  bool finished = false;        // last chunk
};

// Return false to cancel the stream (GenerateStream then returns CANCELLED).
using StreamCallback = std::function<bool(const StreamChunk&)>;

// Cancels a GenerateStream from another thread. Reusable across calls, one
// call at a time.
class CancelHandle {
 public:
  CancelHandle();
  ~CancelHandle();
  void Cancel();  // any thread; a call started after Cancel() is cancelled at once
  struct State;
  std::shared_ptr<State> state() const { return state_; }

 private:
  std::shared_ptr<State> state_;
};

struct Tokenization {
  std::vector<int32_t> token_ids;
  std::vector<std::string> tokens;  // vocabulary strings
  int64_t max_model_len = 0;
};

struct ModelInfo {
  std::string id;
  int64_t created = 0;
  int64_t max_model_len = 0;
  int64_t vocab_size = 0;
  bool has_chat_template = false;
};

enum class HealthStatus { kUnknown = 0, kServing = 1, kNotServing = 2, kServiceUnknown = 3 };

class Client {
 public:
  // Creates the channel (connection is lazy; the first call connects).
  static Result<std::unique_ptr<Client>> Connect(const std::string& target, ClientOptions options = {});
  ~Client();

  Result<Completion> Generate(const GenerateParams& params);
  // Calls on_chunk for every response message; returns the call's final
  // status (OK once the last chunk was delivered).
  Status GenerateStream(const GenerateParams& params, const StreamCallback& on_chunk,
                        CancelHandle* cancel = nullptr);
  Result<Tokenization> Tokenize(const std::string& text, bool add_special_tokens = true);
  Result<Tokenization> TokenizeChat(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true);
  Result<std::string> Detokenize(const std::vector<int32_t>& token_ids, bool skip_special_tokens = false);
  Result<std::vector<ModelInfo>> ListModels();
  // grpc.health.v1 Check; service "" is the whole server.
  Result<HealthStatus> Health(const std::string& service = "");

  struct Impl;

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::sdk

namespace tessera {
using Client = sdk::Client;
using ClientOptions = sdk::ClientOptions;
}  // namespace tessera

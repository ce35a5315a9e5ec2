// GenerationJob: one HTTP generation request from submit to its last byte,
// whatever the API. The job owns the engine side (submission, polling,
// cancellation on disconnect, the request timeout, logging); a JobOutput
// owns the API side (the body or SSE events, and the shape of errors), so
// /v1/completions, /v1/chat/completions and /v1/messages share one job.
//
// A GenerationJob lives on its connection's strand: every method except the
// notify callback runs there. The engine loop's notify only posts a Pump to
// the strand (coalesced by an atomic flag); the posted handler holds a weak
// reference, so a job whose client left is not kept alive by the engine.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "server/http/openai_routes.h"
#include "server/openai/kv_transfer_params.h"
#include "server/serving/receipts.h"

namespace tessera {

// One API's view of a job's updates. Called on the job's strand only.
class JobOutput {
 public:
  virtual ~JobOutput() = default;
  // Every generation was submitted (on the strand, before the first update):
  // an output that lets a later request cancel them keeps them here
  // (Generation::Cancel is thread-safe).
  virtual void Submitted(const std::vector<std::shared_ptr<Generation>>& /*generations*/) {}
  // Not streamed: an update of generation `prompt_index`, then the body.
  virtual void Add(int prompt_index, const GenerationUpdate& update) = 0;
  virtual nlohmann::json Body() = 0;
  // Streamed: what follows the head at once, each update's events, the tail.
  virtual std::string StreamStart() { return ""; }
  virtual std::string OnUpdate(int prompt_index, const GenerationUpdate& update) = 0;
  virtual std::string StreamEnd() = 0;
  // A failure before anything was sent, and one mid-stream (the stream ends after it).
  virtual HttpResponse ErrorAnswer(const ApiError& error) const;
  virtual std::string StreamError(const ApiError& error) const;
  // The finished response's receipt (docs/architecture.md, "Receipts"), given
  // before Body() / StreamEnd(): an output may put it in the body or the final
  // chunk. Every non-streamed answer also carries it in the tessera-receipt
  // header. The default ignores it.
  virtual void SetReceipt(const nlohmann::json& receipt) { (void)receipt; }
  // false: no tessera-receipt header (receipt verification's answer is not a generation).
  virtual bool ReceiptHeader() const { return true; }
};

// The HTTP header (and gRPC trailer) that carries a receipt, base64url.
inline constexpr char kReceiptHeader[] = "tessera-receipt";

class GenerationJob : public std::enable_shared_from_this<GenerationJob> {
 public:
  // `id` names the generations (id-0, id-1, ...) and the log lines.
  GenerationJob(ServeContext* ctx, ServingEngine* engine, std::shared_ptr<HttpExchange> ex, std::string id,
                bool stream, std::unique_ptr<JobOutput> output);
  ~GenerationJob();

  // Submits one generation per input; on failure answers with the error.
  bool Submit(std::vector<GenerateInput> inputs);

 private:
  void Pump();
  void Apply(int prompt_index, const GenerationUpdate& u);
  void StartStream();
  void Finish();
  void Record(const receipt::Receipt& r);
  void Fail(const Status& status);
  void Abandon();
  void TimedOut();

  ServeContext* ctx_;
  ServingEngine* engine_;
  std::shared_ptr<HttpExchange> ex_;
  bool stream_;
  std::string id_;
  std::unique_ptr<JobOutput> output_;
  std::chrono::steady_clock::time_point start_;
  std::vector<std::shared_ptr<Generation>> gens_;
  std::unique_ptr<boost::asio::steady_timer> timer_;
  std::shared_ptr<GenerationJob> self_;  // until done
  bool stream_started_ = false;
  bool done_ = false;
  int64_t prompt_tokens_ = 0;
  std::vector<int64_t> completion_tokens_;  // per generation, running totals
  ReceiptRecorder recorder_;
};

// The caller presented the internal key (the router, or another deployment role).
bool InternalCaller(const ServeContext& ctx, const HttpExchange& ex);
// kv_transfer_params only from the internal key's holder (docs/architecture.md, "Threat model").
std::optional<ApiError> CheckKvCaller(const ServeContext& ctx, const HttpExchange& ex, const KvTransferRequest& kv);
// Hands the job to its connection's strand and submits there. --cache-isolation
// api-key: the inputs take the matched key's namespace; the router's requests
// come with their cache_salt already in the client key's namespace.
void SubmitOnStrand(const ServeContext& ctx, const std::shared_ptr<HttpExchange>& ex,
                    std::shared_ptr<GenerationJob> job, std::vector<GenerateInput> inputs);

}  // namespace tessera

#include "server/http/receipt_routes.h"

#include "receipt/compare.h"
#include "server/http/generation_job.h"
#include "server/openai/request_common.h"
#include "server/openai/request_path.h"

namespace tessera {
namespace {

using json = nlohmann::json;

// The re-execution's output: nothing but its receipt, compared with the claimed one.
class VerifyOutput : public JobOutput {
 public:
  VerifyOutput(receipt::Receipt claimed, json checks) : claimed_(std::move(claimed)), checks_(std::move(checks)) {}
  void Add(int, const GenerationUpdate&) override {}
  void SetReceipt(const json& replayed) override { replayed_ = replayed; }
  bool ReceiptHeader() const override { return false; }
  json Body() override {
    StatusOr<receipt::Receipt> replayed = receipt::FromJson(replayed_);
    if (!replayed.ok()) return {{"result", "error"}, {"message", replayed.status().ToString()}};
    json answer = receipt::ToJson(receipt::CompareOutputs(claimed_, *replayed));
    answer.update(checks_);
    return answer;
  }
  std::string OnUpdate(int, const GenerationUpdate&) override { return ""; }
  std::string StreamEnd() override { return ""; }

 private:
  receipt::Receipt claimed_;
  json checks_;  // what was checked before the re-execution (signature, engine, flags)
  json replayed_;
};

ApiError ReceiptError(std::string message, std::string code, std::string param = "receipt") {
  return ApiError{ApiStatus::kBadRequest, std::move(message), "invalid_request_error", std::move(param),
                  std::move(code)};
}

StatusOr<receipt::Receipt> ReadReceipt(const openai::Json& v) {
  if (v.is_string()) return receipt::Decode(v.get<std::string>());
  return receipt::FromJson(json::parse(v.dump()));
}

// The request's generation inputs as this server executes them, or the error.
std::optional<ApiError> PrepareInputs(ServeContext* ctx, ServingEngine* engine, const openai::Json& request,
                                      std::vector<GenerateInput>* inputs) {
  if (!request.is_object() || (request.contains("messages") == request.contains("prompt"))) {
    return BadRequest("'request' must be the body of a /v1/chat/completions (with \"messages\") or a "
                      "/v1/completions (with \"prompt\") request",
                      "request");
  }
  openai::RequestModel model = openai::RequestModelOf(*engine);
  if (request.contains("messages")) {
    model.output = ctx->chat_output;
    openai::PreparedChat prepared;
    if (auto err = openai::PrepareChat(model, request.dump(), &prepared)) return err;
    inputs->push_back(std::move(prepared.input));
  } else {
    openai::PreparedCompletion prepared;
    if (auto err = openai::PrepareCompletion(model, request.dump(), &prepared)) return err;
    *inputs = std::move(prepared.inputs);
  }
  return std::nullopt;
}

void HandleVerify(ServeContext* ctx, const std::shared_ptr<HttpExchange>& ex) {
  ServingEngine* engine = ctx->ready_engine();
  if (engine == nullptr) return ex->Send(ErrorResponseWithRetry(NotReadyError(*ctx)));
  openai::Json body;
  if (auto err = openai::ParseBodyObject(ex->request().body(), &body)) return ex->Send(ErrorResponse(*err));
  for (const auto& [key, value] : body.items()) {
    if (key != "receipt" && key != "request") {
      return ex->Send(ErrorResponse(BadRequest("unknown field '" + key + "' (expected receipt and request)", key)));
    }
  }
  if (!body.contains("receipt")) return ex->Send(ErrorResponse(BadRequest("'receipt' is required", "receipt")));
  StatusOr<receipt::Receipt> claimed = ReadReceipt(body["receipt"]);
  if (!claimed.ok()) return ex->Send(ErrorResponse(ReceiptError(claimed.status().message(), "invalid_receipt")));
  const ReceiptContext& ours = engine->receipts();
  json checks = {{"signature", "unsigned"},
                 {"engine_matches", claimed->server.engine == ours.digests.engine},
                 {"flags_match", claimed->server.flags == ours.digests.flags}};
  if (claimed->signature) {
    if (!ours.signer) {
      return ex->Send(ErrorResponse(ReceiptError(
          "receipt signature: the receipt is signed but this server has no --receipt-key to check it with",
          "invalid_receipt_signature")));
    }
    if (Status s = receipt::VerifySignature(*claimed, ours.signer->public_key()); !s.ok()) {
      return ex->Send(ErrorResponse(ReceiptError(s.message(), "invalid_receipt_signature")));
    }
    checks["signature"] = "valid";
  }
  if (claimed->server.weights != ours.digests.weights || claimed->server.tokenizer != ours.digests.tokenizer) {
    const bool weights = claimed->server.weights != ours.digests.weights;
    return ex->Send(ErrorResponse(ReceiptError(
        std::string("the receipt names another model: its ") + (weights ? "weights" : "tokenizer") + " digest is " +
            (weights ? claimed->server.weights : claimed->server.tokenizer) + ", this server's is " +
            (weights ? ours.digests.weights : ours.digests.tokenizer) + "; verify it where that model is served",
        "receipt_model_mismatch")));
  }
  if (!body.contains("request")) return ex->Send(ErrorResponse(BadRequest("'request' is required", "request")));
  std::vector<GenerateInput> inputs;
  if (auto err = PrepareInputs(ctx, engine, body["request"], &inputs)) return ex->Send(ErrorResponse(*err));
  if (inputs.size() != claimed->generations.size()) {
    json answer = {{"result", "different"}, {"differs", "request"},
                   {"message", "the request has " + std::to_string(inputs.size()) + " prompts, the receipt " +
                                   std::to_string(claimed->generations.size())}};
    answer.update(checks);
    return ex->Send(JsonResponse(HttpStatus::ok, answer));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const receipt::GenerationRecord& g = claimed->generations[i];
    GenerateInput& in = inputs[i];
    const std::string digest = receipt::DigestHex(receipt::CanonicalDump(
        receipt::CanonicalRequest(in.request, g.seed, in.skip_special_tokens, in.include_stop_str_in_output)));
    if (digest != g.request) {
      json answer = {{"result", "different"}, {"differs", "request"}, {"generation", i},
                     {"message", "the request as executed (after defaults, template and tokenization) is not the "
                                 "one the receipt names"}};
      answer.update(checks);
      return ex->Send(JsonResponse(HttpStatus::ok, answer));
    }
    in.request.params.seed = g.seed;  // a drawn seed, replayed
  }
  const std::string id = "verify-" + RandomHex(16);
  auto job = std::make_shared<GenerationJob>(ctx, engine, ex, id, /*stream=*/false,
                                             std::make_unique<VerifyOutput>(std::move(*claimed), std::move(checks)));
  SubmitOnStrand(*ctx, ex, std::move(job), std::move(inputs));
}

}  // namespace

void RegisterReceiptRoutes(ServeContext* ctx) {
  ctx->server->Handle(
      boost::beast::http::verb::post, "/v1/receipts/verify",
      [ctx](std::shared_ptr<HttpExchange> ex) { OffIo(ctx, std::move(ex), HandleVerify); },
      RouteOptions{.json_body = true});
}

}  // namespace tessera

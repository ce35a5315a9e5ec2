#include "cli/serve_flags.h"

#include <netdb.h>
#include <sys/socket.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>

#include <fmt/format.h>

#include "common/internal_key.h"
#include "engine/gguf.h"
#include "engine/gguf_model.h"
#include "engine/model_config.h"
#include "engine/parallel/shard/rank_group.h"
#include "runtime/backend_registry.h"
#include "scheduler/block_hash.h"
#include "cli/router_flags.h"
#include "engine/kv_tiers/redis_kv_store.h"
#include "server/kv_events/kv_event_publisher.h"
#include "server/kv_events/kv_events_config.h"
#include "server/openai/tool_calls/chat_output.h"
#include "server/openai/tool_calls/reasoning_parser.h"
#include "server/openai/tool_calls/tool_call_parser.h"
#include "server/router/kv_router.h"
#include "server/serving/cache_isolation.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// A model path's metadata, parsed without loading weights: config.json (plus
// the presence of tokenizer.json and weights) or the GGUF header.
StatusOr<std::string> CheckModelPath(const std::string& flag, const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec) && !fs::is_regular_file(path, ec)) {
    return NotFound(fmt::format("serve: {} {} is not a directory or a .gguf file", flag, path));
  }
  StatusOr<std::string> gguf = ResolveGgufPath(path);
  if (!gguf.ok()) return InvalidArgument(fmt::format("serve: {}: {}", flag, gguf.status().message()));
  if (!gguf->empty()) {
    StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(*gguf);
    if (!file.ok()) return InvalidArgument(fmt::format("serve: {}: {}", flag, file.status().message()));
    StatusOr<ModelConfig> mc = GgufModelConfig((*file)->contents(), *gguf);
    if (!mc.ok()) return InvalidArgument(fmt::format("serve: {}: {}", flag, mc.status().message()));
    return fmt::format("{} {}: GGUF, {}", flag, *gguf, mc->Summary());
  }
  StatusOr<ModelConfig> mc = LoadModelConfig(path);
  if (!mc.ok()) return InvalidArgument(fmt::format("serve: {}: {}", flag, mc.status().message()));
  if (!fs::is_regular_file(fs::path(path) / "tokenizer.json", ec)) {
    return NotFound(fmt::format("serve: {} {}: no tokenizer.json", flag, path));
  }
  bool weights = false;
  for (const auto& e : fs::directory_iterator(path, ec)) weights |= e.path().extension() == ".safetensors";
  if (!weights) return NotFound(fmt::format("serve: {} {}: no *.safetensors weights", flag, path));
  return fmt::format("{} {}: {}", flag, path, mc->Summary());
}

Status ValidateKvSecurityFlags(const ServeFlags& f) {
  if (auto a = ParsePrefixHashAlgo(f.prefix_caching_hash_algo); !a.ok()) {
    return InvalidArgument("serve: --prefix-caching-hash-algo: " + a.status().message());
  }
  StatusOr<CacheIsolation> iso = ParseCacheIsolation(f.cache_isolation);
  if (!iso.ok()) return InvalidArgument("serve: " + iso.status().message());
  if (*iso == CacheIsolation::kApiKey && f.api_keys.empty()) {
    return InvalidArgument("serve: --cache-isolation api-key needs --api-key (each key is a cache namespace)");
  }
  if (*iso == CacheIsolation::kSalt && f.role == "router") {
    return InvalidArgument("serve: --cache-isolation salt is enforced by the instances, not --role router");
  }
  const bool tiers = !f.kv_offload_disk_dir.empty() || !f.kv_offload_remote_url.empty();
  if (!f.kv_offload_secret_file.empty() && !tiers) {
    return InvalidArgument("serve: --kv-offload-secret-file needs --kv-offload-disk-dir or --kv-offload-remote-url");
  }
  return Status::Ok();
}

Status ValidateKvOffloadFlags(const ServeFlags& f) {
  if (f.kv_offload_host_gb < 0) return InvalidArgument("serve: --kv-offload-host-gb must be >= 0");
  if (f.kv_offload_disk_gb < 0) return InvalidArgument("serve: --kv-offload-disk-gb must be >= 0");
  if (f.kv_offload_disk_gb > 0 && f.kv_offload_disk_dir.empty()) {
    return InvalidArgument("serve: --kv-offload-disk-gb needs --kv-offload-disk-dir");
  }
  if (!f.kv_offload_remote_url.empty()) {
    if (auto r = kv_tiers::ParseRedisUrl(f.kv_offload_remote_url); !r.ok()) {
      return InvalidArgument("serve: --kv-offload-remote-url " + r.status().message());
    }
  }
  const bool any = f.kv_offload_host_gb > 0 || !f.kv_offload_disk_dir.empty() || !f.kv_offload_remote_url.empty();
  if (any && f.role == "router") return InvalidArgument("serve: --kv-offload-* need a model (not --role router)");
  if (any && f.tensor_parallel_size * f.data_parallel_size > 1) {
    return InvalidArgument("serve: --kv-offload-* with more than one rank is not supported yet");
  }
  return Status::Ok();
}

// Without the deployment credential nothing that carries KV or its events may
// leave the machine (docs/architecture.md, "Threat model").
Status ValidateResponsesStoreFlags(const ServeFlags& f) {
  if (f.responses_store_url.empty()) {
    if (f.responses_store_ttl_s != 0) return InvalidArgument("serve: --responses-store-ttl-s needs --responses-store-url");
    return Status::Ok();
  }
  if (f.role == "router") {
    return InvalidArgument("serve: --responses-store-url is an instance setting (the router learns it from the "
                           "instances' /server_info), not --role router's");
  }
  if (auto r = kv_tiers::ParseRedisUrl(f.responses_store_url); !r.ok()) {
    return InvalidArgument("serve: --responses-store-url " + r.status().message());
  }
  return Status::Ok();
}

Status ValidateUnauthenticatedTopology(const ServeFlags& f) {
  if (!f.internal_api_key.empty() || f.role == "router") return Status::Ok();
  const bool transfer = f.role == "prefill" || f.role == "decode" || f.kv_peer_fetch;
  if (transfer && !IsLoopbackHost(f.host)) {
    return InvalidArgument(fmt::format(
        "serve: {} on --host {} needs --internal-api-key-file: without it the KV transfer control plane and "
        "kv_transfer_params are unauthenticated, so they are served on loopback only",
        f.kv_peer_fetch ? "--kv-peer-fetch" : "--role " + f.role, f.host));
  }
  if (!f.kv_events_config.empty()) {
    const kv_events::KvEventsConfig kc = *kv_events::ParseKvEventsConfig(f.kv_events_config);  // checked first
    for (const std::string& e : {kc.endpoint, kc.replay_endpoint}) {
      if (kc.enabled() && !e.empty() && kv_events::EndpointLeavesHost(kv_events::NarrowEndpoint(e, f.host))) {
        return InvalidArgument("serve: --kv-events-config endpoint " + e + " (with --host " + f.host +
                               ") leaves this machine and needs --internal-api-key-file: KV events carry prompt "
                               "token ids, so without it they are sent on loopback or ipc:// only");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

void AddKvSecurityFlags(CLI::App* cmd, ServeFlags* f) {
  cmd->add_option("--prefix-caching-hash-algo", f->prefix_caching_hash_algo,
                  "how prefix-cache blocks are named (vLLM's names and hashes): sha256 (pickle, vLLM's default) "
                  "or sha256_cbor (canonical CBOR, language-independent); the same on every instance sharing KV "
                  "tiers or transfers (a KV-aware router reads it from /server_info)")
      ->capture_default_str();
  cmd->add_option("--kv-offload-secret-file", f->kv_offload_secret_file,
                  "file holding the deployment secret (>= 16 bytes) under which disk and Redis KV tier records "
                  "are authenticated (HMAC-SHA256); records without a valid MAC are refused and recomputed. "
                  "Use the same file on every instance sharing the tier");
  cmd->add_option("--cache-isolation", f->cache_isolation, kCacheIsolationHelp)->capture_default_str();
  cmd->add_option("--receipt-key", f->receipt_key,
                  "Ed25519 key file (64 hex digits; make one with `tessera receipt-keygen FILE`, mode 0600) that "
                  "signs every response's receipt; POST /v1/receipts/verify then checks signatures with it");
}

StatusOr<std::string> ReadKvOffloadSecret(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("serve: --kv-offload-secret-file " + path + ": cannot be read");
  std::string secret((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (secret.size() > (1u << 16)) return InvalidArgument("serve: --kv-offload-secret-file " + path + ": over 64 KiB");
  while (!secret.empty() && std::isspace(static_cast<unsigned char>(secret.back()))) secret.pop_back();
  if (secret.size() < 16) {
    return InvalidArgument("serve: --kv-offload-secret-file " + path + ": the secret must be at least 16 bytes");
  }
  return secret;
}

StatusOr<std::optional<SpeculativeConfig>> ValidateServeFlags(const ServeFlags& f) {
  for (const std::string& k : f.api_keys) {
    if (k.empty()) return InvalidArgument("serve: --api-key must not be empty");
  }
  if (f.host.empty()) return InvalidArgument("serve: --host must not be empty");
  if (f.port > 0 && f.port == f.grpc_port) {
    return InvalidArgument(fmt::format("serve: --port and --grpc-port are both {}; they need different ports", f.port));
  }
  if (f.role != "router" &&
      (!f.router.prefill_instances.empty() || !f.router.decode_instances.empty() || !f.router.instances_file.empty())) {
    return InvalidArgument("serve: --prefill-instances, --decode-instances and --instances-file need --role router");
  }
  if (auto rl = ParseRoutingLogic(f.router.routing_logic); !rl.ok()) return rl.status();
  if (f.role != "router" && (f.router.routing_logic != "load")) {
    return InvalidArgument("serve: --routing-logic needs --role router");
  }
  if (f.role != "router" && f.router.router_workers != RouterFlags().router_workers) {
    return InvalidArgument("serve: --router-workers needs --role router");
  }
  if (f.kv_peer_fetch && f.role != "unified") {
    return InvalidArgument("serve: --kv-peer-fetch is for --role unified (prefill and decode instances always run "
                           "KV transfer)");
  }
  if (f.kv_peer_fetch && f.device != "cpu") {
    return InvalidArgument("serve: --kv-peer-fetch needs --device cpu for now (the CUDA KV pool is not "
                           "registered with UCX)");
  }
  if (!f.tool_call_parser.empty()) {
    if (auto k = openai::tools::ToolParserFromName(f.tool_call_parser); !k.ok()) {
      return InvalidArgument("serve: --tool-call-parser: " + k.status().message());
    }
  }
  if (!f.reasoning_parser.empty()) {
    if (auto k = openai::tools::ReasoningParserFromName(f.reasoning_parser); !k.ok()) {
      return InvalidArgument("serve: --reasoning-parser: " + k.status().message());
    }
  }
  if (!f.tool_call_parser.empty() && !f.reasoning_parser.empty()) {  // the pair must read one format
    auto c = openai::tools::ResolveChatOutputConfig(*openai::tools::ToolParserFromName(f.tool_call_parser),
                                                    *openai::tools::ReasoningParserFromName(f.reasoning_parser),
                                                    /*chat_template=*/nullptr);
    if (!c.ok()) return InvalidArgument("serve: " + c.status().message());
  }
  if (!f.kv_events_config.empty()) {
    if (auto kc = kv_events::ParseKvEventsConfig(f.kv_events_config); !kc.ok()) return kc.status();
  }
  if (Status s = ValidateKvOffloadFlags(f); !s.ok()) return s;
  if (Status s = ValidateResponsesStoreFlags(f); !s.ok()) return s;
  if (Status s = ValidateUnauthenticatedTopology(f); !s.ok()) return s;
  if (Status s = ValidateKvSecurityFlags(f); !s.ok()) return s;
  StatusOr<parallel::EplbOptions> eplb = parallel::EplbFromFlags(f.enable_eplb, f.eplb_config, f.num_redundant_experts);
  if (!eplb.ok()) return InvalidArgument("serve: " + eplb.status().message());
  if (eplb->uses_map() && (f.tensor_parallel_size * f.data_parallel_size < 2 || !f.enable_expert_parallel)) {
    return InvalidArgument("serve: --enable-eplb / --num-redundant-experts need --enable-expert-parallel with "
                           "--tensor-parallel-size or --data-parallel-size > 1");
  }
  if (f.tensor_parallel_size * f.data_parallel_size > 1) {
    parallel::GroupOptions g;
    g.tensor_parallel_size = f.tensor_parallel_size;
    g.data_parallel_size = f.data_parallel_size;
    g.enable_expert_parallel = f.enable_expert_parallel;
    g.eplb = *eplb;
    if (auto so = parallel::ShardOptionsFor(g, 0); !so.ok()) return InvalidArgument("serve: " + so.status().message());
    if (f.device != "cpu") {
      return InvalidArgument("serve: --tensor-parallel-size / --data-parallel-size > 1 run on --device cpu for now");
    }
    if (f.role == "prefill" || f.role == "decode") {
      // KV transfer moves rank 0's pool only, which holds a slice of the heads under TP.
      return InvalidArgument("serve: --role " + f.role + " with more than one rank is not supported yet");
    }
  }
  std::optional<SpeculativeConfig> speculative;
  if (!f.speculative_config.empty()) {
    StatusOr<SpeculativeConfig> sc = ParseSpeculativeConfig(f.speculative_config);
    if (!sc.ok()) return sc.status();
    speculative = *sc;
  }
  return speculative;
}

StatusOr<std::vector<std::string>> CheckServeEnvironment(const ServeFlags& f,
                                                         const std::optional<SpeculativeConfig>& speculative) {
  std::vector<std::string> facts;
  addrinfo hints{};
  hints.ai_flags = AI_PASSIVE;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(f.host.c_str(), nullptr, &hints, &res); rc != 0) {
    return InvalidArgument(fmt::format("serve: cannot resolve --host {}: {}", f.host, gai_strerror(rc)));
  }
  freeaddrinfo(res);
  facts.push_back(fmt::format("--host {} resolves", f.host));
  if (!f.port_file.empty()) {
    const fs::path dir = fs::absolute(f.port_file).parent_path();
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      return NotFound(fmt::format("serve: --port-file {}: directory {} does not exist", f.port_file, dir.string()));
    }
  }
  if (f.device == "cuda" && !HaveBackend("cuda")) {
    return FailedPrecondition("serve: --device cuda: this tessera was built without CUDA; use --device cpu");
  }
  facts.push_back("--device " + f.device + " is built in");
  if (f.model.empty()) {
    facts.push_back("--model not given: the built-in synthetic default model (" + f.default_model_size + ")");
  } else {
    StatusOr<std::string> m = CheckModelPath("--model", f.model);
    if (!m.ok()) return m.status();
    facts.push_back(*m);
  }
  if (speculative && !speculative->model.empty()) {
    StatusOr<std::string> m = CheckModelPath("--speculative-config model", speculative->model);
    if (!m.ok()) return m.status();
    facts.push_back(*m);
  }
  return facts;
}

}  // namespace tessera

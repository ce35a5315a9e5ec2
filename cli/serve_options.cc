#include "cli/serve_options.h"

#include <algorithm>
#include <memory>
#include <utility>

#include <fmt/format.h>

#include "cli/default_model.h"
#include "engine/parallel/shard/rank_group.h"
#include "scheduler/block_hash.h"
#include "server/kv_events/kv_events_config.h"

namespace tessera {
namespace {

RouterServeOptions RouterFromFlags(const ServeFlags& f) {
  return {.host = f.host,
          .port = f.port,
          .port_file = f.port_file,
          .api_keys = f.api_keys,
          .max_body_bytes = f.max_body_bytes,
          .idle_timeout_s = f.idle_timeout_s,
          .drain_timeout_s = f.drain_timeout_s,
          .grpc_port = f.grpc_port,
          .max_pending_requests = f.max_pending_requests,
          .internal_api_key_file = f.internal_api_key_file,
          .internal_api_key = f.internal_api_key,
          .cache_isolation = f.cache_isolation,
          .flags = f.router};
}

// EplbFromFlags has been checked by ValidateServeFlags.
parallel::GroupOptions GroupFromFlags(const ServeFlags& f) {
  parallel::GroupOptions g;
  g.tensor_parallel_size = f.tensor_parallel_size;
  g.data_parallel_size = f.data_parallel_size;
  g.enable_expert_parallel = f.enable_expert_parallel;
  g.eplb = *parallel::EplbFromFlags(f.enable_eplb, f.eplb_config, f.num_redundant_experts);
  g.launch.nnodes = f.nnodes;
  g.launch.node_rank = f.node_rank;
  g.launch.leader_addr = f.leader_addr;
  g.timeout = std::chrono::milliseconds(static_cast<int64_t>(f.parallel_timeout_s * 1000));
  g.launch.timeout = g.timeout;
  return g;
}

EngineLoopOptions LoopFromFlags(const ServeFlags& f, std::optional<SpeculativeConfig> speculative,
                                const std::string& secret) {
  EngineLoopOptions l;
  l.num_threads = f.threads;
  l.kv_cache_bytes = f.kv_cache_mb << 20;
  l.kv_cache_bytes_set = f.kv_cache_mb_set;
  l.device = f.device;
  l.cuda.gpu_memory_utilization = f.gpu_memory_utilization;
  l.cuda.cuda_graphs = !f.enforce_eager;
  l.cuda.deterministic = f.deterministic;
  l.scheduler.kv.num_blocks = f.num_kv_blocks;
  l.scheduler.kv.hash_scheme = BlockHashScheme(*ParsePrefixHashAlgo(f.prefix_caching_hash_algo));  // validated
  l.scheduler.max_num_seqs = f.max_num_seqs;
  l.scheduler.max_num_batched_tokens = std::max<int64_t>(f.max_num_batched_tokens, f.max_num_seqs);
  l.max_step_ms = f.max_step_ms;
  l.scheduler.max_waiting_seqs = f.max_pending_requests * 16;  // admission is bounded by max_in_flight
  l.scheduler.retention = {.per_key_tokens = f.retention_per_key_tokens, .max_tokens = f.retention_max_tokens};
  l.scheduler.limits.max_model_len = f.max_model_len;  // 0: the model's max_position_embeddings
  l.scheduler.limits.max_logprobs = f.max_logprobs;
  l.scheduler.limits.max_prompt_logprobs_entries = f.max_prompt_logprobs_entries;
  l.speculative = std::move(speculative);
  l.parallel = GroupFromFlags(f);
  if (f.role == "prefill" || f.role == "decode" || f.kv_peer_fetch) {
    KvTransportOptions kt;
    kt.host = f.host;
    kt.port = f.kv_transfer_port;
    kt.ucx_tls = f.kv_ucx_tls;
    kt.internal_key = f.internal_api_key;
    kt.pin_timeout = std::chrono::milliseconds(static_cast<int64_t>(f.kv_pin_timeout_s * 1000));
    kt.fault = f.kv_transfer_fault;
    kt.pull_timeout = std::chrono::milliseconds(static_cast<int64_t>(f.kv_pull_timeout_s * 1000));
    l.kv_transfer = kt;
  }
  if (f.kv_offload_host_gb > 0 || !f.kv_offload_disk_dir.empty() || !f.kv_offload_remote_url.empty()) {
    KvTierOptions t;
    t.host_bytes = static_cast<int64_t>(f.kv_offload_host_gb * 1e9);
    t.disk_dir = f.kv_offload_disk_dir;
    if (f.kv_offload_disk_gb > 0) t.disk_bytes = static_cast<int64_t>(f.kv_offload_disk_gb * 1e9);
    t.remote_url = f.kv_offload_remote_url;
    t.secret = secret;
    l.kv_tiers = std::move(t);
  }
  return l;
}

// Speculative decoding runs on one rank of a unified instance. Refused where
// no test shows outputs equal to speculation off: through a rank group (a
// draft model would also run unsharded beside rank 0's shard), and on blocks
// pulled from a prefill or a peer (PD, --kv-peer-fetch), which bring the
// target's KV only, never the draft model's (docs/architecture.md,
// "Parallelism" and "Disaggregation").
Status CheckSpeculativeCombinations(const ServeFlags& f) {
  if (f.speculative_config.empty()) return Status::Ok();
  if (f.role != "unified") {
    return InvalidArgument("serve: --speculative-config with --role " + f.role +
                           " is not supported (speculative decoding runs on --role unified instances)");
  }
  if (f.kv_peer_fetch) {
    return InvalidArgument("serve: --speculative-config with --kv-peer-fetch is not supported (fetched blocks carry "
                           "no draft KV)");
  }
  if (f.tensor_parallel_size * f.data_parallel_size > 1) {
    return InvalidArgument(fmt::format(
        "serve: --speculative-config with --tensor-parallel-size {} / --data-parallel-size {}{} is not supported "
        "(speculative decoding runs on one rank)",
        f.tensor_parallel_size, f.data_parallel_size, f.enable_expert_parallel ? " --enable-expert-parallel" : ""));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ServeOptions> ServeOptionsFromFlags(const ServeFlags& f) {
  ASSIGN_OR_RETURN(std::optional<SpeculativeConfig> speculative, ValidateServeFlags(f));
  RETURN_IF_ERROR(CheckSpeculativeCombinations(f));
  ServeOptions o;
  o.role = f.role;
  if (f.role == "router") {
    if (!f.cost_model.empty()) return InvalidArgument("--cost-model: the router runs no engine steps to predict");
    if (f.ttft_slo_ms > 0) {
      return InvalidArgument("--ttft-slo-ms: the router runs no queue to predict; give it to the instances");
    }
    o.router = RouterFromFlags(f);
    return o;
  }
  o.model = f.model;
  o.default_model_size = f.default_model_size;
  o.served_model_name = f.served_model_name;
  // The internal key is one more API key: with it, an instance serves no
  // anonymous caller even without --api-key (its callers are the router).
  std::vector<std::string> keys = f.api_keys;
  if (!f.internal_api_key.empty()) keys.push_back(f.internal_api_key);
  o.internal_api_key = f.internal_api_key;
  o.http = {.host = f.host,
            .port = f.port,
            .body_limit = f.max_body_bytes,
            .idle_timeout = std::chrono::seconds(f.idle_timeout_s),
            .api_keys = keys};
  if (f.grpc_port >= 0) {
    o.grpc = GrpcServerOptions{
        .host = f.host,
        .port = f.grpc_port,
        .api_keys = keys,
        .internal_api_key = f.internal_api_key,
        .max_receive_message_bytes = static_cast<int>(std::min<uint64_t>(f.max_body_bytes, 1u << 30))};
  }
  o.port_file = f.port_file;
  o.request_timeout = std::chrono::seconds(f.request_timeout_s);
  o.drain_timeout = std::chrono::seconds(f.drain_timeout_s);
  std::string secret;
  if (!f.kv_offload_secret_file.empty()) {
    ASSIGN_OR_RETURN(secret, ReadKvOffloadSecret(f.kv_offload_secret_file));
  }
  o.serving.loop = LoopFromFlags(f, std::move(speculative), secret);
  o.serving.max_in_flight = f.max_pending_requests;
  o.serving.chat_content_special_tokens = f.chat_template_content_special_tokens;
  o.serving.cache_isolation = *ParseCacheIsolation(f.cache_isolation);  // validated
  o.serving.retention_ttl_scale = f.retention_ttl_scale;
  if (!f.cost_model.empty()) {
    ASSIGN_OR_RETURN(sim::LinearCostModel cost, sim::LinearCostModel::FromFile(f.cost_model));
    o.serving.step_cost_model = std::make_shared<sim::LinearCostModel>(cost);
    if (f.ttft_slo_ms > 0) {
      o.serving.ttft_slo = TtftSloOptions{.slo_ms = f.ttft_slo_ms,
                                          .model = std::make_shared<sim::LinearCostModel>(cost)};
    }
  }
  if (f.ttft_slo_ms > 0 && f.role == "decode") {
    return InvalidArgument("--ttft-slo-ms: a decode instance pulls its prompts' KV instead of computing them, so "
                           "the prediction does not hold there; give it to the prefill (or unified) instances");
  }
  if (f.ttft_slo_ms > 0 && f.cost_model.empty()) {
    return InvalidArgument("--ttft-slo-ms: needs --cost-model (the step-time model TTFT is predicted with; "
                           "`tessera calibrate` writes one)");
  }
  o.serving.receipt_key_file = f.receipt_key;
  if (StatusOr<std::string> home = TesseraHome(); home.ok()) o.serving.weights_digest_cache_dir = *home + "/weights-digests";
  if (!f.kv_events_config.empty()) {
    const kv_events::KvEventsConfig kc = *kv_events::ParseKvEventsConfig(f.kv_events_config);  // validated
    if (kc.enabled()) {
      kv_events::KvEventPublisherOptions po;
      po.config = kc;
      po.medium = f.device == "cuda" ? "GPU" : "CPU";
      po.host = f.host;
      if (!f.internal_api_key.empty()) po.curve = kv_events::KvEventCurveKeys::FromInternalKey(f.internal_api_key);
      o.kv_events = std::move(po);
    }
  }
  // Both names were checked by ValidateServeFlags.
  if (!f.tool_call_parser.empty()) o.tool_parser = *openai::tools::ToolParserFromName(f.tool_call_parser);
  if (!f.reasoning_parser.empty()) o.reasoning_parser = *openai::tools::ReasoningParserFromName(f.reasoning_parser);
  o.cache_control_retain = f.cache_control != "refuse";
  o.responses_store_bytes = static_cast<size_t>(f.responses_store_mb) << 20;
  if (!f.record.empty()) {
    if (f.role != "unified" && f.role != "decode") {
      return InvalidArgument("--record: records what a unified or decode instance answers; --role is " + f.role);
    }
    o.record.dir = f.record;
    o.record.max_bytes = static_cast<uint64_t>(f.record_max_mb * 1024 * 1024);
  }
  o.responses_store_url = f.responses_store_url;
  o.responses_store_ttl_s = f.responses_store_ttl_s > 0 ? f.responses_store_ttl_s : int64_t{30} * 86400;
  return o;
}

}  // namespace tessera

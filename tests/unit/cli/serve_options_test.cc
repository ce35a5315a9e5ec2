// `tessera serve`'s pure step: command lines parsed by the real flag
// registration (AddServeFlags), then ServeOptionsFromFlags. Defaults, what
// each flag turns into, and the refused combinations with their messages
// (which name the flag; they are what users read, so they are compared whole).
#include "cli/serve_options.h"

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <gtest/gtest.h>

namespace tessera {
namespace {

// Parses `args` as `tessera serve` would (without --config and --check-config).
ServeFlags Parse(std::vector<std::string> args) {
  CLI::App app;
  ServeFlags f;
  AddServeFlags(&app, &f);
  std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first
  app.parse(args);
  return f;
}

StatusOr<ServeOptions> FromArgs(std::vector<std::string> args) { return ServeOptionsFromFlags(Parse(std::move(args))); }

// The message of a refused command line (empty when it was accepted).
std::string Refusal(std::vector<std::string> args) {
  StatusOr<ServeOptions> o = FromArgs(std::move(args));
  if (o.ok()) return "";
  EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument) << o.status().ToString();
  return o.status().message();
}

TEST(ServeOptionsTest, Defaults) {
  StatusOr<ServeOptions> o = FromArgs({});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->role, "unified");
  EXPECT_EQ(o->model, "");
  EXPECT_EQ(o->default_model_size, "0.5b");
  EXPECT_EQ(o->served_model_name, "");
  EXPECT_EQ(o->http.host, "127.0.0.1");
  EXPECT_EQ(o->http.port, 8000);
  EXPECT_EQ(o->http.body_limit, uint64_t{8} << 20);
  EXPECT_EQ(o->http.idle_timeout, std::chrono::seconds(60));
  EXPECT_TRUE(o->http.api_keys.empty());
  ASSERT_TRUE(o->grpc.has_value());
  EXPECT_EQ(o->grpc->host, "127.0.0.1");
  EXPECT_EQ(o->grpc->port, 50051);
  EXPECT_EQ(o->grpc->max_receive_message_bytes, 8 << 20);
  EXPECT_EQ(o->port_file, "");
  EXPECT_EQ(o->request_timeout, std::chrono::seconds(600));
  EXPECT_EQ(o->drain_timeout, std::chrono::seconds(30));

  const EngineLoopOptions& l = o->serving.loop;
  EXPECT_EQ(l.model_dir, "");  // known when the role starts
  EXPECT_EQ(l.device, "cpu");
  EXPECT_EQ(l.num_threads, 0);
  EXPECT_EQ(l.kv_cache_bytes, int64_t{1024} << 20);
  EXPECT_FALSE(l.kv_cache_bytes_set);
  EXPECT_EQ(l.cuda.gpu_memory_utilization, 0.9);
  EXPECT_TRUE(l.cuda.cuda_graphs);
  EXPECT_FALSE(l.cuda.deterministic);
  EXPECT_EQ(l.scheduler.kv.num_blocks, 0);
  EXPECT_EQ(l.scheduler.kv.event_sink, nullptr);  // set when the role starts
  EXPECT_EQ(l.scheduler.max_num_seqs, 64);
  EXPECT_EQ(l.scheduler.max_num_batched_tokens, 2048);
  EXPECT_EQ(l.scheduler.max_waiting_seqs, 1024 * 16);
  EXPECT_EQ(l.scheduler.limits.max_model_len, 0);
  EXPECT_EQ(l.max_step_ms, 250);
  EXPECT_FALSE(l.speculative.has_value());
  EXPECT_FALSE(l.kv_transfer.has_value());
  EXPECT_FALSE(l.kv_tiers.has_value());
  EXPECT_EQ(l.parallel.world_size(), 1);
  EXPECT_EQ(l.parallel.timeout, std::chrono::milliseconds(60000));
  EXPECT_EQ(o->serving.max_in_flight, 1024);
  EXPECT_EQ(o->serving.metrics, nullptr);
  EXPECT_FALSE(o->serving.chat_content_special_tokens);  // client special-token text stays plain text

  EXPECT_FALSE(o->kv_events.has_value());
  EXPECT_FALSE(o->tool_parser.has_value());
  EXPECT_EQ(o->reasoning_parser, openai::tools::ReasoningParserKind::kNone);
  EXPECT_TRUE(o->cache_control_retain);  // Anthropic cache_control retains
  EXPECT_EQ(o->serving.loop.scheduler.retention.max_tokens, -1);  // half the pool, resolved by the scheduler
  EXPECT_EQ(o->serving.loop.scheduler.retention.per_key_tokens, -1);
  EXPECT_EQ(o->serving.retention_ttl_scale, 1.0);
  EXPECT_EQ(o->responses_store_bytes, size_t{256} << 20);
}

TEST(ServeOptionsTest, FlagsReachTheirOptions) {
  StatusOr<ServeOptions> o =
      FromArgs({"--model", "/m", "--served-model-name", "m1", "--host", "0.0.0.0", "--port", "0", "--grpc-port",
                "0", "--api-key", "k", "--threads", "3", "--max-model-len", "4096", "--num-kv-blocks", "77",
                "--max-num-seqs", "8", "--max-num-batched-tokens", "512", "--max-step-ms", "0",
                "--max-pending-requests", "10", "--request-timeout", "0", "--drain-timeout", "5",
                "--max-body-bytes", "4096", "--idle-timeout", "7", "--port-file", "/tmp/p.json",
                "--enforce-eager", "--deterministic", "--gpu-memory-utilization", "0.5"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->model, "/m");
  EXPECT_EQ(o->served_model_name, "m1");
  EXPECT_EQ(o->http.host, "0.0.0.0");
  EXPECT_EQ(o->http.port, 0);
  EXPECT_EQ(o->http.api_keys, std::vector<std::string>{"k"});
  EXPECT_EQ(o->http.body_limit, 4096u);
  EXPECT_EQ(o->http.idle_timeout, std::chrono::seconds(7));
  ASSERT_TRUE(o->grpc.has_value());
  EXPECT_EQ(o->grpc->host, "0.0.0.0");
  EXPECT_EQ(o->grpc->port, 0);
  EXPECT_EQ(o->grpc->api_keys, std::vector<std::string>{"k"});
  EXPECT_EQ(o->grpc->max_receive_message_bytes, 4096);
  EXPECT_EQ(o->port_file, "/tmp/p.json");
  EXPECT_EQ(o->request_timeout, std::chrono::seconds(0));
  EXPECT_EQ(o->drain_timeout, std::chrono::seconds(5));
  const EngineLoopOptions& l = o->serving.loop;
  EXPECT_EQ(l.num_threads, 3);
  EXPECT_EQ(l.scheduler.limits.max_model_len, 4096);
  EXPECT_EQ(l.scheduler.kv.num_blocks, 77);
  EXPECT_EQ(l.scheduler.max_num_seqs, 8);
  EXPECT_EQ(l.scheduler.max_num_batched_tokens, 512);
  EXPECT_EQ(l.max_step_ms, 0);
  EXPECT_EQ(l.scheduler.max_waiting_seqs, 160);
  EXPECT_EQ(o->serving.max_in_flight, 10);
  EXPECT_FALSE(l.cuda.cuda_graphs);
  EXPECT_TRUE(l.cuda.deterministic);
  EXPECT_EQ(l.cuda.gpu_memory_utilization, 0.5);
}

TEST(ServeOptionsTest, KvCacheMbCountsAsGivenOnlyWhenGiven) {
  StatusOr<ServeOptions> o = FromArgs({"--kv-cache-mb", "1024"});  // the default value, but given
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o->serving.loop.kv_cache_bytes_set);
  EXPECT_EQ(o->serving.loop.kv_cache_bytes, int64_t{1024} << 20);
  o = FromArgs({"--kv-cache-mb", "64"});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->serving.loop.kv_cache_bytes, int64_t{64} << 20);
}

TEST(ServeOptionsTest, StepTokensAreAtLeastTheSequences) {
  StatusOr<ServeOptions> o = FromArgs({"--max-num-seqs", "100", "--max-num-batched-tokens", "16"});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->serving.loop.scheduler.max_num_batched_tokens, 100);
}

TEST(ServeOptionsTest, NoGrpcAndTheGrpcMessageCap) {
  StatusOr<ServeOptions> o = FromArgs({"--grpc-port", "-1"});
  ASSERT_TRUE(o.ok());
  EXPECT_FALSE(o->grpc.has_value());
  o = FromArgs({"--max-body-bytes", std::to_string(uint64_t{1} << 30)});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->grpc->max_receive_message_bytes, 1 << 30);
}

TEST(ServeOptionsTest, RouterRoleTakesOnlyRouterOptions) {
  StatusOr<ServeOptions> o =
      FromArgs({"--role", "router", "--host", "0.0.0.0", "--port", "9000", "--grpc-port", "9001", "--port-file",
                "/tmp/r.json", "--api-key", "k", "--max-body-bytes", "2048", "--idle-timeout", "9",
                "--drain-timeout", "4", "--prefill-instances", "a:1", "--decode-instances", "b:2",
                "--routing-logic", "kv-aware", "--max-pending-requests", "7", "--router-workers", "3"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->role, "router");
  const RouterServeOptions& r = o->router;
  EXPECT_EQ(r.host, "0.0.0.0");
  EXPECT_EQ(r.port, 9000);
  EXPECT_EQ(r.grpc_port, 9001);
  EXPECT_EQ(r.port_file, "/tmp/r.json");
  EXPECT_EQ(r.api_keys, std::vector<std::string>{"k"});
  EXPECT_EQ(r.max_body_bytes, 2048u);
  EXPECT_EQ(r.idle_timeout_s, 9);
  EXPECT_EQ(r.drain_timeout_s, 4);
  EXPECT_EQ(r.flags.prefill_instances, std::vector<std::string>{"a:1"});
  EXPECT_EQ(r.flags.decode_instances, std::vector<std::string>{"b:2"});
  EXPECT_EQ(r.flags.routing_logic, "kv-aware");
  EXPECT_EQ(r.max_pending_requests, 7);
  EXPECT_EQ(r.flags.router_workers, 3);
  // Nothing of an instance is set up for the router.
  EXPECT_EQ(o->http.port, HttpServerOptions().port);
  EXPECT_FALSE(o->grpc.has_value());
}

// As the command hands them over: the key read from --internal-api-key-file.
StatusOr<ServeOptions> WithKey(std::vector<std::string> args, const std::string& key = "deployment-key-0123456789") {
  ServeFlags f = Parse(std::move(args));
  f.internal_api_key = key;
  return ServeOptionsFromFlags(f);
}

TEST(ServeOptionsTest, DisaggregatedRolesAndPeerFetchRunKvTransfer) {
  for (const std::string role : {"prefill", "decode"}) {
    StatusOr<ServeOptions> o = WithKey({"--role", role, "--host", "10.0.0.1", "--kv-transfer-port", "7000",
                                        "--kv-ucx-tls", "tcp,self", "--kv-pin-timeout", "2.5",
                                        "--kv-pull-timeout", "0.25"});
    ASSERT_TRUE(o.ok()) << role << ": " << o.status().ToString();
    EXPECT_EQ(o->role, role);
    ASSERT_TRUE(o->serving.loop.kv_transfer.has_value()) << role;
    const KvTransportOptions& kt = *o->serving.loop.kv_transfer;
    EXPECT_EQ(kt.host, "10.0.0.1");
    EXPECT_EQ(kt.port, 7000);
    EXPECT_EQ(kt.ucx_tls, "tcp,self");
    EXPECT_EQ(kt.pin_timeout, std::chrono::milliseconds(2500));
    EXPECT_EQ(kt.pull_timeout, std::chrono::milliseconds(250));
    EXPECT_EQ(kt.internal_key, "deployment-key-0123456789");
  }
  StatusOr<ServeOptions> o = FromArgs({"--kv-peer-fetch"});
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o->serving.loop.kv_transfer.has_value());
}

TEST(ServeOptionsTest, TheInternalKeyIsAnApiKeyAndKeysEverything) {
  StatusOr<ServeOptions> o = WithKey({"--api-key", "client", "--kv-events-config",
                                      R"({"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557"})"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->internal_api_key, "deployment-key-0123456789");
  EXPECT_EQ(o->http.api_keys, (std::vector<std::string>{"client", "deployment-key-0123456789"}));
  ASSERT_TRUE(o->grpc.has_value());
  EXPECT_EQ(o->grpc->api_keys, o->http.api_keys);
  EXPECT_EQ(o->grpc->internal_api_key, "deployment-key-0123456789");
  ASSERT_TRUE(o->kv_events.has_value() && o->kv_events->curve.has_value());
  EXPECT_EQ(o->kv_events->host, "127.0.0.1");
  // Alone, the internal key still closes the API to anonymous callers.
  o = WithKey({});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->http.api_keys, std::vector<std::string>{"deployment-key-0123456789"});
  o = WithKey({"--role", "router"});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->router.internal_api_key, "deployment-key-0123456789");
  o = FromArgs({});
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o->http.api_keys.empty());
  EXPECT_FALSE(o->grpc->internal_api_key.size());
}

TEST(ServeOptionsTest, WithoutTheInternalKeyKvAndEventsStayOnLoopback) {
  EXPECT_EQ(Refusal({"--role", "decode", "--host", "0.0.0.0"}),
            "serve: --role decode on --host 0.0.0.0 needs --internal-api-key-file: without it the KV transfer "
            "control plane and kv_transfer_params are unauthenticated, so they are served on loopback only");
  EXPECT_EQ(Refusal({"--kv-peer-fetch", "--host", "10.0.0.1"}).rfind("serve: --kv-peer-fetch on --host 10.0.0.1 "
                                                                     "needs --internal-api-key-file", 0),
            0u);
  const std::string events = R"({"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557"})";
  EXPECT_EQ(Refusal({"--host", "0.0.0.0", "--kv-events-config", events}),
            "serve: --kv-events-config endpoint tcp://*:5557 (with --host 0.0.0.0) leaves this machine and needs "
            "--internal-api-key-file: KV events carry prompt token ids, so without it they are sent on loopback or "
            "ipc:// only");
  EXPECT_NE(Refusal({"--kv-events-config", R"({"enable_kv_cache_events": true, "publisher": "zmq",
                                               "endpoint": "tcp://10.0.0.5:5557"})"}),
            "");
  // Loopback, or the key: accepted.
  EXPECT_EQ(Refusal({"--role", "prefill", "--host", "127.0.0.1"}), "");
  EXPECT_EQ(Refusal({"--role", "decode", "--host", "::1"}), "");
  EXPECT_EQ(Refusal({"--kv-events-config", events}), "");
  EXPECT_EQ(Refusal({"--role", "router", "--host", "0.0.0.0"}), "");
  EXPECT_TRUE(WithKey({"--role", "decode", "--host", "0.0.0.0", "--kv-events-config", events}).ok());
}

TEST(ServeOptionsTest, KvTiers) {
  StatusOr<ServeOptions> o = FromArgs({"--kv-offload-host-gb", "2.5", "--kv-offload-disk-dir", "/d"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  ASSERT_TRUE(o->serving.loop.kv_tiers.has_value());
  EXPECT_EQ(o->serving.loop.kv_tiers->host_bytes, 2500000000);
  EXPECT_EQ(o->serving.loop.kv_tiers->disk_dir, "/d");
  EXPECT_EQ(o->serving.loop.kv_tiers->disk_bytes, int64_t{10} << 30);  // the store's default
  o = FromArgs({"--kv-offload-disk-dir", "/d", "--kv-offload-disk-gb", "3",
                "--kv-offload-remote-url", "redis://h:6379/2"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->serving.loop.kv_tiers->disk_bytes, 3000000000);
  EXPECT_EQ(o->serving.loop.kv_tiers->remote_url, "redis://h:6379/2");
  EXPECT_EQ(o->serving.loop.kv_tiers->host_bytes, 0);
}

TEST(ServeOptionsTest, HashAlgoSecretAndCacheIsolation) {
  const std::string secret = ::testing::TempDir() + "/kv-secret";
  {
    std::ofstream out(secret);
    out << "0123456789abcdef-secret\n";
  }
  StatusOr<ServeOptions> o = FromArgs({"--prefix-caching-hash-algo", "sha256_cbor", "--kv-offload-remote-url",
                                       "redis://h:6379", "--kv-offload-secret-file", secret, "--api-key", "k",
                                       "--cache-isolation", "api-key"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->serving.loop.scheduler.kv.hash_scheme.algo(), PrefixHashAlgo::kSha256Cbor);
  EXPECT_EQ(o->serving.loop.kv_tiers->secret, "0123456789abcdef-secret");  // trailing newline trimmed
  EXPECT_EQ(o->serving.cache_isolation, CacheIsolation::kApiKey);
  o = FromArgs({});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->serving.loop.scheduler.kv.hash_scheme.algo(), PrefixHashAlgo::kSha256);  // vLLM's default
  EXPECT_EQ(o->serving.cache_isolation, CacheIsolation::kNone);
  o = FromArgs({"--role", "router", "--decode-instances", "a:1", "--api-key", "k", "--cache-isolation", "api-key"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->router.cache_isolation, "api-key");

  EXPECT_EQ(FromArgs({"--kv-offload-disk-dir", "/d", "--kv-offload-secret-file", secret + "-missing"}).status().code(),
            StatusCode::kNotFound);
  {
    std::ofstream out(secret);
    out << "short\n";
  }
  EXPECT_EQ(Refusal({"--kv-offload-disk-dir", "/d", "--kv-offload-secret-file", secret}),
            "serve: --kv-offload-secret-file " + secret + ": the secret must be at least 16 bytes");
  EXPECT_EQ(Refusal({"--kv-offload-secret-file", secret}),
            "serve: --kv-offload-secret-file needs --kv-offload-disk-dir or --kv-offload-remote-url");
  EXPECT_EQ(Refusal({"--prefix-caching-hash-algo", "builtin"}),
            "serve: --prefix-caching-hash-algo: unknown prefix-caching hash algorithm 'builtin' (expected sha256 or "
            "sha256_cbor)");
  EXPECT_EQ(Refusal({"--cache-isolation", "api-key"}),
            "serve: --cache-isolation api-key needs --api-key (each key is a cache namespace)");
  EXPECT_EQ(Refusal({"--cache-isolation", "tenant"}),
            "serve: --cache-isolation must be none, api-key or salt, got 'tenant'");
  EXPECT_EQ(Refusal({"--role", "router", "--cache-isolation", "salt"}),
            "serve: --cache-isolation salt is enforced by the instances, not --role router");
}

TEST(ServeOptionsTest, SpeculativeParallelParsersAndKvEvents) {
  StatusOr<ServeOptions> o = FromArgs(
      {"--speculative-config", R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4})",
       "--tool-call-parser", "hermes", "--chat-template-content-special-tokens",
       "--reasoning-parser", "qwen3", "--cache-control", "refuse", "--responses-store-mb", "3",
       "--retention-max-tokens", "4096", "--retention-per-key-tokens", "1024", "--retention-ttl-scale", "0.01",
       "--kv-events-config",
       R"({"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557", "topic": "kv"})"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  ASSERT_TRUE(o->serving.loop.speculative.has_value());
  EXPECT_EQ(o->serving.loop.speculative->num_speculative_tokens, 3);
  EXPECT_EQ(o->serving.loop.speculative->prompt_lookup_max, 4);
  EXPECT_EQ(o->tool_parser, openai::tools::ToolParserKind::kHermes);
  EXPECT_EQ(o->reasoning_parser, openai::tools::ReasoningParserKind::kQwen3);
  EXPECT_FALSE(o->cache_control_retain);
  EXPECT_EQ(o->serving.loop.scheduler.retention.max_tokens, 4096);
  EXPECT_EQ(o->serving.loop.scheduler.retention.per_key_tokens, 1024);
  EXPECT_DOUBLE_EQ(o->serving.retention_ttl_scale, 0.01);
  EXPECT_EQ(o->responses_store_bytes, size_t{3} << 20);
  EXPECT_EQ(o->responses_store_url, "");
  StatusOr<ServeOptions> shared = FromArgs({"--responses-store-url", "redis://127.0.0.1:6379/2"});
  ASSERT_TRUE(shared.ok()) << shared.status().ToString();
  EXPECT_EQ(shared->responses_store_url, "redis://127.0.0.1:6379/2");
  EXPECT_EQ(shared->responses_store_ttl_s, int64_t{30} * 86400);  // OpenAI's 30 days
  shared = FromArgs({"--responses-store-url", "redis://h:1", "--responses-store-ttl-s", "60"});
  ASSERT_TRUE(shared.ok()) << shared.status().ToString();
  EXPECT_EQ(shared->responses_store_ttl_s, 60);
  EXPECT_EQ(Refusal({"--responses-store-ttl-s", "60"}), "serve: --responses-store-ttl-s needs --responses-store-url");
  EXPECT_NE(Refusal({"--responses-store-url", "http://h:1"}).find("--responses-store-url"), std::string::npos);
  EXPECT_TRUE(o->serving.chat_content_special_tokens);
  // Harmony is one parser for both: its flag beside another format's is refused, naming both.
  EXPECT_NE(Refusal({"--tool-call-parser", "hermes", "--reasoning-parser", "openai_gptoss"}).find("--tool-call-parser hermes"),
            std::string::npos);
  EXPECT_EQ(Refusal({"--tool-call-parser", "openai", "--reasoning-parser", "openai_gptoss"}), "");
  EXPECT_EQ(Refusal({"--tool-call-parser", "deepseek_v3", "--reasoning-parser", "deepseek_r1"}), "");
  ASSERT_TRUE(o->kv_events.has_value());
  EXPECT_EQ(o->kv_events->config.topic, "kv");
  EXPECT_EQ(o->kv_events->medium, "CPU");
  // A config that leaves events off starts no publisher.
  o = FromArgs({"--kv-events-config", R"({"enable_kv_cache_events": false})"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_FALSE(o->kv_events.has_value());
  o = FromArgs({"--tensor-parallel-size", "2", "--parallel-timeout", "1.5"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->serving.loop.parallel.tensor_parallel_size, 2);
  EXPECT_EQ(o->serving.loop.parallel.timeout, std::chrono::milliseconds(1500));
  EXPECT_EQ(o->serving.loop.parallel.launch.timeout, std::chrono::milliseconds(1500));
}

// Speculation runs on one rank of a unified instance; every other placement
// is refused at start, naming the flags (no exactness test covers them).
TEST(ServeOptionsTest, SpeculationOutsideOneUnifiedRankIsRefused) {
  const std::string spec = R"({"method": "ngram", "num_speculative_tokens": 2})";
  const std::string draft = R"({"method": "draft_model", "model": "/d", "num_speculative_tokens": 2})";
  for (const std::string role : {"prefill", "decode", "router"}) {
    EXPECT_EQ(Refusal({"--speculative-config", spec, "--role", role}),
              "serve: --speculative-config with --role " + role +
                  " is not supported (speculative decoding runs on --role unified instances)");
  }
  EXPECT_EQ(Refusal({"--speculative-config", draft, "--role", "decode"}),
            "serve: --speculative-config with --role decode is not supported (speculative decoding runs on "
            "--role unified instances)");
  EXPECT_EQ(Refusal({"--speculative-config", spec, "--kv-peer-fetch"}),
            "serve: --speculative-config with --kv-peer-fetch is not supported (fetched blocks carry no draft KV)");
  EXPECT_EQ(Refusal({"--speculative-config", spec, "--tensor-parallel-size", "2"}),
            "serve: --speculative-config with --tensor-parallel-size 2 / --data-parallel-size 1 is not supported "
            "(speculative decoding runs on one rank)");
  EXPECT_EQ(Refusal({"--speculative-config", draft, "--data-parallel-size", "2", "--enable-expert-parallel"}),
            "serve: --speculative-config with --tensor-parallel-size 1 / --data-parallel-size 2 "
            "--enable-expert-parallel is not supported (speculative decoding runs on one rank)");
  // One rank of a unified instance keeps speculation, expert parallel flag or not.
  EXPECT_EQ(Refusal({"--speculative-config", spec}), "");
  EXPECT_EQ(Refusal({"--speculative-config", draft}), "");
  EXPECT_EQ(Refusal({"--speculative-config", spec, "--enable-expert-parallel"}), "");
}

TEST(ServeOptionsTest, RefusedCombinationsNameTheFlag) {
  EXPECT_EQ(Refusal({"--api-key", ""}), "serve: --api-key must not be empty");
  EXPECT_EQ(Refusal({"--host", ""}), "serve: --host must not be empty");
  EXPECT_EQ(Refusal({"--port", "9000", "--grpc-port", "9000"}),
            "serve: --port and --grpc-port are both 9000; they need different ports");
  EXPECT_EQ(Refusal({"--prefill-instances", "a:1"}),
            "serve: --prefill-instances, --decode-instances and --instances-file need --role router");
  EXPECT_EQ(Refusal({"--routing-logic", "round-robin"}), "serve: --routing-logic needs --role router");
  EXPECT_EQ(Refusal({"--router-workers", "8"}), "serve: --router-workers needs --role router");
  EXPECT_EQ(Refusal({"--role", "prefill", "--kv-peer-fetch"}),
            "serve: --kv-peer-fetch is for --role unified (prefill and decode instances always run KV transfer)");
  EXPECT_EQ(Refusal({"--device", "cuda", "--kv-peer-fetch"}),
            "serve: --kv-peer-fetch needs --device cpu for now (the CUDA KV pool is not registered with UCX)");
  EXPECT_EQ(Refusal({"--kv-offload-disk-gb", "1"}), "serve: --kv-offload-disk-gb needs --kv-offload-disk-dir");
  EXPECT_EQ(Refusal({"--kv-offload-host-gb", "-1"}), "serve: --kv-offload-host-gb must be >= 0");
  EXPECT_EQ(Refusal({"--role", "router", "--kv-offload-host-gb", "1"}),
            "serve: --kv-offload-* need a model (not --role router)");
  EXPECT_EQ(Refusal({"--tensor-parallel-size", "2", "--kv-offload-host-gb", "1"}),
            "serve: --kv-offload-* with more than one rank is not supported yet");
  EXPECT_EQ(Refusal({"--enable-eplb"}),
            "serve: --enable-eplb / --num-redundant-experts need --enable-expert-parallel with "
            "--tensor-parallel-size or --data-parallel-size > 1");
  EXPECT_EQ(Refusal({"--tensor-parallel-size", "2", "--device", "cuda"}),
            "serve: --tensor-parallel-size / --data-parallel-size > 1 run on --device cpu for now");
  EXPECT_EQ(Refusal({"--role", "decode", "--tensor-parallel-size", "2"}),
            "serve: --role decode with more than one rank is not supported yet");
  EXPECT_EQ(Refusal({"--speculative-config", "[]"}).rfind("--speculative-config: ", 0), 0u);
  EXPECT_EQ(Refusal({"--kv-events-config", "[]"}), "--kv-events-config: must be a JSON object");
  EXPECT_EQ(Refusal({"--kv-offload-remote-url", "http://x"}).rfind("serve: --kv-offload-remote-url ", 0), 0u);
  // The same flags alone are accepted: the refusals above are the combinations.
  EXPECT_EQ(Refusal({"--role", "router", "--prefill-instances", "a:1", "--routing-logic", "round-robin"}), "");
  EXPECT_EQ(Refusal({"--kv-peer-fetch"}), "");
  EXPECT_EQ(Refusal({"--kv-offload-disk-dir", "/d", "--kv-offload-disk-gb", "1"}), "");
  EXPECT_EQ(Refusal({"--tensor-parallel-size", "2"}), "");
  EXPECT_EQ(Refusal({"--device", "cuda"}), "");  // whether this binary has CUDA is checked when it starts
}

TEST(ServeOptionsTest, TtftSloTakesTheCostModelsCoefficients) {
  const std::string cost = ::testing::TempDir() + "/ttft-slo-cost.json";
  {
    std::ofstream out(cost);
    out << R"({"model": "linear", "version": 1, "per_prefill_token_ms": 0.25})";
  }
  StatusOr<ServeOptions> o = FromArgs({"--cost-model", cost, "--ttft-slo-ms", "750"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  ASSERT_TRUE(o->serving.ttft_slo.has_value());
  EXPECT_EQ(o->serving.ttft_slo->slo_ms, 750);
  EXPECT_EQ(o->serving.ttft_slo->model->coefficients().per_prefill_token_ms, 0.25);
  StatusOr<ServeOptions> off = FromArgs({"--cost-model", cost});
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_FALSE(off->serving.ttft_slo.has_value());  // a cost model alone predicts steps, refuses nothing
  EXPECT_EQ(Refusal({"--ttft-slo-ms", "750"}),
            "--ttft-slo-ms: needs --cost-model (the step-time model TTFT is predicted with; `tessera calibrate` "
            "writes one)");
  EXPECT_EQ(Refusal({"--role", "router", "--ttft-slo-ms", "750"}),
            "--ttft-slo-ms: the router runs no queue to predict; give it to the instances");
}

TEST(ServeOptionsTest, SingleValuesAreRefusedByTheParserNamingTheFlag) {
  const std::vector<std::vector<std::string>> bad = {
      {"--port", "70000"},       {"--device", "tpu"},          {"--role", "proxy"},
      {"--max-num-seqs", "0"},   {"--kv-cache-mb", "0"},       {"--gpu-memory-utilization", "2"},
      {"--tool-call-parser", "x"}, {"--idle-timeout", "0"},    {"--grpc-port", "-2"},
  };
  for (const std::vector<std::string>& args : bad) {
    try {
      Parse(args);
      ADD_FAILURE() << args[0] << " " << args[1] << " was accepted";
    } catch (const CLI::ParseError& e) {
      EXPECT_NE(std::string(e.what()).find(args[0]), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tessera

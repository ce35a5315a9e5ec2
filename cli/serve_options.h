// `tessera serve` between parsing and running (docs/architecture.md, "Server"):
// ServeOptionsFromFlags turns the settings into the options of everything the
// chosen role starts. It is pure: it checks the values and combinations
// (ValidateServeFlags; every error names the flag) and builds the options
// structs, but opens no file or socket, starts no thread, reads no environment
// and loads no model. What needs the machine ($TESSERA_API_KEY, the parallel
// group's environment, the device, the model directory) is read by the command
// before this step or by RunServe (serve_run.h) when it starts the role.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "cli/serve_flags.h"
#include "common/status.h"
#include "server/record/request_log.h"
#include "server/grpc/grpc_server.h"
#include "server/http/http_server.h"
#include "server/kv_events/kv_event_publisher.h"
#include "server/openai/tool_calls/chat_output.h"
#include "server/router/router.h"
#include "server/serving/serving_engine.h"

namespace tessera {

struct ServeOptions {
  std::string role = "unified";  // unified | prefill | decode | router

  // role "router": everything the router takes (nothing below is set).
  RouterServeOptions router;

  // The instance roles (unified, prefill, decode).
  std::string model;               // --model; "": the built-in synthetic model
  std::string default_model_size;  // of the built-in model
  std::string served_model_name;   // "": the model directory's name, known when it starts
  HttpServerOptions http;  // api_keys: --api-key and the internal key
  // --internal-api-key-file's key ("" : none): the only credential that may
  // carry kv_transfer_params (docs/architecture.md, "Threat model").
  std::string internal_api_key;
  std::optional<GrpcServerOptions> grpc;  // nullopt: --grpc-port -1
  std::string port_file;
  std::chrono::seconds request_timeout{0};  // 0: no limit
  std::chrono::seconds drain_timeout{0};
  // The engine, all but what is known only when it starts: serving.loop.model_dir
  // (the default model may have to be made first), serving.served_model_name,
  // serving.metrics and serving.loop.scheduler.kv.event_sink.
  // serving.loop.parallel is the group; ranks other than 0 run serving.loop's
  // model and threads as workers.
  ServingOptions serving;
  // Set when --kv-events-config enables events; the publisher binds when the role starts.
  std::optional<kv_events::KvEventPublisherOptions> kv_events;
  // Chat output parsing; tool_parser nullopt: the format the model's chat
  // template teaches (known once the model is loaded).
  std::optional<openai::tools::ToolParserKind> tool_parser;
  openai::tools::ReasoningParserKind reasoning_parser = openai::tools::ReasoningParserKind::kNone;
  bool cache_control_retain = true;  // --cache-control retain (or best-effort); false: refuse
  size_t responses_store_bytes = 0;        // --responses-store-mb, in bytes
  // --record (server/record/request_log.h); dir "" : off.
  record::RequestLogOptions record;
  std::string responses_store_url;         // --responses-store-url ("": in memory)
  int64_t responses_store_ttl_s = 0;       // --responses-store-ttl-s
};

StatusOr<ServeOptions> ServeOptionsFromFlags(const ServeFlags& flags);

}  // namespace tessera

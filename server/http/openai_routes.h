// The routes of `tessera serve`: /health, /ready, /v1/models, /v1/completions.
//
// Handlers run on io threads, validate, and hand generation to the
// EngineWorker; the engine's completion callback posts back to the
// connection's strand, where the response is built (detokenizing there, never
// on the engine thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "server/http/byte_level_decoder.h"
#include "server/http/engine_worker.h"
#include "server/http/http_server.h"

namespace tessera {

// Shared by all handlers; must outlive the io_context's handlers.
struct ServeContext {
  EngineWorker* engine = nullptr;      // not owned
  HttpServer* server = nullptr;        // not owned
  std::string served_model_name;       // immutable after startup
  int64_t created = 0;                 // unix seconds, for /v1/models
  // Set on the engine thread before the engine turns ready (and so published
  // to io threads by EngineWorker::state()); null when the checkpoint's
  // tokenizer.json is not byte-level BPE, in which case `text` is empty.
  std::unique_ptr<ByteLevelDecoder> decoder;
};

void RegisterOpenAiRoutes(ServeContext* ctx);

}  // namespace tessera

// `tessera serve`'s start and drain (docs/architecture.md, "Server"): runs the
// role a ServeOptions describes until SIGINT/SIGTERM, then drains it.
//
// Instance roles (unified, prefill, decode): bind the listeners and answer
// /health and /ready at once, then load the model (synthesising the default one
// on first run) and warm up on a loader thread; /ready turns 200 when that is
// done. A signal drains: /ready and new requests get 503 at once, in-flight ones
// finish (those still running at the drain timeout end with finish_reason
// "abort"), exit 0; a second signal exits 1 at once. Ranks other than 0 of a
// multi-process group serve no API and run the leader's plans. The router role
// is RunRouter (server/router/router.h).
#pragma once

#include <memory>

#include "cli/serve_options.h"
#include "server/openai/tool_calls/chat_output.h"
#include "server/serving/serving_engine.h"

namespace tessera {

// Blocks until the role has stopped; the process exit code. Call once per
// process (it handles the process's signals).
int RunServe(const ServeOptions& options);

// For offline tools (`tessera replay`): the engine a unified instance of
// `options` runs (the default model made if needed), loaded and warmed up,
// without listeners, KV events or metrics, and the chat output parsing it
// would apply. Single-process ranks only (FAILED_PRECONDITION otherwise).
struct OfflineEngine {
  std::unique_ptr<ServingEngine> engine;
  openai::tools::ChatOutputConfig chat_output;
};
StatusOr<OfflineEngine> LoadOfflineEngine(const ServeOptions& options);

}  // namespace tessera

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

#include "cli/serve_options.h"

namespace tessera {

// Blocks until the role has stopped; the process exit code. Call once per
// process (it handles the process's signals).
int RunServe(const ServeOptions& options);

}  // namespace tessera

// The embedded default model of `tessera serve`: a synthetic (random-weight)
// qwen3 checkpoint written under $TESSERA_HOME on first use, so the server runs
// with no download. Its outputs are meaningless; real use passes --model.
#pragma once

#include <string>

#include "common/status.h"

namespace tessera {

// $TESSERA_HOME, else $HOME/.cache/tessera.
StatusOr<std::string> TesseraHome();

// Where the default model of `size` ("tiny" | "0.5b") lives:
// $TESSERA_HOME/models/default-qwen3-<size>-bf16. Creates nothing.
StatusOr<std::string> DefaultModelDir(const std::string& size);

// Returns DefaultModelDir(size), synthesising it first when missing. Writes to
// a temporary sibling and renames it into place, so an interrupted run never
// leaves a partial model; stale temporaries of dead processes are removed.
// Slow on first use (the 0.5b model is ~1.2 GB). Safe to race with another
// process doing the same.
StatusOr<std::string> EnsureDefaultModel(const std::string& size);

}  // namespace tessera

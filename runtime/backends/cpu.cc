// The CPU backend's registration (runtime/backend_registry.h): every binary
// that runs models links it (tessera_backend_cpu).
#include "engine/backend.h"
#include "runtime/backend_registry.h"

namespace tessera {

void RegisterCpuBackend(BackendRegistry& registry) {
  registry.Register("cpu", [](const BackendOptions& o) -> StatusOr<std::unique_ptr<Backend>> {
    return MakeCpuBackend({o.num_threads});
  });
}

}  // namespace tessera

// The CUDA backend's registration (runtime/backend_registry.h): linked
// (tessera_backend_cuda, with tessera_cuda) only into binaries built where nvcc
// exists and meant for GPUs; `tessera-cpu` leaves it out.
#include "engine/cuda/cuda_backend.h"
#include "runtime/backend_registry.h"

namespace tessera {

void RegisterCudaBackend(BackendRegistry& registry) {
  registry.Register("cuda", [](const BackendOptions& o) { return MakeCudaBackend(o.cuda); });
}

}  // namespace tessera

// The backends a binary can run on, by device name (docs/architecture.md, "Runtime").
//
// Each backend has one registration function, in its own small library
// (runtime/backends/<device>.cc -> tessera_backend_<device>). Which of them a
// binary calls is decided when it is linked, not by #ifdef: CMake's
// tessera_link_backends(<binary> cpu [cuda]) links those libraries and
// generates the binary's RegisterLinkedBackends(), which calls their Register
// functions. Nothing relies on static initializers (a linker drops an archive
// member nothing references). So `tessera` (cpu, cuda) and `tessera-cpu` (cpu)
// link the same runtime objects, and a binary that links tessera_runtime
// without naming its backends fails to link (RegisterLinkedBackends is undefined).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/cuda/cuda_backend.h"

namespace tessera {

// What any backend may be built with; each reads its own part.
struct BackendOptions {
  int num_threads = 0;      // cpu: threads (0: all)
  CudaBackendOptions cuda;  // cuda
};

using BackendFactory = std::function<StatusOr<std::unique_ptr<Backend>>(const BackendOptions&)>;

// Thread-safe. Registration happens once per process, before the first lookup.
class BackendRegistry {
 public:
  // The process's registry, filled by RegisterLinkedBackends on first use.
  static BackendRegistry& Global();

  // A second registration of `device` replaces the first.
  void Register(const std::string& device, BackendFactory factory);
  bool Has(const std::string& device) const;
  // Fails, with the message users see for --device, when `device` is a known
  // device this binary was linked without, or no known device at all.
  StatusOr<std::unique_ptr<Backend>> Make(const std::string& device, const BackendOptions& options) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, BackendFactory> factories_;
};

// Generated per binary by tessera_link_backends (CMakeLists.txt): calls the
// Register function of each backend the binary links.
void RegisterLinkedBackends(BackendRegistry& registry);

// BackendRegistry::Global(), for callers that build one backend.
StatusOr<std::unique_ptr<Backend>> MakeBackend(const std::string& device, int num_threads,
                                               const CudaBackendOptions& cuda);
// Whether this binary links the backend for `device`.
bool HaveBackend(const std::string& device);

}  // namespace tessera

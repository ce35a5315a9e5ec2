#include "runtime/backend_registry.h"

#include <string_view>
#include <utility>

namespace tessera {
namespace {

// The devices users may name, and why one is missing from a binary linked
// without it (the message --device gives).
struct KnownDevice {
  std::string_view name;
  std::string_view not_linked;
};
constexpr KnownDevice kKnownDevices[] = {
    {"cpu", "this tessera was built without the CPU backend"},
    {"cuda", "this tessera was built without CUDA (configure with nvcc available, -DTESSERA_CUDA=ON); use --device "
             "cpu"},
};

}  // namespace

BackendRegistry& BackendRegistry::Global() {
  static BackendRegistry* registry = [] {
    auto* r = new BackendRegistry();  // never destroyed: backends may be made during static teardown
    RegisterLinkedBackends(*r);
    return r;
  }();
  return *registry;
}

void BackendRegistry::Register(const std::string& device, BackendFactory factory) {
  std::lock_guard lock(mu_);
  factories_[device] = std::move(factory);
}

bool BackendRegistry::Has(const std::string& device) const {
  std::lock_guard lock(mu_);
  return factories_.contains(device);
}

StatusOr<std::unique_ptr<Backend>> BackendRegistry::Make(const std::string& device,
                                                         const BackendOptions& options) const {
  BackendFactory factory;
  {
    std::lock_guard lock(mu_);
    if (auto it = factories_.find(device); it != factories_.end()) factory = it->second;
  }
  if (factory) return factory(options);  // unlocked: making a backend may take long
  for (const KnownDevice& d : kKnownDevices) {
    if (d.name == device) return FailedPrecondition("--device " + device + ": " + std::string(d.not_linked));
  }
  return InvalidArgument("--device: unknown device '" + device + "' (expected cpu or cuda)");
}

StatusOr<std::unique_ptr<Backend>> MakeBackend(const std::string& device, int num_threads,
                                               const CudaBackendOptions& cuda) {
  BackendOptions options;
  options.num_threads = num_threads;
  options.cuda = cuda;
  return BackendRegistry::Global().Make(device, options);
}

bool HaveBackend(const std::string& device) { return BackendRegistry::Global().Has(device); }

}  // namespace tessera

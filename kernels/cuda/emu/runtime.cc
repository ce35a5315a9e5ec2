// Host side of the CUDA emulator: errors, the device, memory, streams, events
// and graphs (see runtime.h for what is checked).
#include "kernels/cuda/emu/runtime.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

struct CUgraph_st {
  std::vector<std::function<void()>> nodes;
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> nodes;
};
struct CUstream_st {
  bool capturing = false;
  bool invalidated = false;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::unique_ptr<CUgraph_st> graph;
};
struct CUevent_st {
  std::chrono::steady_clock::time_point t{};
  bool recorded = false;
};

namespace tessera::emu {
namespace {

thread_local cudaError_t t_error = cudaSuccess;

struct Registry {
  std::mutex mu;
  std::map<uintptr_t, size_t> device;  // base -> bytes
  std::map<uintptr_t, size_t> pinned;
  size_t device_bytes = 0;
  std::vector<CUstream_st*> capturing;  // streams capturing in global mode
};
Registry& R() {
  static Registry* r = new Registry();  // never destroyed: used from static destructors
  return *r;
}

bool InRange(const std::map<uintptr_t, size_t>& m, const void* p, size_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = m.upper_bound(a);
  if (it == m.begin()) return false;
  --it;
  return a >= it->first && a + bytes <= it->first + it->second;
}

size_t TotalMemory() {
  static const size_t total = [] {
    const char* mb = std::getenv("TESSERA_EMU_MEMORY_MB");
    return (mb != nullptr ? static_cast<size_t>(std::atoll(mb)) : size_t{4096}) << 20;
  }();
  return total;
}

int Devices() {
  static const int n = [] {
    const char* d = std::getenv("TESSERA_EMU_DEVICES");
    return d != nullptr ? std::atoi(d) : 1;
  }();
  return n;
}

cudaError_t Fail(cudaError_t e, const std::string& why) {
  std::fprintf(stderr, "cuda emulator: %s (%s)\n", why.c_str(), cudaGetErrorName(e));
  SetError(e);
  return e;
}

// An operation that is illegal while any stream captures in global mode
// invalidates those captures.
cudaError_t CheckNotCapturing(const char* what) {
  std::lock_guard<std::mutex> lock(R().mu);
  if (R().capturing.empty()) return cudaSuccess;
  for (CUstream_st* s : R().capturing) s->invalidated = true;
  return Fail(cudaErrorStreamCaptureImplicit, std::string(what) + " while a stream is capturing a graph");
}

cudaError_t CheckCopy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, const char* what) {
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return Fail(cudaErrorInvalidValue, std::string(what) + ": null pointer");
  std::lock_guard<std::mutex> lock(R().mu);
  const bool dst_dev = InRange(R().device, dst, bytes), src_dev = InRange(R().device, src, bytes);
  const bool dst_in = InRange(R().device, dst, 1), src_in = InRange(R().device, src, 1);
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToDevice: ok = dst_dev && !src_in; break;
    case cudaMemcpyDeviceToHost: ok = src_dev && !dst_in; break;
    case cudaMemcpyDeviceToDevice: ok = dst_dev && src_dev; break;
    case cudaMemcpyHostToHost: ok = !dst_in && !src_in; break;
    case cudaMemcpyDefault: ok = (dst_dev || !dst_in) && (src_dev || !src_in); break;
  }
  if (!ok) {
    return Fail(cudaErrorInvalidValue, std::string(what) + ": " + std::to_string(bytes) +
                                           " bytes do not match the copy kind " + std::to_string(kind) +
                                           " (or run past a device allocation)");
  }
  return cudaSuccess;
}

}  // namespace

void SetError(cudaError_t e) {
  if (t_error == cudaSuccess) t_error = e;
}

bool IsDeviceRange(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(R().mu);
  return InRange(R().device, p, bytes);
}

cudaError_t EnqueueOnStream(cudaStream_t s, std::function<void()> work, const char* what) {
  if (s != nullptr && s->capturing) {
    if (s->invalidated) return cudaErrorStreamCaptureInvalidated;
    s->graph->nodes.push_back(std::move(work));
    return cudaSuccess;
  }
  if (s == nullptr) {
    const cudaError_t e = CheckNotCapturing(what);
    if (e != cudaSuccess) return e;
  }
  work();
  return cudaSuccess;
}

}  // namespace tessera::emu

using tessera::emu::Fail;
using tessera::emu::R;

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    default: return "cudaErrorUnknown";
  }
}
const char* cudaGetErrorString(cudaError_t e) { return cudaGetErrorName(e); }

cudaError_t cudaGetLastError() {
  const cudaError_t e = tessera::emu::t_error;
  tessera::emu::t_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return tessera::emu::t_error; }

cudaError_t cudaGetDeviceCount(int* count) {
  *count = tessera::emu::Devices();
  return *count > 0 ? cudaSuccess : cudaErrorNoDevice;
}
cudaError_t cudaSetDevice(int device) {
  return device >= 0 && device < tessera::emu::Devices() ? cudaSuccess : Fail(cudaErrorInvalidDevice, "cudaSetDevice");
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return tessera::emu::Devices() > 0 ? cudaSuccess : cudaErrorNoDevice;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device < 0 || device >= tessera::emu::Devices()) return cudaErrorInvalidDevice;
  *p = cudaDeviceProp{};
  std::snprintf(p->name, sizeof p->name, "Tessera CUDA emulator");
  p->totalGlobalMem = tessera::emu::TotalMemory();
  p->sharedMemPerBlock = 48 * 1024;
  p->sharedMemPerBlockOptin = 227 * 1024;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024;
  p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 0x7fffffff;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 4;
  p->l2CacheSize = 50 << 20;
  p->memoryBusWidth = 5120;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  cudaDeviceProp p;
  const cudaError_t e = cudaGetDeviceProperties(&p, device);
  if (e != cudaSuccess) return e;
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(p.sharedMemPerBlock); break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(p.sharedMemPerBlockOptin); break;
    case cudaDevAttrL2CacheSize: *value = p.l2CacheSize; break;
    default: return Fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute not emulated");
  }
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() { return tessera::emu::CheckNotCapturing("cudaDeviceSynchronize"); }
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  std::lock_guard<std::mutex> lock(R().mu);
  *total_bytes = tessera::emu::TotalMemory();
  *free_bytes = *total_bytes > R().device_bytes ? *total_bytes - R().device_bytes : 0;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  if (tessera::emu::CheckNotCapturing("cudaMalloc") != cudaSuccess) return cudaErrorStreamCaptureUnsupported;
  std::lock_guard<std::mutex> lock(R().mu);
  if (R().device_bytes + bytes > tessera::emu::TotalMemory()) {
    return Fail(cudaErrorMemoryAllocation, "cudaMalloc of " + std::to_string(bytes) + " bytes: out of emulated memory");
  }
  // Exactly `bytes` (not rounded up), so ASan reports a kernel reading past the
  // end as compute-sanitizer would; 256-byte aligned like cudaMalloc.
  void* p = nullptr;
  if (posix_memalign(&p, 256, std::max<size_t>(bytes, 1)) != 0) {
    return Fail(cudaErrorMemoryAllocation, "cudaMalloc: host allocation failed");
  }
  R().device[reinterpret_cast<uintptr_t>(p)] = bytes;
  R().device_bytes += bytes;
  *ptr = p;
  return cudaSuccess;
}
cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  std::lock_guard<std::mutex> lock(R().mu);
  auto it = R().device.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == R().device.end()) return Fail(cudaErrorInvalidDevicePointer, "cudaFree of a pointer cudaMalloc did not return");
  R().device_bytes -= it->second;
  R().device.erase(it);
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** ptr, size_t bytes) { return cudaHostAlloc(ptr, bytes, 0); }
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned) {
  if (posix_memalign(ptr, 64, std::max<size_t>(bytes, 1)) != 0) {
    *ptr = nullptr;
    return Fail(cudaErrorMemoryAllocation, "cudaHostAlloc");
  }
  std::lock_guard<std::mutex> lock(R().mu);
  R().pinned[reinterpret_cast<uintptr_t>(*ptr)] = bytes;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  std::lock_guard<std::mutex> lock(R().mu);
  auto it = R().pinned.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == R().pinned.end()) return Fail(cudaErrorInvalidValue, "cudaFreeHost of a pointer cudaHostAlloc did not return");
  R().pinned.erase(it);
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaHostRegister(void* ptr, size_t bytes, unsigned) {
  std::lock_guard<std::mutex> lock(R().mu);
  R().pinned[reinterpret_cast<uintptr_t>(ptr)] = bytes;
  return cudaSuccess;
}
cudaError_t cudaHostUnregister(void* ptr) {
  std::lock_guard<std::mutex> lock(R().mu);
  return R().pinned.erase(reinterpret_cast<uintptr_t>(ptr)) == 1 ? cudaSuccess
                                                                 : Fail(cudaErrorInvalidValue, "cudaHostUnregister");
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (cudaError_t e = tessera::emu::CheckNotCapturing("cudaMemcpy"); e != cudaSuccess) return e;
  if (cudaError_t e = tessera::emu::CheckCopy(dst, src, bytes, kind, "cudaMemcpy"); e != cudaSuccess) return e;
  if (bytes > 0) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
  if (cudaError_t e = tessera::emu::CheckCopy(dst, src, bytes, kind, "cudaMemcpyAsync"); e != cudaSuccess) return e;
  if (bytes == 0) return cudaSuccess;
  if (s != nullptr && s->capturing) {
    std::lock_guard<std::mutex> lock(R().mu);
    const bool host_src = !tessera::emu::InRange(R().device, src, 1);
    const bool host_dst = !tessera::emu::InRange(R().device, dst, 1);
    if ((host_src && !tessera::emu::InRange(R().pinned, src, bytes)) ||
        (host_dst && !tessera::emu::InRange(R().pinned, dst, bytes))) {
      s->invalidated = true;
      return Fail(cudaErrorStreamCaptureUnsupported, "cudaMemcpyAsync of pageable host memory during graph capture");
    }
  }
  const cudaError_t e = tessera::emu::EnqueueOnStream(
      s, [dst, src, bytes] { std::memmove(dst, src, bytes); }, "cudaMemcpyAsync");
  return e == cudaSuccess ? e : Fail(e, "cudaMemcpyAsync");
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t s) {
  if (width > dpitch || width > spitch) return Fail(cudaErrorInvalidValue, "cudaMemcpy2DAsync: width exceeds a pitch");
  for (size_t r = 0; r < height; ++r) {
    const cudaError_t e = cudaMemcpyAsync(static_cast<char*>(dst) + r * dpitch,
                                          static_cast<const char*>(src) + r * spitch, width, kind, s);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}
cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  if (cudaError_t e = tessera::emu::CheckNotCapturing("cudaMemset"); e != cudaSuccess) return e;
  return cudaMemsetAsync(ptr, value, bytes, nullptr);
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t s) {
  if (bytes == 0) return cudaSuccess;
  if (!tessera::emu::IsDeviceRange(ptr, bytes)) return Fail(cudaErrorInvalidValue, "cudaMemset outside a device allocation");
  const cudaError_t e = tessera::emu::EnqueueOnStream(
      s, [ptr, value, bytes] { std::memset(ptr, value, bytes); }, "cudaMemsetAsync");
  return e == cudaSuccess ? e : Fail(e, "cudaMemsetAsync");
}

cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = new CUstream_st();
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (s == nullptr) return Fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy(null)");
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (s != nullptr && s->capturing) {
    s->invalidated = true;
    return Fail(cudaErrorStreamCaptureUnsupported, "cudaStreamSynchronize on a capturing stream");
  }
  if (s == nullptr) return tessera::emu::CheckNotCapturing("cudaStreamSynchronize(legacy stream)");
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }

cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = new CUevent_st();
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s) {
  return tessera::emu::EnqueueOnStream(
      s, [ev] { ev->t = std::chrono::steady_clock::now(), ev->recorded = true; }, "cudaEventRecord");
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  if (!a->recorded || !b->recorded) return Fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: event not recorded");
  *ms = std::chrono::duration<float, std::milli>(b->t - a->t).count();
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
  if (s == nullptr) return Fail(cudaErrorStreamCaptureUnsupported, "cudaStreamBeginCapture on the legacy stream");
  if (s->capturing) return Fail(cudaErrorInvalidValue, "cudaStreamBeginCapture: stream already capturing");
  s->capturing = true;
  s->invalidated = false;
  s->mode = mode;
  s->graph = std::make_unique<CUgraph_st>();
  if (mode == cudaStreamCaptureModeGlobal) {
    std::lock_guard<std::mutex> lock(R().mu);
    R().capturing.push_back(s);
  }
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  *graph = nullptr;
  if (s == nullptr || !s->capturing) return Fail(cudaErrorInvalidValue, "cudaStreamEndCapture: stream not capturing");
  {
    std::lock_guard<std::mutex> lock(R().mu);
    auto& c = R().capturing;
    c.erase(std::remove(c.begin(), c.end(), s), c.end());
  }
  s->capturing = false;
  if (s->invalidated) {
    s->graph.reset();
    return Fail(cudaErrorStreamCaptureInvalidated, "cudaStreamEndCapture: the capture was invalidated");
  }
  *graph = s->graph.release();
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
  *status = s != nullptr && s->capturing ? (s->invalidated ? cudaStreamCaptureStatusInvalidated
                                                           : cudaStreamCaptureStatusActive)
                                         : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (graph == nullptr) return Fail(cudaErrorInvalidValue, "cudaGraphInstantiate(null)");
  *exec = new CUgraphExec_st{graph->nodes};
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  if (exec == nullptr) return Fail(cudaErrorInvalidValue, "cudaGraphLaunch(null)");
  return tessera::emu::EnqueueOnStream(
      s, [exec] { for (auto& node : exec->nodes) node(); }, "cudaGraphLaunch");
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

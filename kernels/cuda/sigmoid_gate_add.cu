#include "kernels/cuda/sigmoid_gate_add.cuh"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// One block per row.
__global__ void SigmoidGateAddKernel(float* __restrict__ out, const float* __restrict__ shared,
                                     const float* __restrict__ gate_logits, int64_t dim) {
  const int64_t r = blockIdx.x;
  const float s = 1.0f / (1.0f + expf(-gate_logits[r]));
  float* o = out + r * dim;
  const float* h = shared + r * dim;
  for (int64_t c = threadIdx.x; c < dim; c += kThreads) o[c] = fmaf(s, h[c], o[c]);
}

}  // namespace

cudaError_t SigmoidGateAdd(float* out, const float* shared, const float* gate_logits, int64_t rows, int64_t dim,
                           cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return cudaSuccess;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;
  TESSERA_LAUNCH(static_cast<unsigned>(rows), kThreads, 0, stream, SigmoidGateAddKernel)(out, shared, gate_logits,
                                                                                         dim);
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda

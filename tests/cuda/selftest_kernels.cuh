// Kernels that pin down CUDA semantics the emulator must reproduce (barriers,
// shared memory, shuffles, votes, atomics); built for the GPU and for the
// emulator, and checked by selftest_test.cc on both.
#pragma once

#include <cstdint>

#include "kernels/cuda/compat.cuh"

namespace tessera::cuda_test {

// out[b] = sum of in[b * n .. b * n + n) via shared memory tree (n = threads = 256).
cudaError_t BlockSum(const float* in, int blocks, float* out, cudaStream_t stream);
// For each of 64 threads: xor/down/up/idx shuffles and ballot of (lane odd);
// out[t * 5 + 0..4].
cudaError_t WarpOps(int* out, cudaStream_t stream);
// counter[0] += 1 from every thread of `blocks` blocks of 128 threads.
cudaError_t AtomicCount(int* counter, int blocks, cudaStream_t stream);
// x[i] = x[i] * 2 + 1 for i < n (graph replay test).
cudaError_t Affine(float* x, int n, cudaStream_t stream);
// Threads of one block take `rounds` barriers each (emulator switch cost).
cudaError_t ManyBarriers(float* out, int rounds, cudaStream_t stream);

}  // namespace tessera::cuda_test

#include "kernels/cuda/block_copy.cuh"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxGridY = 65535;

// blockIdx.x: pair; blockIdx.y (striding by gridDim.y): base. 16-byte copies,
// consecutive threads on consecutive vectors. Pairs do not chain, so blocks
// never read what another block writes.
__global__ void CopyBlocksKernel(void* const* __restrict__ bases, int64_t num_bases, int64_t vecs,
                                 const int64_t* __restrict__ pairs) {
  const int64_t p = blockIdx.x;
  const int64_t src = pairs[2 * p], dst = pairs[2 * p + 1];
  for (int64_t b = blockIdx.y; b < num_bases; b += gridDim.y) {
    uint4* base = static_cast<uint4*>(bases[b]);
    const uint4* from = base + src * vecs;
    uint4* to = base + dst * vecs;
    for (int64_t i = threadIdx.x; i < vecs; i += kThreads) to[i] = from[i];
  }
}

}  // namespace

cudaError_t CopyBlocks(void* const* bases, int64_t num_bases, int64_t block_bytes, const int64_t* pairs,
                       int64_t num_pairs, cudaStream_t stream) {
  if (block_bytes <= 0 || block_bytes % 16 != 0) return cudaErrorInvalidValue;
  if (num_bases <= 0 || num_pairs <= 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(num_pairs),
                  static_cast<unsigned>(num_bases < kMaxGridY ? num_bases : kMaxGridY));
  TESSERA_LAUNCH(grid, kThreads, 0, stream, CopyBlocksKernel)(bases, num_bases, block_bytes / 16, pairs);
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda

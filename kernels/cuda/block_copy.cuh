// Copies whole KV blocks (copy-on-write of shared blocks, tier moves) in one launch.
#pragma once

#include <cstdint>

#include "kernels/cuda/compat.cuh"

namespace tessera::kernels::cuda {

// For every base b in bases[0..num_bases) (device array of device pointers, one per
// layer and side) and every pair p in pairs[0..num_pairs) (device array, [src, dst]
// block ids): copies block_bytes from b + src * block_bytes to b + dst * block_bytes.
// block_bytes must be a multiple of 16. Pairs must not chain.
cudaError_t CopyBlocks(void* const* bases, int64_t num_bases, int64_t block_bytes, const int64_t* pairs,
                       int64_t num_pairs, cudaStream_t stream);

}  // namespace tessera::kernels::cuda

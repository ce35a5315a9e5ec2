// Logits processing and sampling on the GPU: the device twin of the host
// Sampler (engine/sampling.h), same semantics and the same counter-based RNG,
// so a sequence draws the same token on either backend (up to draws that fall
// within rounding of a CDF boundary: sums are reduced in a different order).
//
// One block per row, fixed-order reductions: a row's token never depends on
// which other rows share the launch (docs/architecture.md, "Batch invariance").
//
// Processing order (as engine/sampling.h): banned tokens / logit_bias ->
// repetition, frequency, presence penalties -> greedy argmax when
// temperature < 1e-5 -> temperature -> min_p -> top_k -> top_p -> draw with
// u = CounterUniform(seed, choice_index, output_position).
//
// Cost per row, V = vocab: ~4 passes over V (one double exp per token); top_k
// adds 4 passes (radix select on the logit bits, integer histograms); top_p
// adds ~20 (two 16-way searches over the logit bits, each pass reducing the
// masses above 15 probe keys) that skip tokens below the probes or already cut.
// No sort and no host sync; workspace: 8 bytes per logit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/compat.cuh"

namespace tessera::kernels::cuda {

// Per-row sampling knobs (POD, lives in device memory), mirroring SamplerConfig
// and SampleContext's RNG fields.
struct SampleRowParams {
  float temperature = 1.0f;  // < 1e-5: greedy
  int32_t top_k = -1;        // <= 0: disabled
  float top_p = 1.0f;        // (0, 1]; 1: disabled
  float min_p = 0.0f;        // [0, 1]; 0: disabled
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;  // 1: disabled
  int32_t choice_index = 0;         // RNG stream
  uint64_t seed = 0;
  int64_t output_position = 0;  // RNG counter
};

// Per-row token lists in CSR form (device pointers): row r's tokens are
// tokens[offsets[r] .. offsets[r + 1]). offsets == nullptr: every row empty.
// Ids outside [0, vocab) are ignored, as on the host.
struct TokenLists {
  const int32_t* offsets = nullptr;  // [rows + 1]
  const int32_t* tokens = nullptr;
};

// Per-row (token, value) edits in CSR form, applied in list order before the
// penalties: value == -INFINITY bans the token (sets it to -inf), anything else
// is an additive logit bias. Put banned tokens first to match the host order
// (banned, then logit_bias); duplicates add up in list order.
struct LogitEdits {
  const int32_t* offsets = nullptr;  // [rows + 1]; nullptr: no edits
  const int32_t* tokens = nullptr;
  const float* values = nullptr;
};

// Bytes of device workspace SampleRows needs for rows x vocab.
size_t SampleRowsWorkspaceBytes(int64_t rows, int64_t vocab);

// out[r] = the lowest index of the maximum of logits[r, :] (f32, device). NaN
// never wins; a row of only -inf / NaN gives 0 (as the host Sampler).
cudaError_t ArgmaxRows(const float* logits, int64_t rows, int64_t vocab, int32_t* out, cudaStream_t stream);

// Samples one token per row of logits [rows, vocab] (f32, device, not
// modified) into out[rows] (int32, device). params: [rows] in device memory.
// prompt: repetition penalty only; output: all penalties (with counts).
// workspace: device memory of at least SampleRowsWorkspaceBytes(rows, vocab)
// (no initial contents needed). Asynchronous on `stream`; no host syncs.
// Returns cudaErrorInvalidValue for a too-small workspace or vocab outside
// [1, 2^30].
cudaError_t SampleRows(const float* logits, int64_t rows, int64_t vocab, const SampleRowParams* params,
                       TokenLists prompt, TokenLists output, LogitEdits edits, void* workspace,
                       size_t workspace_bytes, int32_t* out, cudaStream_t stream);

// out[r] = log(sum(exp(logits[r, :]))) in double (the host LogSumExp: a row
// whose max is +-inf gives that max; NaN entries propagate).
cudaError_t LogSumExpRows(const float* logits, int64_t rows, int64_t vocab, double* out, cudaStream_t stream);

}  // namespace tessera::kernels::cuda

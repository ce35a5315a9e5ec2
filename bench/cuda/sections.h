// The sections of tessera-cuda-bench. Each measures, adds rows to ctx.report and
// returns an error only when the device became unusable (a failed measurement
// is recorded as a row with an error and the section goes on).
#pragma once

#include <string>
#include <vector>

#include "bench/cuda/bench_util.h"

namespace tessera::cuda_bench {

// Device-to-device copy bandwidth and cuBLAS GEMM peaks; sets the report's ceilings.
Status RunCeilings(Context& ctx);
// LinearTiled (the deterministic mode's GEMM) against cuBLAS at the 8B model's shapes.
Status RunLinear(Context& ctx);
// Quantized weights (Q4_K, Q6_K) at the 8B shapes: Dequantize (the upload path) and
// the fused QuantGemv at decode batch 1 and 16 against cuBLAS / LinearTiled on bf16.
Status RunQuant(Context& ctx);
// Elementwise and row ops at serving sizes: RmsNorm, AddRmsNorm, HeadRmsNorm, SiluMul,
// Rope, WriteKv, Embedding, GatherRows, ConvertFromF32, AddBias, CopyBlocks.
Status RunKernels(Context& ctx);
// Paged attention: decode at batch x context, prefill FLOP/s.
Status RunAttention(Context& ctx);

// The MoE expert FFN (grouped kernel; per-expert cuBLAS where the cuBLAS mode
// uses it) at decode batch 1/64/256, Qwen3-30B-A3B and Mixtral-8x7B expert layers.
Status RunMoe(Context& ctx);

struct ModelBenchOptions {
  std::vector<std::string> models = {"1b", "8b"};        // 1b: Llama-3.2-1B shape; 8b: Llama-3-8B
  std::vector<std::string> modes = {"eager", "graphs"};  // also: deterministic
  std::vector<int> batches = {1, 64, 256};
  std::vector<int> prompts = {2048, 8192};  // TTFT
  int decode_context = 512;  // prompt length before the decode steps
  int decode_steps = 32;     // timed steps per batch size
  std::string synth_dir;     // "": /dev/shm or /tmp, whichever has room
  std::string npm_dir;       // tokenizer files for synth ("": FindNpmDir)
};
// Synthetic Llama checkpoints through engine/Model on the CUDA backend: decode
// tokens/s against the HBM roofline, throughput, TTFT; eager and CUDA graphs.
Status RunModels(Context& ctx, const ModelBenchOptions& options);

}  // namespace tessera::cuda_bench

// `tessera synth`: writes a synthetic (random-weight) checkpoint of a
// supported architecture, as safetensors, GGUF or both.
#include <memory>
#include <string>


#include "cli/commands.h"
#include "common/log.h"
#include "engine/gguf_recipe.h"
#include "engine/synth.h"

namespace tessera {

void AddSynthCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("synth", "Write a random-weight HF checkpoint of a supported architecture");
  auto opts = std::make_shared<SynthOptions>();
  auto dtype = std::make_shared<std::string>("bf16");
  auto mix = std::make_shared<bool>(false);
  cmd->add_option("--arch", opts->arch,
                  "llama | mistral | qwen2 | qwen3 | mixtral | qwen2_moe | qwen3_moe | phi3 | gemma2 | gemma3 | gpt_oss | "
                  "deepseek_v2_lite | deepseek_v3")
      ->capture_default_str();
  cmd->add_option("--size", opts->size,
                  "tiny | 0.5b | 1.5b (gemma: tiny | 0.5b; MoE archs: tiny | 1b, ~1B total / ~0.3B active)")
      ->capture_default_str();
  cmd->add_option("--router-skew", opts->router_skew,
                  "MoE archs: raise the first top-k experts' router logits by ~0.7*F for every token so they run hot (0: uniform)")
      ->capture_default_str();
  cmd->add_option("--dtype", *dtype,
                  "f32 | f16 | bf16, a GGML type for every matrix (q4_0 q4_1 q5_0 q5_1 q8_0 q2_k q3_k q4_k q5_k "
                  "q6_k iq4_nl iq4_xs mxfp4), or a llama-quantize mix (q2_k_s q3_k_s q3_k_m q3_k_l q4_k_s q4_k_m "
                  "q5_k_s q5_k_m mxfp4_moe) approximating llama.cpp's per-tensor recipe; quantized: --format gguf|both")
      ->capture_default_str();
  cmd->add_flag("--mix", *mix,
                "with a GGML type: llama-quantize's recipe of the file type named after it (q6_k, iq4_xs, q4_0: "
                "output and some attn_v/ffn_down get more bits) instead of every matrix that type");
  cmd->add_option("--format", opts->format,
                  "safetensors (HF directory) | gguf (--out is the .gguf file) | both (directory + <out>.gguf)")
      ->capture_default_str();
  cmd->add_option("--out", opts->out_dir, "output directory (or .gguf file with --format gguf)")->required();
  cmd->add_option("--shards", opts->shards, "number of safetensors shards")->capture_default_str();
  cmd->add_option("--seed", opts->seed, "random seed")->capture_default_str();
  cmd->add_option("--set", opts->overrides, "override a config.json field: KEY=JSON (repeatable)");
  cmd->callback([opts, dtype, mix, exit_code] {
    DType t = DType::kBF16;
    const LlamaFileType* ft = nullptr;
    if (ParseDType(*dtype, &t) && t != DType::kI32 && t != DType::kI64) {
      if (*mix) ft = FindLlamaFileType(LlamaFileTypeForDType(t));
    } else if ((ft = FindLlamaFileTypeByName(*dtype)) == nullptr || !ft->base) {
      *exit_code = Fail(InvalidArgument("synth: --dtype '" + *dtype +
                                        "' is neither a weight type nor a llama-quantize recipe Tessera can write"));
      return;
    } else {
      t = *ft->base;
    }
    opts->dtype = t;
    opts->llama_ftype = ft ? static_cast<int>(ft->id) : -1;
    opts->progress = true;
    Status s = WriteSyntheticCheckpoint(*opts);
    if (!s.ok()) {
      *exit_code = Fail(s);
      return;
    }
    std::string where = opts->out_dir;
    if (opts->format == "both") where += " and " + SynthGgufPath(opts->out_dir);
    LogInfo("synth: wrote {} {} ({}) to {} — weights are random", opts->arch, opts->size, *dtype, where);
  });
}

}  // namespace tessera

#!/usr/bin/env bash
# MoE figures for bench/RESULTS.md ("Mixture of experts beside llama.cpp") in one command:
#   1. synthesizes (once, cached) a ~1B-total / ~0.3B-active MoE GGUF per arch
#      (`tessera synth --arch A --size 1b --format gguf --dtype D [--router-skew F]`);
#   2. Tessera: tessera-engine-bench on it: prefill of a 512-token prompt, decode at
#      batch 1 and 16 (16 concurrent sequences). Batch-1 decode is stated as a fraction
#      of the read bandwidth measured in the same process over the bytes actually read
#      per token (attention + router + shared expert + the experts used + lm_head + KV);
#   3. llama.cpp on the SAME file, when built (bench/build_llama_cpp.sh):
#      llama-bench -p 512 (prefill) and -n N (decode, batch 1); llama-batched-bench
#      with 16 parallel sequences (decode tokens/s summed over them);
#   4. prints a markdown table (raw output kept in the output directory).
#
#   bench/run_moe_results.sh [--build build] [--threads 2] [--archs "qwen3_moe mixtral"]
#                            [--size 1b] [--dtype q8_0] [--router-skew 0] [--prompt 512]
#                            [--decode 16] [--context 128] [--llama-cpp DIR] [--out DIR]
# Models are cached under $TESSERA_BENCH_MODELS (default ~/.cache/tessera/bench-models).
# llama.cpp: DIR holds llama-bench and llama-batched-bench (default
# ~/.cache/tessera/llama.cpp/build/bin); its worker threads spin, so run on a quiet machine.
# Check the script itself on tiny inputs: --size tiny --dtype bf16 --prompt 32 --decode 2 --context 16.
set -euo pipefail

here="$(dirname "$0")"
# shellcheck source=bench/lib_llama_compare.sh
source "$here/lib_llama_compare.sh"
lc_defaults
archs="qwen3_moe mixtral"
size=1b
dtype=q8_0
skew=0
while [[ $# -gt 0 ]]; do
  lc_common_arg "$1" "${2-}" && { shift 2; continue; }
  case "$1" in
    --dtype) dtype="$2"; shift 2 ;;
    --router-skew) skew="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "run_moe_results: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

lc_setup run_moe_results
lc_find_llama run_moe_results llama-bench llama-batched-bench
lc_machine_txt

names=()
failed=0
for arch in $archs; do
  path="$models/$arch-$size-$dtype-skew$skew.gguf"
  lc_cached "$path" "$tessera" --log-level warn synth --arch "$arch" --size "$size" --format gguf \
    --dtype "$dtype" --router-skew "$skew" --out @OUT@
  name="$arch-$size-$dtype"
  lc_bench_pair "$name" "$path" || failed=1
  names+=("$name")
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/machine.txt"

PYTHONPATH="$here" /usr/bin/python3 - "$out" "$threads" "$prompt" "$context" "$decode" "${names[@]}" <<'PY'
import sys
from llama_compare import Pair, fmt, machine_header, table_head, table_row
out, threads, prompt, context, decode = sys.argv[1:6]

print(machine_header(out))
print()
print(f"CPU, {threads} threads, same GGUF file for both engines. Prefill: one {prompt}-token prompt. Decode: "
      f"{context} tokens of context, {decode} steps; b16 = 16 concurrent sequences (tokens/s summed). "
      f"'of bw' = decode tokens/s x bytes actually read per token (attention, router, shared expert, the "
      f"experts used, lm_head, KV) / read bandwidth measured in the same process.")
print()
print(table_head(["model", "active/total params", f"prefill {prompt} tok/s (Tessera / llama.cpp)",
                  "decode b1 tok/s (Tessera, of bw / llama.cpp)", "decode b16 tok/s (Tessera / llama.cpp)",
                  "experts read/step b1, b16"]))
for name in sys.argv[6:]:
    p = Pair(out, name)
    if p.model is None:
        print(f"| {name} | Tessera run failed, see {p.log} |")
        continue
    d1, d16 = p.decode.get(1), p.decode.get(16)
    print(table_row([name, f"{p.model.get('active_params', 0) / 1e9:.2f}B / {p.model['params'] / 1e9:.2f}B",
                     *p.cells(),
                     f"{fmt(d1.get('moe_experts_read_per_step') if d1 else None)}, "
                     f"{fmt(d16.get('moe_experts_read_per_step') if d16 else None)}"]))
    if p.moe:
        print(f"|  | expert load max/mean {p.moe['max_over_mean']:.2f} over {len(p.moe['layers'])} layers "
              f"of {p.moe['num_experts']} experts (top {p.moe['top_k']}) |")
print()
print(f"raw: {out}")
PY
exit "$failed"

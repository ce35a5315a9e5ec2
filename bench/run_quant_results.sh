#!/usr/bin/env bash
# Quantization-recipe figures for bench/RESULTS.md: Tessera beside llama.cpp on the same files
# that llama.cpp's own llama-quantize writes, in one command:
#   1. synthesizes (once, cached) an f16 GGUF per arch (`tessera synth --arch A --size S
#      --format gguf --dtype f16`; any arch synth writes: llama, phi3, qwen3, ...);
#   2. quantizes it (once, cached) with llama-quantize to each recipe: Q4_K_M, Q5_K_M and
#      IQ4_XS are per-tensor mixes (Q6_K output, Q6_K/Q5_K attn_v and ffn_down in some layers,
#      ...). IQ4_XS needs no importance matrix: llama-quantize asks for one only for the
#      IQ1/IQ2/IQ3_XXS types and Q2_K_S; without one it gives the first eighth of the ffn_down
#      layers Q5_K. The files are made without an imatrix (documented as such in RESULTS.md).
#      Without llama.cpp, `tessera synth --dtype <recipe>` writes Tessera's approximation of
#      the recipe instead (the table's "quantizer" column says which);
#   3. both engines on each file, one after the other (bench/lib_llama_compare.sh):
#      tessera-engine-bench (prefill of a 512-token prompt, decode at batch 1 and 16; batch-1
#      decode also as a fraction of the read bandwidth measured in the same process over the
#      bytes read per token), llama-bench -p 512 -n N -r 3 and llama-batched-bench -npl 1,16;
#   4. greedy agreement (bench/quant_agreement.py, on unless --no-agreement): `tessera serve`
#      and `llama-server` on the same file, 8 fixed token-id prompts, 64 tokens each: leading
#      tokens that agree, and at a divergence the rank of Tessera's token in llama.cpp's top 5;
#      the f16 source file too, as the baseline without quantization;
#   5. prints markdown tables (raw outputs kept in the output directory).
#
#   bench/run_quant_results.sh [--build build] [--threads 2] [--archs "llama"] [--size 0.5b]
#        [--recipes "Q4_K_M Q5_K_M Q6_K IQ4_XS"] [--prompt 512] [--decode 16] [--context 128]
#        [--agreement | --no-agreement] [--agreement-tokens 64] [--set KEY=JSON ...]
#        [--llama-cpp DIR] [--out DIR]
# --set: a config override for synth (repeatable), named in the cached files and the rows.
# Models are cached under $TESSERA_BENCH_MODELS (default ~/.cache/tessera/bench-models).
# llama.cpp: DIR holds llama-quantize, llama-bench, llama-batched-bench and llama-server
# (default ~/.cache/tessera/llama.cpp/build/bin, built by bench/build_llama_cpp.sh); its worker
# threads spin, so run on a quiet machine (bench/quiet_run.sh).
# Check the script itself on tiny inputs (about a minute per recipe; tiny rows are not whole
# K-quant blocks, so llama-quantize falls back to Q5_0/Q8_0/IQ4_NL for most matrices; add
# --set hidden_size=256 --set intermediate_size=512 --set head_dim=64 for the K-quant types):
#   --archs llama --size tiny --recipes "Q4_K_M Q6_K" --prompt 32 --decode 2 --context 16
set -euo pipefail

here="$(dirname "$0")"
# shellcheck source=bench/lib_llama_compare.sh
source "$here/lib_llama_compare.sh"
lc_defaults
archs="llama"
size=0.5b
recipes="Q4_K_M Q5_K_M Q6_K IQ4_XS"
agreement=1
agreement_tokens=64
sets=()
while [[ $# -gt 0 ]]; do
  lc_common_arg "$1" "${2-}" && { shift 2; continue; }
  case "$1" in
    --recipes) recipes="$2"; shift 2 ;;
    --agreement) agreement=1; shift ;;
    --no-agreement) agreement=0; shift ;;
    --agreement-tokens) agreement_tokens="$2"; shift 2 ;;
    --set) sets+=("$2"); shift 2 ;;
    -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
    *) echo "run_quant_results: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

lc_setup run_quant_results
lc_find_llama run_quant_results llama-quantize llama-bench llama-batched-bench
if [[ "$agreement" == 1 && ! -x "$llama_dir/llama-server" ]]; then
  echo "run_quant_results: no llama-server in $llama_dir: no greedy agreement" >&2
  agreement=0
fi
lc_machine_txt

# agree NAME FILE: greedy agreement of tessera serve and llama-server on FILE -> agreement-NAME.json.
agreed=()
agree() {
  echo "== $1: greedy agreement, tessera serve / llama-server" >&2
  agreed+=("$1")
  /usr/bin/python3 "$here/quant_agreement.py" --tessera "$tessera" --llama-server "$llama_dir/llama-server" \
    --model "$2" --threads "$threads" --tokens "$agreement_tokens" --out "$out" --name "$1"
}

names=()
failed=0
# The --set overrides name the cached files: hidden_size=256 -> "-hidden_size256".
variant="$size"
set_args=()
for kv in "${sets[@]}"; do
  variant+="-${kv//[^A-Za-z0-9_.]/}"
  set_args+=(--set "$kv")
done
for arch in $archs; do
  f16="$models/$arch-$variant-f16.gguf"
  lc_cached "$f16" "$tessera" --log-level warn synth --arch "$arch" --size "$size" --format gguf --dtype f16 \
    "${set_args[@]}" --out @OUT@ || { echo "run_quant_results: cannot synthesize $arch" >&2; failed=1; continue; }
  # The unquantized source first: how far the engines agree before any quantization.
  [[ "$agreement" == 1 ]] && { agree "$arch-$variant-f16" "$f16" || failed=1; }
  for recipe in $recipes; do
    if [[ "$have_llama" == 1 ]]; then
      quantizer=llama-quantize
      path="$models/$arch-$variant-$recipe.gguf"
      [[ "$path" -nt "$f16" ]] || rm -f "$path"  # made from an older f16 file
      echo "== $arch-$variant-$recipe: llama-quantize ($out/quantize-$arch-$variant-$recipe.log)" >&2
      lc_cached "$path" "$llama_dir/llama-quantize" "$f16" @OUT@ "$recipe" "$threads" \
        2> "$out/quantize-$arch-$variant-$recipe.log" \
        || { echo "llama-quantize failed (see $out/quantize-$arch-$variant-$recipe.log)" >&2; failed=1; continue; }
    else
      quantizer="tessera synth"
      path="$models/$arch-$variant-$recipe-synth.gguf"
      # A single-type name (Q6_K, IQ4_XS) takes llama-quantize's mix of that file type (--mix).
      mix=()
      [[ "${recipe,,}" =~ _[sml]$ ]] || mix=(--mix)
      lc_cached "$path" "$tessera" --log-level warn synth --arch "$arch" --size "$size" --format gguf \
        --dtype "${recipe,,}" "${mix[@]}" "${set_args[@]}" --out @OUT@
    fi
    name="$arch-$variant-$recipe"
    lc_bench_pair "$name" "$path" || failed=1
    [[ "$agreement" == 1 ]] && { agree "$name" "$path" || failed=1; }
    names+=("$name|$quantizer|$path")
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/machine.txt"

PYTHONPATH="$here" /usr/bin/python3 - "$out" "$threads" "$prompt" "$context" "$decode" "${agreed[*]}" "${names[@]}" \
  <<'PY'
import json, os, sys
from llama_compare import Pair, machine_header, table_head, table_row
out, threads, prompt, context, decode, agreed = sys.argv[1:7]
rows = [r.split("|") for r in sys.argv[7:]]

print(machine_header(out))
print()
print(f"CPU, {threads} threads, the same GGUF file for both engines. Prefill: one {prompt}-token prompt. "
      f"Decode: {context} tokens of context, {decode} steps; b16 = 16 concurrent sequences (tokens/s summed). "
      f"'of bw' = batch-1 decode tokens/s x bytes read per token (every weight, in its own type, and the KV) "
      f"/ read bandwidth measured in the same process. bits/weight: the file's weight bytes x 8 / parameters.")
print()
print(table_head(["model", "quantizer", "bits/weight", f"prefill {prompt} tok/s (Tessera / llama.cpp)",
                  "decode b1 tok/s (Tessera, of bw / llama.cpp)", "decode b16 tok/s (Tessera / llama.cpp)"]))
for name, quantizer, path in rows:
    p = Pair(out, name)
    if p.model is None:
        print(table_row([name, quantizer, f"Tessera run failed, see {p.log}"]))
        continue
    print(table_row([name, quantizer, f"{8 * p.model['bytes_per_param']:.2f}", *p.cells()]))

agreements = [(name, os.path.join(out, f"agreement-{name}.json")) for name in agreed.split()]
agreements = [(n, f) for n, f in agreements if os.path.exists(f)]
if agreements:
    print()
    print("Greedy agreement on the same file: 8 fixed token-id prompts (4-64 tokens), temperature 0, "
          "end-of-sequence ignored. Per prompt: leading generated tokens that agree; at a divergence, "
          "(#r, gap) = Tessera's token is llama.cpp's r-th choice there, gap = llama.cpp's log-probability "
          "difference between its choice and Tessera's (#>5: not in its top 5). The f16 row is the unquantized "
          "source file: divergence there comes from near-ties alone, not from quantization.")
    print()
    print(table_head(["model", "leading tokens that agree, per prompt", "total"]))
    for name, f in agreements:
        with open(f) as fh:
            recs = json.load(fh)["prompts"]
        cells = []
        for r in recs:
            d = r.get("divergence")
            if d is None:
                cells.append(str(r["agree"]))
            elif d["tessera_rank_in_llama"] is None:
                cells.append(f"{r['agree']} (#>5)")
            else:
                cells.append(f"{r['agree']} (#{d['tessera_rank_in_llama']}, {d['llama_logprob_gap']:.3f})")
        total = sum(r["agree"] for r in recs)
        print(table_row([name, ", ".join(cells), f"{total} of {sum(r['of'] for r in recs)}"]))
print()
print(f"raw: {out}")
PY
exit "$failed"

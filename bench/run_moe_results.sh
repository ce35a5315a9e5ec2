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

build=build
threads=2
archs="qwen3_moe mixtral"
size=1b
dtype=q8_0
skew=0
prompt=512
decode=16
context=128
llama_dir="$HOME/.cache/tessera/llama.cpp/build/bin"
out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --archs) archs="$2"; shift 2 ;;
    --size) size="$2"; shift 2 ;;
    --dtype) dtype="$2"; shift 2 ;;
    --router-skew) skew="$2"; shift 2 ;;
    --prompt) prompt="$2"; shift 2 ;;
    --decode) decode="$2"; shift 2 ;;
    --context) context="$2"; shift 2 ;;
    --llama-cpp) llama_dir="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "run_moe_results: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

tessera="$build/tessera"
engine_bench="$build/bench/tessera-engine-bench"
for bin in "$tessera" "$engine_bench"; do
  [[ -x "$bin" ]] || { echo "run_moe_results: $bin not built (cmake --build $build)" >&2; exit 1; }
done
models="${TESSERA_BENCH_MODELS:-$HOME/.cache/tessera/bench-models}"
mkdir -p "$models"
out="${out:-$(mktemp -d /tmp/tessera-moe-results.XXXXXX)}"
mkdir -p "$out"
have_llama=0
if [[ -x "$llama_dir/llama-bench" && -x "$llama_dir/llama-batched-bench" ]]; then
  have_llama=1
else
  echo "run_moe_results: no llama.cpp in $llama_dir (bench/build_llama_cpp.sh builds it); Tessera only" >&2
fi

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -n 1), $(nproc) CPUs, $(free -g | awk '/^Mem:/ {print $2}') GiB"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "commit: $(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  if [[ "$have_llama" == 1 ]]; then
    echo "llama.cpp: $(git -C "$llama_dir/../../src" log -1 --format=%h 2>/dev/null || echo unknown) in $llama_dir"
  fi
} > "$out/machine.txt"

rows=()
for arch in $archs; do
  path="$models/$arch-$size-$dtype-skew$skew.gguf"
  if [[ ! -e "$path" ]]; then
    tmp="$models/tmp.$$.$arch-$size-$dtype.gguf"
    rm -f "$tmp"
    "$tessera" --log-level warn synth --arch "$arch" --size "$size" --format gguf --dtype "$dtype" \
      --router-skew "$skew" --out "$tmp" >&2
    mv "$tmp" "$path"
  fi
  name="$arch-$size-$dtype"
  echo "== $name: tessera-engine-bench ($out/tessera-$name.txt)" >&2
  "$engine_bench" --model "$path" --threads "$threads" --prompt "$prompt" --decode "$decode" \
    --decode-context "$context" --batches 1,16 2> "$out/tessera-$name.log" \
    | tee "$out/tessera-$name.txt" | grep '^{' > "$out/tessera-$name.jsonl"
  if [[ "$have_llama" == 1 ]]; then
    echo "== $name: llama-bench / llama-batched-bench" >&2
    # Prefill and batch-1 decode; then 16 sequences of $context prompt tokens each decoding $decode tokens.
    "$llama_dir/llama-bench" -m "$path" -t "$threads" -p "$prompt" -n "$decode" -r 3 -o json \
      > "$out/llama-$name.json" 2> "$out/llama-$name.log" || echo "llama-bench failed (see log)" >&2
    "$llama_dir/llama-batched-bench" -m "$path" -t "$threads" -c $((16 * (context + decode) + 64)) -b 2048 \
      -ub 512 -npp "$context" -ntg "$decode" -npl 1,16 --output-format jsonl \
      > "$out/llama-batched-$name.jsonl" 2> "$out/llama-batched-$name.log" \
      || echo "llama-batched-bench failed (see log)" >&2
  fi
  rows+=("$name|$out/tessera-$name.jsonl|$out/llama-$name.json|$out/llama-batched-$name.jsonl")
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/machine.txt"

/usr/bin/python3 - "$out" "$threads" "$prompt" "$context" "$decode" "${rows[@]}" <<'PY'
import json, os, sys
out, threads, prompt, context, decode = sys.argv[1:6]
rows = sys.argv[6:]

def jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(l) for l in f if l.startswith("{")]

def llama_bench(path):
    """{'pp': tok/s, 'tg': tok/s} from llama-bench -o json (a list of test records)."""
    try:
        with open(path) as f:
            recs = json.load(f)
    except (OSError, ValueError):
        return {}
    res = {}
    for r in recs:
        if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0:
            res["pp"] = r["avg_ts"]
        if r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0:
            res["tg"] = r["avg_ts"]
    return res

def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"

def ratio(a, b):
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}x"

print(open(f"{out}/machine.txt").read().rstrip())
print()
print(f"CPU, {threads} threads, same GGUF file for both engines. Prefill: one {prompt}-token prompt. Decode: "
      f"{context} tokens of context, {decode} steps; b16 = 16 concurrent sequences (tokens/s summed). "
      f"'of bw' = decode tokens/s x bytes actually read per token (attention, router, shared expert, the "
      f"experts used, lm_head, KV) / read bandwidth measured in the same process.")
print()
head = ["model", "active/total params", f"prefill {prompt} tok/s (Tessera / llama.cpp)",
        "decode b1 tok/s (Tessera, of bw / llama.cpp)", "decode b16 tok/s (Tessera / llama.cpp)", "experts read/step b1, b16"]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for row in rows:
    name, tlog, llog, blog = row.split("|")
    t = jsonl(tlog)
    model = next((l for l in t if l.get("phase") == "model"), None)
    pre = next((l for l in t if l.get("phase") == "prefill"), None)
    dec = {l["batch"]: l for l in t if l.get("phase") == "decode"}
    moe = next((l for l in t if l.get("phase") == "moe_expert_load"), None)
    if model is None:
        print(f"| {name} | Tessera run failed, see {tlog.replace('.jsonl', '.log')} |")
        continue
    lb = llama_bench(llog)
    batched = {r.get("pl"): r for r in jsonl(blog)}
    l16 = batched.get(16, {}).get("speed_tg")
    t_pre = pre["tokens_per_s"] if pre else None
    d1, d16 = dec.get(1), dec.get(16)
    t1 = d1["tokens_per_s"] if d1 else None
    t16 = d16["tokens_per_s"] if d16 else None
    cells = [name, f"{model.get('active_params', 0) / 1e9:.2f}B / {model['params'] / 1e9:.2f}B",
             f"{fmt(t_pre)} / {fmt(lb.get('pp'))} ({ratio(t_pre, lb.get('pp'))})",
             f"{fmt(t1)} ({fmt(d1['fraction_of_bandwidth'], 2) if d1 else '-'} bw) / {fmt(lb.get('tg'))} "
             f"({ratio(t1, lb.get('tg'))})",
             f"{fmt(t16)} / {fmt(l16)} ({ratio(t16, l16)})",
             f"{fmt(d1.get('moe_experts_read_per_step') if d1 else None)}, "
             f"{fmt(d16.get('moe_experts_read_per_step') if d16 else None)}"]
    print("| " + " | ".join(cells) + " |")
    if moe:
        print(f"|  | expert load max/mean {moe['max_over_mean']:.2f} over {len(moe['layers'])} layers "
              f"of {moe['num_experts']} experts (top {moe['top_k']}) |")
print()
print(f"raw: {out}")
PY

#!/usr/bin/env bash
# CPU figures for bench/RESULTS.md in one command:
#   1. synthesizes (once, cached) the ~0.5B and ~1.5B Qwen2-shape models: bf16 HF
#      checkpoints, plus q8_0 / q4_0 GGUF files when `tessera synth --help` offers gguf;
#   2. runs tessera-membw once and tessera-engine-bench per model (prefill of a
#      512-token prompt, decode at batch 1/4/16/32 with 128 tokens of context);
#   3. prints a markdown table (raw JSON lines are kept in the output directory).
#
#   bench/run_cpu_results.sh [--build build] [--threads 2] [--sizes "0.5b 1.5b"]
#                            [--dtypes "bf16 q8_0 q4_0"] [--decode 16] [--repeats 1]
#                            [--out DIR]
# Models are cached under $TESSERA_BENCH_MODELS (default ~/.cache/tessera/bench-models).
# Run time on 2 cores: ~2-4 min for 0.5B bf16, ~3x that for 1.5B.
set -euo pipefail

build=build
threads=2
sizes="0.5b 1.5b"
dtypes="bf16 q8_0 q4_0"
decode=16
repeats=1
prompt=512
context=128
batches=1,4,16,32
out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    --dtypes) dtypes="$2"; shift 2 ;;
    --decode) decode="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "run_cpu_results: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

tessera="$build/tessera"
engine_bench="$build/bench/tessera-engine-bench"
membw="$build/bench/tessera-membw"
for bin in "$tessera" "$engine_bench" "$membw"; do
  [[ -x "$bin" ]] || { echo "run_cpu_results: $bin not built (cmake --build $build)" >&2; exit 1; }
done
models="${TESSERA_BENCH_MODELS:-$HOME/.cache/tessera/bench-models}"
mkdir -p "$models"
out="${out:-$(mktemp -d /tmp/tessera-cpu-results.XXXXXX)}"
mkdir -p "$out"

gguf=0
if "$tessera" synth --help 2>&1 | grep -qi gguf; then gguf=1; fi

# Prints the path of the cached model for (size, dtype), synthesizing it first if
# needed; prints nothing (and explains on stderr) when this build cannot make it.
model_path() {
  local size="$1" dtype="$2" path tmp
  if [[ "$dtype" == bf16 || "$dtype" == f16 || "$dtype" == f32 ]]; then
    path="$models/qwen2-$size-$dtype"
    if [[ ! -f "$path/config.json" ]]; then
      tmp="$path.tmp.$$"
      rm -rf "$tmp"
      "$tessera" --log-level warn synth --arch qwen2 --size "$size" --dtype "$dtype" --out "$tmp" >&2
      mv "$tmp" "$path"
    fi
  else
    if [[ "$gguf" != 1 ]]; then
      echo "run_cpu_results: skipping $size $dtype: this tessera's synth has no gguf output yet" >&2
      return 0
    fi
    path="$models/qwen2-$size-$dtype.gguf"
    if [[ ! -e "$path" ]]; then
      tmp="$models/tmp.$$.qwen2-$size-$dtype.gguf"
      rm -rf "$tmp"
      "$tessera" --log-level warn synth --arch qwen2 --size "$size" --format gguf --dtype "$dtype" --out "$tmp" >&2
      mv "$tmp" "$path"
    fi
    # synth may write a directory holding the .gguf; pass the file itself.
    if [[ -d "$path" ]]; then path="$(find "$path" -name '*.gguf' | head -n 1)"; fi
  fi
  echo "$path"
}

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -n 1), $(nproc) CPUs, $(free -g | awk '/^Mem:/ {print $2}') GiB"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "commit: $(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo unknown)"
} > "$out/machine.txt"

echo "== membw ($out/membw.jsonl)" >&2
"$membw" --threads "$threads" --repeats 5 | tee "$out/membw.txt" | grep '^{' > "$out/membw.jsonl"

rows=()
for size in $sizes; do
  for dtype in $dtypes; do
    path="$(model_path "$size" "$dtype")"
    [[ -n "$path" ]] || continue
    log="$out/engine-$size-$dtype.jsonl"
    echo "== $size $dtype: $engine_bench --model $path ($log)" >&2
    "$engine_bench" --model "$path" --threads "$threads" --prompt "$prompt" --repeats "$repeats" \
      --decode "$decode" --decode-context "$context" --batches "$batches" 2> "$out/engine-$size-$dtype.log" \
      | tee "$out/engine-$size-$dtype.txt" | grep '^{' > "$log"
    rows+=("$size|$dtype|$log")
  done
done

echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/machine.txt"

/usr/bin/python3 - "$out" "$threads" "$prompt" "$context" "$decode" "${rows[@]}" <<'PY'
import json, sys
out, threads, prompt, context, decode = sys.argv[1:6]
rows = sys.argv[6:]

def lines(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.startswith("{")]

print(open(f"{out}/machine.txt").read().rstrip())
for l in lines(f"{out}/membw.jsonl"):
    if l.get("limit"):
        flag = "" if l.get("clean_passes", 1) else "; no undisturbed pass: other processes held the CPUs, a lower bound"
        print(f"membw: {l['threads']} thread(s): {l['read_bandwidth_gb_s']:.1f} GB/s "
              f"({l['kernel']}, {l['pages']} pages{flag})")
print()
print(f"Engine alone, CPU backend, {threads} threads; prefill of one {prompt}-token prompt; decode with "
      f"{context} tokens of context, {decode} steps; fractions are of limits measured in the same process "
      f"(read bandwidth for decode; f32 FMA peak, and int8 peak for quantized weights, for prefill and "
      f"batch >= 16).")
print()
batches = [1, 4, 16, 32]
head = ["model", "dtype", "weight GB", f"prefill {prompt} tok/s"] + \
       [f"decode b{b} tok/s" for b in batches] + ["b16/b1"]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
notes = []
for row in rows:
    size, dtype, log = row.split("|")
    ls = lines(log)
    model = next((l for l in ls if l.get("phase") == "model"), None)
    lim = next((l for l in ls if l.get("phase") == "limits" and l.get("when") == "used"), None)
    pre = next((l for l in ls if l.get("phase") == "prefill"), None)
    dec = {l["batch"]: l for l in ls if l.get("phase") == "decode"}
    if model is None or lim is None:
        print(f"| qwen2-{size} | {dtype} | run failed, see {log.replace('.jsonl', '.log')} |")
        continue
    quant = model["quantized"]
    cells = [f"qwen2-{size}", dtype, f"{model['weight_bytes'] / 1e9:.2f}"]
    if pre:
        c = f"{pre['tokens_per_s']:.1f} ({pre['fraction_of_fma_peak']:.2f} fma"
        c += f", {pre['fraction_of_int8_peak']:.2f} int8)" if quant else ")"
        cells.append(c)
    else:
        cells.append("-")
    for b in batches:
        d = dec.get(b)
        if d is None:
            cells.append("-")
            continue
        c = f"{d['tokens_per_s']:.1f} ({d['fraction_of_bandwidth']:.2f} bw"
        if b >= 16:
            c += f", {d['fraction_of_fma_peak']:.2f} fma"
            if quant:
                c += f", {d['fraction_of_int8_peak']:.2f} int8"
        cells.append(c + ")")
    r = dec[16]["tokens_per_s"] / dec[1]["tokens_per_s"] if 16 in dec and 1 in dec else None
    cells.append(f"{r:.1f}x" if r else "-")
    print("| " + " | ".join(cells) + " |")
    loads = [f"{l['loadavg_1m']:.1f}" for l in ls if l.get("phase") == "limits" and "loadavg_1m" in l]
    notes.append(f"- limits in the qwen2-{size} {dtype} run: read {lim['read_bandwidth_gb_s']:.1f} GB/s, "
                 f"FMA {lim['fma_peak_gflop_s']:.1f} GFLOP/s, int8 {lim['int8_peak_gmac_s']:.1f} GMAC/s "
                 f"(higher of before/after; load average {' / '.join(loads)})")
print()
print("\n".join(notes))
print(f"raw: {out}")
PY

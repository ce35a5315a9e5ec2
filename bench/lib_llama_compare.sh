# shellcheck shell=bash disable=SC2154,SC2034  # the settings are the caller's variables
# Shared by the scripts that put Tessera beside llama.cpp on the same GGUF file
# (run_moe_results.sh, run_quant_results.sh). Sourced, not run. The functions read the
# caller's settings from these variables (set them before calling):
#   build        the build directory (lc_setup sets tessera and engine_bench from it)
#   out          output directory (raw outputs and machine.txt land there; lc_setup makes one)
#   threads, prompt, decode, context   the benchmark shape (see lc_bench_pair)
#   llama_dir    directory of llama.cpp's binaries; have_llama: 1 when lc_find_llama found them
# Tables are printed by bench/llama_compare.py from the files lc_bench_pair writes.

# lc_defaults: the settings every same-file script shares, at their defaults (the caller
# then sets its own defaults for archs and size).
lc_defaults() {
  build=build
  threads=2
  prompt=512
  decode=16
  context=128
  llama_dir="$HOME/.cache/tessera/llama.cpp/build/bin"
  out=""
}

# lc_common_arg FLAG VALUE: sets the shared setting FLAG names (--build, --threads, --archs,
# --size, --prompt, --decode, --context, --llama-cpp, --out) and returns 0; 1 for any other
# FLAG. The caller shifts 2 on success.
lc_common_arg() {
  case "$1" in
    --build) build="$2" ;;
    --threads) threads="$2" ;;
    --archs) archs="$2" ;;
    --size) size="$2" ;;
    --prompt) prompt="$2" ;;
    --decode) decode="$2" ;;
    --context) context="$2" ;;
    --llama-cpp) llama_dir="$2" ;;
    --out) out="$2" ;;
    *) return 1 ;;
  esac
}

# lc_setup SCRIPT: tessera and engine_bench from $build (exits when either is not built),
# models: the model cache ($TESSERA_BENCH_MODELS, default ~/.cache/tessera/bench-models),
# out: a new /tmp/tessera-SCRIPT.XXXXXX unless set.
lc_setup() {
  local who="$1" bin
  tessera="$build/tessera"
  engine_bench="$build/bench/tessera-engine-bench"
  for bin in "$tessera" "$engine_bench"; do
    [[ -x "$bin" ]] || { echo "$who: $bin not built (cmake --build $build)" >&2; exit 1; }
  done
  models="${TESSERA_BENCH_MODELS:-$HOME/.cache/tessera/bench-models}"
  mkdir -p "$models"
  out="${out:-$(mktemp -d "/tmp/tessera-$who.XXXXXX")}"
  mkdir -p "$out"
}

# lc_find_llama SCRIPT TOOL...: have_llama=1 when every TOOL is an executable in $llama_dir,
# else 0 and a line on stderr naming what is missing.
lc_find_llama() {
  local who="$1" tool
  shift
  have_llama=1
  for tool in "$@"; do
    if [[ ! -x "$llama_dir/$tool" ]]; then
      have_llama=0
      echo "$who: no $tool in $llama_dir (bench/build_llama_cpp.sh builds it); Tessera only" >&2
      return 0
    fi
  done
}

# lc_machine_txt: machine, load, commits -> $out/machine.txt (the tables' header).
lc_machine_txt() {
  {
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -n 1), $(nproc) CPUs, $(free -g | awk '/^Mem:/ {print $2}') GiB"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "commit: $(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    if [[ "$have_llama" == 1 ]]; then
      echo "llama.cpp: $(git -C "$llama_dir/../../src" log -1 --format=%h 2>/dev/null || echo unknown) in $llama_dir"
    fi
  } > "$out/machine.txt"
}

# lc_cached PATH CMD...: makes PATH once: runs CMD with every argument "@OUT@" replaced by
# a temporary path and renames the result to PATH, so an interrupted run never leaves a
# half-written model that a later run would take for the cached one. Nothing when PATH exists.
lc_cached() {
  local path="$1" tmp arg
  shift
  [[ -e "$path" ]] && return 0
  tmp="$(dirname "$path")/tmp.$$.$(basename "$path")"
  local cmd=()
  for arg in "$@"; do
    [[ "$arg" == "@OUT@" ]] && cmd+=("$tmp") || cmd+=("$arg")
  done
  rm -f "$tmp"
  "${cmd[@]}" >&2 || { rm -f "$tmp"; return 1; }
  mv "$tmp" "$path"
}

# lc_bench_pair NAME PATH: both engines on one GGUF file, one after the other.
#   Tessera: tessera-engine-bench, prefill of a $prompt-token prompt, decode at batch 1 and 16
#     ($context tokens of context, $decode timed steps) -> $out/tessera-NAME.{txt,log,jsonl};
#   llama.cpp (when $have_llama): llama-bench -p $prompt -n $decode -r 3 -> llama-NAME.json, and
#     llama-batched-bench, 16 sequences of $context prompt tokens decoding $decode each
#     -> llama-batched-NAME.jsonl. A failing llama.cpp run is reported and leaves its cells empty.
# Returns 1 when Tessera's run failed (no decode figures), after running llama.cpp all the same.
lc_bench_pair() {
  local name="$1" path="$2"
  echo "== $name: tessera-engine-bench ($out/tessera-$name.txt)" >&2
  "$engine_bench" --model "$path" --threads "$threads" --prompt "$prompt" --decode "$decode" \
    --decode-context "$context" --batches 1,16 2> "$out/tessera-$name.log" \
    | tee "$out/tessera-$name.txt" | grep '^{' > "$out/tessera-$name.jsonl" || true
  if [[ "$have_llama" == 1 ]]; then
    echo "== $name: llama-bench / llama-batched-bench" >&2
    "$llama_dir/llama-bench" -m "$path" -t "$threads" -p "$prompt" -n "$decode" -r 3 -o json \
      > "$out/llama-$name.json" 2> "$out/llama-$name.log" || echo "llama-bench failed (see $out/llama-$name.log)" >&2
    "$llama_dir/llama-batched-bench" -m "$path" -t "$threads" -c $((16 * (context + decode) + 64)) -b 2048 \
      -ub 512 -npp "$context" -ntg "$decode" -npl 1,16 --output-format jsonl \
      > "$out/llama-batched-$name.jsonl" 2> "$out/llama-batched-$name.log" \
      || echo "llama-batched-bench failed (see $out/llama-batched-$name.log)" >&2
  fi
  grep -q '"phase":"decode"' "$out/tessera-$name.jsonl" \
    || { echo "tessera-engine-bench failed on $path (see $out/tessera-$name.log)" >&2; return 1; }
}

#!/usr/bin/env bash
# Server figures for bench/RESULTS.md in one command: starts `tessera serve` on a
# loopback port it picks, runs tessera-bench at each concurrency (closed loop of
# random prompts, streamed /v1/completions, ignore_eos), prints a markdown table,
# and stops the server. JSON and SVG per concurrency are kept in the output dir.
#
#   bench/run_server_results.sh --model PATH [--build build] [--threads 2]
#        [--concurrency "1 4 16"] [--input-len 128] [--output-len 32] [--prompts-per-client 2]
#        [--tokenizer HF_DIR] [--out DIR]
# --tokenizer makes prompt lengths exact in tokens (default: the model dir; a .gguf
# alone gets prompts of ~1 token per word and counts from the server's usage).
set -euo pipefail

build=build threads=2 conc="1 4 16" input_len=128 output_len=32 per_client=2 model="" out="" tokenizer=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --concurrency) conc="$2"; shift 2 ;;
    --input-len) input_len="$2"; shift 2 ;;
    --output-len) output_len="$2"; shift 2 ;;
    --prompts-per-client) per_client="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --tokenizer) tokenizer="$2"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "run_server_results: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n "$model" ]] || { echo "run_server_results: --model is required" >&2; exit 2; }
out="${out:-$(mktemp -d /tmp/tessera-server-results.XXXXXX)}"
mkdir -p "$out"
[[ -z "$tokenizer" && -d "$model" ]] && tokenizer="$model"

"$build/tessera" --log-level warn serve --model "$model" --threads "$threads" --port 0 \
  --port-file "$out/port" --grpc-port -1 >"$out/serve.log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
port=""
for _ in $(seq 1200); do  # the port file is JSON: {"grpc":-1,"http":PORT}
  [[ -z "$port" && -s "$out/port" ]] && port=$(sed -n 's/.*"http":\([0-9]*\).*/\1/p' "$out/port")
  [[ -n "$port" ]] && curl -sf "http://127.0.0.1:$port/ready" >/dev/null && break
  kill -0 $server 2>/dev/null || { cat "$out/serve.log" >&2; exit 1; }
  sleep 0.5
done
url="http://127.0.0.1:$port"

echo "| concurrency | requests | req/s | output tok/s | TTFT mean / p99 (ms) | TPOT mean (ms) | ITL mean / p99 (ms) |"
echo "|---|---|---|---|---|---|---|"
seed=1
for c in $conc; do
  n=$((c * per_client))
  "$build/bench/tessera-bench" --base-url "$url" --dataset random --input-len "$input_len" \
    --output-len "$output_len" --num-prompts "$n" --max-concurrency "$c" --seed $((seed++)) \
    ${tokenizer:+--tokenizer "$tokenizer"} --no-progress --result-json "$out/c$c.json" \
    --svg "$out/c$c.svg" >"$out/c$c.txt" 2>&1 || { cat "$out/c$c.txt" >&2; exit 1; }
  /usr/bin/python3 - "$out/c$c.json" "$c" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["runs"][0]
m = lambda k, s: r[k][s]
print(f"| {sys.argv[2]} | {r['completed']} | {r['request_throughput']:.3f} | {r['output_throughput']:.1f} | "
      f"{m('ttft_ms','mean'):.0f} / {m('ttft_ms','p99'):.0f} | {m('tpot_ms','mean'):.1f} | "
      f"{m('itl_ms','mean'):.1f} / {m('itl_ms','p99'):.1f} |")
PY
done
echo "(raw results in $out)"

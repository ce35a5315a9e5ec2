#!/usr/bin/env bash
# What time-bounded steps cost: `tessera serve` at concurrency 16 with
# --max-step-ms 250 (the default) and 0 (token budget only), alternating, two runs
# each, tessera-bench random 128 in / 32 out, 32 prompts, new seed per run.
#   bench/run_step_bound_results.sh MODEL [BUILD_DIR]
# Run on a quiet machine; prints tessera-bench's summary lines per setting.
set -euo pipefail
model=${1:?usage: bench/run_step_bound_results.sh MODEL [BUILD_DIR]}
build=${2:-build}
pid=""
trap '[[ -n "$pid" ]] && kill "$pid" 2>/dev/null || true' EXIT  # never leave a server behind
for ms in 250 0 250 0; do
  port_file=$(mktemp)
  "$build/tessera" serve --model "$model" --port 0 --grpc-port -1 --port-file "$port_file" --threads 2 \
    --max-step-ms "$ms" > "/tmp/step-bound-$ms.log" 2>&1 &
  pid=$!
  port=""
  for _ in $(seq 1 240); do
    port=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['http'])" "$port_file" 2>/dev/null || true)
    [[ -n "$port" ]] && curl -s "localhost:$port/ready" | grep -q ready && break
    sleep 0.5
  done
  "$build/bench/tessera-bench" --base-url "http://127.0.0.1:$port" --endpoint /v1/completions --dataset random \
    --input-len 128 --output-len 32 --num-prompts 32 --max-concurrency 16 --seed "$RANDOM" \
    --result-json "/tmp/step-bound-$ms-$RANDOM.json" 2>/dev/null \
    | grep -E "Request throughput|Output token throughput|Mean TTFT|P99 TTFT|Mean ITL|P99 ITL" | sed "s/^/max-step-ms=$ms: /"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  rm -f "$port_file"
done

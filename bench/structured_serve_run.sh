#!/bin/bash
# Starts `tessera serve` on MODEL_DIR, runs bench/structured_serve_bench.py against it (extra arguments
# go to it), and stops the server by its PID. For a quiet run (the "Structured outputs" figure in bench/RESULTS.md):
#   bench/quiet_run.sh 500 bench/structured_serve_run.sh /tmp/q05 --streams 16 --max-tokens 96 --repeats 2
set -u
model=$1; shift
work=$(mktemp -d /tmp/tessera-structured-serve.XXXXXX)
./build/tessera serve --model "$model" --host 127.0.0.1 --port 0 --grpc-port -1 --port-file "$work/port.json" \
  --max-num-seqs 32 > "$work/serve.log" 2>&1 &
pid=$!
port=
for _ in $(seq 1 600); do
  if [ -s "$work/port.json" ]; then
    port=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['http'])" "$work/port.json")
    curl -sf "http://127.0.0.1:$port/ready" > /dev/null && break
  fi
  sleep 0.1
done
python3 bench/structured_serve_bench.py --url "http://127.0.0.1:$port" "$@"
rc=$?
kill "$pid"
wait "$pid"
rm -rf "$work"
exit $rc

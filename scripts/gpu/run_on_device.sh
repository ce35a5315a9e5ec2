#!/usr/bin/env bash
# Verifies the CUDA backend on a GPU machine in one device-tool call, from the repo root,
# with .gpu/ (made by scripts/gpu/bundle) carried:
#   run(command="bash scripts/gpu/run_on_device.sh", carry=[".gpu"], timeout_s=600)
# Stages, each time-boxed, all within ~9 minutes (STAGES picks some, e.g. STAGES=bench):
#   env        nvidia-smi, driver, libraries (finds cuBLAS on the image)   -> env.txt
#   tests      tessera_cuda_tests (GoogleTest)                             -> cuda_tests.xml, cuda_tests.log
#   memcheck   compute-sanitizer --tool memcheck on tessera_cuda_tests     -> memcheck.log
#   racecheck  compute-sanitizer --tool racecheck on the same tests        -> racecheck.log
#   bench      tessera-cuda-bench with the time that is left               -> cuda_bench.json, cuda_bench.log
#              (its "quant" section runs right after the ceilings: the fused dequantize-GEMV
#              against cuBLAS / LinearTiled on bf16, whose rows summary.txt repeats)
# then summary.txt (also printed last). At most these 8 files go to $OUT (.gpu/out
# when OUT is unset, e.g. a dry run on a machine without a GPU, where the tests
# skip, the bench reports "no CUDA device" and the sanitizer stages are skipped
# when compute-sanitizer is absent).
# Environment: STAGES ("env tests memcheck racecheck bench"), BENCH_ARGS (extra
# tessera-cuda-bench flags), TOTAL_S (540), T_TESTS (120), T_MEMCHECK (150),
# T_RACECHECK (90), RACE_FILTER (gtest filter for racecheck; '' for all tests).
# Stage status: ok, FAILED, skipped (not run here), partial (a sanitizer cut off by
# its time box before finding anything). Exit status: 1 when a stage FAILED, else 0.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
G=$ROOT/.gpu
OUT=${OUT:-$G/out}
mkdir -p "$OUT"
STAGES=${STAGES:-env tests memcheck racecheck bench}
START=$(date +%s)
DEADLINE=$((START + ${TOTAL_S:-540}))
T_TESTS=${T_TESTS:-120} T_MEMCHECK=${T_MEMCHECK:-150} T_RACECHECK=${T_RACECHECK:-90}
SUMMARY=()
FAILED=0

say() { echo "[$(($(date +%s) - START))s] $*"; }
record() {  # stage status seconds detail
  SUMMARY+=("$(printf '%-10s %-8s %5ss  %s' "$1" "$2" "$3" "$4")")
  [[ "$2" == ok || "$2" == skipped || "$2" == partial ]] || FAILED=1
}
left() { echo $((DEADLINE - $(date +%s))); }
want() { [[ " $STAGES " == *" $1 "* ]]; }
# Time box for a stage: its own limit, or what is left before the deadline.
box() { local l; l=$(left); (( l < $1 )) && echo "$l" || echo "$1"; }

if [[ ! -x "$G/bin/tessera_cuda_tests" ]]; then
  echo "run_on_device: $G/bin/tessera_cuda_tests missing: run scripts/gpu/bundle here and carry .gpu" >&2
  exit 1
fi

# --- libraries: ours from .gpu/lib; the rest (cuBLAS) from the image.
export LD_LIBRARY_PATH="$G/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
find_lib() {  # prints a directory holding $1
  local d p
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64 \
           /usr/local/cuda-*/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu /usr/local/nvidia/lib64; do
    [[ -e "$d/$1" ]] && { echo "$d"; return 0; }
  done
  p=$(ldconfig -p 2>/dev/null | awk -v n="$1" '$1 == n { print $NF; exit }')
  [[ -n "$p" ]] && { dirname "$p"; return 0; }
  p=$(python3 -c 'import nvidia, os; [print(os.path.join(r)) for b in nvidia.__path__ for r, _, fs in os.walk(b) if "'"$1"'" in fs]' 2>/dev/null | head -n1)
  [[ -n "$p" ]] && { echo "$p"; return 0; }
  p=$(timeout 30 find / -xdev -name "$1" -not -path '/proc/*' 2>/dev/null | head -n1)
  [[ -n "$p" ]] && { dirname "$p"; return 0; }
  return 1
}
LIBNOTES=""
for b in "$G"/bin/*; do
  for name in $(ldd "$b" 2>/dev/null | awk '/not found/ { print $1 }' | sort -u); do
    if d=$(find_lib "$name"); then
      export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
      LIBNOTES+="$name from $d; "
    else
      LIBNOTES+="$name NOT FOUND; "
    fi
  done
done
# cuBLAS is opened with dlopen on first use (kernels/cuda/cublas_loader.cc), so ldd does not
# list it: make sure the loader finds it, as it would a linked library.
if ! ldconfig -p 2>/dev/null | grep -q "libcublas.so.13 "; then
  if d=$(find_lib libcublas.so.13); then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"; LIBNOTES+="libcublas.so.13 from $d; "
  else
    LIBNOTES+="libcublas.so.13 NOT FOUND; "
  fi
fi
if ldd "$G/bin/tessera-cuda-bench" 2>&1 | grep -q "GLIBCXX.*not found"; then
  export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$G/lib-fallback"  # the image's libstdc++ is older than ours
  LIBNOTES+="libstdc++ from .gpu/lib-fallback; "
fi
# The tests were compiled with TESSERA_SOURCE_DIR of the build machine: point it here.
src=$(sed -n 's/^source_dir=//p' "$G/manifest.txt" 2>/dev/null)
if [[ -n "$src" && ! -e "$src" ]]; then mkdir -p "$(dirname "$src")" && ln -s "$ROOT" "$src"; fi
# Tokenizer files for engine/synth (the device has no npm).
if [[ -f "$G/npm.tar.gz" ]]; then
  NPM=${TMPDIR:-/tmp}/tessera-gpu-npm
  mkdir -p "$NPM" && tar -C "$NPM" -xzf "$G/npm.tar.gz" && export TESSERA_NPM_DIR=$NPM
fi

if want env; then
  t0=$(date +%s)
  {
    echo "== date: $(date -u +%Y-%m-%dT%H:%M:%SZ)   host: $(hostname)   kernel: $(uname -r)"
    echo "== bundle"; cat "$G/manifest.txt" 2>/dev/null
    echo "== libraries: $LIBNOTES"
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    for b in "$G"/bin/*; do echo "-- ldd $b"; ldd "$b"; done
    echo "== nvidia-smi"
    if command -v nvidia-smi >/dev/null; then
      timeout 30 nvidia-smi
      timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv
    else
      echo "nvidia-smi: not found"
    fi
    echo "== compute-sanitizer: $(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || echo absent)"
    echo "== nvcc: $(nvcc --version 2>/dev/null | tail -n 2 | tr '\n' ' ')"
    echo "== memory"; free -g 2>/dev/null; df -h /tmp /dev/shm 2>/dev/null
  } > "$OUT/env.txt" 2>&1
  gpu=$(command -v nvidia-smi >/dev/null && timeout 30 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n1)
  record env ok $(($(date +%s) - t0)) "${gpu:-no nvidia-smi}; $LIBNOTES"
  say "env: ${gpu:-no nvidia-smi}"
fi

# Reads a GoogleTest XML: "N tests, F failed, S skipped" (+ failing names).
xml_counts() {
  python3 - "$1" <<'EOF' 2>/dev/null || echo "no XML"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
cases = list(root.iter("testcase"))
failed = [c.get("classname") + "." + c.get("name") for c in cases if c.find("failure") is not None]
skipped = [c for c in cases if c.get("result") == "skipped" or c.find("skipped") is not None]
print(f"{len(cases)} tests, {len(failed)} failed, {len(skipped)} skipped" + (": " + " ".join(failed[:8]) if failed else ""))
EOF
}

SANITIZER=$(command -v compute-sanitizer || { [[ -x /usr/local/cuda/bin/compute-sanitizer ]] && echo /usr/local/cuda/bin/compute-sanitizer; })

if want tests; then
  t0=$(date +%s); lim=$(box "$T_TESTS")
  say "tests (limit ${lim}s)"
  timeout -k 10 "$lim" "$G/bin/tessera_cuda_tests" --gtest_output="xml:$OUT/cuda_tests.xml" > "$OUT/cuda_tests.log" 2>&1
  rc=$?
  counts=$(xml_counts "$OUT/cuda_tests.xml")
  detail="rc=$rc, $counts"
  status=$([[ $rc == 0 ]] && echo ok || echo FAILED)
  (( rc == 124 || rc == 137 )) && detail+=" (timed out)"
  # A GPU that the CUDA runtime cannot use (e.g. a driver older than CUDA 13) makes
  # every test skip: that is a failure here, not a pass.
  if [[ $status == ok ]] && command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU' &&
     [[ "$counts" =~ ^([0-9]+)\ tests,\ 0\ failed,\ ([0-9]+)\ skipped ]] && [[ ${BASH_REMATCH[1]} == "${BASH_REMATCH[2]}" ]]; then
    status=FAILED
    detail+="; every test skipped although nvidia-smi lists a GPU (see cuda_tests.log)"
  fi
  record tests "$status" $(($(date +%s) - t0)) "$detail"
fi

sanitize() {  # stage tool limit [gtest filter]
  local stage=$1 tool=$2 lim t0 rc errs
  t0=$(date +%s)
  if [[ -z "$SANITIZER" ]]; then record "$stage" skipped 0 "compute-sanitizer not found"; return; fi
  lim=$(box "$3")
  if (( lim < 20 )); then record "$stage" skipped 0 "no time left"; return; fi
  say "$stage (limit ${lim}s)"
  timeout -k 10 "$lim" "$SANITIZER" --tool "$tool" --error-exitcode 99 --print-limit 100 \
    "$G/bin/tessera_cuda_tests" --gtest_brief=1 ${4:+--gtest_filter="$4"} > "$OUT/$stage.log" 2>&1
  rc=$?
  errs=$(grep -Eo '(ERROR|RACECHECK) SUMMARY: [0-9]+ [a-z]+' "$OUT/$stage.log" | tail -n1)
  local status=FAILED
  [[ $rc == 0 ]] && status=ok
  # Cut off by its time box with no error found so far: inconclusive, not failed.
  if (( rc == 124 || rc == 137 )); then
    errs+=" timed out: partial run (see the log for the tests it finished)"
    grep -Eq '(ERROR SUMMARY: [1-9]|RACECHECK SUMMARY: [1-9]|Invalid (__global__|__shared__)|Race reported)' \
      "$OUT/$stage.log" || status=partial
  fi
  record "$stage" "$status" $(($(date +%s) - t0)) "rc=$rc, ${errs:-no summary line}; $(grep -Eo '\[ *(PASSED|FAILED|SKIPPED) *\].*' "$OUT/$stage.log" | head -n 3 | tr '\n' ' ')"
}
want memcheck && sanitize memcheck memcheck "$T_MEMCHECK"
# racecheck: the kernels that share data through shared memory (reductions, tiles).
want racecheck && sanitize racecheck racecheck "$T_RACECHECK" \
  "${RACE_FILTER-*PagedAttention*:*RmsNorm*:*Sampling*:*LinearTiled*:*SelfTest*:*CudaMoeKernels*}"

if want bench; then
  t0=$(date +%s); lim=$(left)
  if (( lim < 60 )); then
    record bench skipped 0 "no time left ($lim s)"
  else
    budget=$((lim - 45))  # the bench stops starting measurements then; the kill is 30 s later
    say "bench (budget ${budget}s)"
    # shellcheck disable=SC2086
    timeout -k 10 $((budget + 30)) "$G/bin/tessera-cuda-bench" --json "$OUT/cuda_bench.json" \
      --time-budget "$budget" ${BENCH_ARGS:-} > "$OUT/cuda_bench.log" 2>&1
    rc=$?
    note=""
    case $rc in
      0) status=ok ;;
      3) status=FAILED; note="no CUDA device" ;;
      *) status=FAILED ;;
    esac
    skipped=$(grep -c 'skipped: time budget' "$OUT/cuda_bench.json" 2>/dev/null || true)
    errors=$(grep -c '"error"' "$OUT/cuda_bench.json" 2>/dev/null || true)
    record bench "$status" $(($(date +%s) - t0)) "rc=$rc${note:+ ($note)}; ${skipped:-0} measurements skipped for time, ${errors:-0} entries with errors (cuda_bench.json)"
    echo "---- tessera-cuda-bench (end of cuda_bench.log)"
    tail -n 70 "$OUT/cuda_bench.log"
  fi
fi

# What comes back: <= 8 files, each < 16 MiB.
rm -f "$OUT"/*.tmp
for f in "$OUT"/*; do
  [[ -f "$f" ]] || continue
  if (( $(stat -c %s "$f") > 15 * 1024 * 1024 )); then
    tail -c $((15 * 1024 * 1024)) "$f" > "$f.cut" && mv "$f.cut" "$f"
  fi
done
{
  echo "== run_on_device.sh summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(($(date +%s) - START)) s, $(sed -n 's/^commit=//p' "$G/manifest.txt" 2>/dev/null))"
  printf '%s\n' "${SUMMARY[@]}"
  # The end-to-end CUDA-vs-CPU greedy agreement (tests/cuda/model_agreement_test.cc).
  grep -h "top-1 agreement" "$OUT/cuda_tests.log" 2>/dev/null | head -n 8
  # Quantized weights: does the fused dequantize-GEMV beat cuBLAS on the bf16 weight at m = 1 / 16?
  grep -hE '^quant +(QuantGemv|CublasLinear|LinearTiled)' "$OUT/cuda_bench.log" 2>/dev/null | head -n 24
  echo "result: $([[ $FAILED == 0 ]] && echo PASS || echo FAIL)   files: $(cd "$OUT" && ls | tr '\n' ' ')"
} > "$OUT/summary.txt"
cat "$OUT/summary.txt"
exit $FAILED

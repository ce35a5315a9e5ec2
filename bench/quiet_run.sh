#!/usr/bin/env bash
# Runs one benchmark command on a quieter machine: the processes that would compete for the CPU
# are frozen (SIGSTOP) while it runs and resumed (SIGCONT) when it ends, however it ends.
#
#   bench/quiet_run.sh [--comm REGEX] [--match REGEX] [--pid PID]... SECONDS COMMAND [ARGS...]
#
# What is frozen, chosen before COMMAND starts and again every second while it runs (so that a
# compiler started meanwhile is frozen too):
#   --comm REGEX   processes whose name (ps comm) matches; default, when no --match or --pid is
#                  given: the toolchain of a build or test run (compilers, linkers, ninja, make,
#                  cmake, ctest, ccache, nvcc)
#   --match REGEX  processes whose whole command line matches (e.g. another checkout's servers)
#   --pid PID      that process and its descendants (repeatable)
# Never frozen: PID 1, kernel threads, this script, its ancestors (your shell, your terminal)
# and its descendants (COMMAND's whole process tree).
# COMMAND runs under `timeout SECONDS`; the exit status is COMMAND's (124 when it timed out).
# Every frozen process is resumed on exit, Ctrl-C and SIGTERM (not on SIGKILL of this script:
# then `kill -CONT` the PIDs it printed). What it froze is printed on stderr.
# The figures in bench/RESULTS.md marked "quiet" ran under this helper (or its earlier copy,
# which froze every other session's processes on the shared development machine).
set -uo pipefail

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }

comm_re="" match_re="" pids=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --comm) comm_re=$2; shift 2 ;;
    --match) match_re=$2; shift 2 ;;
    --pid) pids+=("$2"); shift 2 ;;
    -h|--help) usage 0 ;;
    --) shift; break ;;
    -*) echo "quiet_run.sh: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
[[ $# -ge 2 && $1 =~ ^[0-9]+$ ]] || usage
secs=$1; shift
if [[ -z $comm_re && -z $match_re && ${#pids[@]} -eq 0 ]]; then
  comm_re='^(cc1|cc1plus|as|ld|ld\.bfd|ld\.gold|ld\.lld|collect2|gcc|g\+\+|c\+\+|cc|clang|clang\+\+|clang-[0-9]+|nvcc|cicc|ptxas|fatbinary|ninja|make|gmake|cmake|ctest|ccache)$'
fi

declare -A frozen=()
# shellcheck disable=SC2317  # called by the EXIT trap
thaw() {
  local p
  for p in "${!frozen[@]}"; do kill -CONT "$p" 2>/dev/null; done
  [[ ${#frozen[@]} -gt 0 ]] && echo "quiet_run.sh: resumed ${#frozen[@]} processes" >&2
}
trap thaw EXIT
trap 'kill -TERM "$cmd_pid" 2>/dev/null; exit 130' INT TERM
cmd_pid=""

# The PIDs to freeze now: selected, and neither protected nor our own.
select_pids() {
  ps -eo pid=,ppid=,comm=,args= | awk -v self="$$" -v comm_re="$comm_re" -v match_re="$match_re" \
      -v roots="${pids[*]:-}" '
    { pid[NR] = $1; ppid[$1] = $2; comm[$1] = $3; a = $0; sub(/^ *[0-9]+ +[0-9]+ +[^ ]+ */, "", a); args[$1] = a }
    END {
      # ancestors of this script: protected
      for (p = self; p > 1 && !(p in anc); p = ppid[p]) anc[p] = 1
      n = split(roots, r, " ")
      for (i = 1; i <= NR; i++) {
        p = pid[i]
        if (p <= 2 || ppid[p] == 2 || (p in anc)) continue
        mine = 0; root = 0; d = 0
        for (q = p; q > 1 && d++ < 256; q = ppid[q]) {
          if (q == self) { mine = 1; break }
          for (j = 1; j <= n; j++) if (q == r[j]) root = 1
        }
        if (mine) continue
        if ((comm_re != "" && comm[p] ~ comm_re) || (match_re != "" && args[p] ~ match_re) || root)
          print p, comm[p]
      }
    }'
}

freeze() {
  local p name
  while read -r p name; do
    [[ -n ${frozen[$p]:-} ]] && continue
    if kill -STOP "$p" 2>/dev/null; then
      frozen[$p]=$name
      echo "quiet_run.sh: froze $p ($name)" >&2
    fi
  done < <(select_pids)
}

freeze
timeout "$secs" "$@" &
cmd_pid=$!
while kill -0 "$cmd_pid" 2>/dev/null; do
  sleep 1
  freeze
done
wait "$cmd_pid"
exit $?

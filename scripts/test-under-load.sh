#!/usr/bin/env bash
# The suite under a full CPU load: one busy loop per core (stress-ng's when it is installed,
# else a Python loop) while `make test` (or the command given) runs N times in a row; uptime
# before and after each run. Every run must pass: no test may depend on how busy the machine
# is (docs/testing.md).
#
#   scripts/test-under-load.sh            # 3 runs of `make test`
#   RUNS=1 scripts/test-under-load.sh .venv/bin/python -m pytest -q tests/unit
set -u
cd "$(dirname "$0")/.."
runs=${RUNS:-3}
cores=$(nproc)
if [ $# -eq 0 ]; then set -- make test; fi

loops=()
stop_loops() {
  for pid in "${loops[@]}"; do kill "$pid" 2>/dev/null; done
  wait "${loops[@]}" 2>/dev/null
}
trap stop_loops EXIT
if command -v stress-ng >/dev/null 2>&1; then
  stress-ng --cpu "$cores" --quiet &
  loops+=($!)
  echo "load: stress-ng --cpu $cores (pid $!)"
else
  for _ in $(seq "$cores"); do
    python3 -c 'while True: pass' &
    loops+=($!)
  done
  echo "load: $cores Python busy loops (pids ${loops[*]})"
fi
sleep 5 # let the load average see them

failed=0
for run in $(seq "$runs"); do
  echo "=== run $run of $runs: $*"
  echo "before: $(uptime)"
  start=$(date +%s)
  "$@"
  code=$?
  echo "after:  $(uptime)"
  echo "=== run $run: exit $code in $(($(date +%s) - start)) s"
  [ "$code" -eq 0 ] || failed=$((failed + 1))
done
echo "$((runs - failed)) of $runs runs passed under a load of $cores busy loops"
[ "$failed" -eq 0 ]

#!/usr/bin/env bash
# Make a flaky test visible: run ONE test file N times in one process and N times under `-n 2`
# (the CI's two workers), one pytest at a time, and print each run's failures and a count per test.
#
#   scripts/flaky.sh tests/e2e/test_failures.py          # 5 + 5 runs
#   scripts/flaky.sh tests/e2e/test_failures.py 3 -k features   # 3 + 3 runs, extra pytest arguments
#   FLAKY_MODES=serial scripts/flaky.sh tests/e2e/test_tour.py 2   # only one of the modes ("serial", "n2")
#
# Each run's output is kept under test-artifacts/flaky/<mode>-<run>.log (the failures' messages);
# the exit status is 1 if any run failed. Load the machine beside it (a parallel job) to see what a
# busy CI machine sees.
set -uo pipefail
cd "$(dirname "$0")/.."

file=${1:?usage: scripts/flaky.sh TEST_FILE [RUNS] [PYTEST_ARGS...]}
runs=${2:-5}
shift $(( $# >= 2 ? 2 : 1 ))
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "RUNS must be a whole number >= 1, not '$runs'" >&2; exit 2; }
python=${PYTHON:-.venv/bin/python}
logs=test-artifacts/flaky
mkdir -p "$logs"

declare -A failed_in  # "mode test" -> runs it failed in
any=0
for mode in ${FLAKY_MODES:-serial n2}; do
  case $mode in
    serial) workers=() ;;
    n2) workers=(-n 2) ;;
    *) echo "unknown mode '$mode' (serial, n2)" >&2; exit 2 ;;
  esac
  for run in $(seq 1 "$runs"); do
    log="$logs/$mode-$run.log"
    start=$SECONDS
    "$python" -m pytest "$file" "${workers[@]}" -q -rfE "$@" >"$log" 2>&1
    rc=$?
    took=$(( SECONDS - start ))
    # pytest's short summary: "FAILED path::test - message", "ERROR path::test - message"
    bad=$(grep -E '^(FAILED|ERROR) ' "$log" | sed -E 's/ - .*//' | sort -u)
    summary=$(grep -E '^=* ?[0-9]+ (passed|failed|errors?|skipped|deselected)' "$log" | tail -1 | tr -d '=' | xargs)
    if [[ $rc -eq 0 ]]; then
      printf '%-6s run %d/%d: ok      %4ds  %s\n' "$mode" "$run" "$runs" "$took" "$summary"
    else
      any=1
      printf '%-6s run %d/%d: FAILED  %4ds  %s (exit %d, %s)\n' "$mode" "$run" "$runs" "$took" "$summary" "$rc" "$log"
      if [[ -z "$bad" ]]; then bad="(no test named: exit $rc, see the log)"; fi
      while IFS= read -r line; do
        printf '    %s\n' "$line"
        failed_in["$mode $line"]=$(( ${failed_in["$mode $line"]:-0} + 1 ))
      done <<<"$bad"
    fi
  done
done

echo
if [[ $any -eq 0 ]]; then
  echo "no failures in ${FLAKY_MODES:-serial n2} x $runs runs of $file"
else
  echo "failures per test (mode: failed runs of $runs):"
  for key in "${!failed_in[@]}"; do
    printf '  %-6s %2d  %s\n' "${key%% *}" "${failed_in[$key]}" "${key#* }"
  done | sort -k3 -k1
fi
exit $any

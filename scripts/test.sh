#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to every test passing: installs the dependencies
# (Debian packages; numpy and the OpenAI SDK into build/venv, the tests' one Python), fetches the
# real chat model the model tests use, checks formatting, builds with warnings as errors (the
# Python extension module too), runs the unit, integration, bad-input, model and multi-process
# (mpiexec) suites (the Python package's pytest suite is in integration and model), proves
# `pip install .` in a fresh virtual environment, then builds only the unit and bad-input tests
# under AddressSanitizer and runs them again.
#
# Prints each phase's wall time as it ends and, at the end (also after a failure), a table of
# the phases and one summary line: "test.sh: N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)
LOG_DIR=build/test-logs
RUN_START=$SECONDS
PHASES=()
PASSED=0
FAILED=0
CURRENT=""
PHASE_START=0

begin_phase() {
  CURRENT=$1
  PHASE_START=$SECONDS
  echo "== $CURRENT"
}

end_phase() {
  local took=$((SECONDS - PHASE_START))
  PHASES+=("$(printf '%-34s %6d s' "$CURRENT" "$took")")
  echo "== $CURRENT: ${took} s"
  CURRENT=""
}

summary() {
  local status=$?
  local failed_phase=0
  if [ -n "$CURRENT" ]; then
    failed_phase=1
    PHASES+=("$(printf '%-34s %6d s  (failed)' "$CURRENT" "$((SECONDS - PHASE_START))")")
  fi
  echo
  echo "== phase times"
  local line
  for line in "${PHASES[@]}"; do echo "  $line"; done
  printf '  %-34s %6d s\n' "total" "$((SECONDS - RUN_START))"
  # A phase that did not end (a build error, an interrupted run) fails the run too.
  if { [ "$status" -ne 0 ] || [ "$failed_phase" = 1 ]; } && [ "$FAILED" -eq 0 ]; then FAILED=1; fi
  echo "test.sh: $PASSED passed, $FAILED failed"
}
trap summary EXIT
trap 'exit 143' TERM INT

# Runs ctest with the given arguments, keeping its output in $LOG_DIR/NAME.log and adding its
# counts to the summary. Fails the script when a test fails.
run_ctest() {
  local name=$1
  shift
  local log="$LOG_DIR/$name.log"
  local rc=0
  ctest "$@" 2>&1 | tee "$log" || rc=$?
  local counts
  counts=$(grep -Eo '[0-9]+ tests failed out of [0-9]+' "$log" | tail -1 || true)
  if [ -n "$counts" ]; then
    local failed total
    failed=$(echo "$counts" | awk '{print $1}')
    total=$(echo "$counts" | awk '{print $NF}')
    PASSED=$((PASSED + total - failed))
    FAILED=$((FAILED + failed))
  fi
  return "$rc"
}

begin_phase "install dependencies"
scripts/install-deps.sh
export UC_SMOLLM2_GGUF="$PWD/$(scripts/fetch-smollm2.sh)"
export UC_GEMMA3_GGUF="$PWD/$(scripts/fetch-gemma3.sh)"
mkdir -p "$LOG_DIR"
end_phase

begin_phase "format"
git ls-files '*.h' '*.cc' | xargs clang-format --dry-run --Werror
end_phase

begin_phase "build (ci preset)"
cmake --preset ci >/dev/null
cmake --build --preset ci -j"$JOBS"
end_phase

for label in unit integration badinput model mpi; do
  begin_phase "tests: $label"
  run_ctest "$label" --preset ci -L "^${label}\$" -j"$JOBS"
  end_phase
done

# The packaging itself: `pip install .` from the checkout into a fresh virtual environment (its
# own CMake build of the libraries and the extension module), then 0.1's quickstart against it.
begin_phase "python package: pip install ."
rm -rf build/pip-check
build/venv/bin/python -m venv build/pip-check
build/pip-check/bin/python -m pip install --quiet --disable-pip-version-check .
(cd build && pip-check/bin/python ../examples/python/quickstart.py ../models/stories260K)
end_phase

begin_phase "build (asan preset: unit, badinput)"
cmake --preset asan >/dev/null
cmake --build --preset asan -j"$JOBS"
end_phase

begin_phase "tests under ASan: unit, badinput"
run_ctest asan --preset asan -L '^(unit|badinput)$' -j"$JOBS"
end_phase

#!/usr/bin/env bash
# Fuzzes the input parsers with libFuzzer (clang): builds the fuzz targets of fuzz/ into
# build/fuzz with AddressSanitizer and UndefinedBehaviorSanitizer, then runs each target (or the
# ones named) for --seconds each, one after the other, from a scratch corpus in
# build/fuzz/corpus-work/NAME seeded from fuzz/corpus/NAME and fuzz/regressions/NAME.
#
#   scripts/fuzz.sh [--seconds N] [--no-build] [TARGET...]
#   nice -n 19 scripts/fuzz.sh --seconds 60 spec gguf
#
# A crash, sanitizer report, timeout (-timeout) or out-of-memory (-rss_limit_mb) is copied into
# fuzz/regressions/NAME/ (the test suite replays every file there: fuzz_replay_NAME) and the
# script exits 1 after the remaining targets have run. It ends with a table of each target's
# seconds, executions and executions per second (libFuzzer's -print_final_stats).
# CC / CXX pick the compiler (default clang-14 / clang++-14; any clang with libFuzzer works).
set -euo pipefail
cd "$(dirname "$0")/.."

ALL_TARGETS=(spec chat_template gguf safetensors tokenizer_json prompts http_request)
SECONDS_EACH=600
BUILD=1
TARGETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_EACH="$2"; shift 2 ;;
    --seconds=*) SECONDS_EACH="${1#*=}"; shift ;;
    --no-build) BUILD=0; shift ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) TARGETS+=("$1"); shift ;;
  esac
done
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=("${ALL_TARGETS[@]}")
for t in "${TARGETS[@]}"; do
  if [ ! -f "fuzz/${t}_fuzzer.cc" ]; then
    echo "fuzz.sh: no target '$t' (known: ${ALL_TARGETS[*]})" >&2
    exit 2
  fi
done

# Longest input tried, per target: a little above the largest seed.
max_len() {
  case "$1" in
    gguf) echo 32768 ;;
    safetensors | tokenizer_json) echo 16384 ;;
    chat_template) echo 8192 ;;
    *) echo 4096 ;;
  esac
}

BUILD_DIR=build/fuzz
if [ "$BUILD" = 1 ]; then
  export CC="${CC:-clang-14}" CXX="${CXX:-clang++-14}"
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUC_BUILD_FUZZ=ON \
    -DUC_BUILD_TESTS=OFF -DUC_BUILD_BENCH=OFF \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" >/dev/null
  cmake --build "$BUILD_DIR" --target "${TARGETS[@]/#/fuzz_}"
fi

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
SUMMARY=()
FAILED=()
for t in "${TARGETS[@]}"; do
  work="$BUILD_DIR/corpus-work/$t"
  artifacts="$BUILD_DIR/artifacts/$t"
  log="$BUILD_DIR/logs/$t.log"
  mkdir -p "$work" "$artifacts" "$(dirname "$log")" "fuzz/regressions/$t"
  cp -n "fuzz/corpus/$t"/* "$work"/ 2>/dev/null || true
  rm -f "$artifacts"/*
  echo "== fuzzing $t for ${SECONDS_EACH}s (log: $log)"
  start=$(date +%s)
  rc=0
  "$BUILD_DIR/bin/fuzz_$t" "$work" "fuzz/regressions/$t" \
    -max_total_time="$SECONDS_EACH" -max_len="$(max_len "$t")" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/" \
    >"$log" 2>&1 || rc=$?
  elapsed=$(($(date +%s) - start))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  result=ok
  found=0
  for f in "$artifacts"/*; do
    [ -f "$f" ] || continue
    cp "$f" "fuzz/regressions/$t/"
    echo "   finding: fuzz/regressions/$t/$(basename "$f")"
    found=1
  done
  if [ "$rc" != 0 ] || [ "$found" = 1 ]; then
    result="FAILED (exit $rc)"
    FAILED+=("$t")
    grep -E -m 5 'ERROR: (AddressSanitizer|libFuzzer|LeakSanitizer)|runtime error|fuzz invariant' \
      "$log" | sed 's/^/   /' || true
  fi
  SUMMARY+=("$(printf '%-16s %8s %12s %8s  %s' "$t" "$elapsed" "${execs:-?}" "${rate:-?}" \
    "$result")")
done

echo
printf '%-16s %8s %12s %8s  %s\n' target seconds executions exec/s result
printf '%s\n' "${SUMMARY[@]}"
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "findings in: ${FAILED[*]} (reproducers in fuzz/regressions/NAME/;" \
    "run one again: $BUILD_DIR/bin/fuzz_NAME FILE)"
  exit 1
fi

#!/usr/bin/env bash
# What per-request steering costs, in instructions executed: steering_bench's four modes (none,
# configured but unused, every request steered, mixed) at each batch size, each in its own
# process under callgrind, counting only the measured batch (engine::MeasureBatch and what it
# calls, one thread, no warm-up). Instruction counts do not move with the other tenants of a
# shared machine, so ratios of 1% and less are resolved where wall-clock runs swing by several
# percent; they do not see memory stalls, which the steering adds none of (a vector read per
# steered block). Prints a Markdown table of instructions per batch and the ratio to none.
#
#   bench/steering_instructions.sh BUILD_DIR MODEL [BATCHES] [GEN_TOKENS] [PROMPT_TOKENS]
#   e.g. bench/steering_instructions.sh build/release \
#            build/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf "1 8 32" 8 4
#
# Needs valgrind. Each run takes 50-100 times the native time.
set -euo pipefail
usage="usage: $0 BUILD_DIR MODEL [BATCHES] [GEN_TOKENS] [PROMPT_TOKENS]"
build=${1:?$usage}
model=${2:?$usage}
batches=${3:-1 8 32}
gen_tokens=${4:-8}
prompt_tokens=${5:-4}
bench="$build/bin/steering_bench"
[[ -x "$bench" ]] || { echo "error: $bench not found: build the steering_bench target" >&2; exit 1; }
command -v valgrind > /dev/null || { echo "error: valgrind is not installed" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

count() {  # batch mode -> instructions collected inside MeasureBatch
  valgrind --tool=callgrind --callgrind-out-file="$work/out" \
      --toggle-collect='uc::engine::MeasureBatch*' \
      "$bench" --model "$model" --batches "$1" --modes "$2" --gen-tokens "$gen_tokens" \
      --prompt-tokens "$prompt_tokens" \
      --threads 1 --repetitions 1 --forward-iterations 0 --no-warmup \
      > /dev/null 2> "$work/log"
  sed -n 's/^==[0-9]*== Collected : \([0-9]*\)$/\1/p' "$work/log"
}

echo "| batch | steering | instructions per batch | × none |"
echo "|---|---|---|---|"
for batch in $batches; do
  base=""
  for mode in none unused steered mixed; do
    n=$(count "$batch" "$mode")
    [[ -n "$n" ]] || { echo "error: no instruction count for batch $batch, $mode" >&2; exit 1; }
    base=${base:-$n}
    awk -v b="$batch" -v m="$mode" -v n="$n" -v base="$base" \
        'BEGIN { printf "| %s | %s | %s | %.5f |\n", b, m, n, n / base }'
  done
done

#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to every test passing: installs the dependencies,
# fetches the real chat model the model tests use, checks formatting, builds with warnings as
# errors, and runs the unit, integration, model and multi-process (mpiexec) suites, then the
# unit and bad-input suites again
# under AddressSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)

scripts/install-deps.sh
export UC_SMOLLM2_GGUF="$PWD/$(scripts/fetch-smollm2.sh)"

echo "== format"
git ls-files '*.h' '*.cc' | xargs clang-format --dry-run --Werror

echo "== build (ci preset)"
cmake --preset ci >/dev/null
cmake --build --preset ci -j"$JOBS"

for label in unit integration badinput model mpi; do
  echo "== tests: $label"
  ctest --preset ci -L "^${label}\$" -j"$JOBS"
done

echo "== tests under AddressSanitizer: unit and bad input"
cmake --preset asan >/dev/null
cmake --build --preset asan -j"$JOBS"
ctest --preset asan -L '^(unit|badinput)$' -j"$JOBS"

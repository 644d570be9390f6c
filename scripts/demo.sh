#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a running Undercurrent: installs the
# dependencies, builds the release preset and generates text with the bundled stories260K.
# Extra arguments are passed to `undercurrent generate`.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j"$(nproc)" --target undercurrent
exec build/release/bin/undercurrent generate --model models/stories260K \
  --prompt "Once upon a time" --max-tokens 120 --temperature 0 "$@"

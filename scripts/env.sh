# Sourced by the other scripts: creates or refreshes the project's virtualenv in .venv.
# It reinstalls only when pyproject.toml changed since the last install.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PYTHON_BIN="${PYTHON:-python3}"
if ! "$PYTHON_BIN" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
  echo "om needs Python 3.11 or newer (found: $("$PYTHON_BIN" --version 2>&1))" >&2
  exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "==> creating $VENV" >&2
  "$PYTHON_BIN" -m venv "$VENV"
fi
STAMP="$VENV/.om-installed"
WANT="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)"
# On a terminal, pip's progress as one line rewritten in place (the full output goes to a log, shown if pip
# fails); elsewhere (CI) pip's own line per package.
_om_progress() {
  local line
  while IFS= read -r line; do
    case "$line" in
      Collecting* | "Installing collected"* | "Building editable"*)
        printf '\r\033[K    %s' "${line:0:76}" >&2 ;;
    esac
  done
  printf '\r\033[K' >&2
}
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  echo "==> installing dependencies into $VENV (about a minute, once)..." >&2
  "$VENV/bin/python" -m pip install --quiet --upgrade pip >&2
  if [ -t 2 ]; then
    LOG="$VENV/.om-install.log"
    if ! "$VENV/bin/python" -m pip install -e "$ROOT[dev]" 2>&1 | tee "$LOG" | _om_progress; then
      cat "$LOG" >&2
      exit 1
    fi
  else
    "$VENV/bin/python" -m pip install --progress-bar off -e "$ROOT[dev]" >&2
  fi
  echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
# litellm must never try to download its cost map; tiktoken finds its encodings inside the litellm wheel
export LITELLM_LOCAL_MODEL_COST_MAP=True

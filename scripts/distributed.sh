#!/usr/bin/env bash
# The distributed set-up on one machine, without Docker: a Redis of its own, `om migrate`, then `om serve`,
# `om worker`, `om beat` and `om flower`, each in the background with its log and pid in $RUN_DIR.
#
#   scripts/distributed.sh up       start everything (the Postgres database must exist: createdb om)
#   scripts/distributed.sh status   what is running, from the pid files
#   scripts/distributed.sh down     stop what `up` started, and nothing else
#
# Settings (environment; the defaults need nothing but a local Postgres and redis-server installed):
#   OM_DATABASE_URL   postgresql+psycopg://postgres@127.0.0.1:5432/om
#   OM_BROKER_URL     unset: a redis-server of its own on 127.0.0.1:$REDIS_PORT (default 6380)
#   OM_PROFILE        deploy/profile.yaml (the keyless local model om-local/extractive)
#   OM_API_KEYS       unset: a key for tenant `default` is made with `om keys create` and kept in $RUN_DIR
#   OM_PORT, OM_WORKER_METRICS_PORT, FLOWER_PORT   8080, 9808, 5555 (all on 127.0.0.1)
#   RUN_DIR           .om/distributed (logs, pids, beat's schedule, the key)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN_DIR="${RUN_DIR:-$ROOT/.om/distributed}"
REDIS_PORT="${REDIS_PORT:-6380}"
FLOWER_PORT="${FLOWER_PORT:-5555}"
export OM_DATABASE_URL="${OM_DATABASE_URL:-postgresql+psycopg://postgres@127.0.0.1:5432/om}"
export OM_PROFILE="${OM_PROFILE:-$ROOT/deploy/profile.yaml}"
export OM_HOST=127.0.0.1 OM_PORT="${OM_PORT:-8080}" OM_WORKER_METRICS_PORT="${OM_WORKER_METRICS_PORT:-9808}"
export LITELLM_LOCAL_MODEL_COST_MAP=True PYTHONUNBUFFERED=1
# om from the environment, else the checkout's virtualenv (scripts/env.sh makes it)
OM="$(command -v om || true)"
if [ -z "$OM" ] && [ -x "$ROOT/.venv/bin/om" ]; then OM="$ROOT/.venv/bin/om"; fi

say() { echo "distributed.sh: $*" >&2; }
fail() { say "error: $*"; exit 2; }

running() { [ -f "$RUN_DIR/$1.pid" ] && kill -0 "$(cat "$RUN_DIR/$1.pid")" 2>/dev/null; }

start() {  # start NAME COMMAND...: in the background, its own session, output to NAME.log
  local name="$1"; shift
  running "$name" && fail "$name is already running (pid $(cat "$RUN_DIR/$name.pid")): scripts/distributed.sh down first"
  setsid "$@" >"$RUN_DIR/$name.log" 2>&1 < /dev/null &
  echo $! > "$RUN_DIR/$name.pid"
}

wait_for() {  # wait_for WHAT SECONDS COMMAND...: poll until COMMAND succeeds; the process's log if it died
  local what="$1" seconds="$2" name="$3"; shift 3
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if ! running "$name"; then say "$what exited:"; tail -n 20 "$RUN_DIR/$name.log" >&2; down; exit 2; fi
    if [ "$SECONDS" -ge "$deadline" ]; then say "$what did not come up in ${seconds}s:"; tail -n 20 "$RUN_DIR/$name.log" >&2; down; exit 2; fi
    sleep 0.2
  done
}

http_ok() { python3 - "$@" <<'PY'
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(sys.argv[1], timeout=2)
except urllib.error.HTTPError as error:  # Flower answers 401 until given its password: it is up
    sys.exit(0 if error.code == 401 else 1)
except OSError:
    sys.exit(1)
PY
}

up() {
  [ -n "$OM" ] || fail "om is not on PATH: source .venv/bin/activate (scripts/env.sh makes it), or pip install om"
  mkdir -p "$RUN_DIR"
  if [ -z "${OM_BROKER_URL:-}" ]; then
    command -v redis-server >/dev/null || fail "redis-server is not installed (apt-get install redis-server), or set OM_BROKER_URL"
    start redis redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no
    export OM_BROKER_URL="redis://127.0.0.1:$REDIS_PORT/0"
    wait_for "redis-server" 20 redis redis-cli -p "$REDIS_PORT" ping
  fi
  "$OM" migrate
  if [ -z "${OM_API_KEYS:-}" ]; then
    [ -s "$RUN_DIR/api-key" ] || "$OM" keys create --tenant default --label distributed.sh > "$RUN_DIR/api-key"
  fi
  start worker "$OM" worker
  start beat "$OM" beat --schedule "$RUN_DIR/celerybeat-schedule"
  start flower "$OM" flower --port "$FLOWER_PORT" --generate-password
  start api "$OM" serve
  wait_for "om serve" 90 api http_ok "http://127.0.0.1:$OM_PORT/readyz"
  wait_for "om worker" 90 worker grep -q " ready." "$RUN_DIR/worker.log"
  wait_for "om flower" 60 flower http_ok "http://127.0.0.1:$FLOWER_PORT/"
  wait_for "om beat" 60 beat grep -q "beat: Starting" "$RUN_DIR/beat.log"
  local key="${OM_API_KEYS:+(from OM_API_KEYS)}"
  [ -n "$key" ] || key="$(cat "$RUN_DIR/api-key") (tenant default; kept in $RUN_DIR/api-key)"
  echo "om is up: logs and pids in $RUN_DIR"
  echo "  api      http://127.0.0.1:$OM_PORT  key $key"
  echo "  worker   metrics http://127.0.0.1:$OM_WORKER_METRICS_PORT/metrics"
  echo "  flower   http://127.0.0.1:$FLOWER_PORT  $(grep -o "basic auth as .*" "$RUN_DIR/flower.log" | head -n 1)"
  echo "  broker   $OM_BROKER_URL; database $OM_DATABASE_URL"
  echo "  stop:    scripts/distributed.sh down"
}

down() {
  local name pid
  for name in api flower beat worker redis; do
    [ -f "$RUN_DIR/$name.pid" ] || continue
    pid="$(cat "$RUN_DIR/$name.pid")"
    if kill -0 "$pid" 2>/dev/null; then
      # a warm shutdown: the worker finishes what it runs, anything cut off is redelivered
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      if kill -0 "$pid" 2>/dev/null; then kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true; fi
    fi
    rm -f "$RUN_DIR/$name.pid"
  done
}

status() {
  local name
  for name in redis api worker beat flower; do
    if running "$name"; then echo "$name: running (pid $(cat "$RUN_DIR/$name.pid"))"; else echo "$name: stopped"; fi
  done
}

case "${1:-}" in
  up) up ;;
  down) down; echo "om is down" ;;
  status) status ;;
  *) echo "usage: scripts/distributed.sh up|status|down" >&2; exit 2 ;;
esac

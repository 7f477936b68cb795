# Sourced by test.sh: makes sure PostgreSQL and Redis answer, starting local ones when they do not.
# OM_TEST_DATABASE_URL / OM_TEST_BROKER_URL point the tests at other servers.
set -euo pipefail
export OM_TEST_DATABASE_URL="${OM_TEST_DATABASE_URL:-${OM_DATABASE_URL:-postgresql+psycopg://postgres@127.0.0.1:5432/postgres}}"
export OM_TEST_BROKER_URL="${OM_TEST_BROKER_URL:-${OM_BROKER_URL:-redis://127.0.0.1:6379/0}}"
case "$OM_TEST_BROKER_URL" in memory://*) export OM_TEST_BROKER_URL="redis://127.0.0.1:6379/0";; esac
case "$OM_TEST_DATABASE_URL" in sqlite*) export OM_TEST_DATABASE_URL="postgresql+psycopg://postgres@127.0.0.1:5432/postgres";; esac

_pg_up() {
  python - "$OM_TEST_DATABASE_URL" <<'PY' >/dev/null 2>&1
import sys
from sqlalchemy import create_engine, text
engine = create_engine(sys.argv[1], connect_args={"connect_timeout": 2})
with engine.connect() as c:
    c.execute(text("select 1"))
PY
}
_redis_up() {
  python - "$OM_TEST_BROKER_URL" <<'PY' >/dev/null 2>&1
import sys, redis
redis.Redis.from_url(sys.argv[1], socket_connect_timeout=2).ping()
PY
}

if ! _pg_up; then
  echo "==> PostgreSQL does not answer at $OM_TEST_DATABASE_URL; starting a local cluster" >&2
  if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
  elif command -v pg_ctl >/dev/null 2>&1; then
    PGDATA_DIR="$ROOT/.om/pgdata"
    if [ ! -d "$PGDATA_DIR" ]; then initdb -D "$PGDATA_DIR" -U postgres --auth=trust >/dev/null; fi
    pg_ctl -D "$PGDATA_DIR" -l "$ROOT/.om/postgres.log" -o "-p 5432 -k /tmp" start >/dev/null
  fi
  for _ in $(seq 1 30); do _pg_up && break; sleep 1; done
  _pg_up || { echo "PostgreSQL is not reachable at $OM_TEST_DATABASE_URL and could not be started (install postgresql or set OM_TEST_DATABASE_URL)" >&2; exit 1; }
fi
if ! _redis_up; then
  echo "==> Redis does not answer at $OM_TEST_BROKER_URL; starting a local server" >&2
  command -v redis-server >/dev/null 2>&1 || { echo "redis-server is not installed (install redis or set OM_TEST_BROKER_URL)" >&2; exit 1; }
  _redis_port="$(python -c 'import sys, urllib.parse; print(urllib.parse.urlsplit(sys.argv[1]).port or 6379)' "$OM_TEST_BROKER_URL")"
  redis-server --daemonize yes --bind 127.0.0.1 --port "$_redis_port" --save "" --appendonly no >/dev/null
  for _ in $(seq 1 20); do _redis_up && break; sleep 0.5; done
  _redis_up || { echo "Redis is not reachable at $OM_TEST_BROKER_URL" >&2; exit 1; }
fi

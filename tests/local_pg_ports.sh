#!/usr/bin/env bash
# scripts/local-pg.sh starts a cluster even when the port it probes as free cannot be bound:
# a client connection's local port, or another test's server that bound it after the probe.
# The first free port is held here by a bound socket that does not listen (what a client
# socket is), so the probe sees it free and the server's bind fails; the start must move on.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
[ -x "$PGBIN/initdb" ] || { echo "local_pg_ports: $PGBIN/initdb not found" >&2; exit 77; }
tmp=$(mktemp -d)
chmod 755 "$tmp"
holder=
cleanup() {
  [ -z "$holder" ] || kill "$holder" 2>/dev/null || true
  "$ROOT/scripts/local-pg.sh" stop "$tmp/pg" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# Hold the first port of local-pg.sh's range that nothing listens on: bound, never listening.
python3 - "$tmp/held" <<'PY' &
import socket, sys, time
for port in range(25432, 25632):
    probe = socket.socket()
    if probe.connect_ex(("127.0.0.1", port)) == 0:
        probe.close()
        continue  # a server listens here; local-pg.sh's probe skips it too
    probe.close()
    held = socket.socket()
    try:
        held.bind(("127.0.0.1", port))
    except OSError:
        held.close()
        continue
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(port))
    import os
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(600)
PY
holder=$!
for _ in $(seq 100); do [ -s "$tmp/held" ] && break; sleep 0.1; done
[ -s "$tmp/held" ] || { echo "local_pg_ports: could not hold a port" >&2; exit 1; }
held=$(cat "$tmp/held")

url=$("$ROOT/scripts/local-pg.sh" start "$tmp/pg") || { echo "FAIL: local-pg.sh start failed with port $held held" >&2; exit 1; }
port=$(cat "$tmp/pg/port")
[ "$port" != "$held" ] || { echo "FAIL: the cluster claims the held port $held" >&2; exit 1; }
[ "$(psql -qAtX "$url" -c 'SELECT current_setting($$port$$)')" = "$port" ] ||
  { echo "FAIL: $url does not answer on port $port" >&2; exit 1; }
echo "local_pg_ports: port $held held, the cluster started on $port"

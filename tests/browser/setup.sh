#!/usr/bin/env bash
# Installs playwright-core (tests/browser/package-lock.json, exactly) into DIR/node_modules
# with `npm ci`, unless that lockfile is installed there already. Never downloads a
# browser: the tests drive Debian's Chromium (/usr/bin/chromium).
#   setup.sh SOURCE_DIR/tests/browser DIR
set -euo pipefail
src=$1 dir=$2
mkdir -p "$dir"
if [ -f "$dir/package-lock.json" ] && cmp -s "$src/package-lock.json" "$dir/package-lock.json" &&
   [ -d "$dir/node_modules/playwright-core" ]; then
  exit 0
fi
cp "$src/package.json" "$src/package-lock.json" "$dir/"
cd "$dir"
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error

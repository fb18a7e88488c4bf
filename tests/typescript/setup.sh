#!/usr/bin/env bash
# Builds the TypeScript client (clients/typescript) in the build tree: copies its sources,
# installs its dependencies with `npm ci` from its lockfile (unless that lockfile is installed
# there already) and compiles it with `npm run build` (tsc, to DIR/dist).
#   setup.sh SOURCE_DIR/clients/typescript DIR
set -euo pipefail
src=$1 dir=$2
mkdir -p "$dir"
rm -rf "$dir/src" "$dir/test" "$dir/dist" "$dir/.test-build"
cp -r "$src/src" "$src/test" "$src/package.json" "$src/tsconfig.json" "$src/tsconfig.test.json" "$dir/"
cd "$dir"
if ! { [ -f package-lock.json ] && cmp -s "$src/package-lock.json" package-lock.json && [ -d node_modules/pg ]; }; then
  cp "$src/package-lock.json" .
  # No lifecycle scripts: `prepare` would build before the sources are complete; we build next.
  npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
fi
npm run --silent build

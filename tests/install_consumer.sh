#!/usr/bin/env bash
# Installs this build into a scratch prefix, builds examples/consumer against it with
# find_package(oncely), and (when a test database is given) runs it.
set -euo pipefail
build_dir=$1 source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$source_dir/examples/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/consumer" >/dev/null
test -x "$work/prefix/bin/oncely"
if [ -n "${ONCELY_TEST_DATABASE_URL:-}" ]; then
  schema="oncely_consumer_$$"
  id=$("$work/consumer/consumer" "$ONCELY_TEST_DATABASE_URL" "$schema")
  psql -qAt "$ONCELY_TEST_DATABASE_URL" -c "DROP SCHEMA \"$schema\" CASCADE" >/dev/null 2>&1 || true
  [[ "$id" =~ ^[0-9]+$ ]] || { echo "consumer printed '$id', not a job id" >&2; exit 1; }
fi
echo "consumer built and ran against the installed package"

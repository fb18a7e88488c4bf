#!/usr/bin/env bash
# The alerting rules against Prometheus's own tools: `oncely alert-rules` for
# tests/alerts/worker.json passes `promtool check rules` and the cases of
# tests/alerts/rules_test.yml (`promtool test rules`); the example rules in
# docs/operations.md pass `promtool check rules` and the cases of
# tests/alerts/docs_rules_test.yml.
# Usage: alert_rules.sh ONCELY_BINARY SOURCE_DIR. Exit 77 (skipped) without promtool,
# unless CI=true or ONCELY_REQUIRE_PROMTOOL=1: then a missing promtool fails.
set -euo pipefail
oncely=$1
src=$2

if ! command -v promtool >/dev/null; then
  if [ "${CI:-}" = true ] || [ -n "${ONCELY_REQUIRE_PROMTOOL:-}" ]; then
    echo "alert_rules: promtool not found (Debian: apt-get install prometheus; scripts/deps.sh installs it)" >&2
    exit 1
  fi
  echo "alert_rules: skipped, promtool not found" >&2
  exit 77
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

env -u DATABASE_URL "$oncely" alert-rules --config "$src/tests/alerts/worker.json" >"$work/oncely.rules.yml"
promtool check rules "$work/oncely.rules.yml"
cp "$src/tests/alerts/rules_test.yml" "$work/"
promtool test rules "$work/rules_test.yml"

# The yaml block under "### Alerting rules" in docs/operations.md.
awk '/^### Alerting rules/ {in_section = 1; next}
     in_section && /^```yaml/ {in_block = 1; next}
     in_block && /^```/ {exit}
     in_block {print}' "$src/docs/operations.md" >"$work/docs.rules.yml"
[ -s "$work/docs.rules.yml" ] || { echo "alert_rules: no yaml block in docs/operations.md" >&2; exit 1; }
promtool check rules "$work/docs.rules.yml"
cp "$src/tests/alerts/docs_rules_test.yml" "$work/"
promtool test rules "$work/docs_rules_test.yml"
echo "alert_rules: ok"

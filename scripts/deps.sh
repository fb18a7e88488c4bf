#!/usr/bin/env bash
# Installs, from Debian 12's packages, whatever oncely needs to build and test that is missing.
set -euo pipefail

packages=(
  cmake g++ make pkg-config
  libpqxx-dev nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev doctest-dev
  libcurl4-openssl-dev prometheus-cpp-dev libcpp-httplib-dev
  libhowardhinnant-date-dev tzdata  # cron slots in time zones (date/tz over the system tz database)
  libboost-stacktrace-dev  # handler stack traces (the libbacktrace backend)
  prometheus  # promtool: the tests check and unit-test the alerting rules
  pgbouncer  # the database tests run once more through it, in transaction mode
  postgresql-15 postgresql-client-15
  clang libclang-rt-14-dev  # the libFuzzer targets of the parsers (tests/fuzz)
  clang-format  # the house style (.clang-format), checked by the test `format`
  chromium nodejs  # the console's browser tests (playwright-core from npm drives Debian's Chromium)
  dpkg-dev file  # cpack -G DEB: dpkg-shlibdeps computes the package's Depends
  jq  # bench/chaos.sh: its table (its PgBouncer campaign uses pgbouncer, above)
  python3 python3-psycopg python3-pytest mypy  # the conformance suite (tests/conformance) and its SQL-only worker
  procps  # pkill: the conformance suite's poison exec handler
  python3-venv python3-setuptools  # the Python client's offline install into a venv (ctest python_client_install)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm: Debian's package, unless a nodejs that bundles its own (NodeSource's) provides it.
command -v npm >/dev/null || missing+=(npm)
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

#!/usr/bin/env bash
# The installed oncely works for a user: examples/consumer builds against it with
# find_package(oncely) and (when a test database is given) runs.
#
# Two ways to install, chosen by ONCELY_TEST_SYSTEM_INSTALL (default: 1 when CI=true, else 0):
#   0  `cmake --install` into a scratch prefix; nothing outside a temporary directory changes.
#   1  what a user does: builds the Debian packages (cpack -G DEB), installs them into THIS
#      machine with apt-get (root only), checks the installed /usr/bin/oncely (--version as the
#      package's oncely user, `migrate` against the test database) and the files its postinst
#      made, builds the consumer against /usr, and purges the packages again on exit.
set -euo pipefail
build_dir=$1 source_dir=$2
system_install=${ONCELY_TEST_SYSTEM_INSTALL:-$([ "${CI:-}" = true ] && echo 1 || echo 0)}
work=$(mktemp -d)
installed=0
cleanup() {
  if [ "$installed" = 1 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq oncely liboncely-dev >/dev/null || echo "could not purge the oncely packages" >&2
  fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "install_consumer: $*" >&2; exit 1; }

if [ "$system_install" = 1 ]; then
  [ "$(id -u)" = 0 ] || fail "ONCELY_TEST_SYSTEM_INSTALL=1 installs into the system and needs root"
  (cd "$build_dir" && cpack -G DEB -B "$work/deb") >"$work/cpack.log" 2>&1 || { tail -20 "$work/cpack.log" >&2; fail "cpack failed"; }
  debs=("$work"/deb/oncely_*.deb "$work"/deb/liboncely-dev_*.deb)
  installed=1
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${debs[@]}" >"$work/apt.log" 2>&1 \
    || { tail -20 "$work/apt.log" >&2; fail "apt-get install of ${debs[*]##*/} failed"; }
  oncely=/usr/bin/oncely
  [ "$(command -v oncely)" = "$oncely" ] || fail "oncely on PATH is $(command -v oncely), not the package's $oncely"
  version=$(runuser -u oncely -- "$oncely" --version) || fail "the installed oncely does not run as the oncely user"
  echo "installed: $version"
  [[ "$version" == *"$(dpkg-query -W -f='${Version}' oncely | cut -d- -f1)"* ]] || fail "--version says '$version'"
  [ "$(stat -c '%a %U %G' /etc/oncely/worker.env)" = "640 root oncely" ] || fail "/etc/oncely/worker.env: $(stat -c '%a %U %G' /etc/oncely/worker.env)"
  unit=/usr/lib/systemd/system/oncely-worker.service
  [ -f "$unit" ] || fail "no systemd unit installed"
  if command -v systemd-analyze >/dev/null; then  # unknown keys, a missing binary or user
    systemd-analyze verify "$unit" || fail "systemd-analyze verify $unit"
  fi
  prefix_args=()
else
  cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
  oncely=$work/prefix/bin/oncely
  [ -x "$oncely" ] || fail "no $oncely after cmake --install"
  prefix_args=(-DCMAKE_PREFIX_PATH="$work/prefix")
fi

cmake -S "$source_dir/examples/consumer" -B "$work/consumer" "${prefix_args[@]}" >/dev/null
found=$(sed -n 's/^oncely_DIR:[A-Z]*=//p' "$work/consumer/CMakeCache.txt")
echo "consumer uses the CMake package in $found"
if [ "$system_install" = 1 ] && [ "$found" != /usr/lib/cmake/oncely ]; then fail "expected /usr/lib/cmake/oncely"; fi
cmake --build "$work/consumer" >/dev/null

if [ -n "${ONCELY_TEST_DATABASE_URL:-}" ]; then
  schema="oncely_consumer_$$"
  drop() { psql -qAt "$ONCELY_TEST_DATABASE_URL" -c "DROP SCHEMA IF EXISTS \"$schema\" CASCADE" >/dev/null 2>&1 || true; }
  "$oncely" --database-url "$ONCELY_TEST_DATABASE_URL" --schema "$schema" migrate >"$work/migrate.log" 2>&1 \
    || { drop; cat "$work/migrate.log" >&2; fail "the installed oncely could not migrate"; }
  echo "installed oncely migrate: $(tail -1 "$work/migrate.log")"
  id=$("$work/consumer/consumer" "$ONCELY_TEST_DATABASE_URL" "$schema") || { drop; fail "the consumer failed"; }
  drop
  [[ "$id" =~ ^[0-9]+$ ]] || fail "consumer printed '$id', not a job id"
fi
echo "consumer built and ran against the installed package"

#!/usr/bin/env bash
# The floors of src/, lowest first (docs/internals.md, "Rooms"):
#   support < scheduling < store < api, execution < handlers, web < process < cli
# A file may include headers of its own floor and of the floors below it, never above.
# Public headers (include/oncely/*) are the surface every floor may use, except that store/
# takes its read models from oncely/records.hpp, not from the API headers beside them.
# Prints every include that climbs and exits 1 if there is one. Usage: check-layers.sh [root]
set -u
ROOT=${1:-"$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"}
cd "$ROOT/src" || exit 2

# floor: the rooms above it, as a grep alternation
above() {
  case $1 in
    support)            echo 'scheduling\|store\|api\|execution\|handlers\|web\|process\|cli' ;;
    scheduling)         echo 'store\|api\|execution\|handlers\|web\|process\|cli' ;;
    store)              echo 'api\|execution\|handlers\|web\|process\|cli' ;;
    api | execution)    echo 'handlers\|web\|process\|cli' ;;
    handlers | web)     echo 'process\|cli' ;;
    process)            echo 'cli' ;;
  esac
}

climbs=0
for room in support scheduling store api execution handlers web process; do
  if grep -rn "#include \"\($(above "$room")\)/" "$room"; then climbs=1; fi
done
if grep -rn '#include "oncely/\(stats\|jobs\|queues\|workers\)\.hpp"' store; then climbs=1; fi

if [ "$climbs" -ne 0 ]; then
  echo "check-layers: the includes above run up the floors (see docs/internals.md, Rooms)" >&2
  exit 1
fi
echo "check-layers: no include runs up the floors"

#!/usr/bin/env bash
# The house style: every C++ file in src/, include/, tests/, bench/ and examples/ is as
# clang-format (.clang-format) writes it. Prints the files that are not and fails; with
# --fix, formats them. Usage: scripts/check-format.sh [--fix] [ROOT]
set -euo pipefail
fix=0
if [ "${1:-}" = --fix ]; then fix=1; shift; fi
ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT"
command -v clang-format >/dev/null || { echo "check-format: clang-format not found (apt-get install clang-format)" >&2; exit 1; }
mapfile -t files < <(find src include tests bench examples -type f \( -name '*.cpp' -o -name '*.hpp' \) \
                       -not -path '*/node_modules/*' | sort)
if [ "$fix" = 1 ]; then clang-format -i "${files[@]}"; exit 0; fi
# One run for all of them: a file out of style gets "FILE:LINE:COL: error: code should be
# clang-formatted" lines.
mapfile -t bad < <(clang-format --dry-run -Werror "${files[@]}" 2>&1 |
                     sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: .*/\1/p' | sort -u)
if [ ${#bad[@]} -gt 0 ]; then
  echo "check-format: not in the house style (scripts/check-format.sh --fix formats them):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files in the house style"

#!/usr/bin/env bash
# Checks (default) or applies (--fix) the project's clang-format style on every C file.
set -euo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files '*.c' '*.h')
if [[ "${1:-}" == "--fix" ]]; then
  clang-format -i $files
else
  clang-format --dry-run --Werror $files
  echo "format: $(wc -w <<<"$files") files follow .clang-format"
fi

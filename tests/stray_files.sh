#!/usr/bin/env bash
# Fails when git tracks what is never source: session logs left by a test run whose HOME
# was the checkout, Python bytecode, build output, editor and merge leftovers. Each pattern
# has its line in .gitignore too, so it is not committed by `git add -A` in the first place.
set -euo pipefail
cd "$(dirname "$0")/.."
stray=$(git ls-files | grep -E \
    -e '(^|/)\.local/' \
    -e '(^|/)__pycache__/' -e '\.py[co]$' \
    -e '(^|/)target/' -e '(^|/)node_modules/' \
    -e '\.(log|jsonl|orig|rej|swp|profraw)$' -e '~$' \
    -e '(^|/)core(\.[0-9]+)?$' || true)
if [ -n "$stray" ]; then
    echo "tests/stray_files.sh: these files are tracked but are not source; 'git rm --cached' them:" >&2
    echo "$stray" | sed 's/^/  /' >&2
    exit 1
fi
echo "no stray files among $(git ls-files | wc -l) tracked"

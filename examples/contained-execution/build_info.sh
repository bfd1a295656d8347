#!/bin/sh
# A stand-in for a project's build step: prints an invented build fingerprint derived from
# the checkout, the way a real build stamps its version.
set -eu
commit=$(git rev-parse --short HEAD)
content=$(git ls-files -s | sha256sum | cut -c1-12)
echo "build fingerprint: nbx-$commit-$content"

#!/usr/bin/env bash
# Installs the dependencies, builds, and runs every test but the `slow` ones (CI runs exactly this).
# Pass `--all` to include the slow full-size tests.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
./scripts/build.sh
labels=(-LE slow)
[ "${1:-}" = "--all" ] && labels=()
ctest --test-dir build --output-on-failure "${labels[@]}"

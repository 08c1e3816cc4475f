#!/usr/bin/env bash
# Installs the dependencies (idempotent) and builds FP8 Studio into build/ (Release, Ninja, ccache).
#   --app   only what a user runs: the command line and the desktop app (not the tests, which
#           scripts/test.sh builds), so that the first picture comes sooner
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
targets=()
if [ "${1:-}" = "--app" ]; then
  targets=(--target fp8studio-cli)
elif [ -n "${1:-}" ]; then
  echo "build: unknown argument $1 (use --app, or nothing for everything)" >&2
  exit 2
fi
./scripts/install-deps.sh
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
export CCACHE_BASEDIR="$PWD"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${FP8S_CMAKE_ARGS:-}
# the app too when this build has it (FP8S_BUILD_GUI)
if ((${#targets[@]})) && grep -q "^FP8S_BUILD_GUI:BOOL=ON" build/CMakeCache.txt; then targets+=(fp8studio); fi
cmake --build build --parallel "$(nproc)" "${targets[@]}"

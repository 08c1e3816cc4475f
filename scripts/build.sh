#!/usr/bin/env bash
# Installs the dependencies (idempotent) and builds FP8 Studio into build/ (Release, Ninja, ccache).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
./scripts/install-deps.sh
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
export CCACHE_BASEDIR="$PWD"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${FP8S_CMAKE_ARGS:-}
cmake --build build --parallel "$(nproc)"

#!/usr/bin/env bash
# Builds the CUDA build (scripts/build-cuda.sh: the official LibTorch 2.x from PyPI's torch wheel)
# and runs every test but the `slow` ones on it. Without a GPU the tests run on LibTorch 2.x's CPU
# backend; the CUDA code is compiled and linked, and device placement is checked on the meta device.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
./scripts/build-cuda.sh
# ldd's list is read whole before it is searched: `ldd | grep -q` under pipefail fails at random
# when grep stops reading early and ldd dies of SIGPIPE
libs=$(ldd build-cuda/engine/fp8studio-cli 2>&1) || true
if ! grep -q libtorch_cuda <<<"$libs"; then
  echo "test-cuda: build-cuda/engine/fp8studio-cli does not link libtorch_cuda; ldd printed:" >&2
  echo "$libs" >&2
  exit 1
fi
labels=(-LE slow)
[ "${1:-}" = "--all" ] && labels=()
ctest --test-dir build-cuda --output-on-failure "${labels[@]}"

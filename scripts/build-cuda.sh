#!/usr/bin/env bash
# Builds FP8 Studio against the official LibTorch 2.x with CUDA (the LibTorch inside PyPI's `torch`
# wheel) into build-cuda/ (idempotent). The wheel is installed by pip into a virtual environment in
# .venv-cuda/ (ignored by git); the CUDA toolkit comes from /usr/local/cuda. The build runs on the CPU
# backend too, so it is built and tested on machines without a GPU.
#
#   FP8S_PYTHON=python3   use that interpreter's torch instead of the venv (a machine's own PyTorch)
#   FP8S_TORCH=torch==X   the pip requirement for the venv (default below)
#   FP8S_SKIP_DEPS=1      do not run install-deps.sh (a machine without Debian's packages)
#   FP8S_EXTRA_PREFIX=D   more CMake prefixes (;-separated), e.g. device-check.sh's bundled libraries
#   FP8S_CMAKE_ARGS=...   extra CMake arguments
#   FP8S_BUILD_DIR=DIR    build folder (default build-cuda)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ "${FP8S_SKIP_DEPS:-0}" = 1 ] || ./scripts/install-deps.sh

torch_req=${FP8S_TORCH:-torch==2.15.0}
python=${FP8S_PYTHON:-}
if [ -z "$python" ]; then
  venv=.venv-cuda
  if ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
    if ! python3 -m venv --help >/dev/null 2>&1; then
      echo "build-cuda: python3 has no venv module; installing python3-venv" >&2
      sudo_cmd=()
      [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
      DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends python3-venv
    fi
    python3 -m venv "$venv"
    echo "build-cuda: installing $torch_req into $venv (about 3 GB with its CUDA libraries)" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check "$torch_req"
  fi
  python=$venv/bin/python
fi
prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)
echo "build-cuda: LibTorch $("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null) from $prefix" >&2
# the torch package folder too: TorchConfig's find_library(torch/c10) would otherwise take Debian's
# LibTorch 1.13 from /usr/lib before the wheel's own lib/
prefix="$prefix;$(dirname "$(dirname "$prefix")")"
[ -z "${FP8S_EXTRA_PREFIX:-}" ] || prefix="$prefix;$FP8S_EXTRA_PREFIX"

cuda_args=()
# the wheel's CUDA version and GPU architectures, for --version
torch_cuda=$("$python" -c 'import torch; print(torch.version.cuda or "")' 2>/dev/null || true)
torch_archs=$("$python" -c 'import torch; print(" ".join(torch.cuda.get_arch_list()))' 2>/dev/null || true)
[ -z "$torch_cuda" ] || cuda_args+=("-DFP8S_TORCH_CUDA=$torch_cuda" "-DFP8S_CUDA_ARCHS=$torch_archs")
if [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda_args+=(-DCUDAToolkit_ROOT=/usr/local/cuda -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
export CCACHE_BASEDIR="$PWD"
# shellcheck disable=SC2086
dir=${FP8S_BUILD_DIR:-build-cuda}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  "${cuda_args[@]}" ${FP8S_CMAKE_ARGS:-}
cmake --build "$dir" --parallel "$(nproc)"

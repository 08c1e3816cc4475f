#!/usr/bin/env bash
# Compiles (syntax and types only, no object files) every engine source that includes LibTorch
# against another LibTorch's headers: the torch wheel of VERSION from PyPI (downloaded once into
# .torch-headers/VERSION/, an ignored folder; only its headers are unpacked). It reuses build-cuda/'s
# compile commands (run ./scripts/build-cuda.sh first), with the wheel's include folders in place of
# the build's. The GPU machine of the `device` tool has PyTorch 2.11: this shows the code builds
# there before a GPU is ever lent.
#   scripts/compile-check-torch.sh 2.11.0
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
version=${1:?usage: scripts/compile-check-torch.sh VERSION (e.g. 2.11.0)}
python=${FP8S_PYTHON:-python3}
dir=.torch-headers/$version
if [ ! -d "$dir/torch/include" ]; then
  mkdir -p "$dir"
  "$python" -m pip download --no-deps --quiet --disable-pip-version-check "torch==$version" -d "$dir"
  wheel=$(ls "$dir"/torch-"$version"*.whl | head -1)
  python3 -m zipfile -e "$wheel" "$dir/unpacked" > /dev/null
  mv "$dir/unpacked/torch" "$dir/torch" && rm -rf "$dir/unpacked" "$wheel"
fi
inc=$PWD/$dir/torch/include
[ -d build-cuda ] || { echo "compile-check-torch: build-cuda/ is missing; run ./scripts/build-cuda.sh first" >&2; exit 1; }
old=$( (ninja -C build-cuda -t commands fp8studio-cli 2>/dev/null || true) | grep -o -- '-isystem [^ ]*/torch/include ' | sort -u | head -1 | cut -d' ' -f2 || true)
[ -n "$old" ] || { echo "compile-check-torch: no LibTorch include folder in build-cuda's commands" >&2; exit 1; }
# one script per source: the build's command with the other headers, no precompiled header (made
# from the build's), no object file
jobs=$(mktemp -d)
trap 'rm -rf "$jobs"' EXIT
n=0
while read -r cmd; do
  cmd=${cmd//$old/$inc}
  cmd=$(sed -E 's#/usr/bin/ccache ##; s#-Winvalid-pch -include [^ ]*cmake_pch.hxx##; s# -o [^ ]*# -fsyntax-only#; s# -MD -MT [^ ]* -MF [^ ]*##' <<<"$cmd")
  n=$((n + 1))
  src=$(grep -o -- ' -c [^ ]*' <<<"$cmd" | cut -d' ' -f3)
  printf 'cd %q && %s > %q 2>&1 || { echo "FAIL %s"; grep -m 5 error %q | sed "s/^/  /"; }\n' \
    "$PWD/build-cuda" "$cmd" "$jobs/$n.log" "$src" "$jobs/$n.log" > "$jobs/$n.sh"
done < <(ninja -C build-cuda -t commands fp8studio-cli 2>/dev/null | grep -E ' -c [^ ]*/engine/[^ ]*\.cpp' | sort -u)
ls "$jobs"/*.sh | xargs -P "$(nproc)" -n 1 bash > "$jobs/result.txt"
cat "$jobs/result.txt"
failed=$(grep -c '^FAIL' "$jobs/result.txt" || true)
header=$(grep -rl "define TORCH_VERSION_MINOR" "$inc" | head -1)
seen=$(awk '/#define TORCH_VERSION_(MAJOR|MINOR|PATCH)/ {printf "%s%s", sep, $3; sep="."}' "$header")
echo "compile-check-torch: LibTorch $seen headers ($version): $n engine sources checked, $failed failed"
((failed == 0))

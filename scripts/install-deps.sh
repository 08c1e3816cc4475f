#!/usr/bin/env bash
# Installs FP8 Studio's build and test dependencies from Debian 12's packages (idempotent).
# Also places the CLIP BPE vocabulary in the user data folder when ../shared/reference has it.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libtorch-dev libopenblas-dev
  qt6-base-dev qt6-svg-dev libqcustomplot-dev libqcustomplot2.1-qt6 libgl-dev
  libspdlog-dev nlohmann-json3-dev libcli11-dev
  libpng-dev zlib1g-dev libutf8proc-dev
  xvfb xauth desktop-file-utils appstream dpkg-dev file qt6-qpa-plugins
  clang libclang-rt-14-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}" >&2
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all packages present" >&2
fi

# The CLIP BPE vocabulary is third-party data, never committed: place it in the user data folder
# (DESIGN.md section 4) from ../shared/reference when present.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
vocab_src="$here/../shared/reference/clip/bpe_simple_vocab_16e6.txt.gz"
vocab_dir="${XDG_DATA_HOME:-$HOME/.local/share}/fp8studio/clip"
if [ -f "$vocab_src" ] && [ ! -f "$vocab_dir/bpe_simple_vocab_16e6.txt.gz" ]; then
  mkdir -p "$vocab_dir"
  cp "$vocab_src" "$vocab_dir/"
  echo "install-deps: CLIP vocabulary installed into $vocab_dir" >&2
fi

#!/usr/bin/env bash
# Installs FP8 Studio's build and test dependencies from Debian 12's packages (idempotent).
# Also places the CLIP BPE vocabulary in the user data folder when ../shared/reference has it.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libtorch-dev libopenblas-dev
  qt6-base-dev qt6-svg-dev libqcustomplot-dev libqcustomplot2.1-qt6 libgl-dev
  libspdlog-dev nlohmann-json3-dev libcli11-dev
  libpng-dev zlib1g-dev libutf8proc-dev libopencv-imgproc-dev
  xvfb xauth desktop-file-utils appstream dpkg-dev file qt6-qpa-plugins debootstrap
  clang libclang-rt-14-dev
  curl ca-certificates
)

missing=()
for p in "${packages[@]}"; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done

# apt-get, waiting while another package manager holds its lock (unattended-upgrades often does on
# a freshly booted desktop): apt's own words name the holder; after FP8S_APT_LOCK_WAIT seconds
# (default 600) it fails with what to do.
apt_wait=${FP8S_APT_LOCK_WAIT:-600}
apt_run() {
  local start=$SECONDS said=0 err rc holder
  err=$(mktemp)
  while :; do
    rc=0
    "${sudo_cmd[@]}" apt-get "$@" 2>"$err" || rc=$?
    if ((rc == 0)); then cat "$err" >&2; rm -f "$err"; return 0; fi
    if ! grep -qE "Could not get lock|Unable to acquire the dpkg frontend lock|Unable to lock" "$err"; then
      cat "$err" >&2
      rm -f "$err"
      echo "install-deps: error: apt-get $1 failed (exit $rc); see apt's message above" >&2
      return "$rc"
    fi
    holder=$(grep -oE "held by process [0-9]+( \([^)]*\))?" "$err" | head -n 1 || true)
    if ((SECONDS - start >= apt_wait)); then
      rm -f "$err"
      echo "install-deps: error: the package manager's lock is still ${holder:-held} after ${apt_wait} s;" \
           "let the other apt (or unattended-upgrades) finish, or stop it, then run this again" >&2
      return 1
    fi
    if ((!said)); then
      echo "install-deps: waiting for the package manager's lock (${holder:-held by another apt}): another" \
           "install or unattended-upgrades is running; waiting up to ${apt_wait} s (FP8S_APT_LOCK_WAIT)" >&2
      said=1
    fi
    sleep "${FP8S_APT_LOCK_POLL:-5}"
  done
}

if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}" >&2
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  apt_run update -qq
  apt_run install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all packages present" >&2
fi

# The CLIP BPE vocabulary is third-party data, never committed: place it in the user data folder
# (docs/architecture.md, "Text, noise and files"), from ../shared/reference when present, else from the openai/CLIP
# repository (checked against its sha256; a note, not a failure, when offline).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
vocab_name=bpe_simple_vocab_16e6.txt.gz
vocab_sha256=924691ac288e54409236115652ad4aa250f48203de50a9e4722a6ecd48d6804a
vocab_url="https://raw.githubusercontent.com/openai/CLIP/main/clip/$vocab_name"
vocab_src="$here/../shared/reference/clip/$vocab_name"
vocab_dir="${XDG_DATA_HOME:-$HOME/.local/share}/fp8studio/clip"
if [ ! -f "$vocab_dir/$vocab_name" ]; then
  mkdir -p "$vocab_dir"
  tmp="$vocab_dir/$vocab_name.partial"
  if [ -f "$vocab_src" ]; then
    cp "$vocab_src" "$tmp"
  elif command -v curl >/dev/null && curl -fsSL --connect-timeout 10 --max-time 60 -o "$tmp" "$vocab_url"; then
    :
  else
    rm -f "$tmp"
    echo "install-deps: note: could not download the CLIP vocabulary from $vocab_url (offline?);" \
         "the built-in demo model works without it; for real checkpoints put $vocab_name in $vocab_dir" >&2
  fi
  if [ -f "$tmp" ]; then
    if [ "$(sha256sum "$tmp" | cut -d' ' -f1)" = "$vocab_sha256" ]; then
      mv "$tmp" "$vocab_dir/$vocab_name"
      echo "install-deps: CLIP vocabulary installed into $vocab_dir" >&2
    else
      rm -f "$tmp"
      echo "install-deps: note: the downloaded CLIP vocabulary has the wrong sha256; not installed" >&2
    fi
  fi
fi

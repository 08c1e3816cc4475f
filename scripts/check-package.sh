#!/usr/bin/env bash
# Checks the packages as a user gets them.
#   check-package.sh         the CPU build's .deb and tarball (Debian's LibTorch): builds them,
#                            inspects them, installs the .deb with apt on this machine, runs the
#                            installed programs from outside the source tree, removes the package
#                            and checks that no file remains.
#   check-package.sh --cuda  the CUDA package (scripts/check-package-cuda.sh): built from build-cuda/,
#                            installed into a clean Debian root made by debootstrap (no GPU, no CUDA
#                            toolkit, no compiler), run there, and removed again.
# Needs root or sudo (apt-get install/remove, chroot). Run by CI after the tests.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[[ ${1:-} != --cuda ]] || exec ./scripts/check-package-cuda.sh
[[ $# -eq 0 ]] || { echo "usage: check-package.sh [--cuda]" >&2; exit 2; }
src=$PWD
sudo_cmd=()
[[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
fail() { echo "check-package: FAILED: $*" >&2; exit 1; }

vocab="$src/../shared/reference/clip/bpe_simple_vocab_16e6.txt.gz"
args=""
[[ -f $vocab ]] && args="-DFP8S_CLIP_VOCAB=$(realpath "$vocab")"
FP8S_CMAKE_ARGS="${FP8S_CMAKE_ARGS:-} $args" ./scripts/build.sh
rm -f build/fp8studio_*.deb build/fp8studio-*.tar.gz
(cd build && cpack -G "DEB;TGZ" >/dev/null)
deb=$(ls build/fp8studio_*.deb)
tgz=$(ls build/fp8studio-*.tar.gz)
version=$(sed -n 's/^project(FP8Studio VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)

echo "== $deb ($(du -h "$deb" | cut -f1))"
info=$(dpkg-deb -I "$deb")
echo "$info" | sed -n '/Package:/,$p'
for field in "Package: fp8studio" "Version: $version" "Section: graphics" "Priority: optional" "Maintainer:" "Homepage:" "Description:"; do
  grep -q "^ $field" <<<"$info" || fail "control field '$field' missing"
done
depends=$(grep '^ Depends:' <<<"$info")
for dep in libtorch libqt6widgets6 libqcustomplot2.1-qt6 libopenblas qt6-qpa-plugins libqt6svg6 libspdlog libpng16; do
  grep -q "$dep" <<<"$depends" || fail "Depends lacks $dep"
done
contents=$(dpkg-deb -c "$deb" | awk '{print $6}')
for path in ./usr/bin/fp8studio ./usr/bin/fp8studio-cli \
    ./usr/share/applications/io.github.fp8studio.FP8Studio.desktop \
    ./usr/share/metainfo/io.github.fp8studio.FP8Studio.metainfo.xml \
    ./usr/share/icons/hicolor/scalable/apps/fp8studio.svg ./usr/share/icons/hicolor/48x48/apps/fp8studio.png \
    ./usr/share/icons/hicolor/256x256/apps/fp8studio.png ./usr/share/man/man1/fp8studio-cli.1 \
    ./usr/share/doc/fp8studio/LICENSE ./usr/share/doc/fp8studio/README.md; do
  grep -qx "$path" <<<"$contents" || fail "$path is not in the package"
done
for path in ./usr/share/fp8studio/demo/demo-sd1.safetensors ./usr/share/fp8studio/demo/tokenizer/vocab.json; do
  grep -qx "$path" <<<"$contents" || fail "$path (the demo model) is not in the package"
done
if [[ -f $vocab ]]; then
  grep -qx ./usr/share/fp8studio/clip/bpe_simple_vocab_16e6.txt.gz <<<"$contents" || fail "the CLIP vocabulary is not in the package"
fi
tar_list=$(tar -tzf "$tgz")
grep -q "/bin/fp8studio-cli$" <<<"$tar_list" || fail "the tarball lacks bin/fp8studio-cli"
desktop-file-validate resources/io.github.fp8studio.FP8Studio.desktop
appstreamcli validate --no-net --explain build/resources/io.github.fp8studio.FP8Studio.metainfo.xml \
  || fail "appstreamcli validate"

echo "== installing"
work=$(mktemp -d)
# never leave the package installed behind a failed check
trap 'rm -rf "$work"; dpkg -s fp8studio >/dev/null 2>&1 && "${sudo_cmd[@]}" apt-get remove -y -qq fp8studio >/dev/null' EXIT
"${sudo_cmd[@]}" apt-get install --reinstall -y -qq "$(realpath "$deb")" >/dev/null
files=$(dpkg -L fp8studio)
(
  cd "$work"
  export HOME="$work/home" XDG_CONFIG_HOME="$work/home/.config" XDG_DATA_HOME="$work/home/.local/share"
  mkdir -p "$HOME"
  [[ $(command -v fp8studio-cli) == /usr/bin/fp8studio-cli ]] || fail "fp8studio-cli is not the installed one"
  # (outputs are captured first: `grep -q` in a pipe could end the writer with SIGPIPE)
  out=$(fp8studio-cli --version); grep -q "$version" <<<"$out" || fail "fp8studio-cli --version"
  # --version and --help need no display (no Qt platform plugin)
  out=$(env -u DISPLAY -u WAYLAND_DISPLAY QT_QPA_PLATFORM=xcb fp8studio --version); grep -q "$version" <<<"$out" || fail "fp8studio --version"
  out=$(env -u DISPLAY -u WAYLAND_DISPLAY QT_QPA_PLATFORM=xcb fp8studio --help); grep -q -- "--run" <<<"$out" || fail "fp8studio --help"
  fp8studio-cli make-synthetic --arch tiny-sd1 --out tiny.safetensors 2>/dev/null
  out=$(fp8studio-cli inspect --model tiny.safetensors); grep -q "SD 1" <<<"$out" || fail "inspect"
  if [[ -f $vocab ]]; then  # the packaged vocabulary is found with no configuration
    fp8studio-cli generate --model tiny.safetensors --prompt "a red circle" --steps 2 --outdir out 2>/dev/null
    compgen -G "out/*.png" >/dev/null || fail "no image generated"
  fi
  # the built-in demo model: no --model, no vocabulary needed, found and verified in /usr/share
  out=$(fp8studio-cli inspect); grep -q "demo model" <<<"$out" || fail "inspect does not find the demo model"
  fp8studio-cli generate --prompt "a red circle on a blue background" --steps 20 --cfg 5 --sampler euler \
    --schedule normal --outdir demo-out 2>/dev/null
  compgen -G "demo-out/*.png" >/dev/null || fail "no image from the demo model"
  QT_QPA_PLATFORM=offscreen timeout 60 fp8studio --self-test 2>/dev/null || fail "fp8studio --self-test"
)
echo "== removing"
"${sudo_cmd[@]}" apt-get remove -y -qq fp8studio >/dev/null
left=0
while read -r f; do
  if [[ -f $f || -L $f ]]; then echo "left behind: $f" >&2; left=1; fi
done <<<"$files"
((left == 0)) || fail "files remain after apt-get remove"
echo "check-package: OK ($deb, $(du -h "$deb" | cut -f1); $tgz)"

#!/usr/bin/env bash
# The CUDA package, checked as a GPU user gets it (`scripts/check-package.sh --cuda`; CI runs it):
#  1. build-cuda/ (scripts/build-cuda.sh, idempotent) packed by CPack into fp8studio-cuda_<v>_amd64.deb,
#     which bundles the torch wheel's LibTorch and CUDA libraries (packaging/cuda-bundle.cmake);
#  2. a clean Debian 12 root made by debootstrap (minbase: no GPU, no CUDA toolkit, no compiler);
#  3. apt installs the .deb there, pulling only Debian's packages (Qt 6, spdlog, libpng, ...);
#  4. there: ldd of both programs resolves every library from the package or the base system, never
#     a toolkit path; --version names LibTorch, CUDA and the GPU architectures; the demo model
#     generates on the CPU (--device auto says it found no GPU); compare runs; the GUI self-tests;
#  5. a second install changes nothing; apt-get purge leaves none of the package's files and keeps
#     the user's models and outputs.
# It prints the package's download and installed sizes and how long each step took.
#   FP8S_DEBIAN_MIRROR=URL   the mirror debootstrap and apt use (default: this machine's, else deb.debian.org)
#   FP8S_ROOT_CACHE=DIR      keeps the pristine debootstrap root as a tarball for a week (default
#                            ~/.cache/fp8studio; CI starts without one and makes it)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
src=$PWD
sudo_cmd=()
[[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
as_root() { "${sudo_cmd[@]}" "$@"; }
fail() { echo "check-package-cuda: FAILED: $*" >&2; exit 1; }
t_start=$SECONDS
t_last=$SECONDS
times=""
phase() { times+="${times:+, }$1 $((SECONDS - t_last)) s"; t_last=$SECONDS; }

if ! command -v debootstrap >/dev/null; then
  echo "check-package-cuda: installing debootstrap" >&2
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

# 1. the package
./scripts/build-cuda.sh >/tmp/fp8s-build-cuda.log 2>&1 || { tail -30 /tmp/fp8s-build-cuda.log >&2; fail "scripts/build-cuda.sh"; }
phase "build"
rm -f build-cuda/fp8studio-cuda_*.deb
(cd build-cuda && cpack -G DEB >/tmp/fp8s-cpack-cuda.log 2>&1) || { grep -v "^ *$" /tmp/fp8s-cpack-cuda.log | tail -20 >&2; fail "cpack in build-cuda"; }
rm -rf build-cuda/_CPack_Packages  # its 4 GB staging copy
deb=$(realpath build-cuda/fp8studio-cuda_*.deb)
phase "cpack"
version=$(sed -n 's/^project(FP8Studio VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
info=$(dpkg-deb -I "$deb")
echo "== $deb ($(du -h "$deb" | cut -f1))"
grep -E '^ (Package|Version|Installed-Size|Depends|Conflicts):' <<<"$info"
for field in "Package: fp8studio-cuda" "Version: $version" "Conflicts: fp8studio" "Provides: fp8studio"; do
  grep -q "^ $field" <<<"$info" || fail "control field '$field' missing"
done
depends=$(grep '^ Depends:' <<<"$info")
for dep in libqt6widgets6 qt6-qpa-plugins libspdlog libpng16; do
  grep -q "$dep" <<<"$depends" || fail "Depends lacks $dep"
done
grep -q -E "cuda|nvidia|libtorch" <<<"$depends" && fail "Depends names a CUDA or LibTorch package: $depends"
contents=$(dpkg-deb -c "$deb" | awk '{print $6}')
for path in ./usr/bin/fp8studio ./usr/bin/fp8studio-cli ./usr/lib/fp8studio-cuda/torch/lib/libtorch_cuda.so \
    ./usr/lib/fp8studio-cuda/torch/lib/libc10_cuda.so ./usr/share/fp8studio/demo/demo-sd1.safetensors \
    ./usr/share/doc/fp8studio/third-party/torch-*/LICENSE; do
  grep -q "^${path//\*/.*}\$" <<<"$contents" || fail "$path is not in the package"
done
for lib in libcudart.so libcublas.so libcudnn.so libnccl.so; do
  grep -q "^./usr/lib/fp8studio-cuda/nvidia/.*/$lib" <<<"$contents" || fail "$lib is not bundled"
done
grep -q -E "libtorch_python|/include/|\.a$" <<<"$contents" && fail "the package carries Python bindings, headers or static archives"
download_bytes=$(stat -c %s "$deb")
installed_kib=$(sed -n 's/^ Installed-Size: //p' <<<"$info")

# 2. a clean root
mirror=${FP8S_DEBIAN_MIRROR:-$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)}
mirror=${mirror:-http://deb.debian.org/debian}
cache=${FP8S_ROOT_CACHE:-$HOME/.cache/fp8studio}
base_tar=$cache/bookworm-minbase.tar
root=$(mktemp -d /var/tmp/fp8s-clean-root.XXXXXX)
mounts_in_root() { awk -v r="$root/" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r; }
cleanup() {
  local rc=$?
  for m in $(mounts_in_root); do as_root umount -l "$m" || true; done
  # never delete through a mount (a bound /dev or /proc) out of the root
  if [[ -z $(mounts_in_root) ]]; then as_root rm -rf --one-file-system "$root" "$root.log"; fi
  exit $rc
}
trap cleanup EXIT
if [[ -f $base_tar && -z $(find "$base_tar" -mtime +7) ]]; then
  as_root tar -xpf "$base_tar" -C "$root"
else
  echo "== debootstrap --variant=minbase bookworm ($mirror)"
  as_root debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 \
    || { tail -20 "$root.log" >&2; rm -f "$root.log"; fail "debootstrap"; }
  rm -f "$root.log"
  mkdir -p "$cache" && as_root tar -cpf "$base_tar.partial" -C "$root" . && mv "$base_tar.partial" "$base_tar"
fi
phase "clean root"
in_root() { as_root chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/home/user LANG=C.UTF-8 "$@"; }
as_root cp /etc/resolv.conf "$root/etc/resolv.conf"
printf 'deb %s bookworm main\ndeb %s bookworm-updates main\n' "$mirror" "$mirror" | as_root tee "$root/etc/apt/sources.list" >/dev/null
as_root mount -t proc proc "$root/proc"
for tool in gcc cc g++ nvcc nvidia-smi python3; do
  in_root sh -c "command -v $tool" >/dev/null && fail "the clean root has $tool"
done
[[ -e $root/usr/local/cuda ]] && fail "the clean root has /usr/local/cuda"

# 3. install: apt fetches the Debian packages the .deb depends on
as_root ln -f "$deb" "$root/tmp/" 2>/dev/null || as_root cp "$deb" "$root/tmp/"
pkg=/tmp/$(basename "$deb")
# apt in a chroot cannot drop to its _apt user; it warns on every download otherwise
echo 'APT::Sandbox::User "root";' | as_root tee "$root/etc/apt/apt.conf.d/99fp8s-chroot" >/dev/null
in_root apt-get update -qq
in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" >"$root.log" 2>&1 \
  || { tail -20 "$root.log" >&2; fail "apt-get install $pkg in the clean root"; }
phase "install"
files=$(in_root dpkg -L fp8studio-cuda)
installed_bytes=$(in_root sh -c 'dpkg -L fp8studio-cuda | xargs -d "\n" stat -c "%F %s"' | awk '/^regular/ {s += $NF} END {printf "%.0f\n", s}')

# 4. what the user runs
echo "== ldd: every library of fp8studio-cli and fp8studio from the package or the base system"
for prog in /usr/bin/fp8studio-cli /usr/bin/fp8studio; do
  # ldd itself is in libc-dev-bin, not in the base system: the dynamic loader lists what it loads
  libs=$(in_root /lib64/ld-linux-x86-64.so.2 --list "$prog") || fail "ld.so --list $prog"
  grep -q "not found" <<<"$libs" && fail "$prog: a library is not found: $(grep 'not found' <<<"$libs")"
  resolved=""
  while read -r name arrow path _; do
    [[ $arrow == "=>" ]] || continue
    path=$(realpath -m -s "$path")  # /usr/bin/../lib/... as the RUNPATH's $ORIGIN gives it
    case $path in
      /usr/lib/fp8studio-cuda/*|/lib/x86_64-linux-gnu/*|/usr/lib/x86_64-linux-gnu/*|/lib64/*) ;;
      *) fail "$prog: $name resolves to $path, outside the package and the base system" ;;
    esac
    resolved+="$path"$'\n'
  done <<<"$libs"
  grep -q "^/usr/lib/fp8studio-cuda/torch/lib/libtorch_cuda.so$" <<<"$resolved" || fail "$prog does not load the bundled libtorch_cuda"
  grep -q "^/usr/lib/fp8studio-cuda/nvidia/.*/libcudart.so" <<<"$resolved" || fail "$prog does not load the bundled CUDA runtime"
  echo "   $prog: $(grep -c . <<<"$resolved") libraries, $(grep -c '^/usr/lib/fp8studio-cuda/' <<<"$resolved") of them from the package"
  runpath=$(readelf -d "$root$prog" | grep -E 'RUNPATH|RPATH' || true)
  grep -q -E "/usr/local|cuda-[0-9]|\.venv|$src" <<<"$runpath" && fail "$prog has a build or toolkit path in its RUNPATH: $runpath"
done
out=$(in_root fp8studio-cli --version)
echo "$out"
grep -q "fp8studio-cli $version (LibTorch 2\.[0-9.]*, CUDA [0-9.]*, GPU architectures sm_" <<<"$out" || fail "--version: $out"
in_root mkdir -p /home/user/.local/share/fp8studio/models
in_root fp8studio-cli make-synthetic --arch tiny-sd1 --out /home/user/.local/share/fp8studio/models/mine.safetensors 2>/dev/null
log=$(in_root sh -c 'cd /home/user && fp8studio-cli generate --prompt "a red circle on a blue background" --steps 20 \
  --cfg 5 --sampler euler --schedule normal --outdir "/home/user/Pictures/FP8 Studio" 2>&1') || { echo "$log" >&2; fail "generate on the demo model"; }
grep -q "no CUDA device was found" <<<"$log" || { echo "$log" >&2; fail "--device auto did not say it fell back to the CPU"; }
in_root sh -c 'ls "/home/user/Pictures/FP8 Studio/"*.png' >/dev/null || fail "no image from the demo model"
in_root sh -c 'cd /home/user && fp8studio-cli compare --prompt "a red circle" --steps 8 --modes fp16,fp8-e4m3 --outdir compare' >/dev/null 2>&1 \
  || fail "compare on the demo model"
in_root sh -c 'ls /home/user/compare/compare-*/' >/dev/null || fail "compare wrote no report"
in_root env QT_QPA_PLATFORM=offscreen timeout 120 fp8studio --self-test >/dev/null 2>&1 || fail "fp8studio --self-test"
echo "== ran there: --version, a 20-step generation on the demo model (CPU), compare fp16 vs fp8-e4m3, the GUI's self-test"
phase "run"

# 5. a second install is idempotent; uninstall leaves only the user's files
before=$(in_root sh -c 'dpkg -L fp8studio-cuda | sort | xargs -d "\n" ls -ld --time-style=+%s 2>/dev/null | md5sum')
in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" >"$root.log" 2>&1 \
  || { tail -20 "$root.log" >&2; fail "a second apt-get install $pkg"; }
after=$(in_root sh -c 'dpkg -L fp8studio-cuda | sort | xargs -d "\n" ls -ld --time-style=+%s 2>/dev/null | md5sum')
[[ $before == "$after" ]] || fail "a second install changed the installed files"
in_root env DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq fp8studio-cuda >"$root.log" 2>&1 \
  || { tail -20 "$root.log" >&2; fail "apt-get purge"; }
left=$(while read -r f; do if [[ -f $root$f || -L $root$f ]]; then echo "$f"; fi; done <<<"$files")
[[ -z $left ]] || fail "files remain after apt-get purge: $(head -5 <<<"$left")"
[[ ! -e $root/usr/lib/fp8studio-cuda ]] || fail "/usr/lib/fp8studio-cuda remains after apt-get purge"
[[ -f $root/home/user/.local/share/fp8studio/models/mine.safetensors ]] || fail "purge removed the user's model"
compgen -G "$root/home/user/Pictures/FP8 Studio/*.png" >/dev/null || fail "purge removed the user's images"
phase "reinstall+purge"

echo "check-package-cuda: OK ($(basename "$deb"): download $((download_bytes / 1048576)) MiB," \
     "installed $((installed_bytes / 1048576)) MiB (control Installed-Size $((installed_kib / 1024)) MiB);" \
     "$times; total $((SECONDS - t_start)) s)"

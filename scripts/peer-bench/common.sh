# What the transformer peer benchmarks (flux_run.sh, zimage_run.sh, flux2_run.sh) share; sourced,
# with NAME (for messages) and the defaults rounds, depth, single and cli set before:
# - the arguments --rounds, --depth, --single-depth and --cli;
# - the peer's Python (.venv-cuda, else .venv-peer, made and filled from PyPI when missing): $venv;
# - the run's folder: $work (PEER_DIR, else a new temporary folder);
# - need PATH WHAT ENV (a one-line error naming ENV when PATH is missing), synth FILE ARCH [FLAGS]
#   (make-synthetic's ARCH into FILE unless it is there), and run_ours CMD... (ours in --compute
#   auto into round $r's JSON and, on a CPU with BF16 instructions, with the FP32 path forced too).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
while (($#)); do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --depth) depth=$2; shift 2 ;;
    --single-depth) single=$2; shift 2 ;;
    --cli) cli=$2; shift 2 ;;
    *) echo "$NAME peer-bench: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
venv=.venv-cuda
[ -x "$venv/bin/python" ] || venv=.venv-peer
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -c 'import torch, diffusers, safetensors' 2>/dev/null ||
  "$venv/bin/pip" install --quiet --disable-pip-version-check torch diffusers safetensors
work=${PEER_DIR:-$(mktemp -d)}
mkdir -p "$work"

need() { [ -e "$1" ] || { echo "$NAME peer-bench: the $2 is needed: set $3" >&2; exit 2; }; }
synth() {
  local out=$1 arch=$2
  shift 2
  [ -f "$out" ] || "$cli" make-synthetic --arch "$arch" "$@" --out "$out" --log-level warn
}
native=0
grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo && native=1
run_ours() {
  "$@" > "$work/ours-$r-auto compute.json"
  if ((native)); then FP8S_CPU_ISA=avx2 "$@" > "$work/ours-$r-fp32 compute (FP8S_CPU_ISA=avx2).json"; fi
}

# What the transformer peer benchmarks (flux_run.sh, zimage_run.sh, flux2_run.sh) share; sourced,
# with NAME (for messages) and the defaults rounds, depth, single and cli set before:
# - the arguments --rounds, --depth, --single-depth and --cli;
# - the peer's Python (.venv-cuda, else .venv-peer, made and filled from PyPI when missing): $venv;
# - the run's folder: $work (<NAME>_PEER_DIR, else PEER_DIR, else a new temporary folder);
# - need PATH WHAT ENV (a one-line error naming ENV when PATH is missing), need_tokenizer t5|qwen
#   ($tokenizer: FP8S_T5_TOKENIZER / FP8S_QWEN_TOKENIZER, else the reference's), synth FILE ARCH
#   [FLAGS] (make-synthetic's ARCH into FILE unless it is there);
# - bench_rounds SCRIPT DTYPES TITLE PEER OURS...: $rounds rounds alternating the peer (SCRIPT on
#   $model in each of DTYPES) and ours (OURS... in --compute auto and, on a CPU with BF16
#   instructions unless ours_fp32=0, with the FP32 path forced too), then table.py's table.
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
name_dir=${NAME^^}_PEER_DIR
work=${!name_dir:-${PEER_DIR:-$(mktemp -d)}}
mkdir -p "$work"

need() { [ -e "$1" ] || { echo "$NAME peer-bench: the $2 is needed: set $3" >&2; exit 2; }; }
synth() {
  local out=$1 arch=$2
  shift 2
  [ -f "$out" ] || "$cli" make-synthetic --arch "$arch" "$@" --out "$out" --log-level warn
}
need_tokenizer() {
  if [ "$1" = t5 ]; then
    tokenizer=${FP8S_T5_TOKENIZER:-../shared/reference/flux/t5_tokenizer}
    need "$tokenizer" "T5 tokenizer" FP8S_T5_TOKENIZER
  else
    tokenizer=${FP8S_QWEN_TOKENIZER:-../shared/reference/zimage/qwen_tokenizer}
    need "$tokenizer" "Qwen tokenizer" FP8S_QWEN_TOKENIZER
  fi
}
native=0
grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo && [ "${ours_fp32:-1}" = 1 ] && native=1
bench_rounds() {
  local script=$1 dtypes=$2 title=$3 peer=$4 r dtype
  shift 4
  for r in $(seq "$rounds"); do
    echo "$NAME peer-bench: round $r/$rounds" >&2
    for dtype in $dtypes; do
      "$venv/bin/python" "scripts/peer-bench/$script" --model "$model" --repeat 2 --dtype "$dtype" 2>/dev/null > "$work/peer-$r-$dtype.json"
    done
    "$@" > "$work/ours-$r-auto compute.json"
    if ((native)); then FP8S_CPU_ISA=avx2 "$@" > "$work/ours-$r-fp32 compute (FP8S_CPU_ISA=avx2).json"; fi
  done
  "$venv/bin/python" scripts/peer-bench/table.py "$work" "$rounds" "$title" "$peer"
}

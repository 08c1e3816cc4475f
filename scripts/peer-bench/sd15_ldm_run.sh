#!/usr/bin/env bash
# The SD1.5 CPU peer benchmark of issue 53 (not run in CI): one CFG step (a batch-2 UNet forward) of
# a synthetic SD1.5 checkpoint, PyTorch 1.13 + CompVis ldm's UNetModel in FP32 and in BF16 against
# fp8studio-cli's step with FP8 E4M3 storage and `--compute auto`, on the same file, alternated in
# one run: peer, ours, peer, ours, ... On a CPU with BF16 instructions ours also runs with the FP32
# path forced (FP8S_CPU_ISA=avx2: what auto chooses on an AVX2-only CPU). Prints a table of medians,
# ranges and ratios to the best peer.
#
#   scripts/peer-bench/sd15_ldm_run.sh [--size 512] [--rounds 3] [--cli build/engine/fp8studio-cli] [--model F] [--avx2]
#
# --avx2 runs both sides as on a CPU with AVX2 and no AVX-512 (a Zen 3, a Core i7-12700): oneDNN and
# ATen's kernels capped at AVX2 (ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY), auto told there are no BF16
# instructions (FP8S_CPU_ISA=avx2); the peer in FP32 only (oneDNN has no BF16 below AVX-512).
#
# PyTorch 1.13 needs Python 3.10 (python3.10 on PATH or pyenv's); it and ldm (PyPI's
# stable-diffusion-sdkit, without its dependencies) go into .venv-ldm/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
size=512 rounds=3 cli=build/engine/fp8studio-cli model="" avx2=0
while (($#)); do
  case "$1" in
    --size) size=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --cli) cli=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --avx2) avx2=1; shift ;;
    *) echo "sd15 peer-bench: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
venv=.venv-ldm
if [ ! -x "$venv/bin/python" ]; then
  py=$(command -v python3.10 || ls "$HOME"/.pyenv/versions/3.10.*/bin/python 2>/dev/null | head -1 || true)
  [ -n "$py" ] || { echo "sd15 peer-bench: PyTorch 1.13 needs Python 3.10; install python3.10" >&2; exit 2; }
  "$py" -m venv "$venv"
fi
"$venv/bin/python" -c 'import torch, einops, safetensors, omegaconf, ldm' 2>/dev/null || {
  "$venv/bin/pip" install --quiet --disable-pip-version-check "torch==1.13.1" "numpy<2" einops pillow safetensors omegaconf
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps "stable-diffusion-sdkit==2.1.5"
}
work=$(mktemp -d)
if [ -z "$model" ]; then
  model=$work/sd15.safetensors
  "$cli" make-synthetic --arch sd15 --out "$model" --log-level warn
fi
native=0 dtypes=fp32,bf16 title="SD1.5 UNet, one CFG step (batch 2) at ${size}²"
grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo && native=1
if ((avx2)); then
  export FP8S_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2
  native=0 dtypes=fp32 title="$title, both sides capped at AVX2"
fi
for r in $(seq "$rounds"); do
  echo "sd15 peer-bench: round $r/$rounds" >&2
  "$venv/bin/python" scripts/peer-bench/sd15_ldm_bench.py --model "$model" --size "$size" --repeat 2 --dtypes "$dtypes" 2>/dev/null > "$work/peer-$r.json"
  ours=("$cli" bench --section generate --model "$model" --device cpu --modes fp8-e4m3 --width "$size" --height "$size"
        --steps 3 --repeat 1 --seed 1 --prompt "a lighthouse on a cliff at dusk" --json --log-level warn)
  "${ours[@]}" > "$work/ours-$r-auto compute.json"
  if ((native)); then FP8S_CPU_ISA=avx2 "${ours[@]}" > "$work/ours-$r-fp32 compute (FP8S_CPU_ISA=avx2).json"; fi
done
"$venv/bin/python" scripts/peer-bench/table.py "$work" "$rounds" "$title" \
  "PyTorch 1.13 + CompVis ldm"
rm -rf "$work"

#!/bin/bash
# Every storage type on full-size synthetic Z-Image Turbo (issue 59): writes the released layouts
# with random weights (the transformer and Qwen3-4B in BF16, the Flux autoencoder), then
#   1. each type's relative RMS weight error over the transformer's Linear weights (bench --section weights);
#   2. one `compare --modes bf16,fp8-e4m3,int8,mxfp8,nvfp4` at 512x512, 8 steps (FP8 and INT8 with
#      per-channel/per-row scales): weight bytes, peak RSS, step times, PSNR/SSIM against BF16.
# Usage: scripts/precisions-full-size.sh [DIR] (default /tmp/precisions-full-size; ~21 GB of disk)
set -euo pipefail
cli=${CLI:-build/engine/fp8studio-cli}
dir=${1:-/tmp/precisions-full-size}
ref=$(cd "$(dirname "$0")/.." && pwd)/../shared/reference
[ -n "${FP8S_QWEN_TOKENIZER:-}" ] || [ ! -d "$ref/zimage/qwen_tokenizer" ] || export FP8S_QWEN_TOKENIZER=$ref/zimage/qwen_tokenizer
m=$dir/models
mkdir -p "$m/diffusion_models" "$m/text_encoders" "$m/vae"
make() {  # arch dtype path
  [ -f "$3" ] || "$cli" make-synthetic --arch "$1" --dtype "$2" --out "$3"
}
make zimage-turbo bf16 "$m/diffusion_models/z_image_turbo_bf16.safetensors"
make qwen3-4b bf16 "$m/text_encoders/qwen_3_4b.safetensors"
make flux-ae fp32 "$m/vae/ae.safetensors"
lscpu | grep -E "Model name|^CPU\(s\)|Flags" | sed 's/^Flags:.*\(avx512_bf16\|amx\).*/Flags: (avx512_bf16 or amx present)/'
echo "== weight error of each type over the transformer's Linear weights"
"$cli" bench --section weights --weight-model "$m/diffusion_models/z_image_turbo_bf16.safetensors" \
  --storages fp8-e4m3,int8,mxfp8,nvfp4 --weight-fp8-scale channel --log-level warn
echo "== compare, 8 steps at 512x512"
/usr/bin/time -v "$cli" compare --model "$m/diffusion_models/z_image_turbo_bf16.safetensors" \
  --modes bf16,fp8-e4m3,int8,mxfp8,nvfp4 --fp8-scale channel \
  --prompt "a lighthouse on a cliff at dusk" --width 512 --height 512 --seed 1 --outdir "$dir/compare" 2> "$dir/compare.log"
grep -E "Maximum resident|Elapsed" "$dir/compare.log"

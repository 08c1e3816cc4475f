#!/bin/bash
# The weight budget on full-size synthetic models (issue 41): random weights in the released layouts
# (make-synthetic), measured by `compare` in one process with the modes alternated.
# - Flux.1 dev: FP16 streamed under an 8 GB budget, FP8 E4M3 resident, FP8 E4M3 under the same 8 GB;
#   one 512x512 step each (a 24 GB machine cannot hold FP16 resident).
# - SDXL: FP16 resident against FP16 under a 2 GB budget, A B A B, 1024x1024, 2 steps.
# Each mode's row: weights, peak RSS, resident block bytes, streamed MB a step, transfer wait, step ms.
# Usage: scripts/stream-bench.sh [DIR] [flux|sdxl|all] (default /tmp/stream-bench, all; ~47 GB of disk)
set -euo pipefail
cli=${CLI:-build/engine/fp8studio-cli}
dir=${1:-/tmp/stream-bench}
what=${2:-all}
ref=$(cd "$(dirname "$0")/.." && pwd)/../shared/reference
[ -n "${FP8S_T5_TOKENIZER:-}" ] || [ ! -d "$ref/flux/t5_tokenizer" ] || export FP8S_T5_TOKENIZER=$ref/flux/t5_tokenizer/tokenizer.json
[ -n "${FP8S_CLIP_VOCAB:-}" ] || [ ! -d "$ref/clip" ] || export FP8S_CLIP_VOCAB=$ref/clip
mkdir -p "$dir/models/diffusion_models" "$dir/models/text_encoders" "$dir/models/vae" "$dir/models/checkpoints"
make() {  # arch dtype path
  [ -f "$3" ] || "$cli" make-synthetic --arch "$1" --dtype "$2" --out "$3"
}
if [ "$what" = flux ] || [ "$what" = all ]; then
  make flux-dev fp16 "$dir/models/diffusion_models/flux1-dev.safetensors"
  make t5xxl fp16 "$dir/models/text_encoders/t5xxl_fp16.safetensors"
  make clip-l fp16 "$dir/models/text_encoders/clip_l.safetensors"
  make flux-ae fp32 "$dir/models/vae/ae.safetensors"
  echo "== Flux.1 dev: fp16@8G, fp8-e4m3, fp8-e4m3@8G; one 512x512 step each"
  /usr/bin/time -v "$cli" compare --model "$dir/models/diffusion_models/flux1-dev.safetensors" \
    --modes fp16@8G,fp8-e4m3,fp8-e4m3@8G --no-unet-error --prompt "a lighthouse on a cliff at dusk" \
    --width 512 --height 512 --steps 1 --seed 1 --outdir "$dir/out" 2> "$dir/flux.log" | tee "$dir/flux.md"
  grep -E "streamed|resident .* blocks|Maximum resident|Elapsed" "$dir/flux.log" || true
fi
if [ "$what" = sdxl ] || [ "$what" = all ]; then
  make sdxl fp16 "$dir/models/checkpoints/sdxl.safetensors"
  echo "== SDXL: fp16 against fp16@2G, alternated; 1024x1024, 2 steps"
  "$cli" compare --model "$dir/models/checkpoints/sdxl.safetensors" --modes fp16,fp16@2G,fp16,fp16@2G \
    --no-unet-error --prompt "a lighthouse on a cliff at dusk" --width 1024 --height 1024 --steps 2 --seed 1 \
    --outdir "$dir/out" 2> "$dir/sdxl.log" | tee "$dir/sdxl.md"
  grep -E "streamed|resident .* blocks" "$dir/sdxl.log" || true
fi

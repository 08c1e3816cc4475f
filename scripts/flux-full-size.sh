#!/bin/bash
# Full-size synthetic Flux.1 dev on this machine (issue 31): writes the released layouts with random
# weights (transformer and T5-XXL in FP8 E4M3, CLIP-L F16, the autoencoder F32) into a ComfyUI-style
# models folder, then from a cold start (a new process) one 512x512 step with --json, and FP16,
# storage (the FP8 file upcast), which must be refused with its estimate before any weight is read.
# Usage: scripts/flux-full-size.sh [DIR] (default /tmp/flux-full-size; ~17 GB of disk)
set -euo pipefail
cli=${CLI:-build/engine/fp8studio-cli}
dir=${1:-/tmp/flux-full-size}
# the T5 tokenizer and the CLIP vocabulary: as found normally, else the reference copies
ref=$(cd "$(dirname "$0")/.." && pwd)/../shared/reference
[ -n "${FP8S_T5_TOKENIZER:-}" ] || [ ! -d "$ref/flux/t5_tokenizer" ] || export FP8S_T5_TOKENIZER=$ref/flux/t5_tokenizer/tokenizer.json
[ -n "${FP8S_CLIP_VOCAB:-}" ] || [ ! -d "$ref/clip" ] || export FP8S_CLIP_VOCAB=$ref/clip
mkdir -p "$dir/models/diffusion_models" "$dir/models/text_encoders" "$dir/models/vae"
make() {  # arch dtype path
  [ -f "$3" ] || "$cli" make-synthetic --arch "$1" --dtype "$2" --out "$3"
}
make flux-dev fp8-e4m3 "$dir/models/diffusion_models/flux1-dev-fp8-e4m3.safetensors"
make t5xxl fp8-e4m3 "$dir/models/text_encoders/t5xxl_fp8_e4m3fn.safetensors"
make clip-l fp16 "$dir/models/text_encoders/clip_l.safetensors"
make flux-ae fp32 "$dir/models/vae/ae.safetensors"
echo "== FP16 (must be refused before any weight is read)"
/usr/bin/time -v "$cli" generate --model "$dir/models/diffusion_models/flux1-dev-fp8-e4m3.safetensors" --weights fp16 \
  --prompt "a lighthouse on a cliff at dusk" --width 512 --height 512 --steps 1 --outdir "$dir/out" \
  2> "$dir/fp16.log" && { echo "FP16 was not refused"; exit 1; } || true
grep -E "^error|Maximum resident|Elapsed" "$dir/fp16.log"
echo "== FP8 E4M3 transformer and T5, one 512x512 step"
/usr/bin/time -v "$cli" generate --model "$dir/models/diffusion_models/flux1-dev-fp8-e4m3.safetensors" \
  --prompt "a lighthouse on a cliff at dusk" --width 512 --height 512 --steps 1 --seed 1 --outdir "$dir/out" --json \
  > "$dir/fp8.json" 2> "$dir/fp8.log"
grep -E "Maximum resident|Elapsed" "$dir/fp8.log"
cat "$dir/fp8.json"

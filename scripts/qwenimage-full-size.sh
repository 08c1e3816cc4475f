#!/bin/bash
# Full-size synthetic Qwen-Image on this machine (issue 58, item 5): writes the released layouts with
# random weights into a ComfyUI-style models folder (the 20 B transformer and Qwen2.5-VL-7B in BF16,
# the autoencoder in BF16), prints the transformer's residency plans (BF16 and FP8 under auto), then
# one `compare --modes bf16,fp8-e4m3` at 512x512 (1 step by default, CFG 1): BF16 streamed under auto
# against FP8 E4M3 made at load, weights, resident and streamed bytes, peak RSS, s/step, PSNR/SSIM.
# Usage: scripts/qwenimage-full-size.sh [DIR] [STEPS] [SIZE] (default /tmp/qwenimage-full-size, 1, 512;
# ~58 GB of disk)
set -euo pipefail
cli=${CLI:-build/engine/fp8studio-cli}
dir=${1:-/tmp/qwenimage-full-size}
steps=${2:-1}
size=${3:-512}
ref=$(cd "$(dirname "$0")/.." && pwd)/../shared/reference
[ -n "${FP8S_QWEN_TOKENIZER:-}" ] || export FP8S_QWEN_TOKENIZER=$ref/zimage/qwen_tokenizer
m=$dir/models
mkdir -p "$m/diffusion_models" "$m/text_encoders" "$m/vae"
make() {  # arch dtype path
  [ -f "$3" ] || "$cli" make-synthetic --arch "$1" --dtype "$2" --out "$3" --log-level warn
}
make qwen-image bf16 "$m/diffusion_models/qwen_image_bf16.safetensors"
make qwen2.5-vl-7b bf16 "$m/text_encoders/qwen_2.5_vl_7b.safetensors"
make qwen-image-vae bf16 "$m/vae/qwen_image_vae.safetensors"
ls -l "$m"/*/*.safetensors
for w in bf16 fp8-e4m3; do
  echo "== inspect --weights $w (auto budget)"
  "$cli" inspect --model "$m/diffusion_models/qwen_image_bf16.safetensors" --weights "$w" | grep -iE "budget|stream|resident|weights" | head -8 || true
done
echo "== compare: BF16 (streamed under auto) against FP8 E4M3 (made at load), $steps step(s) at ${size}x${size}"
/usr/bin/time -v "$cli" compare --model "$m/diffusion_models/qwen_image_bf16.safetensors" --modes bf16,fp8-e4m3 \
  --prompt "a lighthouse on a cliff at dusk, oil painting" --steps "$steps" --cfg 1 --width "$size" --height "$size" --seed 1 \
  --outdir "$dir/compare-$size" > "$dir/compare-$size.out" 2> "$dir/compare-$size.log"
cat "$dir/compare-$size.out"
grep -E "Maximum resident|Elapsed" "$dir/compare-$size.log"

#!/bin/bash
# Full-size synthetic Z-Image Turbo on this machine (issue 42): writes the released layouts with
# random weights into a ComfyUI-style models folder (the transformer and Qwen3-4B in BF16 and in
# FP8 E4M3, the Flux autoencoder), then
#   1. from a cold start (a new process), 8 steps at 512x512 with the FP8 transformer and Qwen3
#      files: load time, step times (--json) and peak RSS (/usr/bin/time);
#   2. one `compare --modes bf16,fp8-e4m3` on the BF16 files: weight bytes, peaks, step times, PSNR.
# Usage: scripts/zimage-full-size.sh [DIR] (default /tmp/zimage-full-size; ~31 GB of disk)
set -euo pipefail
cli=${CLI:-build/engine/fp8studio-cli}
dir=${1:-/tmp/zimage-full-size}
ref=$(cd "$(dirname "$0")/.." && pwd)/../shared/reference
[ -n "${FP8S_QWEN_TOKENIZER:-}" ] || [ ! -d "$ref/zimage/qwen_tokenizer" ] || export FP8S_QWEN_TOKENIZER=$ref/zimage/qwen_tokenizer
m=$dir/models
mkdir -p "$m/diffusion_models" "$m/text_encoders" "$m/vae" "$dir/fp8/diffusion_models" "$dir/fp8/text_encoders"
make() {  # arch dtype path
  [ -f "$3" ] || "$cli" make-synthetic --arch "$1" --dtype "$2" --out "$3"
}
make zimage-turbo bf16 "$m/diffusion_models/z_image_turbo_bf16.safetensors"
make qwen3-4b bf16 "$m/text_encoders/qwen_3_4b.safetensors"
make flux-ae fp32 "$m/vae/ae.safetensors"
make zimage-turbo fp8-e4m3 "$dir/fp8/diffusion_models/z_image_turbo_fp8_e4m3fn.safetensors"
make qwen3-4b fp8-e4m3 "$dir/fp8/text_encoders/qwen_3_4b_fp8_e4m3fn.safetensors"
prompt="a lighthouse on a cliff at dusk"
echo "== cold start: FP8 E4M3 transformer and Qwen3 files, 8 steps at 512x512"
/usr/bin/time -v "$cli" generate --model "$dir/fp8/diffusion_models/z_image_turbo_fp8_e4m3fn.safetensors" \
  --text-encoder "$dir/fp8/text_encoders/qwen_3_4b_fp8_e4m3fn.safetensors" --vae "$m/vae/ae.safetensors" \
  --prompt "$prompt" --width 512 --height 512 --seed 1 --outdir "$dir/out" --json > "$dir/fp8.json" 2> "$dir/fp8.log"
grep -E "Maximum resident|Elapsed" "$dir/fp8.log"
python3 - "$dir/fp8.json" <<'EOF'
import json, statistics, sys
j = json.load(open(sys.argv[1]))
r = j[0] if isinstance(j, list) else j
t = r.get("timing", r)
steps = t.get("step_ms", [])
print("load ms", t.get("load_ms"), "| steps", len(steps), "| step ms median", statistics.median(steps) if steps else None,
      "range", (min(steps), max(steps)) if steps else None, "| weight bytes", r.get("weight_bytes"))
EOF
echo "== compare BF16 against FP8 E4M3 (made at load), 8 steps at 512x512"
/usr/bin/time -v "$cli" compare --model "$m/diffusion_models/z_image_turbo_bf16.safetensors" --modes bf16,fp8-e4m3 \
  --prompt "$prompt" --width 512 --height 512 --seed 1 --outdir "$dir/compare" 2> "$dir/compare.log"
grep -E "Maximum resident|Elapsed" "$dir/compare.log"

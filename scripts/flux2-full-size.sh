#!/bin/bash
# Full-size synthetic FLUX.2 [dev] in FP8 on this machine (issue 57, item 6): writes the released
# layouts with random weights into a ComfyUI-style models folder (the 32 B transformer and the
# pruned Mistral Small 3.2 text encoder as FP8 E4M3 files, the autoencoder in F32), prints the
# transformer's residency plan under the budget, then runs one step at 512x512 from a cold start:
# weights, resident and streamed bytes, read GB/s, wait, s/step (--json) and peak RSS (/usr/bin/time).
# With `compare` first: klein 9B in BF16 (its transformer and Qwen3-8B) in one `compare --modes
# bf16,fp8-e4m3` at 512x512, 4 steps: weights, peak RSS, s/step, PSNR/SSIM (~35 GB of disk).
# Usage: scripts/flux2-full-size.sh [compare] [DIR] [BUDGET] (default /tmp/flux2-full-size, 12G; ~50 GB of disk)
set -euo pipefail
cli=${CLI:-build/engine/fp8studio-cli}
mode=dev
if [ "${1:-}" = compare ]; then mode=compare; shift; fi
dir=${1:-/tmp/flux2-full-size}
budget=${2:-12G}
ref=$(cd "$(dirname "$0")/.." && pwd)/../shared/reference
m=$dir/models
mkdir -p "$m/diffusion_models" "$m/text_encoders" "$m/vae"
make() {  # arch dtype path
  [ -f "$3" ] || "$cli" make-synthetic --arch "$1" --dtype "$2" --out "$3"
}
if [ "$mode" = compare ]; then
  [ -n "${FP8S_QWEN_TOKENIZER:-}" ] || export FP8S_QWEN_TOKENIZER=$ref/zimage/qwen_tokenizer
  make flux2-klein-9b bf16 "$m/diffusion_models/flux-2-klein-9b.safetensors"
  make qwen3-8b bf16 "$m/text_encoders/qwen_3_8b.safetensors"
  make flux2-ae fp32 "$m/vae/flux2-vae.safetensors"
  echo "== compare klein 9B: BF16 against FP8 E4M3 (made at load), 4 steps at 512x512"
  /usr/bin/time -v "$cli" compare --model "$m/diffusion_models/flux-2-klein-9b.safetensors" --modes bf16,fp8-e4m3 \
    --prompt "a lighthouse on a cliff at dusk, oil painting" --steps 4 --width 512 --height 512 --seed 1 \
    --outdir "$dir/compare" > "$dir/compare.out" 2> "$dir/compare.log"
  cat "$dir/compare.out"
  grep -E "Maximum resident|Elapsed" "$dir/compare.log"
  exit 0
fi
make flux2-dev fp8-e4m3 "$m/diffusion_models/flux2_dev_fp8mixed.safetensors"
make mistral3-small-te fp8-e4m3 "$m/text_encoders/mistral_3_small_flux2_fp8.safetensors"
make flux2-ae fp32 "$m/vae/flux2-vae.safetensors"
ls -l "$m"/*/*.safetensors
"$cli" inspect --model "$m/diffusion_models/flux2_dev_fp8mixed.safetensors" --weights fp8-e4m3 --weight-budget "$budget" |
  grep -E "^Weight budget|outside the blocks"
echo "== cold start: dev FP8, budget $budget, 1 step at 512x512"
/usr/bin/time -v "$cli" generate --model "$m/diffusion_models/flux2_dev_fp8mixed.safetensors" \
  --mistral-tokenizer "$ref/flux2/mistral_tokenizer/tekken.json.gz" --weights fp8-e4m3 --weight-budget "$budget" \
  --prompt "a red fox standing in fresh snow, morning light" --steps 1 --width 512 --height 512 --seed 1 \
  --outdir "$dir/out" --json > "$dir/dev.json" 2> "$dir/dev.log"
grep -E "budget|streamed|Maximum resident|Elapsed" "$dir/dev.log"
python3 - "$dir/dev.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
r = j[0] if isinstance(j, list) else j
print(json.dumps({k: r.get(k) for k in ("weight_bytes", "unet_bytes", "text_bytes", "vae_bytes", "rss_peak_bytes", "streaming")}, indent=1))
print(json.dumps(r.get("timing", {}), indent=1)[:1500])
EOF

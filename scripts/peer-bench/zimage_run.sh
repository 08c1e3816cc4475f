#!/usr/bin/env bash
# The Z-Image peer benchmark (issue 42; not run in CI): one transformer call at 512x512 (1024 image
# tokens, a 32-row caption) of a full-width, reduced-depth synthetic Z-Image Turbo (default 2
# layers, the 2 + 2 refiners), PyTorch 2.x + diffusers' ZImageTransformer2DModel in BF16 and FP32 against
# fp8studio-cli's step (= one transformer call: Turbo has no CFG) in BF16 and FP8 E4M3 storage, on
# the same file, alternated in one run: peer, ours, peer, ours, ... Prints a table of medians,
# ranges and ratios.
#
# Ours computes in `--compute auto`; on a CPU with BF16 instructions also with the FP32 path
# forced (FP8S_CPU_ISA=avx2: what auto chooses on an AVX2-only CPU).
#
#   scripts/peer-bench/zimage_run.sh [--rounds 3] [--depth 2] [--cli build/engine/fp8studio-cli]
rounds=3 depth=2 cli=build/engine/fp8studio-cli NAME=zimage
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_tokenizer qwen
model=$work/zimage-turbo-d$depth.safetensors
synth "$model" zimage-turbo --depth "$depth"
synth "$work/qwen3-2layers.safetensors" qwen3-4b --depth 2
synth "$work/ae.safetensors" flux-ae
# a prompt whose templated tokens fill one 32-row caption block, as the peer's caption
bench_rounds zimage_transformer.py "bf16 fp32" \
  "Z-Image Turbo, $depth layers + 2 + 2 refiners at full width, one 512x512 call (1024 image tokens, a 32-row caption)" \
  "diffusers ZImageTransformer2DModel" \
  "$cli" bench --section generate --model "$model" --text-encoder "$work/qwen3-2layers.safetensors" --vae "$work/ae.safetensors" \
  --qwen-tokenizer "$tokenizer" --device cpu --modes bf16,fp8-e4m3 --width 512 --height 512 --steps 2 --repeat 1 \
  --seed 1 --prompt "a lighthouse on a cliff at dusk, oil painting, warm light" --json --log-level warn

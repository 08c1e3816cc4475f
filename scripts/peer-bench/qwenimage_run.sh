#!/usr/bin/env bash
# The Qwen-Image peer benchmark (issue 58, item 6; not run in CI): one transformer call at 512x512
# (1024 image tokens, a 32-row text) of a full-width, reduced-depth synthetic Qwen-Image (default 2
# of its 60 blocks), PyTorch 2.x + diffusers' QwenImageTransformer2DModel in BF16 and FP32 against
# fp8studio-cli's step (= one transformer call: CFG 1) in BF16 and FP8 E4M3 storage, on the same
# file, alternated in one run: peer, ours, peer, ours, ... Prints a table of medians, ranges and ratios.
#
# Ours computes in `--compute auto`; on a CPU with BF16 instructions also with the FP32 path
# forced (FP8S_CPU_ISA=avx2: what auto chooses on an AVX2-only CPU). The text encoder is a 2-layer
# Qwen2.5-VL of full width (the encode is not in the step).
#
#   scripts/peer-bench/qwenimage_run.sh [--rounds 3] [--depth 2] [--cli build/engine/fp8studio-cli]
rounds=3 depth=2 cli=build/engine/fp8studio-cli NAME=qwenimage
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_tokenizer qwen
model=$work/qwen-image-d$depth.safetensors
synth "$model" qwen-image --depth "$depth"
synth "$work/qwen25vl-2layers.safetensors" qwen2.5-vl-7b --depth 2
synth "$work/qwen_image_vae.safetensors" qwen-image-vae
bench_rounds qwenimage_transformer.py "bf16 fp32" \
  "Qwen-Image, $depth of 60 blocks at full width, one 512x512 call (1024 image tokens, a 32-row text)" \
  "diffusers QwenImageTransformer2DModel" \
  "$cli" bench --section generate --model "$model" --text-encoder "$work/qwen25vl-2layers.safetensors" --vae "$work/qwen_image_vae.safetensors" \
  --qwen-tokenizer "$tokenizer" --device cpu --modes bf16,fp8-e4m3 --width 512 --height 512 --steps 2 --cfg 1 --repeat 1 \
  --seed 1 --prompt "a lighthouse on a cliff at dusk, oil painting, warm light, detailed rocks" --json --log-level warn

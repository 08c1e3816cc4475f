#!/usr/bin/env bash
# The Flux peer benchmark (issue 31; not run in CI): one transformer call at 512x512 (1024 image
# tokens, 512 T5 tokens) of a full-width, reduced-depth synthetic Flux dev (default 2 double and
# 4 single blocks), PyTorch 2.x + diffusers' FluxTransformer2DModel in BF16 and FP32 against
# fp8studio-cli's step (= one transformer call) in BF16 and FP8 E4M3 storage, on the same file,
# alternated in one run: peer, ours, peer, ours, ... Prints a table of medians, ranges and ratios.
#
# Ours computes in `--compute auto`; on a CPU with BF16 instructions also with the FP32 path
# forced (FP8S_CPU_ISA=avx2: what auto chooses on an AVX2-only CPU).
#
#   scripts/peer-bench/flux_run.sh [--rounds 3] [--depth 2] [--single-depth 4] [--cli build/engine/fp8studio-cli]
rounds=3 depth=2 single=4 cli=build/engine/fp8studio-cli NAME=flux
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_tokenizer t5
model=$work/flux-dev-d$depth-s$single.safetensors
synth "$model" flux-dev --depth "$depth" --single-depth "$single"
synth "$work/t5-1layer.safetensors" t5xxl --depth 1
synth "$work/clip_l.safetensors" clip-l
synth "$work/ae.safetensors" flux-ae
bench_rounds flux_transformer.py "bf16 fp32" \
  "Flux dev, $depth double + $single single blocks at full width, one 512x512 call (1024 image + 512 text tokens)" \
  "diffusers FluxTransformer2DModel" \
  "$cli" bench --section generate --model "$model" --t5 "$work/t5-1layer.safetensors" --clip-l "$work/clip_l.safetensors" \
  --t5-tokenizer "$tokenizer" --vae "$work/ae.safetensors" --device cpu --modes bf16,fp8-e4m3 --width 512 --height 512 \
  --steps 2 --repeat 1 --seed 1 --prompt "a lighthouse on a cliff at dusk" --json --log-level warn

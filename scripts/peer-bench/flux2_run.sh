#!/usr/bin/env bash
# The FLUX.2 peer benchmark (issue 57, item 7; not run in CI): one transformer call at 512x512 (1024
# image tokens, a 512-row text) of a full-width, reduced-depth synthetic FLUX.2 [klein] 9B (default 1
# double and 2 single blocks), PyTorch 2.x + diffusers' Flux2Transformer2DModel in BF16 against
# fp8studio-cli's step (= one transformer call: klein distilled at CFG 1) in BF16 and FP8 E4M3
# storage, on the same file, alternated in one run: peer, ours, peer, ours, ... Ours computes in
# `--compute auto`. Its text encoder is the full Qwen3-8B (FLUX.2 reads its layers 9/18/27; the
# encode is not in the step). Prints a table of medians, ranges and ratios.
#
#   scripts/peer-bench/flux2_run.sh [--rounds 2] [--depth 1] [--single-depth 2] [--cli build/engine/fp8studio-cli]
rounds=2 depth=1 single=2 cli=build/engine/fp8studio-cli NAME=flux2 ours_fp32=0
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_tokenizer qwen
model=$work/flux2-klein-9b-d$depth-s$single.safetensors
synth "$model" flux2-klein-9b --depth "$depth" --single-depth "$single"
te=${FLUX2_PEER_TE:-$work/qwen_3_8b.safetensors}
synth "$te" qwen3-8b
ae=${FLUX2_PEER_AE:-$work/flux2-vae.safetensors}
synth "$ae" flux2-ae
bench_rounds flux2_transformer.py bf16 \
  "FLUX.2 [klein] 9B, $depth double + $single single blocks at full width, one 512x512 call (1024 image tokens, a 512-row text)" \
  "diffusers Flux2Transformer2DModel" \
  "$cli" bench --section generate --model "$model" --text-encoder "$te" --vae "$ae" --qwen-tokenizer "$tokenizer" --device cpu \
  --modes bf16,fp8-e4m3 --width 512 --height 512 --steps 2 --cfg 1 --repeat 1 --seed 1 --prompt "a lighthouse on a cliff at dusk" \
  --json --log-level warn

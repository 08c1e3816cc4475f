#!/usr/bin/env bash
# The peer benchmark (not run in CI): PyTorch 2.x + diffusers' UNet2DConditionModel (BF16, SDPA) against
# fp8studio-cli's step (BF16 and FP8 E4M3 storage) on the same synthetic SD1.5 checkpoint, alternated
# in one run: peer, ours, peer, ours, ... Prints a table of medians with ranges and ratios.
#
#   scripts/peer-bench/run.sh [--size 512] [--rounds 3] [--cli build-cuda/engine/fp8studio-cli] [--model F]
#
# PyTorch and diffusers come from pip (the package index only): into .venv-cuda/ when build-cuda.sh made
# it (it has PyTorch), else into .venv-peer/. The checkpoint is made by make-synthetic when not given.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
size=512 rounds=3 cli=build-cuda/engine/fp8studio-cli model=""
while (($#)); do
  case "$1" in
    --size) size=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --cli) cli=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    *) echo "peer-bench: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
venv=.venv-cuda
[ -x "$venv/bin/python" ] || venv=.venv-peer
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -c 'import torch, diffusers' 2>/dev/null ||
  "$venv/bin/pip" install --quiet --disable-pip-version-check torch diffusers
work=$(mktemp -d)
if [ -z "$model" ]; then
  model=$work/sd15.safetensors
  "$cli" make-synthetic --arch sd15 --out "$model" --log-level warn
fi
for r in $(seq "$rounds"); do
  echo "peer-bench: round $r/$rounds" >&2
  "$venv/bin/python" scripts/peer-bench/unet_bench.py --model "$model" --size "$size" --repeat 4 2>/dev/null > "$work/peer-$r.json"
  "$cli" bench --section generate --model "$model" --device cpu --modes bf16,fp8-e4m3 --width "$size" --height "$size" \
    --steps 4 --repeat 1 --seed 1 --prompt "a lighthouse on a cliff at dusk" --json --log-level warn > "$work/ours-$r.json"
done
"$venv/bin/python" - "$work" "$rounds" "$size" "$cli" <<'PY'
import json, statistics, subprocess, sys
work, rounds, size, cli = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
peer, ours = [], {}
info = {}
for r in range(1, rounds + 1):
    p = json.load(open(f"{work}/peer-{r}.json"))
    info = p
    peer += p["forward_ms"]
    for m in json.load(open(f"{work}/ours-{r}.json"))["generate"]:
        ours.setdefault(m["mode"], []).extend(m["step_ms"])
floor = {512: 1700, 256: 400}.get(size)
def row(name, v, ref):
    med = statistics.median(v)
    share = f"{100 * floor / med:.0f}%" if floor else "-"
    print(f"| {name} | {med / 1000:.2f} | {min(v) / 1000:.2f}-{max(v) / 1000:.2f} | {len(v)} | {med / ref:.2f} | {share} |")
ref = statistics.median(peer)
version = subprocess.run([cli, "--version"], capture_output=True, text=True).stdout.strip()
print(f"| {size}² UNet step, batch 2 (CFG) | median s | range s | n | ratio to PyTorch+diffusers | share of the {floor / 1000 if floor else '?'} s floor |")
print("|---|---|---|---|---|---|")
row(f"PyTorch {info['torch']} + diffusers, BF16 ({info['attention']})", peer, ref)
for mode, v in ours.items():
    row(f"FP8 Studio {mode} storage ({version})", v, ref)
print(f"\n{rounds} rounds alternating peer and FP8 Studio runs; diffusers: 4 timed forwards after a warm-up per "
      f"round; FP8 Studio: bench --repeat 1 (4 steps per mode after a warm-up run) per round.")
PY
rm -rf "$work"

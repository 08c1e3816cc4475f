#!/usr/bin/env bash
# The peer benchmark (not run in CI): PyTorch 2.x + diffusers' UNet2DConditionModel (BF16, SDPA) against
# fp8studio-cli's step (BF16 and FP8 E4M3 storage) on the same synthetic SD1.5 checkpoint, alternated
# in one run: peer, ours, peer, ours, ... (each --cli in turn: both builds side by side). Prints a table
# of medians with ranges and ratios.
#
#   scripts/peer-bench/run.sh [--size 512] [--rounds 3] [--cli build-cuda/engine/fp8studio-cli]... [--model F]
#
# PyTorch and diffusers come from pip (the package index only): into .venv-cuda/ when build-cuda.sh made
# it (it has PyTorch), else into .venv-peer/. The checkpoint is made by make-synthetic when not given.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
size=512 rounds=3 clis=() model=""
while (($#)); do
  case "$1" in
    --size) size=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --cli) clis+=("$2"); shift 2 ;;
    --model) model=$2; shift 2 ;;
    *) echo "peer-bench: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
((${#clis[@]})) || clis=(build-cuda/engine/fp8studio-cli)
venv=.venv-cuda
[ -x "$venv/bin/python" ] || venv=.venv-peer
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -c 'import torch, diffusers' 2>/dev/null ||
  "$venv/bin/pip" install --quiet --disable-pip-version-check torch diffusers
work=$(mktemp -d)
if [ -z "$model" ]; then
  model=$work/sd15.safetensors
  "${clis[0]}" make-synthetic --arch sd15 --out "$model" --log-level warn
fi
for r in $(seq "$rounds"); do
  echo "peer-bench: round $r/$rounds" >&2
  "$venv/bin/python" scripts/peer-bench/unet_bench.py --model "$model" --size "$size" --repeat 3 2>/dev/null > "$work/peer-$r.json"
  for i in "${!clis[@]}"; do
    "${clis[$i]}" bench --section generate --model "$model" --device cpu --modes bf16,fp8-e4m3 --width "$size" --height "$size" \
      --steps 3 --repeat 1 --seed 1 --prompt "a lighthouse on a cliff at dusk" --json --log-level warn > "$work/ours-$r-$i.json"
  done
done
"$venv/bin/python" - "$work" "$rounds" "$size" "${clis[@]}" <<'PY'
import json, statistics, sys
work, rounds, size, clis = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
peer, ours, paired = {}, {}, {}
info = {}
for r in range(1, rounds + 1):
    p = json.load(open(f"{work}/peer-{r}.json"))
    info = p
    for fmt, v in p["forward_ms"].items():
        peer.setdefault(fmt, []).extend(v)
    for i, cli in enumerate(clis):
        for m in json.load(open(f"{work}/ours-{r}-{i}.json"))["generate"]:
            ours.setdefault((cli, m["mode"]), []).extend(m["step_ms"])
            # this round's median over the same round's diffusers median: the machine's drift cancels
            paired.setdefault((cli, m["mode"]), []).append(
                statistics.median(m["step_ms"]) / statistics.median(p["forward_ms"]["nchw"]))
floor = {512: 1700, 256: 400}.get(size)
def row(name, v, ref):
    med = statistics.median(v)
    share = f"{100 * floor / med:.0f}%" if floor else "-"
    print(f"| {name} | {med / 1000:.2f} | {min(v) / 1000:.2f}-{max(v) / 1000:.2f} | {len(v)} | {med / ref:.2f} | {share} |")
ref = statistics.median(peer["nchw"])
print(f"| {size}² UNet step, batch 2 (CFG) | median s | range s | n | ratio to PyTorch+diffusers | share of the {floor / 1000 if floor else '?'} s floor |")
print("|---|---|---|---|---|---|")
for fmt, v in peer.items():
    row(f"PyTorch {info['torch']} + diffusers, BF16 ({info['attention']}, {fmt})", v, ref)
for (cli, mode), v in ours.items():  # the build folder says which LibTorch
    row(f"FP8 Studio {mode} storage ({cli})", v, ref)
for (cli, mode), v in paired.items():
    print(f"\nper-round ratio to diffusers (NCHW), {mode} storage ({cli}): median {statistics.median(v):.2f}, "
          f"range {min(v):.2f}-{max(v):.2f}", end="")
print(f"\n\n{rounds} rounds alternating peer and FP8 Studio runs; diffusers: 3 timed forwards per format after a "
      f"warm-up, formats alternated; FP8 Studio: bench --repeat 1 (3 steps per mode after a warm-up run) per build.")
PY
rm -rf "$work"

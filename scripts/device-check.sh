#!/usr/bin/env bash
# The GPU check, sized for the `device` tool's machine (H100/H200, 16 cores, its own PyTorch in
# /opt/torch/.venv, no package registry, 10 minutes a command, about 15 minutes in all). It builds
# fp8studio-cli alone against that machine's torch (no apt, no pip), runs `device-test` (the device
# probes: native float8 against the codec, the networks on the GPU against the CPU, one seed's image
# on both), then measures rows with `compare`: each row is written as JSON into the output folder
# the moment it is measured (rows.jsonl, and one file per row), a failing row is recorded and the
# next one runs, and a table of every row is printed at the end.
#
#   scripts/device-check.sh --quick   build, probes, SD1.5 and SDXL at 1024² (FP16, FP8 storage, FP8
#                                     compute): one command, about 6 minutes with a carried build cache
#   scripts/device-check.sh --rest    Flux.1 dev at 1024² (BF16 compute: FP16 streamed at 16 and 8 GB
#                                     budgets, FP8 storage, FP8 compute) and Z-Image Turbo (BF16, FP8):
#                                     the second command of the full check
#   scripts/device-check.sh           both, in one command
#   --device cpu                      the dry run here: the same plumbing at tiny sizes on the CPU
#   --out DIR                         where the rows go (default: $OUT, else a new temporary folder)
#   --bundle                          here: copy the libraries a bare GPU machine lacks (spdlog, fmt,
#                                     nlohmann-json, CLI11, libpng, utf8proc) and, from ../shared/reference,
#                                     the CLIP vocabulary and the T5 tokenizer (third-party data, never
#                                     committed) into .device-deps/, an ignored folder to carry with the run
#
# Each row: VRAM peaks (allocated and reserved by the caching allocator, and the device's used memory
# from cudaMemGetInfo), seconds per step (the median of the compare's steps), PSNR against the
# row set's first mode (FP16, or BF16 for Z-Image), and for streamed modes the GB streamed and the
# transfer wait per step. Synthetic files (random weights, the released shapes) are written FP8
# where a mode is FP8, so no load re-quantises, and each family's files are deleted when it is done.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
device=auto part=all bundle=0 out=${OUT:-}
while (($#)); do
  case "$1" in
    --device) device=$2; shift 2 ;;
    --quick) part=quick; shift ;;
    --rest) part=rest; shift ;;
    --out) out=$2; shift 2 ;;
    --bundle) bundle=1; shift ;;
    *) echo "device-check: unknown argument '$1' (--quick, --rest, --device D, --out DIR, --bundle)" >&2; exit 2 ;;
  esac
done
deps=$PWD/.device-deps
arch=$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)

if ((bundle)); then
  rm -rf "$deps"
  mkdir -p "$deps/include" "$deps/lib/$arch" "$deps/lib/pkgconfig"
  for d in spdlog fmt nlohmann CLI png.h pngconf.h pnglibconf.h libpng16 utf8proc.h zlib.h zconf.h; do
    cp -a "/usr/include/$d" "$deps/include/"
  done
  for l in libspdlog libfmt libpng16 libutf8proc libz; do
    cp -a /usr/lib/"$arch"/$l.so* "$deps/lib/$arch/"
  done
  # the CMake package configs at their own depth below the prefix (they find the prefix from there)
  mkdir -p "$deps/lib/$arch/cmake" "$deps/share/cmake"
  cp -a "/usr/lib/$arch/cmake/spdlog" "/usr/lib/$arch/cmake/fmt" "$deps/lib/$arch/cmake/"
  cp -a /usr/share/cmake/nlohmann_json /usr/share/cmake/CLI11 "$deps/share/cmake/"
  sed "s|^prefix=.*|prefix=$deps|; s|^libdir=.*|libdir=\${prefix}/lib/$arch|; s|^includedir=.*|includedir=\${prefix}/include|" \
    /usr/lib/"$arch"/pkgconfig/libutf8proc.pc > "$deps/lib/pkgconfig/libutf8proc.pc"
  ref=../shared/reference
  [ -f "$ref/clip/bpe_simple_vocab_16e6.txt.gz" ] && mkdir -p "$deps/clip" && cp "$ref/clip/bpe_simple_vocab_16e6.txt.gz" "$deps/clip/"
  [ -f "$ref/flux/t5_tokenizer/tokenizer.json" ] && mkdir -p "$deps/t5" && cp "$ref/flux/t5_tokenizer/tokenizer.json" "$deps/t5/"
  # the config files name the folder they were installed in: point them here (relocated below on use)
  echo "$deps" > "$deps/.origin"
  du -sh "$deps"
  exit 0
fi

if [ -d "$deps" ]; then  # carried from the machine that ran --bundle: relocate and use it
  old=$(cat "$deps/.origin")
  if [ "$old" != "$deps" ]; then
    sed -i "s|$old|$deps|g" "$deps/lib/pkgconfig/libutf8proc.pc"
    echo "$deps" > "$deps/.origin"
  fi
  export PKG_CONFIG_PATH="$deps/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export LD_LIBRARY_PATH="$deps/lib/$arch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export FP8S_EXTRA_PREFIX="$deps"
  export FP8S_SKIP_DEPS=1
  [ -f "$deps/clip/bpe_simple_vocab_16e6.txt.gz" ] && export FP8S_CLIP_VOCAB=${FP8S_CLIP_VOCAB:-$deps/clip/bpe_simple_vocab_16e6.txt.gz}
  [ -f "$deps/t5/tokenizer.json" ] && export FP8S_T5_TOKENIZER=${FP8S_T5_TOKENIZER:-$deps/t5/tokenizer.json}
  # explicit package folders, for a machine whose CMake does not search lib/<arch>/
  export FP8S_CMAKE_ARGS="-Dspdlog_DIR=$deps/lib/$arch/cmake/spdlog -Dfmt_DIR=$deps/lib/$arch/cmake/fmt ${FP8S_CMAKE_ARGS:-}"
fi

# Build the CLI alone into build-device/: this machine's PyTorch when it has one (the GPU machine),
# else the venv of build-cuda.sh. FP8S_CLI=PATH uses an existing fp8studio-cli instead.
cli=${FP8S_CLI:-}
if [ -z "$cli" ]; then
  # the machine's own PyTorch: python3's, else the device machine's /opt/torch/.venv
  if [ -z "${FP8S_PYTHON:-}" ] && python3 -c 'import torch' 2>/dev/null; then export FP8S_PYTHON=python3; fi
  if [ -z "${FP8S_PYTHON:-}" ] && [ "$device" != cpu ] && /opt/torch/.venv/bin/python -c 'import torch' 2>/dev/null; then
    export FP8S_PYTHON=/opt/torch/.venv/bin/python
  fi
  FP8S_BUILD_DIR=build-device FP8S_CMAKE_ARGS="-DFP8S_BUILD_GUI=OFF -DFP8S_BUILD_TESTS=OFF ${FP8S_CMAKE_ARGS:-}" \
    ./scripts/build-cuda.sh
  cli=$PWD/build-device/engine/fp8studio-cli
fi
libs=$(ldd "$cli" 2>&1) || true
grep -q libtorch_cuda <<<"$libs" || echo "device-check: warning: $cli does not link libtorch_cuda" >&2
[ -x "$cli" ] || { echo "device-check: no fp8studio-cli was built" >&2; exit 1; }

out=${out:-$(mktemp -d)}
mkdir -p "$out"
work=${FP8S_DEVICE_WORK:-$(mktemp -d)}
gpu=1
[ "$device" = cpu ] && gpu=0
py=python3
command -v "$py" > /dev/null || py=/opt/torch/.venv/bin/python
failed=0

# One row per mode of a compare: its JSON lines appended to rows.jsonl and written as files, and a
# line printed now. A compare that failed becomes one row saying so (its last error line).
record() {  # record SET COMPARE_JSON LOG
  "$py" - "$out" "$1" "$2" "$3" <<'PY'
import json, os, sys
out, name, path, log = sys.argv[1:5]
rows = []
try:
    c = json.load(open(path))
    for m in c["modes"]:
        r = {"set": name, "mode": m["mode"], "device": c.get("device", "")}
        if m.get("refused"):
            r["error"] = m["refused"]
        else:
            steps = m.get("step_ms") or [0]
            s = m["streaming"]
            r.update({
                "weights_gb": m["weight_bytes"]["total"] / 1e9,
                "vram_allocated_gb": m["peak_vram_bytes"] / 1e9,
                "vram_reserved_gb": m["peak_vram_reserved_bytes"] / 1e9,
                "vram_used_gb": m.get("peak_vram_used_bytes", 0) / 1e9,
                "peak_rss_gb": m["peak_rss_bytes"] / 1e9,
                "s_per_step": m["step_ms_median"] / 1e3,
                "s_per_step_min": min(steps) / 1e3, "s_per_step_max": max(steps) / 1e3,
                "psnr_db": m["psnr_db_vs_first"],
                "streamed_gb_per_step": s["streamed_bytes_per_step"] / 1e9,
                "transfer_wait_ms_per_step": s["transfer_wait_ms_per_step"],
            })
        rows.append(r)
except Exception as e:  # the compare did not finish: its error is the row
    lines = [l for l in open(log, errors="replace").read().splitlines() if l.strip()]
    rows.append({"set": name, "mode": "-", "error": (lines[-1] if lines else str(e))[:300]})
path = os.path.join(out, "rows.jsonl")
n = len(open(path).read().splitlines()) if os.path.exists(path) else 0
for r in rows:
    n += 1
    with open(path, "a") as f:  # each row on disk before the next is looked at
        f.write(json.dumps(r) + "\n")
    json.dump(r, open(os.path.join(out, f"row-{n:02d}.json"), "w"), indent=1)
    if "error" in r:
        print(f"row {n}: {name} {r['mode']}: FAILED: {r['error']}", flush=True)
    else:
        psnr = r["psnr_db"] if isinstance(r["psnr_db"], str) else f"{r['psnr_db']:.2f}"
        print(f"row {n}: {name} {r['mode']}: {r['s_per_step']:.3f} s/step, VRAM {r['vram_allocated_gb']:.2f}/"
              f"{r['vram_reserved_gb']:.2f}/{r['vram_used_gb']:.2f} GB, PSNR {psnr} dB", flush=True)
PY
}

# compare SET MODES STEPS SIZE COMPUTE MODEL-ARGS...: one compare, recorded; a failure is a row
measure() {
  local name=$1 modes=$2 steps=$3 size=$4 compute=$5
  shift 5
  local json=$out/compare-$name.json log=$out/compare-$name.log
  echo "== $name: $modes at ${size}² ($steps steps, $compute compute)"
  timeout "${FP8S_ROW_TIMEOUT:-480}" "$cli" compare "$@" --device "$device" --width "$size" --height "$size" --steps "$steps" \
    --seed 7 --prompt "a lighthouse on a cliff at dusk" --sampler euler --compute "$compute" --modes "$modes" \
    --no-unet-error --outdir "$work" --json > "$json" 2> "$log"
  local rc=$?
  if ((rc != 0)); then
    failed=$((failed + 1))
    rm -f "$json"
    ((rc == 124)) && echo "timed out after ${FP8S_ROW_TIMEOUT:-480} s" >> "$log"
    ((rc != 124)) && ! grep -q . "$log" && echo "compare exited with $rc" >> "$log"
  fi
  record "$name" "$json" "$log"
}

# The probes: device-test's lines as rows
echo "== probes"
"$cli" device-test --device "$device" > "$out/probes.log" 2>&1
probes_rc=$?
"$py" - "$out" "$probes_rc" <<'PY'
import json, os, sys
out, rc = sys.argv[1], int(sys.argv[2])
lines = [l for l in open(os.path.join(out, "probes.log"), errors="replace").read().splitlines()
         if l.startswith(("PASS", "FAIL", "SKIP"))]
with open(os.path.join(out, "rows.jsonl"), "a") as f:
    f.write(json.dumps({"set": "probes", "mode": "device-test", "rc": rc, "checks": lines}) + "\n")
for l in lines:
    print("  " + l)
print(f"probes: device-test exit {rc}")
PY

if [ "$part" != rest ]; then
  if ((gpu)); then
    sd_cases=("sd15 1024 10" "sdxl 1024 10") sd_modes=fp16,fp8-e4m3,fp8-e4m3+fp8-compute sd_compute=fp16
  else
    sd_cases=("tiny-sd1 64 2") sd_modes=fp16,fp8-e4m3,fp16@0 sd_compute=bf16
  fi
  for c in "${sd_cases[@]}"; do
    read -r arch_name size steps <<<"$c"
    ckpt=$work/$arch_name.safetensors
    # SD files are written in FP16 (the FP8 modes quantise once at load; compare never switches back)
    "$cli" make-synthetic --arch "$arch_name" --out "$ckpt" --log-level warn > /dev/null 2>&1 ||
      echo "device-check: make-synthetic --arch $arch_name failed" >&2
    measure "$arch_name" "$sd_modes" "$steps" "$size" "$sd_compute" --model "$ckpt" --log-level warn
    rm -f "$ckpt"
  done
fi

if [ "$part" != quick ]; then
  ref=../shared/reference
  if ((gpu)); then
    fdir=$work/flux
    mkdir -p "$fdir"
    # FP8 transformer and T5 as the FP8 modes read them; the FP16 modes upcast them at load
    for p in "flux-dev flux1-dev fp8-e4m3" "t5xxl t5xxl_fp8 fp8-e4m3" "clip-l clip_l fp16" "flux-ae ae bf16"; do
      read -r a f d <<<"$p"
      "$cli" make-synthetic --arch "$a" --dtype "$d" --out "$fdir/$f.safetensors" --log-level warn > /dev/null 2>&1 ||
        echo "device-check: make-synthetic --arch $a failed" >&2
    done
    measure flux-dev fp16@16G,fp16@8G,fp8-e4m3,fp8-e4m3+fp8-compute 4 1024 bf16 --model "$fdir/flux1-dev.safetensors" \
      --t5 "$fdir/t5xxl_fp8.safetensors" --clip-l "$fdir/clip_l.safetensors" --vae "$fdir/ae.safetensors" --log-level warn
    rm -rf "$fdir"
    zdir=$work/zimage
    mkdir -p "$zdir"
    for p in "zimage-turbo z_image_turbo fp8-e4m3" "qwen3-4b qwen_3_4b fp8-e4m3" "flux-ae ae bf16"; do
      read -r a f d <<<"$p"
      "$cli" make-synthetic --arch "$a" --dtype "$d" --out "$zdir/$f.safetensors" --log-level warn > /dev/null 2>&1 ||
        echo "device-check: make-synthetic --arch $a failed" >&2
    done
    measure zimage-turbo bf16,fp8-e4m3 8 1024 bf16 --model "$zdir/z_image_turbo.safetensors" \
      --text-encoder "$zdir/qwen_3_4b.safetensors" --vae "$zdir/ae.safetensors" --log-level warn
    rm -rf "$zdir"
  else  # the dry run: the tiny reference files, when present
    if [ -f "$ref/flux/tiny-flux-dev.safetensors" ]; then
      r=$ref/flux
      measure flux-dev fp16,fp16@0,fp8-e4m3 2 32 bf16 --model "$r/tiny-flux-dev.safetensors" --t5 "$r/tiny-t5xxl.safetensors" \
        --clip-l "$r/tiny-clip-l.safetensors" --vae "$r/tiny-ae.safetensors" --t5-tokenizer "$r/t5_tokenizer/tokenizer.json" \
        --t5-max-length 32 --log-level warn
    fi
    if [ -f "$ref/zimage/tiny-zimage-turbo.safetensors" ]; then
      r=$ref/zimage
      measure zimage-turbo bf16,fp8-e4m3 2 64 bf16 --model "$r/tiny-zimage-turbo.safetensors" \
        --text-encoder "$r/tiny-qwen3.safetensors" --vae "$r/tiny-ae.safetensors" --qwen-tokenizer "$r/qwen_tokenizer" --log-level warn
    fi
  fi
fi

echo
"$py" - "$out" "$gpu" <<'PY'
import json, os, sys
out, gpu = sys.argv[1], sys.argv[2] == "1"
rows = [json.loads(l) for l in open(os.path.join(out, "rows.jsonl"))]
device = next((r["device"] for r in rows if r.get("device")), "")
print(f"device-check on {device or 'this machine'}" + ("" if gpu else " (dry run: tiny sizes on the CPU)"))
print("| set | mode | weights GB | VRAM alloc / reserved / used GB | s/step median (min-max) | PSNR dB vs first | streamed GB/step | wait ms/step |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    if r["set"] == "probes":
        print(f"| probes | device-test | exit {r['rc']}: {sum(l.startswith('PASS') for l in r['checks'])} passed, "
              f"{sum(l.startswith('FAIL') for l in r['checks'])} failed | | | | | |")
        continue
    if "error" in r:
        print(f"| {r['set']} | {r['mode']} | did not run: {r['error']} | | | | | |")
        continue
    psnr = r["psnr_db"] if isinstance(r["psnr_db"], str) else f"{r['psnr_db']:.2f}"
    print(f"| {r['set']} | {r['mode']} | {r['weights_gb']:.2f} | {r['vram_allocated_gb']:.2f} / {r['vram_reserved_gb']:.2f} / "
          f"{r['vram_used_gb']:.2f} | {r['s_per_step']:.3f} ({r['s_per_step_min']:.3f}-{r['s_per_step_max']:.3f}) | {psnr} | "
          f"{r['streamed_gb_per_step']:.3f} | {r['transfer_wait_ms_per_step']:.0f} |")
print(f"\nrows: {os.path.join(out, 'rows.jsonl')}")
PY
rm -rf "$work"
((probes_rc == 0 && failed == 0))

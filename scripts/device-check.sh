#!/usr/bin/env bash
# The GPU check, in one call on a machine with an NVIDIA GPU (the `device` tool's): builds
# fp8studio-cli there against that machine's own PyTorch (its LibTorch, torch.utils.cmake_prefix_path),
# runs `device-test` (native float8 against the codec on the GPU, the networks on the GPU against the
# CPU, one seed's image on both, VRAM accounting), then prints one table for synthetic full-size
# SD1.5 at 512² and 1024² and SDXL at 1024²: FP16 vs FP8 E4M3 storage vs FP8 compute — weight
# bytes, peak VRAM, median step ms (modes alternated A B A B) and PSNR/SSIM against FP16; and the
# same rows for synthetic full-size Flux.1 dev at 1024² (transformer, T5-XXL, CLIP-L, autoencoder),
# once with every component on the GPU and once with T5-XXL on the CPU (--t5-cpu, ComfyUI's
# low-VRAM rule); then the streaming rows (a weight budget: Flux dev FP16 at 8 and 16 GB beside
# FP8 E4M3 resident, SDXL FP16 at 4 GB beside resident). The CPU half runs the Flux rows on the
# tiny reference Flux files when present.
#
#   scripts/device-check.sh                 on the GPU machine (about 6 minutes on an H200)
#   scripts/device-check.sh --device cpu    its CPU half here, at small sizes (ctest runs the quick part)
#   scripts/device-check.sh --bundle        here: copy the libraries a bare GPU machine lacks (spdlog,
#                                           fmt, nlohmann-json, CLI11, libpng, utf8proc) and, from
#                                           ../shared/reference, the CLIP vocabulary and the T5 tokenizer
#                                           (third-party data, never committed) into .device-deps/,
#                                           an ignored folder to carry with the run
#   --quick                                 only build + device-test, no table
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
device=auto quick=0 bundle=0
while (($#)); do
  case "$1" in
    --device) device=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --bundle) bundle=1; shift ;;
    *) echo "device-check: unknown argument '$1' (--device D, --quick, --bundle)" >&2; exit 2 ;;
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
  if [ -z "${FP8S_PYTHON:-}" ] && python3 -c 'import torch' 2>/dev/null; then export FP8S_PYTHON=python3; fi
  FP8S_BUILD_DIR=build-device FP8S_CMAKE_ARGS="-DFP8S_BUILD_GUI=OFF -DFP8S_BUILD_TESTS=OFF ${FP8S_CMAKE_ARGS:-}" \
    ./scripts/build-cuda.sh
  cli=$PWD/build-device/engine/fp8studio-cli
fi
libs=$(ldd "$cli" 2>&1) || true
grep -q libtorch_cuda <<<"$libs" || echo "device-check: warning: $cli does not link libtorch_cuda" >&2

"$cli" device-test --device "$device"
((quick)) && exit 0

work=${FP8S_DEVICE_WORK:-$(mktemp -d)}
gpu=1
[ "$device" = cpu ] && gpu=0
if ((gpu)); then
  cases=("sd15 512 20" "sd15 1024 10" "sdxl 1024 10")
  modes=fp16,fp8-e4m3,fp8-e4m3+fp8-compute
  repeat=3
else  # the CPU half: the same table at small sizes, without FP8 compute (it needs CUDA 8.9+)
  cases=("sd15 128 2")
  modes=fp16,fp8-e4m3
  repeat=2
fi
rows=()
for c in "${cases[@]}"; do
  read -r arch_name size steps <<<"$c"
  ckpt=$work/$arch_name.safetensors
  [ -f "$ckpt" ] || "$cli" make-synthetic --arch "$arch_name" --out "$ckpt" --log-level warn
  common=(--model "$ckpt" --device "$device" --width "$size" --height "$size" --prompt "a lighthouse on a cliff at dusk"
          --seed 7 --sampler euler --schedule normal --compute "$([ $gpu = 1 ] && echo fp16 || echo bf16)" --log-level warn)
  "$cli" compare "${common[@]}" --steps "$steps" --modes "$modes" --no-unet-error --outdir "$work" --json > "$work/compare-$arch_name-$size.json"
  "$cli" bench --section generate "${common[@]}" --steps 4 --modes "$modes" --repeat "$repeat" --json > "$work/bench-$arch_name-$size.json"
  rows+=("$arch_name $size")
done

# Flux.1 dev: full size on the GPU (all components on it, then T5-XXL on the CPU); the tiny
# reference files in the CPU half
flux=() flux_size=0 flux_steps=0
if ((gpu)); then
  fdir=$work/flux
  mkdir -p "$fdir/diffusion_models" "$fdir/text_encoders" "$fdir/vae"
  for part in "flux-dev diffusion_models/flux1-dev" "t5xxl text_encoders/t5xxl_fp16" "clip-l text_encoders/clip_l" "flux-ae vae/ae"; do
    read -r a f <<<"$part"
    [ -f "$fdir/$f.safetensors" ] || "$cli" make-synthetic --arch "$a" --out "$fdir/$f.safetensors" --log-level warn
  done
  flux=(--model "$fdir/diffusion_models/flux1-dev.safetensors") flux_size=1024 flux_steps=4
elif [ -f ../shared/reference/flux/tiny-flux-dev.safetensors ]; then
  r=../shared/reference/flux
  flux=(--model "$r/tiny-flux-dev.safetensors" --t5 "$r/tiny-t5xxl.safetensors" --clip-l "$r/tiny-clip-l.safetensors"
        --vae "$r/tiny-ae.safetensors" --t5-tokenizer "$r/t5_tokenizer/tokenizer.json" --t5-max-length 32)
  flux_size=32 flux_steps=2
fi
if ((${#flux[@]})); then
  for t5 in gpu cpu; do
    extra=() name=flux-dev
    if [ "$t5" = cpu ]; then
      ((gpu)) || continue  # on the CPU T5 is on the CPU anyway
      extra=(--t5-cpu) name=flux-dev-t5cpu
    fi
    common=("${flux[@]}" "${extra[@]}" --device "$device" --width "$flux_size" --height "$flux_size" --seed 7
            --prompt "a lighthouse on a cliff at dusk" --sampler euler --compute "$([ $gpu = 1 ] && echo fp16 || echo bf16)" --log-level warn)
    "$cli" compare "${common[@]}" --steps "$flux_steps" --modes "$modes" --no-unet-error --outdir "$work" --json > "$work/compare-$name-$flux_size.json"
    "$cli" bench --section generate "${common[@]}" --steps "$flux_steps" --modes "$modes" --repeat "$repeat" --json > "$work/bench-$name-$flux_size.json"
    rows+=("$name $flux_size")
  done
fi
# Streaming (the weight budget): Flux.1 dev in FP16 at 8 and 16 GB budgets beside FP8 E4M3
# resident, and SDXL in FP16 at 4 GB beside resident; on a GPU the streamed blocks wait in pinned
# host memory and copy in on a second stream. The CPU half: SD1.5 at 128² and the tiny Flux files,
# every block streamed from the file.
stream_rows=()
if ((gpu)); then
  stream_cases=("sdxl 1024 4 fp16,fp16@4G")
  ((${#flux[@]})) && stream_cases+=("flux-dev $flux_size $flux_steps fp8-e4m3,fp16@8G,fp16@16G")
else
  stream_cases=("sd15 128 2 fp16,fp16@0")
  ((${#flux[@]})) && stream_cases+=("flux-dev $flux_size $flux_steps fp16,fp16@0")
fi
for c in "${stream_cases[@]}"; do
  read -r name size steps smodes <<<"$c"
  model=(--model "$work/$name.safetensors")
  [ "$name" = flux-dev ] && model=("${flux[@]}")
  common=("${model[@]}" --device "$device" --width "$size" --height "$size" --seed 7 --prompt "a lighthouse on a cliff at dusk"
          --sampler euler --compute "$([ $gpu = 1 ] && echo fp16 || echo bf16)" --log-level warn)
  "$cli" compare "${common[@]}" --steps "$steps" --modes "$smodes" --no-unet-error --outdir "$work" --json > "$work/stream-compare-$name-$size.json"
  "$cli" bench --section generate "${common[@]}" --steps "$steps" --modes "$smodes" --repeat "$repeat" --json > "$work/stream-bench-$name-$size.json"
  stream_rows+=("$name $size")
done

python3 - "$work" "$gpu" "${rows[@]}" -- "${stream_rows[@]}" <<'PY'
import json, sys
work, gpu = sys.argv[1], sys.argv[2] == "1"
split = sys.argv.index("--")
rows, stream_rows = sys.argv[3:split], sys.argv[split + 1:]
mem = "peak VRAM MB" if gpu else "peak tracked MB"

def table(prefix, rows, header, cells):
    """One row per mode of each compare: `cells` gives a ran mode's columns after the mode's."""
    if not rows:
        return None
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    device = ""
    for row in rows:
        arch, size = row.split()
        c = json.load(open(f"{work}/{prefix}compare-{arch}-{size}.json"))
        b = {m["mode"]: m for m in json.load(open(f"{work}/{prefix}bench-{arch}-{size}.json"))["generate"]}
        device = c.get("device", "")
        for m in c["modes"]:
            if m.get("refused"):
                print(f"| {arch} | {size}² | {m['mode']} | did not run: {m['refused']} |" + " |" * (header.count("|") - 5))
                continue
            bm = b.get(m["mode"], {})
            step = f"{bm.get('median_ms', 0):.0f} ({bm.get('min_ms', 0):.0f}-{bm.get('max_ms', 0):.0f}) | {bm.get('ratio_to_first', 0):.3f}"
            peak = (m["peak_vram_bytes"] if gpu else m["peak_tracked_bytes"]) / 1e6
            print(f"| {arch} | {size}² | {m['mode']} | " + " | ".join(cells(m, step, peak)) + " |")
    return device

def quality(m, step, peak):
    psnr = m["psnr_db_vs_first"]
    return [f"{m['weight_bytes']['total']/1e6:.0f}", f"{peak:.0f}", step,
            psnr if isinstance(psnr, str) else f"{psnr:.2f}", f"{m['ssim_vs_first']:.4f}"]

def streaming(m, step, peak):
    s = m["streaming"]
    rate = s["streamed_bytes"] / s["read_ms"] / 1e6 if s["read_ms"] > 0 else 0
    return [f"{m['weight_bytes']['total']/1e6:.0f}", f"{s['streamed_bytes_per_step']/1e9:.2f}", f"{rate:.2f}",
            f"{s['transfer_wait_ms_per_step']:.0f}", step, f"{peak:.0f}", f"{m['peak_rss_bytes']/1e6:.0f}"]

device = table("", rows, f"| model | size | mode | weights MB | {mem} | median step ms (min-max) | ratio | PSNR dB | SSIM |", quality)
print(f"\n{device}; bench medians of 4-step runs (Flux: of its compare's steps), modes alternated A B A B after a warm-up")
if table("stream-", stream_rows, f"\n| model | size | mode | resident weights MB | streamed GB/step | GB/s | wait ms/step | "
         f"median step ms (min-max) | ratio | {mem} | peak RSS MB |", streaming) is not None:
    print("\nstreaming rows: a weight budget per mode (fp16@8G: 8 GB of resident weights, the rest streamed each step); "
          "GB/s is the reader's staging rate (from the file on the CPU, host-to-device copies on a GPU)")
PY

#!/usr/bin/env bash
# Regenerates the fuzz seed corpora under tests/fuzz/corpus/ from the project's own tools (the
# synthetic LoRA and checkpoint writers, the generator with the demo model) and small hand-made
# inputs. Usage: tests/fuzz/make_corpus.sh [path/to/fp8studio-cli]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cli="${1:-$here/../../build/engine/fp8studio-cli}"
out="$here/corpus"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
rm -rf "$out"
mkdir -p "$out"/{fuzz_safetensors,fuzz_fp8_metadata,fuzz_png_parameters,fuzz_prompt,fuzz_lora_keys,fuzz_cli_numbers,fuzz_ldm_config}

# safetensors: whole LoRA files for the tiny layouts (rank 1), the header of a tiny checkpoint,
# and hand-made edge cases (empty, scalar, FP8 with its scale, metadata only).
"$cli" make-synthetic-lora --arch tiny-sd1 --rank 1 --out "$tmp/lora-sd1.safetensors" --log-level warn
"$cli" make-synthetic-lora --arch tiny-sdxl --rank 1 --out "$tmp/lora-sdxl.safetensors" --log-level warn
"$cli" make-synthetic --arch tiny-sd1 --out "$tmp/tiny-sd1.safetensors" --log-level warn
python3 - "$tmp" "$out" <<'PY'
import json, struct, sys, zlib
tmp, out = sys.argv[1], sys.argv[2]
def st(header, data=b""):
    h = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + data
S = out + "/fuzz_safetensors/"
# 16 small tensors of a real tiny-sd1 checkpoint (real names, dtypes, metadata), offsets re-packed
raw = open(tmp + "/tiny-sd1.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
meta = hdr.pop("__metadata__", {})
small = sorted(hdr.items(), key=lambda kv: (kv[1]["data_offsets"][1] - kv[1]["data_offsets"][0], kv[0]))[:16]
packed, pos = {"__metadata__": meta}, 0
for k, v in small:
    size = v["data_offsets"][1] - v["data_offsets"][0]
    packed[k] = {"dtype": v["dtype"], "shape": v["shape"], "data_offsets": [pos, pos + size]}
    pos += size
open(S + "tiny-sd1-small-tensors", "wb").write(st(packed, bytes(pos)))
open(S + "empty", "wb").write(st({}))
open(S + "metadata-only", "wb").write(st({"__metadata__": {"format": "pt", "ss_network_dim": "8"}}))
open(S + "scalar", "wb").write(st({"a": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}}, b"\0\0\x80?"))
open(S + "fp8-with-scale", "wb").write(st({
    "w": {"dtype": "F8_E4M3", "shape": [2, 2], "data_offsets": [0, 4]},
    "w.scale_weight": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
    "b": {"dtype": "BF16", "shape": [2], "data_offsets": [12, 16]}}, bytes(16)))
open(S + "zero-size", "wb").write(st({"z": {"dtype": "F16", "shape": [0, 4], "data_offsets": [0, 0]}}))
# FP8 files of other tools (fuzz_fp8_metadata): comfy_quant per layer and in the header, ComfyUI's
# legacy scaled_fp8, and the refused MXFP8 / NVFP4 spellings
F = out + "/fuzz_fp8_metadata/"
conf = b'{"format":"float8_e4m3fn"}'
open(F + "comfy-quant", "wb").write(st({
    "m.l.weight": {"dtype": "F8_E4M3", "shape": [2, 2], "data_offsets": [0, 4]},
    "m.l.weight_scale": {"dtype": "F32", "shape": [], "data_offsets": [4, 8]},
    "m.l.comfy_quant": {"dtype": "U8", "shape": [len(conf)], "data_offsets": [8, 8 + len(conf)]},
    "m.l.input_scale": {"dtype": "BF16", "shape": [1], "data_offsets": [8 + len(conf), 10 + len(conf)]}},
    bytes(8) + conf + bytes(2)))
open(F + "comfy-legacy", "wb").write(st({
    "model.diffusion_model.scaled_fp8": {"dtype": "F8_E4M3", "shape": [0], "data_offsets": [0, 0]},
    "model.diffusion_model.a.weight": {"dtype": "F8_E4M3", "shape": [2, 2], "data_offsets": [0, 4]},
    "model.diffusion_model.a.scale_weight": {"dtype": "F32", "shape": [], "data_offsets": [4, 8]},
    "model.diffusion_model.a.scale_input": {"dtype": "F32", "shape": [], "data_offsets": [8, 12]}}, bytes(12)))
open(F + "header-metadata", "wb").write(st({
    "__metadata__": {"_quantization_metadata": json.dumps(
        {"format_version": "1.0", "layers": {"a": {"format": "float8_e5m2"}, "b": "float8_e4m3fn"}})},
    "a.weight": {"dtype": "F8_E5M2", "shape": [2, 1], "data_offsets": [0, 2]},
    "a.weight_scale": {"dtype": "F16", "shape": [2, 1], "data_offsets": [2, 6]}}, bytes(6)))
open(F + "mxfp8", "wb").write(st({
    "a.weight": {"dtype": "F8_E4M3", "shape": [1, 32], "data_offsets": [0, 32]},
    "a.weight_scale": {"dtype": "F8_E8M0", "shape": [1, 1], "data_offsets": [32, 33]}}, bytes(33)))
open(F + "nvfp4", "wb").write(st({
    "a.weight": {"dtype": "U8", "shape": [2, 8], "data_offsets": [0, 16]},
    "a.weight_scale_2": {"dtype": "F32", "shape": [], "data_offsets": [16, 20]}}, bytes(20)))
# LoRA key lists ("NAME DTYPE DIMS...") from the synthetic LoRA headers, and diffusers/PEFT names
for name in ("sd1", "sdxl"):
    raw = open(tmp + "/lora-%s.safetensors" % name, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n]); hdr.pop("__metadata__", None)
    lines = ["%s %s %s" % (k, v["dtype"], " ".join(map(str, v["shape"]))) for k, v in hdr.items()]
    open(out + "/fuzz_lora_keys/kohya-tiny-" + name, "w").write("\n".join(lines) + "\n")
    open(out + "/fuzz_lora_keys/kohya-tiny-%s-first" % name, "w").write("\n".join(lines[:6]) + "\n")
open(out + "/fuzz_lora_keys/peft", "w").write(
    "unet.down_blocks.0.attentions.0.proj_in.lora_A.weight F16 1 32\n"
    "unet.down_blocks.0.attentions.0.proj_in.lora_B.weight F16 32 1\n"
    "text_encoder.text_model.encoder.layers.0.self_attn.q_proj.lora.down.weight F32 2 32\n"
    "text_encoder.text_model.encoder.layers.0.self_attn.q_proj.lora.up.weight F32 32 2\n")
open(out + "/fuzz_lora_keys/loha", "w").write("lora_unet_conv_in.hada_w1_a F16 4 4\n")
# PNG: 8x8 RGB images with the parameters text before and after the image data, and interlaced
def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
def png(text, where="before", interlace=0, ctype=2):
    ihdr = struct.pack(">IIBBBBB", 8, 8, 8, ctype, 0, 0, interlace)
    bpp = {2: 3, 0: 1, 6: 4}[ctype]
    idat = chunk(b"IDAT", zlib.compress(b"".join(b"\0" + bytes(range(8 * bpp)) for _ in range(8))))
    txt = chunk(b"tEXt", b"parameters\0" + text.encode())
    body = chunk(b"IHDR", ihdr) + (txt + idat if where == "before" else idat + txt)
    return b"\x89PNG\r\n\x1a\n" + body + chunk(b"IEND", b"")
info = ("a red circle on a blue background\nNegative prompt: blurry\nSteps: 20, Sampler: Euler, "
        "Schedule type: Automatic, CFG scale: 5, Seed: 42, Size: 64x64, Model: demo, FP8 weight: fp8-e4m3, "
        "LoRA: \"style: 0.8\", LoRA mode: online, Weights: fp8-e4m3, Compute: fp32")
P = out + "/fuzz_png_parameters/"
open(P + "text-before", "wb").write(png(info))
open(P + "text-after", "wb").write(png(info, "after"))
open(P + "interlaced-grey", "wb").write(png("Steps: 3, Clip skip: 2", interlace=1, ctype=0))
open(P + "rgba", "wb").write(png("x\nSteps: 1000, Size: 4096x4096", ctype=6))
open(P + "infotext", "w").write(info)
PY
"$cli" generate --prompt "a small yellow star in the top left corner on a blue background" --steps 2 \
  --cfg 5 --sampler euler --schedule normal --seed 1 --outdir "$tmp/png" --log-level warn > /dev/null
cp "$tmp"/png/*.png "$out/fuzz_png_parameters/demo-image"

P="$out/fuzz_prompt"
printf '%s' "a (red:1.3) circle, [blue] background BREAK a ((small)) star" > "$P/emphasis"
printf '%s' "masterpiece <lora:style:0.8> <lora:detail:0.5:0.3> <hypernet:x:1> \\(escaped\\) (a:b:1.2" > "$P/tags"
printf '%s' "$(for i in $(seq 1 90); do printf 'red circle, '; done)" > "$P/long-commas"
printf '%s' "über café 日本語 🙂 &amp; &#x41; <lora:x:nan> (a:1e309)" > "$P/unicode"
printf '%s' "[[a|b]:c:0.5] ((( ))) ) ( ] [ :1.2) \\" > "$P/unbalanced"

C="$out/fuzz_cli_numbers"
printf '%s\n' --width 512 --height 768 --steps 20 --cfg 7.5 --seed 42 --sampler euler --schedule karras > "$C/typical"
printf '%s\n' --original-size 1024x1024 --target-size 2048x512 --crop 0,64 --weights fp8-e4m3 --fp8-scale channel > "$C/sdxl"
printf '%s\n' --lora style.safetensors:0.8 --lora "a:b.safetensors:-1.5" --lora x:nan --batch-size 64 --batch-count 3 > "$C/lora"
printf '%s\n' --width -8 --height 99999999999 --steps 1e3 --cfg inf --clip-skip 0 --crop 1,2,3 > "$C/bad"
# ldm.config: the configurations the synthetic writer stores in tiny SD 1.x and SDXL checkpoints
"$cli" make-synthetic --arch tiny-sdxl --out "$tmp/tiny-sdxl.safetensors" --log-level warn
python3 - "$tmp" "$out/fuzz_ldm_config" <<'PY'
import json, struct, sys
for arch in ("tiny-sd1", "tiny-sdxl"):
    raw = open(sys.argv[1] + "/" + arch + ".safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    open(sys.argv[2] + "/" + arch + ".json", "w").write(json.loads(raw[8:8 + n])["__metadata__"]["ldm.config"])
PY
echo "corpora written to $out"

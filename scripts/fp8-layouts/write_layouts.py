#!/usr/bin/env python3
"""Writes a 16-bit SD checkpoint again in the FP8 layouts other tools write, by their rules, with
numpy and ml_dtypes' float8 (independent of FP8 Studio's own codec and convert):

  plain-all     every float tensor of the UNet, text encoders and VAE as F8_E4M3 (a checkpoint
                saved from an FP8-typed model: biases, norms and embeddings too)
  plain-unet    the UNet's Linear/Conv2d weights F8_E4M3, everything else 16-bit
  comfy-legacy  ComfyUI's legacy scaled FP8: `model.diffusion_model.scaled_fp8` marker, the UNet's
                Linear weights F8_E4M3 with 0-d F32 `.scale_weight` = amax/448 and `.scale_input` = 1
  comfy-quant   ComfyUI's comfy_quant: the UNet's Linear weights F8_E4M3 with 0-d F32
                `.weight_scale` = amax/448 and `.comfy_quant` = {"format": "float8_e4m3fn"}

Usage: write_layouts.py SOURCE.safetensors OUTDIR [LAYOUT...]   (needs numpy and ml_dtypes)
"""
import json
import os
import struct
import sys

import ml_dtypes
import numpy as np

E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
NP = {"F16": np.float16, "BF16": np.dtype(ml_dtypes.bfloat16), "F32": np.float32}
UNET = "model.diffusion_model."
TEXT = ("cond_stage_model.", "conditioner.embedders.")
VAE = "first_stage_model."


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return header, 8 + n


def is_layer_weight(name, shape):
    """A Linear (2-D) or Conv2d (4-D) weight, not a norm's or an embedding's."""
    leaf = name.rsplit(".", 2)[-2] if name.count(".") >= 2 else ""
    if not name.endswith(".weight") or len(shape) not in (2, 4):
        return False
    if "norm" in leaf or leaf.startswith("ln_") or "embedding" in name:
        return False
    return ".time_embed." not in name and ".label_emb." not in name


def to_e4m3(values):
    # ComfyUI and PyTorch cast without saturating; SD weights are far inside +-448, clip anyway
    return np.clip(values.astype(np.float32), -448.0, 448.0).astype(E4M3)


def rule(layout, name, shape, dtype):
    """What the layout writes for one source tensor: 'copy', 'f8', or 'scaled'."""
    if dtype not in NP:
        return "copy"
    if layout == "plain-all":
        return "f8" if name.startswith((UNET, VAE) + TEXT) else "copy"
    if layout == "plain-unet":
        return "f8" if name.startswith(UNET) and is_layer_weight(name, shape) else "copy"
    if name.startswith(UNET) and is_layer_weight(name, shape) and len(shape) == 2:
        return "scaled"  # ComfyUI's scaled layouts quantise Linear layers
    return "copy"


def write(source, out, layout):
    header, data_start = read_header(source)
    meta = header.pop("__metadata__", {})
    names = sorted(header, key=lambda k: header[k]["data_offsets"][0])
    entries, pos = [], 0

    def add(name, dtype, shape, payload):
        nonlocal pos
        entries.append((name, dtype, shape, pos, payload))
        pos += len(payload)

    with open(source, "rb") as f:
        for name in names:
            h = header[name]
            begin, end = h["data_offsets"]
            f.seek(data_start + begin)
            raw = f.read(end - begin)
            what = rule(layout, name, h["shape"], h["dtype"])
            if what == "copy":
                add(name, h["dtype"], h["shape"], raw)
                continue
            values = np.frombuffer(raw, dtype=NP[h["dtype"]]).astype(np.float32)
            if what == "f8":
                add(name, "F8_E4M3", h["shape"], to_e4m3(values).tobytes())
                continue
            amax = float(np.abs(values).max()) if values.size else 0.0
            scale = np.float32(amax / 448.0 if amax > 0 else 1.0)
            add(name, "F8_E4M3", h["shape"], to_e4m3(values / scale).tobytes())
            layer = name[: -len(".weight")]
            if layout == "comfy-legacy":
                add(layer + ".scale_weight", "F32", [], np.float32(scale).tobytes())
                add(layer + ".scale_input", "F32", [], np.float32(1.0).tobytes())
            else:
                add(layer + ".weight_scale", "F32", [], np.float32(scale).tobytes())
                conf = json.dumps({"format": "float8_e4m3fn"}).encode()
                add(layer + ".comfy_quant", "U8", [len(conf)], conf)
    if layout == "comfy-legacy":
        add(UNET + "scaled_fp8", "F8_E4M3", [0], b"")
    out_header = {"__metadata__": meta} if meta else {}
    for name, dtype, shape, begin, payload in entries:
        out_header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [begin, begin + len(payload)]}
    blob = json.dumps(out_header, separators=(",", ":")).encode()
    blob += b" " * ((8 - len(blob) % 8) % 8)
    tmp = out + ".partial"
    with open(tmp, "wb") as g:
        g.write(struct.pack("<Q", len(blob)))
        g.write(blob)
        for entry in entries:
            g.write(entry[4])
    os.replace(tmp, out)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    source, outdir = sys.argv[1], sys.argv[2]
    layouts = sys.argv[3:] or ["plain-all", "plain-unet", "comfy-legacy", "comfy-quant"]
    os.makedirs(outdir, exist_ok=True)
    for layout in layouts:
        out = os.path.join(outdir, layout + ".safetensors")
        write(source, out, layout)
        print(out)


if __name__ == "__main__":
    main()

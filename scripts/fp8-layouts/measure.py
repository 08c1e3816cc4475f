#!/usr/bin/env python3
"""Generates one image from a 16-bit checkpoint and from each FP8 layout of it (write_layouts.py),
with `--weights auto`, and prints a Markdown table: the storage `auto` chose, weight bytes, peak
RSS, and PSNR of each image against the 16-bit source's.

Usage: measure.py CLI SOURCE.safetensors LAYOUT_DIR OUTDIR [generate flags...]
(needs numpy and Pillow)
"""
import json
import os
import subprocess
import sys

import numpy as np
from PIL import Image


def generate(cli, model, outdir, flags):
    cmd = [cli, "generate", "--model", model, "--outdir", outdir, "--json", "--log-level", "warn"] + flags
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit("%s: %s" % (model, run.stderr.strip().splitlines()[-1]))
    return json.loads(run.stdout)


def size(b):
    return "%.3f GB" % (b / 1e9) if b >= 1e9 else "%.1f MB" % (b / 1e6)


def psnr(a, b):
    x = np.asarray(Image.open(a).convert("RGB"), dtype=np.float64)
    y = np.asarray(Image.open(b).convert("RGB"), dtype=np.float64)
    mse = np.mean((x - y) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    cli, source, layout_dir, outdir = sys.argv[1:5]
    flags = sys.argv[5:]
    rows = []
    ref = generate(cli, source, os.path.join(outdir, "source"), flags)
    ref_png = ref["images"][0]["path"]
    rows.append(("16-bit source", ref, float("inf")))
    for name in ("plain-all", "plain-unet", "comfy-legacy", "comfy-quant"):
        path = os.path.join(layout_dir, name + ".safetensors")
        if not os.path.exists(path):
            continue
        r = generate(cli, path, os.path.join(outdir, name), flags)
        rows.append((name, r, psnr(r["images"][0]["path"], ref_png)))
    print("| layout | storage (auto) | weight bytes | peak RSS | PSNR vs 16-bit |")
    print("|---|---|---|---|---|")
    for name, r, db in rows:
        print("| %s | %s | %s | %s | %s |" % (
            name, r.get("storage", "?"), size(r["weight_bytes"]), size(r["rss_peak_bytes"]),
            "-" if db == float("inf") else "%.1f dB" % db))


if __name__ == "__main__":
    main()

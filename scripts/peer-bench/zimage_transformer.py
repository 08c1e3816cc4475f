"""Times BF16 forwards of diffusers' ZImageTransformer2DModel built for a Z-Image transformer file in
the original layout (full width, any depth: the layer count is read off its keys), its weights
converted by diffusers' own single-file conversion, on one 512x512 call's inputs (a 16x64x64
latent, 1024 image tokens, and a 32-row caption). Prints one JSON object: the forward times in ms."""
import argparse
import json
import os
import re
import time

import torch
from diffusers import ZImageTransformer2DModel
from diffusers.loaders.single_file_utils import convert_z_image_transformer_checkpoint_to_diffusers
from safetensors import safe_open


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--cap", type=int, default=32)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    a = p.parse_args()
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    torch.set_num_threads(os.cpu_count())
    with safe_open(a.model, "pt") as f:
        ckpt = {k: f.get_tensor(k) for k in f.keys()}
    layers = 1 + max(int(m.group(1)) for k in ckpt for m in [re.match(r"layers\.(\d+)\.", k)] if m)
    refiners = 1 + max(int(m.group(1)) for k in ckpt for m in [re.match(r"noise_refiner\.(\d+)\.", k)] if m)
    with torch.device("meta"):
        model = ZImageTransformer2DModel(n_layers=layers, n_refiner_layers=refiners)
    state = convert_z_image_transformer_checkpoint_to_diffusers(ckpt)
    model.load_state_dict(state, strict=True, assign=True)
    del ckpt, state
    model = model.to(dtype).eval()
    g = torch.Generator().manual_seed(1)
    h = w = a.size // 8
    x = torch.randn(16, 1, h, w, generator=g).to(dtype)
    cap = torch.randn(a.cap, 2560, generator=g).to(dtype)
    t = torch.full((1,), 0.5, dtype=dtype)
    times = []
    with torch.inference_mode():
        for i in range(a.repeat + 1):  # the first is a warm-up
            start = time.perf_counter()
            model([x], t, [cap], return_dict=False)
            if i:
                times.append((time.perf_counter() - start) * 1000)
    print(json.dumps({"forward_ms": times, "dtype": a.dtype, "torch": torch.__version__, "layers": layers, "refiners": refiners,
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()

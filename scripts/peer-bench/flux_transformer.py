"""Times BF16 forwards of diffusers' FluxTransformer2DModel built for a BFL-layout transformer file
(full width, any depth: the block counts are read off its keys), its weights converted by diffusers'
own single-file conversion, on one 512x512 call's inputs (1024 image tokens, 512 T5 tokens, as
Flux dev). Prints one JSON object: the forward times in ms."""
import argparse
import json
import os
import re
import time

import torch
from diffusers import FluxTransformer2DModel
from diffusers.loaders.single_file_utils import convert_flux_transformer_checkpoint_to_diffusers
from safetensors import safe_open


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--txt", type=int, default=512)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    a = p.parse_args()
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    torch.set_num_threads(os.cpu_count())
    with safe_open(a.model, "pt") as f:
        ckpt = {k: f.get_tensor(k) for k in f.keys()}
    double = 1 + max(int(m.group(1)) for k in ckpt for m in [re.match(r"double_blocks\.(\d+)\.", k)] if m)
    single = 1 + max(int(m.group(1)) for k in ckpt for m in [re.match(r"single_blocks\.(\d+)\.", k)] if m)
    guidance = "guidance_in.in_layer.weight" in ckpt
    with torch.device("meta"):
        model = FluxTransformer2DModel(patch_size=1, in_channels=64, num_layers=double, num_single_layers=single,
                                       attention_head_dim=128, num_attention_heads=24, joint_attention_dim=4096,
                                       pooled_projection_dim=768, guidance_embeds=guidance, axes_dims_rope=(16, 56, 56))
    state = convert_flux_transformer_checkpoint_to_diffusers(ckpt)
    model.load_state_dict(state, strict=True, assign=True)
    del ckpt, state
    model = model.to(dtype).eval()
    g = torch.Generator().manual_seed(1)
    h = w = a.size // 16
    img = torch.randn(1, h * w, 64, generator=g).to(dtype)
    txt = torch.randn(1, a.txt, 4096, generator=g).to(dtype)
    y = torch.randn(1, 768, generator=g).to(dtype)
    img_ids = torch.zeros(h, w, 3)
    img_ids[..., 1] += torch.arange(h)[:, None]
    img_ids[..., 2] += torch.arange(w)[None, :]
    img_ids = img_ids.reshape(-1, 3)
    txt_ids = torch.zeros(a.txt, 3)
    t = torch.full((1,), 0.5, dtype=dtype)
    gd = torch.full((1,), 3.5, dtype=dtype) if guidance else None
    times = []
    with torch.inference_mode():
        for i in range(a.repeat + 1):  # the first is a warm-up
            start = time.perf_counter()
            model(hidden_states=img, encoder_hidden_states=txt, pooled_projections=y, timestep=t, img_ids=img_ids,
                  txt_ids=txt_ids, guidance=gd, return_dict=False)
            if i:
                times.append((time.perf_counter() - start) * 1000)
    print(json.dumps({"forward_ms": times, "dtype": a.dtype, "torch": torch.__version__, "double": double, "single": single,
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()

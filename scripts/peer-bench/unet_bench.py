"""Times batch-2 BF16 forwards of diffusers' UNet2DConditionModel (SDPA attention) built from the
SD1.5 configuration below, with the UNet weights of an ldm-layout checkpoint converted as diffusers'
single-file loader converts them: as diffusers runs by default (NCHW), and with
`unet.to(memory_format=torch.channels_last)` (what a tuned CPU user would add), alternated forward by
forward. Prints one JSON object: the forward times in ms per memory format."""
import argparse
import json
import os
import time

import torch
from diffusers import UNet2DConditionModel
from diffusers.loaders.single_file_utils import convert_ldm_unet_checkpoint
from safetensors import safe_open

# SD 1.5's UNet (CompVis v1-inference.yaml, as diffusers' runwayml/stable-diffusion-v1-5 unet/config.json)
SD15 = dict(
    sample_size=64, in_channels=4, out_channels=4, layers_per_block=2,
    block_out_channels=(320, 640, 1280, 1280),
    down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
    up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
    cross_attention_dim=768, attention_head_dim=8, norm_num_groups=32, act_fn="silu",
    flip_sin_to_cos=True, freq_shift=0, center_input_sample=False, downsample_padding=1,
    mid_block_scale_factor=1, norm_eps=1e-5,
)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--repeat", type=int, default=4)
    a = p.parse_args()
    torch.set_num_threads(os.cpu_count())
    with safe_open(a.model, "pt") as f:
        ckpt = {k: f.get_tensor(k) for k in f.keys() if k.startswith("model.diffusion_model.")}
    unet = UNet2DConditionModel(**SD15)
    state = convert_ldm_unet_checkpoint(ckpt, dict(unet.config))
    missing, unexpected = unet.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise SystemExit(f"key conversion: {len(missing)} missing, {len(unexpected)} unexpected")
    del ckpt, state
    unet = unet.to(torch.bfloat16).eval()
    g = torch.Generator().manual_seed(1)
    h = a.size // 8
    x = torch.randn(2, 4, h, h, generator=g).to(torch.bfloat16)
    ctx = torch.randn(2, 77, 768, generator=g).to(torch.bfloat16)
    t = torch.full((2,), 500.0)
    times = {"nchw": [], "channels_last": []}
    formats = {"nchw": torch.contiguous_format, "channels_last": torch.channels_last}
    with torch.inference_mode():
        for _ in range(a.repeat + 1):  # the first forward of each format is a warm-up
            for name, fmt in formats.items():
                unet.to(memory_format=fmt)
                xi = x.contiguous(memory_format=fmt)
                start = time.perf_counter()
                unet(xi, t, ctx)
                times[name].append((time.perf_counter() - start) * 1000)
    print(json.dumps({"torch": torch.__version__, "attention": type(unet.attn_processors[next(iter(unet.attn_processors))]).__name__,
                      "size": a.size, "forward_ms": {k: v[1:] for k, v in times.items()}}))


if __name__ == "__main__":
    main()

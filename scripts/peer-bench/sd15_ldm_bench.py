"""Times one SD1.5 CFG step (a batch-2 UNet forward) of CompVis ldm's UNetModel, built from
v1-inference.yaml's unet_config below, with the UNet weights of an ldm-layout checkpoint (the keys as
they are: model.diffusion_model.*), in FP32 and in BF16 (BF16 weights under CPU autocast, as a
PyTorch user runs BF16 on a CPU; GroupNorm32's weights FP32, as it normalises in FP32), alternated forward by forward. ldm's attention computes in the
input's type, as CompVis' original does (ATTN_PRECISION other than fp32: no FP32 upcast of q and k).
Prints one JSON object: the forward times in ms per compute type.

ldm comes from PyPI's stable-diffusion-sdkit (Stability's ldm package, installed without its
dependencies by sd15_ldm_run.sh); it is never part of this repository."""
import argparse
import json
import os
import time

os.environ.setdefault("ATTN_PRECISION", "none")

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from ldm.modules.diffusionmodules.openaimodel import UNetModel  # noqa: E402
from ldm.modules.diffusionmodules.util import GroupNorm32  # noqa: E402

# CompVis stable-diffusion configs/stable-diffusion/v1-inference.yaml, model.params.unet_config.params
SD15 = dict(image_size=32, in_channels=4, out_channels=4, model_channels=320, attention_resolutions=[4, 2, 1],
            num_res_blocks=2, channel_mult=[1, 2, 4, 4], num_heads=8, use_spatial_transformer=True,
            transformer_depth=1, context_dim=768, use_checkpoint=False, legacy=False)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--dtypes", default="fp32,bf16")
    a = p.parse_args()
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    prefix = "model.diffusion_model."
    with safe_open(a.model, "pt") as f:
        state = {k[len(prefix):]: f.get_tensor(k).float() for k in f.keys() if k.startswith(prefix)}
    unet = UNetModel(**SD15)
    unet.load_state_dict(state, strict=True)
    del state
    unet.eval()
    g = torch.Generator().manual_seed(1)
    h = a.size // 8
    x = torch.randn(2, 4, h, h, generator=g)
    ctx = torch.randn(2, 77, 768, generator=g)
    t = torch.full((2,), 500, dtype=torch.long)
    dtypes = a.dtypes.split(",")
    # one model per type, so that the alternation converts nothing between forwards
    models = {"fp32": unet}
    if "bf16" in dtypes:
        models["bf16"] = UNetModel(**SD15).eval()
        models["bf16"].load_state_dict(unet.state_dict())
        models["bf16"].to(torch.bfloat16)
        models["bf16"].dtype = torch.bfloat16
        for m in models["bf16"].modules():  # ldm's GroupNorm32 normalises in FP32: its weights stay FP32
            if isinstance(m, GroupNorm32):
                m.float()
    times = {d: [] for d in dtypes}
    with torch.inference_mode():
        for _ in range(a.repeat + 1):  # the first forward of each type is a warm-up
            for d in dtypes:
                start = time.perf_counter()
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=d == "bf16"):
                    out = models[d](x, t, ctx)
                times[d].append((time.perf_counter() - start) * 1000)
                assert torch.isfinite(out.float()).all()
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "size": a.size,
                      "forward_ms": {d: v[1:] for d, v in times.items()}}))


if __name__ == "__main__":
    main()

"""Times BF16 forwards of diffusers' FluxTransformer2DModel built for a BFL-layout transformer file
(full width, any depth: the block counts are read off its keys), its weights converted by diffusers'
own single-file conversion, on one 512x512 call's inputs (1024 image tokens, 512 T5 tokens, as
Flux dev). Prints one JSON object: the forward times in ms."""
import json

import torch
from diffusers import FluxTransformer2DModel
from diffusers.loaders.single_file_utils import convert_flux_transformer_checkpoint_to_diffusers

from peer_common import assigned, count, load, parse_args, timed


def main():
    a = parse_args([("--txt", int, 512)])
    dtype = a.torch_dtype
    ckpt = load(a.model)
    double, single = count(ckpt, "double_blocks"), count(ckpt, "single_blocks")
    guidance = "guidance_in.in_layer.weight" in ckpt
    with torch.device("meta"):
        model = FluxTransformer2DModel(patch_size=1, in_channels=64, num_layers=double, num_single_layers=single,
                                       attention_head_dim=128, num_attention_heads=24, joint_attention_dim=4096,
                                       pooled_projection_dim=768, guidance_embeds=guidance, axes_dims_rope=(16, 56, 56))
    model = assigned(model, convert_flux_transformer_checkpoint_to_diffusers(ckpt), dtype)
    del ckpt
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
    times = timed(lambda: model(hidden_states=img, encoder_hidden_states=txt, pooled_projections=y, timestep=t, img_ids=img_ids,
                                txt_ids=txt_ids, guidance=gd, return_dict=False), a.repeat)
    print(json.dumps({"forward_ms": times, "dtype": a.dtype, "torch": torch.__version__, "double": double, "single": single,
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()

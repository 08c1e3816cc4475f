"""Times forwards of diffusers' Flux2Transformer2DModel built for a FLUX.2 transformer file in BFL's
layout (full width, any depth: the block counts are read off its keys), its weights converted by
diffusers' own single-file conversion, on one 512x512 call's inputs (1024 image tokens of 128
channels, a 512-row text of the file's context width, 4-axis ids as Flux2KleinPipeline makes them).
Prints one JSON object: the forward times in ms."""
import json

import torch
from diffusers import Flux2Transformer2DModel
from diffusers.loaders.single_file_utils import convert_flux2_transformer_checkpoint_to_diffusers

from peer_common import assigned, count, load, parse_args, timed


def main():
    a = parse_args([("--txt", int, 512)])
    dtype = a.torch_dtype
    ckpt = load(a.model)
    hidden, context = ckpt["img_in.weight"].shape[0], ckpt["txt_in.weight"].shape[1]
    head_dim = ckpt["single_blocks.0.norm.query_norm.scale"].shape[0]
    with torch.device("meta"):
        model = Flux2Transformer2DModel(num_layers=count(ckpt, "double_blocks"), num_single_layers=count(ckpt, "single_blocks"),
                                        attention_head_dim=head_dim, num_attention_heads=hidden // head_dim,
                                        joint_attention_dim=context, guidance_embeds="guidance_in.in_layer.weight" in ckpt)
    model = assigned(model, convert_flux2_transformer_checkpoint_to_diffusers(ckpt), dtype)
    del ckpt
    g = torch.Generator().manual_seed(1)
    side = a.size // 16
    x = torch.randn(1, side * side, 128, generator=g).to(dtype)
    txt = torch.randn(1, a.txt, context, generator=g).to(dtype)
    rows, cols = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    img_ids = torch.stack([torch.zeros_like(rows), rows, cols, torch.zeros_like(rows)], -1).reshape(1, -1, 4)
    txt_ids = torch.zeros(1, a.txt, 4, dtype=torch.long)
    txt_ids[..., 3] = torch.arange(a.txt)
    t = torch.full((1,), 0.5, dtype=dtype)
    times = timed(lambda: model(hidden_states=x, encoder_hidden_states=txt, timestep=t, img_ids=img_ids, txt_ids=txt_ids,
                                guidance=None, return_dict=False), a.repeat)
    print(json.dumps({"forward_ms": times, "dtype": a.dtype, "torch": torch.__version__, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()

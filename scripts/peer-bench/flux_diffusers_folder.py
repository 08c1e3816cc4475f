"""Writes a diffusers model folder (FluxPipeline's layout: transformer/, text_encoder/,
text_encoder_2/, vae/, tokenizer/, tokenizer_2/, model_index.json) from Flux.1 files in BFL's
layout, the transformer through diffusers' own single-file conversion
(convert_flux_transformer_checkpoint_to_diffusers) and FluxTransformer2DModel.save_pretrained
(sharded: --shard). The text encoders and the autoencoder are copied as they are (their folder
names are tested elsewhere: the autoencoder's diffusers names by zimage_diffusers_folder.py).
Used to check that FP8 Studio reads a transformer folder that diffusers itself wrote."""
import inspect
import json
import os
import shutil

import torch
from diffusers import FluxTransformer2DModel
import diffusers.loaders.single_file_utils as single_file_utils

from peer_common import count, folder_args, with_config


def flux_conversion():
    """diffusers' conversion with the width of the file instead of Flux.1's 3072, which it fixes."""
    source = inspect.getsource(single_file_utils.convert_flux_transformer_checkpoint_to_diffusers)
    assert "inner_dim = 3072" in source
    namespace = dict(vars(single_file_utils))
    exec(source.replace("inner_dim = 3072", "inner_dim = kwargs['inner_dim']"), namespace)
    return namespace["convert_flux_transformer_checkpoint_to_diffusers"]


def main():
    a = folder_args(("--t5", None), ("--clip-l", None), ("--vae", None),
                    ("--clip-vocab", "a folder with vocab.json and merges.txt"),
                    ("--t5-tokenizer", "a folder with tokenizer.json"))
    ckpt, meta = with_config(a.transformer, "flux.config")
    depth, single = count(ckpt, "double_blocks"), count(ckpt, "single_blocks")
    hidden, in_channels = ckpt["img_in.weight"].shape
    head_dim = ckpt["double_blocks.0.img_attn.norm.query_norm.scale"].shape[0]
    with torch.device("meta"):
        model = FluxTransformer2DModel(patch_size=1, in_channels=in_channels, num_layers=depth, num_single_layers=single,
                                       attention_head_dim=head_dim, num_attention_heads=hidden // head_dim,
                                       joint_attention_dim=ckpt["txt_in.weight"].shape[1],
                                       pooled_projection_dim=ckpt["vector_in.in_layer.weight"].shape[1],
                                       guidance_embeds="guidance_in.in_layer.weight" in ckpt,
                                       axes_dims_rope=tuple(meta.get("axes_dim", [16, 56, 56])))
    model.load_state_dict(flux_conversion()(ckpt, inner_dim=hidden), strict=True, assign=True)
    model.save_pretrained(os.path.join(a.out, "transformer"), max_shard_size=a.shard)
    for src, sub, name in [(a.clip_l, "text_encoder", "model.safetensors"), (a.t5, "text_encoder_2", "model.safetensors"),
                           (a.vae, "vae", "diffusion_pytorch_model.safetensors")]:
        os.makedirs(os.path.join(a.out, sub), exist_ok=True)
        shutil.copyfile(src, os.path.join(a.out, sub, name))
    for src, sub in [(a.clip_vocab, "tokenizer"), (a.t5_tokenizer, "tokenizer_2")]:
        shutil.copytree(src, os.path.join(a.out, sub), dirs_exist_ok=True)
    with open(os.path.join(a.out, "model_index.json"), "w") as f:
        json.dump({"_class_name": "FluxPipeline", "transformer": ["diffusers", "FluxTransformer2DModel"]}, f, indent=2)
    print(os.path.join(a.out, "transformer"), sorted(os.listdir(os.path.join(a.out, "transformer")))[:4], "...")


if __name__ == "__main__":
    main()

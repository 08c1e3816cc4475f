"""Writes a diffusers model folder (ZImagePipeline's layout: transformer/, text_encoder/, vae/,
tokenizer/, model_index.json) from Z-Image files in the original layouts, with diffusers' and
transformers' own code: the transformer through diffusers' single-file conversion and
save_pretrained (sharded: --shard), the autoencoder through convert_ldm_vae_checkpoint into
AutoencoderKL, Qwen3 through transformers' save_pretrained. Used to check that FP8 Studio reads a
folder that diffusers itself wrote (the tests build theirs from the documented names)."""
import json
import os
import shutil

import torch
from diffusers import AutoencoderKL, ZImageTransformer2DModel
from diffusers.loaders.single_file_utils import (convert_ldm_vae_checkpoint,
                                                 convert_z_image_transformer_checkpoint_to_diffusers)
from safetensors.torch import save_file

from peer_common import count, folder_args, with_config


def main():
    a = folder_args(("--text-encoder", None), ("--vae", None), ("--tokenizer", "a folder with tokenizer.json"))
    ckpt, meta = with_config(a.transformer, "zimage.config")
    layers, refiners = count(ckpt, "layers"), count(ckpt, "noise_refiner")
    dim = ckpt["cap_embedder.1.weight"].shape[0]
    cap = ckpt["cap_embedder.1.weight"].shape[1]
    heads = dim // ckpt["layers.0.attention.q_norm.weight"].shape[0]
    with torch.device("meta"):
        model = ZImageTransformer2DModel(n_layers=layers, n_refiner_layers=refiners, dim=dim, n_heads=heads,
                                         n_kv_heads=heads, cap_feat_dim=cap,
                                         axes_dims=meta.get("axes_dims", [32, 48, 48]),
                                         axes_lens=meta.get("axes_lens", [1536, 512, 512]),
                                         rope_theta=meta.get("rope_theta", 256.0), t_scale=meta.get("t_scale", 1000.0),
                                         norm_eps=meta.get("norm_eps", 1e-5))
    model.load_state_dict(convert_z_image_transformer_checkpoint_to_diffusers(ckpt), strict=True, assign=True)
    model.save_pretrained(os.path.join(a.out, "transformer"), max_shard_size=a.shard)
    vae_sd, ae_config = with_config(a.vae, "ae.config")
    ch = vae_sd["encoder.conv_in.weight"].shape[0]
    mults = sorted({int(k.split(".")[2]) for k in vae_sd if k.startswith("encoder.down.")})
    block_out = [vae_sd[f"encoder.down.{i}.block.0.conv1.weight"].shape[0] for i in mults]
    zc = vae_sd["decoder.conv_in.weight"].shape[1]
    per_block = len({k.split(".")[4] for k in vae_sd if k.startswith("encoder.down.0.block.")})
    with torch.device("meta"):
        vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=zc,
                            down_block_types=["DownEncoderBlock2D"] * len(block_out),
                            up_block_types=["UpDecoderBlock2D"] * len(block_out), block_out_channels=block_out,
                            layers_per_block=per_block, norm_num_groups=min(32, ch), use_quant_conv=False,
                            use_post_quant_conv=False, scaling_factor=ae_config.get("scale_factor", 0.3611),
                            shift_factor=ae_config.get("shift_factor", 0.1159))
    vae.load_state_dict(convert_ldm_vae_checkpoint(vae_sd, vae.config), strict=True, assign=True)
    vae.save_pretrained(os.path.join(a.out, "vae"))
    te, te_config = with_config(a.text_encoder, "qwen3.config")
    os.makedirs(os.path.join(a.out, "text_encoder"), exist_ok=True)
    # transformers' shard names and index, written directly (the file holds the encoder's own names)
    names = sorted(te)
    half = len(names) // 2
    weight_map = {}
    for i, part in enumerate([names[:half], names[half:]]):
        shard = f"model-{i + 1:05d}-of-00002.safetensors"
        save_file({k: te[k].contiguous() for k in part}, os.path.join(a.out, "text_encoder", shard), {"format": "pt"})
        weight_map.update({k: shard for k in part})
    if te_config:  # transformers' Qwen3Config names, as save_pretrained writes them
        with open(os.path.join(a.out, "text_encoder", "config.json"), "w") as f:
            json.dump(dict(te_config, architectures=["Qwen3Model"], model_type="qwen3"), f, indent=2)
    with open(os.path.join(a.out, "text_encoder", "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=2)
    shutil.copytree(a.tokenizer, os.path.join(a.out, "tokenizer"), dirs_exist_ok=True)
    with open(os.path.join(a.out, "model_index.json"), "w") as f:
        json.dump({"_class_name": "ZImagePipeline", "transformer": ["diffusers", "ZImageTransformer2DModel"],
                   "text_encoder": ["transformers", "Qwen3Model"], "vae": ["diffusers", "AutoencoderKL"],
                   "tokenizer": ["transformers", "Qwen2Tokenizer"],
                   "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"]}, f, indent=2)


if __name__ == "__main__":
    main()

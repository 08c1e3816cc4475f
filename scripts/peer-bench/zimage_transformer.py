"""Times BF16 forwards of diffusers' ZImageTransformer2DModel built for a Z-Image transformer file in
the original layout (full width, any depth: the layer count is read off its keys), its weights
converted by diffusers' own single-file conversion, on one 512x512 call's inputs (a 16x64x64
latent, 1024 image tokens, and a 32-row caption). Prints one JSON object: the forward times in ms."""
import json

import torch
from diffusers import ZImageTransformer2DModel
from diffusers.loaders.single_file_utils import convert_z_image_transformer_checkpoint_to_diffusers

from peer_common import assigned, count, load, parse_args, timed


def main():
    a = parse_args([("--cap", int, 32)])
    dtype = a.torch_dtype
    ckpt = load(a.model)
    layers, refiners = count(ckpt, "layers"), count(ckpt, "noise_refiner")
    with torch.device("meta"):
        model = ZImageTransformer2DModel(n_layers=layers, n_refiner_layers=refiners)
    model = assigned(model, convert_z_image_transformer_checkpoint_to_diffusers(ckpt), dtype)
    del ckpt
    g = torch.Generator().manual_seed(1)
    h = w = a.size // 8
    x = torch.randn(16, 1, h, w, generator=g).to(dtype)
    cap = torch.randn(a.cap, 2560, generator=g).to(dtype)
    t = torch.full((1,), 0.5, dtype=dtype)
    times = timed(lambda: model([x], t, [cap], return_dict=False), a.repeat)
    print(json.dumps({"forward_ms": times, "dtype": a.dtype, "torch": torch.__version__, "layers": layers, "refiners": refiners,
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()

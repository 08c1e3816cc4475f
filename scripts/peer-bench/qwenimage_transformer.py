"""Times forwards of diffusers' QwenImageTransformer2DModel built for a Qwen-Image transformer file
(diffusers' names, as ComfyUI's diffusion_models/ file holds them: full width, any depth, the block
count read off its keys; diffusers' single-file mapping for this class is the identity), on one
512x512 call's inputs (a 16x64x64 latent packed into 1024 tokens and a --txt-row text). Prints one
JSON object: the forward times in ms."""
import json

import torch
from diffusers import QwenImageTransformer2DModel

from peer_common import assigned, count, load, parse_args, timed


def main():
    a = parse_args([("--txt", int, 32)])
    dtype = a.torch_dtype
    ckpt = load(a.model)
    layers = count(ckpt, "transformer_blocks")
    model = QwenImageTransformer2DModel(num_layers=layers)  # on the CPU: the RoPE tables are buffers outside the file
    model = assigned(model, ckpt, dtype)
    del ckpt
    g = torch.Generator().manual_seed(1)
    h = w = a.size // 16
    img = torch.randn(1, h * w, 64, generator=g).to(dtype)
    txt = torch.randn(1, a.txt, 3584, generator=g).to(dtype)
    t = torch.full((1,), 0.5, dtype=dtype)
    shapes = [(1, h, w)]
    times = timed(lambda: model(hidden_states=img, encoder_hidden_states=txt, timestep=t, img_shapes=shapes,
                                return_dict=False), a.repeat)
    print(json.dumps({"forward_ms": times, "dtype": a.dtype, "torch": torch.__version__, "layers": layers,
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()

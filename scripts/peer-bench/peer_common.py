"""What the transformer peer benchmarks' Python sides share (flux_transformer.py, zimage_transformer.py,
flux2_transformer.py): their arguments, a file's tensors, the block counts off its keys, and the timed
forwards (the first a warm-up)."""
import argparse
import os
import re
import json
import time

import torch
from safetensors import safe_open
from safetensors.torch import load_file


def parse_args(extra=()):
    """--model, --size, --repeat, --dtype, and each (flag, type, default) of `extra`; threads = the cores."""
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--size", type=int, default=512)
    for flag, kind, default in extra:
        p.add_argument(flag, type=kind, default=default)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    a = p.parse_args()
    a.torch_dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    torch.set_num_threads(os.cpu_count())
    return a


def load(path):
    with safe_open(path, "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def with_config(path, key):
    """A file's tensors and the JSON config its metadata holds under `key` ({} without one)."""
    with safe_open(path, "pt") as f:
        meta = json.loads((f.metadata() or {}).get(key, "{}"))
    return load_file(path), meta


def folder_args(*flags):
    """The folder writers' arguments: --transformer, each required flag of `flags` ((flag, help); help
    may be None), --out and --shard (save_pretrained's max_shard_size)."""
    p = argparse.ArgumentParser()
    p.add_argument("--transformer", required=True)
    for flag, help_text in flags:
        p.add_argument(flag, required=True, help=help_text)
    p.add_argument("--out", required=True)
    p.add_argument("--shard", default="20KB", help="save_pretrained's max_shard_size")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    return a


def assigned(model, state, dtype):
    """A model built on the meta device with `state` assigned (strict), in `dtype`, in eval mode."""
    model.load_state_dict(state, strict=True, assign=True)
    return model.to(dtype).eval()


def count(ckpt, head):
    """How many blocks "<head>.N." the keys hold."""
    return 1 + max(int(m.group(1)) for k in ckpt for m in [re.match(re.escape(head) + r"\.(\d+)\.", k)] if m)


def timed(call, repeat):
    """`call` repeat + 1 times under inference mode; the times of all but the first, in ms."""
    times = []
    with torch.inference_mode():
        for i in range(repeat + 1):
            start = time.perf_counter()
            call()
            if i:
                times.append((time.perf_counter() - start) * 1000)
    return times

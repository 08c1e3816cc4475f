// A FLUX.2 diffusers folder (`black-forest-labs/FLUX.2-klein-4B` as downloaded): its transformer/
// in diffusers' names (Flux2Transformer2DModel) read as BFL's (../shared/reference/flux2/README.md,
// "diffusers' names"): the fused q/k/v of both streams from to_q/k/v and add_q/k/v_proj,
// ff(_context).linear_in/out the MLPs, a single block's attn.to_qkv_mlp_proj linear1 and
// attn.to_out linear2, the embedders, the shared modulations' `.linear`, and norm_out.linear's
// halves swapped. Its vae/ reads through the diffusers autoencoder names (models/flux/flux_files.h)
// and its text_encoder/ keeps transformers' names. LibTorch-free.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace fp8s {

std::optional<std::vector<FolderTensor>> flux2_diffusers_names(const std::map<std::string, TensorRecord>& tensors);

}  // namespace fp8s

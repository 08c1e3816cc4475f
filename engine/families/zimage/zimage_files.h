// Where a Z-Image model's components are (../shared/reference/zimage/README.md, "Files"): the
// transformer (original names, no prefix, or an all-in-one file's `model.diffusion_model.`), the
// Qwen3 text encoder (Hugging Face names under `model.`, or `text_encoders.qwen3_4b.transformer.model.`)
// and the Flux.1 autoencoder (BFL names; `vae.`), in one file or several, found the way ComfyUI's
// models folder lays them out. LibTorch-free.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/flux/flux_files.h"

namespace fp8s {

struct ZImageFileContents {
  std::optional<std::string> transformer, text_encoder, vae;
};
ZImageFileContents zimage_contents(const SafetensorsFile& file);

// diffusers' ZImageTransformer2DModel names (a model folder's transformer/) as the released file's:
// attention.to_q/to_k/to_v -> attention.qkv (their rows, in order), to_out.0 -> out, norm_q/norm_k
// -> q_norm/k_norm, all_x_embedder.2-1 -> x_embedder, all_final_layer.2-1 -> final_layer (the
// inverse of diffusers' convert_z_image_transformer_checkpoint_to_diffusers); nullopt when the
// tensors are not that layout (a FolderRenamer).
std::optional<std::vector<FolderTensor>> zimage_diffusers_names(const std::map<std::string, TensorRecord>& tensors);

struct ZImageFiles {
  ComponentSource transformer, text_encoder, vae;
  std::vector<std::string> searched;  // folders looked in for the missing components
};

// The components of `model`, each taken from the model file when it holds it, else the explicit
// path (`--text-encoder`, `--vae`), else a diffusers model folder's text_encoder/ and vae/ (when
// `model` is that folder), else a ComfyUI models folder around the model
// (text_encoders/ and clip/: qwen_3_4b*, qwen3*; vae/: ae*, flux*, z_image*, zimage*), else the
// model's own folder. InputError when an explicit file does not hold its component, or when one
// is missing (naming the option and where it looked).
ZImageFiles resolve_zimage_files(const std::string& model, const std::string& text_encoder, const std::string& vae);

}  // namespace fp8s

// Where a Flux model's four components are: the transformer (BFL names, no prefix, or ComfyUI's
// all-in-one `model.diffusion_model.`), T5-XXL (HF T5EncoderModel names; `text_encoders.t5xxl.transformer.`),
// CLIP-L (HF CLIPTextModel names with or without `text_model.`; `text_encoders.clip_l.transformer.`)
// and the autoencoder (BFL names; `vae.`), in one file or several, found the way ComfyUI's models
// folder lays them out. LibTorch-free.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/component_files.h"

namespace fp8s {

// What one file holds: the prefix of each component it has.
struct FluxFileContents {
  std::optional<std::string> transformer, t5, clip_l, vae;
  bool dev = false;  // the transformer has guidance_in.* (dev); schnell has none
};
FluxFileContents flux_contents(const SafetensorsFile& file);
// A Flux transformer (double_blocks.*) at any prefix.
bool is_flux_file(const SafetensorsFile& file);

// diffusers' AutoencoderKL names (a model folder's vae/) as BFL's / LDM's (ComfyUI's ae.safetensors):
// down_blocks.i.resnets.j -> down.i.block.j, up_blocks.i -> up.(n-1-i), mid_block -> mid.block_1/2
// and attn_1 (its Linear q/k/v/proj_out as 1x1 convolutions), conv_norm_out -> norm_out;
// nullopt when the tensors are not that layout (a FolderRenamer).
std::optional<std::vector<FolderTensor>> diffusers_autoencoder_names(const std::map<std::string, TensorRecord>& tensors);
// diffusers' FluxTransformer2DModel names (a model folder's transformer/) as BFL's: to_q/to_k/to_v
// -> img_attn.qkv's rows (add_q/k/v_proj -> txt_attn.qkv; a single block's with proj_mlp -> linear1),
// norm_q/norm_k weights -> the query/key norms' scales, norm1(_context).linear -> img/txt_mod.lin,
// ff(_context).net -> img/txt_mlp, to_out.0 / to_add_out -> the attention projections, the
// embedders and time_text_embed -> img_in, txt_in, time_in, guidance_in, vector_in, proj_out ->
// final_layer.linear and norm_out.linear -> final_layer.adaLN_modulation.1 with its halves swapped
// (the inverse of diffusers' convert_flux_transformer_checkpoint_to_diffusers); nullopt when the
// tensors are not that layout (a FolderRenamer).
std::optional<std::vector<FolderTensor>> diffusers_flux_transformer_names(const std::map<std::string, TensorRecord>& tensors);
// The tensors of BFL double block `b` ("double_blocks.N.") that diffusers names alike for Flux.1
// and FLUX.2 under `d` ("transformer_blocks.N."): the fused q/k/v of both streams from to_q/k/v and
// add_q/k/v_proj, the q/k norms, the projections.
class FolderRenaming;
void add_bfl_double_attention_tensors(FolderRenaming& r, const std::string& d, const std::string& b);

// What a user names of a Flux model beside its file: each empty one is the model file's own, else
// found in a ComfyUI models folder around it (components) or searched as the CLIP vocabulary is
// (the T5 tokenizer).
struct FluxPaths {
  std::string t5, clip_l, vae, t5_tokenizer;
  bool t5_on_cpu = false;  // on a GPU, keep T5-XXL on the CPU (else ComfyUI's low-VRAM rule decides)
};

struct FluxFiles {
  ComponentSource transformer, t5, clip_l, vae;
  bool dev = true;
  std::vector<std::string> searched;  // folders looked in for the missing components
};

// The components of `model` (a transformer or all-in-one file, or a diffusers model folder), each
// taken from the model file when it holds it, else the explicit path (`--t5`, `--clip-l`, `--vae`),
// else the folder's text_encoder/ (CLIP-L), text_encoder_2/ (T5-XXL) and vae/, else a ComfyUI
// models folder around the model (text_encoders/ and clip/: t5xxl*, clip_l*; vae/: ae*, flux*vae*).
// Throws InputError when an explicit file does not hold its component.
FluxFiles resolve_flux_files(const std::string& model, const std::string& t5, const std::string& clip_l,
                             const std::string& vae);

}  // namespace fp8s

// ControlNet files by their names (../shared/reference/controlnet/README.md, "The two layouts"):
// (a) lllyasviel's cldm names, with or without `control_model.` (also the control_model.* part of
// a whole ControlNet 1.0 checkpoint), and (b) diffusers' ControlNetModel names, read as (a)'s; the
// configuration derived from the keys. LibTorch-free.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/config.h"

namespace fp8s {

struct ControlNetConfig {
  UNetConfig unet;  // its encoder's (input blocks and middle block; out_channels unused)
  int hint_channels = 3;
  std::vector<int> hint_block_channels{16, 32, 96, 256};  // input_hint_block.0, 4, 8, 12's outputs
  bool sdxl() const { return unet.adm_in_channels > 0; }
  // down_0 ... down_(K-1) (one per input block) and mid
  int residuals() const { return static_cast<int>(unet.channel_mult.size()) * (unet.num_res_blocks + 1) + 1; }
};

// What a file holds of a ControlNet, from its names: the prefix of the cldm names ("control_model."
// or ""), whether it is in diffusers' names (read through diffusers_controlnet_names), and the
// kinds that are refused by name.
struct ControlNetContents {
  std::string prefix;
  bool diffusers = false;
  bool difference = false;    // a "diff" ControlNet (a `difference` key): deltas to SD 1.5's UNet
  bool control_lora = false;  // Stability's Control-LoRA (`lora_controlnet`)
};
std::optional<ControlNetContents> controlnet_contents(const SafetensorsFile& file);

// diffusers' ControlNetModel names as cldm's (a FolderRenamer, and what a layout-(b) file is read
// through): conv_in -> input_blocks.0.0, down_blocks.L.resnets.i / attentions.i ->
// input_blocks.(1 + L(N+1) + i).0 / .1 (norm1, conv1, time_emb_proj, norm2, conv2, conv_shortcut ->
// in_layers.0, in_layers.2, emb_layers.1, out_layers.0, out_layers.3, skip_connection),
// downsamplers.0.conv -> input_blocks.((L+1)(N+1)).0.op, mid_block -> middle_block.0/1/2,
// controlnet_down_blocks.k -> zero_convs.k.0, controlnet_mid_block -> middle_block_out.0,
// controlnet_cond_embedding.{conv_in, blocks.j, conv_out} -> input_hint_block.{0, 2j+2, 14},
// time_embedding / add_embedding -> time_embed / label_emb.0; nullopt when not that layout.
std::optional<std::vector<FolderTensor>> diffusers_controlnet_names(const std::map<std::string, TensorRecord>& tensors);
// The ControlNet file at `path` under cldm's names: layout (b) read through diffusers_controlnet_names.
SafetensorsFile controlnet_file(const std::string& path, const ControlNetContents& contents);

// The configuration from the shapes of a file in cldm names under `prefix`: channels, levels and
// res blocks from the input blocks, transformer depths per level and in the middle, linear or conv
// projections, context width, SDXL's label_emb; the heads from `controlnet.config` metadata (the
// tiny reference files), else SD 1.5's 8 heads or SDXL's 64-wide ones. InputError naming the file
// when the keys do not make a ControlNet.
ControlNetConfig controlnet_config(const SafetensorsFile& file, const std::string& prefix);

}  // namespace fp8s

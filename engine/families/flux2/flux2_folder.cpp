#include "families/flux2/flux2_folder.h"

#include "models/flux/flux_files.h"
#include "models/folder_renaming.h"

namespace fp8s {

std::optional<std::vector<FolderTensor>> flux2_diffusers_names(const std::map<std::string, TensorRecord>& tensors) {
  if (!tensors.count("double_stream_modulation_img.linear.weight") || !tensors.count("x_embedder.weight")) return std::nullopt;
  FolderRenaming r(tensors);
  for (const auto& n : r.indices("transformer_blocks.", ".attn.to_q.weight")) {
    const std::string d = "transformer_blocks." + n + ".", b = "double_blocks." + n + ".";
    add_bfl_double_attention_tensors(r, d, b);
    r.add(b + "img_mlp.0", {d + "ff.linear_in"});
    r.add(b + "img_mlp.2", {d + "ff.linear_out"});
    r.add(b + "txt_mlp.0", {d + "ff_context.linear_in"});
    r.add(b + "txt_mlp.2", {d + "ff_context.linear_out"});
  }
  for (const auto& n : r.indices("single_transformer_blocks.", ".attn.to_qkv_mlp_proj.weight")) {
    const std::string d = "single_transformer_blocks." + n + ".", b = "single_blocks." + n + ".";
    r.add(b + "linear1", {d + "attn.to_qkv_mlp_proj"});
    r.add(b + "linear2", {d + "attn.to_out"});
    r.add(b + "norm.query_norm", {d + "attn.norm_q"});
    r.add(b + "norm.key_norm", {d + "attn.norm_k"});
  }
  r.add("img_in", {"x_embedder"});
  r.add("txt_in", {"context_embedder"});
  r.add("time_in.in_layer", {"time_guidance_embed.timestep_embedder.linear_1"});
  r.add("time_in.out_layer", {"time_guidance_embed.timestep_embedder.linear_2"});
  r.add("guidance_in.in_layer", {"time_guidance_embed.guidance_embedder.linear_1"});
  r.add("guidance_in.out_layer", {"time_guidance_embed.guidance_embedder.linear_2"});
  for (const char* m : {"double_stream_modulation_img", "double_stream_modulation_txt", "single_stream_modulation"}) {
    r.add(std::string(m) + ".lin", {std::string(m) + ".linear"});
  }
  r.add("final_layer.linear", {"proj_out"});
  r.add_swapped("final_layer.adaLN_modulation.1", "norm_out.linear");
  return r.finish();
}

}  // namespace fp8s

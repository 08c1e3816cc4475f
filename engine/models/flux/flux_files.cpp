#include "models/flux/flux_files.h"

#include <cctype>

#include <algorithm>
#include <set>
#include <tuple>

#include "core/error.h"
#include "core/files.h"
#include "core/strings.h"
#include "models/folder_renaming.h"

namespace fp8s {
namespace {

// The prefix under which `file` has `key` (a key that only that component has), if any.
std::optional<std::string> prefix_of(const SafetensorsFile& file, const std::vector<std::string>& prefixes,
                                     const std::string& key) {
  for (const auto& p : prefixes) {
    if (file.find(p + key)) return p;
  }
  return std::nullopt;
}

}  // namespace

FluxFileContents flux_contents(const SafetensorsFile& file) {
  FluxFileContents c;
  c.transformer = prefix_of(file, {"", "model.diffusion_model.", "diffusion_model."}, "double_blocks.0.img_attn.qkv.weight");
  if (c.transformer) c.dev = file.find(*c.transformer + "guidance_in.in_layer.weight") != nullptr;
  c.t5 = prefix_of(file, {"", "text_encoders.t5xxl.transformer.", "t5xxl.transformer."},
                   "encoder.block.0.layer.0.SelfAttention.q.weight");
  c.clip_l = prefix_of(file, {"", "text_model.", "text_encoders.clip_l.transformer.", "text_encoders.clip_l.transformer.text_model."},
                       "embeddings.token_embedding.weight");
  c.vae = prefix_of(file, {"", "vae.", "first_stage_model."}, "decoder.conv_in.weight");
  // a Flux autoencoder has no quant_conv (SD's VAE has one)
  if (c.vae && file.find(*c.vae + "quant_conv.weight")) c.vae.reset();
  return c;
}

bool is_flux_file(const SafetensorsFile& file) { return flux_contents(file).transformer.has_value(); }

std::optional<std::vector<FolderTensor>> diffusers_autoencoder_names(const std::map<std::string, TensorRecord>& tensors) {
  if (!tensors.count("decoder.mid_block.attentions.0.to_q.weight") || !tensors.count("encoder.down_blocks.0.resnets.0.conv1.weight")) {
    return std::nullopt;
  }
  int ups = 0;
  while (tensors.count("decoder.up_blocks." + std::to_string(ups) + ".resnets.0.conv1.weight")) ++ups;
  const bool flux2 = tensors.count("bn.running_mean") > 0;
  auto index_after = [](const std::string& name, std::size_t at) {  // "12.rest" -> 12, position of rest
    std::size_t end = at;
    while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
    return std::make_pair(end > at && end - at < 6 ? std::stoi(name.substr(at, end - at)) : -1, end + 1);
  };
  std::vector<FolderTensor> out;
  for (const auto& [name, t] : tensors) {
    std::string n = name;
    std::vector<int64_t> shape = t.shape;
    for (const std::string coder : {"encoder.", "decoder."}) {
      if (!starts_with(n, coder)) continue;
      const std::string rest = n.substr(coder.size());
      const bool down = starts_with(rest, "down_blocks."), up = starts_with(rest, "up_blocks.");
      if (down || up) {
        const std::string head = down ? "down_blocks." : "up_blocks.";
        auto [i, at] = index_after(rest, head.size());
        if (i < 0 || at > rest.size()) break;
        const int level = up ? ups - 1 - i : i;
        std::string tail = rest.substr(at);
        if (starts_with(tail, "resnets.")) tail = "block." + tail.substr(8);
        else if (starts_with(tail, "downsamplers.0.")) tail = "downsample." + tail.substr(15);
        else if (starts_with(tail, "upsamplers.0.")) tail = "upsample." + tail.substr(13);
        n = coder + (down ? "down." : "up.") + std::to_string(level) + "." + tail;
      } else if (starts_with(rest, "mid_block.resnets.0.")) {
        n = coder + "mid.block_1." + rest.substr(20);
      } else if (starts_with(rest, "mid_block.resnets.1.")) {
        n = coder + "mid.block_2." + rest.substr(20);
      } else if (starts_with(rest, "mid_block.attentions.0.")) {
        std::string tail = rest.substr(23);
        static const std::pair<const char*, const char*> attn[] = {
            {"group_norm.", "norm."}, {"to_q.", "q."}, {"to_k.", "k."}, {"to_v.", "v."}, {"to_out.0.", "proj_out."}};
        for (const auto& [from, to] : attn) {
          if (starts_with(tail, from)) {
            tail = to + tail.substr(std::string(from).size());
            break;
          }
        }
        if (shape.size() == 2) shape = {shape[0], shape[1], 1, 1};  // a Linear as the 1x1 convolution
        n = coder + "mid.attn_1." + tail;
      } else if (starts_with(rest, "conv_norm_out.")) {
        n = coder + "norm_out." + rest.substr(14);
      }
      const auto shortcut = n.find(".conv_shortcut.");
      if (shortcut != std::string::npos) n.replace(shortcut, 15, ".nin_shortcut.");
      break;
    }
    // FLUX.2's AutoencoderKLFlux2 (its BatchNorm statistics `bn.*`): BFL keeps the quant convs inside the coders
    if (flux2 && starts_with(n, "quant_conv.")) n = "encoder." + n;
    else if (flux2 && starts_with(n, "post_quant_conv.")) n = "decoder." + n;
    out.push_back({n, shape, {{name, 0, -1}}});
  }
  return out;
}

std::optional<std::vector<FolderTensor>> diffusers_flux_transformer_names(const std::map<std::string, TensorRecord>& tensors) {
  if (!tensors.count("x_embedder.weight") || !tensors.count("context_embedder.weight") ||
      !tensors.count("transformer_blocks.0.attn.add_q_proj.weight") || tensors.count("double_stream_modulation_img.linear.weight")) {
    return std::nullopt;  // not Flux.1's (FLUX.2's shares the names and adds shared modulations)
  }
  FolderRenaming r(tensors);
  for (const auto& n : r.indices("transformer_blocks.", ".attn.to_q.weight")) {
    const std::string d = "transformer_blocks." + n + ".", b = "double_blocks." + n + ".";
    r.add(b + "img_mod.lin", {d + "norm1.linear"});
    r.add(b + "txt_mod.lin", {d + "norm1_context.linear"});
    add_bfl_double_attention_tensors(r, d, b);
    r.add(b + "img_mlp.0", {d + "ff.net.0.proj"});
    r.add(b + "img_mlp.2", {d + "ff.net.2"});
    r.add(b + "txt_mlp.0", {d + "ff_context.net.0.proj"});
    r.add(b + "txt_mlp.2", {d + "ff_context.net.2"});
  }
  for (const auto& n : r.indices("single_transformer_blocks.", ".attn.to_q.weight")) {
    const std::string d = "single_transformer_blocks." + n + ".", b = "single_blocks." + n + ".";
    r.add(b + "modulation.lin", {d + "norm.linear"});
    r.add(b + "linear1", {d + "attn.to_q", d + "attn.to_k", d + "attn.to_v", d + "proj_mlp"});
    r.add(b + "linear2", {d + "proj_out"});
    r.add(b + "norm.query_norm", {d + "attn.norm_q"});
    r.add(b + "norm.key_norm", {d + "attn.norm_k"});
  }
  r.add("img_in", {"x_embedder"});
  r.add("txt_in", {"context_embedder"});
  r.add("time_in.in_layer", {"time_text_embed.timestep_embedder.linear_1"});
  r.add("time_in.out_layer", {"time_text_embed.timestep_embedder.linear_2"});
  r.add("guidance_in.in_layer", {"time_text_embed.guidance_embedder.linear_1"});
  r.add("guidance_in.out_layer", {"time_text_embed.guidance_embedder.linear_2"});
  r.add("vector_in.in_layer", {"time_text_embed.text_embedder.linear_1"});
  r.add("vector_in.out_layer", {"time_text_embed.text_embedder.linear_2"});
  r.add("final_layer.linear", {"proj_out"});
  r.add_swapped("final_layer.adaLN_modulation.1", "norm_out.linear");
  return r.finish();
}

void add_bfl_double_attention_tensors(FolderRenaming& r, const std::string& d, const std::string& b) {
  r.add(b + "img_attn.qkv", {d + "attn.to_q", d + "attn.to_k", d + "attn.to_v"});
  r.add(b + "txt_attn.qkv", {d + "attn.add_q_proj", d + "attn.add_k_proj", d + "attn.add_v_proj"});
  r.add(b + "img_attn.norm.query_norm", {d + "attn.norm_q"});
  r.add(b + "img_attn.norm.key_norm", {d + "attn.norm_k"});
  r.add(b + "txt_attn.norm.query_norm", {d + "attn.norm_added_q"});
  r.add(b + "txt_attn.norm.key_norm", {d + "attn.norm_added_k"});
  r.add(b + "img_attn.proj", {d + "attn.to_out.0"});
  r.add(b + "txt_attn.proj", {d + "attn.to_add_out"});
}

FluxFiles resolve_flux_files(const std::string& model, const std::string& t5, const std::string& clip_l,
                             const std::string& vae) {
  FluxFiles f;
  {
    const SafetensorsFile file(model);
    const auto c = flux_contents(file);
    if (!c.transformer) {
      throw InputError(model + ": not a Flux transformer (no double_blocks.*); pass the flux1-dev/schnell file or an all-in-one checkpoint");
    }
    f.transformer = {model, *c.transformer};
    f.dev = c.dev;
    if (c.t5) f.t5 = {model, *c.t5};
    if (c.clip_l) f.clip_l = {model, *c.clip_l};
    if (c.vae) f.vae = {model, *c.vae};
  }
  auto explicit_file = [](const std::string& path, const char* what, auto member) {
    const SafetensorsFile file(path);
    const auto c = flux_contents(file);
    const auto& p = c.*member;
    if (!p) throw InputError(path + ": holds no " + what + " (wrong file for this option?)");
    return ComponentSource{path, *p};
  };
  if (!t5.empty()) f.t5 = explicit_file(t5, "T5-XXL encoder", &FluxFileContents::t5);
  if (!clip_l.empty()) f.clip_l = explicit_file(clip_l, "CLIP-L text encoder", &FluxFileContents::clip_l);
  if (!vae.empty()) f.vae = explicit_file(vae, "Flux autoencoder (16 latent channels)", &FluxFileContents::vae);
  if (is_dir(model)) {  // a diffusers model folder: its own text encoders and autoencoder
    const std::tuple<ComponentSource*, const char*, const char*, std::optional<std::string> FluxFileContents::*> subs[] = {
        {&f.clip_l, "text_encoder", "CLIP-L text encoder", &FluxFileContents::clip_l},
        {&f.t5, "text_encoder_2", "T5-XXL encoder", &FluxFileContents::t5},
        {&f.vae, "vae", "Flux autoencoder (16 latent channels)", &FluxFileContents::vae}};
    for (const auto& [slot, sub, what, member] : subs) {
      if (slot->found() || !is_dir(model + "/" + sub)) continue;
      f.searched.push_back(model + "/" + sub);
      *slot = explicit_file(model + "/" + sub, what, member);
    }
  }
  // ComfyUI's layout: models/{diffusion_models,unet,checkpoints}/MODEL, models/{text_encoders,clip,vae}/
  const std::string root = dirname_of(dirname_of(model));
  struct Want {
    ComponentSource* slot;
    std::vector<std::string> dirs;
    std::vector<std::string> stems;  // file name starts, in order of preference
    std::optional<std::string> FluxFileContents::*member;
  };
  const std::vector<Want> wants{
      {&f.t5, {"text_encoders", "clip"}, {"t5xxl_fp8_e4m3fn_scaled", "t5xxl_fp8_e4m3fn", "t5xxl_fp16", "t5xxl"}, &FluxFileContents::t5},
      {&f.clip_l, {"text_encoders", "clip"}, {"clip_l"}, &FluxFileContents::clip_l},
      {&f.vae, {"vae"}, {"ae", "flux", "FLUX"}, &FluxFileContents::vae}};
  for (const auto& w : wants) {
    if (w.slot->found()) continue;
    for (const auto& stem : w.stems) {
      for (const auto& dir : w.dirs) {
        const std::string folder = root + "/" + dir;
        if (std::find(f.searched.begin(), f.searched.end(), folder) == f.searched.end()) f.searched.push_back(folder);
        for (const auto& name : safetensors_in(folder)) {
          if (w.slot->found() || !starts_with(name, stem)) continue;
          try {
            const SafetensorsFile file(folder + "/" + name);
            const FluxFileContents contents = flux_contents(file);
            if (const auto& p = contents.*(w.member)) *w.slot = {folder + "/" + name, *p};
          } catch (const InputError&) {
            // an unreadable neighbour is not this model's problem
          }
        }
      }
    }
  }
  return f;
}

}  // namespace fp8s

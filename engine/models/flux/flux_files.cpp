#include "models/flux/flux_files.h"

#include <algorithm>

#include "core/error.h"
#include "core/files.h"
#include "core/strings.h"

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

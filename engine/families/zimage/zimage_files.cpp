#include "families/zimage/zimage_files.h"

#include <algorithm>

#include "core/error.h"
#include "core/files.h"
#include "core/strings.h"

namespace fp8s {

ZImageFileContents zimage_contents(const SafetensorsFile& file) {
  ZImageFileContents c;
  for (const std::string p : {"", "model.diffusion_model."}) {
    if (file.find(p + "cap_embedder.1.weight") && file.find(p + "noise_refiner.0.attention.k_norm.weight") &&
        file.find(p + "layers.0.adaLN_modulation.0.weight")) {
      c.transformer = p;
      break;
    }
  }
  for (const std::string p : {"model.", "text_encoders.qwen3_4b.transformer.model."}) {
    if (file.find(p + "layers.0.self_attn.q_norm.weight")) {
      c.text_encoder = p;
      break;
    }
  }
  c.vae = flux_contents(file).vae;
  return c;
}

ZImageFiles resolve_zimage_files(const std::string& model, const std::string& text_encoder, const std::string& vae) {
  ZImageFiles f;
  {
    const SafetensorsFile file(model);
    const auto c = zimage_contents(file);
    if (!c.transformer) throw InputError(model + ": not a Z-Image transformer (no cap_embedder.1.weight with noise_refiner.* and layers.*)");
    f.transformer = {model, *c.transformer};
    if (c.text_encoder) f.text_encoder = {model, *c.text_encoder};
    if (c.vae) f.vae = {model, *c.vae};
  }
  auto explicit_file = [](const std::string& path, const char* what, std::optional<std::string> ZImageFileContents::*member) {
    const SafetensorsFile file(path);
    const auto contents = zimage_contents(file);
    const auto& p = contents.*member;
    if (!p) throw InputError(path + ": holds no " + what + " (wrong file for this option?)");
    return ComponentSource{path, *p};
  };
  if (!text_encoder.empty()) f.text_encoder = explicit_file(text_encoder, "Qwen3 text encoder", &ZImageFileContents::text_encoder);
  if (!vae.empty()) f.vae = explicit_file(vae, "Flux autoencoder (16 latent channels)", &ZImageFileContents::vae);
  // ComfyUI's layout: models/{diffusion_models,unet,checkpoints}/MODEL, models/{text_encoders,clip,vae}/;
  // then the model's own folder
  const std::string here = dirname_of(model), root = dirname_of(here);
  struct Want {
    ComponentSource* slot;
    std::vector<std::string> dirs;
    std::vector<std::string> stems;  // file name starts, in order of preference
    std::optional<std::string> ZImageFileContents::*member;
  };
  const std::vector<Want> wants{
      {&f.text_encoder, {root + "/text_encoders", root + "/clip", here}, {"qwen_3_4b", "qwen3_4b", "qwen3", "qwen"},
       &ZImageFileContents::text_encoder},
      {&f.vae, {root + "/vae", here}, {"ae", "flux", "FLUX", "z_image", "zimage"}, &ZImageFileContents::vae}};
  for (const auto& w : wants) {
    for (const auto& stem : w.stems) {
      for (const auto& folder : w.dirs) {
        if (w.slot->found()) break;
        if (std::find(f.searched.begin(), f.searched.end(), folder) == f.searched.end()) f.searched.push_back(folder);
        for (const auto& name : safetensors_in(folder)) {
          if (w.slot->found() || !starts_with(name, stem) || folder + "/" + name == model) continue;
          try {
            const SafetensorsFile file(folder + "/" + name);
            const auto contents = zimage_contents(file);
            if (const auto& p = contents.*(w.member)) *w.slot = {folder + "/" + name, *p};
          } catch (const InputError&) {
            // an unreadable neighbour is not this model's problem
          }
        }
      }
    }
  }
  std::string where;
  for (const auto& s : f.searched) where += (where.empty() ? "" : ", ") + s;
  if (!f.text_encoder.found()) {
    throw InputError(model + ": no Qwen3 text encoder found (looked in " + where +
                     "); pass --text-encoder qwen_3_4b.safetensors (or put it in ComfyUI's models/text_encoders)");
  }
  if (!f.vae.found()) {
    throw InputError(model + ": no Flux.1 autoencoder found (looked in " + where +
                     "); pass --vae ae.safetensors (Z-Image uses the Flux.1 autoencoder)");
  }
  return f;
}

}  // namespace fp8s

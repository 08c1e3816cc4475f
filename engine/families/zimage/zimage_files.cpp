#include "families/zimage/zimage_files.h"

#include <algorithm>
#include <tuple>

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

std::optional<std::vector<FolderTensor>> zimage_diffusers_names(const std::map<std::string, TensorRecord>& tensors) {
  if (!tensors.count("all_x_embedder.2-1.weight") || !tensors.count("cap_embedder.1.weight")) return std::nullopt;
  static const std::pair<const char*, const char*> renames[] = {
      {"all_x_embedder.2-1.", "x_embedder."}, {"all_final_layer.2-1.", "final_layer."},
      {".attention.to_out.0.", ".attention.out."}, {".attention.norm_q.", ".attention.q_norm."},
      {".attention.norm_k.", ".attention.k_norm."}};
  std::vector<FolderTensor> out;
  for (const auto& [name, t] : tensors) {
    const auto q = name.find(".attention.to_q.");
    if (q != std::string::npos) {  // q, k and v become the rows of one qkv
      const std::string head = name.substr(0, q) + ".attention.", tail = name.substr(q + 16);
      FolderTensor qkv{head + "qkv." + tail, t.shape, {}};
      qkv.shape[0] = 0;
      for (const char* part : {"to_q.", "to_k.", "to_v."}) {
        const auto it = tensors.find(head + part + tail);
        if (it == tensors.end()) return std::nullopt;  // not the layout after all
        qkv.shape[0] += it->second.shape.at(0);
        qkv.sources.push_back({it->first, 0, -1});
      }
      out.push_back(std::move(qkv));
      continue;
    }
    if (name.find(".attention.to_k.") != std::string::npos || name.find(".attention.to_v.") != std::string::npos) continue;
    std::string n = name;
    for (const auto& [from, to] : renames) {
      const auto at = n.find(from);
      if (at != std::string::npos) n.replace(at, std::string(from).size(), to);
    }
    out.push_back({n, t.shape, {{name, 0, -1}}});
  }
  return out;
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
  if (is_dir(model)) {  // a diffusers model folder: its own text_encoder/ and vae/
    const std::tuple<ComponentSource*, const char*, const char*, std::optional<std::string> ZImageFileContents::*> subs[] = {
        {&f.text_encoder, "text_encoder", "Qwen3 text encoder", &ZImageFileContents::text_encoder},
        {&f.vae, "vae", "Flux autoencoder (16 latent channels)", &ZImageFileContents::vae}};
    for (const auto& [slot, sub, what, member] : subs) {
      if (slot->found() || !is_dir(model + "/" + sub)) continue;
      f.searched.push_back(model + "/" + sub);
      *slot = explicit_file(model + "/" + sub, what, member);
    }
  }
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

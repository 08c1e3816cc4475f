#include "families/lora_set.h"

#include <algorithm>

#include "core/error.h"
#include "core/strings.h"
#include "io/safetensors.h"
#include "lora/lora_apply.h"
#include "lora/lora_library.h"
#include "models/fp8_files.h"
#include "models/nn.h"

namespace fp8s {

std::map<std::string, std::vector<int64_t>> lora_linear_weights(const ComponentSource& c) {
  std::map<std::string, std::vector<int64_t>> out;
  if (!c.found()) return out;
  const SafetensorsFile f(c.path);
  for (const auto& t : f.tensors()) {
    if (!starts_with(t.name, c.prefix) || !ends_with(t.name, ".weight") || t.shape.size() != 2) continue;
    auto& shape = out[t.name.substr(c.prefix.size())];
    shape = t.shape;
    const auto conf = comfy_quant_layer(f, t.name);
    if (!conf || !is_block_format(conf->format)) continue;
    // a comfy_quant layer's stored shape is packed (4-bit: two a byte) or padded (mxfp8 to 32,
    // nvfp4 to 16): its logical one, or {rows, columns, -row pad, -column pad} where padding hides it
    if (conf->format == QuantFormat::Mxfp8) shape = {t.shape[0], t.shape[1], -32, -32};
    if (conf->format == QuantFormat::Nvfp4) shape = {t.shape[0], t.shape[1] * 2, -16, -16};
    if (conf->format == QuantFormat::ConvRotW4A4 || conf->format == QuantFormat::AwqW4A16 || conf->format == QuantFormat::SvdquantW4A4) {
      shape = {t.shape[0], t.shape[1] * 2};
    }
  }
  return out;
}

void write_diffusion_model_lora(const std::map<std::string, std::vector<int64_t>>& weights, const std::string& base, int rank,
                                double alpha, double strength, uint64_t seed, const std::string& out, bool overwrite) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> modules;
  for (const auto& [key, shape] : weights) {
    if (shape.size() == 2 && key.size() > 7 && key.compare(key.size() - 7, 7, ".weight") == 0) {
      modules.push_back({"diffusion_model." + key.substr(0, key.size() - 7), shape});
    }
  }
  write_synthetic_lora(modules, rank, alpha, strength, seed, base, out, overwrite);
}

std::map<std::string, QuantisedLayer*> lora_layers_of(torch::nn::Module& root) {
  std::map<std::string, QuantisedLayer*> out;
  for (const auto& item : root.named_modules("", false)) {
    if (auto* layer = dynamic_cast<QuantisedLayer*>(item.value().get())) out[item.key() + ".weight"] = layer;
  }
  return out;
}

LoraSet LoraSet::read(const std::vector<LoraRequest>& loras, LoraMode mode, const Planner& plan) {
  LoraSet s;
  s.requests_ = loras;
  s.mode_ = mode;
  s.files_.reserve(loras.size());
  for (const auto& request : loras) {
    s.files_.push_back(read_lora(request.path));
    const auto& file = s.files_.back();
    s.plans_.push_back(plan_lora_with(file, [&](const std::vector<LoraModuleLayout>& layouts) { return plan(file, layouts); }));
  }
  return s;
}

std::size_t LoraSet::apply(torch::nn::Module& root, const LoraComponent& c) {
  auto& touched = touched_[c.tag];
  if (plans_.empty()) return 0;
  const auto layers = lora_layers_of(root);
  LoraMode mode = mode_;
  if (c.streamed) {
    if (mode == LoraMode::Merge || mode == LoraMode::MergeStochastic) {
      throw InputError("--lora-mode " + std::string(lora_mode_name(mode)) + " cannot apply while " + c.what +
                       " streams (its weights are read from the file each step); use --lora-mode online or auto, or a "
                       "larger --weight-budget");
    }
    mode = LoraMode::Online;
  }
  std::map<std::string, std::vector<LoraFactor>> merged;
  for (std::size_t n = 0; n < plans_.size(); ++n) {
    const auto& request = requests_[n];
    for (const auto& [module, tagged] : plans_[n].targets) {
      // the denoiser's targets have no tag ("clip_l:..."; a "#rows:" suffix is not one)
      const auto colon = tagged.find(':');
      const bool has_tag = colon != std::string::npos && colon < tagged.find('#');
      const bool mine = c.tag.empty() ? !has_tag : starts_with(tagged, c.tag);
      if (!mine) continue;
      const std::string target = tagged.substr(c.tag.size());
      const std::string key = target.substr(0, target.find('#'));
      const auto it = layers.find(key);
      if (it == layers.end()) continue;
      const auto factor = lora_factor_for(*module, target, it->second->store.weight.size(0),
                                          c.text_encoder ? request.te_multiplier : request.unet_multiplier);
      if (mode == LoraMode::Online) {
        add_online_lora(*it->second, factor);
        if (std::find(touched.begin(), touched.end(), key) == touched.end()) touched.push_back(key);
      } else {
        merged[key].push_back(factor);
      }
    }
  }
  merge_lora_sets(merged, layers, c.storage, mode, touched);
  return touched.size();
}

void LoraSet::undo(torch::nn::Module& root, const LoraComponent& c) {
  auto& touched = touched_[c.tag];
  if (touched.empty()) return;
  const SafetensorsFile f(c.source.path);
  const auto layers = lora_layers_of(root);
  for (const auto& key : touched) {
    auto* layer = layers.at(key);
    if (!clear_online_loras(*layer)) load_layer_weight(*layer, f, c.source.prefix + key, c.storage, true);
  }
  touched.clear();
}

}  // namespace fp8s

// A Flux model's LoRA set (FluxModel::set_loras): the files planned against the transformer's and
// CLIP-L's Linear layers (lora/flux_lora_keys.h), applied to each component as it loads, undone per
// layer from the file.
#include "core/logging.h"
#include "core/strings.h"
#include "lora/flux_lora_keys.h"
#include "lora/lora_apply.h"
#include "models/flux/flux.h"
#include "models/text_encoder.h"
#include "core/error.h"
#include "families/flux/flux_model.h"

namespace fp8s {

namespace {

// The Linear weights (key under the component's prefix -> shape) a LoRA can reach, off the file's header.
std::map<std::string, std::vector<int64_t>> linear_weights(const ComponentSource& c) {
  std::map<std::string, std::vector<int64_t>> out;
  if (!c.found()) return out;
  const SafetensorsFile f(c.path);
  for (const auto& t : f.tensors()) {
    if (starts_with(t.name, c.prefix) && ends_with(t.name, ".weight") && t.shape.size() == 2) {
      out[t.name.substr(c.prefix.size())] = t.shape;
    }
  }
  return out;
}

std::map<std::string, QuantisedLayer*> layers_of(torch::nn::Module& root) {
  std::map<std::string, QuantisedLayer*> out;
  for (const auto& item : root.named_modules("", false)) {
    if (auto* layer = dynamic_cast<QuantisedLayer*>(item.value().get())) out[item.key() + ".weight"] = layer;
  }
  return out;
}

}  // namespace

std::size_t FluxModel::set_loras(const std::vector<LoraRequest>& loras, LoraMode mode_in) {
  const LoraMode mode = effective_lora_mode(mode_in, storage_);
  if (loras == active_loras_ && mode == active_mode_) return 0;
  FluxLoraLayers layers{linear_weights(files_.transformer), linear_weights(files_.clip_l)};
  std::vector<LoraFile> files;
  std::vector<LoraPlan> plans;
  files.reserve(loras.size());
  for (const auto& request : loras) {
    files.push_back(read_lora(request.path));
    const auto& lora = files.back();
    plans.push_back(plan_lora_with(lora, [&](const std::vector<LoraModuleLayout>& layouts) {
      return plan_flux_lora_layout(layouts, lora.metadata, layers, lora.path);
    }));
  }
  if (flux_) undo_loras(*flux_, false);
  if (clip_) undo_loras(*clip_, true);
  active_loras_ = loras;
  active_mode_ = mode;
  lora_files_ = std::move(files);  // the plans' module pointers stay valid: the buffers move
  lora_plans_ = std::move(plans);
  std::size_t touched = 0;
  if (flux_) touched += apply_loras(*flux_, false);
  if (clip_) touched += apply_loras(*clip_, true);
  return touched;
}

void FluxModel::undo_loras(torch::nn::Module& root, bool clip_component) {
  auto& touched = lora_touched_[clip_component ? 1 : 0];
  if (touched.empty()) return;
  const auto& c = clip_component ? files_.clip_l : files_.transformer;
  const SafetensorsFile f(c.path);
  const StorageSpec storage = clip_component ? component_storage(c) : storage_;
  const auto layers = layers_of(root);
  for (const auto& key : touched) {
    auto* layer = layers.at(key);
    if (!clear_online_loras(*layer)) load_layer_weight(*layer, f, c.prefix + key, storage, true);
  }
  touched.clear();
}

std::size_t FluxModel::apply_loras(torch::nn::Module& root, bool clip_component) {
  auto& touched = lora_touched_[clip_component ? 1 : 0];
  if (lora_plans_.empty()) return 0;
  const auto layers = layers_of(root);
  const std::string clip_tag = kFluxClipLoraTarget;
  // a streamed transformer reads its weights from the file again each step: its LoRA terms stay
  // resident beside them (online), a merge would be lost
  LoraMode mode = active_mode_;
  if (!clip_component && streaming_.plan.any()) {
    if (mode == LoraMode::Merge || mode == LoraMode::MergeStochastic) {
      throw InputError("--lora-mode " + std::string(lora_mode_name(mode)) +
                       " cannot apply while the transformer streams (its weights are read from the file each step); "
                       "use --lora-mode online or auto, or a larger --weight-budget");
    }
    mode = LoraMode::Online;
  }
  std::map<std::string, std::vector<LoraFactor>> merged;
  for (std::size_t n = 0; n < lora_plans_.size(); ++n) {
    const auto& request = active_loras_[n];
    for (const auto& [module, target_in] : lora_plans_[n].targets) {
      const bool clip_target = starts_with(target_in, clip_tag);
      if (clip_target != clip_component) continue;
      const std::string target = clip_target ? target_in.substr(clip_tag.size()) : target_in;
      const std::string key = target.substr(0, target.find('#'));
      auto it = layers.find(key);
      if (it == layers.end()) continue;
      const auto factor = lora_factor_for(*module, target, it->second->store.weight.size(0),
                                          clip_component ? request.te_multiplier : request.unet_multiplier);
      if (mode == LoraMode::Online) {
        add_online_lora(*it->second, factor);
        if (std::find(touched.begin(), touched.end(), key) == touched.end()) touched.push_back(key);
      } else {
        merged[key].push_back(factor);
      }
    }
  }
  merge_lora_sets(merged, layers, clip_component ? component_storage(files_.clip_l) : storage_, mode, touched);
  return touched.size();
}

}  // namespace fp8s

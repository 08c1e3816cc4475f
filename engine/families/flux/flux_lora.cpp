// A Flux model's LoRA set (FluxModel::set_loras): the files planned against the transformer's and
// CLIP-L's Linear layers (lora/flux_lora_keys.h), applied to each component as it loads
// (families/lora_set.h), undone per layer from the file.
#include "families/flux/flux_model.h"
#include "lora/flux_lora_keys.h"
#include "lora/lora_apply.h"
#include "models/flux/flux.h"
#include "models/text_encoder.h"

namespace fp8s {

LoraComponent FluxModel::lora_component(bool clip_component) const {
  if (clip_component) return {kFluxClipLoraTarget, true, files_.clip_l, component_storage(files_.clip_l), false, "CLIP-L"};
  return {"", false, files_.transformer, storage_, streaming_.plan.any(), "the transformer"};
}

std::size_t FluxModel::set_loras(const std::vector<LoraRequest>& loras, LoraMode mode_in) {
  const LoraMode mode = effective_lora_mode(mode_in, storage_);
  if (loras_.same(loras, mode)) return 0;
  const FluxLoraLayers layers{lora_linear_weights(files_.transformer), lora_linear_weights(files_.clip_l)};
  auto next = LoraSet::read(loras, mode, [&](const LoraFile& file, const std::vector<LoraModuleLayout>& modules) {
    return plan_flux_lora_layout(modules, file.metadata, layers, file.path);
  });
  if (flux_) loras_.undo(*flux_, lora_component(false));
  if (clip_) loras_.undo(*clip_, lora_component(true));
  loras_ = std::move(next);
  std::size_t touched = 0;
  if (flux_) touched += loras_.apply(*flux_, lora_component(false));
  if (clip_) touched += loras_.apply(*clip_, lora_component(true));
  return touched;
}

}  // namespace fp8s

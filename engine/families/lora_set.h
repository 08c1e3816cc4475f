// A request's LoRA files, read and planned against a model's layers, applied to each component's
// module tree when it loads and undone per layer (merged layers read again from the file, online
// terms dropped). Families keep one (Flux: the transformer and CLIP-L; Z-Image: the transformer);
// a component's targets are told apart by a tag the planner puts before its keys ("" for the
// denoiser's).
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/types.h"
#include "lora/lora.h"
#include "models/flux/flux_files.h"
#include "pipeline/lora_request.h"

namespace fp8s {

class QuantisedLayer;

// The 2-D weights under a component's prefix (key without the prefix -> shape), from its header:
// what a LoRA planner maps module names onto.
std::map<std::string, std::vector<int64_t>> lora_linear_weights(const ComponentSource& c);
// make-synthetic-lora's LoRA for a transformer: every 2-D `<module>.weight` of `weights` (key ->
// shape, as lora_linear_weights gives them) as ComfyUI's `diffusion_model.<module>`, with kohya's
// random factors (lora/lora_library.h); `base` is its ss_base_model_version.
void write_diffusion_model_lora(const std::map<std::string, std::vector<int64_t>>& weights, const std::string& base, int rank,
                                double alpha, double strength, uint64_t seed, const std::string& out, bool overwrite);
// A module tree's quantised layers by weight key ("<module path>.weight").
std::map<std::string, QuantisedLayer*> lora_layers_of(torch::nn::Module& root);

// One component as a LoRA set sees it.
struct LoraComponent {
  std::string tag;            // its targets' prefix ("" for the denoiser)
  bool text_encoder = false;  // takes the te multiplier (else the unet one)
  ComponentSource source;     // where its weights are read again from
  StorageSpec storage;        // how it keeps them
  bool streamed = false;      // its weights are read from the file each step: online only
  std::string what;           // its name in messages ("the transformer")
};

class LoraSet {
 public:
  // Maps one file's modules onto the model's targets (InputError when it does not fit).
  using Planner = std::function<LoraLayoutPlan(const LoraFile& file, const std::vector<LoraModuleLayout>& modules)>;

  LoraSet() = default;
  LoraSet(LoraSet&&) = default;
  LoraSet& operator=(LoraSet&&) = default;
  LoraSet(const LoraSet&) = delete;
  LoraSet& operator=(const LoraSet&) = delete;

  // Every file read and planned; InputError before anything changes. `mode`: the effective one.
  static LoraSet read(const std::vector<LoraRequest>& loras, LoraMode mode, const Planner& plan);
  bool same(const std::vector<LoraRequest>& loras, LoraMode mode) const { return loras == requests_ && mode == mode_; }
  const std::vector<LoraRequest>& requests() const { return requests_; }

  // Applies the targets tagged c.tag to root's layers (online terms, or merged into the stored
  // weights); a streamed component takes them online and refuses a merge mode by name. Returns the
  // layers touched.
  std::size_t apply(torch::nn::Module& root, const LoraComponent& c);
  // Undoes what apply did on the component (its merged layers read again from c.source).
  void undo(torch::nn::Module& root, const LoraComponent& c);
  // The component was released: nothing of it to undo.
  void forget(const std::string& tag) { touched_.erase(tag); }

 private:
  std::vector<LoraRequest> requests_;
  LoraMode mode_ = LoraMode::Auto;
  std::vector<LoraFile> files_;
  std::vector<LoraPlan> plans_;  // point into files_ (a move keeps the buffers)
  std::map<std::string, std::vector<std::string>> touched_;  // by tag
};

}  // namespace fp8s

// The one generation loop every family runs through (docs/architecture.md, "The run"): the
// request checked, seed and batch, LoRA tags, the phases and their events, previews in the
// family's latent colours, img2img / inpainting / hires, the decode (again in FP32, with a
// warning, when it overflows) and the result. It knows a model only as a FamilyModel.
#pragma once

#include <atomic>
#include <string>

#include "pipeline/family.h"
#include "pipeline/request.h"

namespace fp8s {

struct RunContext {
  FamilyModel* family = nullptr;
  std::string model_name, model_hash;  // A1111's "Model:" and "Model hash:"
  double load_ms = 0;                   // the engine's load (what a run that loads nothing reports)
  std::string lora_dir;                 // where <lora:NAME:...> tags are looked up
};

// Every check of a request before anything is allocated: the common ones (validate_request at the
// family's sizes, its samplers, FP8 compute, the compute type on the device, the LoRA tags' files),
// then the family's own (FamilyModel::check). InputError names the value and what to do.
void validate_run(const RunContext& ctx, const GenerationRequest& request);
GenerationResult run_generation(const RunContext& ctx, const GenerationRequest& request, Observer* observer,
                                const std::atomic<bool>& cancel);

}  // namespace fp8s

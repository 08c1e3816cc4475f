// Z-Image Turbo (Tongyi-MAI's single-stream DiT with a Qwen3-4B text encoder and the Flux.1
// autoencoder) as a model family (families/family.h), built in steps (issue 42): the Qwen
// tokenizer (text/qwen_tokenizer.h), the Qwen3 text encoder (families/zimage/qwen3.h, probe role
// `qwen3`) and the transformer (families/zimage/zimage_transformer.h, probe role `zimage`) are in;
// generation (the sampling loop, the pipeline) is not yet, and a Z-Image file is refused with that.
#pragma once

#include "families/family.h"

namespace fp8s {

FamilyEntry zimage_family_entry();

}  // namespace fp8s

// Z-Image Turbo (Tongyi-MAI's single-stream DiT with a Qwen3-4B text encoder and the Flux.1
// autoencoder) as a model family (families/family.h), built in steps (issue 42): the Qwen
// tokenizer (text/qwen_tokenizer.h) and the Qwen3 text encoder (families/zimage/qwen3.h, probe
// role `qwen3`) are in; a Z-Image transformer file is recognised and refused with what is missing.
#pragma once

#include "families/family.h"

namespace fp8s {

FamilyEntry zimage_family_entry();

}  // namespace fp8s

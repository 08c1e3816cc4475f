// Z-Image Turbo (Tongyi-MAI's single-stream DiT with a Qwen3-4B text encoder and the Flux.1
// autoencoder) as a model family (pipeline/family.h): the Qwen tokenizer (text/qwen_tokenizer.h),
// the Qwen3 text encoder (models/lm/decoder_lm.h, probe role `qwen3`), the transformer
// (families/zimage/zimage_transformer.h, probe role `zimage`), its sampling
// (families/zimage/zimage_sampling.h) and the family's generation (families/zimage/zimage_model.cpp).
#pragma once

#include "pipeline/family.h"

namespace fp8s {

FamilyEntry zimage_family_entry();

}  // namespace fp8s

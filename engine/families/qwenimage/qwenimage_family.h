// Qwen-Image (Alibaba Qwen's 20 B MMDiT, and Qwen-Image-2512) as a model family (pipeline/family.h):
// the transformer (families/qwenimage/qwenimage_transformer.h, probe role `qwenimage`), Qwen2.5-VL's
// language model as its text encoder (qwenimage_text.h, `qwen25vl`), the Wan 2.1 autoencoder on one
// frame (qwenimage_vae.h, `qwen-vae-decode` / `qwen-vae-encode`), its sampling (qwenimage_sampling.h,
// `qwenimage-sample`) and the family's generation (qwenimage_model.h).
#pragma once

#include "pipeline/family.h"

namespace fp8s {

FamilyEntry qwenimage_family_entry();

}  // namespace fp8s

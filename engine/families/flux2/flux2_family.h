// FLUX.2 ([klein] 4B/9B on Qwen3, [dev] 32B on Mistral Small 3.2) as a model family
// (pipeline/family.h; ../shared/reference/flux2/README.md): detected from its header; klein and
// dev generate (families/flux2/flux2_model.h). Probe roles: the text encoders (`flux2-qwen3`,
// `flux2-mistral`: models/lm/decoder_lm.h with FLUX.2's hidden states), the transformer (`flux2`,
// models/flux2/flux2.h), the loop (`flux2-sample`, flux2_sampling.h) and the autoencoder
// (`flux2-vae-decode`, `flux2-vae-encode`, flux2_ae.h). Not yet (issue 57): streaming, LoRAs.
#pragma once

#include "pipeline/family.h"

namespace fp8s {

FamilyEntry flux2_family_entry();

}  // namespace fp8s

// FLUX.2 ([klein] 4B/9B on Qwen3, [dev] 32B on Mistral Small 3.2) as a model family
// (pipeline/family.h; ../shared/reference/flux2/README.md): recognised from its header, with the
// reference probes of what is built so far. Built: the text encoders (probe roles `flux2-qwen3`,
// `flux2-mistral`: models/lm/decoder_lm.h with FLUX.2's hidden states) and the transformer (`flux2`,
// models/flux2/flux2.h). Not yet: the autoencoder, sampling and generation (issue 57); a load names
// what is missing.
#pragma once

#include "pipeline/family.h"

namespace fp8s {

FamilyEntry flux2_family_entry();

}  // namespace fp8s

// Prompt -> conditioning, as A1111 builds it: <lora:> tags removed, 75-token chunks with emphasis
// (each chunk encoded, weighted, its mean restored), the shorter of prompt and negative padded with
// empty-prompt chunks; SDXL adds CLIP-G (zero-padded after EOS), the pooled output and the ADM
// vector of size conditioning.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "pipeline/request.h"

namespace fp8s {

class Model;
class ClipTokenizer;
struct TextualInversion;

// Every tensor is repeated to the request's batch size; y_* are undefined for SD1.
struct Conditioning {
  at::Tensor cond, uncond;      // [B, 77 * chunks, D]
  at::Tensor y_cond, y_uncond;  // SDXL: [B, adm_in_channels]
};

// `prompt`/`negative` without their <lora:...> tags. `width`/`height`: the image size the SDXL
// size conditioning defaults to.
// `embeddings`: the textual inversions whose names the prompts may use.
// SDXL's settings: the size conditioning (sgm's original_size_as_tuple, crop_coords_top_left,
// target_size_as_tuple) and the unconditional branch (sgm's force_zero_embeddings).
std::vector<FamilyOption> sdxl_options();

Conditioning encode_conditioning(const Model& model, const ClipTokenizer& tokenizer, const std::string& prompt,
                                 const std::string& negative, const GenerationRequest& request, int width,
                                 int height, const std::vector<const TextualInversion*>& embeddings = {});

}  // namespace fp8s

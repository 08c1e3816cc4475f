// Where Mistral's Tekken tokenizer comes from: a tekken.json (or .gz, or the folder holding it), or
// a text encoder file that carries it as the U8 tensor `tekken_model` (ComfyUI's
// mistral_3_small_flux2_*.safetensors). LibTorch-free.
#pragma once

#include <string>

#include "text/tekken_tokenizer.h"

namespace fp8s {

TekkenTokenizer load_tekken(const std::string& path);

}  // namespace fp8s

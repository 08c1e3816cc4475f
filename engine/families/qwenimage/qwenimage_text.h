// Qwen-Image's text side (../shared/reference/qwenimage/README.md, "qwen25vl" and "The prompt
// template"): Qwen2.5-VL-7B's language model as a DecoderLm (q/k/v biases, no q/k norms, θ 1e6, the
// last hidden state after the final norm; the vision tower and lm_head are not loaded), the prompt
// template, and the pipeline's prompt embeddings (the template's first 34 rows dropped).
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <utility>

#include "io/safetensors.h"
#include "models/lm/decoder_lm.h"

namespace fp8s {

// The template's rows dropped after encoding: the system turn and "<|im_start|>user\n".
constexpr int kQwenImageTemplateDrop = 34;

// The language model's configuration off `file` (its `model.*` names): sizes from the shapes, head
// count, eps and θ from `qwen25vl.config` (the tiny files: {"text": {...}}) or a folder's
// config.json, else Qwen2.5-VL-7B's. InputError naming the file when it is not such a model.
DecoderLmConfig qwen25vl_config(const SafetensorsFile& file);
// The prompt in Qwen-Image's template (a system turn describing the image, the user's prompt, the
// assistant's turn opened).
std::string qwenimage_template(const std::string& prompt);
// QwenImagePipeline's prompt embeddings from the encoder's `hidden` [B, L, D] and `mask` [B, L]: each
// item's real rows with the first 34 dropped, zero-padded to the longest, cut to `max_rows`; with
// the mask of the kept rows [B, Le] (int64).
std::pair<at::Tensor, at::Tensor> qwenimage_prompt_embeds(const at::Tensor& hidden, const at::Tensor& mask, int64_t max_rows);

}  // namespace fp8s

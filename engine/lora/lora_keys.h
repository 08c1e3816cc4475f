// LoRA files by their tensor names and shapes only, before any data is read: grouping the tensors into
// modules (kohya, LoCon, diffusers/PEFT names), refusing unsupported kinds and malformed modules, and
// mapping module names onto checkpoint keys with their shapes checked. No LibTorch: the fuzz target
// for LoRA key mapping links this alone.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/safetensors.h"
#include "models/architecture.h"

namespace fp8s {

// One LoRA module as the file lays it out.
struct LoraModuleLayout {
  std::string name;  // kohya name: lora_unet_..., lora_te_..., lora_te1_..., lora_te2_...
  TensorRecord down;                  // [r, in] or [r, in, kh, kw]
  TensorRecord up;                    // [out, r] or [out, r, 1, 1]
  std::optional<TensorRecord> alpha;  // one number; absent: alpha = rank
  int64_t rank() const { return down.shape.at(0); }
};

// Groups a LoRA file's tensors into modules, sorted by name. Tensors that belong to no LoRA module
// are ignored. Throws InputError (naming `label`, the module and the problem) for LyCORIS kinds we do
// not support (LoHa, LoKr, OFT, DoRA, ...), a module without its down or up factor, factors that are
// not 2-D or 4-D floats, ranks that disagree or are zero, an alpha that is not one float, and a file
// with no module at all.
std::vector<LoraModuleLayout> lora_modules(const std::vector<TensorRecord>& tensors, const std::string& label);

// kohya module name -> checkpoint weight key, for every Linear/Conv2d of `config`'s UNet and text
// encoders (SD1: lora_unet_*, lora_te_*; SDXL: lora_te1_*, lora_te2_*). A key "<name>#q|k|v" is a
// third of open_clip's fused in_proj. Diffusers/PEFT names are translated by `kohya_name_of`.
std::map<std::string, std::string> lora_key_map(const ModelConfig& config);
std::string kohya_name_of(const std::string& lora_key_stem);

// The diffusers module path of an ldm UNet module path (e.g. input_blocks.1.0.in_layers.2 ->
// down_blocks.0.resnets.0.conv1), given the config's num_res_blocks; "" when it has none.
std::string ldm_to_diffusers_unet(const std::string& ldm_module, const UNetConfig& config);

// Modules resolved against a model: (index into the modules, checkpoint key), and unmatched names.
struct LoraLayoutPlan {
  std::vector<std::pair<std::size_t, std::string>> targets;
  std::vector<std::string> unmatched;
};

// A target's rows: "<key>" the whole weight; "<key>#q|k|v" a third of a fused q/k/v weight;
// "<key>#rows:START:COUNT" rows [START, START + COUNT) (diffusers' names for slices of BFL's fused
// Flux layers); "<key>#swap" the whole weight with its two row halves swapped (diffusers' norm_out
// is (scale, shift), BFL's final adaLN (shift, scale)). `weight_rows`: the weight's first dimension.
struct LoraTargetRows {
  std::string key;
  int64_t start = 0, count = 0;
  bool swap_halves = false;
};
LoraTargetRows lora_target_rows(const std::string& target, int64_t weight_rows);

// The families' key maps: kohya's spelling of a module path ("a.b.c" -> "a_b_c"); the target of rows
// [start, start + count) of `key`; the indices N of the keys "<head>N<tail>".
std::string lora_underscored(std::string module);
std::string lora_rows_target(const std::string& key, int64_t start, int64_t count);
std::vector<int> lora_block_indices(const std::map<std::string, std::vector<int64_t>>& keys, const std::string& head,
                                    const std::string& tail);
// The refusal of a LoRA whose modules miss the model's denoiser: "LABEL: this LoRA (base model B)
// does not fit the loaded MODEL model: HITS of N modules match its transformer; use a LoRA trained
// for MODEL" (B from the kohya metadata, else "unknown").
[[noreturn]] void refuse_lora_for_model(const std::string& label, const std::map<std::string, std::string>& metadata,
                                        const std::string& model, std::size_t hits, std::size_t modules);

// Every module whose name `map` knows, with its target; the others unmatched. No checks.
LoraLayoutPlan match_lora_modules(const std::vector<LoraModuleLayout>& modules,
                                  const std::map<std::string, std::string>& map);
// Throws InputError (naming the module and both shapes) when a matched module's factors do not fit
// its target's rows of the weight (`shapes`: key -> weight shape).
void check_lora_shapes(const LoraLayoutPlan& plan, const std::vector<LoraModuleLayout>& modules,
                       const std::map<std::string, std::vector<int64_t>>& shapes, const std::string& label);

// Throws InputError when the LoRA was made for another architecture, nothing matches, or a matched
// module's factors do not fit its layer's weight (the message names the module and both shapes).
LoraLayoutPlan plan_lora_layout(const std::vector<LoraModuleLayout>& modules,
                                const std::map<std::string, std::string>& metadata,
                                const ModelConfig& config, const std::string& label);

}  // namespace fp8s

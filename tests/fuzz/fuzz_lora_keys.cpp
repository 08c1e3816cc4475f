// libFuzzer target: LoRA key mapping. The input is a list of tensors, one per line,
// "NAME DTYPE DIM DIM ...", as a LoRA file's header would give them; the modules they form are
// mapped onto the tiny SD1 and tiny SDXL layouts (the real ones' key patterns) and a Z-Image
// transformer's (one layer of the tiny reference's shapes) with shapes checked.
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#include "core/error.h"
#include "families/zimage/zimage_lora_keys.h"
#include "lora/lora_keys.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  std::vector<fp8s::TensorRecord> tensors;
  for (std::string line; std::getline(in, line) && tensors.size() < 4096;) {
    std::istringstream fields(line);
    fp8s::TensorRecord t;
    std::string dtype;
    if (!(fields >> t.name >> dtype)) continue;
    t.dtype = fp8s::parse_dtype(dtype).value_or(fp8s::Dtype::F16);
    for (int64_t d; t.shape.size() < 8 && fields >> d;) t.shape.push_back(d);
    tensors.push_back(t);
    fp8s::kohya_name_of(t.name);
  }
  static const fp8s::ModelConfig configs[] = {fp8s::preset_tiny_sd1(), fp8s::preset_tiny_sdxl()};
  try {
    const auto modules = fp8s::lora_modules(tensors, "fuzz");
    for (const auto& m : modules) {
      if (m.rank() < 1 || (m.down.shape.size() != 2 && m.down.shape.size() != 4)) std::abort();
    }
    for (const auto& c : configs) {
      try {
        const auto plan = fp8s::plan_lora_layout(modules, {}, c, "fuzz");
        if (plan.targets.size() + plan.unmatched.size() != modules.size()) std::abort();
      } catch (const fp8s::InputError&) {
      }
    }
    static const std::map<std::string, std::vector<int64_t>> zimage{
        {"layers.0.attention.qkv.weight", {192, 64}},   {"layers.0.attention.out.weight", {64, 64}},
        {"layers.0.feed_forward.w1.weight", {170, 64}}, {"layers.0.feed_forward.w2.weight", {64, 170}},
        {"layers.0.adaLN_modulation.0.weight", {256, 64}}, {"x_embedder.weight", {64, 64}},
        {"final_layer.linear.weight", {64, 64}}};
    try {
      const auto plan = fp8s::plan_zimage_lora_layout(modules, {}, zimage, "fuzz");
      if (plan.targets.empty() || plan.targets.size() + plan.unmatched.size() != modules.size()) std::abort();
    } catch (const fp8s::InputError&) {
    }
  } catch (const fp8s::InputError&) {
  }
  for (const auto& t : tensors) fp8s::ldm_to_diffusers_unet(t.name, configs[0].unet);
  return 0;
}

#include "lora/lora.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/logging.h"
#include "io/safetensors.h"
#include "models/flux/flux_files.h"
#include "models/nn.h"

namespace fp8s {
at::Tensor LoraModule::delta(double multiplier, at::IntArrayRef shape) const {
  const double scale = multiplier * alpha / static_cast<double>(rank());
  return at::matmul(up.flatten(1), down.flatten(1)).reshape(shape) * scale;
}

LoraFile read_lora(const std::string& path) {
  SafetensorsFile file(path);
  LoraFile lora;
  lora.path = path;
  lora.metadata = file.metadata();
  for (const auto& layout : lora_modules(file.tensors(), path)) {
    LoraModule m;
    m.name = layout.name;
    m.down = read_tensor(file, layout.down).to(at::kFloat);
    m.up = read_tensor(file, layout.up).to(at::kFloat);
    for (const auto* factor : {&m.down, &m.up}) {  // a NaN here would make every picture one colour
      if (!at::isfinite(*factor).all().item<bool>()) {
        throw InputError(path + ": LoRA module '" + m.name + "' holds NaN or Inf in its " + (factor == &m.down ? "down" : "up") +
                         " factor (the file is damaged: use a copy from its source)");
      }
    }
    m.alpha = static_cast<double>(m.rank());
    if (layout.alpha) {
      m.alpha = read_tensor(file, *layout.alpha).to(at::kDouble).reshape({}).item<double>();
      if (!std::isfinite(m.alpha)) throw InputError(path + ": LoRA module '" + m.name + "' has a non-finite alpha");
      if (m.alpha == 0) m.alpha = static_cast<double>(m.rank());
    }
    lora.modules.push_back(std::move(m));
  }
  return lora;
}

LoraPlan plan_lora(const LoraFile& lora, const ModelConfig& config) {
  return plan_lora_with(lora, [&](const std::vector<LoraModuleLayout>& layouts) {
    return plan_lora_layout(layouts, lora.metadata, config, lora.path);
  });
}

LoraPlan plan_lora_with(const LoraFile& lora, const std::function<LoraLayoutPlan(const std::vector<LoraModuleLayout>&)>& plan_layout) {
  std::vector<LoraModuleLayout> layouts;
  layouts.reserve(lora.modules.size());
  for (const auto& m : lora.modules) {
    LoraModuleLayout l;
    l.name = m.name;
    l.down.shape = m.down.sizes().vec();
    l.up.shape = m.up.sizes().vec();
    layouts.push_back(std::move(l));
  }
  const auto layout_plan = plan_layout(layouts);
  LoraPlan plan;
  for (const auto& [i, key] : layout_plan.targets) plan.targets.push_back({&lora.modules[i], key});
  plan.unmatched = layout_plan.unmatched;
  if (!plan.unmatched.empty()) {
    std::string first;
    for (std::size_t i = 0; i < std::min<std::size_t>(3, plan.unmatched.size()); ++i) first += (i ? ", " : "") + plan.unmatched[i];
    log().warn("{}: {} of {} LoRA modules match no layer and are ignored (first: {})", lora.path,
               plan.unmatched.size(), lora.modules.size(), first);
  }
  return plan;
}

void make_synthetic_lora(const ModelConfig& config, int rank, double alpha, double strength,
                         uint64_t seed, const std::string& out, bool overwrite) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& e : checkpoint_layout(config, Dtype::F16)) shapes[e.name] = e.shape;
  std::vector<std::pair<std::string, std::vector<int64_t>>> modules;
  for (const auto& [name, key] : lora_key_map(config)) {
    if (key.find('#') != std::string::npos || name.find("time_embedding") != std::string::npos ||
        name.find("add_embedding") != std::string::npos) {
      continue;
    }
    modules.push_back({name, shapes.at(key)});
  }
  const bool sdxl = config.text_encoders.size() > 1;
  write_synthetic_lora(modules, rank, alpha, strength, seed, sdxl ? "sdxl_base_v1-0" : "sd_v1", out, overwrite);
}

void make_synthetic_flux_lora(const std::string& transformer, int rank, double alpha, double strength, uint64_t seed,
                              const std::string& out, bool overwrite) {
  const SafetensorsFile f(transformer);
  const auto parts = flux_contents(f);
  if (!parts.transformer) throw InputError(transformer + ": not a Flux transformer (no double_blocks.*)");
  const std::string& prefix = *parts.transformer;
  std::vector<std::pair<std::string, std::vector<int64_t>>> modules;
  for (const auto& t : f.tensors()) {
    if (t.name.compare(0, prefix.size(), prefix) != 0 || t.shape.size() != 2 || t.name.size() < 7 ||
        t.name.compare(t.name.size() - 7, 7, ".weight") != 0) {
      continue;
    }
    std::string module = t.name.substr(prefix.size(), t.name.size() - prefix.size() - 7);
    std::replace(module.begin(), module.end(), '.', '_');
    modules.push_back({"lora_unet_" + module, t.shape});  // kohya's names for BFL's layers
  }
  std::sort(modules.begin(), modules.end());
  write_synthetic_lora(modules, rank, alpha, strength, seed, parts.dev ? "flux1_dev" : "flux1_schnell", out, overwrite);
}

void write_synthetic_lora(const std::vector<std::pair<std::string, std::vector<int64_t>>>& modules, int rank,
                          double alpha, double strength, uint64_t seed, const std::string& base_model,
                          const std::string& out, bool overwrite) {
  if (rank < 1 || rank > 1024) throw InputError("--rank must be between 1 and 1024");
  std::vector<TensorSpec> specs;
  for (const auto& [name, w] : modules) {
    std::vector<int64_t> down{rank, w[1]}, up{w[0], rank};
    if (w.size() == 4) {
      down = {rank, w[1], w[2], w[3]};
      up = {w[0], rank, 1, 1};
    }
    specs.push_back({name + ".alpha", Dtype::F16, {}});
    specs.push_back({name + ".lora_down.weight", Dtype::F16, down});
    specs.push_back({name + ".lora_up.weight", Dtype::F16, up});
  }
  std::map<std::string, std::string> meta{{"ss_network_dim", std::to_string(rank)},
                                          {"ss_network_alpha", std::to_string(alpha)},
                                          {"ss_network_module", "networks.lora"},
                                          {"ss_base_model_version", base_model},
                                          {"ss_tag_frequency", "{\"synthetic\": {\"fp8studio\": 1}}"}};
  SafetensorsWriter writer(out, specs, meta, overwrite);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto write_half = [&](const at::Tensor& t) {
    auto h = t.to(at::kHalf).contiguous();
    writer.append(h.data_ptr(), static_cast<std::size_t>(h.numel()) * 2);
  };
  for (const auto& [name, w] : modules) {
    int64_t fan_in = 1;
    for (std::size_t i = 1; i < w.size(); ++i) fan_in *= w[i];
    write_half(at::full({}, alpha, at::kFloat));
    // var(down) = 1/fan_in; var(ΔW) = rank · var(up) · var(down) · (alpha/rank)² = strength²/fan_in
    const double down_bound = std::sqrt(3.0 / fan_in);
    const double up_std = strength * rank / alpha / std::sqrt(static_cast<double>(rank));
    std::vector<int64_t> down_shape{rank, w[1]}, up_shape{w[0], rank};
    if (w.size() == 4) down_shape = {rank, w[1], w[2], w[3]}, up_shape = {w[0], rank, 1, 1};
    write_half((at::rand(down_shape, gen) * 2 - 1) * down_bound);
    write_half((at::rand(up_shape, gen) * 2 - 1) * (up_std * std::sqrt(3.0)));
  }
  writer.commit();
}

}  // namespace fp8s

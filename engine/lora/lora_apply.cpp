#include "lora/lora_apply.h"

#include <algorithm>

#include "lora/lora.h"
#include "lora/lora_keys.h"
#include "models/nn.h"

namespace fp8s {

namespace {

class OnlineLoraTerm : public OutputTerm {
 public:
  explicit OnlineLoraTerm(LoraFactor f) : f_(std::move(f)) {}

  at::Tensor add_to(const at::Tensor& y, const at::Tensor& x, std::optional<ConvGeometry> conv) const override {
    const auto t = x.scalar_type();
    if (!conv) return y + at::linear(at::linear(x, f_.down.flatten(1).to(x.device(), t)), f_.up.flatten(1).to(x.device(), t)) * f_.scale;
    // down has the layer's kernel (LoCon) or is 1x1 on a 1x1 layer
    const int64_t k = f_.down.dim() == 4 ? f_.down.size(2) : 1;
    const int64_t pad = k == 1 ? 0 : conv->padding;
    const auto down = f_.down.dim() == 4 ? f_.down : f_.down.unsqueeze(-1).unsqueeze(-1);
    const auto h = at::conv2d(x, down.to(x.device(), t), {}, {conv->stride, conv->stride}, {pad, pad});
    const auto up = f_.up.dim() == 4 ? f_.up : f_.up.unsqueeze(-1).unsqueeze(-1);
    return y + at::conv2d(h, up.to(x.device(), t)) * f_.scale;
  }

 private:
  LoraFactor f_;
};

}  // namespace

LoraMode effective_lora_mode(LoraMode mode, const StorageSpec& storage) {
  if (mode != LoraMode::Auto) return mode;
  return is_quantised(storage.weights) ? LoraMode::Online : LoraMode::Merge;
}

LoraFactor lora_factor_for(const LoraModule& module, const std::string& target, int64_t weight_rows, double multiplier) {
  const auto rows = lora_target_rows(target, weight_rows);
  at::Tensor up = module.up;
  if (rows.count != weight_rows) {
    up = at::zeros({weight_rows, module.rank()}, at::kFloat);
    up.narrow(0, rows.start, rows.count).copy_(module.up.flatten(1));
  } else if (rows.swap_halves) {
    const auto flat = module.up.flatten(1);
    const int64_t half = weight_rows / 2;
    up = at::cat({flat.narrow(0, half, weight_rows - half), flat.narrow(0, 0, half)});
  }
  return {module.down, up, multiplier * module.alpha / module.rank()};
}

void add_online_lora(QuantisedLayer& layer, const LoraFactor& factor) {
  const auto device = layer.store.weight.device();
  layer.terms.push_back(std::make_shared<OnlineLoraTerm>(LoraFactor{factor.down.to(device), factor.up.to(device), factor.scale}));
}

bool clear_online_loras(QuantisedLayer& layer) {
  const auto before = layer.terms.size();
  layer.terms.erase(std::remove_if(layer.terms.begin(), layer.terms.end(),
                                   [](const auto& t) { return dynamic_cast<const OnlineLoraTerm*>(t.get()) != nullptr; }),
                    layer.terms.end());
  return layer.terms.size() != before;
}

void merge_loras(QuantisedLayer& layer, const std::vector<LoraFactor>& factors, const StorageSpec& storage,
                 std::optional<uint64_t> stochastic_seed) {
  at::Tensor w = layer.store.decode(at::kFloat).clone();
  for (const auto& f : factors) {
    w.add_(at::matmul(f.up.flatten(1).to(w.device()), f.down.flatten(1).to(w.device())).reshape(w.sizes()), f.scale);
  }
  store_layer_weight(layer, w, storage, stochastic_seed);
}

void merge_lora_sets(const std::map<std::string, std::vector<LoraFactor>>& merged,
                     const std::map<std::string, QuantisedLayer*>& layers, const StorageSpec& storage, LoraMode mode,
                     std::vector<std::string>& touched) {
  for (const auto& [key, factors] : merged) {
    QuantisedLayer& layer = *layers.at(key);
    touched.push_back(key);
    if (layer.store.blocks) {  // a comfy_quant int8/mxfp8/nvfp4/4-bit layer keeps its stored bytes: its LoRA runs online
      for (const auto& f : factors) add_online_lora(layer, f);
      continue;
    }
    std::optional<uint64_t> seed;
    if (mode == LoraMode::MergeStochastic) seed = std::hash<std::string>{}(key);  // fixed per tensor
    merge_loras(layer, factors, storage, seed);
  }
}

}  // namespace fp8s

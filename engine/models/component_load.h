// A model component's module loaded from its file (a family's transformer, text encoder or
// autoencoder): built on the device, filled tensor by tensor, timed; or, under a weight budget,
// planned (models/streaming.h) with its resident blocks loaded and the others staged by a transport.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <algorithm>
#include <optional>

#include "core/error.h"
#include "models/checkpoint_layout.h"
#include "models/flux/flux_files.h"
#include "models/nn.h"

namespace fp8s {

// A "diff" file's module (a ControlNet stored as differences to SD 1.5's UNet, as ComfyUI and
// A1111 read it), after load_module_weights: every parameter that `base` holds under `base_prefix`
// + its name with the same shape becomes the file's value plus the base's, summed in FP32 and
// stored as the load stored it (FP8 layers quantised from the sum). Returns how many it changed.
int add_base_tensors(torch::nn::Module& module, const SafetensorsFile& file, const std::string& prefix,
                     const SafetensorsFile& base, const std::string& base_prefix, const StorageSpec& storage,
                     const at::Device& device);

// One component loaded from its file: `make(file, prefix)` builds the module on `device`, the
// loader fills it (every Linear quantisable when `quantise`), the time is added to `ms`.
template <class Make>
auto load_component(const ComponentSource& c, const std::string& missing, const StorageSpec& storage, bool quantise,
                    const std::vector<std::string>& ignorable, const at::Device& device, uint64_t& bytes, double& ms,
                    Make make) {
  if (!c.found()) throw InputError(missing);
  const auto start = std::chrono::steady_clock::now();
  const SafetensorsFile f(c.path);
  const BuildOn on(device);
  auto m = make(f, c.prefix);
  bytes = load_module_weights(*m, f, c.prefix, storage, quantise, ignorable, {}, device, true).bytes;
  ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return m;
}

// A component whose blocks (Flux's double and single blocks, T5's layers) stream under `budget`
// (models/streaming.h): planned from the header, the layers outside the blocks and the resident
// blocks loaded, the streamed ones staged by the transport from the file, which stays open.
template <class Make>
auto load_streamed(const ComponentSource& c, const std::string& missing, const StorageSpec& storage,
                   const std::vector<std::string>& ignorable, const at::Device& device, uint64_t budget, uint64_t& bytes,
                   double& ms, NetworkStreaming& streaming, Make make) {
  if (!c.found()) throw InputError(missing);
  const auto start = std::chrono::steady_clock::now();
  streaming.clear();
  auto file = std::make_shared<SafetensorsFile>(c.path);
  const BuildOn on(device);
  auto m = make(*file, c.prefix);
  streaming.plan = plan_network(*m, m->blocks(), *file, c.prefix, storage, true, true, budget);
  bytes = load_module_weights(*m, *file, c.prefix, storage, true, ignorable, {}, device, true, streamed_prefixes(streaming.plan)).bytes;
  file->release_mapping();
  if (streaming.plan.any()) {
    streaming.streamer = network_streamer(streaming.plan, m->blocks(), *file, c.prefix, storage, true, true, device);
    m->set_block_hooks(streaming.streamer.get());
    streaming.file = file;
  }
  ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return m;
}

// The layout `module`'s parameters make as a released file (make-synthetic): each name under
// `prefix` with its shape, role and type: `dtype` when given (FP8: the 2-D weights only, the rest
// `base`), else `base`. Sorted by name.
inline std::vector<LayoutEntry> module_layout(torch::nn::Module& m, Dtype base, std::optional<Dtype> dtype,
                                              const std::string& prefix = "") {
  const bool fp8 = dtype && is_fp8_dtype(*dtype);
  const Dtype floats = dtype && !fp8 ? *dtype : base;
  std::vector<LayoutEntry> out;
  for (const auto& item : m.named_parameters(true)) {
    const std::string& name = item.key();
    LayoutEntry e;
    e.name = prefix + name;
    e.shape = item.value().sizes().vec();
    const bool embedding = name.find("embedding") != std::string::npos || name == "shared.weight" ||
                           name.find("embed_tokens") != std::string::npos ||
                           name.find("relative_attention_bias") != std::string::npos;
    const bool ends_weight = name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
    const bool ends_bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (embedding) e.role = TensorRole::Embedding;
    else if (ends_bias) e.role = e.shape.size() == 1 && name.find("norm") != std::string::npos ? TensorRole::NormBias : TensorRole::Bias;
    else if (ends_weight && e.shape.size() == 2) e.role = TensorRole::LinearWeight;
    else if (ends_weight && e.shape.size() == 4) e.role = TensorRole::ConvWeight;
    else e.role = TensorRole::NormWeight;  // norm weights and RMS scales
    e.dtype = fp8 && e.role == TensorRole::LinearWeight ? *dtype : floats;
    out.push_back(std::move(e));
  }
  std::sort(out.begin(), out.end(), [](const LayoutEntry& a, const LayoutEntry& b) { return a.name < b.name; });
  return out;
}

}  // namespace fp8s

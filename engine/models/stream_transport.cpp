// The weight budget's side of the loader (models/nn.h, "streaming"): a network's residency plan
// from the file's header, a streamed block's layers staged and released, and the two transports
// (from the file, or from host memory to a device) behind BlockStreamer.
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <cstdlib>
#include <memory>

#include "backend/backend.h"
#include "backend/kernel_options.h"
#include "core/error.h"
#include "core/logging.h"
#include "memory/host_pinning.h"
#include "memory/process_memory.h"
#include "models/fp8_files.h"
#include "models/loader_detail.h"
#include "models/nn.h"

namespace fp8s {

using detail::quantised_layers;
using detail::quantises;


uint64_t load_block_layers(torch::nn::Module& block, const SafetensorsFile& file, const std::string& prefix,
                           const StorageSpec& storage, bool quantise_component, bool every_layer,
                           const at::Device& device) {
  file.check_unchanged();
  uint64_t read = 0;
  for (const auto& [name, layer] : quantised_layers(block)) {
    const std::string key = prefix + name;
    const TensorRecord& rec = file.at(key);
    load_layer_weight(*layer, file, key, storage, quantises(key, rec, quantise_component, every_layer), device);
    read += rec.nbytes();
    file.drop_cached_pages(rec);
  }
  return read;
}

ResidencyPlan plan_network(torch::nn::Module& network, const std::vector<NetworkBlock>& blocks,
                           const SafetensorsFile& file, const std::string& prefix, const StorageSpec& storage,
                           bool quantise_component, bool every_layer, uint64_t budget) {
  std::vector<BlockCost> costs;
  uint64_t in_blocks = 0;
  for (const auto& b : blocks) {
    costs.push_back({b.name, block_layer_bytes(*b.module, file, prefix + b.name + ".", storage, quantise_component, every_layer),
                     b.compute_per_byte});
    in_blocks += costs.back().bytes;
  }
  const uint64_t outside = block_layer_bytes(network, file, prefix, storage, quantise_component, every_layer) - in_blocks;
  return plan_residency(costs, budget, outside);
}

std::vector<std::string> streamed_prefixes(const ResidencyPlan& plan) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < plan.blocks.size(); ++i) {
    if (plan.streamed[i]) out.push_back(plan.blocks[i].name + ".");
  }
  return out;
}

namespace {

// A streamed layer as the host transport holds it: its stored weight (values, or FP8 codes as
// uint8: one byte a weight) and scale in host memory, page-locked in place when the device is a GPU
// (up to the pinning cap: memory/host_pinning.h).
struct HostLayer {
  QuantisedLayer* layer = nullptr;
  at::Tensor weight, scale;
  bool fp8 = false;
  Fp8Format format = Fp8Format::E4M3FN;
  std::shared_ptr<const BlockWeight> blocks;  // a comfy_quant block layer: kept in host memory, decoded there
};

// The host transport (ComfyUI's async offload, Forge's swap): each streamed block is read from the
// file once, at load, into host memory; entering it copies its layers to the device on a copy
// stream (non-blocking from pinned memory), which the reader thread waits on before the block is
// ready, so the compute stream never sees a partial copy. Leaving it records the compute stream on
// the device copies before they are dropped: the caching allocator reuses their memory only after
// the block's kernels ran.
class HostTransport {
 public:
  HostTransport(const ResidencyPlan& plan, const std::vector<NetworkBlock>& blocks, const SafetensorsFile& file,
                const std::string& prefix, const StorageSpec& storage, bool quantise_component, bool every_layer,
                const at::Device& device)
      : device_(device), layers_(blocks.size()) {
    const bool pin = device.is_cuda();
    if (pin) pinning_ = std::make_unique<HostPinning>(default_pin_cap(), backend::register_host_memory, backend::unregister_host_memory);
    // read as load_module_weights stores them, unpacked: a CPU device packs at staging
    backend::KernelOptions unpacked = backend::current_kernel_options();
    unpacked.packed_conv = false;
    const backend::KernelScope scope(unpacked);
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      if (!plan.streamed[i]) continue;
      auto& module = *blocks[i].module;
      load_block_layers(module, file, prefix + blocks[i].name + ".", storage, quantise_component, every_layer, at::kCPU);
      for (const auto& [name, layer] : quantised_layers(module)) {
        const WeightStore& st = layer->store;
        // a new tensor over the same memory (release_block_layers resets the layer's own in place);
        // a GPU keeps weights in their logical (contiguous) order, as a load onto it places them
        // (detached: a handle of its own, which release_block_layers' set_data leaves alone)
        const at::Tensor w = (device.is_cpu() || st.blocks ? st.weight : st.weight.contiguous()).detach();
        const at::Tensor scale = st.scale.defined() ? st.scale.detach() : at::Tensor();
        HostLayer h{layer, w, scale, st.fp8, st.format, st.blocks};
        if (pin && !st.blocks) {  // registered byte for byte where it lies (the scale is a few bytes: copied as it is)
          pinning_->pin(h.weight.data_ptr(), h.weight.nbytes());
        }
        host_bytes_ += st.blocks ? st.blocks->bytes() : h.weight.nbytes() + (h.scale.defined() ? h.scale.nbytes() : 0);
        if (st.input_scale.defined()) layer->store.input_scale = st.input_scale.to(device);
        layers_[i].push_back(std::move(h));
      }
      release_block_layers(module);
    }
    if (pinning_ && !pinning_->fallback().empty()) {
      log().warn("streaming: {:.2f} GB of the streamed weights page-locked, {:.2f} GB left pageable ({}; the cap is "
                 "{:.2f} GB, FP8S_PIN_LIMIT sets it): their copies to the GPU are slower",
                 pinning_->pinned_bytes() / 1e9, pinning_->pageable_bytes() / 1e9, pinning_->fallback(), pinning_->cap() / 1e9);
    }
    if (!device.is_cpu()) {
      const c10::impl::VirtualGuardImpl impl(device.type());
      copy_stream_ = impl.getStreamFromGlobalPool(device, false);
    }
  }

  uint64_t stage(int i) {  // on the reader thread
    std::optional<c10::StreamGuard> on_copy_stream;
    if (copy_stream_) on_copy_stream.emplace(*copy_stream_);
    uint64_t bytes = 0;
    for (const HostLayer& h : layers_[static_cast<std::size_t>(i)]) {
      const at::Tensor scale = h.scale.defined() ? h.scale.to(device_, /*non_blocking=*/true) : at::Tensor();
      if (h.blocks) {  // its placeholder on the device, its stored blocks in host memory
        WeightStore& st = h.layer->store;
        st.weight.set_data(at::empty({1}, st.weight.options().device(device_)).expand(st.weight.sizes()));
        st.blocks = h.blocks;
        continue;
      }
      h.layer->place(h.weight.to(device_, /*non_blocking=*/true), h.fp8, h.format, scale, device_);
      bytes += h.weight.nbytes() + (h.scale.defined() ? h.scale.nbytes() : 0);
    }
    if (copy_stream_) copy_stream_->synchronize();  // the block is complete before the compute sees it
    return bytes;
  }

  void release(int i, torch::nn::Module& module) {  // on the compute thread
    if (copy_stream_) {
      const c10::impl::VirtualGuardImpl impl(device_.type());
      const c10::Stream compute = impl.getStream(device_);
      for (const HostLayer& h : layers_[static_cast<std::size_t>(i)]) {
        const WeightStore& st = h.layer->store;
        if (st.weight.defined() && st.weight.device() == device_) st.weight.record_stream(compute);
        if (st.scale.defined() && st.scale.device() == device_) st.scale.record_stream(compute);
      }
    }
    release_block_layers(module, /*trim=*/device_.is_cpu());
  }

  uint64_t host_bytes() const { return host_bytes_; }
  uint64_t pinned_bytes() const { return pinning_ ? pinning_->pinned_bytes() : 0; }

 private:
  at::Device device_;
  std::vector<std::vector<HostLayer>> layers_;  // per block (streamed ones only)
  std::unique_ptr<HostPinning> pinning_;  // after layers_: unregistered before their memory is freed
  std::optional<c10::Stream> copy_stream_;
  uint64_t host_bytes_ = 0;
};

}  // namespace

StreamTransport stream_transport(const at::Device& device) {
  if (const char* e = std::getenv("FP8S_STREAM_TRANSPORT"); e && *e) {
    const std::string v = e;
    if (v == "file") return StreamTransport::File;
    if (v == "host") return StreamTransport::Host;
    throw InputError("FP8S_STREAM_TRANSPORT='" + v + "': use file (read each pass from the model file) or host (held in host memory, copied to the device)");
  }
  return device.is_cpu() ? StreamTransport::File : StreamTransport::Host;
}

std::unique_ptr<BlockStreamer> network_streamer(const ResidencyPlan& plan, const std::vector<NetworkBlock>& blocks,
                                                const SafetensorsFile& file, const std::string& prefix,
                                                const StorageSpec& storage, bool quantise_component, bool every_layer,
                                                const at::Device& device) {
  // the reader thread stages with the engine's kernel options (packing), as the load did
  const backend::KernelOptions kernels = backend::current_kernel_options();
  if (stream_transport(device) == StreamTransport::Host) {
    auto host = std::make_shared<HostTransport>(plan, blocks, file, prefix, storage, quantise_component, every_layer, device);
    log().info("streaming transport: host memory ({:.2f} GB held, {:.2f} GB of it page-locked), copied to {} per block",
               host->host_bytes() / 1e9, host->pinned_bytes() / 1e9, device.str());
    return std::make_unique<BlockStreamer>(
        plan.streamed,
        [host, kernels](int i) {
          const backend::KernelScope scope(kernels);
          return host->stage(i);
        },
        [host, &blocks](int i) { host->release(i, *blocks[static_cast<std::size_t>(i)].module); });
  }
  return std::make_unique<BlockStreamer>(
      plan.streamed,
      [&blocks, &file, prefix, storage, quantise_component, every_layer, device, kernels](int i) {
        const backend::KernelScope scope(kernels);
        const auto& b = blocks[static_cast<std::size_t>(i)];
        return load_block_layers(*b.module, file, prefix + b.name + ".", storage, quantise_component, every_layer, device);
      },
      [&blocks](int i) { release_block_layers(*blocks[static_cast<std::size_t>(i)].module); });
}

void release_block_layers(torch::nn::Module& block, bool trim) {
  for (const auto& [name, layer] : quantised_layers(block)) {
    WeightStore& store = layer->store;
    store.packed = at::Tensor();
    store.layout = {};
    store.blocks.reset();
    store.weight.set_data(at::empty({1}, store.weight.options()).expand(store.weight.sizes()));
  }
  // the block's pages go back to the kernel now: tensors under glibc's (dynamic) mmap threshold
  // would otherwise stay in the allocator's arenas, and the process would grow past the budget
  if (trim) trim_heap();
}

uint64_t block_layer_bytes(torch::nn::Module& block, const SafetensorsFile& file, const std::string& prefix,
                           const StorageSpec& storage, bool quantise_component, bool every_layer) {
  uint64_t bytes = 0;
  for (const auto& [name, layer] : quantised_layers(block)) {
    const std::string key = prefix + name;
    const TensorRecord& rec = file.at(key);
    const uint64_t n = static_cast<uint64_t>(rec.numel());
    if (const auto conf = comfy_quant_layer(file, key); conf && is_block_format(conf->format)) {  // held as stored
      const std::string base = key.substr(0, key.size() - 6);
      bytes += rec.nbytes();
      for (const auto& part : comfy_quant_parts()) {
        if (const auto* r = file.find(base + part)) bytes += r->nbytes();
      }
      continue;
    }
    if (is_block_storage(storage.weights) && rec.shape.size() == 2 && quantises(key, rec, quantise_component, every_layer)) {
      bytes += static_cast<uint64_t>(static_cast<double>(n) * stored_bytes_per_weight(storage.weights));
    } else if (is_fp8(storage.weights) && quantises(key, rec, quantise_component, every_layer)) {
      bytes += n + (storage.scale == Fp8Scale::Channel ? 4 * static_cast<uint64_t>(rec.shape.at(0)) : storage.scale == Fp8Scale::Tensor ? 4 : 0);
    } else {
      bytes += n * static_cast<uint64_t>(at::elementSize(float_storage_dtype(storage.weights)));
    }
  }
  return bytes;
}

}  // namespace fp8s

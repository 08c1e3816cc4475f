// Building blocks of every model: quantisable Linear/Conv2d that own "decode the weight into the
// compute type" (ComfyUI's cast-at-forward pattern), norms that run in FP32, memory-bounded
// attention, and the name-for-name weight loader.
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/types.h"
#include "fp8/codec.h"
#include "fp8/quantize.h"
#include "io/safetensors.h"
#include "models/streaming.h"
#include "models/weight_store.h"

namespace fp8s {

// Model forwards run without autograd, except on a thread inside a TrainingScope (train-demo).
bool training_active();
class TrainingScope {
 public:
  TrainingScope();
  ~TrainingScope();
  TrainingScope(const TrainingScope&) = delete;
  TrainingScope& operator=(const TrainingScope&) = delete;

 private:
  bool previous_;
};
// The guard the forwards take: no gradient unless training.
class InferenceGuard {
 public:
  InferenceGuard() : previous_(c10::GradMode::is_enabled()) {
    if (!training_active()) c10::GradMode::set_enabled(false);
  }
  ~InferenceGuard() { c10::GradMode::set_enabled(previous_); }
  InferenceGuard(const InferenceGuard&) = delete;
  InferenceGuard& operator=(const InferenceGuard&) = delete;

 private:
  bool previous_;
};

// Modules built while a BuildOn is alive put their placeholders (the loader replaces them tensor
// by tensor) on that device: a parameter's storage can move between CPU and CUDA but not to or from
// the meta device, where the placement test runs.
class BuildOn {
 public:
  explicit BuildOn(const at::Device& device);
  ~BuildOn();
  BuildOn(const BuildOn&) = delete;
  BuildOn& operator=(const BuildOn&) = delete;

 private:
  at::Device previous_;
};
at::Device build_device();
// A tensor of `sizes` that owns one element (an expanded scalar) on the build device.
at::Tensor placeholder(at::IntArrayRef sizes);

// The dtype of every non-quantised float tensor for a storage type (FP8 keeps the rest in FP16).
at::ScalarType float_storage_dtype(WeightType type);

// The memory format of a model's image-shaped activations: channels_last (NHWC) for 16-bit compute
// on the CPU, where oneDNN's convolutions read and write NHWC natively (an NCHW tensor costs a
// reorder in and a copy out per convolution, and every attention block a permuting copy each way);
// NCHW for FP32 (the reference numerics stay as they are) and on other devices.
at::MemoryFormat activation_format(at::ScalarType compute, const at::Device& device);
// `x` (image-shaped) in the compute dtype and its activation_format, in one copy.
at::Tensor as_activation(const at::Tensor& x, at::ScalarType compute);

// RMSNorm, the one copy (BFL's QKNorm, Qwen3RMSNorm, Z-Image's, HF's T5LayerNorm): x · rsqrt(mean(x²)
// + eps) over the last dimension in FP32; then back to the input type and times the weight there, or
// with `weight_in_fp32` (T5) times the weight in FP32 and then back.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, bool weight_in_fp32 = false);

// A term a layer adds to its output at forward time, beside its weight (online LoRA,
// lora/lora_apply.h): y + term(x). `conv` is the layer's geometry, unset for a Linear layer.
class OutputTerm {
 public:
  virtual ~OutputTerm() = default;
  virtual at::Tensor add_to(const at::Tensor& y, const at::Tensor& x, std::optional<ConvGeometry> conv) const = 0;
};

// A Linear or Conv2d layer: its weight in a WeightStore (models/weight_store.h), decoded into the
// input's dtype just before use, its bias, and the output terms added at forward time.
class QuantisedLayer {
 public:
  virtual ~QuantisedLayer() = default;
  WeightStore store;        // store.weight: registered parameter "weight"; store.scale: buffer "scale_weight"
  at::Tensor bias;          // registered parameter "bias" (may be undefined)
  bool fp8_compute = false;  // Linear only: multiply in FP8 where the device can (GenerationRequest::fp8_compute)
  std::vector<std::shared_ptr<const OutputTerm>> terms;

  at::Tensor bias_as(at::ScalarType dtype) const;
  // The geometry the packed order and the output terms need (unset: a Linear layer).
  virtual std::optional<ConvGeometry> conv_geometry() const { return std::nullopt; }
  // Puts a stored weight in place (WeightStore::place) and registers its scale once.
  void place(const at::Tensor& stored, bool fp8, Fp8Format format, const at::Tensor& scale, const at::Device& device);

 protected:
  virtual void register_scale(const at::Tensor& scale) = 0;
  at::Tensor add_terms(at::Tensor y, const at::Tensor& x) const;
};

class QLinearImpl : public torch::nn::Module, public QuantisedLayer {
 public:
  QLinearImpl(int64_t in, int64_t out, bool has_bias = true);
  at::Tensor forward(const at::Tensor& x) const;
  void register_scale(const at::Tensor& scale) override;
};
TORCH_MODULE(QLinear);

class QConv2dImpl : public torch::nn::Module, public QuantisedLayer {
 public:
  QConv2dImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1, int64_t padding = -1);
  at::Tensor forward(const at::Tensor& x) const;
  void register_scale(const at::Tensor& scale) override;
  int64_t stride() const { return stride_; }
  int64_t padding() const { return padding_; }
  std::optional<ConvGeometry> conv_geometry() const override { return ConvGeometry{stride_, padding_}; }

 private:
  int64_t stride_, padding_;
};
TORCH_MODULE(QConv2d);

// GroupNorm and LayerNorm computed in FP32 whatever the input dtype (BF16 norms drift).
class GroupNormImpl : public torch::nn::Module {
 public:
  GroupNormImpl(int64_t groups, int64_t channels, double eps);
  at::Tensor forward(const at::Tensor& x) const;

 private:
  at::Tensor weight_, bias_;
  int64_t groups_;
  double eps_;
};
TORCH_MODULE(GroupNorm);

class LayerNormImpl : public torch::nn::Module {
 public:
  LayerNormImpl(int64_t channels, double eps = 1e-5);
  at::Tensor forward(const at::Tensor& x) const;

 private:
  at::Tensor weight_, bias_;
  double eps_;
};
TORCH_MODULE(LayerNorm);

// softmax(q kᵀ · scale + mask) v: the fused kernel where the build has it (LibTorch 2.x), else
// sliced_attention; BF16 on an AMX CPU without it: kernels/attention_amx. The run's KernelOptions
// (backend/kernel_options.h: FP8S_ATTENTION or the engine's own) may force one.
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale,
                     const at::Tensor& mask = {}, int64_t budget_bytes = 256ll << 20);

// Registers an empty module under `name` in `parent` and returns it: the numbered and named
// levels of checkpoint paths (`input_blocks.1`, `ff.net`, ...) that hold no parameters themselves.
std::shared_ptr<torch::nn::Module> container(torch::nn::Module& parent, const std::string& name);

// softmax(q kᵀ · scale) v over [B, heads, N, d] inputs, the query axis processed in slices so that
// no more than ~`budget_bytes` of scores exist at once. FP32 inputs: scores and softmax in FP32 (the
// references' numerics); BF16/FP16 inputs: in the input type (softmax accumulating in FP32).
at::Tensor sliced_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            double scale, const at::Tensor& mask = {},
                            int64_t budget_bytes = 256ll << 20);

// The same over BF16 [B, heads, N, d <= 48] CPU inputs (d contiguous), no mask, by the AMX kernel
// (kernels/attention_amx.h); only where kernels::amx_attention_available().
at::Tensor amx_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale);

struct LoadReport {
  std::size_t tensors = 0;
  std::size_t quantised = 0;
  uint64_t bytes = 0;  // bytes held by the loaded parameters and buffers
};

// Copies every parameter and buffer of `module` from `file` (key = prefix + name), one tensor at
// a time onto `device` (never a whole CPU copy first), converting to the storage type:
// QLinear/QConv2d weights of a quantised component become
// FP8 codes (+ scale), everything else the storage float type. Throws InputError naming the first
// missing keys, a shape mismatch or keys under `prefix` that no module holds (`ignorable` keys excepted:
// buffers such as position ids that the modules do not keep).
// `fused` names layers whose weight is a parameter of another module (key relative to prefix).
// `every_layer`: every QLinear/QConv2d of a quantised component is quantisable (the Flux and T5
// networks, whose keys the SD tensor roles do not name), not only those is_quantisable() names.
LoadReport load_module_weights(torch::nn::Module& module, const SafetensorsFile& file,
                               const std::string& prefix, const StorageSpec& storage,
                               bool quantise_component,
                               const std::vector<std::string>& ignorable = {},
                               const std::map<std::string, QuantisedLayer*>& fused = {},
                               const at::Device& device = at::Device(at::kCPU), bool every_layer = false,
                               const std::vector<std::string>& streamed = {});
// `streamed`: module-relative prefixes ("double_blocks.3.") of streamed blocks, whose quantised
// layers are checked against the file (present, same shape) but not read: they stay placeholders
// until load_block_layers stages them (models/streaming.h). Not in the report's bytes.

// Stages a streamed block's quantised layers from `file` (key = prefix + the layer's path) exactly
// as load_module_weights stores them (the same stored values, bit for bit), and returns the bytes
// read from the file. The file's size and mtime are checked first (a change: InputError); its
// pages are dropped from the page cache after the read.
uint64_t load_block_layers(torch::nn::Module& block, const SafetensorsFile& file, const std::string& prefix,
                           const StorageSpec& storage, bool quantise_component, bool every_layer,
                           const at::Device& device);
// A network's block as its residency plan sees it (models/streaming.h): its name (the key path
// under the network's prefix), its module, its compute per byte of weights relative to the others.
struct NetworkBlock {
  std::string name;
  std::shared_ptr<torch::nn::Module> module;
  double compute_per_byte = 1.0;
};
// A network whose blocks the weight budget can stream: its blocks in execution order, and the
// hooks its forward pass calls around each (BlockScope).
class BlockNetwork : public torch::nn::Module {
 public:
  const std::vector<NetworkBlock>& blocks() const { return network_blocks_; }
  void set_block_hooks(BlockHooks* hooks) { hooks_ = hooks; }

 protected:
  // Registers the list `list` under this network and `count` blocks "<list>.<i>" in it, each a
  // streamable block, and calls `make(block)` to fill each in order.
  template <class Make>
  void add_blocks(const std::string& list, int count, Make&& make) {
    auto holder = container(*this, list);
    for (int i = 0; i < count; ++i) {
      auto block = container(*holder, std::to_string(i));
      network_blocks_.push_back({list + "." + std::to_string(i), block, 1.0});
      make(*block);
    }
  }
  std::vector<NetworkBlock> network_blocks_;
  BlockHooks* hooks_ = nullptr;
};
// The plan for a network's blocks under `budget`, from the file's header: the blocks' bytes in
// the storage, the quantised layers outside them (resident, counted first); and the module-relative
// prefixes of the streamed blocks (load_module_weights' `streamed`).
ResidencyPlan plan_network(torch::nn::Module& network, const std::vector<NetworkBlock>& blocks,
                           const SafetensorsFile& file, const std::string& prefix, const StorageSpec& storage,
                           bool quantise_component, bool every_layer, uint64_t budget);
std::vector<std::string> streamed_prefixes(const ResidencyPlan& plan);
// How streamed blocks reach the device (FP8S_STREAM_TRANSPORT=file|host; unset: file on the
// CPU, host elsewhere). File: each pass reads a streamed block from the model file (load_block_layers)
// when the network enters it; only the staged blocks take memory. Host: the streamed blocks are read
// once, at load, into host memory (pinned for a GPU; FP8 codes stay one byte) and copied to the
// device on a copy stream when entered. InputError for another value.
enum class StreamTransport { File, Host };
StreamTransport stream_transport(const at::Device& device);
// The transport over a plan's streamed blocks: a block staged when the network enters it, released
// when it leaves, the next one staged on a reader thread meanwhile. `file` and `blocks` outlive it.
std::unique_ptr<BlockStreamer> network_streamer(const ResidencyPlan& plan, const std::vector<NetworkBlock>& blocks,
                                                const SafetensorsFile& file, const std::string& prefix,
                                                const StorageSpec& storage, bool quantise_component, bool every_layer,
                                                const at::Device& device);
// Drops a block's quantised layers' weights (placeholders of their shape again); scales stay.
// `trim`: give the freed pages back to the kernel (malloc_trim; a CPU's block).
void release_block_layers(torch::nn::Module& block, bool trim = true);
// The bytes a block's quantised layers take when staged in `storage`, from the file's header.
uint64_t block_layer_bytes(torch::nn::Module& block, const SafetensorsFile& file, const std::string& prefix,
                           const StorageSpec& storage, bool quantise_component, bool every_layer);

// (Re)loads one quantised layer's weight from `key` in the storage type (FP8 codes + scale when
// `quantise` and the storage is FP8; the file's codes when the file is already FP8), onto `device`
// (unset: where the layer's weight is now).
void load_layer_weight(QuantisedLayer& layer, const SafetensorsFile& file, const std::string& key,
                       const StorageSpec& storage, bool quantise, std::optional<at::Device> device = std::nullopt);
// Replaces a layer's weight with `w` (FP32), stored like the layer stores it now: FP8 layers are
// quantised again with a freshly computed scale (round to nearest even).
// With `stochastic_seed` set, FP8 rounding is stochastic from that seed (merge-stochastic).
void store_layer_weight(QuantisedLayer& layer, const at::Tensor& w, const StorageSpec& storage,
                        std::optional<uint64_t> stochastic_seed = std::nullopt);

// Reads one tensor of the file into a new FP32 (or integer) CPU tensor; F8 tensors decoded to
// their values (models/loader.cpp).
at::Tensor read_tensor(const SafetensorsFile& file, const TensorRecord& record);
// An F8 tensor's codes as uint8, as they are in the file.
at::Tensor read_fp8_codes(const SafetensorsFile& file, const TensorRecord& record);

}  // namespace fp8s

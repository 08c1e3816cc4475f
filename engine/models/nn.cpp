#include "models/nn.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <cstring>

#include "backend/backend.h"
#include "core/error.h"
#include "core/logging.h"
#include "models/convert.h"
#include "models/architecture.h"
#include "models/op_profile.h"

namespace fp8s {

namespace {
thread_local bool t_training = false;
thread_local at::Device t_build_device(at::kCPU);
}  // namespace

BuildOn::BuildOn(const at::Device& device) : previous_(t_build_device) { t_build_device = device; }
BuildOn::~BuildOn() { t_build_device = previous_; }
at::Device build_device() { return t_build_device; }
at::Tensor placeholder(at::IntArrayRef sizes) {
  return at::empty({1}, at::TensorOptions().device(t_build_device)).expand(sizes);
}

bool training_active() { return t_training; }
TrainingScope::TrainingScope() : previous_(t_training) { t_training = true; }
TrainingScope::~TrainingScope() { t_training = previous_; }

at::ScalarType float_storage_dtype(WeightType type) {
  switch (type) {
    case WeightType::FP32: return at::kFloat;
    case WeightType::BF16: return at::kBFloat16;
    default: return at::kHalf;
  }
}

at::MemoryFormat activation_format(at::ScalarType compute, const at::Device& device) {
  const bool half = compute == at::kBFloat16 || compute == at::kHalf;
  return half && device.is_cpu() ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
}

at::Tensor as_activation(const at::Tensor& x, at::ScalarType compute) {
  return x.to(compute, /*non_blocking=*/false, /*copy=*/false, activation_format(compute, x.device()));
}

namespace {

std::atomic<uint64_t> g_decode_ns{0};
std::atomic<uint64_t> g_decode_weights{0};

// One scratch buffer per compute dtype and thread: a layer's decoded weight lives there only
// until its matmul/conv returns, and the next layer reuses the same memory, so decoding adds one
// weight's worth of memory (the largest) instead of an allocation per layer. `like`'s strides
// (a channels_last convolution weight) when given, else contiguous.
at::Tensor scratch(at::ScalarType dtype, at::IntArrayRef sizes, const at::Tensor& like = {}) {
  thread_local std::map<at::ScalarType, at::Tensor> buffers;
  int64_t n = 1;
  for (auto d : sizes) n *= d;
  auto& buf = buffers[dtype];
  if (!buf.defined() || buf.numel() < n) {
    buf = at::Tensor();  // free the smaller one first
    buf = at::empty({n}, at::TensorOptions().dtype(dtype));
  }
  auto flat = buf.narrow(0, 0, n);
  return like.defined() ? flat.as_strided(sizes, like.strides()) : flat.view(sizes);
}

// A per-output-channel scale [N] shaped to broadcast over a `dims`-dimensional weight [N, ...].
at::Tensor along_first_dim(const at::Tensor& scale, int64_t dims) {
  std::vector<int64_t> shape(static_cast<std::size_t>(dims), 1);
  shape[0] = -1;
  return scale.view(shape);
}

// FP8 codes decoded into `out` (FP32, BF16 or FP16, the codes' shape): decode(code) times the
// per-tensor scale, or times the per-channel scale along the first dimension (undefined: none).
void decode_fp8_into(const at::Tensor& codes, Fp8Format format, const at::Tensor& scale, at::Tensor& out) {
  const auto n = static_cast<std::size_t>(codes.numel());
  const auto* src = codes.data_ptr<uint8_t>();
  const bool per_channel = scale.defined() && scale.numel() > 1;
  const float tensor_scale = scale.defined() && !per_channel ? scale.item<float>() : 1.0f;
  if (out.scalar_type() == at::kBFloat16) {
    decode_fp8_to_bf16(src, reinterpret_cast<uint16_t*>(out.data_ptr()), n, format, tensor_scale);
  } else if (out.scalar_type() == at::kHalf) {
    decode_fp8_to_f16(src, reinterpret_cast<uint16_t*>(out.data_ptr()), n, format, tensor_scale);
  } else {
    decode_fp8_to_f32(src, out.data_ptr<float>(), n, format, tensor_scale);
  }
  if (per_channel) out.mul_(along_first_dim(scale.to(out.scalar_type()), out.dim()));
}

}  // namespace

DecodeStats decode_stats() { return {g_decode_ns.load(), g_decode_weights.load()}; }
void reset_decode_stats() {
  g_decode_ns.store(0);
  g_decode_weights.store(0);
}

static void count_decode(std::chrono::steady_clock::time_point start, int64_t weights) {
  g_decode_ns.fetch_add(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now() - start).count()));
  g_decode_weights.fetch_add(static_cast<uint64_t>(weights));
}

at::Tensor QuantisedLayer::stored_weight() const {
  if (!packed.defined()) return weight;
  // the codes went through the packing as BF16 values 0..255 (exact), so they come back the same way
  if (fp8) return backend::unpack_conv_weight(packed.to(at::kBFloat16), packed_layout).to(at::kByte);
  return backend::unpack_conv_weight(packed, packed_layout);
}

at::Tensor QuantisedLayer::decoded_packed() const {
  const OpTimer timer(OpKind::Decode);
  const auto start = std::chrono::steady_clock::now();
  at::Tensor out = scratch(at::kBFloat16, {packed.numel()});
  decode_fp8_into(packed, format, scale_weight, out);
  count_decode(start, packed.numel());
  return out;
}

at::Tensor QuantisedLayer::decoded_weight(at::ScalarType dtype) const {
  if (!weight.is_cpu()) return decoded_on_device(dtype);
  const at::Tensor stored = stored_weight();
  if (!fp8) {
    if (stored.scalar_type() == dtype) return stored;
    // training (train-demo in BF16): a fresh, differentiable cast; the reused scratch buffer would
    // be overwritten in place before the backward pass reads it
    if (stored.requires_grad() && c10::GradMode::is_enabled()) return stored.to(dtype);
    const OpTimer timer(OpKind::Cast);
    return scratch(dtype, stored.sizes()).copy_(stored);
  }
  // FP8 codes -> compute dtype, then the per-tensor or per-channel scale: element by element in
  // memory order, into a buffer of the codes' strides (a convolution's codes are channels_last).
  const OpTimer timer(OpKind::Decode);
  const auto start = std::chrono::steady_clock::now();
  at::Tensor codes = stored.is_non_overlapping_and_dense() ? stored : stored.contiguous();
  const at::ScalarType target = dtype == at::kBFloat16 || dtype == at::kHalf ? dtype : at::kFloat;
  at::Tensor out = scratch(target, codes.sizes(), codes);
  decode_fp8_into(codes, format, scale_weight, out);
  if (target != dtype) out = out.to(dtype);
  count_decode(start, codes.numel());
  return out;
}

at::Tensor QuantisedLayer::decoded_on_device(at::ScalarType dtype) const {
  // A GPU (or the meta device): native float8 codes cast by the device (the caching allocator
  // reuses the memory from layer to layer), times the scale in FP32 as the CPU decode does.
  if (weight.scalar_type() == dtype) return weight;
  at::Tensor out = weight.to(dtype);
  if (fp8 && scale_weight.defined()) {
    out.mul_(scale_weight.numel() > 1 ? along_first_dim(scale_weight, out.dim()) : scale_weight.reshape({}));
  }
  if (fp8) g_decode_weights.fetch_add(static_cast<uint64_t>(weight.numel()));
  return out;
}

at::Tensor QuantisedLayer::bias_as(at::ScalarType dtype) const {
  if (!bias.defined()) return {};
  return bias.scalar_type() == dtype ? bias : bias.to(dtype);
}

QLinearImpl::QLinearImpl(int64_t in, int64_t out, bool has_bias) {
  // Placeholders of the right shape that own no memory: the loader replaces them tensor by tensor,
  // so building a model never allocates a full-precision copy of it.
  weight = register_parameter("weight", placeholder({out, in}), false);
  if (has_bias) bias = register_parameter("bias", placeholder({out}), false);
}

at::Tensor QLinearImpl::forward(const at::Tensor& x) const {
  // FP8 compute: an E4M3 weight with a per-tensor (or no) scale, on the GPU, sizes as cuBLASLt wants
  const bool mm8 = fp8_compute && fp8 && weight.is_cuda() && format == Fp8Format::E4M3FN &&
                   (!scale_weight.defined() || scale_weight.numel() == 1) && weight.size(0) % 16 == 0 &&
                   weight.size(1) % 16 == 0;
  const at::Tensor w = mm8 ? at::Tensor() : decoded_weight(x.scalar_type());
  const OpTimer timer(OpKind::Linear);
  auto y = mm8 ? backend::fp8_linear(x, weight, scale_weight, bias) : at::linear(x, w, bias_as(x.scalar_type()));
  for (const auto& l : online_loras) {
    const auto t = x.scalar_type();
    y = y + at::linear(at::linear(x, l.down.flatten(1).to(x.device(), t)), l.up.flatten(1).to(x.device(), t)) * l.scale;
  }
  return y;
}

// Registers the FP8 scale as buffer "scale_weight" the first time, replaces its data afterwards.
void register_scale_buffer(torch::nn::Module& module, at::Tensor& slot, const at::Tensor& scale) {
  if (!slot.defined()) {
    slot = module.register_buffer("scale_weight", scale);
  } else {
    slot.set_data(scale);
  }
}

void QLinearImpl::register_scale(const at::Tensor& scale) { register_scale_buffer(*this, scale_weight, scale); }

QConv2dImpl::QConv2dImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding)
    : stride_(stride), padding_(padding < 0 ? kernel / 2 : padding) {
  weight = register_parameter("weight", placeholder({out, in, kernel, kernel}), false);
  bias = register_parameter("bias", placeholder({out}), false);
}

at::Tensor QConv2dImpl::forward(const at::Tensor& x) const {
  at::Tensor y;
  if (packed.defined() && x.scalar_type() == at::kBFloat16 && x.is_cpu()) {
    // packed elements as they are (BF16 storage) or decoded in their order (FP8): no reorder
    const at::Tensor elements = fp8 ? decoded_packed() : packed;
    const OpTimer timer(OpKind::Conv);
    y = backend::packed_conv2d(x, elements, packed_layout, bias_as(at::kBFloat16), stride_, padding_);
  } else {
    at::Tensor w = decoded_weight(x.scalar_type());
    // The weight in the activations' memory format (a CPU weight is kept channels_last for 16-bit
    // compute; FP32 compute, the reference path, gets an NCHW copy and NCHW numerics).
    const auto format = x.suggest_memory_format();
    if (w.suggest_memory_format() != format) w = w.contiguous(format);
    const OpTimer timer(OpKind::Conv);
    y = at::conv2d(x, w, bias_as(x.scalar_type()), {stride_, stride_}, {padding_, padding_});
  }
  for (const auto& l : online_loras) {
    const auto t = x.scalar_type();
    // down has the layer's kernel (LoCon) or is 1x1 on a 1x1 layer
    const int64_t k = l.down.dim() == 4 ? l.down.size(2) : 1;
    auto down = l.down.dim() == 4 ? l.down : l.down.unsqueeze(-1).unsqueeze(-1);
    auto h = at::conv2d(x, down.to(x.device(), t), {}, {stride_, stride_}, {k == 1 ? 0 : padding_, k == 1 ? 0 : padding_});
    auto up = l.up.dim() == 4 ? l.up : l.up.unsqueeze(-1).unsqueeze(-1);
    y = y + at::conv2d(h, up.to(x.device(), t)) * l.scale;
  }
  return y;
}

void QConv2dImpl::register_scale(const at::Tensor& scale) { register_scale_buffer(*this, scale_weight, scale); }

GroupNormImpl::GroupNormImpl(int64_t groups, int64_t channels, double eps)
    : groups_(groups), eps_(eps) {
  weight_ = register_parameter("weight", at::ones({channels}, build_device()), false);
  bias_ = register_parameter("bias", at::zeros({channels}, build_device()), false);
}

namespace {
// BF16 activations on the CPU are normalised by LibTorch 2.x's mixed-type kernels: BF16 in and out,
// FP32 weights, statistics and arithmetic inside (the FP32 round trip's numbers, rounded once at the
// end as before) without an FP32 copy of the whole activation each way. Not while training (the
// demo's BF16 training keeps the autograd path it was written with).
bool native_bf16_norm(const at::Tensor& x) {
  return x.is_cpu() && x.scalar_type() == at::kBFloat16 && backend::has_mixed_type_norms() && !training_active();
}
}  // namespace

at::Tensor GroupNormImpl::forward(const at::Tensor& x) const {
  const OpTimer timer(OpKind::Norm);
  const auto w = weight_.to(at::kFloat), b = bias_.to(at::kFloat);
  if (native_bf16_norm(x)) return at::group_norm(x, groups_, w, b, eps_);
  return at::group_norm(x.to(at::kFloat), groups_, w, b, eps_).to(x.scalar_type());
}

LayerNormImpl::LayerNormImpl(int64_t channels, double eps) : eps_(eps) {
  weight_ = register_parameter("weight", at::ones({channels}, build_device()), false);
  bias_ = register_parameter("bias", at::zeros({channels}, build_device()), false);
}

at::Tensor LayerNormImpl::forward(const at::Tensor& x) const {
  const OpTimer timer(OpKind::Norm);
  const auto w = weight_.to(at::kFloat), b = bias_.to(at::kFloat);
  if (native_bf16_norm(x)) return at::layer_norm(x, {weight_.size(0)}, w, b, eps_);
  return at::layer_norm(x.to(at::kFloat), {weight_.size(0)}, w, b, eps_).to(x.scalar_type());
}

std::shared_ptr<torch::nn::Module> container(torch::nn::Module& parent, const std::string& name) {
  return parent.register_module(name, std::make_shared<torch::nn::Module>());
}

at::Tensor read_tensor(const SafetensorsFile& file, const TensorRecord& record) {
  std::vector<int64_t> shape(record.shape.begin(), record.shape.end());
  switch (record.dtype) {
    case Dtype::F32:
    case Dtype::F16:
    case Dtype::BF16: {
      at::Tensor raw = at::empty({static_cast<int64_t>(record.nbytes())}, at::kByte);
      file.read(record, raw.data_ptr());
      at::Tensor out = at::empty(shape, at::kFloat);
      widen_to_f32(raw.data_ptr(), record.dtype, static_cast<std::size_t>(record.numel()),
                   out.data_ptr<float>(), file.path() + ": tensor '" + record.name + "'");
      return out;
    }
    case Dtype::I64: {
      at::Tensor out = at::empty(shape, at::kLong);
      file.read(record, out.data_ptr());
      return out;
    }
    case Dtype::I32: {
      at::Tensor out = at::empty(shape, at::kInt);
      file.read(record, out.data_ptr());
      return out;
    }
    case Dtype::F8_E4M3:
    case Dtype::F8_E5M2:
    case Dtype::U8: {
      at::Tensor out = at::empty(shape, at::kByte);
      file.read(record, out.data_ptr());
      return out;
    }
    default:
      throw InputError(file.path() + ": tensor '" + record.name + "' has unsupported dtype " +
                       dtype_name(record.dtype));
  }
}

namespace {

std::string shape_str(at::IntArrayRef s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

bool shape_equals(const std::vector<int64_t>& a, at::IntArrayRef b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

Fp8Format fp8_format_of(Dtype dtype) { return dtype == Dtype::F8_E4M3 ? Fp8Format::E4M3FN : Fp8Format::E5M2; }

// An FP8 checkpoint weight decoded to FP32 (codes times its scale), after checking that a
// per-channel scale has one value per output channel.
at::Tensor decode_checkpoint_fp8(const SafetensorsFile& file, const TensorRecord& rec, const at::Tensor& codes,
                                 const at::Tensor& scale) {
  if (scale.defined() && scale.numel() > 1 && scale.numel() != codes.size(0)) {
    throw InputError(file.path() + ": tensor '" + rec.name + "' has " + std::to_string(scale.numel()) +
                     " channel scales for " + std::to_string(codes.size(0)) + " output channels");
  }
  at::Tensor w = at::empty(codes.sizes(), at::kFloat);
  decode_fp8_into(codes, fp8_format_of(rec.dtype), scale, w);
  return w;
}

// Puts a layer's stored weight in place on `device`: float weights as they are, FP8 codes as the
// device keeps them (uint8 for the CPU's table decode, native float8 elsewhere), with its scale.
void place_layer(QuantisedLayer& layer, const at::Tensor& stored, bool fp8, Fp8Format format,
                 const at::Tensor& scale, const at::Device& device) {
  layer.fp8 = fp8;
  if (fp8) layer.format = format;
  at::Tensor w = stored;
  if (fp8 && !device.is_cpu() && backend::has_native_fp8()) w = backend::codes_as_native_fp8(stored, format);
  layer.packed = at::Tensor();
  layer.packed_layout = {};
  // Where the build packs convolution weights, a CPU convolution's BF16 weight or FP8 codes (no
  // per-channel scale: that multiplies along the logical first dimension) go in packed instead.
  const auto* conv = dynamic_cast<const QConv2dImpl*>(&layer);
  if (conv && device.is_cpu() && backend::has_packed_conv() &&
      (fp8 ? !scale.defined() || scale.numel() == 1 : w.scalar_type() == at::kBFloat16)) {
    auto [elements, layout] = backend::pack_conv_weight(fp8 ? w.to(at::kBFloat16) : w, conv->stride(), conv->padding());
    layer.packed = fp8 ? elements.to(at::kByte) : elements;
    layer.packed_layout = std::move(layout);
    w = at::empty({1}, w.options()).expand(w.sizes());  // the placeholder: shape and dtype, no memory
  } else if (device.is_cpu() && w.dim() == 4 && w.scalar_type() != at::kFloat) {
    // A CPU convolution's 16-bit weight or FP8 codes kept channels_last, as its 16-bit activations
    // are (activation_format): oneDNN then reorders it from OHWI, and FP8 decodes straight into that.
    w = w.contiguous(at::MemoryFormat::ChannelsLast);
  }
  layer.weight.set_data(w.to(device));
  if (scale.defined()) layer.register_scale(scale.to(device));
}

// Quantises or copies a checkpoint weight into a layer's storage on `device`.
void load_quantised(QuantisedLayer& layer, const SafetensorsFile& file, const TensorRecord& rec,
                    const std::string& key, const StorageSpec& storage, const at::Device& device) {
  const bool src_fp8 = rec.dtype == Dtype::F8_E4M3 || rec.dtype == Dtype::F8_E5M2;
  at::Tensor w;  // FP32, when the weight goes through a conversion
  if (src_fp8) {
    at::Tensor codes = read_tensor(file, rec);
    at::Tensor scale;
    if (const auto* s = file.find(scale_key_for(key))) scale = read_tensor(file, *s).reshape({-1});
    const Fp8Format src_format = fp8_format_of(rec.dtype);
    const Fp8Scale src_scale = !scale.defined() ? Fp8Scale::None : scale.numel() > 1 ? Fp8Scale::Channel : Fp8Scale::Tensor;
    if (is_fp8(storage.weights) && fp8_format(storage.weights) == src_format && storage.scale == src_scale) {
      // FP8 storage of the checkpoint's own format and scaling: its codes and scale as they are.
      place_layer(layer, codes, true, src_format, scale, device);
      return;
    }
    // Any other storage holds the FP8 values decoded (16/32-bit: an upcast, 2 or 4 bytes a
    // weight; another FP8 format or scaling: quantised again from them).
    w = decode_checkpoint_fp8(file, rec, codes, scale);
  }
  const at::ScalarType target = float_storage_dtype(storage.weights);
  if (!src_fp8 && !is_fp8(storage.weights) && ((rec.dtype == Dtype::F16 && target == at::kHalf) ||
                                   (rec.dtype == Dtype::BF16 && target == at::kBFloat16))) {
    at::Tensor v = at::empty(layer.weight.sizes(), at::TensorOptions().dtype(target));
    file.read(rec, v.data_ptr());
    place_layer(layer, v, false, layer.format, {}, device);
    return;
  }
  if (!w.defined()) w = read_tensor(file, rec);
  if (!is_fp8(storage.weights)) {
    place_layer(layer, w.to(float_storage_dtype(storage.weights)), false, layer.format, {}, device);
    return;
  }
  const Fp8Format format = fp8_format(storage.weights);
  at::Tensor codes = at::empty(w.sizes(), at::kByte);
  const auto scales = quantize_weight(w.data_ptr<float>(), w.size(0), w.numel(), format,
                                      storage.scale, codes.data_ptr<uint8_t>());
  at::Tensor scale;
  if (!scales.empty()) {
    scale = at::from_blob(const_cast<float*>(scales.data()), {static_cast<int64_t>(scales.size())}, at::kFloat).clone();
  }
  place_layer(layer, codes, true, format, scale, device);
}

}  // namespace

void load_layer_weight(QuantisedLayer& layer, const SafetensorsFile& file, const std::string& key,
                       const StorageSpec& storage, bool quantise, std::optional<at::Device> device) {
  StorageSpec spec = storage;
  if (!quantise && is_fp8(spec.weights)) spec.weights = WeightType::FP16;
  load_quantised(layer, file, file.at(key), key, spec, device.value_or(layer.weight.device()));
}

void store_layer_weight(QuantisedLayer& layer, const at::Tensor& w_in, const StorageSpec& storage,
                        std::optional<uint64_t> stochastic_seed) {
  const at::Device device = layer.weight.device();
  at::Tensor w = w_in.to(at::kCPU, at::kFloat).contiguous();  // the codec quantises on the CPU
  if (!layer.fp8) {
    place_layer(layer, w.to(layer.weight.scalar_type()), false, layer.format, {}, device);
    return;
  }
  at::Tensor codes = at::empty(w.sizes(), at::kByte);
  const Fp8Scale scale = layer.scale_weight.defined()
                             ? (layer.scale_weight.numel() > 1 ? Fp8Scale::Channel : Fp8Scale::Tensor)
                             : storage.scale;
  const auto scales =
      stochastic_seed ? quantize_weight_stochastic(w.data_ptr<float>(), w.size(0), w.numel(), layer.format,
                                                   scale, codes.data_ptr<uint8_t>(), *stochastic_seed)
                      : quantize_weight(w.data_ptr<float>(), w.size(0), w.numel(), layer.format, scale,
                                        codes.data_ptr<uint8_t>());
  place_layer(layer, codes, true, layer.format,
              scales.empty() ? at::Tensor() : at::tensor(std::vector<float>(scales.begin(), scales.end()), at::kFloat),
              device);
}

LoadReport load_module_weights(torch::nn::Module& module, const SafetensorsFile& file,
                               const std::string& prefix, const StorageSpec& storage,
                               bool quantise_component, const std::vector<std::string>& ignorable,
                               const std::map<std::string, QuantisedLayer*>& fused, const at::Device& device) {
  LoadReport report;
  std::vector<std::string> missing;
  std::set<std::string> used;
  // Quantised layers first: their weights may become FP8.
  std::set<std::string> handled;
  // Every quantisable layer by its weight's name: module layers (`<path>.weight`) and the fused
  // ones stored under a parameter name.
  std::vector<std::pair<std::string, QuantisedLayer*>> layers(fused.begin(), fused.end());
  for (const auto& item : module.named_modules("", false)) {
    if (auto* layer = dynamic_cast<QuantisedLayer*>(item.value().get())) {
      layers.emplace_back(item.key() + ".weight", layer);
    }
  }
  for (const auto& [name, layer] : layers) {
    const std::string key = prefix + name;
    const auto* rec = file.find(key);
    if (!rec) {
      missing.push_back(key);
      continue;
    }
    if (!shape_equals(rec->shape, layer->weight.sizes())) {
      throw InputError(file.path() + ": tensor '" + key + "' has shape " + shape_str(rec->shape) +
                       " but the model expects " + shape_str(layer->weight.sizes()) +
                       "; the checkpoint is not the architecture it claims to be");
    }
    // Embedding MLPs (time_embed, label_emb) stay 16-bit like every embedding (DESIGN.md section 2).
    load_layer_weight(*layer, file, key, storage,
                      quantise_component && is_quantisable(key, rec->shape, /*fp8_vae=*/true), device);
    handled.insert(name);
    used.insert(key);
    if (layer->scale_weight.defined() || file.find(scale_key_for(key))) {
      // the file's scale was read with its weight, also when the weight was decoded (upcast)
      handled.insert(scale_key_for(name));
      used.insert(scale_key_for(key));
    }
    report.quantised += layer->fp8 ? 1 : 0;
  }
  const at::ScalarType float_dtype = float_storage_dtype(storage.weights);
  auto load_one = [&](const std::string& name, at::Tensor& t) {
    if (handled.count(name)) return;
    const std::string key = prefix + name;
    const auto* rec = file.find(key);
    if (!rec) {
      missing.push_back(key);
      return;
    }
    if (!shape_equals(rec->shape, t.sizes())) {
      throw InputError(file.path() + ": tensor '" + key + "' has shape " + shape_str(rec->shape) +
                       " but the model expects " + shape_str(t.sizes()) +
                       "; the checkpoint is not the architecture it claims to be");
    }
    // Same float type in the file and in memory: read straight into the new tensor, without an
    // FP32 intermediate (the token embedding alone would be 150 MB of it).
    const bool direct = (rec->dtype == Dtype::F16 && float_dtype == at::kHalf) ||
                        (rec->dtype == Dtype::BF16 && float_dtype == at::kBFloat16);
    if (direct) {
      at::Tensor v = at::empty(t.sizes(), at::TensorOptions().dtype(float_dtype));
      file.read(*rec, v.data_ptr());
      t.set_data(v.to(device));
    } else {
      at::Tensor v = read_tensor(file, *rec);
      t.set_data((v.is_floating_point() ? v.to(float_dtype) : v).to(device));
    }
    used.insert(key);
  };
  for (auto& item : module.named_parameters(true)) load_one(item.key(), item.value());
  for (auto& item : module.named_buffers(true)) {
    if (item.value().defined()) load_one(item.key(), item.value());
  }
  if (!missing.empty()) {
    std::string list;
    for (std::size_t i = 0; i < std::min<std::size_t>(3, missing.size()); ++i) {
      list += (i ? ", " : "") + missing[i];
    }
    throw InputError(file.path() + ": " + std::to_string(missing.size()) +
                     " tensors the model needs are missing (" + list +
                     (missing.size() > 3 ? ", ..." : "") +
                     "); is this a complete SD checkpoint of the detected architecture?");
  }
  for (auto& item : module.named_parameters(true)) report.bytes += item.value().nbytes();
  for (auto& item : module.named_buffers(true)) {
    if (item.value().defined()) report.bytes += item.value().nbytes();
  }
  report.tensors = used.size();
  std::vector<std::string> unused;
  for (const auto& t : file.tensors()) {
    if (t.name.compare(0, prefix.size(), prefix) != 0 || used.count(t.name)) continue;
    const std::string rest = t.name.substr(prefix.size());
    if (std::find(ignorable.begin(), ignorable.end(), rest) != ignorable.end()) continue;
    unused.push_back(t.name);
  }
  if (!unused.empty()) {
    std::string list;
    for (std::size_t i = 0; i < std::min<std::size_t>(3, unused.size()); ++i) {
      list += (i ? ", " : "") + unused[i];
    }
    throw InputError(file.path() + ": " + std::to_string(unused.size()) + " tensors under '" + prefix +
                     "' are not part of the detected architecture (" + list +
                     (unused.size() > 3 ? ", ..." : "") +
                     "); the checkpoint is a variant this program does not support, or is damaged");
  }
  return report;
}

}  // namespace fp8s

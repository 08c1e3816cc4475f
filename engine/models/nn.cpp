#include "models/nn.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <cstring>

#include "backend/backend.h"
#include "backend/kernel_options.h"
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

}  // namespace

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
  // FP16 bits went through the permutation as BF16 bit patterns
  if (packed.scalar_type() == at::kHalf) return backend::unpack_conv_weight(packed.view(at::kBFloat16), packed_layout).view(at::kHalf);
  return backend::unpack_conv_weight(packed, packed_layout);
}

at::Tensor QuantisedLayer::decoded_packed() const {
  const OpTimer timer(OpKind::Decode);
  const auto start = std::chrono::steady_clock::now();
  at::Tensor out = scratch(at::kBFloat16, {packed.numel()});
  // a per-channel scale multiplies the convolution's output channels (QConv2dImpl::forward)
  decode_fp8_into(packed, format, per_channel_scale() ? at::Tensor() : scale_weight, out);
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
  auto y = mm8 ? backend::fp8_linear(x, weight, scale_weight, bias, input_scale) : at::linear(x, w, bias_as(x.scalar_type()));
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
    // packed elements as they are (BF16 storage), cast (FP16) or decoded (FP8) in their order: no reorder
    at::Tensor elements = packed;
    if (fp8) {
      elements = decoded_packed();
    } else if (packed.scalar_type() != at::kBFloat16) {
      const OpTimer cast(OpKind::Cast);
      elements = scratch(at::kBFloat16, {packed.numel()}).copy_(packed);
    }
    backend::count_conv(backend::ConvLayout::Packed);
    const OpTimer timer(OpKind::Conv);
    if (per_channel_scale()) {
      // conv(x, W diag(s)) = conv(x, W) s per output channel, then the bias
      y = backend::packed_conv2d(x, elements, packed_layout, {}, stride_, padding_);
      y.mul_(scale_weight.view({1, -1, 1, 1}));  // FP32 scale, the product rounded once to BF16
      if (bias.defined()) y.add_(bias_as(at::kBFloat16).view({1, -1, 1, 1}));
    } else {
      y = backend::packed_conv2d(x, elements, packed_layout, bias_as(at::kBFloat16), stride_, padding_);
    }
  } else {
    at::Tensor w = decoded_weight(x.scalar_type());
    // The weight in the activations' memory format (a CPU weight is kept channels_last for 16-bit
    // compute; FP32 compute, the reference path, gets an NCHW copy and NCHW numerics).
    const auto format = x.suggest_memory_format();
    if (w.suggest_memory_format() != format) w = w.contiguous(format);
    backend::count_conv(format == at::MemoryFormat::ChannelsLast ? backend::ConvLayout::ChannelsLast : backend::ConvLayout::Nchw);
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

}  // namespace fp8s

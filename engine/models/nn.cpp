#include "models/nn.h"

#include "backend/backend.h"
#include "backend/kernel_options.h"
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

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, bool weight_in_fp32) {
  const OpTimer timer(OpKind::Norm);
  const auto x32 = x.to(at::kFloat);
  const auto n = x32 * at::rsqrt(x32.pow(2).mean(-1, true) + eps);
  if (weight_in_fp32) return (n * weight.to(at::kFloat)).to(x.scalar_type());
  return n.to(x.scalar_type()) * weight.to(x.scalar_type());
}

at::Tensor QuantisedLayer::bias_as(at::ScalarType dtype) const {
  if (!bias.defined()) return {};
  return bias.scalar_type() == dtype ? bias : bias.to(dtype);
}

void QuantisedLayer::place(const at::Tensor& stored, bool fp8, Fp8Format format, const at::Tensor& scale,
                           const at::Device& device) {
  const at::Tensor placed = store.place(stored, fp8, format, scale, device, conv_geometry());
  if (placed.defined()) register_scale(placed);
}

at::Tensor QuantisedLayer::add_terms(at::Tensor y, const at::Tensor& x) const {
  for (const auto& term : terms) y = term->add_to(y, x, conv_geometry());
  return y;
}

QLinearImpl::QLinearImpl(int64_t in, int64_t out, bool has_bias) {
  // Placeholders of the right shape that own no memory: the loader replaces them tensor by tensor,
  // so building a model never allocates a full-precision copy of it.
  store.weight = register_parameter("weight", placeholder({out, in}), false);
  if (has_bias) bias = register_parameter("bias", placeholder({out}), false);
}

at::Tensor QLinearImpl::forward(const at::Tensor& x) const {
  // FP8 compute: an FP8 weight on the GPU through _scaled_mm where its format, sizes and scale
  // allow (backend::plan_fp8_mm); the others are decoded and counted, and the run says how many
  const auto& w8 = store.weight;
  backend::Fp8MmPlan plan;
  if (fp8_compute && store.fp8 && w8.is_cuda()) {
    plan = backend::plan_fp8_mm(true, store.format, store.scale.defined() ? store.scale.numel() : 0, w8.size(0), w8.size(1),
                                x.scalar_type());
    backend::count_fp8_linear(plan.scaled_mm);
  }
  const at::Tensor w = plan.scaled_mm ? at::Tensor() : store.decode(x.scalar_type());
  const OpTimer timer(OpKind::Linear);
  auto y = plan.scaled_mm ? backend::fp8_linear(x, w8, store.scale, bias, store.input_scale, plan)
                          : at::linear(x, w, bias_as(x.scalar_type()));
  return add_terms(y, x);
}

// Registers the FP8 scale as buffer "scale_weight" the first time, replaces its data afterwards.
void register_scale_buffer(torch::nn::Module& module, at::Tensor& slot, const at::Tensor& scale) {
  if (!slot.defined()) {
    slot = module.register_buffer("scale_weight", scale);
  } else {
    slot.set_data(scale);
  }
}

void QLinearImpl::register_scale(const at::Tensor& scale) { register_scale_buffer(*this, store.scale, scale); }

QConv2dImpl::QConv2dImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding)
    : stride_(stride), padding_(padding < 0 ? kernel / 2 : padding) {
  store.weight = register_parameter("weight", placeholder({out, in, kernel, kernel}), false);
  bias = register_parameter("bias", placeholder({out}), false);
}

at::Tensor QConv2dImpl::forward(const at::Tensor& x) const {
  at::Tensor y;
  if (store.packed.defined() && x.scalar_type() == at::kBFloat16 && x.is_cpu()) {
    // packed elements as they are (BF16 storage), cast (FP16) or decoded (FP8) in their order: no reorder
    const at::Tensor elements = store.packed_bf16();
    backend::count_conv(backend::ConvLayout::Packed);
    const OpTimer timer(OpKind::Conv);
    if (store.per_channel_scale()) {
      // conv(x, W diag(s)) = conv(x, W) s per output channel, then the bias
      y = backend::packed_conv2d(x, elements, store.layout, {}, stride_, padding_);
      y.mul_(store.scale.view({1, -1, 1, 1}));  // FP32 scale, the product rounded once to BF16
      if (bias.defined()) y.add_(bias_as(at::kBFloat16).view({1, -1, 1, 1}));
    } else {
      y = backend::packed_conv2d(x, elements, store.layout, bias_as(at::kBFloat16), stride_, padding_);
    }
  } else {
    at::Tensor w = store.decode(x.scalar_type());
    // The weight in the activations' memory format (a CPU weight is kept channels_last for 16-bit
    // compute; FP32 compute, the reference path, gets an NCHW copy and NCHW numerics).
    const auto format = x.suggest_memory_format();
    if (w.suggest_memory_format() != format) w = w.contiguous(format);
    backend::count_conv(format == at::MemoryFormat::ChannelsLast ? backend::ConvLayout::ChannelsLast : backend::ConvLayout::Nchw);
    const OpTimer timer(OpKind::Conv);
    y = at::conv2d(x, w, bias_as(x.scalar_type()), {stride_, stride_}, {padding_, padding_});
  }
  return add_terms(y, x);
}

void QConv2dImpl::register_scale(const at::Tensor& scale) { register_scale_buffer(*this, store.scale, scale); }

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
// On a GPU, 16-bit activations are normalised in their own type with the weights cast to it (as
// ComfyUI does): the CUDA kernels keep their statistics in FP32, and no FP32 copy of the activation
// is made (about 1 GB per norm in an SDXL VAE at 1024², which showed in the VRAM peak).
bool gpu_half_norm(const at::Tensor& x) {
  return x.is_cuda() && (x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf) && !training_active();
}
}  // namespace

at::Tensor GroupNormImpl::forward(const at::Tensor& x) const {
  const OpTimer timer(OpKind::Norm);
  if (gpu_half_norm(x)) return at::group_norm(x, groups_, weight_.to(x.scalar_type()), bias_.to(x.scalar_type()), eps_);
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
  if (gpu_half_norm(x)) return at::layer_norm(x, {weight_.size(0)}, weight_.to(x.scalar_type()), bias_.to(x.scalar_type()), eps_);
  const auto w = weight_.to(at::kFloat), b = bias_.to(at::kFloat);
  if (native_bf16_norm(x)) return at::layer_norm(x, {weight_.size(0)}, w, b, eps_);
  return at::layer_norm(x.to(at::kFloat), {weight_.size(0)}, w, b, eps_).to(x.scalar_type());
}

std::shared_ptr<torch::nn::Module> container(torch::nn::Module& parent, const std::string& name) {
  return parent.register_module(name, std::make_shared<torch::nn::Module>());
}

}  // namespace fp8s

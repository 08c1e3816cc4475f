#include "models/weight_store.h"

#include <c10/core/GradMode.h>

#include <atomic>
#include <chrono>
#include <map>
#include <vector>

#include "backend/kernel_options.h"
#include "fp8/codec.h"
#include "models/op_profile.h"

namespace fp8s {

namespace {

std::atomic<uint64_t> g_decode_ns{0};
std::atomic<uint64_t> g_decode_weights{0};

void count_decode(std::chrono::steady_clock::time_point start, int64_t weights) {
  g_decode_ns.fetch_add(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now() - start).count()));
  g_decode_weights.fetch_add(static_cast<uint64_t>(weights));
}

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

uint64_t BlockWeight::bytes() const {
  uint64_t n = 0;
  for (const at::Tensor* t : {&data, &scale, &zeros, &down, &up, &smooth}) n += t->defined() ? t->nbytes() : 0;
  return n + (conf.format == QuantFormat::Nvfp4 ? 4 : 0);
}

void BlockWeight::dequantize(float* out) const {
  const auto f32 = [](const at::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; };
  const auto* bytes = static_cast<const uint8_t*>(data.data_ptr());  // 4-bit codes, two a byte (stored I8)
  switch (conf.format) {
    case QuantFormat::Int8:
      dequant_int8(data.data_ptr<int8_t>(), f32(scale), scale.numel() > 1, rows, cols, out);
      if (conf.convrot) undo_convrot(out, rows, cols, conf.convrot_group);
      return;
    case QuantFormat::Mxfp8:
      dequant_mxfp8(data.data_ptr<uint8_t>(), data.size(1), scale.data_ptr<uint8_t>(), scale.size(1), rows, cols, out);
      return;
    case QuantFormat::Nvfp4:
      dequant_nvfp4(data.data_ptr<uint8_t>(), data.size(1) * 2, scale.data_ptr<uint8_t>(), scale.size(1), scale_2, rows, cols, out);
      return;
    case QuantFormat::ConvRotW4A4:
      dequant_w4a4(bytes, f32(scale), rows, cols, out);
      undo_convrot(out, rows, cols, conf.convrot_group);
      return;
    case QuantFormat::AwqW4A16:
      dequant_awq(bytes, f32(scale), f32(zeros), conf.group_size, rows, cols, out);
      return;
    case QuantFormat::SvdquantW4A4:
      dequant_svdquant(bytes, f32(scale), f32(smooth), f32(down), f32(up), down.numel() / cols, rows, cols, out);
      return;
    default:
      throw std::logic_error("BlockWeight holds an FP8 format");
  }
}

std::shared_ptr<BlockWeight> quantise_block_weight(const at::Tensor& w_in, WeightType type) {
  const at::Tensor w = w_in.to(at::kCPU, at::kFloat).contiguous();
  auto b = std::make_shared<BlockWeight>();
  b->rows = w.size(0), b->cols = w.size(1);
  const float* src = w.data_ptr<float>();
  b->conf.format = type == WeightType::INT8 ? QuantFormat::Int8 : type == WeightType::MXFP8 ? QuantFormat::Mxfp8 : QuantFormat::Nvfp4;
  const StoredShape st = stored_shape(b->conf, b->rows, b->cols);
  if (type == WeightType::INT8) {
    b->data = at::empty({b->rows, b->cols}, at::kChar);
    b->scale = at::empty({b->rows}, at::kFloat);
    quantize_int8(src, b->rows, b->cols, true, b->data.data_ptr<int8_t>(), b->scale.data_ptr<float>());
    return b;
  }
  b->data = at::empty({st.data_rows, st.data_cols}, at::kByte);
  b->scale = at::empty({st.scale_rows, st.scale_cols}, at::kByte);
  if (type == WeightType::MXFP8) {
    quantize_mxfp8(src, b->rows, b->cols, b->data.data_ptr<uint8_t>(), b->scale.data_ptr<uint8_t>());
  } else {
    b->scale_2 = quantize_nvfp4(src, b->rows, b->cols, b->data.data_ptr<uint8_t>(), b->scale.data_ptr<uint8_t>());
  }
  return b;
}

WeightStore::Kind WeightStore::kind() const {
  if (blocks) return Kind::Blocks;
  if (packed.defined()) return fp8 ? Kind::PackedFp8 : Kind::PackedDense;
  return fp8 ? Kind::Fp8 : Kind::Dense;
}

at::Tensor WeightStore::logical() const {
  if (blocks) {
    at::Tensor out = at::empty({blocks->rows, blocks->cols}, at::kFloat);
    blocks->dequantize(out.data_ptr<float>());
    return out;
  }
  if (!packed.defined()) return weight;
  // the codes went through the packing as BF16 values 0..255 (exact), so they come back the same way
  if (fp8) return backend::unpack_conv_weight(packed.to(at::kBFloat16), layout).to(at::kByte);
  // FP16 bits went through the permutation as BF16 bit patterns
  if (packed.scalar_type() == at::kHalf) return backend::unpack_conv_weight(packed.view(at::kBFloat16), layout).view(at::kHalf);
  return backend::unpack_conv_weight(packed, layout);
}

uint64_t WeightStore::bytes() const {
  if (blocks) return blocks->bytes();
  uint64_t n = packed.defined() ? packed.nbytes() : weight.nbytes();
  if (scale.defined()) n += scale.nbytes();
  return n;
}

void WeightStore::decode_into(at::Tensor& out) const {
  const at::Tensor stored = logical();
  if (!fp8) {  // dense, or blocks (logical() dequantised them)
    out.copy_(stored);
    return;
  }
  at::Tensor codes = stored.is_non_overlapping_and_dense() ? stored : stored.contiguous();
  if (codes.strides() == out.strides() && out.is_non_overlapping_and_dense()) {
    decode_fp8_into(codes, format, scale, out);  // element by element in memory order
  } else {
    at::Tensor dense = at::empty_like(codes, at::TensorOptions().dtype(out.scalar_type()));
    decode_fp8_into(codes, format, scale, dense);
    out.copy_(dense);
  }
}

at::Tensor WeightStore::decode(at::ScalarType dtype) const {
  if (blocks) {
    // dequantised on the CPU into the FP32 scratch (the formulas are FP32's), then cast; a GPU
    // gets the result copied over (no device kernel for these formats yet)
    const OpTimer timer(OpKind::Decode);
    const auto start = std::chrono::steady_clock::now();
    at::Tensor out = scratch(at::kFloat, {blocks->rows, blocks->cols});
    blocks->dequantize(out.data_ptr<float>());
    if (!weight.is_cpu()) {
      out = out.to(weight.device(), dtype);
    } else if (dtype != at::kFloat) {
      out = scratch(dtype, out.sizes()).copy_(out);
    }
    count_decode(start, out.numel());
    return out;
  }
  if (!weight.is_cpu()) {
    // A GPU (or the meta device): native float8 codes cast by the device (the caching allocator
    // reuses the memory from layer to layer), times the scale in FP32 as the CPU decode does.
    if (weight.scalar_type() == dtype) return weight;
    at::Tensor out = weight.to(dtype);
    if (fp8 && scale.defined()) {
      out.mul_(scale.numel() > 1 ? along_first_dim(scale, out.dim()) : scale.reshape({}));
    }
    if (fp8) g_decode_weights.fetch_add(static_cast<uint64_t>(weight.numel()));
    return out;
  }
  const at::Tensor stored = logical();
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
  decode_fp8_into(codes, format, scale, out);
  if (target != dtype) out = out.to(dtype);
  count_decode(start, codes.numel());
  return out;
}

at::Tensor WeightStore::packed_bf16() const {
  if (!fp8) {
    if (packed.scalar_type() == at::kBFloat16) return packed;
    const OpTimer cast(OpKind::Cast);
    return scratch(at::kBFloat16, {packed.numel()}).copy_(packed);
  }
  const OpTimer timer(OpKind::Decode);
  const auto start = std::chrono::steady_clock::now();
  at::Tensor out = scratch(at::kBFloat16, {packed.numel()});
  // a per-channel scale multiplies the convolution's output channels (QConv2dImpl::forward)
  decode_fp8_into(packed, format, per_channel_scale() ? at::Tensor() : scale, out);
  count_decode(start, packed.numel());
  return out;
}

at::Tensor WeightStore::place(const at::Tensor& stored, bool is_fp8, Fp8Format fmt, const at::Tensor& scale_in,
                              const at::Device& device, std::optional<ConvGeometry> conv) {
  blocks.reset();
  fp8 = is_fp8;
  if (is_fp8) format = fmt;
  at::Tensor w = stored;
  if (is_fp8 && !device.is_cpu() && backend::has_native_fp8()) w = backend::codes_as_native_fp8(stored, fmt);
  packed = at::Tensor();
  layout = {};
  // Where the build packs convolution weights, every 16-bit weight and every FP8 weight of a CPU
  // convolution goes in packed, so storage types differ in their bytes only (review issue 30): the
  // reorder is a permutation, so FP8 codes go through it as BF16 values 0..255 (exact) and FP16
  // bits as BF16 bit patterns; a per-channel scale multiplies the output channels instead.
  const bool sixteen = w.scalar_type() == at::kBFloat16 || w.scalar_type() == at::kHalf;
  if (conv && device.is_cpu() && backend::has_packed_conv() && backend::current_kernel_options().packed_conv &&
      (is_fp8 || sixteen)) {
    const at::Tensor as_bf16 = is_fp8 ? w.to(at::kBFloat16) : w.scalar_type() == at::kHalf ? w.contiguous().view(at::kBFloat16) : w;
    auto [elements, packed_layout] = backend::pack_conv_weight(as_bf16, conv->stride, conv->padding);
    packed = is_fp8 ? elements.to(at::kByte) : w.scalar_type() == at::kHalf ? elements.view(at::kHalf) : elements;
    layout = std::move(packed_layout);
    w = at::empty({1}, w.options()).expand(w.sizes());  // the placeholder: shape and dtype, no memory
  } else if (device.is_cpu() && w.dim() == 4 && w.scalar_type() != at::kFloat) {
    // A CPU convolution's 16-bit weight or FP8 codes kept channels_last, as its 16-bit activations
    // are (activation_format): oneDNN then reorders it from OHWI, and FP8 decodes straight into that.
    w = w.contiguous(at::MemoryFormat::ChannelsLast);
  }
  weight.set_data(w.to(device));
  return scale_in.defined() ? scale_in.to(device) : at::Tensor();
}

}  // namespace fp8s

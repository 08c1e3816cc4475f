#include "models/quant_probe.h"

#include <cmath>

#include "core/cancel.h"
#include "core/error.h"
#include "models/convert.h"
#include "models/nn.h"

namespace fp8s {

std::map<std::string, at::Tensor> probe_quant_layer(const SafetensorsFile& file, const std::string& layer, int64_t n, int64_t k,
                                                    const at::Tensor& x) {
  if (n <= 0 || k <= 0 || n > (1 << 20) || k > (1 << 20)) throw InputError("--shape " + std::to_string(n) + "," + std::to_string(k) + " is not a layer's shape");
  if (!file.find(layer + ".weight")) throw InputError(file.path() + ": no layer '" + layer + "' (no " + layer + ".weight)");
  const InferenceGuard no_grad;
  const bool has_bias = file.find(layer + ".bias") != nullptr;
  QLinear linear(k, n, has_bias);
  load_layer_weight(*linear, file, layer + ".weight", {WeightType::FP32, Fp8Scale::None, false}, true, at::Device(at::kCPU));
  if (has_bias) linear->bias.set_data(read_tensor(file, file.at(layer + ".bias")).reshape({n}));
  std::map<std::string, at::Tensor> out{{"weight", linear->store.decode(at::kFloat).clone()}};
  if (x.defined()) {
    if (x.dim() != 2 || x.size(1) != k) throw InputError("the input x must be [M, " + std::to_string(k) + "]");
    out["y"] = linear->forward(x.to(at::kFloat));
  }
  return out;
}

std::map<std::string, at::Tensor> probe_quantize(const at::Tensor& weight, const std::string& format, bool per_row, int convrot) {
  if (weight.dim() != 2) throw InputError("quantize: the weight must be [N, K]");
  at::Tensor w = weight.to(at::kFloat).contiguous().clone();
  const int64_t n = w.size(0), k = w.size(1);
  const auto as_f32 = [](const at::Tensor& t) { return t.to(at::kFloat); };
  QuantLayerConf conf;
  if (format == "float8_e4m3fn" || format == "float8_e5m2") {
    at::Tensor codes = at::empty({n, k}, at::kByte), scales = at::empty({per_row ? n : 1}, at::kFloat);
    quantize_float8_kitchen(w.data_ptr<float>(), n, k, format == "float8_e5m2", per_row, codes.data_ptr<uint8_t>(), scales.data_ptr<float>());
    return {{"qdata", as_f32(codes)}, {"scale", per_row ? scales.view({n, 1}) : scales.reshape(at::IntArrayRef{})}};
  }
  if (format == "int8_tensorwise") {
    if (convrot) {
      if (k % convrot != 0) throw InputError("quantize: ConvRot order " + std::to_string(convrot) + " does not divide " + std::to_string(k));
      parse_comfy_quant("{\"format\": \"int8_tensorwise\", \"convrot\": true, \"convrot_groupsize\": " + std::to_string(convrot) + "}", "quantize",
                        "--convrot");  // checks the order
      apply_convrot(w.data_ptr<float>(), n, k, convrot);
      per_row = true;
    }
    at::Tensor q = at::empty({n, k}, at::kChar), scales = at::empty({per_row ? n : 1}, at::kFloat);
    quantize_int8(w.data_ptr<float>(), n, k, per_row, q.data_ptr<int8_t>(), scales.data_ptr<float>());
    return {{"qdata", as_f32(q)}, {"scale", per_row ? scales.view({n, 1}) : scales.reshape(at::IntArrayRef{})}};
  }
  if (format == "mxfp8" || format == "nvfp4") {
    conf.format = format == "mxfp8" ? QuantFormat::Mxfp8 : QuantFormat::Nvfp4;
    const StoredShape st = stored_shape(conf, n, k);
    at::Tensor data = at::empty({st.data_rows, st.data_cols}, at::kByte), scale = at::empty({st.scale_rows, st.scale_cols}, at::kByte);
    if (conf.format == QuantFormat::Mxfp8) {
      quantize_mxfp8(w.data_ptr<float>(), n, k, data.data_ptr<uint8_t>(), scale.data_ptr<uint8_t>());
      return {{"qdata", as_f32(data)}, {"scale", as_f32(scale)}};
    }
    const float s2 = quantize_nvfp4(w.data_ptr<float>(), n, k, data.data_ptr<uint8_t>(), scale.data_ptr<uint8_t>());
    return {{"qdata", as_f32(data)}, {"scale", as_f32(scale)}, {"scale_2", at::full({}, s2, at::kFloat)}};
  }
  throw InputError("quantize: format '" + format + "' is not one the engine writes (float8_e4m3fn, float8_e5m2, int8_tensorwise, mxfp8, nvfp4)");
}

WeightError measure_weight_error(const SafetensorsFile& file, WeightType type, Fp8Scale scale) {
  if (!is_quantised(type)) throw InputError(std::string("--weights ") + weight_type_name(type) + ": not a quantised storage type");
  WeightError e;
  double err2 = 0, ref2 = 0;
  for (const auto& t : file.tensors()) {
    cancel_point();
    if (!is_linear_weight(t)) continue;
    const at::Tensor w = read_tensor(file, t).contiguous();
    at::Tensor back = at::empty_like(w);
    if (is_block_storage(type)) {
      quantise_block_weight(w, type)->dequantize(back.data_ptr<float>());
    } else {
      at::Tensor codes = at::empty(w.sizes(), at::kByte);
      const auto scales = quantize_weight(w.data_ptr<float>(), w.size(0), w.numel(), fp8_format(type), scale, codes.data_ptr<uint8_t>());
      at::Tensor s = scales.empty() ? at::Tensor() : at::tensor(std::vector<float>(scales.begin(), scales.end()), at::kFloat);
      decode_fp8_into(codes, fp8_format(type), s, back);
    }
    err2 += (back - w).to(at::kDouble).pow(2).sum().item<double>();
    ref2 += w.to(at::kDouble).pow(2).sum().item<double>();
    e.layers += 1;
    e.weights += static_cast<uint64_t>(w.numel());
  }
  e.rel_rms = ref2 > 0 ? std::sqrt(err2 / ref2) : 0;
  return e;
}

}  // namespace fp8s

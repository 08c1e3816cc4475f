#include "models/synthetic.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "fp8/codec.h"

namespace fp8s {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t hash_name(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

constexpr std::size_t kChunk = 1u << 22;  // elements generated per writer append

// Uniform values in [-bound, bound); element i depends only on (stream, i), so chunks are
// reproducible whatever the thread count.
void fill_uniform(float* dst, std::size_t n, uint64_t first, uint64_t stream, float bound) {
  at::parallel_for(0, static_cast<int64_t>(n), 1 << 15, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const uint64_t r = splitmix64(stream ^ (first + static_cast<uint64_t>(i)) * 0xD1B54A32D192ED03ull);
      const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // [0,1)
      dst[i] = (2.0f * u - 1.0f) * bound;
    }
  });
}

float bound_for(const LayoutEntry& e) {
  switch (e.role) {
    case TensorRole::LinearWeight:
    case TensorRole::ConvWeight:
    case TensorRole::Embedding: {
      const double fan_in = e.shape.empty() || e.shape[0] == 0
                                 ? 1.0
                                 : static_cast<double>(TensorSpec{e.name, e.dtype, e.shape}.nbytes() /
                                                       dtype_size(e.dtype)) / e.shape[0];
      return static_cast<float>(std::sqrt(3.0 / std::max(1.0, fan_in)));
    }
    case TensorRole::Bias: return 0.02f;
    default: return 0.0f;
  }
}

}  // namespace

std::vector<float> ddpm_buffer(const std::string& name) {
  const int n = 1000;
  std::vector<double> betas(n), acp(n), acp_prev(n);
  const double a = std::sqrt(0.00085), b = std::sqrt(0.012);
  double prod = 1.0;
  for (int i = 0; i < n; ++i) {
    const double s = a + (b - a) * i / (n - 1);
    betas[i] = s * s;
    acp_prev[i] = prod;
    prod *= 1.0 - betas[i];
    acp[i] = prod;
  }
  std::vector<float> out(n);
  for (int i = 0; i < n; ++i) {
    const double pv = betas[i] * (1 - acp_prev[i]) / (1 - acp[i]);
    double v = 0;
    if (name == "betas") v = betas[i];
    else if (name == "alphas_cumprod") v = acp[i];
    else if (name == "alphas_cumprod_prev") v = acp_prev[i];
    else if (name == "sqrt_alphas_cumprod") v = std::sqrt(acp[i]);
    else if (name == "sqrt_one_minus_alphas_cumprod") v = std::sqrt(1 - acp[i]);
    else if (name == "log_one_minus_alphas_cumprod") v = std::log(1 - acp[i]);
    else if (name == "sqrt_recip_alphas_cumprod") v = std::sqrt(1 / acp[i]);
    else if (name == "sqrt_recipm1_alphas_cumprod") v = std::sqrt(1 / acp[i] - 1);
    else if (name == "posterior_variance") v = pv;
    else if (name == "posterior_log_variance_clipped") v = std::log(std::max(pv, 1e-20));
    else if (name == "posterior_mean_coef1") v = betas[i] * std::sqrt(acp_prev[i]) / (1 - acp[i]);
    else if (name == "posterior_mean_coef2") v = (1 - acp_prev[i]) * std::sqrt(1 - betas[i]) / (1 - acp[i]);
    else throw InputError("unknown DDPM buffer '" + name + "'");
    out[i] = static_cast<float>(v);
  }
  return out;
}

void make_synthetic(const SyntheticOptions& options, const ProgressFn& progress) {
  if (options.float_dtype != Dtype::F16 && options.float_dtype != Dtype::F32 &&
      options.float_dtype != Dtype::BF16) {
    throw InputError("make-synthetic writes fp16, bf16 or fp32 weights");
  }
  std::map<std::string, std::string> metadata{{"format", "pt"}};
  if (!options.config.ldm_config_json.empty()) metadata["ldm.config"] = options.config.ldm_config_json;
  make_synthetic_layout(checkpoint_layout(options.config, options.float_dtype), metadata, options.seed, options.out,
                        options.overwrite, progress);
}

void make_synthetic_layout(const std::vector<LayoutEntry>& layout, const std::map<std::string, std::string>& metadata,
                           uint64_t seed, const std::string& out, bool overwrite, const ProgressFn& progress) {
  std::vector<TensorSpec> specs;
  specs.reserve(layout.size());
  for (const auto& e : layout) specs.push_back({e.name, e.dtype, e.shape});
  SafetensorsWriter writer(out, specs, metadata, overwrite);
  std::vector<uint8_t> codes;

  std::vector<float> values;
  std::vector<uint16_t> half;
  uint64_t written = 0;
  for (std::size_t t = 0; t < layout.size(); ++t) {
    const auto& e = layout[t];
    const uint64_t n = specs[t].nbytes() / dtype_size(e.dtype);
    if (e.dtype == Dtype::I64) {
      std::vector<int64_t> ids(n);
      for (uint64_t i = 0; i < n; ++i) ids[i] = e.shape.empty() ? 0 : static_cast<int64_t>(i % e.shape.back());  // a 0-dim counter: 0
      writer.append(ids.data(), ids.size() * 8);
    } else if (e.dtype == Dtype::I32) {
      std::vector<int32_t> v(n, 0);
      writer.append(v.data(), v.size() * 4);
    } else if (e.role == TensorRole::Buffer || e.role == TensorRole::Other) {
      std::vector<float> v;
      if (e.name == "model_ema.decay") v = {0.9999f};
      else if (e.role == TensorRole::Other) v.assign(n, std::log(100.0f));  // logit_scale
      else v = ddpm_buffer(e.name);
      if (v.size() != n) throw RuntimeFailure("buffer size mismatch for " + e.name);
      // Buffers stay F32 (as in the released files); others follow the checkpoint's float type.
      if (e.dtype == Dtype::F32) {
        writer.append(v.data(), v.size() * 4);
      } else {
        half.resize(n);
        if (e.dtype == Dtype::F16) f32_to_f16(v.data(), half.data(), n);
        else f32_to_bf16(v.data(), half.data(), n);
        writer.append(half.data(), half.size() * 2);
      }
    } else {
      const uint64_t stream = splitmix64(seed ^ hash_name(e.name));
      const float bound = bound_for(e);
      const float fill = e.role == TensorRole::NormWeight ? 1.0f : 0.0f;
      for (uint64_t first = 0; first < n; first += kChunk) {
        const std::size_t m = static_cast<std::size_t>(std::min<uint64_t>(kChunk, n - first));
        values.resize(m);
        if (bound > 0) fill_uniform(values.data(), m, first, stream, bound);
        else std::fill(values.begin(), values.end(), fill);
        if (e.dtype == Dtype::F32) {
          writer.append(values.data(), m * 4);
        } else if (is_fp8_dtype(e.dtype)) {
          codes.resize(m);
          encode_f32_to_fp8(values.data(), codes.data(), m, fp8_format_of(e.dtype));
          writer.append(codes.data(), m);
        } else {
          half.resize(m);
          if (e.dtype == Dtype::F16) f32_to_f16(values.data(), half.data(), m);
          else f32_to_bf16(values.data(), half.data(), m);
          writer.append(half.data(), m * 2);
        }
      }
    }
    written += specs[t].nbytes();
    if (progress) progress(t + 1, layout.size(), written);
  }
  writer.commit();
}

}  // namespace fp8s

#include "fp8/quantize.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>

namespace fp8s {
namespace {

float scale_for(const float* w, int64_t n, Fp8Format format) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(w[i]));
  if (amax == 0.0f || !std::isfinite(amax)) return 1.0f;
  return amax / fp8_max_finite(format);
}

}  // namespace

const char* fp8_scale_name(Fp8Scale scale) {
  switch (scale) {
    case Fp8Scale::None: return "none";
    case Fp8Scale::Tensor: return "tensor";
    case Fp8Scale::Channel: return "channel";
  }
  return "none";
}

std::optional<Fp8Scale> parse_fp8_scale(const std::string& name) {
  if (name == "none") return Fp8Scale::None;
  if (name == "tensor") return Fp8Scale::Tensor;
  if (name == "channel") return Fp8Scale::Channel;
  return std::nullopt;
}

std::vector<float> quantize_weight(const float* w, int64_t rows, int64_t numel, Fp8Format format,
                                   Fp8Scale scale, uint8_t* codes) {
  const auto n = static_cast<std::size_t>(numel);
  switch (scale) {
    case Fp8Scale::None:
      encode_f32_to_fp8(w, codes, n, format);
      return {};
    case Fp8Scale::Tensor: {
      float s = 0.0f;
      // amax over the whole tensor, in parallel
      std::vector<float> partial(static_cast<std::size_t>(at::get_num_threads()) + 1, 0.0f);
      at::parallel_for(0, numel, 1 << 16, [&](int64_t b, int64_t e) {
        float m = 0.0f;
        for (int64_t i = b; i < e; ++i) m = std::max(m, std::fabs(w[i]));
        auto& slot = partial[static_cast<std::size_t>(at::get_thread_num())];
        slot = std::max(slot, m);
      });
      float amax = *std::max_element(partial.begin(), partial.end());
      s = (amax == 0.0f || !std::isfinite(amax)) ? 1.0f : amax / fp8_max_finite(format);
      encode_f32_to_fp8(w, codes, n, format, s);
      return {s};
    }
    case Fp8Scale::Channel: {
      const int64_t cols = rows > 0 ? numel / rows : 0;
      std::vector<float> scales(static_cast<std::size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) {
        scales[r] = scale_for(w + r * cols, cols, format);
        encode_f32_to_fp8(w + r * cols, codes + r * cols, static_cast<std::size_t>(cols), format,
                          scales[r]);
      }
      return scales;
    }
  }
  return {};
}

}  // namespace fp8s

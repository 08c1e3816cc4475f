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

std::vector<float> quantize_weight_stochastic(const float* w, int64_t rows, int64_t numel,
                                              Fp8Format format, Fp8Scale scale, uint8_t* codes,
                                              uint64_t seed) {
  // The scales of the deterministic path, then each code re-decided between its neighbours.
  auto scales = quantize_weight(w, rows, numel, format, scale, codes);
  const int64_t cols = rows > 0 ? numel / rows : 0;
  const uint8_t max_code = format == Fp8Format::E4M3FN ? 0x7E : 0x7B;
  at::parallel_for(0, numel, 1 << 14, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float s = scales.empty() ? 1.0f : scales[scales.size() == 1 ? 0 : static_cast<std::size_t>(i / cols)];
      const float v = w[i] / s;
      if (!std::isfinite(v)) continue;
      const uint8_t sign = codes[i] & 0x80;
      const uint8_t mag = codes[i] & 0x7F;
      const float a = std::fabs(v);
      const float d = decode_fp8(mag, format);
      if (d == a || mag > max_code) continue;
      uint8_t lo = mag, hi = mag;
      if (d < a) {
        if (mag == max_code) continue;  // saturated
        hi = static_cast<uint8_t>(mag + 1);
      } else {
        if (mag == 0) continue;
        lo = static_cast<uint8_t>(mag - 1);
      }
      const float vlo = decode_fp8(lo, format), vhi = decode_fp8(hi, format);
      uint64_t x = seed ^ (static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull);
      x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
      x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
      x ^= x >> 31;
      const float u = static_cast<float>(x >> 40) * (1.0f / 16777216.0f);
      codes[i] = static_cast<uint8_t>(sign | (u < (a - vlo) / (vhi - vlo) ? hi : lo));
    }
  });
  return scales;
}

}  // namespace fp8s

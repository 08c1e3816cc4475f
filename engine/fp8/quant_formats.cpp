// ComfyUI's comfy_quant layer formats (quant_formats.h). Built with -ffp-contract=off: each `·` and
// `+` of the README's formulas is one rounded FP32 operation, never a fused multiply-add.
#include "fp8/quant_formats.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "fp8/codec.h"

namespace fp8s {
namespace {

constexpr float kE2m1[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};


// Rows in parallel over the intra-op pool.
template <class Fn>
void each_row(int64_t n, Fn&& fn) {
  at::parallel_for(0, n, 16, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) fn(r);
  });
}

// E8M0 as kitchen decodes it: 2^(code − 127), code 0 (all-zero blocks, padding) as 0.
float e8m0(uint8_t code) { return code == 0 ? 0.0f : std::ldexp(1.0f, static_cast<int>(code) - 127); }

// The E2M1 code of v by round to nearest even on the grid (ties to the even code), sign kept.
uint8_t e2m1_code(float v) {
  const float a = std::fabs(v);
  uint8_t c = a <= 0.25f ? 0 : a < 0.75f ? 1 : a <= 1.25f ? 2 : a < 1.75f ? 3 : a <= 2.5f ? 4 : a < 3.5f ? 5 : a <= 5.0f ? 6 : 7;
  return static_cast<uint8_t>(std::signbit(v) ? c | 8 : c);
}

// Row r's columns [c0, c0 + size) of w [n, k] into `block`, zero beyond the weight (padding);
// returns their largest magnitude.
float padded_block(const float* w, int64_t n, int64_t k, int64_t r, int64_t c0, int size, float* block) {
  float a = 0.0f;
  for (int i = 0; i < size; ++i) {
    const int64_t c = c0 + i;
    block[i] = r < n && c < k ? w[r * k + c] : 0.0f;
    a = std::max(a, std::fabs(block[i]));
  }
  return a;
}

}  // namespace

void dequant_int8(const int8_t* q, const float* scale, bool per_row, int64_t n, int64_t k, float* out) {
  each_row(n, [&](int64_t r) {
    const float s = per_row ? scale[r] : scale[0];
    for (int64_t c = 0; c < k; ++c) out[r * k + c] = static_cast<float>(q[r * k + c]) * s;
  });
}

void dequant_mxfp8(const uint8_t* codes, int64_t kp, const uint8_t* exponents, int64_t scale_cols, int64_t n, int64_t k,
                   float* out) {
  const float* table = fp8_decode_table(Fp8Format::E4M3FN);
  each_row(n, [&](int64_t r) {
    for (int64_t c0 = 0; c0 < k; c0 += 32) {  // one power of two per block of 32
      const float scale = e8m0(exponents[tiled_offset(r, c0 / 32, scale_cols)]);
      const int64_t end = std::min<int64_t>(c0 + 32, k);
      for (int64_t c = c0; c < end; ++c) out[r * k + c] = table[codes[r * kp + c]] * scale;
    }
  });
}

void dequant_nvfp4(const uint8_t* packed, int64_t kp, const uint8_t* scales, int64_t scale_cols, float scale_2, int64_t n,
                   int64_t k, float* out) {
  const float* table = fp8_decode_table(Fp8Format::E4M3FN);
  const int64_t row_bytes = kp / 2;
  each_row(n, [&](int64_t r) {
    for (int64_t c0 = 0; c0 < k; c0 += 16) {  // scale_2 · block scale first, once per block of 16
      const float block = scale_2 * table[scales[tiled_offset(r, c0 / 16, scale_cols)]];
      const int64_t end = std::min<int64_t>(c0 + 16, k);
      for (int64_t c = c0; c < end; ++c) {
        const uint8_t byte = packed[r * row_bytes + c / 2];
        const uint8_t code = (c % 2 == 0) ? byte >> 4 : byte & 0x0F;  // even column in the high nibble
        out[r * k + c] = kE2m1[code] * block;
      }
    }
  });
}

void dequant_w4a4(const uint8_t* packed, const float* row_scale, int64_t n, int64_t k, float* out) {
  each_row(n, [&](int64_t r) {
    for (int64_t c = 0; c < k; ++c) {
      const uint8_t byte = packed[r * (k / 2) + c / 2];
      const int nib = (c % 2 == 0) ? byte & 0x0F : byte >> 4;  // even column in the low nibble
      out[r * k + c] = static_cast<float>(nib >= 8 ? nib - 16 : nib) * row_scale[r];
    }
  });
}

void dequant_awq(const uint8_t* packed, const float* scale, const float* zeros, int group, int64_t n, int64_t k, float* out) {
  each_row(n, [&](int64_t r) {
    for (int64_t c = 0; c < k; ++c) {
      const uint8_t byte = packed[r * (k / 2) + c / 2];
      const int q = (c % 2 == 0) ? byte & 0x0F : byte >> 4;
      const std::size_t at = static_cast<std::size_t>((c / group) * n + r);
      const float t = static_cast<float>(q - 8) * scale[at];
      out[r * k + c] = t + zeros[at];
    }
  });
}

void dequant_svdquant(const uint8_t* packed, const float* scale, const float* smooth, const float* down, const float* up,
                      int64_t rank, int64_t n, int64_t k, float* out) {
  each_row(n, [&](int64_t r) {
    for (int64_t c = 0; c < k; ++c) {
      const uint8_t byte = packed[r * (k / 2) + c / 2];
      const int nib = (c % 2 == 0) ? byte & 0x0F : byte >> 4;
      float low = 0.0f;
      for (int64_t i = 0; i < rank; ++i) low += up[r * rank + i] * down[c * rank + i];
      const float t = static_cast<float>(nib >= 8 ? nib - 16 : nib) * scale[(c / 64) * n + r];
      out[r * k + c] = t / smooth[c] + low;
    }
  });
}

void undo_convrot(float* w, int64_t n, int64_t k, int group) {
  each_row(n, [&](int64_t r) {
    for (int64_t g0 = 0; g0 < k; g0 += group) {
      float* v = w + r * k + g0;
      // H_G = H_4 ⊗ … ⊗ H_4 / √G: H_4 / 2 along each base-4 digit of the index
      for (int s = 1; s < group; s *= 4) {
        for (int b = 0; b < group; b += 4 * s) {
          for (int o = 0; o < s; ++o) {
            float& a = v[b + o];
            float& bb = v[b + o + s];
            float& c = v[b + o + 2 * s];
            float& d = v[b + o + 3 * s];
            const float x0 = a, x1 = bb, x2 = c, x3 = d;
            a = 0.5f * (x0 + x1 + x2 - x3);
            bb = 0.5f * (x0 + x1 - x2 + x3);
            c = 0.5f * (x0 - x1 + x2 + x3);
            d = 0.5f * (-x0 + x1 + x2 + x3);
          }
        }
      }
    }
  });
}

void quantize_int8(const float* w, int64_t n, int64_t k, bool per_row, int8_t* q, float* scales) {
  auto scale_of = [](float amax) { return std::max(amax / 127.0f, 1e-30f); };
  auto rows = [&](int64_t r, float s) {
    for (int64_t c = 0; c < k; ++c) {
      const float v = std::nearbyint(w[r * k + c] / s);
      q[r * k + c] = static_cast<int8_t>(std::clamp(v, -128.0f, 127.0f));
    }
  };
  if (per_row) {
    each_row(n, [&](int64_t r) {
      float a = 0.0f;
      for (int64_t c = 0; c < k; ++c) a = std::max(a, std::fabs(w[r * k + c]));
      scales[r] = scale_of(a);
      rows(r, scales[r]);
    });
    return;
  }
  float a = 0.0f;
  for (int64_t i = 0; i < n * k; ++i) a = std::max(a, std::fabs(w[i]));
  scales[0] = scale_of(a);
  each_row(n, [&](int64_t r) { rows(r, scales[0]); });
}

void quantize_mxfp8(const float* w, int64_t n, int64_t k, uint8_t* codes, uint8_t* exponents) {
  const QuantLayerConf conf{QuantFormat::Mxfp8};
  const StoredShape s = stored_shape(conf, n, k);
  std::fill(exponents, exponents + s.scale_rows * s.scale_cols, uint8_t{0});
  each_row(s.data_rows, [&](int64_t r) {
    for (int64_t b = 0; b < s.data_cols / 32; ++b) {
      float block[32];
      const float a = padded_block(w, n, k, r, b * 32, 32, block);
      uint8_t* out = codes + r * s.data_cols + b * 32;
      if (a == 0.0f) {
        std::fill(out, out + 32, uint8_t{0});
        continue;  // exponent code 0
      }
      const float sc = std::max(a / 448.0f, std::ldexp(1.0f, -127));
      const int e = static_cast<int>(std::ceil(std::log2(sc)));  // float32 log2, as kitchen takes it
      exponents[tiled_offset(r, b, s.scale_cols)] = static_cast<uint8_t>(std::clamp(e + 127, 0, 254));
      for (int i = 0; i < 32; ++i) out[i] = encode_fp8(std::clamp(std::ldexp(block[i], -e), -448.0f, 448.0f), Fp8Format::E4M3FN);
    }
  });
}

float quantize_nvfp4(const float* w, int64_t n, int64_t k, uint8_t* packed, uint8_t* scales) {
  const QuantLayerConf conf{QuantFormat::Nvfp4};
  const StoredShape s = stored_shape(conf, n, k);
  std::fill(scales, scales + s.scale_rows * s.scale_cols, uint8_t{0});
  float amax = 0.0f;
  for (int64_t i = 0; i < n * k; ++i) amax = std::max(amax, std::fabs(w[i]));
  const float s2 = amax / 2688.0f;
  const float* table = fp8_decode_table(Fp8Format::E4M3FN);
  const int64_t kp = s.data_cols * 2;
  each_row(s.data_rows, [&](int64_t r) {
    for (int64_t b = 0; b < kp / 16; ++b) {
      float block[16];
      const float a = padded_block(w, n, k, r, b * 16, 16, block);
      const float u = std::min((a / 6.0f) / s2, 448.0f);
      const uint8_t code_s = s2 > 0.0f ? encode_fp8(u, Fp8Format::E4M3FN) : uint8_t{0};
      scales[tiled_offset(r, b, s.scale_cols)] = code_s;
      const float t = s2 * table[code_s];
      uint8_t* out = packed + r * s.data_cols + b * 8;
      for (int i = 0; i < 16; i += 2) {
        const float v0 = t == 0.0f ? 0.0f : std::clamp(block[i] / t, -6.0f, 6.0f);
        const float v1 = t == 0.0f ? 0.0f : std::clamp(block[i + 1] / t, -6.0f, 6.0f);
        out[i / 2] = static_cast<uint8_t>((e2m1_code(v0) << 4) | e2m1_code(v1));
      }
    }
  });
  return s2;
}

void quantize_float8_kitchen(const float* w, int64_t n, int64_t k, bool e5m2, bool per_row, uint8_t* codes, float* scales) {
  const Fp8Format f = e5m2 ? Fp8Format::E5M2 : Fp8Format::E4M3FN;
  const float top = fp8_max_finite(f);
  auto encode_rows = [&](int64_t r, float s) {
    const float rec = s > 0.0f ? 1.0f / s : 0.0f;  // times the reciprocal, as kitchen does
    for (int64_t c = 0; c < k; ++c) codes[r * k + c] = encode_fp8(std::clamp(w[r * k + c] * rec, -top, top), f);
  };
  if (per_row) {
    each_row(n, [&](int64_t r) {
      float a = 0.0f;
      for (int64_t c = 0; c < k; ++c) a = std::max(a, std::fabs(w[r * k + c]));
      scales[r] = a / top;
      encode_rows(r, scales[r]);
    });
    return;
  }
  float a = 0.0f;
  for (int64_t i = 0; i < n * k; ++i) a = std::max(a, std::fabs(w[i]));
  scales[0] = a / top;
  each_row(n, [&](int64_t r) { encode_rows(r, scales[0]); });
}

}  // namespace fp8s

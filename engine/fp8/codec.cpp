#include "fp8/codec.h"

#include <ATen/Parallel.h>
#include <c10/util/Half.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>

namespace fp8s {
namespace {

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Per-format constants of the branch-free encoder. `shift` drops FP32 mantissa bits down to the
// format's; `rebias` moves the exponent bias; `magic` is the FP32 whose ulp equals the format's
// smallest subnormal, so adding it rounds a subnormal to nearest-even in hardware.
struct Fp8Params {
  uint32_t shift;
  uint32_t rebias;
  uint32_t min_normal_bits;
  uint32_t max_finite_bits;
  float magic;
  uint8_t nan_code;
  bool has_inf;
};

constexpr Fp8Params kE4M3{20, (127u - 7u) << 23, 0x3C800000u /*2^-6*/, 0x43E00000u /*448*/,
                          16384.0f /*2^14: ulp 2^-9*/, 0x7F, false};
constexpr Fp8Params kE5M2{21, (127u - 15u) << 23, 0x38800000u /*2^-14*/, 0x47600000u /*57344*/,
                          128.0f /*2^7: ulp 2^-16*/, 0x7F, true};

template <const Fp8Params& P>
inline uint8_t encode(float value) {
  const uint32_t bits = bits_of(value);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t abs = bits & 0x7FFFFFFFu;
  const uint32_t a = abs < P.max_finite_bits ? abs : P.max_finite_bits;  // saturate
  const uint32_t normal =
      (a - P.rebias + ((1u << (P.shift - 1)) - 1u) + ((a >> P.shift) & 1u)) >> P.shift;
  const uint32_t subnormal = bits_of(float_of(a) + P.magic) - bits_of(P.magic);
  uint32_t code = a < P.min_normal_bits ? subnormal : normal;
  if (P.has_inf) code = abs == 0x7F800000u ? 0x7Cu : code;
  code = abs > 0x7F800000u ? P.nan_code : code;
  return static_cast<uint8_t>(code | sign);
}

float decode_formula(uint8_t code, Fp8Format format) {
  const bool e4 = format == Fp8Format::E4M3FN;
  const int mant_bits = e4 ? 3 : 2;
  const int bias = e4 ? 7 : 15;
  const int exp_max = e4 ? 15 : 31;
  const float sign = (code & 0x80) ? -1.0f : 1.0f;
  const int e = (code & 0x7F) >> mant_bits;
  const int m = code & ((1 << mant_bits) - 1);
  if (e4 && e == exp_max && m == (1 << mant_bits) - 1) return std::numeric_limits<float>::quiet_NaN();
  if (!e4 && e == exp_max) {
    return m == 0 ? sign * std::numeric_limits<float>::infinity()
                  : std::numeric_limits<float>::quiet_NaN();
  }
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), 1 - bias - mant_bits);
  return sign * std::ldexp(1.0f + static_cast<float>(m) / (1 << mant_bits), e - bias);
}

struct Tables {
  std::array<float, 256> f32;
  std::array<uint16_t, 256> bf16;
  std::array<uint16_t, 256> f16;
};

const Tables& tables(Fp8Format format) {
  static const auto make = [](Fp8Format f) {
    Tables t{};
    for (int c = 0; c < 256; ++c) {
      t.f32[c] = decode_formula(static_cast<uint8_t>(c), f);
      t.bf16[c] = f32_to_bf16(t.f32[c]);  // exact: FP8 values fit BF16 and FP16
      t.f16[c] = f32_to_f16(t.f32[c]);
    }
    return t;
  };
  static const Tables e4 = make(Fp8Format::E4M3FN);
  static const Tables e5 = make(Fp8Format::E5M2);
  return format == Fp8Format::E4M3FN ? e4 : e5;
}

constexpr int64_t kGrain = 1 << 16;

template <typename Fn>
void parallel_chunks(std::size_t n, Fn&& fn) {
  at::parallel_for(0, static_cast<int64_t>(n), kGrain, [&](int64_t begin, int64_t end) {
    fn(static_cast<std::size_t>(begin), static_cast<std::size_t>(end));
  });
}

template <const Fp8Params& P, typename Load>
void encode_loop(std::size_t begin, std::size_t end, uint8_t* dst, float divisor, Load load) {
  if (divisor == 1.0f) {
    for (std::size_t i = begin; i < end; ++i) dst[i] = encode<P>(load(i));
  } else {
    for (std::size_t i = begin; i < end; ++i) dst[i] = encode<P>(load(i) / divisor);
  }
}

template <typename Load>
void encode_bulk(std::size_t n, uint8_t* dst, Fp8Format format, float divisor, Load load) {
  parallel_chunks(n, [&](std::size_t b, std::size_t e) {
    if (format == Fp8Format::E4M3FN) {
      encode_loop<kE4M3>(b, e, dst, divisor, load);
    } else {
      encode_loop<kE5M2>(b, e, dst, divisor, load);
    }
  });
}

}  // namespace

const char* fp8_format_name(Fp8Format format) {
  return format == Fp8Format::E4M3FN ? "e4m3fn" : "e5m2";
}
float fp8_max_finite(Fp8Format format) {
  return format == Fp8Format::E4M3FN ? 448.0f : 57344.0f;
}

uint8_t encode_fp8(float value, Fp8Format format) {
  return format == Fp8Format::E4M3FN ? encode<kE4M3>(value) : encode<kE5M2>(value);
}

float decode_fp8(uint8_t code, Fp8Format format) { return tables(format).f32[code]; }

bool fp8_is_nan(uint8_t code, Fp8Format format) {
  const uint8_t a = code & 0x7F;
  return format == Fp8Format::E4M3FN ? a == 0x7F : a > 0x7C;
}

const float* fp8_decode_table(Fp8Format format) { return tables(format).f32.data(); }

float f16_to_f32(uint16_t bits) { return c10::detail::fp16_ieee_to_fp32_value(bits); }
uint16_t f32_to_f16(float value) { return c10::detail::fp16_ieee_from_fp32_value(value); }
float bf16_to_f32(uint16_t bits) { return float_of(static_cast<uint32_t>(bits) << 16); }
uint16_t f32_to_bf16(float value) {
  const uint32_t u = bits_of(value);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

void encode_f32_to_fp8(const float* src, uint8_t* dst, std::size_t n, Fp8Format format,
                       float divisor) {
  encode_bulk(n, dst, format, divisor, [src](std::size_t i) { return src[i]; });
}
void encode_bf16_to_fp8(const uint16_t* src, uint8_t* dst, std::size_t n, Fp8Format format,
                        float divisor) {
  encode_bulk(n, dst, format, divisor,
              [src](std::size_t i) { return float_of(static_cast<uint32_t>(src[i]) << 16); });
}
void encode_f16_to_fp8(const uint16_t* src, uint8_t* dst, std::size_t n, Fp8Format format,
                       float divisor) {
  encode_bulk(n, dst, format, divisor,
              [src](std::size_t i) { return c10::detail::fp16_ieee_to_fp32_value(src[i]); });
}

void decode_fp8_to_f32(const uint8_t* src, float* dst, std::size_t n, Fp8Format format,
                       float scale) {
  const float* table = tables(format).f32.data();
  parallel_chunks(n, [&](std::size_t b, std::size_t e) {
    if (scale == 1.0f) {
      for (std::size_t i = b; i < e; ++i) dst[i] = table[src[i]];
    } else {
      for (std::size_t i = b; i < e; ++i) dst[i] = table[src[i]] * scale;
    }
  });
}

void decode_fp8_to_bf16(const uint8_t* src, uint16_t* dst, std::size_t n, Fp8Format format,
                        float scale) {
  const auto& t = tables(format);
  parallel_chunks(n, [&](std::size_t b, std::size_t e) {
    if (scale == 1.0f) {
      for (std::size_t i = b; i < e; ++i) dst[i] = t.bf16[src[i]];
    } else {
      for (std::size_t i = b; i < e; ++i) dst[i] = f32_to_bf16(t.f32[src[i]] * scale);
    }
  });
}

void decode_fp8_to_f16(const uint8_t* src, uint16_t* dst, std::size_t n, Fp8Format format,
                       float scale) {
  const auto& t = tables(format);
  parallel_chunks(n, [&](std::size_t b, std::size_t e) {
    if (scale == 1.0f) {
      for (std::size_t i = b; i < e; ++i) dst[i] = t.f16[src[i]];
    } else {
      for (std::size_t i = b; i < e; ++i) dst[i] = f32_to_f16(t.f32[src[i]] * scale);
    }
  });
}

void f16_to_f32(const uint16_t* src, float* dst, std::size_t n) {
  parallel_chunks(n, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) dst[i] = c10::detail::fp16_ieee_to_fp32_value(src[i]);
  });
}
void bf16_to_f32(const uint16_t* src, float* dst, std::size_t n) {
  parallel_chunks(n, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) dst[i] = float_of(static_cast<uint32_t>(src[i]) << 16);
  });
}
void f32_to_f16(const float* src, uint16_t* dst, std::size_t n) {
  parallel_chunks(n, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) dst[i] = c10::detail::fp16_ieee_from_fp32_value(src[i]);
  });
}
void f32_to_bf16(const float* src, uint16_t* dst, std::size_t n) {
  parallel_chunks(n, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) dst[i] = fp8s::f32_to_bf16(src[i]);
  });
}

}  // namespace fp8s

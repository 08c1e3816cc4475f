#include "fp8/codec.h"

#include <ATen/Parallel.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define FP8S_AVX512_LUT 1
#else
#define FP8S_AVX512_LUT 0
#endif

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

// Branch-free (selects through masks) so that the bulk loops vectorise.
template <const Fp8Params& P>
inline uint8_t encode(float value) {
  const uint32_t bits = bits_of(value);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t abs = bits & 0x7FFFFFFFu;
  const uint32_t a = std::min(abs, P.max_finite_bits);  // saturate finite overflow (and inf)
  const uint32_t normal =
      (a - P.rebias + ((1u << (P.shift - 1)) - 1u) + ((a >> P.shift) & 1u)) >> P.shift;
  const uint32_t subnormal = bits_of(float_of(a) + P.magic) - bits_of(P.magic);
  const uint32_t is_sub = 0u - static_cast<uint32_t>(a < P.min_normal_bits);
  uint32_t code = (subnormal & is_sub) | (normal & ~is_sub);
  if constexpr (P.has_inf) {
    const uint32_t is_inf = 0u - static_cast<uint32_t>(abs == 0x7F800000u);
    code = (0x7Cu & is_inf) | (code & ~is_inf);
  }
  const uint32_t is_nan = 0u - static_cast<uint32_t>(abs > 0x7F800000u);
  code = (P.nan_code & is_nan) | (code & ~is_nan);
  return static_cast<uint8_t>(code | sign);
}

// FP16 -> FP32 without branches (exact, subnormals included), for vectorised bulk loops.
inline float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7FFFu;
  const uint32_t is_special = 0u - static_cast<uint32_t>(em >= 0x7C00u);
  const uint32_t is_sub = 0u - static_cast<uint32_t>(em < 0x0400u);
  const uint32_t normal = (em << 13) + ((127u - 15u) << 23);
  const uint32_t special = (em << 13) | 0x7F800000u;
  // subnormal: em * 2^-24, exact in FP32
  const uint32_t subnormal = bits_of(static_cast<float>(em) * 5.9604644775390625e-8f);
  uint32_t out = (normal & ~is_special & ~is_sub) | (special & is_special) | (subnormal & is_sub);
  return float_of(out | sign);
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

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define FP8S_VECTOR_CLONES __attribute__((target_clones("arch=skylake-avx512", "avx2", "default")))
#else
#define FP8S_VECTOR_CLONES
#endif

template <const Fp8Params& P>
inline void encode_f32_span(const float* src, uint8_t* dst, std::size_t n, float divisor) {
  if (divisor == 1.0f) {
    for (std::size_t i = 0; i < n; ++i) dst[i] = encode<P>(src[i]);
  } else {
    for (std::size_t i = 0; i < n; ++i) dst[i] = encode<P>(src[i] / divisor);
  }
}

template <const Fp8Params& P>
inline void encode_bf16_span(const uint16_t* src, uint8_t* dst, std::size_t n, float divisor) {
  for (std::size_t i = 0; i < n; ++i) {
    dst[i] = encode<P>(float_of(static_cast<uint32_t>(src[i]) << 16) / divisor);
  }
}

template <const Fp8Params& P>
inline void encode_f16_span(const uint16_t* src, uint8_t* dst, std::size_t n, float divisor) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = encode<P>(f16_bits_to_f32(src[i]) / divisor);
}

// One vector-cloned kernel a (source, format) pair: target_clones takes no templates.
#define FP8S_ENCODE_KERNELS(SRC, Src)                                                         \
  FP8S_VECTOR_CLONES void encode_##SRC##_e4m3(const Src* s, uint8_t* d, std::size_t n, float v) { \
    encode_##SRC##_span<kE4M3>(s, d, n, v);                                                   \
  }                                                                                           \
  FP8S_VECTOR_CLONES void encode_##SRC##_e5m2(const Src* s, uint8_t* d, std::size_t n, float v) { \
    encode_##SRC##_span<kE5M2>(s, d, n, v);                                                   \
  }
FP8S_ENCODE_KERNELS(f32, float)
FP8S_ENCODE_KERNELS(bf16, uint16_t)
FP8S_ENCODE_KERNELS(f16, uint16_t)
#undef FP8S_ENCODE_KERNELS

FP8S_VECTOR_CLONES void widen_f16(const uint16_t* s, float* d, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) d[i] = f16_bits_to_f32(s[i]);
}

// Arithmetic decoders (no table gathers), exact: every FP8 value is an FP32, BF16 and FP16 value.
inline uint32_t decode_e4m3_bits(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t em = c & 0x7Fu;
  const uint32_t normal = (em << 20) + ((127u - 7u) << 23);
  const uint32_t subnormal = bits_of(static_cast<float>(em) * 0.001953125f);  // em * 2^-9
  const uint32_t is_sub = 0u - static_cast<uint32_t>(em < 0x08u);
  const uint32_t is_nan = 0u - static_cast<uint32_t>(em == 0x7Fu);
  uint32_t out = (subnormal & is_sub) | (normal & ~is_sub);
  out = (0x7FC00000u & is_nan) | (out & ~is_nan);
  return out | sign;
}

inline uint32_t decode_e5m2_bits(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t em = c & 0x7Fu;
  const uint32_t normal = (em << 21) + ((127u - 15u) << 23);
  const uint32_t subnormal = bits_of(static_cast<float>(em) * 1.52587890625e-05f);  // em * 2^-16
  const uint32_t special = em == 0x7Cu ? 0x7F800000u : 0x7FC00000u;
  const uint32_t is_sub = 0u - static_cast<uint32_t>(em < 0x04u);
  const uint32_t is_special = 0u - static_cast<uint32_t>(em >= 0x7Cu);
  uint32_t out = (subnormal & is_sub) | (normal & ~is_sub);
  out = (special & is_special) | (out & ~is_special);
  return out | sign;
}

// FP32 -> BF16, round to nearest even, NaN kept quiet; branch-free.
inline uint16_t round_to_bf16(float v) {
  const uint32_t u = bits_of(v);
  const uint32_t is_nan = 0u - static_cast<uint32_t>((u & 0x7FFFFFFFu) > 0x7F800000u);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((((u >> 16) | 0x40u) & is_nan) | (rounded & ~is_nan));
}

// Exact FP32 -> FP16 for FP8 values (all inside FP16's normal range, or zero, inf, NaN).
inline uint16_t fp8_value_to_f16(uint32_t f) {
  const uint32_t sign = (f >> 16) & 0x8000u;
  const uint32_t a = f & 0x7FFFFFFFu;
  const uint32_t is_zero = 0u - static_cast<uint32_t>(a == 0u);
  const uint32_t is_special = 0u - static_cast<uint32_t>(a >= 0x7F800000u);
  const uint32_t normal = (a >> 13) - ((127u - 15u) << 10);
  const uint32_t special = a == 0x7F800000u ? 0x7C00u : 0x7E00u;
  uint32_t out = normal & ~is_zero;
  out = (special & is_special) | (out & ~is_special);
  return static_cast<uint16_t>(out | sign);
}

template <uint32_t (*Decode)(uint8_t)>
inline void decode_f32_span(const uint8_t* s, float* d, std::size_t n, float scale) {
  if (scale == 1.0f) {
    for (std::size_t i = 0; i < n; ++i) d[i] = float_of(Decode(s[i]));
  } else {
    for (std::size_t i = 0; i < n; ++i) d[i] = float_of(Decode(s[i])) * scale;
  }
}

template <uint32_t (*Decode)(uint8_t)>
inline void decode_bf16_span(const uint8_t* s, uint16_t* d, std::size_t n, float scale) {
  if (scale == 1.0f) {
    for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<uint16_t>(Decode(s[i]) >> 16);
  } else {
    for (std::size_t i = 0; i < n; ++i) d[i] = round_to_bf16(float_of(Decode(s[i])) * scale);
  }
}

#define FP8S_DECODE_KERNELS(DST, Dst)                                                          \
  FP8S_VECTOR_CLONES void decode_e4m3_##DST(const uint8_t* s, Dst* d, std::size_t n, float k) { \
    decode_##DST##_span<decode_e4m3_bits>(s, d, n, k);                                          \
  }                                                                                             \
  FP8S_VECTOR_CLONES void decode_e5m2_##DST(const uint8_t* s, Dst* d, std::size_t n, float k) { \
    decode_##DST##_span<decode_e5m2_bits>(s, d, n, k);                                          \
  }
FP8S_DECODE_KERNELS(f32, float)
FP8S_DECODE_KERNELS(bf16, uint16_t)
#undef FP8S_DECODE_KERNELS
FP8S_VECTOR_CLONES void decode_e4m3_f16(const uint8_t* s, uint16_t* d, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) d[i] = fp8_value_to_f16(decode_e4m3_bits(s[i]));
}
FP8S_VECTOR_CLONES void decode_e5m2_f16(const uint8_t* s, uint16_t* d, std::size_t n) {
  // E5M2 is the upper byte of FP16
  for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<uint16_t>(s[i] << 8);
}

// A 16-bit table lookup per code, for a table whose upper half is its lower half with the sign bit
// set (every FP8 decode: codes c and c|0x80 are values of opposite sign, NaN included): 32 codes
// per step, two 64-entry word permutes and a blend on bit 6, the sign from bit 7.
#if FP8S_AVX512_LUT
__attribute__((target("avx512f,avx512bw"))) void lookup16_avx512(const uint8_t* s, uint16_t* d, std::size_t n,
                                                                   const uint16_t* table) {
  const __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 32);
  const __m512i t2 = _mm512_loadu_si512(table + 64), t3 = _mm512_loadu_si512(table + 96);
  const __m512i bit6 = _mm512_set1_epi16(0x40), bit7 = _mm512_set1_epi16(0x80);
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i c = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
    const __m512i low = _mm512_permutex2var_epi16(t0, c, t1);  // bits 0-5 of the index
    const __m512i high = _mm512_permutex2var_epi16(t2, c, t3);
    const __m512i v = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(c, bit6), low, high);
    const __m512i sign = _mm512_slli_epi16(_mm512_and_si512(c, bit7), 8);
    _mm512_storeu_si512(d + i, _mm512_or_si512(v, sign));
  }
  for (; i < n; ++i) d[i] = table[s[i]];
}

bool sign_symmetric(const std::array<uint16_t, 256>& table) {
  for (int c = 0; c < 128; ++c) {
    if ((table[c] & 0x8000u) || table[c | 0x80] != (table[c] | 0x8000u)) return false;
  }
  return true;
}
#endif

template <typename Src, typename Kernel>
void encode_parallel(const Src* src, uint8_t* dst, std::size_t n, float divisor, Kernel kernel) {
  parallel_chunks(n, [&](std::size_t b, std::size_t e) { kernel(src + b, dst + b, e - b, divisor); });
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

// The bulk encoders of each source type over its two format kernels.
#define FP8S_ENCODE_BULK(SRC, Src)                                                                           \
  void encode_##SRC##_to_fp8(const Src* src, uint8_t* dst, std::size_t n, Fp8Format format, float divisor) { \
    encode_parallel(src, dst, n, divisor, format == Fp8Format::E4M3FN ? encode_##SRC##_e4m3 : encode_##SRC##_e5m2); \
  }
FP8S_ENCODE_BULK(f32, float)
FP8S_ENCODE_BULK(bf16, uint16_t)
FP8S_ENCODE_BULK(f16, uint16_t)
#undef FP8S_ENCODE_BULK

void decode_fp8_to_f32(const uint8_t* src, float* dst, std::size_t n, Fp8Format format,
                       float scale) {
  const auto kernel = format == Fp8Format::E4M3FN ? decode_e4m3_f32 : decode_e5m2_f32;
  parallel_chunks(n, [&](std::size_t b, std::size_t e) { kernel(src + b, dst + b, e - b, scale); });
}

void decode_fp8_to_bf16(const uint8_t* src, uint16_t* dst, std::size_t n, Fp8Format format,
                        float scale) {
  const auto kernel = format == Fp8Format::E4M3FN ? decode_e4m3_bf16 : decode_e5m2_bf16;
#if FP8S_AVX512_LUT
  // Large spans by table: the kernel's own results for all 256 codes at this scale, looked up (the
  // same bits, 2-3x the rate of decoding each code arithmetically).
  static const bool avx512 = __builtin_cpu_supports("avx512bw");
  if (avx512 && n >= 4096) {
    std::array<uint8_t, 256> codes{};
    std::array<uint16_t, 256> table{};
    for (int c = 0; c < 256; ++c) codes[c] = static_cast<uint8_t>(c);
    kernel(codes.data(), table.data(), 256, scale);
    if (sign_symmetric(table)) {
      parallel_chunks(n, [&](std::size_t b, std::size_t e) { lookup16_avx512(src + b, dst + b, e - b, table.data()); });
      return;
    }
  }
#endif
  parallel_chunks(n, [&](std::size_t b, std::size_t e) { kernel(src + b, dst + b, e - b, scale); });
}

void decode_fp8_to_f16(const uint8_t* src, uint16_t* dst, std::size_t n, Fp8Format format,
                       float scale) {
  if (scale != 1.0f) {  // FP16 compute is CUDA-only: the scaled CPU path need not be fast
    const float* table = tables(format).f32.data();
    parallel_chunks(n, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) dst[i] = f32_to_f16(table[src[i]] * scale);
    });
    return;
  }
  const auto kernel = format == Fp8Format::E4M3FN ? decode_e4m3_f16 : decode_e5m2_f16;
  parallel_chunks(n, [&](std::size_t b, std::size_t e) { kernel(src + b, dst + b, e - b); });
}

void f16_to_f32(const uint16_t* src, float* dst, std::size_t n) {
  parallel_chunks(n, [&](std::size_t b, std::size_t e) { widen_f16(src + b, dst + b, e - b); });
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

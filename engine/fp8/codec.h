// The FP8 codec: OCP E4M3FN and E5M2 encode/decode (scalar and bulk), plus FP16/BF16 helpers.
//
// Encoding rounds to nearest, ties to even, keeps subnormals and signed zero, saturates finite
// overflow to +-max (weights must never become NaN), keeps E5M2 infinities (E4M3FN has none: +-inf
// saturates to +-448) and maps NaN to a NaN code. docs/architecture.md, "Number formats" is the contract.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/types.h"

namespace fp8s {

const char* fp8_format_name(Fp8Format format);  // "e4m3fn" / "e5m2"
float fp8_max_finite(Fp8Format format);         // 448 / 57344

uint8_t encode_fp8(float value, Fp8Format format);
float decode_fp8(uint8_t code, Fp8Format format);
bool fp8_is_nan(uint8_t code, Fp8Format format);
// The 256 decoded values of a format, indexed by code.
const float* fp8_decode_table(Fp8Format format);

// FP16 / BF16 scalar conversions (round to nearest even from FP32; exact to FP32).
float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);
float bf16_to_f32(uint16_t bits);
uint16_t f32_to_bf16(float value);

// Bulk conversions, parallel over the intra-op thread pool. `divisor` implements the scaled
// encodings (q = encode(w / s)); `scale` the scaled decodings (w = decode(q) * s).
void encode_f32_to_fp8(const float* src, uint8_t* dst, std::size_t n, Fp8Format format,
                       float divisor = 1.0f);
void encode_bf16_to_fp8(const uint16_t* src, uint8_t* dst, std::size_t n, Fp8Format format,
                        float divisor = 1.0f);
void encode_f16_to_fp8(const uint16_t* src, uint8_t* dst, std::size_t n, Fp8Format format,
                       float divisor = 1.0f);
void decode_fp8_to_f32(const uint8_t* src, float* dst, std::size_t n, Fp8Format format,
                       float scale = 1.0f);
void decode_fp8_to_bf16(const uint8_t* src, uint16_t* dst, std::size_t n, Fp8Format format,
                        float scale = 1.0f);
void decode_fp8_to_f16(const uint8_t* src, uint16_t* dst, std::size_t n, Fp8Format format,
                       float scale = 1.0f);

// Bulk FP16/BF16 -> FP32 widening (used by loaders and converters).
void f16_to_f32(const uint16_t* src, float* dst, std::size_t n);
void bf16_to_f32(const uint16_t* src, float* dst, std::size_t n);
void f32_to_f16(const float* src, uint16_t* dst, std::size_t n);
void f32_to_bf16(const float* src, uint16_t* dst, std::size_t n);

}  // namespace fp8s

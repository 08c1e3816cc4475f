// ComfyUI's mixed-precision layer formats beside FP8 (comfy_quant: int8_tensorwise with or
// without ConvRot, mxfp8, nvfp4, convrot_w4a4, awq_w4a16, svdquant_w4a4): a layer's description
// read from its JSON, and each format's dequantisation into FP32 in the logical [N, K] shape, by
// the formulas of ../shared/reference/formats/README.md (evaluated in FP32 in the order written,
// so the exact formats give comfy-kitchen's weights bit for bit). Pure C++ over raw buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace fp8s {

enum class QuantFormat { Float8E4M3, Float8E5M2, Int8, Mxfp8, Nvfp4, ConvRotW4A4, AwqW4A16, SvdquantW4A4 };

// One layer's comfy_quant description.
struct QuantLayerConf {
  QuantFormat format = QuantFormat::Float8E4M3;
  bool convrot = false;       // int8_tensorwise: the weight is stored rotated (a regular Hadamard)
  int convrot_group = 256;    // int8 ConvRot and convrot_w4a4: the Hadamard's order G
  int group_size = 64;        // awq_w4a16: columns per scale/zero
  bool full_precision = false;  // "full_precision_matrix_mult": weight-only compute
};

// The JSON's "format" string of a format ("float8_e4m3fn", "int8_tensorwise", "mxfp8", ...).
const char* quant_format_name(QuantFormat f);
// A short name for reports: "FP8 E4M3", "INT8", "INT8 ConvRot", "MXFP8", "NVFP4", ...
std::string quant_format_label(const QuantLayerConf& c);
// Parses a layer's description: an object with "format" (options at its top level, then under
// "params"; unknown keys ignored), or a format string alone. Throws InputError naming `label`
// and `layer` for damaged JSON, a missing format, an unknown format (ComfyUI fails on those too)
// and options out of range (a ConvRot order that is not a power of 4).
QuantLayerConf parse_comfy_quant(const std::string& json, const std::string& label, const std::string& layer);
// The description as Python's json.dumps writes it (what ComfyUI's files hold).
std::string comfy_quant_json(const QuantLayerConf& c);

// The stored tensors' shapes of an [N, K] layer (padding and packing included).
struct StoredShape {
  int64_t data_rows = 0, data_cols = 0;    // .weight
  int64_t scale_rows = 0, scale_cols = 0;  // .weight_scale (tiled for mxfp8 / nvfp4); 0 rows: [] / [N] / [N,1] / [K/G,N]
};
StoredShape stored_shape(const QuantLayerConf& c, int64_t n, int64_t k);
// Where S[r, c] sits in a 128x4-tiled scale buffer of Cp (a multiple of 4) columns.
inline std::size_t tiled_offset(int64_t r, int64_t c, int64_t cp) {
  return static_cast<std::size_t>(((r / 128) * (cp / 4) + c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + (c % 4));
}

// Dequantisers into `out` [N, K] FP32 (row-major, logical shape; padded storage cropped).
// int8: q · scale, `scale` one value (`per_row` false) or one per row.
void dequant_int8(const int8_t* q, const float* scale, bool per_row, int64_t n, int64_t k, float* out);
// mxfp8: e4m3(code) · 2^(E − 127), codes [Np, Kp], E8M0 exponents tiled with `scale_cols` columns.
void dequant_mxfp8(const uint8_t* codes, int64_t kp, const uint8_t* exponents, int64_t scale_cols, int64_t n, int64_t k,
                   float* out);
// nvfp4: e2m1(nibble) · (scale_2 · e4m3(S)), two codes a byte (even column high), [Np, Kp/2].
void dequant_nvfp4(const uint8_t* packed, int64_t kp, const uint8_t* scales, int64_t scale_cols, float scale_2, int64_t n,
                   int64_t k, float* out);
// convrot_w4a4 before its rotation: signed 4-bit codes (even column low) · scale[n], [N, K/2].
void dequant_w4a4(const uint8_t* packed, const float* row_scale, int64_t n, int64_t k, float* out);
// awq_w4a16: (q − 8) · scale[k/G, n] + zeros[k/G, n], unsigned codes (even column low).
void dequant_awq(const uint8_t* packed, const float* scale, const float* zeros, int group, int64_t n, int64_t k, float* out);
// svdquant_w4a4: q · scale[k/64, n] / smooth[k] + Σ_r up[n, r] · down[k, r].
void dequant_svdquant(const uint8_t* packed, const float* scale, const float* smooth, const float* down, const float* up,
                      int64_t rank, int64_t n, int64_t k, float* out);
// Undoes ConvRot in place: each row's groups of G columns times H_G (H_4 ⊗ … ⊗ H_4 / √G), by the
// fast transform (log₄G passes of H_4 / 2).
void undo_convrot(float* w, int64_t n, int64_t k, int group);

// Quantisers (kitchen's eager steps, bit-exact for these formats; README "The quantisers"):
// int8 tensor or row: s = max(amax / 127, 1e-30), q = clamp(rint(w / s), −128, 127). Returns
// the scales written (1 or N).
void quantize_int8(const float* w, int64_t n, int64_t k, bool per_row, int8_t* q, float* scales);
// mxfp8: codes [Np, Kp] and the tiled E8M0 exponents (zero-filled, stored_shape's scale size).
void quantize_mxfp8(const float* w, int64_t n, int64_t k, uint8_t* codes, uint8_t* exponents);
// nvfp4: packed codes [Np, Kp/2], tiled E4M3 block scales, the global scale returned.
float quantize_nvfp4(const float* w, int64_t n, int64_t k, uint8_t* packed, uint8_t* scales);
// FP8 E4M3/E5M2 as kitchen's layout writes it: s = amax / max (per tensor or per row), codes of
// clamp(w · (1 / s), ±max), round to nearest even. `scales`: 1 or N values.
void quantize_float8_kitchen(const float* w, int64_t n, int64_t k, bool e5m2, bool per_row, uint8_t* codes, float* scales);
// The Hadamard rotation applied before storing (R_g = W_g · H_G, the inverse of undo_convrot).
inline void apply_convrot(float* w, int64_t n, int64_t k, int group) { undo_convrot(w, n, k, group); }

}  // namespace fp8s

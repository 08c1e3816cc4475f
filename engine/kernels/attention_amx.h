// Flash attention for BF16 on Intel AMX (the tile unit of Sapphire Rapids and later): softmax(q kᵀ ·
// scale) v over head dimensions up to 48, per block of 16 queries two passes over the keys (row
// maxima, then sums and p v), the scores never leaving the core's caches. Written for SD1.5's 64²
// self-attention (4,096 tokens, d = 40) on LibTorch 1.13, which has no fused kernel (its sliced path
// writes every score matrix to memory); on 2.x, scaled_dot_product_attention is as fast here.
//
// Numerics: q kᵀ and p v accumulate in FP32 on the tiles (bf16 products are exact); the softmax
// runs in FP32 (2^x to ~3e-6 relative); p is rounded to BF16 before it multiplies v and the
// output is rounded to BF16, so |out - exact| <= 2^-9 · max|v| + 2^-9 · |exact| (+ FP32 rounding).
#pragma once

#include <cstdint>

namespace fp8s::kernels {

// True when this CPU has AMX-BF16 and AVX512-BF16 and the kernel lets the process use the tiles
// (asked once).
bool amx_attention_available();

// One strided BF16 tensor [batch, heads, tokens, d] (element strides; d is contiguous).
template <typename Bits>
struct Strided {
  Bits* data;
  int64_t batch_stride, head_stride, token_stride;
};
using Bf16View = Strided<const uint16_t>;
using Bf16Out = Strided<uint16_t>;

// out = softmax(q kᵀ · scale) v, BF16 bits in and out, d in 1..48; threads over (batch, head,
// block of queries). Call only when amx_attention_available().
void attention_bf16_amx(const Bf16View& q, const Bf16View& k, const Bf16View& v, const Bf16Out& out,
                        int64_t batch, int64_t heads, int64_t nq, int64_t nk, int64_t d, float scale);

}  // namespace fp8s::kernels

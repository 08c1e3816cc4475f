// The normalisation both Z-Image networks use (Qwen3RMSNorm; Z-Image's RMSNorm computes the same).
#pragma once

#include <ATen/ATen.h>

#include "models/op_profile.h"

namespace fp8s::zimage {

// x · rsqrt(mean(x²) + eps) in FP32, back to the input type, times the weight.
inline at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  const OpTimer timer(OpKind::Norm);
  const auto x32 = x.to(at::kFloat);
  return (x32 * at::rsqrt(x32.pow(2).mean(-1, true) + eps)).to(x.scalar_type()) * w.to(x.scalar_type());
}

}  // namespace fp8s::zimage

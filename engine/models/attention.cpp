// The attention kernels of nn.h: the fused one of LibTorch 2.x (through backend/) and the sliced one.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "backend/backend.h"
#include "models/nn.h"
#include "models/op_profile.h"

namespace fp8s {

at::Tensor sliced_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            double scale, const at::Tensor& mask, int64_t budget_bytes) {
  // q: [B, H, Nq, d], k/v: [B, H, Nk, d]
  const int64_t b = q.size(0), h = q.size(1), nq = q.size(2), nk = k.size(2);
  // FP32 inputs (the reference path): FP32 scores and softmax, as the references compute them.
  // 16-bit inputs: the scale folded into q, scores and softmax in the input type (the CPU softmax
  // accumulates in FP32 inside) instead of FP32 copies of every score matrix (1.7x faster at 512²).
  const bool wide = q.scalar_type() == at::kFloat;
  const int64_t row_bytes = b * h * nk * (wide ? 4 * 2 : 2 * 2);
  const int64_t slice = std::max<int64_t>(1, std::min<int64_t>(nq, budget_bytes / std::max<int64_t>(1, row_bytes)));
  auto kt = k.transpose(-1, -2);
  auto attend = [&](const at::Tensor& qs, const at::Tensor& ms) {
    if (!wide) {
      auto scores = at::matmul(qs * scale, kt);
      if (ms.defined()) scores.add_(ms.to(scores.scalar_type()));
      return at::matmul(at::softmax(scores, -1), v);
    }
    auto scores = at::matmul(qs, kt).to(at::kFloat).mul_(scale);
    if (ms.defined()) scores.add_(ms);
    return at::matmul(at::softmax(scores, -1).to(v.scalar_type()), v);
  };
  if (slice >= nq) return attend(q, mask);
  auto out = at::empty({b, h, nq, v.size(3)}, v.options());
  for (int64_t start = 0; start < nq; start += slice) {
    const int64_t end = std::min(nq, start + slice);
    auto ms = mask.defined() ? mask.slice(-2, start, end) : at::Tensor();
    out.slice(2, start, end).copy_(attend(q.slice(2, start, end), ms));
  }
  return out;
}

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale,
                     const at::Tensor& mask, int64_t budget_bytes) {
  // FP8S_ATTENTION=sliced keeps the 1.13 path on a 2.x build (to measure one against the other).
  static const bool sliced_only = [] {
    const char* e = std::getenv("FP8S_ATTENTION");
    return e != nullptr && std::string(e) == "sliced";
  }();
  const OpTimer timer(OpKind::Attention);
  if (backend::has_fused_attention() && !sliced_only) return backend::fused_attention(q, k, v, scale, mask);
  return sliced_attention(q, k, v, scale, mask, budget_bytes);
}

}  // namespace fp8s

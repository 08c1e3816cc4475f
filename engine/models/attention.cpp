// The attention kernels of nn.h: the fused one of LibTorch 2.x (through backend/), the AMX one (kernels/) and the sliced one.
#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "backend/backend.h"
#include "backend/kernel_options.h"
#include "core/cancel.h"
#include "kernels/attention_amx.h"
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
    cancel_point();  // one attention at a huge size is minutes on a CPU: cancel reaches each slice
    const int64_t end = std::min(nq, start + slice);
    auto ms = mask.defined() ? mask.slice(-2, start, end) : at::Tensor();
    out.slice(2, start, end).copy_(attend(q.slice(2, start, end), ms));
  }
  return out;
}

namespace {

// BF16 on the CPU without a mask, d <= 48 (SD1.5's 64² level, where its attention time goes, has
// heads of 40): the AMX kernel, where this CPU has the tile unit.
bool amx_fits(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask) {
  auto ok = [](const at::Tensor& t) { return t.is_cpu() && t.scalar_type() == at::kBFloat16 && t.dim() == 4 && t.stride(3) == 1; };
  // at least one key (a softmax over none has no value), as many values as keys
  return !mask.defined() && ok(q) && ok(k) && ok(v) && q.size(3) <= 48 && k.size(3) == q.size(3) &&
         v.size(3) == q.size(3) && k.size(2) >= 1 && v.size(2) == k.size(2) && kernels::amx_attention_available();
}

}  // namespace

at::Tensor amx_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale) {
  if (!amx_fits(q, k, v, {})) throw std::invalid_argument("amx_attention: needs BF16 CPU [B, H, N, d <= 48] inputs and an AMX CPU");
  const int64_t b = q.size(0), h = q.size(1), nq = q.size(2), nk = k.size(2), d = q.size(3);
  // written as [B, N, H, d], so the caller's transpose(1, 2).reshape(B, N, H·d) is a view
  auto out = at::empty({b, nq, h, d}, q.options());
  auto view = [](const at::Tensor& t) {
    return kernels::Bf16View{reinterpret_cast<const uint16_t*>(t.data_ptr()), t.stride(0), t.stride(1), t.stride(2)};
  };
  kernels::attention_bf16_amx(view(q), view(k), view(v),
                              {reinterpret_cast<uint16_t*>(out.data_ptr()), out.stride(0), out.stride(2), out.stride(1)},
                              b, h, nq, nk, d, static_cast<float>(scale));
  return out.transpose(1, 2);
}

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale,
                     const at::Tensor& mask, int64_t budget_bytes) {
  const OpTimer timer(OpKind::Attention);
  using backend::AttentionKernel;
  // the run's choice (FP8S_ATTENTION, or the engine's own): auto is LibTorch 2.x's fused kernel
  // (on this CPU as fast as ours or faster), else ours on a CPU with AMX (1.13: 4-5x faster than
  // its sliced path), else the sliced path; a forced kernel where it fits the inputs
  const AttentionKernel want = backend::current_kernel_options().attention;
  const bool fused = backend::has_fused_attention();
  if ((want == AttentionKernel::Amx || (want == AttentionKernel::Auto && !fused)) && amx_fits(q, k, v, mask)) {
    backend::count_attention(AttentionKernel::Amx);
    return amx_attention(q, k, v, scale);
  }
  if (fused && want != AttentionKernel::Sliced) {
    backend::count_attention(AttentionKernel::Fused);
    // beyond 2^26 scores per head on a CPU (a 2048² SD1 step's first blocks: 65536²), the queries
    // go in chunks with a cancel point between them (each query row's result is its own)
    const int64_t nq = q.size(2), nk = k.size(2);
    const int64_t rows = std::max<int64_t>(256, (int64_t{1} << 26) / std::max<int64_t>(1, nk));
    if (!q.is_cpu() || nq <= rows) return backend::fused_attention(q, k, v, scale, mask);
    auto out = at::empty({q.size(0), q.size(1), nq, v.size(3)}, q.options());
    for (int64_t start = 0; start < nq; start += rows) {
      cancel_point();
      const int64_t end = std::min(nq, start + rows);
      const auto ms = mask.defined() && mask.dim() >= 2 && mask.size(-2) == nq ? mask.slice(-2, start, end) : mask;
      out.slice(2, start, end).copy_(backend::fused_attention(q.slice(2, start, end), k, v, scale, ms));
    }
    return out;
  }
  backend::count_attention(AttentionKernel::Sliced);
  return sliced_attention(q, k, v, scale, mask, budget_bytes);
}

}  // namespace fp8s

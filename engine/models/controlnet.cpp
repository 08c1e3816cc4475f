#include "models/controlnet.h"

#include "core/error.h"

namespace fp8s {

ControlNetImpl::ControlNetImpl(const ControlNetConfig& c) : UNetImpl(c.unet, true), control_config_(c) {
  const auto& h = c.hint_block_channels;
  if (h.size() != 4) throw InputError("a ControlNet's hint block has 4 widths, not " + std::to_string(h.size()));
  // 3x3 convs hint->h0, h0->h0, h0->h1 /2, h1->h1, h1->h2 /2, h2->h2, h2->h3 /2, h3->model_channels
  const int64_t ins[] = {c.hint_channels, h[0], h[0], h[1], h[1], h[2], h[2], h[3]};
  const int64_t outs[] = {h[0], h[0], h[1], h[1], h[2], h[2], h[3], c.unet.model_channels};
  auto hint = container(*this, "input_hint_block");
  for (int k = 0; k < 8; ++k) {
    const int64_t stride = (k == 2 || k == 4 || k == 6) ? 2 : 1;
    hint_.push_back(hint->register_module(std::to_string(2 * k), QConv2d(ins[k], outs[k], 3, stride, 1)));
  }
  auto zeros = container(*this, "zero_convs");
  for (std::size_t i = 0; i < input_channels_.size(); ++i) {
    const int64_t ch = input_channels_[i];
    zero_.push_back(container(*zeros, std::to_string(i))->register_module("0", QConv2d(ch, ch, 1)));
  }
  const int64_t mid = input_channels_.back();
  middle_out_ = container(*this, "middle_block_out")->register_module("0", QConv2d(mid, mid, 1));
}

UNetControl ControlNetImpl::forward(const at::Tensor& x, const at::Tensor& hint, const at::Tensor& t,
                                    const at::Tensor& context, const at::Tensor& y, at::ScalarType compute) {
  InferenceGuard no_grad;
  const auto emb_silu = embedding(t, y, compute);
  const auto ctx = context.to(compute);
  auto g = as_activation(hint, compute);
  for (std::size_t k = 0; k < hint_.size(); ++k) {
    g = hint_[k]->forward(g);
    if (k + 1 < hint_.size()) g = at::silu(g);
  }
  if (g.size(2) != x.size(2) || g.size(3) != x.size(3)) {
    throw InputError("the control image is " + std::to_string(hint.size(3)) + "x" + std::to_string(hint.size(2)) +
                     ", not 8 times the latent (" + std::to_string(x.size(3)) + "x" + std::to_string(x.size(2)) + ")");
  }
  UNetControl out;
  auto h = as_activation(x, compute);
  int block = 0;  // blocks_'s order (input blocks, middle): staged while they run under a weight budget
  for (std::size_t i = 0; i < input_.size(); ++i) {
    {
      const BlockScope staged(hooks_, block++);
      h = run_block(input_[i], h, emb_silu, ctx, nullptr);
    }
    if (i == 0) h = h + g;
    out.down.push_back(zero_[i]->forward(h));
  }
  {
    const BlockScope staged(hooks_, block++);
    h = run_block(middle_res1_, h, emb_silu, ctx, nullptr);
    h = run_block(middle_attn_, h, emb_silu, ctx, nullptr);
    h = run_block(middle_res2_, h, emb_silu, ctx, nullptr);
  }
  out.mid = middle_out_->forward(h);
  return out;
}

}  // namespace fp8s

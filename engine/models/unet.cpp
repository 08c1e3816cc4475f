#include "models/unet.h"

#include <algorithm>
#include <cmath>

#include "core/cancel.h"
#include "core/error.h"

namespace fp8s {

namespace {


void check_cancel(const std::atomic<bool>* cancel) {
  if (cancel && cancel->load(std::memory_order_relaxed)) throw Cancelled();
}

// value · gelu(gate), the same products: the gate (a strided half of the projection) made contiguous
// and activated in place, since 1.13's GELU on a strided BF16 view is unvectorised (80 -> 16 ms per
// 64² block here); autograd's out-of-place form while training.
at::Tensor geglu(const at::Tensor& value, const at::Tensor& gate) {
  if (training_active()) return value * at::gelu(gate);
  auto g = gate.contiguous();
  at::gelu_(g);
  return g.mul_(value);
}

}  // namespace

at::Tensor timestep_embedding(const at::Tensor& t, int64_t dim) {
  const int64_t half = dim / 2;
  auto freqs = at::exp(-std::log(10000.0) * at::arange(0, half, t.options().dtype(at::kFloat)) / static_cast<double>(half));
  auto args = t.to(at::kFloat).unsqueeze(1) * freqs.unsqueeze(0);
  auto emb = at::cat({at::cos(args), at::sin(args)}, -1);
  if (dim % 2) emb = at::cat({emb, at::zeros_like(emb.slice(1, 0, 1))}, -1);
  return emb;
}

ResBlockImpl::ResBlockImpl(int64_t in, int64_t out, int64_t emb) {
  auto il = container(*this, "in_layers");
  in_norm_ = il->register_module("0", GroupNorm(32, in, 1e-5));
  in_conv_ = il->register_module("2", QConv2d(in, out, 3));
  emb_ = container(*this, "emb_layers")->register_module("1", QLinear(emb, out));
  auto ol = container(*this, "out_layers");
  out_norm_ = ol->register_module("0", GroupNorm(32, out, 1e-5));
  out_conv_ = ol->register_module("3", QConv2d(out, out, 3));
  if (in != out) skip_ = register_module("skip_connection", QConv2d(in, out, 1));
}

at::Tensor ResBlockImpl::forward(const at::Tensor& x, const at::Tensor& emb_silu) const {
  auto h = in_conv_->forward(at::silu(in_norm_->forward(x)));
  h = h + emb_->forward(emb_silu).unsqueeze(-1).unsqueeze(-1);
  h = out_conv_->forward(at::silu(out_norm_->forward(h)));
  return (skip_ ? skip_->forward(x) : x) + h;
}

SpatialTransformerImpl::SpatialTransformerImpl(int64_t c, int64_t heads, int depth, int64_t ctx,
                                               bool linear)
    : heads_(heads), linear_(linear) {
  norm_ = register_module("norm", GroupNorm(32, c, 1e-6));
  if (linear) {
    proj_in_linear_ = register_module("proj_in", QLinear(c, c));
  } else {
    proj_in_conv_ = register_module("proj_in", QConv2d(c, c, 1));
  }
  auto tb = container(*this, "transformer_blocks");
  for (int i = 0; i < depth; ++i) {
    auto b = container(*tb, std::to_string(i));
    Block blk;
    auto a1 = container(*b, "attn1");
    blk.q1 = a1->register_module("to_q", QLinear(c, c, false));
    blk.k1 = a1->register_module("to_k", QLinear(c, c, false));
    blk.v1 = a1->register_module("to_v", QLinear(c, c, false));
    blk.o1 = container(*a1, "to_out")->register_module("0", QLinear(c, c));
    auto a2 = container(*b, "attn2");
    blk.q2 = a2->register_module("to_q", QLinear(c, c, false));
    blk.k2 = a2->register_module("to_k", QLinear(ctx, c, false));
    blk.v2 = a2->register_module("to_v", QLinear(ctx, c, false));
    blk.o2 = container(*a2, "to_out")->register_module("0", QLinear(c, c));
    auto net = container(*container(*b, "ff"), "net");
    blk.ff_in = container(*net, "0")->register_module("proj", QLinear(c, c * 8));
    blk.ff_out = net->register_module("2", QLinear(c * 4, c));
    blk.norm1 = b->register_module("norm1", LayerNorm(c));
    blk.norm2 = b->register_module("norm2", LayerNorm(c));
    blk.norm3 = b->register_module("norm3", LayerNorm(c));
    blocks_.push_back(blk);
  }
  if (linear) {
    proj_out_linear_ = register_module("proj_out", QLinear(c, c));
  } else {
    proj_out_conv_ = register_module("proj_out", QConv2d(c, c, 1));
  }
}

at::Tensor SpatialTransformerImpl::attention(const at::Tensor& x, const at::Tensor& ctx,
                                             const QLinear& q, const QLinear& k, const QLinear& v,
                                             const QLinear& o) const {
  const int64_t b = x.size(0), n = x.size(1), c = x.size(2), d = c / heads_;
  auto split = [&](const at::Tensor& t) { return t.view({b, t.size(1), heads_, d}).transpose(1, 2); };
  auto a = fp8s::attention(split(q->forward(x)), split(k->forward(ctx)), split(v->forward(ctx)),
                            1.0 / std::sqrt(double(d)));
  return o->forward(a.transpose(1, 2).reshape({b, n, c}));
}

at::Tensor SpatialTransformerImpl::forward(const at::Tensor& x_in, const at::Tensor& context) const {
  const int64_t b = x_in.size(0), c = x_in.size(1), h = x_in.size(2), w = x_in.size(3);
  auto x = norm_->forward(x_in);
  if (!linear_) x = proj_in_conv_->forward(x);
  x = x.permute({0, 2, 3, 1}).reshape({b, h * w, c});  // a view of channels_last activations
  if (linear_) x = proj_in_linear_->forward(x);
  for (const auto& blk : blocks_) {
    auto n1 = blk.norm1->forward(x);
    x = x + attention(n1, n1, blk.q1, blk.k1, blk.v1, blk.o1);
    x = x + attention(blk.norm2->forward(x), context, blk.q2, blk.k2, blk.v2, blk.o2);
    auto ff = blk.ff_in->forward(blk.norm3->forward(x)).chunk(2, -1);
    x = x + blk.ff_out->forward(geglu(ff[0], ff[1]));
  }
  if (linear_) x = proj_out_linear_->forward(x);
  x = x.reshape({b, h, w, c}).permute({0, 3, 1, 2}).contiguous(x_in.suggest_memory_format());
  if (!linear_) x = proj_out_conv_->forward(x);
  return x + x_in;
}

UNetImpl::UNetImpl(const UNetConfig& c, bool encoder_only) : config_(c) {
  const int64_t mc = c.model_channels, emb = 4 * mc;
  auto te = container(*this, "time_embed");
  time1_ = te->register_module("0", QLinear(mc, emb));
  time2_ = te->register_module("2", QLinear(emb, emb));
  if (c.adm_in_channels > 0) {
    auto le = container(*container(*this, "label_emb"), "0");
    label1_ = le->register_module("0", QLinear(c.adm_in_channels, emb));
    label2_ = le->register_module("2", QLinear(emb, emb));
  }
  Cursor at{mc, 1, {mc}};
  build_inputs(at);
  input_channels_ = at.skips;
  auto mid = container(*this, "middle_block");
  blocks_.push_back({"middle_block", mid, 1.0 / (at.ds * at.ds)});
  middle_res1_.res = mid->register_module("0", ResBlock(at.ch, at.ch, emb));
  middle_attn_.attn = mid->register_module("1", attention(at.ch, c.transformer_depth_middle));
  middle_res2_.res = mid->register_module("2", ResBlock(at.ch, at.ch, emb));
  if (encoder_only) return;
  build_outputs(at);
  auto out = container(*this, "out");
  out_norm_ = out->register_module("0", GroupNorm(32, at.ch, 1e-5));
  out_conv_ = out->register_module("2", QConv2d(mc, c.out_channels, 3));
}

SpatialTransformer UNetImpl::attention(int64_t ch, int depth) const {
  const auto& c = config_;
  const int64_t heads = c.num_head_channels > 0 ? ch / c.num_head_channels : c.num_heads;
  return SpatialTransformer(ch, heads, depth, c.context_dim, c.use_linear_in_transformer);
}

bool UNetImpl::has_attention(int ds, int level) const {
  const auto& c = config_;
  return std::count(c.attention_resolutions.begin(), c.attention_resolutions.end(), ds) > 0 && c.transformer_depth[level] > 0;
}

std::shared_ptr<torch::nn::Module> UNetImpl::next_block(const std::string& list, std::size_t index, double compute_per_byte) {
  auto m = container(*named_children()[list], std::to_string(index));
  blocks_.push_back({list + "." + std::to_string(index), m, compute_per_byte});
  return m;
}

// input_blocks: conv_in, then per level its res (+ attention) blocks and a downsample but at the last.
void UNetImpl::build_inputs(Cursor& at) {
  const auto& c = config_;
  const int64_t emb = 4 * c.model_channels;
  container(*this, "input_blocks");
  Block first;
  first.conv = next_block("input_blocks", 0, 1.0)->register_module("0", QConv2d(c.in_channels, c.model_channels, 3));
  input_.push_back(first);
  const int levels = static_cast<int>(c.channel_mult.size());
  for (int level = 0; level < levels; ++level) {
    for (int r = 0; r < c.num_res_blocks; ++r) {
      auto m = next_block("input_blocks", input_.size(), 1.0 / (at.ds * at.ds));
      Block blk;
      const int64_t out = c.channel_mult[level] * c.model_channels;
      blk.res = m->register_module("0", ResBlock(at.ch, out, emb));
      at.ch = out;
      if (has_attention(at.ds, level)) blk.attn = m->register_module("1", attention(at.ch, c.transformer_depth[level]));
      input_.push_back(blk);
      at.skips.push_back(at.ch);
    }
    if (level == levels - 1) continue;
    auto m = next_block("input_blocks", input_.size(), 1.0 / (4.0 * at.ds * at.ds));
    Block blk;
    blk.conv = container(*m, "0")->register_module("op", QConv2d(at.ch, at.ch, 3, 2, 1));
    input_.push_back(blk);
    at.skips.push_back(at.ch);
    at.ds *= 2;
  }
}

// output_blocks: per level from the deepest, its res (+ attention) blocks on the skips, the last
// of each level but the first with an upsample.
void UNetImpl::build_outputs(Cursor& at) {
  const auto& c = config_;
  const int64_t emb = 4 * c.model_channels;
  container(*this, "output_blocks");
  for (int level = static_cast<int>(c.channel_mult.size()) - 1; level >= 0; --level) {
    for (int i = 0; i <= c.num_res_blocks; ++i) {
      auto m = next_block("output_blocks", output_.size(), 1.0 / (at.ds * at.ds));
      Block blk;
      const int64_t skip = at.skips.back();
      at.skips.pop_back();
      const int64_t out = c.channel_mult[level] * c.model_channels;
      blk.res = m->register_module("0", ResBlock(at.ch + skip, out, emb));
      at.ch = out;
      int sub = 1;
      if (has_attention(at.ds, level)) {
        blk.attn = m->register_module("1", attention(at.ch, c.transformer_depth[level]));
        sub = 2;
      }
      if (level > 0 && i == c.num_res_blocks) {
        blk.up = container(*m, std::to_string(sub))->register_module("conv", QConv2d(at.ch, at.ch, 3));
        at.ds /= 2;
      }
      output_.push_back(blk);
    }
  }
}

at::Tensor UNetImpl::run_block(const Block& b, at::Tensor h, const at::Tensor& emb_silu,
                               const at::Tensor& ctx, const at::Tensor* upsample_to) const {
  if (b.conv) h = b.conv->forward(h);
  if (b.res) h = b.res->forward(h, emb_silu);
  if (b.attn) h = b.attn->forward(h, ctx);
  if (b.up) {
    // Upsample to the spatial size of the skip this output joins next, so any multiple of 8 works.
    const auto size = upsample_to ? std::vector<int64_t>{upsample_to->size(2), upsample_to->size(3)}
                                  : std::vector<int64_t>{h.size(2) * 2, h.size(3) * 2};
    h = b.up->forward(at::upsample_nearest2d(h, size));
  }
  return h;
}

at::Tensor UNetImpl::embedding(const at::Tensor& t, const at::Tensor& y, at::ScalarType compute) const {
  if (config_.adm_in_channels > 0 && !y.defined()) {
    throw InputError("this UNet needs the SDXL vector conditioning y");
  }
  auto emb = time2_->forward(at::silu(time1_->forward(timestep_embedding(t, config_.model_channels).to(compute))));
  if (label1_) emb = emb + label2_->forward(at::silu(label1_->forward(y.to(compute))));
  return at::silu(emb);
}

at::Tensor UNetImpl::forward(const at::Tensor& x, const at::Tensor& t, const at::Tensor& context,
                             const at::Tensor& y, at::ScalarType compute,
                             const std::atomic<bool>* cancel, const UNetControl* control) {
  InferenceGuard no_grad;
  const auto emb_silu = embedding(t, y, compute);
  if (control && (control->down.size() != input_.size() || !control->mid.defined())) {
    throw InputError("a ControlNet with " + std::to_string(control->down.size()) + " residuals cannot control a UNet with " +
                     std::to_string(input_.size()) + " input blocks; use a ControlNet made for this base model");
  }
  const auto ctx = context.to(compute);
  std::vector<at::Tensor> skips;
  auto h = as_activation(x, compute);
  int block = 0;  // blocks_'s order
  for (const auto& b : input_) {
    check_cancel(cancel);
    const BlockScope staged(hooks_, block++);
    h = run_block(b, h, emb_silu, ctx, nullptr);
    skips.push_back(h);
  }
  check_cancel(cancel);
  {
    const BlockScope staged(hooks_, block++);
    h = run_block(middle_res1_, h, emb_silu, ctx, nullptr);
    h = run_block(middle_attn_, h, emb_silu, ctx, nullptr);
    h = run_block(middle_res2_, h, emb_silu, ctx, nullptr);
    if (control) h = h + control->mid.to(h.scalar_type());
  }
  for (const auto& b : output_) {
    check_cancel(cancel);
    const BlockScope staged(hooks_, block++);
    const auto& skip = skips.back();
    h = at::cat({h, control ? skip + control->down[skips.size() - 1].to(skip.scalar_type()) : skip}, 1);
    skips.pop_back();
    h = run_block(b, h, emb_silu, ctx, skips.empty() ? nullptr : &skips.back());
  }
  h = out_conv_->forward(at::silu(out_norm_->forward(h)));
  return h.to(at::kFloat).contiguous();
}

}  // namespace fp8s

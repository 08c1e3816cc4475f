// The latent-diffusion UNet (ldm/sgm `UNetModel`) for SD 1.x and SDXL, named as the checkpoint.
#pragma once

#include <atomic>
#include <functional>

#include "models/architecture.h"
#include "models/nn.h"
#include "models/streaming.h"

namespace fp8s {

class ResBlockImpl : public torch::nn::Module {
 public:
  ResBlockImpl(int64_t in, int64_t out, int64_t emb);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& emb_silu) const;

 private:
  GroupNorm in_norm_{nullptr}, out_norm_{nullptr};
  QConv2d in_conv_{nullptr}, out_conv_{nullptr}, skip_{nullptr};
  QLinear emb_{nullptr};
};
TORCH_MODULE(ResBlock);

class SpatialTransformerImpl : public torch::nn::Module {
 public:
  SpatialTransformerImpl(int64_t channels, int64_t heads, int depth, int64_t context_dim,
                         bool linear_projection);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& context) const;

 private:
  struct Block {
    LayerNorm norm1{nullptr}, norm2{nullptr}, norm3{nullptr};
    QLinear q1{nullptr}, k1{nullptr}, v1{nullptr}, o1{nullptr};
    QLinear q2{nullptr}, k2{nullptr}, v2{nullptr}, o2{nullptr};
    QLinear ff_in{nullptr}, ff_out{nullptr};
  };
  at::Tensor attention(const at::Tensor& x, const at::Tensor& ctx, const QLinear& q, const QLinear& k,
                       const QLinear& v, const QLinear& o) const;

  int64_t heads_;
  bool linear_;
  GroupNorm norm_{nullptr};
  QConv2d proj_in_conv_{nullptr}, proj_out_conv_{nullptr};
  QLinear proj_in_linear_{nullptr}, proj_out_linear_{nullptr};
  std::vector<Block> blocks_;
};
TORCH_MODULE(SpatialTransformer);

// A ControlNet's residuals for one UNet call (cldm's ControlledUnetModel): down[i] is added to the
// skip input block i pushed (read by the decoder block that pops it), mid to the middle block's
// output; already scaled by the strength.
struct UNetControl {
  std::vector<at::Tensor> down;
  at::Tensor mid;
};

class UNetImpl : public torch::nn::Module {
 public:
  // `encoder_only`: the input blocks and the middle block (a ControlNet's copy of the encoder).
  explicit UNetImpl(const UNetConfig& config, bool encoder_only = false);
  // x [B,4,h,w], t [B] float timesteps, context [B,N,ctx], y [B,adm] (SDXL) -> eps [B,4,h,w] FP32.
  // `cancel`, when set, is checked between blocks; `control`, when set, adds its residuals.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& t, const at::Tensor& context,
                     const at::Tensor& y, at::ScalarType compute,
                     const std::atomic<bool>* cancel = nullptr, const UNetControl* control = nullptr);
  const UNetConfig& config() const { return config_; }
  // The blocks in execution order ("input_blocks.0" ... "middle_block" ... "output_blocks.N"), each
  // with its activations' share of the full-resolution tokens (1, 1/4, 1/16 ...: its compute per
  // byte of weights, relative), for the residency plan (models/streaming.h); `hooks` (unset:
  // none) is called around each of them.
  const std::vector<NetworkBlock>& blocks() const { return blocks_; }
  void set_block_hooks(BlockHooks* hooks) { hooks_ = hooks; }

 protected:
  // SiLU(time embedding (+ label embedding of y)) in the compute type.
  at::Tensor embedding(const at::Tensor& t, const at::Tensor& y, at::ScalarType compute) const;
  struct Block {
    QConv2d conv{nullptr};  // input_blocks.0.0 (conv_in) or a Downsample's op
    ResBlock res{nullptr};
    SpatialTransformer attn{nullptr};
    QConv2d up{nullptr};    // Upsample conv
  };
  // Where the constructor is: the channels, the downsampling factor, the skips' channels.
  struct Cursor {
    int64_t ch;
    int ds;
    std::vector<int64_t> skips;
  };
  void build_inputs(Cursor& at);
  void build_outputs(Cursor& at);
  SpatialTransformer attention(int64_t ch, int depth) const;
  bool has_attention(int ds, int level) const;
  // Block `index` of the list `list` (registered), a streamable block of the network.
  std::shared_ptr<torch::nn::Module> next_block(const std::string& list, std::size_t index, double compute_per_byte);
  at::Tensor run_block(const Block& b, at::Tensor h, const at::Tensor& emb_silu,
                       const at::Tensor& ctx, const at::Tensor* upsample_to) const;

  UNetConfig config_;
  QLinear time1_{nullptr}, time2_{nullptr}, label1_{nullptr}, label2_{nullptr};
  std::vector<Block> input_, output_;
  std::vector<int64_t> input_channels_;  // each input block's output channels
  Block middle_res1_, middle_attn_, middle_res2_;
  GroupNorm out_norm_{nullptr};
  QConv2d out_conv_{nullptr};
  std::vector<NetworkBlock> blocks_;
  BlockHooks* hooks_ = nullptr;
};
TORCH_MODULE(UNet);

// ldm's sinusoidal timestep embedding: cat(cos(t·f), sin(t·f)), f_i = exp(-ln(10000)·i/half).
at::Tensor timestep_embedding(const at::Tensor& t, int64_t dim);

}  // namespace fp8s

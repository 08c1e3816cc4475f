// The FLUX.2 transformer (Black Forest Labs' `flux2.model.Flux2`; ../shared/reference/flux2/README.md,
// "One transformer call") with the released files' parameter names: `img_in`, `txt_in`, `time_in`,
// `guidance_in` (dev), one shared modulation per stream type (`double_stream_modulation_img/txt`,
// `single_stream_modulation`), `double_blocks.N`, `single_blocks.N`, `final_layer`. No biases
// anywhere; SwiGLU MLPs; 4-axis RoPE. Every Linear is a QLinear, so FP8 storage and the released
// FP8 files (weight_scale per layer) cover it.
#pragma once

#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/nn.h"
#include "models/streaming.h"

namespace fp8s {

// FLUX.2 [dev]'s: 6144 wide, 48 heads of 128, 8 double and 48 single blocks, RoPE axes 32×4 at
// θ 2000, MLP ratio 3, 128 latent channels, Mistral's 15360-wide context.
struct Flux2Config {
  int hidden_size = 6144, num_heads = 48, depth = 8, depth_single_blocks = 48;
  std::vector<int> axes_dim{32, 32, 32, 32};
  double theta = 2000, mlp_ratio = 3.0, eps = 1e-6;
  int in_channels = 128, context_in_dim = 15360;
  bool guidance_embed = true;  // dev; klein has no guidance_in
  int head_dim() const { return hidden_size / num_heads; }
  int mlp_hidden() const { return static_cast<int>(hidden_size * mlp_ratio); }
};
// The transformer's configuration under `prefix`: the sizes off the shapes (head width from
// query_norm.scale, depths by counting blocks, guidance_in present: dev), `flux2.config` metadata
// (the tiny reference files) over them. InputError naming the file when it is not FLUX.2.
Flux2Config flux2_config(const SafetensorsFile& file, const std::string& prefix);

class Flux2Impl : public BlockNetwork {
 public:
  explicit Flux2Impl(const Flux2Config& config);
  // One call: img [B, N, 128] latent tokens (and any reference tokens after them), img_ids [N, 4],
  // txt [B, L, context], txt_ids [L, 4] (ids as int64 or float), t [B] in [0, 1], guidance [B]
  // (dev). Returns the velocity of every img row [B, N, 128] in FP32; computes in `compute`.
  at::Tensor forward(const at::Tensor& img, const at::Tensor& img_ids, const at::Tensor& txt, const at::Tensor& txt_ids,
                     const at::Tensor& t, const at::Tensor& guidance, at::ScalarType compute);
  const Flux2Config& config() const { return config_; }
  // blocks(): double then single blocks, in execution order (BlockNetwork)

 private:
  struct Stream {  // one stream of a double block
    QLinear qkv{nullptr}, proj{nullptr}, mlp0{nullptr}, mlp2{nullptr};
    at::Tensor q_norm, k_norm;
  };
  struct Single {
    QLinear linear1{nullptr}, linear2{nullptr};
    at::Tensor q_norm, k_norm;
  };
  Stream stream(torch::nn::Module& block, const std::string& prefix);

  Flux2Config config_;
  QLinear img_in_{nullptr}, txt_in_{nullptr}, final_mod_{nullptr}, final_linear_{nullptr};
  QLinear time_in_[2] = {QLinear{nullptr}, QLinear{nullptr}}, guidance_in_[2] = {QLinear{nullptr}, QLinear{nullptr}};
  QLinear mod_img_{nullptr}, mod_txt_{nullptr}, mod_single_{nullptr};
  std::vector<std::pair<Stream, Stream>> double_;  // (img, txt)
  std::vector<Single> single_;
};
TORCH_MODULE(Flux2);

}  // namespace fp8s

// The Qwen-Image transformer (diffusers' QwenImageTransformer2DModel; ../shared/reference/qwenimage/
// README.md, "qwenimage: one transformer call") in the released files' names, which are diffusers'
// (ComfyUI's diffusion_models/ file holds them bare): `img_in`, `txt_norm` + `txt_in`, the timestep
// embedder, `transformer_blocks.N` (60 double-stream MMDiT blocks: separate image and text weights,
// one joint attention, per-head RMS q/k norms, untanh'd gates, GELU-tanh MLPs), `norm_out` (scale
// first) and `proj_out`. The RoPE is 3-axis (frame, row, column) over centred image positions, the
// text after the largest image. Edits append reference latents' tokens to the image stream
// (Edit-2511: their modulation from t = 0). Every Linear is a QLinear: FP8 storage and the FP8 files
// (all-F8, comfy_quant) cover it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/nn.h"

namespace fp8s {

// Qwen-Image's: 3072 wide (24 heads of 128), 60 blocks, 3584-wide text, RoPE axes 16/56/56 at θ 10000.
struct QwenImageConfig {
  int dim = 3072, heads = 24, layers = 60, text_dim = 3584, in_channels = 64, mlp = 12288, timestep_dim = 256;
  std::vector<int> axes_dim{16, 56, 56};
  double theta = 10000, eps = 1e-6;
  bool zero_cond_t = false;  // Edit-2511 (`__index_timestep_zero__`): the references' modulation from t = 0
  int head_dim() const { return dim / heads; }
};
// The configuration under `prefix` from the shapes (dim from img_in, head width from norm_q, depth
// by counting blocks), the rest from `qwenimage.config` metadata (the tiny files) or a diffusers
// folder's config.json, else Qwen-Image's. InputError naming the file when it is not Qwen-Image.
QwenImageConfig qwenimage_config(const SafetensorsFile& file, const std::string& prefix);
// The prefix of a Qwen-Image transformer in the file ("" or "model.diffusion_model."), by txt_norm.weight
// beside img_in.weight, as ComfyUI detects it.
std::optional<std::string> qwenimage_prefix(const SafetensorsFile& file);

class QwenImageTransformerImpl : public BlockNetwork {
 public:
  explicit QwenImageTransformerImpl(const QwenImageConfig& config);
  // One call: x [B, 16, h, w] (h, w even), sigma [B], txt [B, L, text_dim] with txt_mask [B, L] (1 a
  // row, 0 padding; undefined: all rows), refs: edit reference latents [B, 16, hr, wr] whose tokens
  // follow the target's. Returns the flow velocity [B, 16, h, w] in FP32; computes in `compute`.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& sigma, const at::Tensor& txt, const at::Tensor& txt_mask,
                     const std::vector<at::Tensor>& refs, at::ScalarType compute);
  const QwenImageConfig& config() const { return config_; }
  // Keys of the released files the module does not hold (Edit-2511's marker tensor).
  static std::vector<std::string> ignorable_keys() { return {"__index_timestep_zero__"}; }
  // blocks(): "transformer_blocks.N" (BlockNetwork)

 private:
  struct Stream {  // one stream of a block
    QLinear mod{nullptr}, q{nullptr}, k{nullptr}, v{nullptr}, out{nullptr}, mlp0{nullptr}, mlp2{nullptr};
    at::Tensor q_norm, k_norm;
  };
  struct Block {
    Stream img, txt;
  };
  // The image stream's modulation chunks for `rows` image rows: from temb, or (Edit-2511) the target's
  // rows from temb and the references' from temb0.
  std::vector<at::Tensor> image_modulation(const Block& b, const at::Tensor& temb, const at::Tensor& temb0,
                                           int64_t target_rows, int64_t rows) const;
  void run_block(const Block& b, at::Tensor& img, at::Tensor& txt, const at::Tensor& temb, const at::Tensor& temb0,
                 int64_t target_rows, const std::pair<at::Tensor, at::Tensor>& pe, const at::Tensor& mask) const;
  at::Tensor embed_time(const at::Tensor& sigma, at::ScalarType compute) const;

  QwenImageConfig config_;
  QLinear img_in_{nullptr}, txt_in_{nullptr}, time1_{nullptr}, time2_{nullptr}, norm_out_{nullptr}, proj_out_{nullptr};
  at::Tensor txt_norm_;
  std::vector<Block> blocks_;
};
TORCH_MODULE(QwenImageTransformer);

// The RoPE position ids [N, 3] of the joint sequence [text rows; image tokens of each latent] for
// `text_rows` text rows and latents of h x w pixels (frame index = their order: 0 the target).
at::Tensor qwenimage_positions(int64_t text_rows, const std::vector<std::pair<int64_t, int64_t>>& latents);

}  // namespace fp8s

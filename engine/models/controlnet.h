// A ControlNet (lllyasviel's cldm.ControlNet, ../shared/reference/controlnet/README.md): a copy of
// the UNet's encoder (models/unet.h, encoder only) whose input also takes the control image through
// input_hint_block, with a zero convolution after every input block and after the middle block.
// Its Linear and Conv2d layers are quantised layers: FP8 storage covers them.
#pragma once

#include "models/controlnet_keys.h"
#include "models/unet.h"

namespace fp8s {

class ControlNetImpl : public UNetImpl {
 public:
  explicit ControlNetImpl(const ControlNetConfig& config);
  // x [B,4,h,w] (what the UNet sees: x·c_in), hint [B,3,8h,8w] in [0,1], t [B], context [B,N,ctx],
  // y [B,adm] (SDXL) -> the residuals down_0 ... down_(K-1) and mid, unscaled, in `compute`.
  UNetControl forward(const at::Tensor& x, const at::Tensor& hint, const at::Tensor& t, const at::Tensor& context,
                      const at::Tensor& y, at::ScalarType compute);
  const ControlNetConfig& control_config() const { return control_config_; }

 private:
  ControlNetConfig control_config_;
  std::vector<QConv2d> hint_;   // input_hint_block.{0, 2, ..., 14}
  std::vector<QConv2d> zero_;   // zero_convs.k.0
  QConv2d middle_out_{nullptr};  // middle_block_out.0
};
TORCH_MODULE(ControlNet);

}  // namespace fp8s

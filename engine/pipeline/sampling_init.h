// What an img2img, inpainting or hires pass starts from, for SD's samplers and Flux's alike: the
// init latent, the tail of the schedule that runs (A1111's setup_img2img_steps), the latent mask.
#pragma once

#include <ATen/ATen.h>

namespace fp8s {

// img2img and inpainting inputs of a sampling run (all undefined for txt2img).
struct SamplingInit {
  at::Tensor latent;       // [B,C,h,w]: the init image's latent (scaled); defined: img2img
  int schedule_steps = 0;  // the schedule the run is a tail of
  int t_enc = 0;           // the run is the last t_enc + 1 steps of it (A1111's t_enc)
  at::Tensor keep;         // [B or 1,1|C,h,w]: 1 = the init latent's (inpainting), blended into every step
  at::Tensor image_cond;   // [B,5,h,w]: a 9-channel inpainting UNet's mask ++ masked-image latent
};

// A1111's setup_img2img_steps: img2img runs ⌊min(S, 0.999)·steps⌋ + 1 steps of the `steps`
// schedule; with `fixed_steps` (the hires pass) it runs exactly `steps` of a schedule of
// ⌊steps / min(S, 0.999)⌋.
void set_img2img_steps(SamplingInit& init, int steps, float strength, bool fixed_steps);

}  // namespace fp8s

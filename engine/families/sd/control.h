// ControlNets on an SD 1.x / SDXL model (issue 43; ../shared/reference/controlnet/README.md): a
// ControlNet file loaded in the model's storage (both layouts, FP8 too), and the control a sampling
// pass's UNet calls get: each unit's residuals times its strength, summed, on both CFG halves, on
// the steps A1111's start/end rule allows (step i sees progress max(i − 1, 0)/n).
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/types.h"
#include "models/config.h"
#include "models/controlnet_keys.h"
#include "models/unet.h"
#include "pipeline/request.h"

namespace fp8s {

class ControlNetImpl;
struct NetworkStreaming;

struct LoadedControlNet {
  std::string path;
  ControlNetContents contents;
  std::shared_ptr<ControlNetImpl> net;
  uint64_t bytes = 0;  // its weights as stored (the resident ones when its blocks stream)
  std::shared_ptr<NetworkStreaming> streaming;  // its blocks' plan and transport under a weight budget
};

// Loads a ControlNet file (layout (a) with or without control_model., layout (b), a ControlNet
// 1.0 checkpoint's control_model.* part) in `storage` on `device`. With `base`, refuses one made for
// the other base (SD 1.x on SDXL and back) by name. A "diff" ControlNet (a `difference` key) adds
// `base_file`'s model.diffusion_model.* tensors to its own of the same name (InputError without
// one). InputError for Control-LoRA and for a file that is no ControlNet. With `budget`, its input
// and middle blocks beyond it stream from the file like the UNet's (a diff ControlNet stays
// resident: its blocks are sums).
LoadedControlNet load_controlnet(const std::string& path, const StorageSpec& storage, const at::Device& device,
                                 const UNetConfig* base = nullptr, const SafetensorsFile* base_file = nullptr,
                                 std::optional<uint64_t> budget = std::nullopt);

// One ControlNet as a pass applies it.
struct ControlUnitRun {
  std::shared_ptr<ControlNetImpl> net;
  at::Tensor hint;  // [1, 3, 8h, 8w] in [0, 1] (FP32, CPU)
  float strength = 1, start = 0, end = 1;
  bool soft = false;        // residual i × 0.825^(K − i) (A1111's "My prompt is more important", guess mode)
  bool uncond_off = false;  // no control on the uncond half ("ControlNet is more important", guess mode)
};
// The run of a request's unit on a pass of width x height: its hint (the control image resized
// and preprocessed, /255) and the scales of its control mode.
ControlUnitRun control_unit_run(const ControlUnit& unit, std::shared_ptr<ControlNetImpl> net, int width, int height);

// The control of one sampling pass: residuals for each UNet call, and the step rule's state.
class PassControl {
 public:
  explicit PassControl(std::vector<ControlUnitRun> units) : units_(std::move(units)) {}
  // The residuals for a UNet call on x_in (what the UNet sees; with CFG the batch is [uncond; cond])
  // at t with its context (and y); nullopt when no unit is on at the current step.
  std::optional<UNetControl> residuals(const at::Tensor& x_in, const at::Tensor& t, const at::Tensor& context,
                                       const at::Tensor& y, bool cfg, at::ScalarType compute) const;
  // The sampler finished step `step` of `steps` (A1111's callback: its progress is step/steps).
  void step_done(int step, int steps) {
    done_ = step;
    steps_ = steps;
  }
  // Whether a unit with [start, end] is on at the current step (both ends inclusive).
  bool on(float start, float end) const;

 private:
  std::vector<ControlUnitRun> units_;
  int done_ = 0, steps_ = 1;
};

}  // namespace fp8s

#include "families/sd/control.h"

#include <cmath>

#include "core/error.h"
#include "io/control_image.h"
#include "io/safetensors.h"
#include "models/component_load.h"
#include "models/controlnet.h"
#include "models/nn.h"
#include "models/streaming.h"

namespace fp8s {

LoadedControlNet load_controlnet(const std::string& path, const StorageSpec& storage, const at::Device& device,
                                 const UNetConfig* base, const SafetensorsFile* base_file, std::optional<uint64_t> budget) {
  LoadedControlNet out;
  out.path = path;
  std::optional<ControlNetContents> contents;
  {
    const SafetensorsFile probe(path);
    contents = controlnet_contents(probe);
  }
  if (!contents) {
    throw InputError(path + ": not a ControlNet (no input_hint_block / controlnet_cond_embedding); pass a ControlNet file "
                     "such as control_v11p_sd15_canny.safetensors");
  }
  if (contents->control_lora) {
    throw InputError(path + ": a Control-LoRA (lora_controlnet); this version loads full ControlNets only");
  }
  if (contents->difference && !base_file) {
    throw InputError(path + ": a \"diff\" ControlNet (its weights are differences to SD 1.5's UNet) needs the model it "
                     "adds to: use it with generate --model on an SD 1.5 checkpoint");
  }
  out.contents = *contents;
  const auto file_ptr = std::make_shared<SafetensorsFile>(controlnet_file(path, *contents));
  const SafetensorsFile& file = *file_ptr;
  const auto config = controlnet_config(file, contents->prefix);
  if (base) {
    const bool sdxl_base = base->adm_in_channels > 0;
    if (config.sdxl() != sdxl_base || config.unet.context_dim != base->context_dim ||
        config.unet.model_channels != base->model_channels) {
      throw InputError(path + ": a ControlNet for " + (config.sdxl() ? "SDXL" : "SD 1.x/2.x") + " (context " +
                       std::to_string(config.unet.context_dim) + "), but the model is " + (sdxl_base ? "SDXL" : "SD 1.x/2.x") +
                       " (context " + std::to_string(base->context_dim) + "); use a ControlNet made for this base model");
    }
  }
  const BuildOn on(device);
  out.net = std::make_shared<ControlNetImpl>(config);
  // a whole ControlNet 1.0 checkpoint also holds the UNet, the VAE and CLIP: only control_model.* is read
  out.streaming = std::make_shared<NetworkStreaming>();
  auto& streaming = *out.streaming;
  if (budget && !contents->difference) {
    streaming.plan = plan_network(*out.net, out.net->blocks(), file, contents->prefix, storage, true, true, *budget);
  }
  const auto report = load_module_weights(*out.net, file, contents->prefix, storage, true, {"difference"}, {}, device, true,
                                          streamed_prefixes(streaming.plan));
  out.bytes = report.bytes;
  if (streaming.plan.any()) {
    streaming.streamer = network_streamer(streaming.plan, out.net->blocks(), file, contents->prefix, storage, true, true, device);
    out.net->set_block_hooks(streaming.streamer.get());
    streaming.file = file_ptr;
    file_ptr->release_mapping();
  }
  if (contents->difference) {
    // every tensor with a UNet counterpart is a difference to the base model's (ComfyUI, A1111)
    const int added = add_base_tensors(*out.net, file, contents->prefix, *base_file, "model.diffusion_model.", storage, device);
    if (added == 0) {
      throw InputError(path + ": a \"diff\" ControlNet, but " + base_file->path() +
                       " holds none of its UNet tensors (model.diffusion_model.*); use an SD 1.5 checkpoint as the model");
    }
  }
  return out;
}

ControlUnitRun control_unit_run(const ControlUnit& unit, std::shared_ptr<ControlNetImpl> net, int width, int height) {
  ControlUnitRun run;
  run.net = std::move(net);
  const auto hint = control_hint(*unit.image, width, height, unit.resize, unit.preprocessor, unit.canny_low, unit.canny_high);
  run.hint = at::from_blob(const_cast<uint8_t*>(hint.pixels.data()), {1, height, width, 3}, at::kByte)
                 .permute({0, 3, 1, 2})
                 .to(at::kFloat)
                 .div(255.0)
                 .contiguous();
  run.strength = unit.strength;
  run.start = unit.start;
  run.end = unit.end;
  run.soft = unit.guess_mode || unit.mode == ControlMode::Prompt;
  run.uncond_off = unit.guess_mode || unit.mode == ControlMode::ControlNet;
  return run;
}

bool PassControl::on(float start, float end) const {
  const double progress = static_cast<double>(done_) / std::max(1, steps_);
  return !(progress < start || progress > end);
}

std::optional<UNetControl> PassControl::residuals(const at::Tensor& x_in, const at::Tensor& t, const at::Tensor& context,
                                                  const at::Tensor& y, bool cfg, at::ScalarType compute) const {
  std::optional<UNetControl> sum;
  const int64_t rows = x_in.size(0);
  for (const auto& u : units_) {
    if (!on(u.start, u.end)) continue;
    const auto hint = u.hint.to(x_in.device()).expand({rows, -1, -1, -1});
    auto r = u.net->forward(x_in, hint, t.reshape({-1}).expand({rows}), context, y, compute);
    const int64_t k = static_cast<int64_t>(r.down.size());
    for (int64_t i = 0; i <= k; ++i) {
      auto& v = i < k ? r.down[static_cast<std::size_t>(i)] : r.mid;
      double scale = u.strength;
      // cldm's soft scales 0.825^(12 − j) over SD 1.5's 13 residuals (mid, j = 12, × 1); A1111
      // zips the first of the 13 with a ControlNet's fewer (SDXL's 10: mid × 0.825³)
      if (u.soft) scale *= std::pow(0.825, static_cast<double>(12 - i));
      v = v * scale;
      if (u.uncond_off && cfg) v.narrow(0, 0, rows / 2).zero_();  // the uncond half: no control
    }
    if (!sum) {
      sum = std::move(r);
      continue;
    }
    for (std::size_t i = 0; i < r.down.size(); ++i) sum->down[i] = sum->down[i] + r.down[i];
    sum->mid = sum->mid + r.mid;
  }
  return sum;
}

}  // namespace fp8s

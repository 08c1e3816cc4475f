// The request flags shared by generate, compare and bench, and the parsing of their numbers: no
// LibTorch here, so the CLI fuzz target runs this code exactly as the program does.
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "cli/commands.h"
#include "models/streaming.h"
#include "core/error.h"
#include "core/logging.h"
#include "pipeline/family_options.h"

namespace fp8s::cli {

std::string parse_size_pair(const std::string& v, char sep, int& a, int& b) {
  const auto pair = parse_int_pair(v, sep);
  if (!pair) return std::string("expected two non-negative integers separated by '") + sep + "', got '" + v + "'";
  a = pair->first;
  b = pair->second;
  return {};
}

std::vector<LoraRequest> parse_lora_flags(const std::vector<std::string>& flags) {
  std::vector<LoraRequest> out;
  for (const auto& f : flags) {
    LoraRequest r;
    const auto colon = f.find_last_of(':');
    r.path = colon == std::string::npos ? f : f.substr(0, colon);
    if (colon != std::string::npos) {
      const std::string text = f.substr(colon + 1);
      char* end = nullptr;
      const double m = text.empty() ? NAN : std::strtod(text.c_str(), &end);
      if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(m)) {  // its range: validate_loras
        throw InputError("--lora " + f + ": expected FILE:MULTIPLIER with a number as the multiplier, e.g. style.safetensors:0.8");
      }
      r.te_multiplier = r.unet_multiplier = m;
    }
    if (r.path.empty()) throw InputError("--lora " + f + ": the LoRA file name is missing");
    out.push_back(r);
  }
  return out;
}

std::function<void(int)>& threads_hook() {
  static std::function<void(int)> hook;
  return hook;
}

void add_common_options(CLI::App& sub, CommonOptions& common, bool reports) {
  sub.add_option("--log-level", common.log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  if (reports) sub.add_flag("--json", common.json, "print the report as JSON on stdout");
  sub.add_option("--threads", common.threads, "CPU threads for the arithmetic (0: the cores this process may use)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  sub.parse_complete_callback([&common] {
    set_log_level(common.log_level);
    if (const auto& apply = threads_hook()) apply(common.threads);
  });
}

namespace {

// img2img, inpainting and hires fix (A1111's parameters).
void add_image_options(CLI::App& sub, GenerationRequest& r, std::string& init_image, std::string& mask) {
  sub.add_option("--init-image", init_image, "img2img: start from this PNG (resized to --width x --height; 0: its own size)");
  sub.add_option("--denoising-strength", r.denoising_strength, "img2img: how much of the image is redrawn, 0..1")
      ->capture_default_str();
  sub.add_option_function<std::string>("--resize-mode", [&r](const std::string& v) {
    const auto m = parse_resize_mode(v);
    if (!m) throw CLI::ValidationError("--resize-mode", "expected just-resize, crop or fill, got '" + v + "'");
    r.resize_mode = *m;
  }, "img2img: just-resize, crop (cover, centre crop) or fill (fit, edges stretched)");
  sub.add_option("--mask", mask, "inpainting: a PNG of the init image's size, white = repaint");
  sub.add_option("--mask-blur", r.mask_blur, "inpainting: mask blur in pixels")->capture_default_str();
  sub.add_option_function<std::string>("--inpainting-fill", [&r](const std::string& v) {
    const auto f = parse_inpaint_fill(v);
    if (!f) throw CLI::ValidationError("--inpainting-fill", "expected fill, original, latent-noise or latent-nothing, got '" + v + "'");
    r.inpainting_fill = *f;
  }, "inpainting: what the masked area starts from: fill, original (default), latent-noise, latent-nothing");
  sub.add_flag("--inpaint-full-res", r.inpaint_full_res, "inpainting: only the masked region (+ padding), at full size");
  sub.add_option("--inpaint-padding", r.inpaint_full_res_padding, "inpainting: padding of --inpaint-full-res, pixels")
      ->capture_default_str();
  sub.add_flag("--invert-mask", r.invert_mask, "inpainting: repaint the black part instead");
  sub.add_option_function<float>("--hr-scale", [&r](float v) {
    r.enable_hr = true;
    r.hr_scale = v;
  }, "hires fix: upscale the first pass by this factor, then an img2img pass");
  sub.add_option_function<std::string>("--hr-size", [&r](const std::string& v) {
    const auto err = parse_size_pair(v, 'x', r.hr_width, r.hr_height);
    if (!err.empty()) throw CLI::ValidationError("--hr-size", err);
    r.enable_hr = true;
  }, "hires fix: the second pass's size WxH (instead of --hr-scale)");
  sub.add_option_function<std::string>("--hr-upscaler", [&r](const std::string& v) {
    const auto u = parse_hr_upscaler(v);
    if (!u) throw CLI::ValidationError("--hr-upscaler", "expected latent, latent-nearest or lanczos, got '" + v + "'");
    r.hr_upscaler = *u;
  }, "hires fix: latent (bilinear), latent-nearest or lanczos (decoded, resized, encoded)");
  sub.add_option("--hr-steps", r.hr_steps, "hires fix: steps of the second pass (0: --steps)")->capture_default_str();
  sub.add_option("--hr-denoising-strength", r.hr_denoising_strength, "hires fix: denoising strength of the second pass")
      ->capture_default_str();
}

}  // namespace

// Adds the request flags shared by generate, compare and bench.
void add_control_options(CLI::App& sub, ControlFlags& c) {
  const auto each = CLI::MultiOptionPolicy::TakeAll;
  sub.add_option("--controlnet", c.models, "a ControlNet file (SD 1.x / SDXL; cldm or diffusers names; repeat for up to 3 units)")
      ->multi_option_policy(each);
  sub.add_option("--control-image", c.images, "the unit's control image (PNG; resized to the image by --control-resize)")
      ->multi_option_policy(each);
  sub.add_option("--control-strength", c.strengths, "the unit's weight, 0..2 (default 1)")->multi_option_policy(each);
  sub.add_option("--control-start", c.starts, "the first step it acts on, as progress 0..1 (default 0)")->multi_option_policy(each);
  sub.add_option("--control-end", c.ends, "the last step it acts on, as progress 0..1 (default 1)")->multi_option_policy(each);
  sub.add_option("--control-preprocessor", c.preprocessors, "none (the image is the hint), invert or canny (default none)")
      ->multi_option_policy(each)
      ->check([](const std::string& v) { return parse_control_preprocessor(v) ? "" : "expected none, invert or canny, got '" + v + "'"; });
  sub.add_option("--canny-low", c.lows, "canny: the low threshold (default 100)")->multi_option_policy(each);
  sub.add_option("--canny-high", c.highs, "canny: the high threshold (default 200)")->multi_option_policy(each);
  sub.add_option("--control-resize", c.resizes, "just-resize, crop (A1111's default, Crop and Resize) or fill")
      ->multi_option_policy(each)
      ->check([](const std::string& v) { return parse_resize_mode(v) ? "" : "expected just-resize, crop or fill, got '" + v + "'"; });
  sub.add_option("--control-mode", c.modes, "balanced, prompt (My prompt is more important) or controlnet (ControlNet is more important)")
      ->multi_option_policy(each)
      ->check([](const std::string& v) { return parse_control_mode(v) ? "" : "expected balanced, prompt or controlnet, got '" + v + "'"; });
  sub.add_flag("--guess-mode", c.guess_mode, "cldm's guess mode for every unit (no control on the negative half, scaled residuals)");
  sub.add_option("--save-hint", c.save_hint, "write the first unit's preprocessed control image (at the image size) to this PNG");
}

std::vector<ControlUnit> control_units(const ControlFlags& c) {
  const std::size_t n = c.models.size();
  auto pick = [n](const auto& values, std::size_t i, const char* flag, auto fallback) {
    if (values.empty()) return fallback;
    if (values.size() != 1 && values.size() != n) {
      throw InputError(std::string(flag) + " is given " + std::to_string(values.size()) + " times for " + std::to_string(n) +
                       " --controlnet; give it once (every unit) or once per unit");
    }
    return static_cast<decltype(fallback)>(values.size() == 1 ? values[0] : values[i]);
  };
  if (n == 0) {
    if (!c.images.empty()) throw InputError("--control-image needs a --controlnet");
    return {};
  }
  if (c.images.size() != n && c.images.size() != 1) {
    throw InputError("--control-image is given " + std::to_string(c.images.size()) + " times for " + std::to_string(n) +
                     " --controlnet; each unit needs its control image");
  }
  std::vector<ControlUnit> units;
  for (std::size_t i = 0; i < n; ++i) {
    ControlUnit u;
    u.model = c.models[i];
    u.image_name = c.images.size() == 1 ? c.images[0] : c.images[i];
    u.image = read_png(u.image_name).image;
    u.strength = pick(c.strengths, i, "--control-strength", 1.0f);
    u.start = pick(c.starts, i, "--control-start", 0.0f);
    u.end = pick(c.ends, i, "--control-end", 1.0f);
    u.preprocessor = *parse_control_preprocessor(pick(c.preprocessors, i, "--control-preprocessor", std::string("none")));
    u.canny_low = pick(c.lows, i, "--canny-low", 100);
    u.canny_high = pick(c.highs, i, "--canny-high", 200);
    u.resize = *parse_resize_mode(pick(c.resizes, i, "--control-resize", std::string("crop")));
    u.mode = *parse_control_mode(pick(c.modes, i, "--control-mode", std::string("balanced")));
    u.guess_mode = c.guess_mode;
    units.push_back(std::move(u));
  }
  return units;
}

void add_request_options(CLI::App& sub, GenerationRequest& r, RequestFlags& flags) {
  auto& [sampler, schedule, weights, scale, compute, lora_mode, init_image, mask, sampler_option, schedule_option, cfg_option, steps_option,
         control] = flags;
  add_control_options(sub, control);
  sub.add_option("--lora-mode", lora_mode, "auto (online for FP8, else merge), merge, merge-stochastic, online")
      ->check(CLI::IsMember({"auto", "merge", "merge-stochastic", "online"}))
      ->capture_default_str();
  sub.add_option("--prompt", r.prompt, "the prompt (A1111 syntax: (emphasis:1.2), [less], BREAK)");
  sub.add_option("--negative", r.negative, "the negative prompt");
  flags.steps_option = sub.add_option("--steps", r.steps, "sampling steps (default: the model's, 20; Flux schnell 4, Z-Image Turbo 8)");
  flags.cfg_option = sub.add_option("--cfg", r.cfg, "classifier-free guidance scale (Flux: 1, no CFG, unless given)")->capture_default_str();
  add_family_options(sub, r.options, false);
  sub.add_option("--seed", r.seed, "seed (-1: random); batch count N uses seed, seed+1, ...")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            // CLI11 saturates an out-of-range integer (2^63 became 2^63 - 1): refuse it instead
            int64_t seed = 0;
            const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), seed);
            if (ec == std::errc() && end == v.data() + v.size()) return {};
            return "seed " + v + " is not a whole number from -1 (random) to 9223372036854775807";
          },
          "SEED"));
  sub.add_option("--width", r.width, "width in pixels, a multiple of 8 (0: the model's native size)");
  sub.add_option("--height", r.height, "height in pixels, a multiple of 8 (0: the model's native size)");
  sub.add_option("--batch-size", r.batch_size, "images per sampling run")->capture_default_str();
  sub.add_option("--batch-count", r.batch_count, "sampling runs")->capture_default_str();
  sub.add_option("--clip-skip", r.clip_skip, "1 = last CLIP layer, 2 = penultimate")->capture_default_str();
  flags.sampler_option = sub.add_option("--sampler", sampler, "euler, euler_ancestral, heun, dpmpp_2m, ddim, lcm (default: the model family's first; Flux: euler, heun, dpmpp_2m)")
      ->check([](const std::string& s) { return parse_sampler(s) ? "" : "unknown sampler '" + s + "'"; })
      ->capture_default_str();
  flags.schedule_option = sub.add_option("--schedule", schedule, "normal or karras")
      ->check([](const std::string& s) { return parse_schedule(s) ? "" : "unknown schedule '" + s + "'"; })
      ->capture_default_str();
  sub.add_option("--weights", weights,
                 "storage: auto (the checkpoint's own: fp16, bf16 or its FP8 format; FP32 files as fp16), "
                 "fp32, fp16, bf16, fp8-e4m3, fp8-e5m2, int8 (per-row scales), mxfp8, nvfp4 (ComfyUI's comfy_quant layouts)")
      ->check(CLI::IsMember({"auto", "fp32", "fp16", "bf16", "fp8-e4m3", "fp8-e5m2", "int8", "mxfp8", "nvfp4"}))
      ->capture_default_str();
  sub.add_option("--fp8-scale", scale, "FP8 scaling: none, tensor or channel")
      ->check(CLI::IsMember({"none", "tensor", "channel"}))
      ->capture_default_str();
  sub.add_flag("--fp8-vae", r.storage.fp8_vae, "store the VAE in FP8 too");
  sub.add_option("--compute", compute,
                 "compute type: auto (bf16 on a GPU or a CPU with BF16 instructions, AVX512-BF16 or AMX; fp32 on "
                 "other CPUs, where bf16 is emulated and slow), fp32 or bf16 (fp16 on CUDA; bf16 is fp16 on cards "
                 "before compute capability 8.0)")
      ->check(CLI::IsMember({"auto", "fp32", "bf16", "fp16"}))
      ->capture_default_str();
  add_image_options(sub, r, init_image, mask);
  sub.add_option_function<std::string>("--weight-budget", [&r](const std::string& v) {
    try {
      r.weight_budget = parse_weight_budget(v);
    } catch (const InputError& e) {
      throw CLI::ValidationError("--weight-budget", e.what());
    }
  }, "memory the denoiser's resident weights may take, e.g. 8G (Forge's GPU Weights); the other blocks stream "
     "each step (on the CPU from the file, on a GPU from host memory). auto (default): all resident when the model fits, else what fits; 0: stream every block");
  sub.add_flag("--fp8-compute", r.fp8_compute,
               "with --weights fp8-e4m3 on a CUDA GPU of compute capability 8.9+: Linear layers multiply in FP8 "
               "(_scaled_mm; ComfyUI's fp8_e4m3fn_fast); changes the image");
}

void add_family_options(CLI::App& sub, std::map<std::string, std::string>& values, bool at_load) {
  for (const auto& o : declared_options()) {
    if (o.at_load != at_load) continue;
    const std::string flag = "--" + o.name;
    if (o.type == FamilyOption::Type::Flag) {
      sub.add_flag_function(flag, [&values, name = o.name](int64_t n) { values[name] = n > 0 ? "1" : "0"; }, o.help);
      continue;
    }
    if (o.type == FamilyOption::Type::Files) {  // repeated: --ref-image A --ref-image B (or A;B)
      sub.add_option_function<std::vector<std::string>>(flag, [&values, o](const std::vector<std::string>& files) {
        std::string joined;
        for (const auto& f : files) joined += (joined.empty() ? "" : ";") + f;
        const std::string err = option_value_error(o, joined);
        if (!err.empty()) throw CLI::ValidationError(err);
        values[o.name] = joined;
      }, o.help + " (repeatable)");
      continue;
    }
    const std::string shown = o.default_value.empty() ? std::string() : " (default " + o.default_value + ")";
    sub.add_option_function<std::string>(flag, [&values, o](const std::string& v) {
      const std::string err = option_value_error(o, v);
      if (!err.empty()) throw CLI::ValidationError(err);
      values[o.name] = v;
    }, o.help + shown);
  }
}

void add_model_options(CLI::App& sub, ModelFlags& flags, bool lora_dir) {
  sub.add_option("--model", flags.model, "checkpoint (.safetensors; default: the built-in demo model)");
  sub.add_option("--vocab", flags.vocab, "CLIP vocabulary (.txt.gz, vocab.json, or a folder)");
  if (lora_dir) sub.add_option("--lora-dir", flags.lora_dir, "folder where <lora:NAME:W> prompt tags are looked up");
  add_component_options(sub, flags);
  add_family_options(sub, flags.load_settings, true);
  sub.add_option("--embeddings-dir", flags.embeddings_dir,
                 "textual inversions (NAME.safetensors, used by writing NAME in a prompt; default "
                 "~/.local/share/fp8studio/embeddings)");
  add_device_option(sub, flags.device);
}

void add_component_options(CLI::App& sub, ModelFlags& flags) {
  const auto roles = declared_roles();
  std::string role_names;
  for (const auto& r : roles) role_names += (role_names.empty() ? "" : ", ") + r.role;
  sub.add_option("--component", flags.components, "a model's other file by role, ROLE=FILE (roles: " + role_names + "); repeatable");
  for (const auto& r : roles) {
    if (r.flag.empty()) continue;
    sub.add_option_function<std::string>("--" + r.flag, [&flags, role = r.role](const std::string& v) { flags.role_files[role] = v; },
                                         "= --component " + r.role + "=FILE (" + r.help + ")");
  }
}

void add_device_option(CLI::App& sub, std::string& device) {
  sub.add_option("--device", device, "where the model runs: auto (the first CUDA GPU, else the CPU), cpu, cuda, cuda:N")
      ->capture_default_str();
}

void finish_request(GenerationRequest& r, const RequestFlags& flags, const StorageSpec& auto_storage,
                    const FamilyTraits* family) {
  const auto& [sampler, schedule, weights, scale, compute, lora_mode, init_image, mask, sampler_option, schedule_option, cfg_option, steps_option,
               control] = flags;
  // img2img / inpainting images (read and checked here; their sizes by validate_request)
  if (!init_image.empty()) r.init_image = read_png(init_image).image;
  if (!mask.empty()) r.mask = read_png(mask).image;
  r.controlnets = control_units(control);
  r.lora_mode = *parse_lora_mode(lora_mode);
  r.sampler = *parse_sampler(sampler);
  r.schedule = *parse_schedule(schedule);
  if (family) {  // what was not given is the family's default
    if ((!sampler_option || sampler_option->count() == 0) && !family->samplers.empty()) r.sampler = family->samplers.front();
    if ((!schedule_option || schedule_option->count() == 0) && !family->schedules.empty()) {
      r.schedule = family->schedules.front().schedule;
    }
    if (!cfg_option || cfg_option->count() == 0) r.cfg = family->default_cfg;
    if (!steps_option || steps_option->count() == 0) r.steps = family->default_steps;
  }
  if (weights == "auto") {
    const bool fp8_vae = r.storage.fp8_vae;
    r.storage = auto_storage;
    r.storage.fp8_vae = fp8_vae || auto_storage.fp8_vae;
  } else {
    r.storage.weights = *parse_weight_type(weights);
    r.storage.scale = *parse_fp8_scale(scale);
  }
  r.compute = *parse_compute_type(compute);
}

}  // namespace fp8s::cli

// The request flags shared by generate, compare and bench, and the parsing of their numbers: no
// LibTorch here, so the CLI fuzz target runs this code exactly as the program does.
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "cli/commands.h"
#include "core/error.h"
#include "core/logging.h"

namespace fp8s::cli {

std::string parse_size_pair(const std::string& v, char sep, int& a, int& b) {
  const auto pos = v.find(sep);
  const auto bad = std::string("expected two non-negative integers separated by '") + sep + "', got '" + v + "'";
  if (pos == std::string::npos || pos == 0 || pos + 1 == v.size()) return bad;
  int x = 0, y = 0;
  const char* s = v.data();
  const auto r1 = std::from_chars(s, s + pos, x);
  const auto r2 = std::from_chars(s + pos + 1, s + v.size(), y);
  if (r1.ec != std::errc() || r1.ptr != s + pos || r2.ec != std::errc() || r2.ptr != s + v.size() || x < 0 || y < 0) {
    return bad;
  }
  a = x;
  b = y;
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

void add_common_options(CLI::App& sub, CommonOptions& common, bool reports) {
  sub.add_option("--log-level", common.log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  if (reports) sub.add_flag("--json", common.json, "print the report as JSON on stdout");
  sub.parse_complete_callback([&common] { set_log_level(common.log_level); });
}

// Adds the request flags shared by generate, compare and bench.
void add_request_options(CLI::App& sub, GenerationRequest& r, RequestFlags& flags) {
  auto& [sampler, schedule, weights, scale, compute, lora_mode] = flags;
  sub.add_option("--lora-mode", lora_mode, "auto (online for FP8, else merge), merge, merge-stochastic, online")
      ->check(CLI::IsMember({"auto", "merge", "merge-stochastic", "online"}))
      ->capture_default_str();
  sub.add_option("--prompt", r.prompt, "the prompt (A1111 syntax: (emphasis:1.2), [less], BREAK)");
  sub.add_option("--negative", r.negative, "the negative prompt");
  sub.add_option("--steps", r.steps, "sampling steps")->capture_default_str();
  sub.add_option("--cfg", r.cfg, "classifier-free guidance scale")->capture_default_str();
  sub.add_option("--seed", r.seed, "seed (-1: random); batch count N uses seed, seed+1, ...")->capture_default_str();
  sub.add_option("--width", r.width, "width in pixels, a multiple of 8 (0: the model's native size)");
  sub.add_option("--height", r.height, "height in pixels, a multiple of 8 (0: the model's native size)");
  sub.add_option("--batch-size", r.batch_size, "images per sampling run")->capture_default_str();
  sub.add_option("--batch-count", r.batch_count, "sampling runs")->capture_default_str();
  sub.add_option("--clip-skip", r.clip_skip, "1 = last CLIP layer, 2 = penultimate")->capture_default_str();
  sub.add_option("--sampler", sampler, "euler, euler_ancestral, heun, dpmpp_2m, ddim, lcm")
      ->check([](const std::string& s) { return parse_sampler(s) ? "" : "unknown sampler '" + s + "'"; })
      ->capture_default_str();
  sub.add_option("--schedule", schedule, "normal or karras")
      ->check([](const std::string& s) { return parse_schedule(s) ? "" : "unknown schedule '" + s + "'"; })
      ->capture_default_str();
  sub.add_option("--weights", weights,
                 "storage: auto (the checkpoint's own: fp16, bf16 or its FP8 format; FP32 files as fp16), "
                 "fp32, fp16, bf16, fp8-e4m3, fp8-e5m2")
      ->check(CLI::IsMember({"auto", "fp32", "fp16", "bf16", "fp8-e4m3", "fp8-e5m2"}))
      ->capture_default_str();
  sub.add_option("--fp8-scale", scale, "FP8 scaling: none, tensor or channel")
      ->check(CLI::IsMember({"none", "tensor", "channel"}))
      ->capture_default_str();
  sub.add_flag("--fp8-vae", r.storage.fp8_vae, "store the VAE in FP8 too");
  sub.add_option_function<std::string>("--original-size", [&r](const std::string& v) {
    const auto err = parse_size_pair(v, 'x', r.size.original_width, r.size.original_height);
    if (!err.empty()) throw CLI::ValidationError("--original-size", err);
  }, "SDXL original size WxH (default: the image size)");
  sub.add_option_function<std::string>("--target-size", [&r](const std::string& v) {
    const auto err = parse_size_pair(v, 'x', r.size.target_width, r.size.target_height);
    if (!err.empty()) throw CLI::ValidationError("--target-size", err);
  }, "SDXL target size WxH (default: the image size)");
  sub.add_option_function<std::string>("--crop", [&r](const std::string& v) {
    const auto err = parse_size_pair(v, ',', r.size.crop_top, r.size.crop_left);
    if (!err.empty()) throw CLI::ValidationError("--crop", err);
  }, "SDXL crop TOP,LEFT (default 0,0)");
  sub.add_option_function<std::string>("--uncond", [&r](const std::string& v) {
    if (v == "auto") r.uncond = UncondMode::Auto;
    else if (v == "prompt") r.uncond = UncondMode::Prompt;
    else if (v == "zero") r.uncond = UncondMode::Zero;
    else throw CLI::ValidationError("--uncond", "expected auto, prompt or zero, got '" + v + "'");
  }, "SDXL unconditional branch: auto, prompt or zero");
  sub.add_option("--compute", compute, "compute type: fp32 or bf16 (fp16 on CUDA; bf16 is fp16 on cards before compute capability 8.0)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  sub.add_flag("--fp8-compute", r.fp8_compute,
               "with --weights fp8-e4m3 on a CUDA GPU of compute capability 8.9+: Linear layers multiply in FP8 "
               "(_scaled_mm; ComfyUI's fp8_e4m3fn_fast); changes the image");
}

void add_model_options(CLI::App& sub, ModelFlags& flags, bool lora_dir) {
  sub.add_option("--model", flags.model, "checkpoint (.safetensors; default: the built-in demo model)");
  sub.add_option("--vocab", flags.vocab, "CLIP vocabulary (.txt.gz, vocab.json, or a folder)");
  if (lora_dir) sub.add_option("--lora-dir", flags.lora_dir, "folder where <lora:NAME:W> prompt tags are looked up");
  add_device_option(sub, flags.device);
}

void add_device_option(CLI::App& sub, std::string& device) {
  sub.add_option("--device", device, "where the model runs: auto (the first CUDA GPU, else the CPU), cpu, cuda, cuda:N")
      ->capture_default_str();
}

void finish_request(GenerationRequest& r, const RequestFlags& flags, const StorageSpec& auto_storage) {
  const auto& [sampler, schedule, weights, scale, compute, lora_mode] = flags;
  r.lora_mode = *parse_lora_mode(lora_mode);
  r.sampler = *parse_sampler(sampler);
  r.schedule = *parse_schedule(schedule);
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

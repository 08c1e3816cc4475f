// generate: prompt -> PNG files, with progress on stderr and an optional JSON report.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/progress.h"
#include "core/error.h"
#include "demo/demo_model.h"
#include "core/logging.h"
#include "pipeline/engine.h"

namespace fp8s::cli {
namespace {

std::atomic<bool> g_cancel{false};

void on_sigint(int) { g_cancel.store(true); }

// Progress bar over all steps of all images.
class CliObserver : public Observer {
 public:
  CliObserver(int steps_per_image, int images) : total_(steps_per_image * images), per_image_(steps_per_image) {}
  void onStep(const StepEvent& e) override {
    if (bar_) bar_->update(static_cast<std::size_t>(e.image_index * per_image_ + e.step));
  }
  void onPhase(const PhaseEvent& e) override {
    if (e.phase == "sample" && !bar_) {
      bar_ = std::make_unique<ProgressPrinter>("sampling", static_cast<std::size_t>(total_), "it");
    }
    if (e.phase == "done" && bar_) bar_->finish(), bar_.reset();
  }

 private:
  int total_, per_image_;
  std::unique_ptr<ProgressPrinter> bar_;
};

}  // namespace

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
  sub.add_option("--weights", weights, "storage: fp32, fp16, bf16, fp8-e4m3, fp8-e5m2")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16", "fp8-e4m3", "fp8-e5m2"}))
      ->capture_default_str();
  sub.add_option("--fp8-scale", scale, "FP8 scaling: none, tensor or channel")
      ->check(CLI::IsMember({"none", "tensor", "channel"}))
      ->capture_default_str();
  sub.add_flag("--fp8-vae", r.storage.fp8_vae, "store the VAE in FP8 too");
  auto size_pair = [](const std::string& v, char sep, int& a, int& b) {
    const auto pos = v.find(sep);
    try {
      if (pos == std::string::npos) throw std::invalid_argument(v);
      std::size_t used_a = 0, used_b = 0;
      a = std::stoi(v.substr(0, pos), &used_a);
      b = std::stoi(v.substr(pos + 1), &used_b);
      if (used_a != pos || used_b != v.size() - pos - 1 || a < 0 || b < 0) throw std::invalid_argument(v);
    } catch (const std::exception&) {
      return std::string("expected two non-negative integers separated by '") + sep + "', got '" + v + "'";
    }
    return std::string();
  };
  sub.add_option_function<std::string>("--original-size", [&r, size_pair](const std::string& v) {
    const auto err = size_pair(v, 'x', r.size.original_width, r.size.original_height);
    if (!err.empty()) throw CLI::ValidationError("--original-size", err);
  }, "SDXL original size WxH (default: the image size)");
  sub.add_option_function<std::string>("--target-size", [&r, size_pair](const std::string& v) {
    const auto err = size_pair(v, 'x', r.size.target_width, r.size.target_height);
    if (!err.empty()) throw CLI::ValidationError("--target-size", err);
  }, "SDXL target size WxH (default: the image size)");
  sub.add_option_function<std::string>("--crop", [&r, size_pair](const std::string& v) {
    const auto err = size_pair(v, ',', r.size.crop_top, r.size.crop_left);
    if (!err.empty()) throw CLI::ValidationError("--crop", err);
  }, "SDXL crop TOP,LEFT (default 0,0)");
  sub.add_option_function<std::string>("--uncond", [&r](const std::string& v) {
    if (v == "auto") r.uncond = UncondMode::Auto;
    else if (v == "prompt") r.uncond = UncondMode::Prompt;
    else if (v == "zero") r.uncond = UncondMode::Zero;
    else throw CLI::ValidationError("--uncond", "expected auto, prompt or zero, got '" + v + "'");
  }, "SDXL unconditional branch: auto, prompt or zero");
  sub.add_option("--compute", compute, "compute type: fp32 or bf16 (fp16 on CUDA)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
}

void finish_request(GenerationRequest& r, const RequestFlags& flags) {
  const auto& [sampler, schedule, weights, scale, compute, lora_mode] = flags;
  r.lora_mode = *parse_lora_mode(lora_mode);
  r.sampler = *parse_sampler(sampler);
  r.schedule = *parse_schedule(schedule);
  r.storage.weights = *parse_weight_type(weights);
  r.storage.scale = *parse_fp8_scale(scale);
  r.compute = *parse_compute_type(compute);
}

void register_generate(CLI::App& app) {
  struct Opts {
    CommonOptions common;
    std::string model, vocab, outdir = "outputs", lora_dir;
    std::vector<std::string> loras;
    GenerationRequest r;
    RequestFlags flags;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand("generate", "text to image: writes numbered PNG files");
  add_common_options(*sub, o->common, true);
  sub->add_option("--model", o->model, "checkpoint (.safetensors; default: the built-in demo model)");
  sub->add_option("--vocab", o->vocab, "CLIP vocabulary (.txt.gz, vocab.json, or a folder)");
  sub->add_option("--outdir", o->outdir, "output folder (files are never overwritten)")->capture_default_str();
  add_request_options(*sub, o->r, o->flags);
  sub->add_option("--lora", o->loras, "FILE[:MULT]: apply a LoRA (repeatable)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--lora-dir", o->lora_dir, "folder where <lora:NAME:W> prompt tags are looked up");
  sub->callback([o] {
    o->r.loras = parse_lora_flags(o->loras);
    finish_request(o->r, o->flags);
    LoadOptions load;
    load.checkpoint = o->model.empty() ? demo::find_demo_model() : o->model;
    load.storage = o->r.storage;
    load.vocab = o->vocab;
    load.lora_dir = o->lora_dir;
    Engine engine(load);
    engine.validate(o->r);
    std::signal(SIGINT, on_sigint);
    CliObserver observer(o->r.steps, o->r.batch_count);
    auto result = engine.generate(o->r, &observer, g_cancel);
    std::signal(SIGINT, SIG_DFL);
    nlohmann::json report{{"images", nlohmann::json::array()}};
    for (const auto& img : result.images) {
      const auto path = write_numbered_png(o->outdir, img.seed, img.image, img.parameters);
      report["images"].push_back({{"path", path}, {"seed", img.seed}});
      if (!o->common.json) std::cout << path << "\n";
    }
    const auto& t = result.timing;
    report["timing"] = {{"load_ms", t.load_ms},   {"encode_ms", t.encode_ms}, {"step_ms", t.step_ms},
                        {"denoise_ms", t.denoise_ms}, {"decode_ms", t.decode_ms}, {"total_ms", t.total_ms}};
    report["weight_bytes"] = result.weight_bytes;
    report["rss_peak_bytes"] = result.rss_peak_bytes;
    if (o->common.json) std::cout << report.dump(2) << "\n";
    log().info("{} image(s) in {:.1f} s (load {:.1f} s), peak RSS {:.0f} MB", result.images.size(),
               t.total_ms / 1000, t.load_ms / 1000, result.rss_peak_bytes / 1e6);
  });
}

}  // namespace fp8s::cli

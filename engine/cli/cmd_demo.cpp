// train-demo: trains the built-in demo model; demo-eval: scores it on held-out captions.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/commands.h"
#include "core/error.h"
#include "core/logging.h"
#include "io/image_metrics.h"
#include "demo/demo_model.h"
#include "demo/scenes.h"
#include "demo/train.h"
#include "pipeline/engine.h"

namespace fp8s::cli {

void register_train_demo(CLI::App& app) {
  struct Opts {
    CommonOptions common;
    demo::TrainOptions t;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand("train-demo", "train the built-in demo model on rendered shapes (resumable)");
  add_common_options(*sub, o->common, false);
  sub->add_option("--dir", o->t.dir, "working folder (resumes from what is there)")->required();
  sub->add_option("--seed", o->t.seed, "training seed")->capture_default_str();
  sub->add_option("--vae-steps", o->t.vae_steps, "autoencoder steps")->capture_default_str();
  sub->add_option("--unet-steps", o->t.unet_steps, "text encoder + UNet steps")->capture_default_str();
  sub->add_option("--unet-cooldown", o->t.unet_cooldown, "last text/UNet steps with the learning rate decaying to 0 (-1: the last third)")->capture_default_str();
  sub->add_option("--decoder-steps", o->t.decoder_steps, "decoder-only steps (encoder frozen)")->capture_default_str();
  sub->add_option("--vae-batch", o->t.vae_batch, "images per autoencoder step")->capture_default_str();
  sub->add_option("--unet-batch", o->t.unet_batch, "images per text encoder + UNet step")->capture_default_str();
  sub->add_option("--decoder-batch", o->t.decoder_batch, "images per decoder step")->capture_default_str();
  sub->add_option("--vae-lr", o->t.vae_lr, "autoencoder learning rate")->capture_default_str();
  sub->add_option("--unet-lr", o->t.unet_lr, "text encoder + UNet learning rate")->capture_default_str();
  sub->add_option("--decoder-lr", o->t.decoder_lr, "decoder learning rate")->capture_default_str();
  sub->add_flag("--unet-bf16", o->t.unet_bf16, "text encoder + UNet steps in BF16 (FP32 master weights)");
  sub->add_flag("--vae-bf16", o->t.vae_bf16, "autoencoder work in BF16: its training, the decoder phase, encoding the UNet's latents");
  sub->add_option("--checkpoint-every", o->t.checkpoint_every, "steps between resumable checkpoints")->capture_default_str();
  sub->callback([o] {
    const auto out = demo::train_demo(o->t, [](const demo::TrainProgress& p) {
      std::fprintf(stderr, "train-demo %-4s %6d/%d  loss %.5f  %7.0f s\n", p.phase.c_str(), p.step, p.steps, p.loss, p.seconds);
    });
    std::printf("%s\n", out.c_str());
  });
}

}  // namespace fp8s::cli

namespace fp8s::cli {
namespace {

// Wraps `text` (upper-cased) into lines of at most `width` characters.
std::vector<std::string> wrap(const std::string& text, std::size_t width) {
  std::vector<std::string> lines(1);
  std::string word;
  auto flush = [&] {
    if (word.empty()) return;
    if (!lines.back().empty() && lines.back().size() + 1 + word.size() > width) lines.emplace_back();
    lines.back() += (lines.back().empty() ? "" : " ") + word;
    word.clear();
  };
  for (char c : text) {
    if (c == ' ') {
      flush();
    } else {
      word += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
  }
  flush();
  return lines;
}

// A 4-column grid: each image at 3x, its caption below in the 5x7 font.
void write_grid(const std::string& path, const std::vector<RgbImage>& grid, const std::vector<std::string>& labels) {
  // 4x4 cells: the image at 3x, its caption below in the 5x7 font
  const int cell_w = 200, img_px = 192, text_h = 40, cols = 4, rows = static_cast<int>((grid.size() + 3) / 4);
  RgbImage out;
  out.width = cols * cell_w;
  out.height = rows * (img_px + text_h + 8);
  out.pixels.assign(static_cast<std::size_t>(out.width) * out.height * 3, 255);
  for (std::size_t k = 0; k < grid.size(); ++k) {
    const int cx = static_cast<int>(k % 4) * cell_w + 4, cy = static_cast<int>(k / 4) * (img_px + text_h + 8) + 4;
    for (int y = 0; y < img_px; ++y)
      for (int x = 0; x < img_px; ++x)
        for (int c = 0; c < 3; ++c)
          out.pixels[(static_cast<std::size_t>(cy + y) * out.width + cx + x) * 3 + c] =
              grid[k].pixels[(static_cast<std::size_t>(y / 3) * 64 + x / 3) * 3 + c];
    const auto lines = wrap(labels[k], 31);
    for (std::size_t l = 0; l < lines.size() && l < 4; ++l) draw_text(out, cx, cy + img_px + 3 + static_cast<int>(l) * 9, lines[l], 1, 0, 0, 0);
  }
  std::remove(path.c_str());
  write_png(path, out, "");
}

// Per-attribute accuracy over scored images, printed as a line or as JSON (fractions).
struct Tally {
  int n = 0, colour = 0, shape = 0, position = 0, background = 0, size = 0, all = 0;
  void add(const demo::Score& s) {
    ++n;
    colour += s.colour;
    shape += s.shape;
    position += s.position;
    background += s.background;
    size += s.size;
    all += s.all();
  }
  void report(bool json, nlohmann::json j, const std::string& head) const {
    const double d = std::max(1, n);
    if (json) {
      j.update({{"captions", n}, {"colour", colour / d}, {"shape", shape / d}, {"position", position / d},
                {"background", background / d}, {"size", size / d}, {"all", all / d}});
      std::printf("%s\n", j.dump(2).c_str());
      return;
    }
    std::printf("%s\n  colour %.1f%%  shape %.1f%%  position %.1f%%  background %.1f%%  size %.1f%%  all four %.1f%%\n",
                head.c_str(), 100 * colour / d, 100 * shape / d, 100 * position / d, 100 * background / d, 100 * size / d,
                100 * all / d);
  }
};

struct EvalOptions {
  CommonOptions common;
  std::string model, grid, weights = "fp16", scale = "channel", sampler = "euler", device = "auto";
  int captions = 200, steps = 20;
  float cfg = 5.0f;
  bool autoencoder = false;
};

// The first `count` held-out scenes in a fixed shuffled order.
std::vector<demo::Scene> held_out_scenes(int count) {
  std::vector<demo::Scene> scenes;
  for (const auto& s : demo::all_single_scenes()) {
    if (demo::is_held_out(s)) scenes.push_back(s);
  }
  std::mt19937_64 rng(7);
  std::shuffle(scenes.begin(), scenes.end(), rng);
  if (static_cast<std::size_t>(count) > scenes.size()) throw InputError("only " + std::to_string(scenes.size()) + " held-out captions exist");
  scenes.resize(static_cast<std::size_t>(count));
  return scenes;
}

// --autoencoder: the VAE's reconstructions of the scenes scored.
void eval_autoencoder(const EvalOptions& o, const std::string& checkpoint, const std::vector<demo::Scene>& scenes) {
  std::vector<RgbImage> images;
  const auto scores = demo::score_autoencoder(checkpoint, scenes, &images);
  if (!o.grid.empty()) {
    images.resize(std::min<std::size_t>(images.size(), 16));
    std::vector<std::string> labels;
    for (std::size_t i = 0; i < images.size(); ++i) labels.push_back(demo::caption(scenes[i]));
    write_grid(o.grid, images, labels);
  }
  Tally tally;
  for (const auto& sc : scores) tally.add(sc);
  tally.report(o.common.json, {{"model", checkpoint}, {"autoencoder", true}},
               "demo-eval --autoencoder " + checkpoint + ": " + std::to_string(scores.size()) +
                   " held-out scenes encoded and decoded (FP32)");
}

// Each scene's caption generated (seed = its index + 1) and scored.
void eval_generations(const EvalOptions& o, const LoadOptions& load, Sampler sampler, const std::vector<demo::Scene>& scenes) {
  Engine engine(load);
  Tally tally;
  std::vector<RgbImage> grid;
  std::vector<std::string> labels;
  std::atomic<bool> never{false};
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < scenes.size(); ++i) {
    GenerationRequest r;
    r.prompt = demo::caption(scenes[i]);
    r.steps = o.steps;
    r.cfg = o.cfg;
    r.sampler = sampler;
    r.schedule = Schedule::Normal;
    r.seed = static_cast<int64_t>(i + 1);
    r.width = r.height = demo::kImageSize;
    r.storage = load.storage;
    r.compute = ComputeType::FP32;
    const auto result = engine.generate(r, nullptr, never);
    const auto& img = result.images.at(0).image;
    tally.add(demo::score(scenes[i], img));
    if (grid.size() < 16) {
      grid.push_back(img);
      labels.push_back(r.prompt);
    }
    if ((i + 1) % 20 == 0) log().info("demo-eval: {}/{}", i + 1, scenes.size());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!o.grid.empty()) write_grid(o.grid, grid, labels);
  char head[512];
  std::snprintf(head, sizeof head, "demo-eval %s (%s): %zu held-out captions, %d steps %s, CFG %.1f, %.0f s",
                load.checkpoint.c_str(), o.weights.c_str(), scenes.size(), o.steps, o.sampler.c_str(), o.cfg, secs);
  tally.report(o.common.json, {{"model", load.checkpoint}, {"weights", o.weights}, {"seconds", secs}}, head);
}

}  // namespace

void register_demo_eval(CLI::App& app) {
  auto o = std::make_shared<EvalOptions>();
  auto* sub = app.add_subcommand("demo-eval", "score the demo model on held-out captions (colour, shape, position)");
  add_common_options(*sub, o->common, true);
  sub->add_option("--model", o->model, "checkpoint (default: the built-in demo model)");
  sub->add_option("--captions", o->captions, "held-out captions to evaluate")->capture_default_str();
  sub->add_option("--weights", o->weights, "storage: fp32, fp16, bf16, fp8-e4m3, fp8-e5m2")->capture_default_str();
  sub->add_option("--fp8-scale", o->scale, "FP8 scaling: none, tensor, channel")->capture_default_str();
  sub->add_option("--steps", o->steps, "sampling steps")->capture_default_str();
  sub->add_option("--cfg", o->cfg, "guidance scale")->capture_default_str();
  sub->add_option("--sampler", o->sampler, "sampler")->capture_default_str();
  add_device_option(*sub, o->device);
  sub->add_option("--grid", o->grid, "also write a PNG grid of the first 16 captions and their images");
  sub->add_flag("--autoencoder", o->autoencoder,
                "score the VAE's reconstructions of the rendered scenes instead (the ceiling of any generation)");
  sub->callback([o] {
    if (o->captions < 1 || o->captions > 5000) throw InputError("--captions must be 1..5000");
    const auto w = parse_weight_type(o->weights);
    if (!w) throw InputError("--weights: unknown storage '" + o->weights + "'");
    const auto scale = parse_fp8_scale(o->scale);
    if (!scale) throw InputError("--fp8-scale: unknown scaling '" + o->scale + "'");
    const auto sampler = parse_sampler(o->sampler);
    if (!sampler) throw InputError("--sampler: unknown sampler '" + o->sampler + "'");
    LoadOptions load;
    load.checkpoint = model_or_demo(o->model);
    load.storage = {*w, is_fp8(*w) ? *scale : Fp8Scale::None, false};
    load.device = o->device;
    const auto scenes = held_out_scenes(o->captions);
    if (o->autoencoder) {
      eval_autoencoder(*o, load.checkpoint, scenes);
    } else {
      eval_generations(*o, load, *sampler, scenes);
    }
  });
}

}  // namespace fp8s::cli

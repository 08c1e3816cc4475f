#include "demo/train.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <map>
#include <optional>
#include <random>

#include "io/image_metrics.h"
#include "core/error.h"
#include "core/logging.h"
#include "demo/loss_plot.h"
#include "demo/scenes.h"
#include "demo/vocab.h"
#include "io/safetensors.h"
#include "models/nn.h"
#include "models/synthetic.h"
#include "models/text_encoder.h"
#include "models/unet.h"
#include "models/vae.h"
#include "pipeline/img2img.h"
#include "families/sd/model.h"
#include "text/clip_tokenizer.h"
#include "text/prompt_parser.h"

namespace fp8s::demo {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The batch of step `step` of `phase`: the same on every run and after a resume.
struct Batch {
  at::Tensor images;  // [B,3,64,64] in [-1,1]
  std::vector<std::string> captions;
};
// Rendered images -> [B,3,64,64] in [-1,1].
at::Tensor images_tensor(const std::vector<RgbImage>& images) {
  auto t = at::empty({static_cast<int64_t>(images.size()), 3, kImageSize, kImageSize}, at::kFloat);
  auto acc = t.accessor<float, 4>();
  for (std::size_t i = 0; i < images.size(); ++i) {
    const auto& img = images[i];
    for (int y = 0; y < kImageSize; ++y)
      for (int x = 0; x < kImageSize; ++x)
        for (int c = 0; c < 3; ++c) acc[static_cast<int64_t>(i)][c][y][x] = img.pixels[(y * kImageSize + x) * 3 + c] / 127.5f - 1.0f;
  }
  return t;
}

Batch make_batch(uint64_t seed, int phase, int step, int batch) {
  std::mt19937_64 rng(mix(seed * 1000003 + static_cast<uint64_t>(phase) * 7919 + static_cast<uint64_t>(step)));
  Batch b;
  std::vector<RgbImage> images;
  for (int i = 0; i < batch; ++i) {
    auto [scene, text] = sample_training(rng);
    images.push_back(render(scene));
    b.captions.push_back(rng() % 10 == 0 ? std::string() : text);  // 10% dropout: CFG's unconditional
  }
  b.images = images_tensor(images);
  return b;
}

// The batch of step `step` of `phase` and its latents (posterior means x scale factor, no gradient).
std::pair<Batch, at::Tensor> encoded_batch(VaeImpl& vae, uint64_t seed, int phase, int step, int batch,
                                           at::ScalarType compute) {
  auto b = make_batch(seed, phase, step, batch);
  InferenceGuard no_grad;
  auto z = vae.encode(b.images, compute).to(at::kFloat);
  return {std::move(b), z};
}

struct Modules {
  std::shared_ptr<VaeImpl> vae;
  std::shared_ptr<TextEncoderImpl> te;
  std::shared_ptr<UNetImpl> unet;
};

Modules load_modules(const ModelConfig& config, const std::string& path) {
  SafetensorsFile file(path);
  StorageSpec fp32{WeightType::FP32, Fp8Scale::None, false};
  Modules m;
  const auto& tc = config.text_encoders.at(0);
  m.te = std::make_shared<TextEncoderImpl>(tc);
  load_module_weights(*m.te, file, tc.prefix, fp32, false, m.te->ignorable_keys(), m.te->fused_layers());
  m.unet = std::make_shared<UNetImpl>(config.unet);
  load_module_weights(*m.unet, file, kUNetPrefix, fp32, false);
  m.vae = std::make_shared<VaeImpl>(config.vae);
  load_module_weights(*m.vae, file, kVaePrefix, fp32, false);
  return m;
}

std::vector<at::Tensor> trainable(torch::nn::Module& module) {
  std::vector<at::Tensor> out;
  for (auto& p : module.parameters()) {
    p.requires_grad_(true);
    out.push_back(p);
  }
  return out;
}

// Writes every key of `layout_file` from the modules' parameters and buffers (FP32), with the
// configuration's `ldm.config` metadata. Atomic.
void save_checkpoint(const Modules& m, const ModelConfig& config, const std::string& layout_path,
                     const std::string& out, const std::map<std::string, std::string>& extra_meta) {
  std::map<std::string, at::Tensor> tensors;
  auto collect = [&](torch::nn::Module& module, const std::string& prefix) {
    for (const auto& p : module.named_parameters()) tensors[prefix + p.key()] = p.value();
    for (const auto& b : module.named_buffers()) tensors[prefix + b.key()] = b.value();
  };
  collect(*m.te, config.text_encoders.at(0).prefix);
  collect(*m.unet, kUNetPrefix);
  collect(*m.vae, kVaePrefix);
  SafetensorsFile layout(layout_path);
  std::vector<TensorSpec> specs;
  for (const auto& t : layout.tensors()) specs.push_back({t.name, t.dtype, t.shape});
  auto meta = layout.metadata();
  meta["ldm.config"] = config.ldm_config_json;
  for (const auto& [k, v] : extra_meta) meta[k] = v;
  SafetensorsWriter writer(out, specs, meta, /*overwrite=*/true);
  for (const auto& t : layout.tensors()) {
    auto it = tensors.find(t.name);
    if (it == tensors.end()) {  // keys no module owns (DDPM buffers): copied from the layout file
      std::vector<uint8_t> raw(t.nbytes());
      layout.read(t, raw.data());
      writer.append(raw.data(), raw.size());
      continue;
    }
    at::Tensor v = it->second.detach().contiguous();
    if (t.dtype == Dtype::F32) {
      v = v.to(at::kFloat).contiguous();
    } else if (t.dtype == Dtype::I64) {
      v = v.to(at::kLong).contiguous();
    } else {
      throw RuntimeFailure("train-demo: unexpected dtype for " + t.name);
    }
    writer.append(v.data_ptr(), t.nbytes());
  }
  writer.commit();
}

struct State {
  std::string phase = "vae";
  int step = 0;
  float scale_factor = 1.0f;
};

State read_state(const std::string& dir) {
  State s;
  std::ifstream in(dir + "/state.json");
  if (!in) return s;
  const auto j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object()) return s;
  s.phase = j.value("phase", s.phase);
  s.step = j.value("step", 0);
  s.scale_factor = j.value("scale_factor", 1.0f);
  return s;
}

void write_state(const std::string& dir, const State& s) {
  const std::string tmp = dir + "/state.json.partial";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << nlohmann::json{{"phase", s.phase}, {"step", s.step}, {"scale_factor", s.scale_factor}}.dump(2) << "\n";
  }
  fs::rename(tmp, dir + "/state.json");
}


}  // namespace

ModelConfig demo_config(int vocab_size) {
  ModelConfig m = preset_sd15();
  m.ema_scalars = false;
  auto& u = m.unet;
  u.model_channels = 64;
  u.channel_mult = {1, 2, 2};
  u.num_res_blocks = 1;
  u.attention_resolutions = {1, 2, 4};
  u.num_heads = 4;
  u.transformer_depth = {1, 1, 1};
  u.context_dim = 128;
  resize_vae(m.vae, 32, {1, 2, 2, 2}, 1);
  auto& t = m.text_encoders[0];
  resize_text_encoder(t, 128, 3, 4, 512, 3);
  t.vocab_size = vocab_size;
  t.pad_id = vocab_size - 1;
  m.ldm_config_json = to_ldm_config_json(m);
  return m;
}

namespace {

// One train-demo run (the three phases, resumable): its options, modules, state and loss log.
class Trainer {
 public:
  Trainer(const TrainOptions& o, const std::function<void(const TrainProgress&)>& progress) : o_(o), progress_(progress) {}

  std::string run() {
    check_options();
    make_dirs(o_.dir);
    const std::string tok_dir = o_.dir + "/tokenizer";
    const int vocab_size = write_vocabulary(tok_dir, grammar_words());
    tokenizer_ = ClipTokenizer::load(tok_dir + "/vocab.json");
    config_ = demo_config(vocab_size);
    state_ = read_state(o_.dir);
    if (!fs::exists(init_path())) {
      SyntheticOptions s;
      s.config = config_;
      s.float_dtype = Dtype::F32;
      s.seed = o_.seed;
      s.out = init_path();
      s.overwrite = true;
      make_synthetic(s);
    }
    resuming_ = fs::exists(state_path()) && (state_.step > 0 || state_.phase != "vae");
    m_ = load_modules(config_, resuming_ ? state_path() : init_path());
    if (resuming_) log().info("train-demo: resuming {} at step {}", state_.phase, state_.step);
    config_.vae.scale_factor = state_.scale_factor;
    m_.vae->set_scale_factor(state_.scale_factor);
    torch::manual_seed(o_.seed);
    csv_.open(o_.dir + "/loss.csv", std::ios::app);
    if (fs::file_size(o_.dir + "/loss.csv") == 0) csv_ << "phase,step,loss,seconds\n";
    if (state_.phase == "vae") vae_phase();
    config_.vae.scale_factor = state_.scale_factor;
    config_.ldm_config_json = to_ldm_config_json(config_);
    if (state_.phase == "unet") unet_phase();
    if (state_.phase == "decoder") decoder_phase();
    const std::string out = o_.dir + "/demo-sd1-fp32.safetensors";
    save_checkpoint(m_, config_, init_path(), out,
                    {{"fp8s.demo", "FP8 Studio demo model: trained on rendered shapes (issue 10)"},
                     {"fp8s.demo.vocabulary", "tokenizer/vocab.json + merges.txt beside the checkpoint"}});
    plot_losses(o_.dir + "/loss.csv", o_.dir + "/loss.png");
    return out;
  }

 private:
  static constexpr int kReport = 25;

  void check_options() const {
    for (const int batch : {o_.vae_batch, o_.unet_batch, o_.decoder_batch}) {
      if (batch < 1 || batch > 1024) throw InputError("batch sizes must be 1..1024");
    }
    if (o_.unet_cooldown < -1 || cooldown() > o_.unet_steps) {
      throw InputError("--unet-cooldown must be 0..--unet-steps (or -1: the last third)");
    }
    if (o_.vae_steps < 0 || o_.unet_steps < 0 || o_.decoder_steps < 0) throw InputError("step counts must not be negative");
  }
  int cooldown() const { return o_.unet_cooldown < 0 ? o_.unet_steps / 3 : o_.unet_cooldown; }
  std::string init_path() const { return o_.dir + "/init.safetensors"; }
  std::string state_path() const { return o_.dir + "/state.safetensors"; }
  std::string optimizer_path() const { return o_.dir + "/optimizer.pt"; }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  // BF16 compute on FP32 master weights (the engine keeps norms in FP32): for the autoencoder's
  // training and for encoding the later phases' latents; for the text encoder and UNet.
  at::ScalarType vae_compute() const { return o_.vae_bf16 ? at::kBFloat16 : at::kFloat; }
  at::ScalarType unet_compute() const { return o_.unet_bf16 ? at::kBFloat16 : at::kFloat; }
  // A resumed phase's optimiser state (`mid_phase`: only when the phase had begun).
  void resume(torch::optim::Optimizer& opt, bool mid_phase) {
    if (resuming_ && mid_phase && fs::exists(optimizer_path())) torch::load(opt, optimizer_path());
    acc_ = 0;
  }

  void save(const std::string& phase, int step, torch::optim::Optimizer& opt) {
    state_.phase = phase;
    state_.step = step;
    save_checkpoint(m_, config_, init_path(), state_path(), {});
    torch::save(opt, optimizer_path());
    write_state(o_.dir, state_);
  }
  // The next phase starts at step 0 with a fresh optimiser, from a checkpoint of the modules.
  void begin_phase(const std::string& phase) {
    state_.phase = phase;
    state_.step = 0;
    save_checkpoint(m_, config_, init_path(), state_path(), {});
    fs::remove(optimizer_path());
    write_state(o_.dir, state_);
  }
  // One optimiser step on `loss`, then the loss report every kReport steps and a checkpoint.
  void train_step(const at::Tensor& loss, torch::optim::Optimizer& opt, const std::string& phase, int step, int steps) {
    opt.zero_grad();
    loss.backward();
    opt.step();
    acc_ += loss.item<double>();
    if ((step + 1) % kReport == 0) {
      csv_ << phase << "," << step + 1 << "," << acc_ / kReport << "," << seconds() << "\n" << std::flush;
      if (progress_) progress_({phase, step + 1, steps, acc_ / kReport, seconds()});
      acc_ = 0;
    }
    if ((step + 1) % o_.checkpoint_every == 0) save(phase, step + 1, opt);
  }

  // Phase 1: the autoencoder; then the latent scale.
  void vae_phase() {
    auto params = trainable(*m_.vae);
    torch::optim::Adam opt(params, torch::optim::AdamOptions(o_.vae_lr));
    resume(opt, true);
    TrainingScope training;
    for (int step = state_.step; step < o_.vae_steps; ++step) {
      auto b = make_batch(o_.seed, 1, step, o_.vae_batch);
      auto moments = m_.vae->encode_moments(b.images, vae_compute()).to(at::kFloat);
      auto mean = moments.slice(1, 0, 4), logvar = moments.slice(1, 4, 8).clamp(-30, 20);
      auto z = mean + at::exp(0.5 * logvar) * at::randn_like(mean);
      auto rec = m_.vae->decode(z * m_.vae->config().scale_factor, vae_compute()).to(at::kFloat);
      auto kl = 0.5 * (mean.pow(2) + logvar.exp() - 1 - logvar).mean();
      train_step((rec - b.images).abs().mean() + (rec - b.images).pow(2).mean() + 1e-4 * kl, opt, "vae", step, o_.vae_steps);
    }
    // the latent scale: unit variance of the posterior means, as SD's 0.18215 was chosen
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> means;
    for (int i = 0; i < 8; ++i) {
      const auto b = make_batch(o_.seed, 3, i, 64);
      means.push_back(m_.vae->encode_moments(b.images, at::kFloat).slice(1, 0, 4));
    }
    state_.scale_factor = static_cast<float>(1.0 / at::cat(means).std().item<double>());
    log().info("train-demo: latent scale factor {:.5f}", state_.scale_factor);
    m_.vae->set_scale_factor(state_.scale_factor);
    config_.vae.scale_factor = state_.scale_factor;
    config_.ldm_config_json = to_ldm_config_json(config_);
    for (auto& p : m_.vae->parameters()) p.requires_grad_(false);
    begin_phase("unet");
  }

  // The UNet step's inputs: the captions' tokens, the timesteps and the noised latents.
  struct UnetBatch {
    at::Tensor tokens, t, noise, xt;
  };
  UnetBatch unet_batch(int step, const at::Tensor& alphas_cumprod) {
    const auto [b, z0] = encoded_batch(*m_.vae, o_.seed, 2, step, o_.unet_batch, vae_compute());
    UnetBatch u;
    u.tokens = at::empty({o_.unet_batch, 77}, at::kLong);
    for (int i = 0; i < o_.unet_batch; ++i) {
      const auto chunks = tokenize_prompt(*tokenizer_, b.captions[static_cast<std::size_t>(i)]);
      for (int k = 0; k < 77; ++k) u.tokens[i][k] = chunks.ids[0][static_cast<std::size_t>(k)];
    }
    std::mt19937_64 rng(mix(o_.seed * 31 + static_cast<uint64_t>(step)));
    u.t = at::empty({o_.unet_batch}, at::kLong);
    for (int i = 0; i < o_.unet_batch; ++i) u.t[i] = static_cast<int64_t>(rng() % 1000);
    const auto gen = at::make_generator<at::CPUGeneratorImpl>(mix(o_.seed * 131 + static_cast<uint64_t>(step)));
    u.noise = at::randn(z0.sizes(), gen);
    auto acp = alphas_cumprod.index_select(0, u.t).view({-1, 1, 1, 1});
    u.xt = acp.sqrt() * z0 + (1 - acp).sqrt() * u.noise;
    return u;
  }

  // Phase 2: text encoder and UNet together, ε-prediction.
  void unet_phase() {
    const auto alphas_cumprod = at::tensor(ddpm_buffer("alphas_cumprod"), at::kFloat);
    auto params = trainable(*m_.te);
    for (auto& p : trainable(*m_.unet)) params.push_back(p);
    torch::optim::AdamW opt(params, torch::optim::AdamWOptions(o_.unet_lr).weight_decay(0.0));
    resume(opt, state_.step > 0);
    const auto& tc = config_.text_encoders[0];
    for (int step = state_.step; step < o_.unet_steps; ++step) {
      const auto u = unet_batch(step, alphas_cumprod);
      // constant, then a linear cool-down over the last `cooldown` steps (a function of the
      // step alone, so a resumed run follows the same schedule)
      const double lr = step < o_.unet_steps - cooldown() ? o_.unet_lr
                                                          : o_.unet_lr * (o_.unet_steps - step) / std::max(1, cooldown());
      for (auto& group : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
      TrainingScope training;
      auto ctx = m_.te->forward(u.tokens, tc.hidden_state_index, tc.final_layer_norm, unet_compute()).hidden;
      auto eps = m_.unet->forward(u.xt, u.t.to(at::kFloat), ctx, {}, unet_compute(), nullptr);
      train_step((eps - u.noise).pow(2).mean(), opt, "unet", step, o_.unet_steps);
    }
    begin_phase("decoder");
  }

  // Phase 3: the decoder alone on the frozen encoder's posterior means, so the latent space the
  // UNet learned stays the same while the images get sharper.
  void decoder_phase() {
    std::vector<at::Tensor> params;
    for (auto& p : m_.vae->named_parameters()) {
      const bool decoder = p.key().rfind("decoder.", 0) == 0 || p.key().rfind("post_quant_conv.", 0) == 0;
      p.value().requires_grad_(decoder);
      if (decoder) params.push_back(p.value());
    }
    torch::optim::Adam opt(params, torch::optim::AdamOptions(o_.decoder_lr));
    resume(opt, state_.step > 0);
    for (int step = state_.step; step < o_.decoder_steps; ++step) {
      const auto [b, z] = encoded_batch(*m_.vae, o_.seed, 4, step, o_.decoder_batch, vae_compute());
      TrainingScope training;
      auto rec = m_.vae->decode(z, vae_compute()).to(at::kFloat);
      train_step((rec - b.images).abs().mean() + (rec - b.images).pow(2).mean(), opt, "decoder", step, o_.decoder_steps);
    }
    for (auto& p : m_.vae->parameters()) p.requires_grad_(false);
    state_.phase = "done";
    state_.step = o_.decoder_steps;
    write_state(o_.dir, state_);
  }

  const TrainOptions& o_;
  const std::function<void(const TrainProgress&)>& progress_;
  std::optional<ClipTokenizer> tokenizer_;
  ModelConfig config_;
  State state_;
  Modules m_;
  bool resuming_ = false;
  std::ofstream csv_;
  const Clock::time_point start_ = Clock::now();
  double acc_ = 0;
};

}  // namespace

std::string train_demo(const TrainOptions& o, const std::function<void(const TrainProgress&)>& progress) {
  return Trainer(o, progress).run();
}

std::vector<Score> score_autoencoder(const std::string& checkpoint, const std::vector<Scene>& scenes,
                                     std::vector<RgbImage>* reconstructions) {
  SafetensorsFile file(checkpoint);
  const ModelConfig config = config_for(file);
  auto vae = std::make_shared<VaeImpl>(config.vae);
  load_module_weights(*vae, file, kVaePrefix, StorageSpec{WeightType::FP32, Fp8Scale::None, false}, false);
  InferenceGuard no_grad;
  std::vector<Score> out;
  for (const auto& s : scenes) {
    auto image = to_images(vae->decode(vae->encode(images_tensor({render(s)}), at::kFloat), at::kFloat)).at(0);
    out.push_back(score(s, image));
    if (reconstructions) reconstructions->push_back(std::move(image));
  }
  return out;
}

}  // namespace fp8s::demo

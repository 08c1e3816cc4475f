#include "families/flux/flux_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "lora/flux_lora_keys.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/strings.h"
#include "models/config_json.h"
#include "models/component_load.h"
#include "models/flux/flux.h"
#include "models/t5/t5.h"
#include "models/text_encoder.h"
#include "models/vae.h"
#include "pipeline/sample_pass.h"

namespace fp8s {

std::vector<double> flux_schedule(int steps, int64_t image_tokens, bool shift) {
  if (steps < 1) throw InputError("Flux sampling needs at least 1 step, got " + std::to_string(steps));
  std::vector<double> t(static_cast<std::size_t>(steps) + 1);
  for (int i = 0; i <= steps; ++i) t[static_cast<std::size_t>(i)] = 1.0 - static_cast<double>(i) / steps;
  if (!shift) return t;
  const double m = (1.15 - 0.5) / (4096 - 256), b = 0.5 - m * 256;
  const double mu = m * static_cast<double>(image_tokens) + b;
  for (auto& v : t) v = v <= 0 ? 0.0 : std::exp(mu) / (std::exp(mu) + (1.0 / v - 1.0));
  return t;
}

at::Tensor flux_pack(const at::Tensor& latent) {
  const int64_t B = latent.size(0), C = latent.size(1), H = latent.size(2), W = latent.size(3);
  return latent.reshape({B, C, H / 2, 2, W / 2, 2}).permute({0, 2, 4, 1, 3, 5}).reshape({B, (H / 2) * (W / 2), C * 4});
}

at::Tensor flux_unpack(const at::Tensor& tokens, int64_t height, int64_t width) {
  const int64_t B = tokens.size(0), C = tokens.size(2) / 4;
  return tokens.reshape({B, height / 2, width / 2, C, 2, 2}).permute({0, 3, 1, 4, 2, 5}).reshape({B, C, height, width});
}

at::Tensor flux_image_ids(int64_t batch, int64_t height, int64_t width) {
  auto ids = at::zeros({height / 2, width / 2, 3});
  ids.select(2, 1).add_(at::arange(height / 2, at::kFloat).unsqueeze(1));
  ids.select(2, 2).add_(at::arange(width / 2, at::kFloat).unsqueeze(0));
  return ids.reshape({1, -1, 3}).expand({batch, -1, -1}).contiguous();
}

namespace {

int64_t dim_of(const SafetensorsFile& f, const std::string& key, std::size_t d) {
  const auto& shape = f.at(key).shape;
  if (shape.size() <= d) throw InputError(f.path() + ": tensor '" + key + "' has an unexpected shape");
  return shape[d];
}

int count_blocks(const SafetensorsFile& f, const std::string& before, const std::string& after) {
  int n = 0;
  while (f.find(before + std::to_string(n) + after)) ++n;
  return n;
}

std::string metadata(const SafetensorsFile& f, const std::string& key) {
  auto it = f.metadata().find(key);
  return it == f.metadata().end() ? std::string() : it->second;
}

// Each configuration from the tensor shapes; what shapes cannot say (Flux's RoPE axes, CLIP's
// head count, the autoencoder's scale and shift) from the tiny files' metadata, else the released value.
FluxConfig flux_config(const SafetensorsFile& f, const std::string& p, bool dev) {
  const std::string own = metadata(f, "flux.config");
  FluxConfig c = parse_flux_config(own, dev, f.path());
  if (own.empty() && f.metadata().count("config.json")) {  // a diffusers folder's transformer/config.json
    read_config_json(f.metadata().at("config.json"), f.path(), "config.json",
                     [&](const nlohmann::json& j) {
                       c.axes_dim = config_int_list(j, "axes_dims_rope", c.axes_dim, f.path(), "config.json axes_dims_rope");
                     });
    check_rope_axes(c.axes_dim, f.path(), "config.json axes_dims_rope");
  }
  c.hidden_size = static_cast<int>(dim_of(f, p + "img_in.weight", 0));
  c.in_channels = static_cast<int>(dim_of(f, p + "img_in.weight", 1));
  c.context_in_dim = static_cast<int>(dim_of(f, p + "txt_in.weight", 1));
  c.vec_in_dim = static_cast<int>(dim_of(f, p + "vector_in.in_layer.weight", 1));
  const int64_t head = dim_of(f, p + "double_blocks.0.img_attn.norm.query_norm.scale", 0);
  check_config_value(static_cast<double>(head), 2, 4096, f.path(), "the transformer's head width (query_norm)");
  c.num_heads = static_cast<int>(c.hidden_size / head);
  c.mlp_ratio = static_cast<double>(dim_of(f, p + "double_blocks.0.img_mlp.0.weight", 0)) / c.hidden_size;
  c.depth = count_blocks(f, p + "double_blocks.", ".img_attn.qkv.weight");
  c.depth_single_blocks = count_blocks(f, p + "single_blocks.", ".linear1.weight");
  int axes = 0;
  for (int a : c.axes_dim) axes += a;
  if (axes != c.head_dim()) {
    throw InputError(f.path() + ": the transformer's head width " + std::to_string(c.head_dim()) +
                     " does not match the RoPE axes (" + std::to_string(axes) + "); not a Flux.1 transformer");
  }
  return c;
}

T5Config t5_config(const SafetensorsFile& f, const std::string& p) {
  T5Config c;
  c.vocab_size = static_cast<int>(dim_of(f, p + "shared.weight", 0));
  c.d_model = static_cast<int>(dim_of(f, p + "shared.weight", 1));
  const std::string b0 = p + "encoder.block.0.layer.";
  c.buckets = static_cast<int>(dim_of(f, b0 + "0.SelfAttention.relative_attention_bias.weight", 0));
  c.num_heads = static_cast<int>(dim_of(f, b0 + "0.SelfAttention.relative_attention_bias.weight", 1));
  c.d_kv = static_cast<int>(dim_of(f, b0 + "0.SelfAttention.q.weight", 0) / c.num_heads);
  c.d_ff = static_cast<int>(dim_of(f, b0 + "1.DenseReluDense.wi_0.weight", 0));
  c.num_layers = count_blocks(f, p + "encoder.block.", ".layer.0.SelfAttention.q.weight");
  c.max_distance = parse_t5_config(metadata(f, "t5.config"), f.path()).max_distance;
  return c;
}

TextEncoderConfig clip_config(const SafetensorsFile& f, const std::string& p) {
  TextEncoderConfig c;
  c.name = "clip_l";
  c.prefix = p;
  c.vocab_size = static_cast<int>(dim_of(f, p + "embeddings.token_embedding.weight", 0));
  c.width = static_cast<int>(dim_of(f, p + "embeddings.token_embedding.weight", 1));
  c.context_length = static_cast<int>(dim_of(f, p + "embeddings.position_embedding.weight", 0));
  c.mlp_dim = static_cast<int>(dim_of(f, p + "encoder.layers.0.mlp.fc1.weight", 0));
  c.layers = count_blocks(f, p + "encoder.layers.", ".mlp.fc1.weight");
  // CLIP's heads are 64 wide; narrower test encoders use 16 (the shapes cannot tell)
  c.heads = c.width % 64 == 0 ? c.width / 64 : std::max(1, c.width / 16);
  if (const auto meta = metadata(f, "clip.config"); !meta.empty()) {
    try {
      const auto j = nlohmann::json::parse(meta);
      if (j.contains("heads")) c.heads = config_int(j["heads"], f.path(), "clip.config heads");
    } catch (const nlohmann::json::exception& e) {
      throw InputError(f.path() + ": malformed clip.config metadata (" + e.what() + ")");
    }
  }
  check_config_value(c.heads, 1, std::max(1, c.width), f.path(), "clip.config heads");
  if (c.width % c.heads != 0) {
    throw InputError(f.path() + ": clip.config heads " + std::to_string(c.heads) + " does not divide the width " +
                     std::to_string(c.width) + " (the model's configuration is damaged: use the files from its source)");
  }
  c.position_ids = f.find(p + "embeddings.position_ids") != nullptr;
  c.quick_gelu = true;
  return c;
}

}  // namespace

VaeConfig flux_ae_config(const SafetensorsFile& f, const std::string& p) {
  VaeConfig c;
  c.quant_convs = false;
  c.scale_factor = 0.3611f;
  c.shift_factor = 0.1159f;
  c.ch = static_cast<int>(dim_of(f, p + "encoder.conv_in.weight", 0));
  c.z_channels = static_cast<int>(dim_of(f, p + "decoder.conv_in.weight", 1));
  c.embed_dim = c.z_channels;
  const int levels = count_blocks(f, p + "encoder.down.", ".block.0.conv1.weight");
  check_config_value(levels, 1, 8, f.path(), "the autoencoder's levels");
  check_config_value(c.ch, 1, 4096, f.path(), "the autoencoder's width (encoder.conv_in)");
  c.ch_mult.clear();
  for (int i = 0; i < levels; ++i) {
    c.ch_mult.push_back(static_cast<int>(dim_of(f, p + "encoder.down." + std::to_string(i) + ".block.0.conv1.weight", 0) / c.ch));
  }
  c.num_res_blocks = count_blocks(f, p + "encoder.down.0.block.", ".conv1.weight");
  // the tiny files' ae.config, else diffusers' vae/config.json (scaling_factor, shift_factor)
  const std::string ae = metadata(f, "ae.config");
  read_config_json(ae, f.path(), "ae.config", [&](const nlohmann::json& j) {
    c.scale_factor = config_float(j, "scale_factor", c.scale_factor);
    c.shift_factor = config_float(j, "shift_factor", c.shift_factor);
  });
  if (ae.empty()) {
    read_config_json(metadata(f, "config.json"), f.path(), "config.json", [&](const nlohmann::json& j) {
      c.scale_factor = config_float(j, "scaling_factor", c.scale_factor);
      if (j.contains("shift_factor") && j["shift_factor"].is_number()) c.shift_factor = config_float(j, "shift_factor", c.shift_factor);
    });
  }
  // 0 or 1e-300 divides the latent into infinities: a one-colour picture
  check_config_value(std::abs(c.scale_factor), 1e-6, 1e6, f.path(), "the autoencoder's scale_factor (its magnitude)");
  check_config_value(c.shift_factor, -1e6, 1e6, f.path(), "the autoencoder's shift_factor");
  return c;
}


bool flux_t5_on_cpu(const at::Device& device, const FluxComponentBytes& b, uint64_t device_bytes, uint64_t working_bytes) {
  if (device.is_cpu() || device_bytes == 0) return false;
  return b.transformer + b.t5 + b.clip_l + b.vae + working_bytes > device_bytes;
}

at::ScalarType flux_t5_compute(at::ScalarType compute, const at::Device& device, int compute_capability) {
  if (compute != at::kHalf) return compute;
  return device.is_cpu() || compute_capability >= 80 ? at::kBFloat16 : at::kFloat;
}

FluxModel::FluxModel(FluxFiles files, const StorageSpec& storage, const at::Device& device)
    : files_(std::move(files)), storage_(storage), device_(device), t5_device_(device) {}

void FluxModel::set_t5_device(const at::Device& device) {
  if (device == t5_device_) return;
  t5_device_ = device;
  t5_.reset();
  bytes_.t5 = 0;
}

FluxModel::~FluxModel() = default;

FluxImpl& FluxModel::flux() {
  if (!flux_) {
    const auto& c = files_.transformer;
    auto make = [&](const SafetensorsFile& f, const std::string& p) { return std::make_shared<FluxImpl>(flux_config(f, p, files_.dev)); };
    flux_ = budget_ ? load_streamed(c, c.path + ": no Flux transformer", storage_, {}, device_, *budget_, bytes_.transformer,
                                    load_ms_, streaming_, make)
                    : load_component(c, c.path + ": no Flux transformer", storage_, true, {}, device_, bytes_.transformer,
                                     load_ms_, make);
    if (budget_) {
      log().info("Flux transformer, {} budget {:.1f} GB: {}", weight_type_name(storage_.weights),
                 static_cast<double>(*budget_) / 1e9, streaming_.plan.describe());
    }
    set_fp8_compute(fp8_compute_);
    loras_.apply(*flux_, lora_component(false));
  }
  return *flux_;
}

void FluxModel::set_weight_budget(std::optional<uint64_t> budget) {
  if (budget == budget_) return;
  budget_ = budget;
  release_transformer();
  release_text_encoders();
}

StreamStats FluxModel::stream_stats() const {
  StreamStats s = streaming_.stats();
  s += t5_streaming_.stats();
  return s;
}

void FluxModel::end_streaming() {
  streaming_.end();
  t5_streaming_.end();
}

void FluxModel::reset_stream_stats() {
  streaming_.reset_stats();
  t5_streaming_.reset_stats();
}

void FluxModel::load_all() {
  flux();
  if (files_.t5.found()) t5();
  if (files_.clip_l.found()) clip();
  if (files_.vae.found()) vae();
}

void FluxModel::load_text_encoders() {
  t5();
  clip();
}

void FluxModel::load_sampling() {
  flux();
  vae();
}

void FluxModel::release_transformer() {
  streaming_.clear();  // the reader joined before the blocks it stages go
  flux_.reset();
  bytes_.transformer = 0;
  loras_.forget("");
}

void FluxModel::set_storage(const StorageSpec& storage) {
  if (storage == storage_) return;
  storage_ = storage;
  release_transformer();
  release_text_encoders();
  vae_.reset();
  bytes_ = {};
}

void FluxModel::set_fp8_compute(bool on) {
  fp8_compute_ = on;
  if (!flux_) return;
  for (const auto& m : flux_->modules(false)) {
    if (auto* l = dynamic_cast<QLinearImpl*>(m.get())) l->fp8_compute = on;
  }
}

T5EncoderImpl& FluxModel::t5() {
  if (!t5_) {
    const auto& c = files_.t5;
    // (the tied copy of the embedding that some files carry is ignored)
    const std::string missing = files_.transformer.path + ": no T5-XXL text encoder; pass --t5 t5xxl_fp16.safetensors (or t5xxl_fp8_e4m3fn*)";
    const std::vector<std::string> ignorable{"encoder.embed_tokens.weight"};
    auto make = [](const SafetensorsFile& f, const std::string& p) { return std::make_shared<T5EncoderImpl>(t5_config(f, p)); };
    // under a weight budget its layers stream too (the text phase and the sampling phase take turns)
    t5_ = budget_ ? load_streamed(c, missing, component_storage(c), ignorable, t5_device_, *budget_, bytes_.t5, load_ms_,
                                  t5_streaming_, make)
                  : load_component(c, missing, component_storage(c), true, ignorable, t5_device_, bytes_.t5, load_ms_, make);
    if (t5_streaming_.plan.any()) log().info("T5-XXL, budget {:.1f} GB: {}", static_cast<double>(*budget_) / 1e9, t5_streaming_.plan.describe());
  }
  return *t5_;
}

TextEncoderImpl& FluxModel::clip() {
  if (!clip_) {
    const auto& c = files_.clip_l;
    clip_ = load_component(c, files_.transformer.path + ": no CLIP-L text encoder; pass --clip-l clip_l.safetensors",
                           component_storage(c), true, TextEncoderImpl::ignorable_keys(), device_, bytes_.clip_l, load_ms_,
                           [](const SafetensorsFile& f, const std::string& p) { return std::make_shared<TextEncoderImpl>(clip_config(f, p)); });
    loras_.apply(*clip_, lora_component(true));
  }
  return *clip_;
}

VaeImpl& FluxModel::vae() {
  if (!vae_) {
    const auto& c = files_.vae;
    vae_ = load_component(c, files_.transformer.path + ": no Flux autoencoder; pass --vae ae.safetensors", component_storage(c),
                          storage_.fp8_vae, {}, device_, bytes_.vae, load_ms_,
                          [](const SafetensorsFile& f, const std::string& p) { return std::make_shared<VaeImpl>(flux_ae_config(f, p)); });
  }
  return *vae_;
}

StorageSpec FluxModel::component_storage(const ComponentSource& c) const {
  return c.found() ? fp8s::component_storage(SafetensorsFile(c.path), c.prefix, storage_) : storage_;
}

void FluxModel::release_text_encoders() {
  t5_streaming_.clear();
  t5_.reset();
  clip_.reset();
  bytes_.t5 = bytes_.clip_l = 0;
  loras_.forget(kFluxClipLoraTarget);
}

at::Tensor FluxModel::encode_t5(const at::Tensor& tokens, at::ScalarType compute) {
  const int cc = t5_device_.is_cuda() ? backend::compute_capability(t5_device_) : 0;
  return t5().forward(tokens.to(at::kLong), flux_t5_compute(compute, t5_device_, cc)).to(device_);
}

std::pair<at::Tensor, at::Tensor> FluxModel::encode_clip(const at::Tensor& tokens, at::ScalarType compute) {
  auto& te = clip();
  const auto ids = tokens.to(at::kLong);
  const at::Tensor hidden = te.forward(ids, te.config().layers, true, compute).hidden;
  const auto eos = ids.argmax(-1).to(hidden.device());  // the first EOS (the largest id)
  const auto pooled = hidden.gather(1, eos.view({-1, 1, 1}).expand({-1, 1, hidden.size(2)})).squeeze(1);
  return {pooled, hidden};
}

at::Tensor FluxModel::transformer(const at::Tensor& img, const at::Tensor& img_ids, const at::Tensor& txt,
                                  const at::Tensor& txt_ids, const at::Tensor& t, const at::Tensor& y,
                                  const at::Tensor& guidance, at::ScalarType compute) {
  return flux().forward(img, img_ids, txt, txt_ids, t, y, guidance, compute);
}

at::Tensor flux_sigmas(int steps, int64_t image_tokens, bool shift) {
  const auto ts = flux_schedule(steps, image_tokens, shift);
  return at::tensor(std::vector<double>(ts.begin(), ts.end()), at::kDouble).to(at::kFloat);
}

PassDenoiser FluxModel::denoiser(const at::Tensor& txt, const at::Tensor& y, const FluxGuidance& guidance,
                                 at::ScalarType compute, const std::function<void(double)>& on_model_ms) {
  const bool cfg = guidance.cfg != 1.0f && guidance.uncond_txt.defined();
  PassDenoiser d;
  // D(x, σ) = x − σ·v(x, t = σ) over the packed tokens; with CFG v = v_u + s·(v_c − v_u)
  d.denoise = [this, txt, y, guidance, cfg, compute, on_model_ms](const at::Tensor& x, const at::Tensor& sigma) {
    const auto start = std::chrono::steady_clock::now();
    const int64_t B = x.size(0), H = x.size(2), W = x.size(3);
    if (H % 2 || W % 2) throw InputError("the Flux latent must have an even size, got " + std::to_string(H) + "x" + std::to_string(W));
    const auto img = flux_pack(x.to(at::kFloat));
    const auto img_ids = flux_image_ids(B, H, W);
    const auto t = at::full({B}, sigma.item<float>(), at::kFloat);
    const auto g = at::full({B}, guidance.distilled, at::kFloat);
    auto pred = transformer(img, img_ids, txt, at::zeros({B, txt.size(1), 3}), t, y, g, compute).to(at::kCPU, at::kFloat);
    if (cfg) {
      const auto u = transformer(img, img_ids, guidance.uncond_txt, at::zeros({B, guidance.uncond_txt.size(1), 3}), t,
                                 guidance.uncond_y, g, compute).to(at::kCPU, at::kFloat);
      pred = u + guidance.cfg * (pred - u);
    }
    if (on_model_ms) on_model_ms(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    return x - sigma * flux_unpack(pred, H, W);
  };
  return d;
}

at::Tensor FluxModel::sample(const at::Tensor& noise, const at::Tensor& txt, const at::Tensor& y, int steps,
                             const FluxGuidance& guidance, bool shift, at::ScalarType compute,
                             const std::function<void(int, int, double)>& on_step, const SamplingInit& init) {
  const int64_t H = noise.size(2), W = noise.size(3);
  if (H % 2 || W % 2) throw InputError("the Flux latent must have an even size, got " + std::to_string(H) + "x" + std::to_string(W));
  const int schedule_steps = init.latent.defined() ? init.schedule_steps : steps;
  const StepCallback callback = [&](int i, int n, float sigma, const at::Tensor&, const at::Tensor&) {
    if (on_step) on_step(i + 1, n, sigma);
  };
  return sample_pass(denoiser(txt, y, guidance, compute), Prediction::Flow, Sampler::Euler, noise.to(at::kFloat),
                     flux_sigmas(schedule_steps, (H / 2) * (W / 2), shift), init, 0, callback);
}

at::Tensor FluxModel::vae_decode(const at::Tensor& latent, at::ScalarType compute) {
  return vae().decode(latent.to(device_), compute);
}

at::Tensor FluxModel::vae_encode(const at::Tensor& image, at::ScalarType compute) {
  return vae().encode(image.to(device_), compute);
}

int FluxModel::vae_factor() { return 1 << (static_cast<int>(vae().config().ch_mult.size()) - 1); }

ResidencyPlan flux_residency_plan(const ComponentSource& transformer, bool dev, const StorageSpec& storage, uint64_t budget) {
  if (!transformer.found()) throw InputError("no Flux transformer to plan");
  const SafetensorsFile file(transformer.path);
  FluxImpl m(flux_config(file, transformer.prefix, dev));  // placeholders: no weight is allocated
  // as load_streamed plans it; the layers outside the blocks (embedders, final layer) stay resident
  return plan_network(m, m.blocks(), file, transformer.prefix, storage, true, true, budget);
}

}  // namespace fp8s

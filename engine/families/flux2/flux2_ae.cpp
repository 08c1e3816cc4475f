#include "families/flux2/flux2_ae.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "families/flux/flux_model.h"
#include "models/config_json.h"

namespace fp8s {

at::Tensor flux2_patchify(const at::Tensor& z) {
  const int64_t B = z.size(0), C = z.size(1), h = z.size(2) / 2, w = z.size(3) / 2;
  return z.reshape({B, C, h, 2, w, 2}).permute({0, 1, 3, 5, 2, 4}).reshape({B, C * 4, h, w});
}

at::Tensor flux2_unpatchify(const at::Tensor& x) {
  const int64_t B = x.size(0), C = x.size(1) / 4, h = x.size(2), w = x.size(3);
  return x.reshape({B, C, 2, 2, h, w}).permute({0, 1, 4, 2, 5, 3}).reshape({B, C, h * 2, w * 2});
}

namespace {

VaeConfig flux2_vae_config(const SafetensorsFile& f, const std::string& p) {
  VaeConfig c = flux_ae_config(f, p);  // Flux.1's shapes and names
  c.quant_convs = true;
  c.quant_convs_in_coders = true;
  c.embed_dim = c.z_channels;
  c.scale_factor = 1.0f;  // the model space is normalised by the BatchNorm statistics instead
  c.shift_factor = 0.0f;
  return c;
}

}  // namespace

Flux2AutoencoderImpl::Flux2AutoencoderImpl(const SafetensorsFile& f, const std::string& p) : VaeImpl(flux2_vae_config(f, p)) {
  double eps = 1e-4;
  const auto meta = f.metadata().find("flux2_ae.config");
  if (meta != f.metadata().end()) {
    read_config_json(meta->second, f.path(), "flux2_ae.config", [&](const nlohmann::json& j) { eps = j.value("bn_eps", eps); });
  }
  check_config_value(eps, 0, 1, f.path(), "flux2_ae.config bn_eps");
  const int64_t channels = 4 * config().z_channels;
  auto stat = [&](const char* name) {
    const auto* rec = f.find(p + name);
    if (!rec) throw InputError(f.path() + ": not a FLUX.2 autoencoder (no '" + p + name + "'; Flux.1's ae.safetensors has none)");
    const auto t = read_tensor(f, *rec).to(at::kFloat).reshape({-1});
    if (t.numel() != channels) {
      throw InputError(f.path() + ": '" + p + name + "' has " + std::to_string(t.numel()) + " values for " + std::to_string(channels) +
                       " patchified channels");
    }
    return t.view({1, -1, 1, 1});
  };
  mean_ = stat("bn.running_mean");
  std_ = at::sqrt(stat("bn.running_var") + eps);
}

Flux2Autoencoder load_flux2_autoencoder(const SafetensorsFile& f, const std::string& p, const StorageSpec& storage,
                                        const at::Device& device) {
  const BuildOn on(device);
  Flux2Autoencoder ae(f, p);
  load_module_weights(*ae, f, p, storage, false, Flux2AutoencoderImpl::ignorable_keys(), {}, device);
  return ae;
}

int Flux2AutoencoderImpl::factor() const { return 1 << (static_cast<int>(config().ch_mult.size()) - 1); }

at::Tensor Flux2AutoencoderImpl::encode_model(const at::Tensor& images, at::ScalarType compute) {
  const auto z = encode(images, compute).to(at::kCPU, at::kFloat);
  return (flux2_patchify(z) - mean_) / std_;
}

at::Tensor Flux2AutoencoderImpl::decode_model(const at::Tensor& latent, at::ScalarType compute, const at::Device& device) {
  const auto z = flux2_unpatchify(latent.to(at::kCPU, at::kFloat) * std_ + mean_);
  return decode(z.to(device), compute);
}

}  // namespace fp8s

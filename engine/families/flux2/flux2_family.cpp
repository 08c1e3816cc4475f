#include "families/flux2/flux2_family.h"

#include "core/error.h"
#include "models/inspect.h"
#include "models/component_load.h"
#include "families/flux2/flux2_ae.h"
#include "families/flux2/flux2_model.h"
#include "families/flux2/flux2_sampling.h"
#include "models/flux2/flux2.h"
#include "pipeline/family_options.h"
#include "models/lm/decoder_lm.h"
#include "pipeline/engine.h"
#include "pipeline/run_support.h"

namespace fp8s {
namespace {




// A probe's transformer: the file's, in the probe's storage on its device.
Flux2 load_transformer(const ProbeSetup& s) {
  const SafetensorsFile file(s.model);
  const auto prefix = flux2_prefix(file);
  if (!prefix) throw InputError(s.model + ": not a FLUX.2 transformer (no double_stream_modulation_img.lin.weight)");
  const BuildOn on(s.device);
  Flux2 model(flux2_config(file, *prefix));
  load_module_weights(*model, file, *prefix, s.storage, true, {}, {}, s.device, true);
  return model;
}

// One transformer call (`flux2`): with reference tokens (`ref`, `ref_ids`: an edit's images), the
// sequence is img ++ ref and the prediction is the first N rows.
at::Tensor flux2_call(const ProbeSetup& s, const ProbeInputs& read) {
  Flux2 model = load_transformer(s);
  const auto& config = model->config();
  std::map<std::string, int64_t> dims{{"img", 3}, {"img_ids", 2}, {"txt", 3}, {"txt_ids", 2}, {"t", 1}, {"ref", -3}, {"ref_ids", -2}};
  if (config.guidance_embed) dims["guidance"] = 1;
  auto in = read(dims);
  const int64_t n = in["img"].size(1);
  at::Tensor img = in["img"], ids = in["img_ids"];
  if (in.count("ref")) img = at::cat({img, in["ref"]}, 1), ids = at::cat({ids, in["ref_ids"]}, 0);
  const auto pred = model->forward(img, ids, in["txt"], in["txt_ids"], in["t"].reshape({-1}),
                                   in.count("guidance") ? in["guidance"].reshape({-1}) : at::Tensor(),
                                   compute_dtype(s.compute, s.device));
  return pred.narrow(1, 0, n);
}


// The whole loop (`flux2-sample`): klein CFG with `neg`, an edit's `ref`, img2img's `init`.
at::Tensor flux2_sample_role(const ProbeSetup& s, const ProbeInputs& read) {
  Flux2 model = load_transformer(s);
  auto in = read({{"noise", 4}, {"txt", 3}, {"neg", -3}, {"ref", -4}, {"init", -4}});
  Flux2Guidance g;
  g.cfg = s.cfg;
  if (model->config().guidance_embed) g.distilled = static_cast<float>(option_number(flux2_options(true), s.options, "guidance"));
  std::vector<at::Tensor> refs;
  if (in.count("ref")) refs.push_back(in["ref"]);
  return flux2_sample(*model, in["noise"], in["txt"], in.count("neg") ? in["neg"] : at::Tensor(), refs,
                      in.count("init") ? in["init"] : at::Tensor(), s.steps, s.strength, g, compute_dtype(s.compute, s.device));
}

std::map<std::string, at::Tensor> run_flux2_probe(const std::string& role, const ProbeSetup& s, const ProbeInputs& read) {
  if (role == "flux2") return {{"pred", flux2_call(s, read)}};
  if (role == "flux2-sample") return {{"latent", flux2_sample_role(s, read)}};
  if (role == "flux2-vae-decode" || role == "flux2-vae-encode") {
    auto ae = load_flux2_autoencoder(SafetensorsFile(s.model), "", s.storage, s.device);
    const auto compute = compute_dtype(s.compute, s.device);
    if (role == "flux2-vae-decode") return {{"image", ae->decode_model(read({{"latent", 4}})["latent"], compute, s.device)}};
    return {{"latent", ae->encode_model(read({{"image", 4}})["image"].to(s.device), compute)}};
  }
  const SafetensorsFile file(s.model);
  const auto config = flux2_text_config(file, role == "flux2-mistral");
  const BuildOn on(s.device);
  DecoderLm encoder(config);
  // a Mistral file may carry the Pixtral vision tower and projector, and the tokenizer (tekken_model)
  auto ignorable = DecoderLmImpl::ignorable_keys(config);
  load_module_weights(*encoder, file, "model.", s.storage, is_fp8(s.storage.weights), ignorable, {}, s.device, true);
  auto in = read({{"tokens", 2}, {"mask", 2}});
  return {{"embeds", encoder->forward(in["tokens"].to(at::kLong), in["mask"], compute_dtype(s.compute, s.device))}};
}

}  // namespace

FamilyEntry flux2_family_entry() {
  FamilyEntry e;
  e.id = "flux2";
  e.label = "FLUX.2 klein and dev";
  e.detect = [](const SafetensorsFile& file) { return flux2_prefix(file).has_value(); };
  e.traits = [](const SafetensorsFile& file) { return flux2_model_traits(file, flux2_prefix(file).value_or(""), 8); };
  e.open = open_flux2;
  e.tools.estimate = flux2_estimate;
  e.tools.plan = flux2_plan;
  e.roles = flux2_roles();
  e.tools.probe = {{"flux2-qwen3", "flux2-mistral", "flux2", "flux2-sample", "flux2-vae-decode", "flux2-vae-encode"}, run_flux2_probe};
  e.options = flux2_options(true);
  e.tools.inspect_parts = [](const SafetensorsFile& file) {
    const auto prefix = flux2_prefix(file);
    InspectParts p{prefix ? flux2_model_traits(file, *prefix, 8).name : "FLUX.2", {}};
    if (prefix) p.parts.push_back({"transformer", *prefix, true});
    return p;
  };
  return e;
}

}  // namespace fp8s

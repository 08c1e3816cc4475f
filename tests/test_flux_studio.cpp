// Flux in the studio (issue 32): img2img, inpainting and hires fix in the flow sense against
// formulas derived here (the truncated schedule's start x = t·noise + (1 − t)·x0, the kept part of
// the latent on that line after every step, strength 1 = txt2img, the hires pass's schedule), and
// LoRAs through generate (prompt tags, infotext, refusal of an SD LoRA). The Flux LoRA reference
// cases themselves run in test_reference_flux. Runs on the tiny reference Flux files
// (../shared/reference/flux) and skips without them.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <tuple>

#include <unistd.h>

#include <QDir>
#include <QJsonDocument>
#include <QJsonObject>
#include <QFile>
#include <QTemporaryDir>
#include "core/error.h"
#include "io/safetensors.h"
#include "pipeline/engine.h"
#include "pipeline/infotext.h"
#include "families/flux/flux_family.h"
#include "families/flux/flux_model.h"
#include "pipeline/sample_pass.h"
#include "support.h"

using namespace fp8s;

namespace {

const QString kFlux = "flux/";

at::Tensor case_tensor(const SafetensorsFile& f, const std::string& name) {
  std::vector<int64_t> shape;
  auto v = test::read_f32_tensor(f, name, &shape);
  return at::tensor(v, at::kFloat).reshape(shape);
}

// The sample_dev case's noise, T5 states and CLIP-L pooled vector (BFL's sampler inputs).
// A normal tensor of `like`'s shape from its own seed (an init latent).
at::Tensor randn_like_seeded(const at::Tensor& like, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(like.sizes(), gen, at::kFloat);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> sample_inputs() {
  const SafetensorsFile cases(test::reference_path(kFlux + "cases.safetensors"));
  return {case_tensor(cases, "sample_dev.noise"), case_tensor(cases, "sample_dev.txt"), case_tensor(cases, "sample_dev.y")};
}


// diffusers' FluxTransformer2DModel names of a BFL tensor (convert_flux_transformer_checkpoint_to_
// diffusers, spelled out here on its own), each with the rows of the BFL tensor it holds, in order:
// the fused q/k/v (and a single block's mlp rows) split, norm_out.linear's halves swapped.
struct DiffusersPart {
  std::string name;
  std::vector<std::pair<int64_t, int64_t>> rows;  // (start, count) pieces of the BFL tensor
};
std::vector<DiffusersPart> flux_diffusers_parts(const std::string& bfl, int64_t rows, int64_t hidden) {
  const auto dot = bfl.rfind('.');
  const std::string module = bfl.substr(0, dot), kind = bfl.substr(dot + 1);
  const std::string leaf = kind == "scale" ? "weight" : kind;
  auto whole = [&](const std::string& d) { return std::vector<DiffusersPart>{{d + "." + leaf, {{0, rows}}}}; };
  auto block = [&](const char* head) -> std::pair<std::string, std::string> {  // (index, rest)
    const std::string h = head;
    if (module.compare(0, h.size(), h) != 0) return {"", ""};
    const auto end = module.find('.', h.size());
    return {module.substr(h.size(), end - h.size()), module.substr(end + 1)};
  };
  if (const auto [n, rest] = block("double_blocks."); !n.empty()) {
    const std::string d = "transformer_blocks." + n + ".";
    if (rest == "img_attn.qkv" || rest == "txt_attn.qkv") {
      const bool img = rest[0] == 'i';
      std::vector<DiffusersPart> out;
      const char* parts[] = {"q", "k", "v"};
      for (int i = 0; i < 3; ++i) {
        out.push_back({d + (img ? std::string("attn.to_") + parts[i] : std::string("attn.add_") + parts[i] + "_proj") + "." + leaf,
                       {{i * hidden, hidden}}});
      }
      return out;
    }
    static const std::map<std::string, std::string> names{
        {"img_attn.norm.query_norm", "attn.norm_q"}, {"img_attn.norm.key_norm", "attn.norm_k"},
        {"txt_attn.norm.query_norm", "attn.norm_added_q"}, {"txt_attn.norm.key_norm", "attn.norm_added_k"},
        {"img_attn.proj", "attn.to_out.0"}, {"txt_attn.proj", "attn.to_add_out"},
        {"img_mlp.0", "ff.net.0.proj"}, {"img_mlp.2", "ff.net.2"},
        {"txt_mlp.0", "ff_context.net.0.proj"}, {"txt_mlp.2", "ff_context.net.2"},
        {"img_mod.lin", "norm1.linear"}, {"txt_mod.lin", "norm1_context.linear"}};
    return whole(d + names.at(rest));
  }
  if (const auto [n, rest] = block("single_blocks."); !n.empty()) {
    const std::string d = "single_transformer_blocks." + n + ".";
    if (rest == "linear1") {
      return {{d + "attn.to_q." + leaf, {{0, hidden}}}, {d + "attn.to_k." + leaf, {{hidden, hidden}}},
              {d + "attn.to_v." + leaf, {{2 * hidden, hidden}}}, {d + "proj_mlp." + leaf, {{3 * hidden, rows - 3 * hidden}}}};
    }
    static const std::map<std::string, std::string> names{{"linear2", "proj_out"}, {"norm.query_norm", "attn.norm_q"},
                                                          {"norm.key_norm", "attn.norm_k"}, {"modulation.lin", "norm.linear"}};
    return whole(d + names.at(rest));
  }
  if (module == "final_layer.adaLN_modulation.1") return {{"norm_out.linear." + leaf, {{rows / 2, rows / 2}, {0, rows / 2}}}};
  static const std::map<std::string, std::string> globals{
      {"img_in", "x_embedder"}, {"txt_in", "context_embedder"},
      {"time_in.in_layer", "time_text_embed.timestep_embedder.linear_1"}, {"time_in.out_layer", "time_text_embed.timestep_embedder.linear_2"},
      {"guidance_in.in_layer", "time_text_embed.guidance_embedder.linear_1"}, {"guidance_in.out_layer", "time_text_embed.guidance_embedder.linear_2"},
      {"vector_in.in_layer", "time_text_embed.text_embedder.linear_1"}, {"vector_in.out_layer", "time_text_embed.text_embedder.linear_2"},
      {"final_layer.linear", "proj_out"}};
  return whole(globals.at(module));
}

FluxFiles tiny_files() {
  FluxFiles f;
  f.transformer = {test::reference_path(kFlux + "tiny-flux-dev.safetensors"), ""};
  f.t5 = {test::reference_path(kFlux + "tiny-t5xxl.safetensors"), ""};
  f.clip_l = {test::reference_path(kFlux + "tiny-clip-l.safetensors"), ""};
  f.vae = {test::reference_path(kFlux + "tiny-ae.safetensors"), ""};
  f.dev = true;
  return f;
}

LoadOptions tiny_options() {
  LoadOptions o;
  o.checkpoint = test::reference_path(kFlux + "tiny-flux-dev.safetensors");
  o.components["t5xxl"] = test::reference_path(kFlux + "tiny-t5xxl.safetensors");
  o.components["clip_l"] = test::reference_path(kFlux + "tiny-clip-l.safetensors");
  o.components["vae"] = test::reference_path(kFlux + "tiny-ae.safetensors");
  o.components["t5_tokenizer"] = test::reference_path(kFlux + "t5_tokenizer/tokenizer.json");
  o.vocab = test::reference_path("clip");
  o.lora_dir = test::reference_path("flux");
  o.storage.weights = WeightType::FP32;
  o.device = "cpu";
  return o;
}

GenerationRequest tiny_request() {
  GenerationRequest r;
  r.prompt = "a lighthouse on a cliff at dusk";
  r.seed = 100;
  r.steps = 5;
  r.sampler = Sampler::Euler;
  r.width = r.height = 16;
  r.options["t5-max-length"] = "32";
  r.compute = ComputeType::FP32;
  r.storage.weights = WeightType::FP32;
  return r;
}

RgbImage pattern(int w, int h) {
  RgbImage im;
  im.width = w;
  im.height = h;
  im.pixels.resize(static_cast<std::size_t>(w) * h * 3);
  for (std::size_t i = 0; i < im.pixels.size(); ++i) im.pixels[i] = static_cast<uint8_t>((i * 37 + (i / 41) * 5) % 256);
  return im;
}

FluxGuidance dev_guidance() {
  FluxGuidance g;
  g.distilled = 3.5f;
  return g;
}

// The request is refused with an InputError whose message has `text` (printed when it has not).
bool refused(Engine& engine, const GenerationRequest& r, const char* text) {
  const QString msg = test::refusal(engine, r);
  if (!msg.contains(text)) qWarning("refused with: %s", qPrintable(msg));
  return msg.contains(text);
}

using fp8s::test::Steps;

}  // namespace

class TestFluxStudio : public QObject {
  Q_OBJECT

  // The flow's Euler loop written out: from x = t_f·noise + (1 − t_f)·x0 at ts[first], each step
  // x += (t_next − t)·v(x, t), then (with `keep`) x = keep·(t_next·noise + (1 − t_next)·x0) + (1 − keep)·x.
  static at::Tensor manual_loop(FluxModel& m, const at::Tensor& noise, const at::Tensor& x0, const at::Tensor& keep,
                                const at::Tensor& txt, const at::Tensor& y, const std::vector<double>& ts, int first) {
    const int64_t H = noise.size(2), W = noise.size(3);
    const auto pn = flux_pack(noise), px0 = flux_pack(x0);
    const auto pk = keep.defined() ? flux_pack(keep) : at::Tensor();
    at::Tensor x = ts[first] * pn + (1 - ts[first]) * px0;
    const auto ids = flux_image_ids(1, H, W);
    const auto txt_ids = at::zeros({1, txt.size(1), 3});
    for (std::size_t i = static_cast<std::size_t>(first); i + 1 < ts.size(); ++i) {
      const auto v = m.transformer(x, ids, txt, txt_ids, at::full({1}, ts[i]), y, at::full({1}, 3.5f), at::kFloat);
      x = x + (ts[i + 1] - ts[i]) * v;
      if (pk.defined()) x = pk * (ts[i + 1] * pn + (1 - ts[i + 1]) * px0) + (1 - pk) * x;
    }
    return flux_unpack(x, H, W);
  }

 private Q_SLOTS:
  // Heun and DPM++ 2M on Flux's own sigmas through sampling/, against both samplers written out
  // here over the transformer's velocity: Heun as the flow's trapezoid (the last step to t = 0
  // plain Euler), DPM++ 2M over D = x − t·v in k-diffusion's exponential form, in FP64
  void fluxSamplesWithHeunAndDpmpp2m() {
    FP8S_REQUIRE_REFERENCE();
    FluxModel model(tiny_files(), StorageSpec{WeightType::FP32}, at::Device(at::kCPU));
    const auto [noise, txt, y] = sample_inputs();
    const int64_t H = noise.size(2), W = noise.size(3);
    const auto ts = flux_schedule(5, (H / 2) * (W / 2), true);
    const auto ids = flux_image_ids(1, H, W);
    const auto txt_ids = at::zeros({1, txt.size(1), 3});
    // v at the same F32 t the samplers hand the denoiser
    auto v = [&](const at::Tensor& x, double t) {
      const auto tf = at::full({1}, static_cast<double>(static_cast<float>(t)), at::kFloat);
      return flux_unpack(model.transformer(flux_pack(x.to(at::kFloat)), ids, txt, txt_ids, tf, y, at::full({1}, 3.5f), at::kFloat), H, W)
          .to(at::kDouble);
    };
    auto sig = [&](std::size_t i) { return static_cast<double>(static_cast<float>(ts[i])); };
    at::Tensor heun = noise.to(at::kDouble);
    for (std::size_t i = 0; i + 1 < ts.size(); ++i) {
      const double dt = sig(i + 1) - sig(i);
      const auto d = v(heun, sig(i));
      heun = sig(i + 1) == 0 ? heun + d * dt : heun + (d + v(heun + d * dt, sig(i + 1))) / 2 * dt;
    }
    at::Tensor dpm = noise.to(at::kDouble), old;
    for (std::size_t i = 0; i + 1 < ts.size(); ++i) {
      const double s = sig(i), s_next = sig(i + 1);
      const auto denoised = dpm - s * v(dpm, s);
      if (s_next == 0) {
        dpm = denoised;
      } else {
        const double h = std::log(s) - std::log(s_next);
        auto dd = denoised;
        if (old.defined()) {
          const double r = (std::log(sig(i - 1)) - std::log(s)) / h;
          dd = (1 + 1 / (2 * r)) * denoised - (1 / (2 * r)) * old;
        }
        dpm = (s_next / s) * dpm - std::expm1(-h) * dd;
      }
      old = denoised;
    }
    const auto sigmas = flux_sigmas(5, (H / 2) * (W / 2), true);
    const PassDenoiser d = model.denoiser(txt, y, dev_guidance(), at::kFloat);
    for (const auto& [sampler, want] : {std::pair{Sampler::Heun, heun}, std::pair{Sampler::DpmPP2M, dpm}}) {
      int calls = 0;
      PassDenoiser counted = d;
      counted.denoise = [&](const at::Tensor& x, const at::Tensor& s) { ++calls; return d.denoise(x, s); };
      const auto got = sample_pass(counted, Prediction::Flow, sampler, noise, sigmas, {}, 0).to(at::kDouble);
      const double err = (got - want).abs().max().item<double>() / want.abs().max().item<double>();
      QVERIFY2(err < 1e-4, qPrintable(QString("%1: relative error %2").arg(sampler_name(sampler)).arg(err)));
      QCOMPARE(calls, model_calls(sampler, 5));
      // and neither is Euler's image
      const auto euler = sample_pass(d, Prediction::Flow, Sampler::Euler, noise, sigmas, {}, 0).to(at::kDouble);
      QVERIFY((euler - want).abs().max().item<double>() > 1e-3 * want.abs().max().item<double>());
    }
  }

  // strength 0.5 of 6 steps: A1111's t_enc = ⌊0.5·6⌋ = 3, so the last 4 steps run, from ts[2]
  void img2imgStartsOnTheTruncatedFlow() {
    FP8S_REQUIRE_REFERENCE();
    FluxModel model(tiny_files(), StorageSpec{WeightType::FP32}, at::Device(at::kCPU));
    const auto [noise, txt, y] = sample_inputs();
    const auto x0 = randn_like_seeded(noise, 7);
    SamplingInit init;
    init.latent = x0;
    set_img2img_steps(init, 6, 0.5f, false);
    QCOMPARE(init.t_enc, 3);
    std::vector<double> seen;
    const auto got = model.sample(noise, txt, y, 6, dev_guidance(), true, at::kFloat,
                                  [&](int i, int n, double t) { QCOMPARE(n, 4); QCOMPARE(i, int(seen.size()) + 1); seen.push_back(t); }, init);
    const auto ts = flux_schedule(6, (noise.size(2) / 2) * (noise.size(3) / 2), true);
    // the samplers report their F32 sigmas (σ = t)
    QCOMPARE(seen.size(), std::size_t(4));
    for (std::size_t k = 0; k < seen.size(); ++k) QCOMPARE(seen[k], double(static_cast<float>(ts[k + 2])));
    const auto want = manual_loop(model, noise, x0, {}, txt, y, ts, 2);
    const double err = (got - want).abs().max().item<double>() / want.abs().max().item<double>();
    QVERIFY2(err < 1e-5, qPrintable(QString("relative error %1").arg(err)));
  }

  // keep = 1 on the left half: after the last step (t = 0) the left half is x0 exactly, the right
  // half was sampled; the whole follows the written-out loop with the blend after every step
  void inpaintingKeepsTheInitOnTheFlowLine() {
    FP8S_REQUIRE_REFERENCE();
    FluxModel model(tiny_files(), StorageSpec{WeightType::FP32}, at::Device(at::kCPU));
    const auto [noise, txt, y] = sample_inputs();
    const auto x0 = randn_like_seeded(noise, 8);
    const int64_t w = noise.size(3);
    auto keep = at::zeros({1, 1, noise.size(2), w});
    keep.narrow(3, 0, w / 2).fill_(1);
    SamplingInit init;
    init.latent = x0;
    init.keep = keep;
    set_img2img_steps(init, 4, 0.75f, false);  // t_enc = 3: all 4 steps, from ts[0] = 1
    const auto got = model.sample(noise, txt, y, 4, dev_guidance(), true, at::kFloat, {}, init);
    QCOMPARE((got.narrow(3, 0, w / 2) - x0.narrow(3, 0, w / 2)).abs().max().item<double>(), 0.0);
    QVERIFY((got.narrow(3, w / 2, w / 2) - x0.narrow(3, w / 2, w / 2)).abs().max().item<double>() > 0.1);
    const auto ts = flux_schedule(4, (noise.size(2) / 2) * (w / 2), true);
    const auto want = manual_loop(model, noise, x0, keep.expand_as(noise), txt, y, ts, 0);
    QVERIFY((got - want).abs().max().item<double>() <= 1e-5 * want.abs().max().item<double>());
  }

  // strength 1 (A1111 caps it at 0.999): t_enc = steps − 1, the run starts at t = 1, where
  // x = 1·noise + 0·x0: the image is the txt2img image of the same seed, pixel for pixel
  void fullStrengthImg2imgIsTxt2img() {
    FP8S_REQUIRE_REFERENCE();
    Engine engine(tiny_options());
    std::atomic<bool> cancel{false};
    auto r = tiny_request();
    const auto txt2img = engine.generate(r, nullptr, cancel);
    r.init_image = pattern(16, 16);
    r.denoising_strength = 1.0f;
    Steps steps;
    const auto img2img = engine.generate(r, &steps, cancel);
    QCOMPARE(steps.events.size(), std::size_t(5));
    QCOMPARE(img2img.images.at(0).image.pixels, txt2img.images.at(0).image.pixels);
    QVERIFY(QString::fromStdString(img2img.images[0].parameters).contains("Denoising strength: 1"));
    // a lower strength keeps some of the init image: another image
    r.denoising_strength = 0.4f;
    const auto partial = engine.generate(r, nullptr, cancel);
    QVERIFY(partial.images.at(0).image.pixels != txt2img.images.at(0).image.pixels);
  }

  // Headers are read once, at load (a Flux model's components load with its first request): the
  // requests after it (txt2img, with hires, img2img; the model's report) open no file header again
  void aFluxRequestAfterLoadReadsNoHeader() {
    FP8S_REQUIRE_REFERENCE();
    Engine engine(tiny_options());
    std::atomic<bool> cancel{false};
    auto r = tiny_request();
    r.steps = 2;
    engine.generate(r, nullptr, cancel);  // the components load when first used: that is the load
    const uint64_t before = SafetensorsFile::headers_read();
    engine.generate(r, nullptr, cancel);
    r.enable_hr = true;
    r.hr_scale = 2;
    engine.generate(r, nullptr, cancel);
    r.enable_hr = false;
    r.init_image = pattern(16, 16);
    r.denoising_strength = 0.5f;
    engine.generate(r, nullptr, cancel);
    (void)engine.info();
    QCOMPARE(SafetensorsFile::headers_read() - before, uint64_t(0));
    // the counter counts: opening one file reads one header
    { const SafetensorsFile f(tiny_options().checkpoint); }
    QCOMPARE(SafetensorsFile::headers_read() - before, uint64_t(1));
  }

  // a Flux image's infotext reads back into the request that made it (the gallery's and a dropped
  // PNG's restore): Forge's Distilled CFG Scale, the T5 length, the hires and storage fields
  void fluxInfotextRestoresTheRequest() {
    FP8S_REQUIRE_REFERENCE();
    Engine engine(tiny_options());
    std::atomic<bool> cancel{false};
    auto r = tiny_request();
    r.options["guidance"] = "4.5";
    r.steps = 2;
    r.enable_hr = true;
    r.hr_scale = 2;
    r.hr_denoising_strength = 0.6f;
    const auto out = engine.generate(r, nullptr, cancel).images.at(0);
    const auto back = parse_infotext(out.parameters);
    QCOMPARE(back.prompt, r.prompt);
    QCOMPARE(QString::fromStdString(back.options.at("guidance")), QString("4.5"));
    QCOMPARE(back.steps, 2);
    QCOMPARE(back.seed, int64_t(100));
    QCOMPARE(back.width, 16);
    QCOMPARE(QString::fromStdString(back.options.at("t5-max-length")), QString("32"));
    QVERIFY(!back.options.count("shift"));  // nothing of another family's
    QVERIFY(back.enable_hr);
    QCOMPARE(back.hr_scale, 2.0f);
    QCOMPARE(back.hr_denoising_strength, 0.6f);
    QCOMPARE(back.storage.weights, WeightType::FP32);
    QCOMPARE(back.sampler, Sampler::Euler);
  }

  // A1111's overlay: with a hard mask (blur 0) the pixels outside it are the init image's
  void inpaintingRestoresThePixelsOutsideTheMask() {
    FP8S_REQUIRE_REFERENCE();
    Engine engine(tiny_options());
    std::atomic<bool> cancel{false};
    auto r = tiny_request();
    r.init_image = pattern(16, 16);
    RgbImage mask;
    mask.width = mask.height = 16;
    mask.pixels.assign(16 * 16 * 3, 0);
    for (int yy = 0; yy < 16; ++yy) {
      for (int x = 0; x < 8; ++x) {
        for (int c = 0; c < 3; ++c) mask.pixels[(yy * 16 + x) * 3 + c] = 255;
      }
    }
    r.mask = mask;
    r.mask_blur = 0;
    r.denoising_strength = 0.9f;
    const auto out = engine.generate(r, nullptr, cancel).images.at(0);
    int changed_inside = 0;
    for (int yy = 0; yy < 16; ++yy) {
      for (int x = 0; x < 16; ++x) {
        for (int c = 0; c < 3; ++c) {
          const std::size_t i = (yy * 16 + x) * 3 + c;
          if (x >= 8) QCOMPARE(out.image.pixels[i], r.init_image->pixels[i]);
          else changed_inside += out.image.pixels[i] != r.init_image->pixels[i];
        }
      }
    }
    QVERIFY(changed_inside > 100);
    QVERIFY(QString::fromStdString(out.parameters).contains("Mask blur: 0"));
  }

  // hires at strength 0.5 with 3 steps: A1111's fixed-steps rule runs the last 3 steps of a
  // schedule of ⌊3 / 0.5⌋ = 6, at the hires size's token count (32² pixels: 8x8 tokens)
  void hiresRunsTheTailOfALongerSchedule() {
    FP8S_REQUIRE_REFERENCE();
    Engine engine(tiny_options());
    std::atomic<bool> cancel{false};
    auto r = tiny_request();
    r.enable_hr = true;
    r.hr_scale = 2;
    r.hr_steps = 3;
    r.hr_denoising_strength = 0.5f;
    Steps steps;
    const auto out = engine.generate(r, &steps, cancel).images.at(0);
    QCOMPARE(out.image.width, 32);
    QCOMPARE(out.image.height, 32);
    QCOMPARE(steps.events.size(), std::size_t(8));
    const auto first = flux_schedule(5, 4 * 4, true);
    const auto hires = flux_schedule(6, 8 * 8, true);
    for (int i = 0; i < 8; ++i) {
      QCOMPARE(steps.events[i].step, i + 1);
      QCOMPARE(steps.events[i].steps, 8);
      const double want = i < 5 ? first[i] : hires[3 + (i - 5)];
      QCOMPARE(double(steps.events[i].sigma), double(static_cast<float>(want)));
    }
    QVERIFY(QString::fromStdString(out.parameters).contains("Hires upscale: 2"));
    // a hires size that is no multiple of 16 is refused with one that is
    r.hr_scale = 1.5f;  // 24
    QVERIFY(refused(engine, r, "multiple of 16"));
  }

  // Streaming (the weight budget): with budgets that keep no block, one block, and all blocks but
  // one resident, in FP32 and FP8 storage, and with an online LoRA, every image equals the
  // resident model's bit for bit; a merge is refused while blocks stream
  void streamedEqualsResidentBitForBit() {
    FP8S_REQUIRE_REFERENCE();
    const SafetensorsFile f(tiny_options().checkpoint);
    // the blocks' Linear weights by hand, from the header (FP32 storage: 4 bytes a weight)
    uint64_t outside = 0, block0 = 0, last = 0, total = 0;
    int doubles = 0, singles = 0;
    for (const auto& t : f.tensors()) {
      if (t.shape.size() != 2 || t.name.size() < 7 || t.name.compare(t.name.size() - 7, 7, ".weight") != 0) continue;
      const uint64_t bytes = t.numel() * 4;
      total += bytes;
      const bool dbl = t.name.rfind("double_blocks.", 0) == 0, sgl = t.name.rfind("single_blocks.", 0) == 0;
      if (!dbl && !sgl) outside += bytes;
      if (t.name.rfind("double_blocks.0.", 0) == 0) block0 += bytes;
      if (t.name.find("blocks.") != std::string::npos) {
        const int index = std::stoi(t.name.substr(t.name.find("blocks.") + 7));
        (dbl ? doubles : singles) = std::max(dbl ? doubles : singles, index + 1);
      }
    }
    const std::string last_name = "single_blocks." + std::to_string(singles - 1) + ".";
    for (const auto& t : f.tensors()) {
      if (t.shape.size() == 2 && t.name.rfind(last_name, 0) == 0) last += t.numel() * 4;
    }
    const int blocks = doubles + singles;
    QVERIFY(blocks >= 3);
    std::atomic<bool> cancel{false};
    for (const WeightType storage : {WeightType::FP32, WeightType::FP8_E4M3}) {
      Engine engine(tiny_options());
      auto r = tiny_request();
      r.storage.weights = storage;
      r.storage.scale = Fp8Scale::Tensor;
      r.steps = 3;
      const auto resident = engine.generate(r, nullptr, cancel).images.at(0).image.pixels;
      QCOMPARE(engine.info().streamed_blocks, 0);
      // FP8 blocks stage in one byte a weight plus a 4-byte scale a layer: the budgets in FP32
      // bytes, a quarter of them and 1 KiB for the scales keep as many
      const uint64_t scale = storage == WeightType::FP32 ? 1 : 4;
      const std::pair<uint64_t, int> cases[] = {{0, blocks}, {(outside + block0) / scale + 1024, blocks - 1},
                                                {(total - last) / scale + 1024, 1}};
      for (const auto& [budget, streamed] : cases) {
        r.weight_budget = budget;
        Steps steps;
        const auto out = engine.generate(r, &steps, cancel);
        const auto info = engine.info();
        QCOMPARE(info.streamed_blocks, streamed);
        QVERIFY2(out.images.at(0).image.pixels == resident,
                 qPrintable(QString("%1, budget %2: the streamed image differs").arg(weight_type_name(storage)).arg(budget)));
        QVERIFY(out.streamed_bytes > 0);
      }
      // the host transport (a GPU's: blocks held in host memory, copied in when entered), run
      // here onto the CPU: the same image
      qputenv("FP8S_STREAM_TRANSPORT", "host");
      r.weight_budget = 0;
      QCOMPARE(engine.generate(r, nullptr, cancel).images.at(0).image.pixels, resident);
      QCOMPARE(engine.info().streamed_blocks, blocks);
      qunsetenv("FP8S_STREAM_TRANSPORT");
      // an online LoRA: terms stay resident beside the streamed weights; merge is refused
      r.weight_budget.reset();
      r.prompt += " <lora:lora-kohya:0.8>";
      r.lora_mode = LoraMode::Online;
      const auto lora_resident = engine.generate(r, nullptr, cancel).images.at(0).image.pixels;
      QVERIFY(lora_resident != resident);
      r.weight_budget = 0;
      QCOMPARE(engine.generate(r, nullptr, cancel).images.at(0).image.pixels, lora_resident);
      r.lora_mode = LoraMode::Merge;
      QVERIFY(refused(engine, r, "cannot apply while the transformer streams"));
    }
  }

  // The file under a streamed model changes (rewritten shorter, as a half-finished download or
  // copy would be): the next request fails cleanly naming the file, never wrong weights; the
  // engine stays usable (the error comes before any pixel)
  void aStreamedFileChangedAfterLoadFailsCleanly() {
    FP8S_REQUIRE_REFERENCE();
    QTemporaryDir dir;
    const std::string copy = (dir.path() + "/flux.safetensors").toStdString();
    QVERIFY(QFile::copy(QString::fromStdString(tiny_options().checkpoint), QString::fromStdString(copy)));
    auto options = tiny_options();
    options.checkpoint = copy;
    Engine engine(options);
    std::atomic<bool> cancel{false};
    auto r = tiny_request();
    r.steps = 2;
    r.weight_budget = 0;
    const auto first = engine.generate(r, nullptr, cancel);
    QVERIFY(first.streamed_bytes > 0);
    const SafetensorsFile open_before(copy);  // what a streamed model holds: its reads check the file first
    open_before.check_unchanged();
    QVERIFY(::truncate(copy.c_str(), static_cast<off_t>(QFileInfo(QString::fromStdString(copy)).size() - 4096)) == 0);
    QVERIFY_EXCEPTION_THROWN(open_before.check_unchanged(), InputError);
    try {
      open_before.check_unchanged();
    } catch (const InputError& e) {
      QVERIFY2(QString(e.what()).contains("changed on disk after the model was loaded"), e.what());
    }
    // under a budget the transformer loads again for each request (the phases take turns): the
    // header's check names the file as truncated; a read of a streamed block, as changed on disk
    for (int attempt = 0; attempt < 2; ++attempt) {  // and again, no hang
      try {
        engine.generate(r, nullptr, cancel);
        QFAIL("a truncated file was accepted");
      } catch (const InputError& e) {
        const QString m = e.what();
        QVERIFY2(m.startsWith(QString::fromStdString(copy)) && (m.contains("truncated") || m.contains("changed on disk")), e.what());
      }
    }
  }

  // A diffusers model folder (model_index.json; transformer/ in diffusers' names, written here from
  // the tiny BFL file; text_encoder/, text_encoder_2/, vae/ and both tokenizers beside) loads as it
  // is and gives the split files' image exactly
  void diffusersFolderGivesTheSplitFilesImage() {
    FP8S_REQUIRE_REFERENCE();
    QTemporaryDir dir;
    const QString root = dir.path() + "/FLUX.1-dev";
    for (const char* sub : {"transformer", "text_encoder", "text_encoder_2", "vae"}) QVERIFY(QDir().mkpath(root + "/" + sub));
    {
      const SafetensorsFile t(test::reference_path(kFlux + "tiny-flux-dev.safetensors"));
      const int64_t hidden = t.at("img_in.weight").shape[0];
      struct Out {
        const TensorRecord* rec;
        DiffusersPart part;
        std::vector<int64_t> shape;
      };
      std::vector<Out> outs;
      std::vector<TensorSpec> specs;
      for (const auto& r : t.tensors()) {
        for (auto& part : flux_diffusers_parts(r.name, r.shape.at(0), hidden)) {
          auto shape = r.shape;
          shape[0] = 0;
          for (const auto& [start, count] : part.rows) shape[0] += count;
          specs.push_back({part.name, r.dtype, shape});
          outs.push_back({&r, std::move(part), shape});
        }
      }
      // 8 fused q/k/v tensors (2 double blocks, image and text, weight and bias) in 3 each, 6 linear1 (3 single blocks) in 4
      QCOMPARE(specs.size(), t.tensors().size() + 8 * 2 + 6 * 3);
      SafetensorsWriter w((root + "/transformer/diffusion_pytorch_model.safetensors").toStdString(), specs, {});
      for (const auto& o : outs) {
        std::vector<uint8_t> bytes(o.rec->nbytes());
        t.read(*o.rec, bytes.data());
        const std::size_t row_bytes = bytes.size() / static_cast<std::size_t>(o.rec->shape[0]);
        for (const auto& [start, count] : o.part.rows) w.append(bytes.data() + start * row_bytes, count * row_bytes);
      }
      w.commit();
      // diffusers' config names the RoPE axes (the tiny file's own config has them as axes_dim)
      const auto own = QJsonDocument::fromJson(QByteArray::fromStdString(t.metadata().at("flux.config"))).object();
      QFile config(root + "/transformer/config.json");
      QVERIFY(config.open(QIODevice::WriteOnly));
      config.write(QJsonDocument(QJsonObject{{"_class_name", "FluxTransformer2DModel"}, {"axes_dims_rope", own["axes_dim"]},
                                             {"guidance_embeds", true}}).toJson());
    }
    QVERIFY(QFile::copy(QString::fromStdString(test::reference_path(kFlux + "tiny-clip-l.safetensors")), root + "/text_encoder/model.safetensors"));
    QVERIFY(QFile::copy(QString::fromStdString(test::reference_path(kFlux + "tiny-t5xxl.safetensors")), root + "/text_encoder_2/model.safetensors"));
    QVERIFY(QFile::copy(QString::fromStdString(test::reference_path(kFlux + "tiny-ae.safetensors")), root + "/vae/diffusion_pytorch_model.safetensors"));
    QVERIFY(QFile::link(QString::fromStdString(test::reference_path("clip")), root + "/tokenizer"));
    QVERIFY(QFile::link(QString::fromStdString(test::reference_path(kFlux + "t5_tokenizer")), root + "/tokenizer_2"));
    {
      QFile f(root + "/model_index.json");
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(R"({"_class_name": "FluxPipeline"})");
    }
    LoadOptions folder;
    folder.checkpoint = root.toStdString();
    folder.storage.weights = WeightType::FP32;
    folder.device = "cpu";
    Engine a(folder), b(tiny_options());
    const auto info = a.info();
    QVERIFY2(QString::fromStdString(info.architecture).contains("Flux"), info.architecture.c_str());
    std::atomic<bool> cancel{false};
    const auto r = tiny_request();
    QCOMPARE(a.generate(r, nullptr, cancel).images.at(0).image.pixels, b.generate(r, nullptr, cancel).images.at(0).image.pixels);
  }

  // <lora:NAME:W> in the prompt finds NAME.safetensors in the LoRA folder; the infotext names it;
  // merged and online give the same image within FP32 rounding; an SD LoRA is refused by name
  void loraTagsWorkOnFlux() {
    FP8S_REQUIRE_REFERENCE();
    Engine engine(tiny_options());
    std::atomic<bool> cancel{false};
    auto r = tiny_request();
    const auto plain = engine.generate(r, nullptr, cancel).images.at(0);
    r.prompt += " <lora:lora-kohya:0.8>";
    r.lora_mode = LoraMode::Merge;
    const auto merged = engine.generate(r, nullptr, cancel).images.at(0);
    QVERIFY(merged.image.pixels != plain.image.pixels);
    QVERIFY2(QString::fromStdString(merged.parameters).contains("LoRA: \"lora-kohya: 0.8\""), merged.parameters.c_str());
    r.lora_mode = LoraMode::Online;
    const auto online = engine.generate(r, nullptr, cancel).images.at(0);
    int worst = 0;
    for (std::size_t i = 0; i < online.image.pixels.size(); ++i) worst = std::max(worst, std::abs(online.image.pixels[i] - merged.image.pixels[i]));
    QVERIFY2(worst <= 1, qPrintable(QString("merged and online differ by %1 levels").arg(worst)));
    // the set removed again: the plain image comes back exactly (merged layers read again from the file)
    r.lora_mode = LoraMode::Merge;
    engine.generate(r, nullptr, cancel);
    r.prompt = tiny_request().prompt;
    QCOMPARE(engine.generate(r, nullptr, cancel).images.at(0).image.pixels, plain.image.pixels);
    r.loras = {{test::reference_path("sd1/lora-tiny-sd1.safetensors"), 1, 1}};
    QVERIFY(refused(engine, r, "does not fit the loaded Flux model"));
  }

  // the denoiser probe compare's retention uses, on Flux: a LoRA changes the transformer's output,
  // merged and online alike (FP32: the same sum in another order), and leaves no trace once removed
  void denoiserProbeSeesFluxLoras() {
    FP8S_REQUIRE_REFERENCE();
    Engine engine(tiny_options());
    const StorageSpec fp32{WeightType::FP32};
    const std::vector<LoraRequest> lora{{test::reference_path(kFlux + "lora-peft.safetensors"), 1, 1}};
    const auto base = engine.unet_probe(fp32, ComputeType::FP32, 3, 8);
    const auto merged = engine.unet_probe(fp32, ComputeType::FP32, 3, 8, lora, LoraMode::Merge);
    const auto online = engine.unet_probe(fp32, ComputeType::FP32, 3, 8, lora, LoraMode::Online);
    QCOMPARE(base.size(), std::size_t(16 * 64));  // 4x4 tokens of 64 values
    double delta = 0, gap = 0, scale = 0;
    for (std::size_t i = 0; i < base.size(); ++i) {
      delta = std::max(delta, double(std::fabs(merged[i] - base[i])));
      gap = std::max(gap, double(std::fabs(merged[i] - online[i])));
      scale = std::max(scale, double(std::fabs(base[i])));
    }
    QVERIFY2(delta > 1e-3 * scale, qPrintable(QString("the LoRA moved the output by %1").arg(delta)));
    QVERIFY2(gap <= 1e-5 * scale, qPrintable(QString("merged and online differ by %1").arg(gap)));
    QCOMPARE(engine.unet_probe(fp32, ComputeType::FP32, 3, 8), base);
  }

  // ComfyUI's low-VRAM rule: T5 leaves the GPU only when everything does not fit together
  void t5PlacementAndCompute() {
    const FluxComponentBytes fp8{11'900'000'000ull, 4'900'000'000ull, 246'000'000ull, 335'000'000ull};
    const FluxComponentBytes fp16_t5{11'900'000'000ull, 9'500'000'000ull, 246'000'000ull, 335'000'000ull};
    const at::Device gpu(at::kCUDA, 0), cpu(at::kCPU);
    const uint64_t gb24 = 24'000'000'000ull, working = 3'000'000'000ull;
    QVERIFY(!flux_t5_on_cpu(gpu, fp8, gb24, working));     // 20.4 GB fits in 24
    QVERIFY(flux_t5_on_cpu(gpu, fp16_t5, gb24, working));  // 25.0 GB does not
    QVERIFY(!flux_t5_on_cpu(cpu, fp16_t5, gb24, working));
    QVERIFY(!flux_t5_on_cpu(gpu, fp16_t5, 0, working));    // unknown VRAM: no rule
    QCOMPARE(flux_t5_compute(at::kHalf, gpu, 90), at::kBFloat16);
    QCOMPARE(flux_t5_compute(at::kHalf, gpu, 75), at::kFloat);
    QCOMPARE(flux_t5_compute(at::kHalf, cpu, 0), at::kBFloat16);
    QCOMPARE(flux_t5_compute(at::kFloat, gpu, 90), at::kFloat);
  }
};

QTEST_GUILESS_MAIN(TestFluxStudio)
#include "test_flux_studio.moc"

// img2img, inpainting and hires fix (issue 21) against A1111's formulas and hand-derived numbers:
// the truncated schedule and the noised start latent, the overlay outside a hard mask, the
// 9-channel inpainting UNet's inputs, the hires size and infotext, and the image operations.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <cstring>

#include "compare/compare.h"
#include "core/error.h"
#include "io/image_metrics.h"
#include "io/image_ops.h"
#include "demo/demo_model.h"
#include "demo/scenes.h"
#include "models/synthetic.h"
#include "families/sd/conditioning.h"
#include "families/sd/embeddings.h"
#include "pipeline/engine.h"
#include "families/sd/sd_img2img.h"
#include "families/sd/model.h"
#include "sampling/schedule.h"
#include "text/clip_tokenizer.h"
#include "sampling/samplers.h"
#include "text/prompt_parser.h"
#include "models/nn.h"
#include "support.h"

using namespace fp8s;

namespace {

RgbImage pattern(int w, int h, int seed) {
  RgbImage im;
  im.width = w;
  im.height = h;
  im.pixels.resize(static_cast<std::size_t>(w) * h * 3);
  for (std::size_t i = 0; i < im.pixels.size(); ++i) im.pixels[i] = static_cast<uint8_t>((i * 37 + seed * 11 + (i / 97) * 5) % 256);
  return im;
}

// A mask of w x h: white (repaint) in x < split, black elsewhere.
RgbImage left_mask(int w, int h, int split) {
  RgbImage m;
  m.width = w;
  m.height = h;
  m.pixels.assign(static_cast<std::size_t>(w) * h * 3, 0);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < split; ++x) {
      for (int c = 0; c < 3; ++c) m.pixels[(static_cast<std::size_t>(y) * w + x) * 3 + c] = 255;
    }
  }
  return m;
}

double max_abs(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

}  // namespace

class TestImg2Img : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;
  QString m_model;  // tiny-sd1, random weights, FP32
  QString m_vocab;

  // A copy of m_model with a 9-channel conv_in: [W | mask column | latent columns] (each [out,k,3,3]).
  QString inpainting_variant(const QString& name, bool mask_is_channel0, bool latent_is_w) {
    SafetensorsFile src(m_model.toStdString());
    auto config = *preset_by_name("tiny-sd1");
    config.unet.in_channels = 9;
    auto meta = src.metadata();
    meta["ldm.config"] = to_ldm_config_json(config);
    std::vector<TensorSpec> specs;
    for (const auto& t : src.tensors()) {
      auto shape = t.shape;
      if (t.name == "model.diffusion_model.input_blocks.0.0.weight") shape[1] = 9;
      specs.push_back({t.name, t.dtype, shape});
    }
    const QString path = m_dir.path() + "/" + name;
    SafetensorsWriter w(path.toStdString(), specs, meta);
    for (const auto& t : src.tensors()) {
      std::vector<uint8_t> raw(t.nbytes());
      src.read(t, raw.data());
      if (t.name == "model.diffusion_model.input_blocks.0.0.weight") {
        std::vector<float> v(t.numel());
        std::memcpy(v.data(), raw.data(), raw.size());
        const int64_t out = t.shape[0], k = 9;  // 3x3
        std::vector<float> w9(static_cast<std::size_t>(out * 9 * k), 0.0f);
        for (int64_t o = 0; o < out; ++o) {
          for (int64_t c = 0; c < 4; ++c) {
            for (int64_t j = 0; j < k; ++j) {
              const float wv = v[static_cast<std::size_t>((o * 4 + c) * k + j)];
              w9[static_cast<std::size_t>((o * 9 + c) * k + j)] = wv;
              if (latent_is_w) w9[static_cast<std::size_t>((o * 9 + 5 + c) * k + j)] = wv;
              if (mask_is_channel0 && c == 0) w9[static_cast<std::size_t>((o * 9 + 4) * k + j)] = wv;
            }
          }
        }
        w.append(w9.data(), w9.size() * 4);
      } else {
        w.append(raw.data(), raw.size());
      }
    }
    w.commit();
    return path;
  }

  Engine engine() {
    LoadOptions o;
    o.checkpoint = m_model.toStdString();
    o.vocab = m_vocab.toStdString();
    return Engine(o);
  }

  GenerationRequest small(int steps) const {
    GenerationRequest r;
    r.prompt = "a red circle";
    r.steps = steps;
    r.sampler = Sampler::Euler;
    r.schedule = Schedule::Normal;
    r.seed = 7;
    r.width = r.height = 64;
    r.storage = {WeightType::FP32, Fp8Scale::None, false};
    r.compute = ComputeType::FP32;
    return r;
  }

 private Q_SLOTS:
  void initTestCase() {
    SyntheticOptions s;
    s.config = *preset_by_name("tiny-sd1");
    s.float_dtype = Dtype::F32;
    s.seed = 3;
    m_model = m_dir.path() + "/tiny.safetensors";
    s.out = m_model.toStdString();
    make_synthetic(s);
    // OpenAI's vocabulary where ../shared has it, else the demo model's (these runs need one, not that one)
    m_vocab = test::have_reference() ? test::reference_dir() + "/clip" : QString(FP8S_SOURCE_DIR) + "/resources/demo/tokenizer";
  }

  // Inpainting keeps the init latent outside the mask at every step, not only in the final overlay
  // (A1111's CFGDenoiser blends it into each prediction): Euler's denoised and DDIM's predicted x0
  // equal the init latent there at each step, and differ from it inside. Starting from noise at
  // full strength (DDIM's img2img start included), the kept half is exact however the UNet predicts.
  void latentMaskKeepsTheInitLatentAtEveryStep() {
    Model model(m_model.toStdString(), StorageSpec{WeightType::FP32, Fp8Scale::None, false});
    const auto ctx = at::randn({1, 77, model.config().unet.context_dim});
    for (const auto sampler : {Sampler::Euler, Sampler::Ddim}) {
      SamplingParams p{sampler, Schedule::Normal, 10, 5.0f, 5, {}};
      p.init.latent = at::randn({1, 4, 8, 8});
      p.init.keep = at::zeros({1, 4, 8, 8});
      p.init.keep.slice(3, 4, 8).fill_(1);  // keep the right half, repaint the left
      set_img2img_steps(p.init, 10, 0.6f, false);
      const auto keep = p.init.keep.to(at::kBool);
      int steps = 0;
      double inside = 0;
      model.sample(at::randn({1, 4, 8, 8}), ctx, ctx, p, ComputeType::FP32,
                   [&](int, int, float, const at::Tensor&, const at::Tensor& denoised) {
                     ++steps;
                     const auto kept = denoised.masked_select(keep), init = p.init.latent.masked_select(keep);
                     QVERIFY2(at::allclose(kept, init, 1e-4, 1e-4), sampler_name(sampler));
                     inside = std::max(inside, max_abs(denoised.masked_select(~keep), p.init.latent.masked_select(~keep)));
                   });
      QVERIFY2(steps >= 5, sampler_name(sampler));
      QVERIFY2(inside > 0.1, sampler_name(sampler));  // the repainted half is the UNet's
    }
  }

  // A1111's masked content and mask mode, on the latent img2img starts from: `latent noise` puts
  // the seed's noise and `latent nothing` zeros inside the mask (the encoded image outside);
  // `fill` paints the masked pixels before encoding; an inverted mask repaints the other side.
  void maskedContentAndInvertedMask() {
    Model model(m_model.toStdString(), StorageSpec{WeightType::FP32, Fp8Scale::None, false});
    auto r = small(4);
    r.init_image = pattern(64, 64, 2);
    r.mask = left_mask(64, 64, 32);
    r.mask_blur = 0;
    auto latent_for = [&](InpaintFill fill, bool invert) {
      r.inpainting_fill = fill;
      r.invert_mask = invert;
      const auto job = prepare_image_job(r, 64, 64);
      at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(9);
      return std::pair{prepare_init(model, job, r, 1, gen), job};
    };
    const auto [original, job_o] = latent_for(InpaintFill::Original, false);
    const auto left = original.keep.slice(3, 0, 4), right = original.keep.slice(3, 4, 8);
    QVERIFY(at::all(left == 0).item<bool>() && at::all(right == 1).item<bool>());  // left repainted
    const auto [nothing, job_n] = latent_for(InpaintFill::LatentNothing, false);
    QVERIFY(at::all(nothing.latent.slice(3, 0, 4) == 0).item<bool>());
    QVERIFY(at::equal(nothing.latent.slice(3, 4, 8), original.latent.slice(3, 4, 8)));
    const auto [noise, job_z] = latent_for(InpaintFill::LatentNoise, false);
    QVERIFY(at::equal(noise.latent.slice(3, 4, 8), original.latent.slice(3, 4, 8)));
    const double noise_std = noise.latent.slice(3, 0, 4).std().item<double>();
    QVERIFY2(noise_std > 0.8 && noise_std < 1.2, qPrintable(QString::number(noise_std)));  // unit normal
    const auto [filled, job_f] = latent_for(InpaintFill::Fill, false);
    QVERIFY(job_f.source.pixels != job_o.source.pixels);  // the masked pixels were painted over
    for (int y = 0; y < 64; ++y) {
      for (int x = 32; x < 64; ++x) {  // outside the mask the pixels are the init image's
        const std::size_t i = (static_cast<std::size_t>(y) * 64 + x) * 3;
        if (job_f.source.pixels[i] != job_o.source.pixels[i]) QFAIL("fill changed a pixel outside the mask");
      }
    }
    const auto [inverted, job_i] = latent_for(InpaintFill::Original, true);
    QVERIFY(at::all(inverted.keep.slice(3, 0, 4) == 1).item<bool>() && at::all(inverted.keep.slice(3, 4, 8) == 0).item<bool>());
  }

  // DDIM img2img (ldm's DDIMSampler.stochastic_encode + decode): the run is the last t_enc + 1 of
  // the uniform timesteps, starting from sqrt(a) x0 + sqrt(1 - a) noise at the first of them.
  void ddimImg2ImgStartsAtTheTruncatedTimestep() {
    Model model(m_model.toStdString(), StorageSpec{WeightType::FP32, Fp8Scale::None, false});
    const auto ctx = at::randn({1, 77, model.config().unet.context_dim});
    for (auto [steps, strength] : {std::pair{10, 0.5f}, std::pair{20, 0.75f}, std::pair{8, 1.0f}}) {
      SamplingParams p{Sampler::Ddim, Schedule::Normal, steps, 1.0f, 5, {}};
      p.init.latent = at::randn({1, 4, 8, 8});
      set_img2img_steps(p.init, steps, strength, false);
      const auto ts = ddim_timesteps(steps);
      const int t_enc = static_cast<int>(std::min(strength, 0.999f) * steps);
      int seen = 0;
      float first_sigma = -1;
      model.sample(at::randn({1, 4, 8, 8}), ctx, ctx, p, ComputeType::FP32,
                   [&](int i, int, float sigma, const at::Tensor&, const at::Tensor&) {
                     if (i == 0) first_sigma = sigma;
                     ++seen;
                   });
      QCOMPARE(seen, t_enc + 1);
      const double a = model.schedule().alphas_cumprod()[ts[ts.size() - static_cast<std::size_t>(t_enc) - 1]].item<double>();
      QVERIFY2(std::abs(first_sigma - std::sqrt((1 - a) / a)) < 1e-4 * std::sqrt((1 - a) / a),
               qPrintable(QString("%1 steps at %2: first sigma %3").arg(steps).arg(strength).arg(first_sigma)));
    }
  }

  // A batch of img2img / inpainting copies encodes its init image (and a 9-channel model's masked
  // image) once: the VAE sees one image, the generator draws each copy's posterior noise, and the
  // latents equal those of encoding the stacked copies.
  void initImageIsEncodedOncePerBatch() {
    Model model(m_model.toStdString(), StorageSpec{WeightType::FP32, Fp8Scale::None, false});
    auto r = small(4);
    r.init_image = pattern(64, 64, 1);
    const auto job = prepare_image_job(r, 64, 64);
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(5);
    const int64_t before = model.vae_encoded_images();
    const auto init = prepare_init(model, job, r, 3, gen);
    QCOMPARE(model.vae_encoded_images() - before, int64_t(1));
    QCOMPARE(init.latent.size(0), int64_t(3));
    QVERIFY(!at::allclose(init.latent[0], init.latent[1]));  // each copy its own posterior sample
    at::Generator gen2 = at::make_generator<at::CPUGeneratorImpl>(5);
    const auto stacked = encode_latent(model, image_tensor(job.source).repeat({3, 1, 1, 1}), r.compute, gen2);
    QVERIFY(at::allclose(init.latent, stacked, 1e-5, 1e-5));
  }

  // A1111 (sd_samplers_common.setup_img2img_steps, sample_img2img): t_enc = ⌊min(S, 0.999)·steps⌋,
  // the run is sigmas[steps − t_enc − 1:], and it starts at init + noise·sigma_sched[0]. The start
  // is recovered from the first Euler step: x1 = x0·s1/s0 + D·(1 − s1/s0).
  void truncatedScheduleAndStartLatent() {
    Model model(m_model.toStdString(), StorageSpec{WeightType::FP32, Fp8Scale::None, false});
    const auto ctx = at::randn({1, 77, model.config().unet.context_dim});
    for (auto [steps, strength] : {std::pair{20, 0.75f}, std::pair{10, 0.3f}, std::pair{8, 1.0f}, std::pair{5, 0.0f}, std::pair{30, 0.5f}}) {
      SamplingParams p{Sampler::Euler, Schedule::Karras, steps, 1.0f, 5, {}};
      p.init.latent = at::randn({1, 4, 8, 8});
      set_img2img_steps(p.init, steps, strength, false);
      const int t_enc = static_cast<int>(std::min(strength, 0.999f) * steps);
      QCOMPARE(p.init.t_enc, t_enc);
      const auto sigmas = model.schedule().get_sigmas(Schedule::Karras, steps);
      const auto noise = at::randn({1, 4, 8, 8});
      std::vector<float> seen;
      at::Tensor x1, d0;
      model.sample(noise, ctx, ctx, p, ComputeType::FP32, [&](int i, int, float sigma, const at::Tensor& x, const at::Tensor& d) {
        seen.push_back(sigma);
        if (i == 0) x1 = x.clone(), d0 = d.clone();
      });
      QCOMPARE(static_cast<int>(seen.size()), t_enc + 1);
      for (int i = 0; i <= t_enc; ++i) QCOMPARE(seen[i], sigmas[steps - t_enc - 1 + i].item<float>());
      const double s0 = sigmas[steps - t_enc - 1].item<double>(), s1 = sigmas[steps - t_enc].item<double>();
      if (s1 > 0) {
        const auto x0 = (x1 - d0 * (1 - s1 / s0)) * (s0 / s1);
        const auto want = p.init.latent + noise * s0;
        QVERIFY2(max_abs(x0, want) < 1e-3 * (1 + want.abs().max().item<double>()), qPrintable(QString("steps %1 strength %2").arg(steps).arg(strength)));
      }
    }
    // the hires pass (fixed steps): exactly `steps` of a schedule of ⌊steps / min(S, 0.999)⌋
    SamplingInit h;
    set_img2img_steps(h, 10, 0.7f, true);
    QCOMPARE(h.schedule_steps, 14);
    QCOMPARE(h.t_enc, 9);
  }

  // A 9-channel UNet's input is latent ++ mask ++ masked-image latent (ldm's hybrid conditioning):
  // with conv_in's latent columns repeated for the masked-image latent, unet9(x, m, z) = unet4(x + z);
  // with the mask column equal to the first latent column, unet9(x, m, z) = unet4(x + [m, 0, 0, 0]).
  void inpaintingUnetTakesMaskThenMaskedLatent() {
    const StorageSpec fp32{WeightType::FP32, Fp8Scale::None, false};
    Model base(m_model.toStdString(), fp32);
    Model latent_w(inpainting_variant("inp-latent.safetensors", false, true).toStdString(), fp32);
    Model mask_w(inpainting_variant("inp-mask.safetensors", true, false).toStdString(), fp32);
    QVERIFY(latent_w.is_inpainting() && !base.is_inpainting());
    QCOMPARE(latent_w.detection().variant, std::string("inpainting"));
    const auto x = at::randn({1, 4, 8, 8}), z = at::randn({1, 4, 8, 8});
    const auto m = (at::rand({1, 1, 8, 8}) > 0.5).to(at::kFloat);
    const auto ctx = at::randn({1, 77, base.config().unet.context_dim});
    const auto t = at::full({1}, 400.0f);
    const auto ref_z = base.unet(x + z, t, ctx, {}, ComputeType::FP32);
    const auto got_z = latent_w.unet(at::cat({x, m, z}, 1), t, ctx, {}, ComputeType::FP32);
    QVERIFY(max_abs(got_z, ref_z) < 1e-4);
    const auto ref_m = base.unet(x + at::cat({m, at::zeros({1, 3, 8, 8})}, 1), t, ctx, {}, ComputeType::FP32);
    const auto got_m = mask_w.unet(at::cat({x, m, z}, 1), t, ctx, {}, ComputeType::FP32);
    QVERIFY(max_abs(got_m, ref_m) < 1e-4);
    QVERIFY(max_abs(got_m, base.unet(x, t, ctx, {}, ComputeType::FP32)) > 1e-3);  // the mask does reach it
    // sampling passes image_cond unscaled beside c_in·x: the first Euler step's prediction is
    // x0 − s0·eps4(x0·c_in + z) (CFG 1)
    SamplingParams p{Sampler::Euler, Schedule::Normal, 4, 1.0f, 1, {}};
    p.init.image_cond = at::cat({m, z}, 1);
    const auto noise = at::randn({1, 4, 8, 8});
    at::Tensor d0;
    latent_w.sample(noise, ctx, ctx, p, ComputeType::FP32, [&](int i, int, float, const at::Tensor&, const at::Tensor& d) {
      if (i == 0) d0 = d.clone();
    });
    const auto s0 = base.schedule().get_sigmas(Schedule::Normal, 4)[0];
    const auto x0 = noise * s0;
    const auto c_in = 1 / at::sqrt(s0 * s0 + 1);
    const auto want = x0 - s0 * base.unet(x0 * c_in + z, base.schedule().sigma_to_t(s0).reshape({1}), ctx, {}, ComputeType::FP32);
    QVERIFY2(max_abs(d0, want) < 1e-3, qPrintable(QString::number(max_abs(d0, want))));
  }

  // A1111's overlay: outside a hard mask (blur 0) the output is the init image, pixel for pixel,
  // also when only the masked region is processed ("only masked").
  void outsideAHardMaskTheInitImageStays() {
    auto e = engine();
    std::atomic<bool> never{false};
    for (bool full_res : {false, true}) {
      auto r = small(3);
      r.init_image = pattern(64, 64, 1);
      r.mask = left_mask(64, 64, 24);
      r.mask_blur = 0;
      r.inpaint_full_res = full_res;
      r.inpaint_full_res_padding = 4;
      const auto result = e.generate(r, nullptr, never);
      const auto& out = result.images.at(0).image;
      QCOMPARE(out.width, 64);
      int repainted = 0;
      for (int y = 0; y < 64; ++y) {
        for (int x = 0; x < 64; ++x) {
          for (int c = 0; c < 3; ++c) {
            const std::size_t i = (static_cast<std::size_t>(y) * 64 + x) * 3 + c;
            if (x >= 24) {
              QVERIFY2(out.pixels[i] == r.init_image->pixels[i], qPrintable(QString("pixel %1,%2 full_res %3").arg(x).arg(y).arg(full_res)));
            } else {
              repainted += out.pixels[i] != r.init_image->pixels[i];
            }
          }
        }
      }
      QVERIFY(repainted > 1000);  // the masked part was redrawn
      QVERIFY(QString::fromStdString(result.images[0].parameters).contains("Mask blur: 0"));
    }
  }

  // Strength 0 runs one step at the lowest sigma from the encoded image: the output is the VAE's
  // round trip of the init image (the same posterior sample: the seed's generator after the noise),
  // up to that one step. On the shipped demo model, whose VAE is trained.
  void strengthZeroIsTheVaeRoundTrip() {
    std::string demo;
    try {
      demo = demo::find_demo_model();
    } catch (const InputError& e) {
      QSKIP(e.what());
    }
    LoadOptions o;
    o.checkpoint = demo;
    Engine e(o);
    std::atomic<bool> never{false};
    auto r = small(20);
    r.storage = {WeightType::FP16, Fp8Scale::None, false};
    r.init_image = demo::render(demo::all_single_scenes().front());
    r.denoising_strength = 0.0f;
    const auto out = e.generate(r, nullptr, never);
    QCOMPARE(out.timing.step_ms.size(), std::size_t(1));
    Model model(demo, r.storage);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
    at::randn({1, 4, 8, 8}, gen);  // the initial noise comes first
    const auto latent = encode_latent(model, image_tensor(*r.init_image), ComputeType::FP32, gen);
    const auto round_trip = to_images(model.vae_decode(latent, ComputeType::FP32)).at(0);
    const double db = psnr(out.images[0].image, round_trip);
    const double db_init = psnr(out.images[0].image, *r.init_image);
    qInfo("strength 0 on the demo model: PSNR %.1f dB against the VAE round trip, %.1f dB against the init image", db, db_init);
    QVERIFY2(db > 30, qPrintable(QString::number(db)));
    QVERIFY(QString::fromStdString(out.images[0].parameters).contains("Denoising strength: 0"));
  }

  // Hires fix: the second pass's size, both passes' steps, and A1111's infotext fields (restored).
  void hiresSizeStepsAndInfotext() {
    auto e = engine();
    std::atomic<bool> never{false};
    auto r = small(4);
    r.enable_hr = true;
    r.hr_scale = 2.0f;
    r.hr_steps = 3;
    const auto out = e.generate(r, nullptr, never);
    QCOMPARE(out.images[0].image.width, 128);
    QCOMPARE(out.images[0].image.height, 128);
    QCOMPARE(out.timing.step_ms.size(), std::size_t(4 + 3));
    const auto& text = out.images[0].parameters;
    for (const char* field : {"Size: 64x64", "Denoising strength: 0.7", "Hires upscale: 2", "Hires steps: 3", "Hires upscaler: Latent"}) {
      QVERIFY2(text.find(field) != std::string::npos, field);
    }
    const auto back = parse_infotext(text);
    QVERIFY(back.enable_hr);
    QCOMPARE(back.hr_scale, 2.0f);
    QCOMPARE(back.hr_steps, 3);
    QCOMPARE(back.hr_upscaler, HrUpscaler::Latent);
    QVERIFY(std::fabs(back.hr_denoising_strength - 0.7f) < 1e-6);
    r.hr_width = 96;
    r.hr_height = 80;
    r.hr_upscaler = HrUpscaler::Lanczos;
    const auto sized = e.generate(r, nullptr, never);
    QCOMPARE(sized.images[0].image.width, 96);
    QCOMPARE(sized.images[0].image.height, 80);
    QVERIFY(sized.images[0].parameters.find("Hires resize: 96x80") != std::string::npos);
    QCOMPARE(parse_infotext(sized.images[0].parameters).hr_upscaler, HrUpscaler::Lanczos);
  }

  // A textual inversion whose vectors are the token embeddings of "red circle" makes "a NAME"
  // condition exactly as "a red circle": its vectors reach the text encoder at the positions of
  // the tokens they stand for. Pickled and wrong-width files are refused.
  void embeddingVectorsTakeTheirTokensPlaces() {
    const auto tok = ClipTokenizer::find(m_vocab.toStdString(), "");
    const StorageSpec fp32{WeightType::FP32, Fp8Scale::None, false};
    Model model(m_model.toStdString(), fp32);
    SafetensorsFile file(m_model.toStdString());
    const auto table = read_tensor(file, file.at("cond_stage_model.transformer.text_model.embeddings.token_embedding.weight"));
    const auto ids = tok.encode("red circle");
    QCOMPARE(ids.size(), std::size_t(2));
    const auto vectors = at::stack({table[ids[0]], table[ids[1]]}).contiguous();
    const QString folder = m_dir.path() + "/embeddings";
    QDir().mkpath(folder);
    {
      SafetensorsWriter w((folder + "/redcircle.safetensors").toStdString(), {{"emb_params", Dtype::F32, {2, vectors.size(1)}}}, {});
      w.append(vectors.data_ptr<float>(), static_cast<std::size_t>(vectors.numel()) * 4);
      w.commit();
    }
    EmbeddingLibrary library(folder.toStdString());
    const std::vector<int> widths{model.config().text_encoders[0].width};
    const auto used = library.used_by({"a redcircle"}, widths);
    QCOMPARE(used.size(), std::size_t(1));
    QCOMPARE(used[0]->vectors(), 2);
    // the tokenizer puts its two vectors after BOS + "a", as token id 0
    const auto chunks = tokenize_prompt(tok, "a redcircle", {{tok.encode("redcircle"), 2}});
    QCOMPARE(chunks.fixes.at(0).size(), std::size_t(1));
    QCOMPARE(chunks.fixes[0][0].position, 1 + static_cast<int>(tok.encode("a").size()));
    QCOMPARE(chunks.ids[0][2], 0);
    QCOMPARE(chunks.ids[0][3], 0);
    QCOMPARE(chunks.token_count, 3);  // they count toward the 75
    auto r = small(2);
    r.compute = ComputeType::FP32;
    const auto with = encode_conditioning(model, tok, "a redcircle", "", r, 64, 64, used);
    const auto plain = encode_conditioning(model, tok, "a red circle", "", r, 64, 64);
    QVERIFY2(max_abs(with.cond, plain.cond) < 1e-5, qPrintable(QString::number(max_abs(with.cond, plain.cond))));
    QVERIFY(max_abs(with.cond, encode_conditioning(model, tok, "a blue square", "", r, 64, 64).cond) > 1e-3);
    QVERIFY(library.used_by({"a red circle"}, widths).empty());  // only the name as a word
    // refused: another model's width, a pickle
    {
      std::vector<float> wide(2 * 768, 0.1f);
      SafetensorsWriter w((folder + "/wide.safetensors").toStdString(), {{"emb_params", Dtype::F32, {2, 768}}}, {});
      w.append(wide.data(), wide.size() * 4);
      w.commit();
    }
    try {
      library.used_by({"wide"}, widths);
      QFAIL("an embedding of another width was accepted");
    } catch (const InputError& e) {
      QVERIFY2(QString(e.what()).contains("width 768"), e.what());
    }
    test::write_bytes((folder + "/pickled.pt").toStdString(), "PK\x03\x04");
    QVERIFY_THROWS_EXCEPTION(InputError, library.used_by({"a pickled cat"}, widths));
  }

  // SDXL too (its size conditioning and pooled vector through both passes), and compare in
  // inpainting mode: each storage mode keeps the init image outside a hard mask.
  void sdxlAndCompareInEveryMode() {
    SyntheticOptions s;
    s.config = *preset_by_name("tiny-sdxl");
    s.seed = 4;
    const QString sdxl = m_dir.path() + "/tiny-sdxl.safetensors";
    s.out = sdxl.toStdString();
    make_synthetic(s);
    LoadOptions o;
    o.checkpoint = sdxl.toStdString();
    o.vocab = m_vocab.toStdString();
    Engine e(o);
    std::atomic<bool> never{false};
    auto r = small(3);
    r.init_image = pattern(64, 64, 5);
    r.denoising_strength = 0.6f;
    QCOMPARE(e.generate(r, nullptr, never).images.at(0).image.width, 64);
    r.init_image.reset();
    r.enable_hr = true;
    r.hr_scale = 1.5f;
    QCOMPARE(e.generate(r, nullptr, never).images.at(0).image.width, 96);
    auto engine4 = engine();
    CompareOptions c;
    c.request = small(3);
    c.request.init_image = pattern(64, 64, 6);
    c.request.mask = left_mask(64, 64, 20);
    c.request.mask_blur = 0;
    c.modes = parse_modes("fp16,fp8-e4m3", Fp8Scale::Tensor);
    c.unet_error = false;
    const auto report = measure_compare(engine4, c);
    QCOMPARE(report.modes.size(), std::size_t(2));
    for (const auto& m : report.modes) {
      const auto& out = m.result.images.at(0).image;
      for (int y = 0; y < 64; ++y) {
        for (int x = 20; x < 64; ++x) {
          const std::size_t i = (static_cast<std::size_t>(y) * 64 + x) * 3;
          QCOMPARE(out.pixels[i], c.request.init_image->pixels[i]);
        }
      }
    }
    QVERIFY(report.modes[1].result.weight_bytes < report.modes[0].result.weight_bytes);
  }

  void badImageInputsAreRefusedBeforeWork() {
    auto r = small(4);
    r.mask = left_mask(64, 64, 10);
    QVERIFY_THROWS_EXCEPTION(InputError, validate_request(r, 512));  // a mask without an init image
    r.init_image = pattern(64, 48, 0);
    try {
      validate_request(r, 512);
      QFAIL("a mask of another size was accepted");
    } catch (const InputError& e) {
      QVERIFY2(QString(e.what()).contains("same size"), e.what());
    }
    r.mask.reset();
    r.denoising_strength = 1.5f;
    QVERIFY_THROWS_EXCEPTION(InputError, validate_request(r, 512));
    r.denoising_strength = 0.5f;
    r.enable_hr = true;
    QVERIFY_THROWS_EXCEPTION(InputError, validate_request(r, 512));  // hires is txt2img
    auto h = small(4);
    h.enable_hr = true;
    h.hr_scale = 9;
    QVERIFY_THROWS_EXCEPTION(InputError, validate_request(h, 512));
  }

  // A low hires denoising strength stretches the hires schedule (N / strength steps): longer than
  // the model's 1000 timesteps is refused up front for every sampler (DDIM's step would be 0 and
  // run away), and the longest schedule that fits is accepted.
  void hiresScheduleLongerThanTheTimestepsIsRefused() {
    for (const auto sampler : {Sampler::Euler, Sampler::EulerAncestral, Sampler::Heun, Sampler::DpmPP2M, Sampler::Ddim, Sampler::Lcm}) {
      auto h = small(4);
      h.sampler = sampler;
      h.enable_hr = true;
      h.hr_scale = 2;
      h.hr_steps = 20;
      h.hr_denoising_strength = 0.01f;  // 2000 steps
      try {
        validate_request(h, 512);
        QFAIL(sampler_name(sampler));
      } catch (const InputError& e) {
        QVERIFY2(QString(e.what()).contains("2000 steps") && QString(e.what()).contains("1000"), e.what());
      }
      h.hr_denoising_strength = 0.02f;  // floor(20 / 0.02) = 1000: fits
      validate_request(h, 512);
      h.hr_steps = 0;  // = steps (4): 4 / 0.003 = 1333
      h.hr_denoising_strength = 0.003f;
      QVERIFY_THROWS_EXCEPTION(InputError, validate_request(h, 512));
    }
    QCOMPARE(hires_schedule_length(20, 0.5f), 40.0);
    QCOMPARE(hires_schedule_length(20, 1.0f), std::floor(20 / 0.999));
    QCOMPARE(hires_schedule_length(20, 0.0f), 20.0);
  }

  // The image operations against hand-derived values.
  void imageOperations() {
    // resampling a constant image gives the constant (the kernels are normalised)
    RgbImage flat;
    flat.width = 17;
    flat.height = 9;
    flat.pixels.assign(17 * 9 * 3, 200);
    for (auto f : {Filter::Lanczos, Filter::Bilinear, Filter::Nearest}) {
      const auto out = resize_rgb(flat, 40, 23, f);
      QVERIFY(std::all_of(out.pixels.begin(), out.pixels.end(), [](uint8_t v) { return v == 200; }));
    }
    // crop mode covers and centres: a 2:1 image into a square keeps its middle
    const auto src = pattern(128, 64, 3);
    const auto cropped = resize_to(src, 64, 64, ResizeMode::Crop);
    QCOMPARE(cropped.width, 64);
    QCOMPARE(crop(src, {32, 0, 96, 64}).pixels, cropped.pixels);  // 64 high already: no scaling, a centre crop
    // fill mode fits and repeats the edge rows
    const auto filled = resize_to(src, 128, 128, ResizeMode::Fill);
    for (int x = 0; x < 128; ++x) QCOMPARE(filled.pixels[(0 * 128 + x) * 3], filled.pixels[(32 * 128 + x) * 3]);
    // the mask blur's kernel: radius 4 spreads a single white pixel over ⌊2.5·4 + 0.5⌋ = 10 pixels each side
    GrayImage dot;
    dot.width = 41;
    dot.height = 1;
    dot.pixels.assign(41, 0);
    dot.pixels[20] = 255;
    const auto b = blur_mask(dot, 4);
    QVERIFY(b.pixels[20] > 0 && b.pixels[20] < 255);
    QCOMPARE(int(b.pixels[20 + 11]), 0);
    QVERIFY(b.pixels[20 + 8] > 0 || b.pixels[20 + 7] > 0);
    // the crop region: the mask's box plus padding, grown to the output's aspect ratio
    GrayImage m;
    m.width = m.height = 100;
    m.pixels.assign(100 * 100, 0);
    for (int y = 40; y < 50; ++y) for (int x = 20; x < 60; ++x) m.pixels[y * 100 + x] = 255;
    const Rect r = mask_crop_region(m, 5);
    QCOMPARE(r.x1, 15);
    QCOMPARE(r.x2, 65);
    QCOMPARE(r.y1, 35);
    QCOMPARE(r.y2, 55);
    const Rect sq = expand_crop_region(r, 64, 64, 100, 100);
    QCOMPARE(sq.width(), sq.height());
    // the overlay: mask 0 -> the original exactly, 255 -> the generated exactly
    const auto gen = pattern(4, 1, 9), orig = pattern(4, 1, 4);
    GrayImage om;
    om.width = 4, om.height = 1, om.pixels = {0, 255, 0, 255};
    const auto o = overlay_original(gen, orig, om);
    for (int c = 0; c < 3; ++c) {
      QCOMPARE(o.pixels[c], orig.pixels[c]);
      QCOMPARE(o.pixels[3 + c], gen.pixels[3 + c]);
    }
  }
};

QTEST_GUILESS_MAIN(TestImg2Img)
#include "test_img2img.moc"

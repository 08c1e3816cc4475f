// ControlNet (issue 43) beyond the reference cases (test_reference_controlnet): the full-size key
// lists of ../shared/reference/keys load on the meta device with no missing or unexpected key and
// give the released configuration from the keys alone; the canny preprocessor is OpenCV's Canny on
// the image; the resize modes' geometry against crops computed here; the step rule; and what is
// refused by name.
#include <ATen/ATen.h>

#include <opencv2/imgproc.hpp>

#include <QTemporaryDir>
#include <nlohmann/json.hpp>

#include "backend/kernel_options.h"
#include "core/error.h"
#include "families/sd/control.h"
#include "io/control_image.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "models/architecture.h"
#include "keys_files.h"
#include "models/controlnet.h"
#include "models/inspect.h"
#include "models/nn.h"
#include "pipeline/engine.h"
#include "pipeline/infotext.h"
#include "support.h"

using namespace fp8s;

class TestControlNet : public QObject {
  Q_OBJECT
  QTemporaryDir m_dir;

  // A test image: a bright disc and a darker bar on a gradient.
  static RgbImage pattern(int w, int h) {
    RgbImage im;
    im.width = w;
    im.height = h;
    im.pixels.resize(static_cast<std::size_t>(w) * h * 3);
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        const bool disc = (x - w / 3) * (x - w / 3) + (y - h / 2) * (y - h / 2) < (h / 4) * (h / 4);
        const bool bar = x > 2 * w / 3 && x < 2 * w / 3 + 6;
        uint8_t* p = &im.pixels[(static_cast<std::size_t>(y) * w + x) * 3];
        p[0] = disc ? 230 : bar ? 40 : static_cast<uint8_t>(x * 100 / w);
        p[1] = disc ? 200 : bar ? 40 : static_cast<uint8_t>(y * 100 / h);
        p[2] = disc ? 60 : bar ? 200 : 80;
      }
    }
    return im;
  }

 private Q_SLOTS:
  // Both released layouts, as sparse files of their exact headers: the configuration from the keys
  // (cldm_v15.yaml; diffusers/controlnet-canny-sdxl-1.0's config.json) and a load with every key used
  void fullSizeLayoutsLoadOnTheMetaDevice() {
    FP8S_REQUIRE_REFERENCE();
    {
      const auto keys = test::load_key_list("controlnet-sd15.json");
      const auto path = test::sparse_file(m_dir.path(), "control_v11p_sd15_canny.safetensors", keys);
      const SafetensorsFile f(path);
      const auto contents = controlnet_contents(f);
      QVERIFY(contents && !contents->diffusers && contents->prefix == "control_model.");
      const auto c = controlnet_config(f, contents->prefix);
      QCOMPARE(c.unet.model_channels, 320);
      QCOMPARE(c.unet.channel_mult, (std::vector<int>{1, 2, 4, 4}));
      QCOMPARE(c.unet.num_res_blocks, 2);
      QCOMPARE(c.unet.attention_resolutions, (std::vector<int>{1, 2, 4}));
      QCOMPARE(c.unet.transformer_depth, (std::vector<int>{1, 1, 1, 0}));
      QCOMPARE(c.unet.transformer_depth_middle, 1);
      QCOMPARE(c.unet.context_dim, 768);
      QCOMPARE(c.unet.use_linear_in_transformer, false);
      QCOMPARE(c.unet.adm_in_channels, 0);
      QCOMPARE(c.unet.num_heads, 8);
      QCOMPARE(c.hint_channels, 3);
      QCOMPARE(c.hint_block_channels, (std::vector<int>{16, 32, 96, 256}));
      QCOMPARE(c.residuals(), 13);
      auto m = test::meta_loaded<ControlNet>(c, f, contents->prefix);
      QCOMPARE(test::module_params(*m), test::params_of(keys));
      QCOMPARE(test::module_params(*m), uint64_t(361'279'120ull));
    }
    {
      const auto keys = test::load_key_list("controlnet-sdxl-diffusers.json");
      const auto path = test::sparse_file(m_dir.path(), "diffusion_pytorch_model.safetensors", keys);
      const auto f = SafetensorsFile::renamed(path, diffusers_controlnet_names);
      const auto contents = controlnet_contents(SafetensorsFile(path));
      QVERIFY(contents && contents->diffusers);
      const auto c = controlnet_config(f, "");
      QCOMPARE(c.unet.model_channels, 320);
      QCOMPARE(c.unet.channel_mult, (std::vector<int>{1, 2, 4}));
      QCOMPARE(c.unet.transformer_depth, (std::vector<int>{0, 2, 10}));
      QCOMPARE(c.unet.transformer_depth_middle, 10);
      QCOMPARE(c.unet.attention_resolutions, (std::vector<int>{2, 4}));
      QCOMPARE(c.unet.context_dim, 2048);
      QCOMPARE(c.unet.use_linear_in_transformer, true);
      QCOMPARE(c.unet.adm_in_channels, 2816);
      QCOMPARE(c.unet.num_head_channels, 64);
      QCOMPARE(c.residuals(), 10);
      auto m = test::meta_loaded<ControlNet>(c, f);
      QCOMPARE(test::module_params(*m), uint64_t(1'251'014'160ull));
    }
    // a file without one of its tensors is refused naming it
    const auto keys = test::load_key_list("controlnet-sd15.json");
    const auto broken = test::sparse_file(m_dir.path(), "broken.safetensors", keys, "control_model.zero_convs.4.0.weight");
    try {
      (void)load_controlnet(broken, {WeightType::FP16, Fp8Scale::None, false}, at::Device(at::kMeta));
      QFAIL("a ControlNet without zero_convs.4.0.weight loaded");
    } catch (const InputError& e) {
      QVERIFY2(QString(e.what()).contains("zero_convs.4.0.weight"), e.what());
    }
  }

  // canny: OpenCV's cv::Canny on the RGB image with the unit's thresholds, white on black in all
  // three channels; invert: 255 − v; none: the image itself
  void preprocessorsAreOpenCvsCannyAndInvert() {
    const auto im = pattern(96, 64);
    for (const auto& [low, high] : {std::pair{100, 200}, std::pair{20, 60}}) {
      const auto edges = canny_edges(im, low, high);
      cv::Mat expected;
      cv::Canny(cv::Mat(im.height, im.width, CV_8UC3, const_cast<uint8_t*>(im.pixels.data())), expected, low, high);
      int on = 0;
      for (int y = 0; y < im.height; ++y) {
        for (int x = 0; x < im.width; ++x) {
          const uint8_t e = expected.at<uint8_t>(y, x);
          on += e != 0;
          for (int c = 0; c < 3; ++c) QCOMPARE(edges.pixels[(static_cast<std::size_t>(y) * im.width + x) * 3 + c], e);
        }
      }
      QVERIFY2(on > 50, "the test image has edges");  // the disc's outline at least
    }
    const auto inv = preprocess_control(im, ControlPreprocessor::Invert);
    for (std::size_t i = 0; i < im.pixels.size(); ++i) QCOMPARE(int(inv.pixels[i]), 255 - im.pixels[i]);
    QVERIFY(preprocess_control(im, ControlPreprocessor::None).pixels == im.pixels);
  }

  // A1111's geometry: "Crop and Resize" scales to cover and crops the centre, "Resize and Fill"
  // scales to fit and fills the sides; checked on an image whose columns are numbered
  void resizeModesHaveA1111sGeometry() {
    RgbImage im;  // 200x100, red = the column, green = twice the row
    im.width = 200;
    im.height = 100;
    im.pixels.resize(200 * 100 * 3);
    for (int y = 0; y < 100; ++y) {
      for (int x = 0; x < 200; ++x) {
        uint8_t* p = &im.pixels[(static_cast<std::size_t>(y) * 200 + x) * 3];
        p[0] = static_cast<uint8_t>(x);
        p[1] = static_cast<uint8_t>(2 * y);
        p[2] = 0;
      }
    }
    // crop to 100x100: scale 100/100 = 1 (cover), the centre 100 columns: x = 50..149
    const auto crop = control_hint(im, 100, 100, ResizeMode::Crop, ControlPreprocessor::None);
    QCOMPARE(crop.width, 100);
    QCOMPARE(int(crop.pixels[(50 * 100 + 0) * 3]), 50);
    QCOMPARE(int(crop.pixels[(50 * 100 + 99) * 3]), 149);
    QCOMPARE(int(crop.pixels[(50 * 100 + 10) * 3 + 1]), 100);  // rows unscaled
    // fill to 100x100: scale 100/200 (fit) -> 100x50 placed at rows 25..74 (source row 2j + 0.5 at
    // its row j: green 4j + 1), the bands above and below filled
    const auto fill = control_hint(im, 100, 100, ResizeMode::Fill, ControlPreprocessor::None);
    QCOMPARE(fill.height, 100);
    const auto green = [&](int x, int y) { return int(fill.pixels[(static_cast<std::size_t>(y) * 100 + x) * 3 + 1]); };
    for (int j : {2, 25, 47}) {
      QVERIFY2(std::abs(green(50, 25 + j) - (4 * j + 1)) <= 3, qPrintable(QString("row %1: %2").arg(25 + j).arg(green(50, 25 + j))));
    }
    // just resize: every column kept in order, squeezed
    const auto just = control_hint(im, 100, 100, ResizeMode::JustResize, ControlPreprocessor::None);
    QVERIFY(just.pixels[(50 * 100 + 0) * 3] < 4 && just.pixels[(50 * 100 + 99) * 3] > 195);
  }

  // A1111's start/end rule: step i sees progress max(i − 1, 0)/n; e2e_control_half's [0.1, 0.6]
  // over 6 steps runs the ControlNet at steps 2, 3, 4 (the README's derivation)
  void startEndFollowA1111sLaggedProgress() {
    PassControl pc({});
    std::vector<int> on_steps;
    for (int i = 0; i < 6; ++i) {
      if (pc.on(0.1f, 0.6f)) on_steps.push_back(i);
      pc.step_done(i, 6);
    }
    QCOMPARE(on_steps, (std::vector<int>{2, 3, 4}));
    PassControl all({});
    for (int i = 0; i < 6; ++i) {
      QVERIFY(all.on(0.0f, 1.0f));
      all.step_done(i, 6);
    }
  }

  // The infotext names every unit with sd-webui-controlnet's fields and reads back
  void infotextCarriesTheUnits() {
    GenerationRequest r;
    r.prompt = "a house";
    ControlUnit u;
    u.model = "/models/controlnet/control_v11p_sd15_canny.safetensors";
    u.preprocessor = ControlPreprocessor::Canny;
    u.canny_low = 80;
    u.strength = 0.75f;
    u.start = 0.1f;
    u.end = 0.9f;
    u.mode = ControlMode::Prompt;
    r.controlnets.push_back(u);
    const auto fields = controlnet_infotext_fields(r);
    QCOMPARE(QString::fromStdString(fields),
             QString(", ControlNet 0: \"Module: canny, Model: control_v11p_sd15_canny, Weight: 0.75, Resize Mode: Crop and Resize, "
                     "Threshold A: 80, Threshold B: 200, Guidance Start: 0.1, Guidance End: 0.9, Control Mode: My prompt is more important\""));
    const auto back = parse_infotext("a house\nSteps: 20, Sampler: Euler, Seed: 3" + fields);
    QCOMPARE(int(back.controlnets.size()), 1);
    const auto& b = back.controlnets[0];
    QCOMPARE(QString::fromStdString(b.model), QString("control_v11p_sd15_canny"));
    QCOMPARE(b.preprocessor, ControlPreprocessor::Canny);
    QCOMPARE(b.canny_low, 80);
    QCOMPARE(b.strength, 0.75f);
    QCOMPARE(b.start, 0.1f);
    QCOMPARE(b.end, 0.9f);
    QCOMPARE(b.mode, ControlMode::Prompt);
    QCOMPARE(b.resize, ResizeMode::Crop);
  }

  // inspect names a ControlNet's base and layout, and its bytes in 16-bit and FP8 are what a load
  // in that storage holds
  void inspectNamesTheFileAndItsBytes() {
    FP8S_REQUIRE_REFERENCE();
    for (const auto& [file, name] : {std::pair{"tiny-control-sd15.safetensors", "ControlNet for SD 1.x (ControlNet 1.1 names under control_model.)"},
                                     std::pair{"tiny-control-sd15-diffusers.safetensors", "ControlNet for SD 1.x (diffusers ControlNetModel names)"},
                                     std::pair{"tiny-control-sdxl-diffusers.safetensors", "ControlNet for SDXL (diffusers ControlNetModel names)"}}) {
      const auto path = test::reference_path(QString("controlnet/") + file);
      const auto report = inspect_model_file(SafetensorsFile(path));
      QCOMPARE(QString::fromStdString(report.architecture()), QString(name));
      // convolutions unpacked: a packed weight (LibTorch >= 2.4) holds oneDNN's block padding too
      const backend::KernelOptions unpacked{backend::AttentionKernel::Auto, false};
      const backend::KernelScope scope(unpacked);
      QCOMPARE(report.fp8_limit_bytes(), load_controlnet(path, StorageSpec{WeightType::FP8_E4M3}, at::kCPU).bytes);
      QCOMPARE(report.total.bytes_16bit, load_controlnet(path, StorageSpec{WeightType::FP16}, at::kCPU).bytes);
    }
  }

  // The memory check before a run counts the ControlNets it loads: with the machine capped between
  // the working estimate and the estimate plus the ControlNet's bytes (its header, FP32), the same
  // request runs without the ControlNet and is refused with it, naming the ControlNet's weights
  void memoryCheckCountsTheControlNet() {
    FP8S_REQUIRE_REFERENCE();
    const auto model = test::reference_path("sd1/tiny-sd1.safetensors");
    const auto cn = test::reference_path("controlnet/tiny-control-sd15.safetensors");
    const auto config = config_for(SafetensorsFile(model));
    const uint64_t working = estimate_working_bytes(config.unet, config.vae, 64, 64, 1, ComputeType::FP32);
    const uint64_t control = predicted_bytes(inspect_model_file(SafetensorsFile(cn)).total, StorageSpec{WeightType::FP32});
    QVERIFY(control > 5000000);  // 1.37 M parameters in FP32
    auto env = QProcessEnvironment::systemEnvironment();
    env.insert("FP8S_AVAILABLE_MEMORY", QString::number(working + control / 2));
    const QStringList args{"generate", "--model", QString::fromStdString(model), "--vocab", test::reference_dir() + "/clip",
                           "--prompt", "a house", "--steps", "1", "--width", "64", "--height", "64", "--weights", "fp32",
                           "--compute", "fp32", "--outdir", m_dir.path() + "/mem"};
    const auto plain = test::run_cli(args, {}, 600000, env);
    QVERIFY2(plain.exit_code == 0, qPrintable(plain.err));
    const auto with = test::run_cli(args + QStringList{"--controlnet", QString::fromStdString(cn), "--control-image",
                                                       test::reference_dir() + "/controlnet/control_hint.png"},
                                    {}, 600000, env);
    test::expect_one_line_error(with, 2, "of ControlNet weights");
  }

  // Under a weight budget the ControlNet's blocks stream like the UNet's: budget 0 gives the
  // resident run's pixels, in FP16 and E4M3, and each step reads the ControlNet's blocks too
  void controlNetStreamsUnderAWeightBudget() {
    FP8S_REQUIRE_REFERENCE();
    const QString ref = test::reference_dir();
    auto run = [&](const QString& weights, const QString& budget, bool control) {
      const QString out = m_dir.path() + "/stream-" + weights + "-" + budget + (control ? "-cn" : "");
      QStringList args{"generate", "--model", ref + "/sd1/tiny-sd1.safetensors", "--vocab", ref + "/clip", "--prompt", "a house",
                       "--steps", "3", "--width", "64", "--height", "64", "--seed", "2", "--weights", weights,
                       "--weight-budget", budget, "--outdir", out, "--json"};
      if (control) {
        args << "--controlnet" << ref + "/controlnet/tiny-control-sd15.safetensors" << "--control-image"
             << ref + "/controlnet/control_hint.png" << "--control-preprocessor" << "none";
      }
      const auto r = test::run_cli(args);
      if (r.exit_code != 0) qWarning("%s", qPrintable(r.err));
      const auto j = nlohmann::json::parse(r.out.toStdString());
      return std::pair{read_png(out.toStdString() + "/00001-2.png").image.pixels, j["streaming"]["streamed_bytes"].get<uint64_t>()};
    };
    for (const QString weights : {"fp16", "fp8-e4m3"}) {
      const auto [resident, none] = run(weights, "auto", true);
      const auto [streamed, bytes] = run(weights, "0", true);
      const auto [unet_only_pixels, unet_only] = run(weights, "0", false);
      QVERIFY(!resident.empty());
      QCOMPARE(none, uint64_t(0));
      QVERIFY2(streamed == resident, qPrintable(weights));
      QVERIFY2(unet_only_pixels != resident, "the ControlNet changes nothing");
      QVERIFY2(bytes > unet_only, qPrintable(QString("%1: %2 vs %3").arg(weights).arg(bytes).arg(unet_only)));
    }
  }

  // The control reaches every path of a run: each sampler family (ancestral, second order, DDIM),
  // hires fix (its pass at 128x128), img2img, inpainting and a LoRA; each run differs from the
  // same run without the ControlNet
  void controlReachesEverySamplerAndPath() {
    FP8S_REQUIRE_REFERENCE();
    const QString ref = test::reference_dir();
    const QString hint = ref + "/controlnet/control_hint.png";
    RgbImage mask;
    mask.width = mask.height = 64;
    mask.pixels.assign(64 * 64 * 3, 0);
    for (int y = 16; y < 48; ++y) std::fill_n(&mask.pixels[(static_cast<std::size_t>(y) * 64 + 16) * 3], 32 * 3, uint8_t(255));
    const std::string mask_path = (m_dir.path() + "/mask.png").toStdString();
    write_png(mask_path, mask, "");
    const std::vector<std::pair<QString, QStringList>> variants{
        {"euler_a", {"--sampler", "euler_ancestral"}},
        {"heun", {"--sampler", "heun"}},
        {"ddim", {"--sampler", "ddim"}},
        {"hires", {"--hr-scale", "2", "--hr-steps", "2"}},
        {"img2img", {"--init-image", hint, "--denoising-strength", "0.6"}},
        {"inpaint", {"--init-image", hint, "--mask", QString::fromStdString(mask_path)}},
        {"lora", {"--lora", ref + "/sd1/lora-tiny-sd1.safetensors:0.8"}}};
    for (const auto& [name, extra] : variants) {
      std::vector<uint8_t> pixels[2];
      for (int control = 0; control < 2; ++control) {
        const QString out = m_dir.path() + "/paths-" + name + "-" + QString::number(control);
        QStringList args{"generate", "--model", ref + "/sd1/tiny-sd1.safetensors", "--vocab", ref + "/clip", "--prompt",
                         "a house", "--steps", "3", "--width", "64", "--height", "64", "--seed", "4", "--outdir", out};
        if (control) args << "--controlnet" << ref + "/controlnet/tiny-control-sd15.safetensors" << "--control-image" << hint;
        const auto r = test::run_cli(args + extra);
        QVERIFY2(r.exit_code == 0, qPrintable(name + ": " + r.err));
        const auto png = read_png(out.toStdString() + "/00001-4.png");
        QCOMPARE(png.image.width, name == "hires" ? 128 : 64);
        QVERIFY2(!control || QString::fromStdString(png.parameters).contains("ControlNet 0: "), qPrintable(name));
        pixels[control] = png.image.pixels;
      }
      QVERIFY2(pixels[0] != pixels[1], qPrintable(name + ": the ControlNet changed nothing"));
    }
  }

  // A "diff" ControlNet (ComfyUI's and A1111's reading): the tiny ControlNet rewritten as FP32
  // differences to tiny-sd1's UNet wherever the UNet has the tensor, plus a `difference` key, loads
  // with the base model to the ControlNet itself: every parameter in FP32, the residuals in E4M3
  void diffControlNetAddsTheBaseUNet() {
    FP8S_REQUIRE_REFERENCE();
    const auto cn_path = test::reference_path("controlnet/tiny-control-sd15.safetensors");
    const SafetensorsFile cn(cn_path), base(test::reference_path("sd1/tiny-sd1.safetensors"));
    std::vector<TensorSpec> specs{{"difference", Dtype::F32, {1}}};
    std::vector<at::Tensor> values{at::zeros({1})};
    int differences = 0;
    for (const auto& t : cn.tensors()) {
      const auto* b = base.find("model.diffusion_model." + t.name.substr(std::string("control_model.").size()));
      if (b && b->shape == t.shape) {
        specs.push_back({t.name, Dtype::F32, t.shape});
        values.push_back(read_tensor(cn, t) - read_tensor(base, *b));
        ++differences;
      } else {
        specs.push_back({t.name, t.dtype, t.shape});
        values.push_back(read_tensor(cn, t).to(at::kHalf));
      }
    }
    QVERIFY2(differences > 100, qPrintable(QString::number(differences)));
    const std::string path = (m_dir.path() + "/diff-control-sd15.safetensors").toStdString();
    {
      SafetensorsWriter w(path, specs, cn.metadata());
      for (const auto& v : values) w.append(v.contiguous().data_ptr(), v.nbytes());
      w.commit();
    }
    const auto config = config_for(base);
    try {
      (void)load_controlnet(path, StorageSpec{WeightType::FP32}, at::kCPU, &config.unet);
      QFAIL("a diff ControlNet loaded without its base model");
    } catch (const InputError& e) {
      QVERIFY2(QString(e.what()).contains("\"diff\" ControlNet") && QString(e.what()).contains("--model"), e.what());
    }
    {
      const auto want = load_controlnet(cn_path, StorageSpec{WeightType::FP32}, at::kCPU, &config.unet);
      const auto got = load_controlnet(path, StorageSpec{WeightType::FP32}, at::kCPU, &config.unet, &base);
      QVERIFY(got.contents.difference);
      QCOMPARE(got.bytes, want.bytes);
      const auto a = want.net->named_parameters(true), b = got.net->named_parameters(true);
      QCOMPARE(a.size(), b.size());
      for (const auto& item : a) {
        const auto& v = b[item.key()];
        const double err = (v - item.value()).abs().max().item<double>(), scale = item.value().abs().max().item<double>();
        QVERIFY2(err <= 1e-6 * scale, qPrintable(QString::fromStdString(item.key()) + ": " + QString::number(err)));
      }
    }
    const StorageSpec e4m3{WeightType::FP8_E4M3, Fp8Scale::Tensor};
    const auto want = load_controlnet(cn_path, e4m3, at::kCPU, &config.unet);
    const auto got = load_controlnet(path, e4m3, at::kCPU, &config.unet, &base);
    QCOMPARE(got.bytes, want.bytes);
    const auto& c = want.net->control_config();
    at::manual_seed(5);
    const auto x = at::randn({2, c.unet.in_channels, 8, 8}), hint = at::rand({2, 3, 64, 64});
    const auto t = at::tensor({500.0f, 20.0f}), context = at::randn({2, 77, c.unet.context_dim});
    const auto r0 = want.net->forward(x, hint, t, context, {}, at::kFloat), r1 = got.net->forward(x, hint, t, context, {}, at::kFloat);
    QCOMPARE(r0.down.size(), r1.down.size());
    for (std::size_t i = 0; i <= r0.down.size(); ++i) {
      const auto& u = i < r0.down.size() ? r0.down[i] : r0.mid;
      const auto& v = i < r0.down.size() ? r1.down[i] : r1.mid;
      const double err = (u - v).abs().max().item<double>(), scale = u.abs().max().item<double>();
      QVERIFY2(err <= 1e-3 * scale, qPrintable(QString("residual %1: %2 of %3").arg(i).arg(err).arg(scale)));
    }
  }

  // An SD1 ControlNet on SDXL (and back), a Control-LoRA, a diff ControlNet and a file that is no
  // ControlNet are refused by name; a ControlNet on Flux or Z-Image too
  void wrongFilesAreRefusedByName() {
    FP8S_REQUIRE_REFERENCE();
    const auto sd15 = test::reference_path("controlnet/tiny-control-sd15.safetensors");
    const auto sdxl = test::reference_path("controlnet/tiny-control-sdxl-diffusers.safetensors");
    const StorageSpec fp32{WeightType::FP32};
    {
      const SafetensorsFile base(test::reference_path("sdxl/tiny-sdxl.safetensors"));
      const auto config = config_for(base);
      try {
        (void)load_controlnet(sd15, fp32, at::kCPU, &config.unet);
        QFAIL("an SD1 ControlNet loaded for SDXL");
      } catch (const InputError& e) {
        QVERIFY2(QString(e.what()).contains("a ControlNet for SD 1.x/2.x") && QString(e.what()).contains("the model is SDXL"), e.what());
      }
    }
    auto write = [&](const char* name, std::vector<TensorSpec> specs) {
      const std::string path = (m_dir.path() + "/" + name).toStdString();
      SafetensorsWriter w(path, specs, {});
      for (const auto& s : specs) {
        std::vector<uint8_t> zeros(s.nbytes());
        w.append(zeros.data(), zeros.size());
      }
      w.commit();
      return path;
    };
    const auto lora = write("control-lora.safetensors", {{"lora_controlnet", Dtype::F32, {1}}, {"input_hint_block.0.weight", Dtype::F32, {16, 3, 3, 3}}});
    const auto diff = write("diff.safetensors", {{"difference", Dtype::F32, {1}}, {"control_model.input_hint_block.0.weight", Dtype::F32, {16, 3, 3, 3}}});
    const auto none = write("none.safetensors", {{"model.diffusion_model.input_blocks.0.0.weight", Dtype::F32, {4, 4, 3, 3}}});
    for (const auto& [path, needle] : {std::pair{lora, "Control-LoRA"}, std::pair{diff, "\"diff\" ControlNet"}, std::pair{none, "not a ControlNet"}}) {
      try {
        (void)load_controlnet(path, fp32, at::kCPU);
        QFAIL(qPrintable(QString::fromStdString(path) + " loaded"));
      } catch (const InputError& e) {
        QVERIFY2(QString(e.what()).contains(needle) && QString(e.what()).startsWith(QString::fromStdString(path)), e.what());
      }
    }
    (void)sdxl;
  }
};

QTEST_GUILESS_MAIN(TestControlNet)
#include "test_controlnet.moc"

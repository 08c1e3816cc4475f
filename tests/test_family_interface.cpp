// The family interface proved by a family the engine has never heard of: a toy family defined
// here (two 3x3 channel mixes, its own traits, one component role) registers itself, and the
// engine's generate, compare, infotext and the GUI's panels work on it through the public API.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <QComboBox>
#include <QImage>
#include <QMimeData>
#include <QPushButton>
#include <QSignalSpy>
#include <QToolButton>
#include <QDoubleSpinBox>
#include <QLineEdit>
#include <QSettings>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QtTest>

#include "cli/commands.h"
#include "compare/compare.h"
#include "core/error.h"
#include "pipeline/family.h"
#include "pipeline/family_options.h"
#include "fp8/codec.h"
#include "io/safetensors.h"
#include "panels/ChartsPanel.h"
#include "panels/FamilyOptionsBox.h"
#include "panels/ImageStrip.h"
#include "panels/ModelPanel.h"
#include "panels/PromptPanel.h"
#include "support.h"
#include "pipeline/engine.h"
#include "pipeline/img2img.h"
#include "pipeline/infotext.h"

using namespace fp8s;

namespace {

void write_tensors(const std::string& path, const std::map<std::string, std::vector<float>>& tensors,
                   const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  for (const auto& [name, v] : tensors) specs.push_back({name, Dtype::F32, {int64_t(v.size()) / 3, 3}});
  SafetensorsWriter w(path, specs, metadata);
  for (const auto& [name, v] : tensors) w.append(v.data(), v.size() * sizeof(float));
  w.commit();
}

at::Tensor read_matrix(const SafetensorsFile& f, const std::string& name) {
  const auto& rec = f.at(name);
  std::vector<float> v(rec.numel());
  f.read(rec, v.data());
  return at::tensor(v, at::kFloat).reshape({3, 3});
}

// The weights as a storage keeps them: FP8 rounds each through the codec (one byte each).
at::Tensor stored(const at::Tensor& w, const StorageSpec& s) {
  auto out = w.clone().contiguous();
  float* p = out.data_ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) {
    switch (s.weights) {
      case WeightType::FP32: break;
      case WeightType::FP16: p[i] = f16_to_f32(f32_to_f16(p[i])); break;
      case WeightType::BF16: p[i] = bf16_to_f32(f32_to_bf16(p[i])); break;
      case WeightType::FP8_E4M3: p[i] = decode_fp8(encode_fp8(p[i], Fp8Format::E4M3FN), Fp8Format::E4M3FN); break;
      case WeightType::FP8_E5M2: p[i] = decode_fp8(encode_fp8(p[i], Fp8Format::E5M2), Fp8Format::E5M2); break;
    }
  }
  return out;
}

// The toy's one declared setting and its one component role: the CLI's --toy-gain and
// --toy-decoder, the infotext's "Toy gain", the Prompt panel's control come from these alone.
FamilyOption toy_gain() {
  FamilyOption o;
  o.name = "toy-gain";
  o.label = "Gain";
  o.infotext_key = "Toy gain";
  o.type = FamilyOption::Type::Number;
  o.min = 0;
  o.max = 2;
  o.default_value = "1";
  o.help = "the toy's mixer gain";
  o.prompt_panel = true;
  return o;
}

ComponentRole toy_role() { return {"decoder", "toy decoder", {"toy_decoder"}, "toy-decoder", "toy_decoder.safetensors"}; }

FamilyTraits toy_traits() {
  FamilyTraits t;
  t.prediction = Prediction::Flow;
  t.id = "toy";
  t.name = "Toy family";
  t.native_size = 32;
  t.size_multiple = 8;
  t.min_size = 16;
  t.size_step = 8;
  t.size_presets = {{32, 32}, {48, 32}};
  t.samplers = {Sampler::Euler, Sampler::Heun};
  t.schedules = {{Schedule::Normal, "Toy linear"}};
  t.default_cfg = 1.0f;
  t.default_steps = 6;
  t.clip_skip = false;
  t.components = {toy_role()};
  t.options = {toy_gain()};
  t.latent.channels = 3;
  t.latent.factor = 2;
  t.latent.rgb_factors = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  t.compare_modes = "fp16,fp8-e4m3";
  t.fp32_probe = false;
  t.denoiser_label = "Mixer";
  t.encode_label = "toy encode";
  t.sample_label = "toy steps";
  t.decode_label = "toy decode";
  return t;
}

// What the toy's prompt means: one number, its length mod 7 over 7.
float toy_condition(const std::string& prompt) { return static_cast<float>(prompt.size() % 7) / 7.0f; }
at::Tensor mix(const at::Tensor& w, const at::Tensor& x) { return at::einsum("oc,bchw->bohw", {w, x}); }

struct ToyCond : FamilyConditioning {
  float c = 0;
};

class ToyFamily final : public FamilyModel {
 public:
  ToyFamily(const LoadOptions& o) : path_(o.checkpoint), storage_(o.storage), device_(at::kCPU) {
    const auto it = o.components.find("decoder");
    if (it == o.components.end()) throw InputError(o.checkpoint + ": the toy family needs its decoder (--component decoder=FILE)");
    decoder_path_ = it->second;
    load();
  }
  const FamilyTraits& traits() const override { return traits_; }
  const at::Device& device() const override { return device_; }
  const StorageSpec& storage() const override { return storage_; }
  void describe(ModelInfo& i) const override {
    i.architecture = "Toy family";
    i.storage = weight_type_name(storage_.weights);
    i.components = {{"mixer", path_, i.storage, 9 * bytes_per(storage_)}, {"toy decoder", decoder_path_, i.storage, 9 * bytes_per(storage_)}};
  }
  WeightBytes weight_bytes(const StorageSpec& s) const override { return {9 * bytes_per(s), 0, 9 * bytes_per(s)}; }
  void check(const GenerationRequest& r, int, int) const override {
    if (r.batch_size > 4) throw InputError("the toy family makes at most 4 images a batch");
  }
  void prepare(const GenerationRequest& r) override {
    if (r.storage != storage_) storage_ = r.storage, load();
  }
  std::shared_ptr<FamilyConditioning> encode(const GenerationRequest&, const std::string& prompt, const std::string&) override {
    auto c = std::make_shared<ToyCond>();
    c->c = toy_condition(prompt);
    return c;
  }
  void prepare_pass(SamplingInit& init, const ImageJob* job, const GenerationRequest& r, int, int, at::Generator& gen) override {
    if (!job) return;
    PreparedInit prep;
    prep.latent = at::avg_pool2d(image_tensor(job->source), {2, 2}).expand({r.batch_size, -1, -1, -1}).contiguous();
    apply_latent_mask(prep, *job, r, r.batch_size, gen);
    init.latent = prep.latent;
    init.keep = prep.keep;
  }
  at::Tensor sigmas(const GenerationRequest&, int steps, int64_t, int64_t) const override {
    return at::linspace(1.0, 0.0, steps + 1, at::kFloat);
  }
  PassDenoiser denoiser(const FamilyConditioning& cond, const GenerationRequest& r, const SamplingInit&,
                        const std::function<void(double)>& on_model_ms, const std::atomic<bool>*) override {
    const float c = static_cast<const ToyCond&>(cond).c;
    const double gain = option_number(traits_.options, r.options, "toy-gain");
    PassDenoiser d;
    d.denoise = [this, c, gain, on_model_ms](const at::Tensor& x, const at::Tensor& sigma) {
      if (on_model_ms) on_model_ms(0.5);
      return x - sigma * at::tanh(gain * mix(mixer_, x) + c);
    };
    return d;
  }
  at::Tensor encode_images(const at::Tensor& images, ComputeType, at::Generator&) override { return at::avg_pool2d(images, {2, 2}); }
  at::Tensor decode(const at::Tensor& latent, ComputeType) override {
    return at::tanh(mix(decoder_, at::upsample_nearest2d(latent, {latent.size(2) * 2, latent.size(3) * 2})));
  }
  std::string infotext(const GenerationRequest& r, uint64_t seed, const std::string& name, const std::string& hash) const override {
    return format_infotext(r, seed, name, hash, r.width, r.height) + options_infotext_fields(traits_.options, r.options) + ", Toy: 1";
  }
  std::vector<float> probe(const StorageSpec&, ComputeType, uint64_t, int, const std::vector<LoraRequest>&, LoraMode) override {
    return {};
  }
  static uint64_t bytes_per(const StorageSpec& s) { return is_fp8(s.weights) ? 1 : s.weights == WeightType::FP32 ? 4 : 2; }

 private:
  void load() {
    mixer_ = stored(read_matrix(SafetensorsFile(path_), "toy.mix"), storage_);
    decoder_ = stored(read_matrix(SafetensorsFile(decoder_path_), "decoder.mix"), storage_);
  }
  std::string path_, decoder_path_;
  StorageSpec storage_;
  at::Device device_;
  FamilyTraits traits_ = toy_traits();
  at::Tensor mixer_, decoder_;
};

using fp8s::test::Steps;

// The prompt "abc" in FP32, Euler, no CFG.
GenerationRequest toy_request(int steps, int64_t seed) {
  GenerationRequest r;
  r.prompt = "abc";
  r.steps = steps;
  r.seed = seed;
  r.cfg = 1;
  r.sampler = Sampler::Euler;
  r.storage = StorageSpec{WeightType::FP32};
  r.compute = ComputeType::FP32;
  return r;
}

}  // namespace

class TestFamilyInterface : public QObject {
  Q_OBJECT
  QTemporaryDir m_dir;
  std::string m_model, m_decoder;

  LoadOptions options() const {
    LoadOptions o;
    o.checkpoint = m_model;
    o.components["decoder"] = m_decoder;
    o.storage = StorageSpec{WeightType::FP32};
    return o;
  }

 private Q_SLOTS:
  void initTestCase() {
    FamilyEntry e;
    e.id = "toy";
    e.detect = [](const SafetensorsFile& f) { return f.metadata().count("toy.family") > 0; };
    e.traits = [](const SafetensorsFile&) { return toy_traits(); };
    e.options = {toy_gain()};
    e.roles = {toy_role()};
    e.open = [](const LoadOptions& o, const at::Device&) -> std::unique_ptr<FamilyModel> { return std::make_unique<ToyFamily>(o); };
    register_family(std::move(e));
    m_model = m_dir.filePath("toy.safetensors").toStdString();
    m_decoder = m_dir.filePath("toy_decoder.safetensors").toStdString();
    write_tensors(m_model, {{"toy.mix", {0.9f, -0.3f, 0.2f, 0.1f, 0.7f, -0.4f, -0.2f, 0.5f, 0.8f}}}, {{"toy.family", "1"}});
    write_tensors(m_decoder, {{"decoder.mix", {1.1f, 0.2f, -0.1f, -0.3f, 0.9f, 0.2f, 0.1f, -0.2f, 1.2f}}}, {});
  }

  // The registry picks the toy for its file and its traits reach ModelInfo and the CLI's defaults
  void theRegistryFindsTheToy() {
    QCOMPARE(find_family(SafetensorsFile(m_model))->id, std::string("toy"));
    QCOMPARE(family_traits_of(m_model).name, std::string("Toy family"));
    Engine engine(options());
    const auto info = engine.info();
    QCOMPARE(info.traits.id, std::string("toy"));
    QCOMPARE(info.architecture, std::string("Toy family"));
    QCOMPARE(info.components.size(), std::size_t(2));
    QCOMPARE(info.unet_bytes, uint64_t(36));
  }

  // generate through the one run loop: the image is the toy's Euler loop written out here, from
  // the seed's noise at the native size, decoded; the steps carry previews; the infotext is the
  // family's; a sampler it does not offer is refused by name
  void generateRunsTheToy() {
    Engine engine(options());
    GenerationRequest r = toy_request(3, 11);
    Steps steps;
    std::atomic<bool> cancel{false};
    const auto result = engine.generate(r, &steps, cancel);
    QCOMPARE(result.images.size(), std::size_t(1));
    const auto& img = result.images[0].image;
    QCOMPARE(img.width, 32);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
    at::Tensor x = at::randn({1, 3, 16, 16}, gen, at::kFloat);
    const auto w = read_matrix(SafetensorsFile(m_model), "toy.mix");
    const auto wd = read_matrix(SafetensorsFile(m_decoder), "decoder.mix");
    const double c = 3.0 / 7.0;
    for (int i = 0; i < 3; ++i) {
      const double t = 1.0 - i / 3.0, t_next = 1.0 - (i + 1) / 3.0;
      x = x + (t_next - t) * at::tanh(mix(w, x) + c);  // the flow's Euler step
    }
    const auto want = to_images(at::tanh(mix(wd, at::upsample_nearest2d(x, {32, 32})))).at(0);
    int worst = 0;
    for (std::size_t k = 0; k < img.pixels.size(); ++k) worst = std::max(worst, std::abs(int(img.pixels[k]) - int(want.pixels[k])));
    QVERIFY2(worst <= 1, qPrintable(QString("worst difference %1 levels").arg(worst)));
    QCOMPARE(steps.events.size(), std::size_t(3));
    QCOMPARE(steps.events[0].preview.width, 16);
    QCOMPARE(result.timing.denoise_ms.at(0), 0.5);
    const auto& text = result.images[0].parameters;
    QVERIFY2(QString::fromStdString(text).contains("Toy: 1"), text.c_str());
    QCOMPARE(parse_infotext(text).steps, 3);
    r.sampler = Sampler::Ddim;
    {
      const QString msg = test::refusal(engine, r);
      QVERIFY2(msg.contains("Toy family does not offer the sampler ddim"), qPrintable(msg));
    }
    r.sampler = Sampler::Euler;
    r.batch_size = 5;
    QVERIFY_THROWS_EXCEPTION(InputError, engine.generate(r, nullptr, cancel));  // the family's own check
  }

  // compare on the toy: both modes run, FP8 holds half of FP16's weight bytes, the images differ a little
  void compareRunsOnTheToy() {
    CompareOptions o;
    o.load = options();
    o.request.prompt = "abc";
    o.request.steps = 2;
    o.request.seed = 3;
    o.request.cfg = 1;
    o.request.sampler = Sampler::Euler;
    o.request.compute = ComputeType::FP32;
    o.modes = parse_modes(toy_traits().compare_modes, Fp8Scale::None);
    o.outdir = m_dir.filePath("compare").toStdString();
    o.unet_error = false;
    const auto report = run_compare(o);
    QCOMPARE(report.modes.size(), std::size_t(2));
    QCOMPARE(report.modes[0].result.weight_bytes, uint64_t(36));
    QCOMPARE(report.modes[1].result.weight_bytes, uint64_t(18));
    QVERIFY(report.modes[1].psnr > 20);
  }

  // The toy's declared option and component role become the CLI's flags, checked against the
  // declaration; the image made with the option writes it into its infotext and reads it back;
  // another family's setting is refused by name.
  void declaredOptionReachesTheCliAndInfotext() {
    {
      CLI::App app;
      GenerationRequest r;
      cli::RequestFlags flags;
      cli::add_request_options(app, r, flags);
      cli::ModelFlags model;
      cli::add_model_options(app, model, false);
      app.parse("--toy-gain 0.5 --toy-decoder " + m_decoder, false);
      QCOMPARE(QString::fromStdString(r.options.at("toy-gain")), QString("0.5"));
      QCOMPARE(QString::fromStdString(model.role_files.at("decoder")), QString::fromStdString(m_decoder));
      QVERIFY(app.help().find("--toy-gain") != std::string::npos);
      QVERIFY(app.help().find("the toy's mixer gain") != std::string::npos);
    }
    {
      CLI::App app;
      GenerationRequest r;
      cli::RequestFlags flags;
      cli::add_request_options(app, r, flags);
      try {
        app.parse(std::string("--toy-gain 5"), false);
        QFAIL("--toy-gain 5 was taken");
      } catch (const CLI::ParseError& e) {
        QVERIFY2(std::string(e.what()).find("--toy-gain takes a number from 0 to 2") != std::string::npos, e.what());
      }
    }
    Engine engine(options());
    GenerationRequest r = toy_request(2, 5);
    std::atomic<bool> cancel{false};
    const auto plain = engine.generate(r, nullptr, cancel).images.at(0);
    r.options["toy-gain"] = "0.5";
    const auto gained = engine.generate(r, nullptr, cancel).images.at(0);
    QVERIFY(plain.image.pixels != gained.image.pixels);  // the family reads the value it declared
    QVERIFY2(gained.parameters.find("Toy gain: 0.5") != std::string::npos, gained.parameters.c_str());
    QVERIFY2(plain.parameters.find("Toy gain") == std::string::npos, plain.parameters.c_str());  // the default is not written
    QCOMPARE(parse_infotext(gained.parameters).options, r.options);
    r.options = {{"guidance", "3"}};
    const QString msg = test::refusal(engine, r);
    QVERIFY2(msg.contains("--guidance is not a setting of Toy family") && msg.contains("--toy-gain"), qPrintable(msg));
  }

  // the GUI's panels build their controls from the toy's traits
  void panelsReadTheToysTraits() {
    gui::PromptPanel prompt;
    prompt.setTraits(toy_traits());
    auto* sampler = prompt.findChild<QComboBox*>("samplerCombo");
    QCOMPARE(sampler->count(), 2);
    QCOMPARE(prompt.findChild<QComboBox*>("scheduleCombo")->currentText(), QString("Toy linear"));
    QCOMPARE(prompt.findChild<QSpinBox*>("stepsSpin")->value(), 6);  // the family's steps
    {  // its declared option: a control at the default, whose value the request carries
      auto* gain = prompt.findChild<QDoubleSpinBox*>("option_toy-gain");
      QVERIFY(gain != nullptr);
      QCOMPARE(gain->value(), 1.0);
      QCOMPARE(gain->maximum(), 2.0);
      gain->setValue(0.25);
      GenerationRequest r;
      prompt.fillRequest(r);
      QCOMPARE(QString::fromStdString(r.options.at("toy-gain")), QString("0.25"));
      r.options["toy-gain"] = "1.5";  // a dropped PNG's
      prompt.setFromRequest(r);
      QCOMPARE(gain->value(), 1.5);
      QTemporaryDir dir;
      QSettings s(dir.filePath("o.ini"), QSettings::IniFormat);
      prompt.saveSettings(s);
      gui::PromptPanel again;
      again.restoreSettings(s);
      again.setTraits(toy_traits());
      QCOMPARE(again.findChild<QDoubleSpinBox*>("option_toy-gain")->value(), 1.5);
    }
    {  // steps the settings restored stay with the first model; a switch of family brings its own
      QTemporaryDir dir;
      QSettings s(dir.filePath("s.ini"), QSettings::IniFormat);
      s.setValue("prompt/steps", 13);
      gui::PromptPanel restored;
      restored.restoreSettings(s);
      restored.setTraits(toy_traits());
      QCOMPARE(restored.findChild<QSpinBox*>("stepsSpin")->value(), 13);
      FamilyTraits other = toy_traits();
      other.id = "toy-2";
      other.default_steps = 4;
      restored.setTraits(other);
      QCOMPARE(restored.findChild<QSpinBox*>("stepsSpin")->value(), 4);
    }
    Engine engine(options());
    gui::ModelPanel model;
    model.setModelInfo(engine.info());
    QVERIFY(model.findChild<QLineEdit*>("component_decoder") != nullptr);
    gui::ChartsPanel charts;
    charts.setTraits(toy_traits());
    charts.beginRun(1, StorageSpec{WeightType::FP32});
    charts.addPhase(1, {Phase::Decode, 5});
    QVERIFY2(charts.phaseLabels(1).contains("toy decode"), qPrintable(charts.phaseLabels(1).join(", ")));
  }

  // A declared Files setting (FLUX.2's reference images) is an image strip in the Prompt panel's
  // options: files set from a request show, the request carries them joined by ';', a file
  // dropped on the strip is added while there is room (a non-PNG is not), and its remove button
  // drops it. The CLI takes the flag repeated, and refuses more files than declared.
  void filesOptionMakesAnImageStrip() {
    FamilyOption refs;
    refs.name = "toy-refs";
    refs.label = "References";
    refs.type = FamilyOption::Type::Files;
    refs.max = 2;
    refs.prompt_panel = true;
    QTemporaryDir dir;
    const QString a = dir.filePath("a.png"), b = dir.filePath("b.png"), c = dir.filePath("c.png"), text = dir.filePath("d.txt");
    for (const QString& p : {a, b, c}) QVERIFY(QImage(70, 64, QImage::Format_RGB888).save(p));
    test::write_bytes(text.toStdString(), "not an image");
    gui::FamilyOptionsBox box;
    box.setOptions({refs}, {{"toy-refs", a.toStdString()}});
    auto* strip = box.findChild<gui::ImageStrip*>("option_toy-refs");
    QVERIFY(strip != nullptr);
    QCOMPARE(strip->files(), QStringList{a});
    QSignalSpy changed(&box, &gui::FamilyOptionsBox::changed);
    auto drop = [&](const QStringList& paths) {
      QMimeData mime;
      QList<QUrl> urls;
      for (const auto& p : paths) urls << QUrl::fromLocalFile(p);
      mime.setUrls(urls);
      return strip->dropFiles(&mime);
    };
    QVERIFY(!drop({text}));
    QVERIFY(drop({text, b, c}));  // the text file is no image; c finds no room
    QCOMPARE(strip->files(), (QStringList{a, b}));
    QCOMPARE(changed.count(), 1);
    QCOMPARE(QString::fromStdString(box.values().at("toy-refs")), a + ";" + b);
    QVERIFY(!strip->findChild<QPushButton*>("imageStripAdd")->isEnabled());  // full
    strip->findChild<QToolButton*>("imageStripRemove0")->click();
    QCOMPARE(strip->files(), QStringList{b});
    QCOMPARE(QString::fromStdString(box.values().at("toy-refs")), b);
    CLI::App app;
    std::map<std::string, std::string> values;
    FamilyEntry files;  // registered last: its flag joins every other family's
    files.id = "toy-files";
    files.label = "toy files";
    files.detect = [](const SafetensorsFile&) { return false; };
    files.options = {refs};
    register_family(std::move(files));
    cli::add_family_options(app, values, false);
    app.parse("--toy-refs " + a.toStdString() + " --toy-refs " + b.toStdString(), false);
    QCOMPARE(QString::fromStdString(values.at("toy-refs")), a + ";" + b);
    QVERIFY_THROWS_EXCEPTION(CLI::ValidationError, app.parse("--toy-refs A --toy-refs B --toy-refs C", false));
  }
};

QTEST_MAIN(TestFamilyInterface)
#include "test_family_interface.moc"

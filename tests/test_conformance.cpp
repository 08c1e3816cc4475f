// The family conformance suite (issue 56): every registered family goes through the same tests on
// tiny files that make-synthetic writes, with tokenizers written here (a byte-level BPE and a
// Unigram of a few pieces) and the demo model's CLIP vocabulary, so nothing is read from
// ../shared and nothing skips in a bare checkout. A family registered without a tiny set fails
// `everyFamilyHasATinySet`. Reference-case tests stay where they are (test_reference_*).
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLineEdit>
#include <QTemporaryDir>
#include <QtTest>

#include <atomic>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "io/png.h"
#include "pipeline/family.h"
#include "pipeline/family_options.h"
#include "pipeline/infotext.h"
#include "panels/ModelPanel.h"
#include "panels/PromptPanel.h"
#include "support.h"
#include "text/clip_tokenizer.h"

using namespace fp8s;

namespace {

// A byte-level BPE tokenizer.json as Qwen's: the 256 byte symbols, one merge, and the added tokens
// at Qwen3's ids (under the tiny Qwen3's 151,936 rows).
void write_qwen_tokenizer(const QString& dir) {
  QDir().mkpath(dir);
  QJsonObject vocab;
  for (const auto& [byte, symbol] : clip_byte_symbols()) vocab[QString::fromStdString(symbol)] = byte;
  vocab[QString::fromUtf8("Ġt")] = 256;
  QJsonArray added;
  int id = 151643;
  for (const char* t : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) added.append(QJsonObject{{"id", id++}, {"content", t}});
  const QJsonObject model{{"type", "BPE"}, {"vocab", vocab}, {"merges", QJsonArray{QString::fromUtf8("Ġ t")}}};
  test::write_bytes((dir + "/tokenizer.json").toStdString(),
                    QJsonDocument(QJsonObject{{"model", model}, {"added_tokens", added}}).toJson().toStdString());
}

// A T5 Unigram tokenizer.json: <pad>, </s>, <unk>, ▁ and the lower-case letters, and a precompiled
// character map that maps nothing (a one-unit trie).
void write_t5_tokenizer(const QString& dir) {
  QDir().mkpath(dir);
  QJsonArray vocab{QJsonArray{"<pad>", 0.0}, QJsonArray{"</s>", 0.0}, QJsonArray{"<unk>", 0.0}, QJsonArray{QString::fromUtf8("▁"), -2.0}};
  for (char c = 'a'; c <= 'z'; ++c) vocab.append(QJsonArray{QString(QChar(c)), -3.0});
  const QByteArray charsmap("\x04\x00\x00\x00\x00\x00\x00\x00", 8);
  const QJsonObject normalizer{{"type", "Sequence"},
                               {"normalizers", QJsonArray{QJsonObject{{"type", "Precompiled"}, {"precompiled_charsmap", QString(charsmap.toBase64())}}}}};
  const QJsonObject model{{"type", "Unigram"}, {"unk_id", 2}, {"vocab", vocab}};
  test::write_bytes((dir + "/tokenizer.json").toStdString(),
                    QJsonDocument(QJsonObject{{"normalizer", normalizer}, {"model", model}}).toJson().toStdString());
}

// A family's tiny model: its files by make-synthetic's arch, the component roles they fill, the
// tokenizers written beside them.
struct TinyFile {
  QString arch, role;  // role "" = the model file
  QStringList extra = {};  // make-synthetic's other flags
};
struct TinySet {
  std::vector<TinyFile> files;
  std::map<std::string, std::function<void(const QString&)>> tokenizers;  // role -> writer of its folder
  bool clip_vocab = false;  // the demo model's CLIP vocabulary (LoadOptions::vocab)
};

// One per registered family (by id). A new family adds its row here.
const std::map<std::string, TinySet>& tiny_sets() {
  static const std::map<std::string, TinySet> sets{
      {"sd", {{{"tiny-sd1", ""}}, {}, true}},
      {"flux", {{{"tiny-flux-dev", ""}, {"tiny-t5xxl", "t5xxl"}, {"tiny-clip-l", "clip_l"}, {"tiny-flux-ae", "vae"}},
                {{"t5_tokenizer", write_t5_tokenizer}}, true}},
      {"zimage", {{{"tiny-zimage-turbo", ""}, {"tiny-qwen3", "text_encoder"}, {"tiny-flux-ae", "vae"}}, {{"qwen_tokenizer", write_qwen_tokenizer}}}},
      {"flux2", {{{"tiny-flux2-klein", ""}, {"tiny-qwen3", "text_encoder", {"--depth", "28"}}, {"tiny-flux2-ae", "vae"}},
                 {{"qwen_tokenizer", write_qwen_tokenizer}}}},
      {"qwenimage", {{{"tiny-qwen-image", ""}, {"tiny-qwen25vl", "text_encoder"}, {"tiny-qwen-image-vae", "vae"}},
                     {{"qwen_tokenizer", write_qwen_tokenizer}}}},
  };
  return sets;
}

double mean_abs_difference(const RgbImage& a, const RgbImage& b) {
  if (a.pixels.size() != b.pixels.size()) return 1e9;
  double s = 0;
  for (std::size_t i = 0; i < a.pixels.size(); ++i) s += std::abs(int(a.pixels[i]) - int(b.pixels[i]));
  return s / double(a.pixels.size());
}

double spread(const RgbImage& a) {
  double mean = 0, var = 0;
  for (auto p : a.pixels) mean += p;
  mean /= double(a.pixels.size());
  for (auto p : a.pixels) var += (p - mean) * (p - mean);
  return std::sqrt(var / double(a.pixels.size()));
}

// A value of `o` other than its default, inside its range (the round trip's).
std::string other_value(const FamilyOption& o, const QString& png) {
  using T = FamilyOption::Type;
  switch (o.type) {
    case T::Flag: return o.default_value == "1" ? "0" : "1";
    case T::Choice:
      for (const auto& c : o.choices) {
        if (c != o.default_value) return c;
      }
      return o.default_value;
    case T::Text: return "conformance";
    case T::Files: return png.toStdString();
    case T::Integer: case T::Number: default: {  // a quarter of the way to the farther end (a twentieth for an integer)
      const double d = std::stod(o.default_value.empty() ? "0" : o.default_value);
      const double end = o.max - d >= d - o.min ? o.max : o.min;
      if (o.type == T::Integer) return std::to_string(static_cast<int64_t>(d + (end > d ? 1 : -1) * std::max(1.0, std::abs(end - d) * 0.05)));
      return QString::number(d + (end - d) * 0.25, 'g', 6).toStdString();
    }
  }
}

}  // namespace

class TestConformance : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;
  std::map<std::string, LoadOptions> m_load;  // by family id
  std::map<std::string, std::string> m_lora;  // the LoRA file of each family's model
  QString m_png;  // a 64x64 picture (init images, reference images)

  static void families_data() {
    QTest::addColumn<QString>("family");
    for (const auto& f : registered_families()) QTest::newRow(f.id.c_str()) << QString::fromStdString(f.id);
  }

  // The tiny set of `id`, written on first use: its LoadOptions.
  const LoadOptions& load(const QString& id) {
    const auto key = id.toStdString();
    if (const auto it = m_load.find(key); it != m_load.end()) return it->second;
    const auto& set = tiny_sets().at(key);
    const QString dir = m_dir.filePath(id);
    QDir().mkpath(dir + "/loras");
    LoadOptions o;
    o.storage = StorageSpec{WeightType::BF16};
    for (const auto& f : set.files) {
      const QString out = dir + "/" + f.arch + ".safetensors";
      if (!QFileInfo::exists(out)) {
        const auto r = test::run_cli(QStringList{"make-synthetic", "--arch", f.arch, "--seed", "5", "--out", out} + f.extra);
        if (r.exit_code != 0) qFatal("make-synthetic --arch %s failed: %s", qPrintable(f.arch), qPrintable(r.err));
      }
      (f.role.isEmpty() ? o.checkpoint : o.components[f.role.toStdString()]) = out.toStdString();
    }
    for (const auto& [role, write] : set.tokenizers) {
      write(dir + "/" + QString::fromStdString(role));
      o.components[role] = (dir + "/" + QString::fromStdString(role)).toStdString();
    }
    if (set.clip_vocab) o.vocab = FP8S_SOURCE_DIR "/resources/demo/tokenizer";
    o.lora_dir = (dir + "/loras").toStdString();
    const QString lora = dir + "/loras/tiny.safetensors";
    const auto r = test::run_cli({"make-synthetic-lora", "--model", QString::fromStdString(o.checkpoint), "--strength", "0.5", "--out", lora});
    if (r.exit_code == 0) m_lora[key] = lora.toStdString();
    else qWarning("make-synthetic-lora: %s", qPrintable(r.err));
    return m_load[key] = o;
  }

  static GenerationRequest request(const FamilyTraits& t) {
    GenerationRequest r;
    r.prompt = "a red circle";
    r.steps = 2;
    r.seed = 7;
    r.width = r.height = std::max(64, t.size_multiple);
    r.sampler = t.samplers.front();
    r.schedule = t.schedules.front().schedule;
    r.cfg = t.default_cfg;
    r.compute = ComputeType::FP32;
    return r;
  }

  static RgbImage run(Engine& engine, const GenerationRequest& r, std::string* parameters = nullptr) {
    std::atomic<bool> cancel{false};
    auto result = engine.generate(r, nullptr, cancel);
    if (parameters) *parameters = result.images.at(0).parameters;
    return result.images.at(0).image;
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(m_dir.isValid());
    RgbImage img{64, 64, std::vector<uint8_t>(64 * 64 * 3)};
    for (int y = 0; y < 64; ++y)
      for (int x = 0; x < 64; ++x)
        for (int c = 0; c < 3; ++c) img.pixels[(y * 64 + x) * 3 + c] = uint8_t((x * 4 * (c + 1) + y * 3) % 256);
    m_png = m_dir.filePath("picture.png");
    write_png(m_png.toStdString(), img, "");
  }

  // Every registered family has a tiny set here, and its files load as that family
  void everyFamilyHasATinySet_data() { families_data(); }
  void everyFamilyHasATinySet() {
    QFETCH(QString, family);
    QVERIFY2(tiny_sets().count(family.toStdString()), qPrintable(family + " has no tiny set in test_conformance"));
    Engine engine(load(family));
    QCOMPARE(QString::fromStdString(find_family(SafetensorsFile(load(family).checkpoint))->id), family);
    QVERIFY(engine.info().unet_bytes > 0);
  }

  // txt2img: the request's size, a picture (not one colour), the same seed gives the same pixels,
  // another seed others
  void txt2img_data() { families_data(); }
  void txt2img() {
    QFETCH(QString, family);
    Engine engine(load(family));
    const auto r = request(engine.info().traits);
    const auto a = run(engine, r);
    QCOMPARE(a.width, r.width);
    QCOMPARE(a.height, r.height);
    QVERIFY2(spread(a) > 1, "a one-colour picture");
    QCOMPARE(mean_abs_difference(run(engine, r), a), 0.0);
    auto other = r;
    other.seed = 8;
    QVERIFY(mean_abs_difference(run(engine, other), a) > 0.5);
  }

  // img2img moves the init picture and strength 0 keeps it; an inpainting request keeps what the
  // mask does not cover closer than what it does; hires returns the scaled size
  void img2imgInpaintHires_data() { families_data(); }
  void img2imgInpaintHires() {
    QFETCH(QString, family);
    Engine engine(load(family));
    const auto base = request(engine.info().traits);
    const RgbImage init = read_png(m_png.toStdString()).image;
    auto i2i = base;
    i2i.init_image = init;
    i2i.denoising_strength = 0.6f;
    const auto moved = run(engine, i2i);
    QCOMPARE(moved.width, base.width);
    QVERIFY(mean_abs_difference(moved, init) > 0.5);
    // inpainting: the left half repainted
    auto inpaint = i2i;
    RgbImage mask{64, 64, std::vector<uint8_t>(64 * 64 * 3, 0)};
    for (int y = 0; y < 64; ++y)
      for (int x = 0; x < 32; ++x)
        for (int c = 0; c < 3; ++c) mask.pixels[(y * 64 + x) * 3 + c] = 255;
    inpaint.mask = mask;
    inpaint.mask_blur = 0;
    const auto painted = run(engine, inpaint);
    double kept = 0, changed = 0;
    for (int y = 0; y < 64; ++y)
      for (int x = 0; x < 64; ++x)
        for (int c = 0; c < 3; ++c) {
          const auto k = std::size_t((y * 64 + x) * 3 + c);
          (x < 32 ? changed : kept) += std::abs(int(painted.pixels[k]) - int(init.pixels[k]));
        }
    QVERIFY2(kept < changed, qPrintable(QString("unmasked half moved %1, masked half %2").arg(kept).arg(changed)));
    auto hires = base;
    hires.enable_hr = true;
    hires.hr_scale = 1.5f;
    hires.hr_steps = 1;
    const auto big = run(engine, hires);
    QCOMPARE(big.width, hires.hr_target_width(base.width));
    QCOMPARE(big.height, hires.hr_target_height(base.height));
    QVERIFY(big.width > base.width);
  }

  // A <lora:> tag changes the picture; at weight 0 it is the picture without it
  void loraTag_data() { families_data(); }
  void loraTag() {
    QFETCH(QString, family);
    Engine engine(load(family));
    QVERIFY2(m_lora.count(family.toStdString()), "make-synthetic-lora made no LoRA for this family's model");
    auto r = request(engine.info().traits);
    const auto plain = run(engine, r);
    r.prompt = "a red circle <lora:tiny:1>";
    QVERIFY(mean_abs_difference(run(engine, r), plain) > 0.2);
    r.prompt = "a red circle <lora:tiny:0>";
    QCOMPARE(mean_abs_difference(run(engine, r), plain), 0.0);
  }

  // Every block streamed (budget 0) gives the resident picture bit for bit; inspect
  // --weight-budget 0 prints the plan that streams them
  void streamedEqualsResident_data() { families_data(); }
  void streamedEqualsResident() {
    QFETCH(QString, family);
    const auto& o = load(family);
    Engine engine(o);
    auto r = request(engine.info().traits);
    const auto resident = run(engine, r);
    r.weight_budget = 0;
    QCOMPARE(mean_abs_difference(run(engine, r), resident), 0.0);
    QStringList args{"inspect", "--model", QString::fromStdString(o.checkpoint), "--weight-budget", "0"};
    for (const auto& role : engine.info().traits.components) {
      if (const auto it = o.components.find(role.role); it != o.components.end()) args << QString::fromStdString("--" + role.flag) << QString::fromStdString(it->second);
    }
    const auto cli = test::run_cli(args);
    QVERIFY2(cli.exit_code == 0, qPrintable(cli.err));
    QVERIFY2(cli.out.contains("stream"), qPrintable(cli.out));
  }

  // Every declared setting (not a load's) set away from its default is written into the infotext
  // and read back from it; the Prompt panel has its control, and the Model panel a field per role
  void settingsRoundTrip_data() { families_data(); }
  void settingsRoundTrip() {
    QFETCH(QString, family);
    Engine engine(load(family));
    const auto& traits = engine.info().traits;
    auto r = request(traits);
    for (const auto& o : traits.options) {
      if (!o.at_load) r.options[o.name] = other_value(o, m_png);
    }
    std::string parameters;
    run(engine, r, &parameters);
    const auto back = parse_infotext(parameters);
    QCOMPARE(back.seed, r.seed);
    QCOMPARE(back.steps, r.steps);
    QCOMPARE(back.sampler, r.sampler);
    for (const auto& o : traits.options) {
      if (o.at_load || o.infotext_key.empty()) continue;
      const auto it = back.options.find(o.name);
      QVERIFY2(it != back.options.end(), qPrintable(QString::fromStdString(o.name + " is not read back from: " + parameters)));
      if (o.type == FamilyOption::Type::Files) {
        QCOMPARE(QFileInfo(QString::fromStdString(it->second)).fileName(), QFileInfo(m_png).fileName());
      } else if (o.type == FamilyOption::Type::Text || o.type == FamilyOption::Type::Choice) {
        QCOMPARE(it->second, r.options[o.name]);
      } else {
        QCOMPARE(option_number(traits.options, back.options, o.name), option_number(traits.options, r.options, o.name));
      }
    }
    gui::PromptPanel prompt;
    prompt.setTraits(traits);
    for (const auto& o : traits.options) {
      if (o.prompt_panel) QVERIFY2(prompt.findChild<QWidget*>(QString::fromStdString("option_" + o.name)), o.name.c_str());
    }
    gui::ModelPanel model;
    model.setModelInfo(engine.info());
    for (const auto& role : traits.components) {  // tokenizers are found beside the files, or named on the CLI
      if (!role.tokenizer) QVERIFY2(model.findChild<QLineEdit*>(QString::fromStdString("component_" + role.role)), role.role.c_str());
    }
  }
};

QTEST_MAIN(TestConformance)
#include "test_conformance.moc"
